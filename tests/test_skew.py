"""Collective matching, clock refinement, cross-rank skew and the straggler, on traces whose
true timing is known by construction."""

import time

import numpy as np
import pytest
from msgspec.structs import replace
from result_views import summary_json

from distprof import align, pipeline
from distprof import config as config_mod
from distprof import events as ev
from distprof.analyses import skew
from distprof.reports.findings import text as words  # a reason code in words, as reports give it
from distprof.results import CollectiveMarkers

CONFIG = config_mod.load()
MS = 1_000_000
STEP_NS = 100 * MS
SHIFTS = (0, 37 * MS, -12 * MS, 50 * MS)  # each rank's clock minus the true time


def _match(collectives: list[dict], *args, **kwargs):
    """align.match_collectives of per-rank columns given as dicts (the markers' field names)."""
    return align.match_collectives([CollectiveMarkers(**c) for c in collectives], *args, **kwargs)


def job(ranks: int = 4, steps: int = 6, straggler: tuple[int, int] | None = None, shifts=(0, 0, 0, 0),
        jitter_ns: int = 200_000, offsets=None, collectives: int = 3, seed: int = 1,
        more_delays: dict[int, int] | None = None) -> list[dict]:
    """A data-parallel job on the true clock, recorded on each rank's own (shifted) clock.

    Step s runs [s*100 ms, (s+1)*100 ms). Each rank: forward from 5 ms (30 ms, plus the delay
    on the straggler), then ``collectives`` allreduces on a comm thread; the k-th arrives at
    40 ms + 25 ms*k (+ a jitter of up to ``jitter_ns``; the straggler's first one also + its
    delay) and all of them end together, 2 ms after the last arrival (everyone waits for the
    last). So the straggler is late once per step, by its delay.
    """
    rng = np.random.default_rng(seed)
    delay = np.zeros(ranks, np.int64)
    if straggler:
        delay[straggler[0]] = straggler[1]
    for rank, extra in (more_delays or {}).items():
        delay[rank] = extra
    rows = {r: [] for r in range(ranks)}
    for s in range(steps):
        base = s * STEP_NS
        arrivals = base + 40 * MS + 25 * MS * np.arange(collectives)[None, :] \
            + rng.integers(0, jitter_ns + 1, size=(ranks, collectives))
        arrivals[:, 0] += delay
        ends = arrivals.max(axis=0) + 2 * MS
        for r in range(ranks):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, base + STEP_NS, 1, s),
                        (ev.RANGE, ev.PHASE, "Dataloader", base, base + 5 * MS, 1, s),
                        (ev.RANGE, ev.PHASE, "forward", base + 5 * MS, base + 35 * MS + delay[r], 1, s),
                        (ev.RANGE, ev.PHASE, "backward", base + 35 * MS + delay[r], base + 90 * MS, 1, s)]
            rows[r] += [(ev.COMM_OP, ev.COMMUNICATION, "allreduce", arrivals[r, k], ends[k], 2, s)
                        for k in range(collectives)]
    results = []
    for r in range(ranks):
        kind, category, name, start, end, lane, step = (np.array(c, dtype=object) for c in zip(*rows[r]))
        shift = shifts[r % len(shifts)]
        events = ev.make_events(kind=kind, category=category, name=name, rank=r, step=step.astype(np.int64),
                                start_ns=start.astype(np.int64) + shift, end_ns=end.astype(np.int64) + shift,
                                lane=lane.astype(np.int64))
        offset = 0 if offsets is None else offsets[r]
        results.append(pipeline.reduce_rank(ev.RankTrace(events=events, rank=r, clock_offset_ns=offset), CONFIG))
    return results


def summarize(results, config=CONFIG) -> dict:
    return summary_json(pipeline.combine(results, config, source="test", world_size=len(results)))


def comparable(summary: dict) -> dict:
    """The skew figures that must not depend on the clocks (absolute times and offsets removed)."""
    skew_part = {k: v for k, v in summary["skew"].items() if k not in ("alignment",)}
    skew_part["collectives"] = [{k: v for k, v in c.items() if k != "start_ns"} for c in skew_part["collectives"]]
    ranks = [{k: v for k, v in r.items() if k not in ("clock_offset_ns",)} for r in summary["ranks"]]
    return {"skew": skew_part, "ranks": ranks, "findings": summary["findings"], "checks": summary["checks"]}


# -- matching ------------------------------------------------------------------------------

def test_kth_collective_of_each_kind_in_each_step_matches():
    collectives = [
        {"name": ["allreduce", "broadcast", "allreduce"], "start_ns": [10, 20, 30], "end_ns": [15, 25, 35],
         "step": [0, 0, 0]},
        {"name": ["broadcast", "allreduce", "allreduce"], "start_ns": [21, 11, 31], "end_ns": [26, 16, 36],
         "step": [0, 0, 0]},
    ]
    m = _match(collectives, [0, 1])
    assert m.size == 3 and not m.warnings
    got = sorted(zip(m.name.tolist(), m.ordinal.tolist(), m.start_ns[0].tolist(), m.start_ns[1].tolist()))
    assert got == [("allreduce", 0, 10, 11), ("allreduce", 1, 30, 31), ("broadcast", 0, 20, 21)]
    assert m.present.all()


def test_count_mismatch_is_a_warning_naming_the_ranks_not_a_guess():
    full = {"name": ["allreduce"] * 4, "start_ns": [0, 10, 100, 110], "end_ns": [5, 15, 105, 115],
            "step": [0, 0, 1, 1]}
    short = {"name": ["allreduce"] * 3, "start_ns": [0, 10, 100], "end_ns": [5, 15, 105], "step": [0, 0, 1]}
    m = _match([full, full, short], [0, 1, 2])
    # step 1 differs (2, 2, 1): none of it is matched; step 0 is
    assert m.size == 2 and m.step.tolist() == [0, 0]
    [warning] = [words(w) for w in m.warnings]
    assert "allreduce" in warning and "step 1" in warning and "rank 2: 1" in warning and "2 on most ranks" in warning


def test_send_recv_without_peer_and_other_comm_are_not_matched():
    c = {"name": ["send", "allreduce", "other"], "start_ns": [0, 10, 20], "end_ns": [5, 15, 25], "step": [0, 0, 0]}
    m = _match([c, c], [0, 1])
    assert m.name.tolist() == ["allreduce"] and m.excluded == ["other", "send"]


def test_send_pairs_with_the_receive_of_its_peer_in_order():
    sender = {"name": ["send", "send", "recv"], "start_ns": [0, 10, 20], "end_ns": [5, 15, 25],
              "step": [0, 0, 0], "peer": [1, 1, 2]}
    receiver = {"name": ["recv", "recv"], "start_ns": [3, 12], "end_ns": [5, 15], "step": [0, 0], "peer": [0, 0]}
    third = {"name": ["send"], "start_ns": [19], "end_ns": [25], "step": [0], "peer": [0]}
    m = _match([sender, receiver, third], [0, 1, 2])
    assert m.name.tolist() == ["p2p"] * 3
    pairs = sorted((m.group_ranks[j], int(m.ordinal[j])) for j in range(m.size))
    assert pairs == [((0, 1), 0), ((0, 1), 1), ((0, 2), 0)]
    j = next(j for j in range(m.size) if m.group_ranks[j] == (0, 1) and m.ordinal[j] == 1)
    assert m.start_ns[:, j].tolist() == [10, 12, 0] and m.present[:, j].tolist() == [True, True, False]


def test_collectives_match_within_their_process_group_never_across():
    """TP {0,1},{2,3} + DP {0,2},{1,3}: rank 0's second allreduce of group 'tp0' is rank 1's
    second of 'tp0', not rank 2's second allreduce (which is in 'tp1')."""
    groups = {"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2], "dp1": [1, 3]}
    tp = {0: "tp0", 1: "tp0", 2: "tp1", 3: "tp1"}
    dp = {0: "dp0", 1: "dp1", 2: "dp0", 3: "dp1"}
    by_rank = [{"name": ["allreduce"] * 3, "start_ns": [100 * rank, 100 * rank + 10, 100 * rank + 20],
                "end_ns": [100 * rank + 5, 100 * rank + 15, 100 * rank + 25], "step": [0, 0, 0],
                "group": [tp[rank], tp[rank], dp[rank]]} for rank in range(4)]
    m = _match(by_rank, [0, 1, 2, 3], groups)
    assert m.size == 6 and not m.warnings
    for j in range(m.size):
        members = tuple(groups[m.group[j]])
        assert m.group_ranks[j] == members
        assert np.flatnonzero(m.present[:, j]).tolist() == list(members)
    kinds = {(k["name"], k["group"]): (k["ranks"], k["matched"]) for k in m.kinds}
    assert kinds == {("allreduce", g): (2, 2 if g.startswith("tp") else 1) for g in groups}


def test_a_named_group_member_without_the_op_leaves_it_unmatched():
    ops = {"name": ["allreduce"], "start_ns": [0], "end_ns": [5], "step": [0], "group": ["g"]}
    m = _match([ops, ops, {"name": [], "start_ns": [], "end_ns": [], "step": []}], [0, 1, 2],
                                {"g": [0, 1, 2]})
    assert m.size == 0 and "in group 'g'" in words(m.warnings[0]) and "rank 2: 0" in words(m.warnings[0])


# -- clock refinement ----------------------------------------------------------------------

def test_refine_recovers_unknown_offsets_from_collective_ends():
    true_ends = np.arange(12) * 1000 + 10_000
    shifts = np.array([0, 5_000, -7_000])
    own_ends = true_ends[None, :] + shifts[:, None]
    out = align.refine_offsets(own_ends, np.ones(own_ends.shape, bool), [0, 0, 0], [0, 0, 0])
    assert [o["offset_ns"] for o in out] == [0, -5_000, 7_000]
    assert [o["uncertainty_ns"] for o in out] == [0, 0, 0]
    assert [o["method"] for o in out] == ["reference", "collective ends", "collective ends"]


def ends_with_diffs(diffs) -> np.ndarray:
    """Ends of two ranks such that reference end − rank end = diffs."""
    diffs = np.asarray(diffs, np.int64)
    return np.stack([np.zeros(diffs.size, np.int64), -diffs])


def test_refine_spread_is_the_mad_and_few_samples_keep_the_source():
    ends = ends_with_diffs([0, 10, 10, 10, 10, 10, 10, 10, 10, 12, 1000])  # one outlier each side
    [_, out] = align.refine_offsets(ends, np.ones(ends.shape, bool), [0, 0], [0, 0])
    assert out["correction_ns"] == 10 and out["spread_ns"] == 0 and out["uncertainty_ns"] == 0
    assert out["offset_ns"] == 10 and out["samples"] == 11
    [_, few] = align.refine_offsets(ends[:, :2], np.ones((2, 2), bool), [0, 123], [0, 9])
    assert few["offset_ns"] == 123 and few["uncertainty_ns"] == 9 and "too few" in few["method"]
    [_, small] = align.refine_offsets(ends_with_diffs([4, 10, 14]), np.ones((2, 3), bool), [0, 0], [0, 0])
    assert small["correction_ns"] == 10 and small["spread_ns"] == 5  # below 10 samples: half the range
    assert small["uncertainty_ns"] == 5


def test_refine_narrows_a_known_bound_and_keeps_it_when_ends_disagree():
    ends = np.stack([np.zeros(12, np.int64), np.full(12, -300)])  # ends say: offset 300 ns
    [_, narrowed] = align.refine_offsets(ends, np.ones(ends.shape, bool), [0, 100], [0, 500])
    # source: 100 ± 500; ends: 300 ± 0, inside that bound -> 300 exactly
    assert narrowed["offset_ns"] == 300 and narrowed["uncertainty_ns"] == 0
    assert narrowed["correction_ns"] == 200
    [_, kept] = align.refine_offsets(ends, np.ones(ends.shape, bool), [0, 100], [0, 50])
    assert kept["offset_ns"] == 100 and kept["uncertainty_ns"] == 50 and "disagree" in kept["method"]


# -- skew and straggler --------------------------------------------------------------------

def pointed(summary: dict) -> dict | None:
    """The rank the waits point at: the straggler, or the one the replay prices under the floor."""
    return summary["skew"]["straggler"] or summary["skew"].get("unconfirmed_straggler")


def test_straggler_by_construction():
    summary = summarize(job(straggler=(2, 20 * MS)))
    straggler = pointed(summary)
    assert straggler["rank"] == 2 and straggler["late_steps"] == 6 and straggler["steps"] == 6
    # last at the first allreduce of every step (and, by jitter above late_min_ns, at a few others)
    assert straggler["late_in"] >= 6 and straggler["of"] == 18
    # what the others wait for it alone per step: 20 ms minus the second-latest's jitter (< 0.2 ms), plus
    # the few jitter-last ones (< 0.2 ms each)
    assert 19.7 * MS < straggler["waits_caused_ns"] <= 20.4 * MS
    # its cost is what removing its lateness saves the step, by the replay (one cost model): here the
    # steps are fixed 100 ms windows whose last allreduce (90 ms) is not delayed, so it saves nothing,
    # under the 5% of the step a straggler costs: the waits point at it, it is not named
    assert summary["skew"]["straggler"] is None
    assert (straggler["saving_ns"], straggler["floor"]) == (0, 0.05)
    assert not [f for f in summary["findings"] if f["finding"] == "straggler"]
    assert straggler["pattern"] == "persistent" and straggler["side"] == "host"
    rows = {c["index"]: c for c in summary["skew"]["collectives"]}
    first = rows[0]
    assert first["last_rank"] == 2 and first["step"] == 0 and first["ordinal"] == 0
    assert 19.8 * MS <= first["arrival_skew_ns"] <= 20.2 * MS
    assert first["end_skew_ns"] == 0
    assert first["wait_ns_by_rank"]["2"] == 0 and first["wait_ns_by_rank"]["0"] >= 19.8 * MS
    # the sync/transfer split agrees with the aligned waits when ends coincide
    assert first["transfer_ns"] == 2 * MS and first["split_agrees"]
    assert first["max_sync_ns"] == first["arrival_skew_ns"]
    assert straggler["phase"] == "forward"


def test_identical_work_names_no_straggler():
    summary = summarize(job())
    assert summary["skew"]["straggler"] is None
    assert all(f["finding"] != "straggler" for f in summary["findings"])


def test_two_ranks_late_alike_are_no_single_straggler():
    """Starts 0, 0, 29.5, 30 ms: the others wait for rank 1 alone only 0.5 ms (below 5% of the
    step); with 0, 0, 24, 30 they wait 6 ms for it alone: it is named, at that cost, not 18 ms."""
    summary = summarize(job(straggler=(1, 30 * MS), more_delays={3: 29_500_000}, collectives=1, jitter_ns=0))
    assert summary["skew"]["straggler"] is None
    summary = summarize(job(straggler=(1, 30 * MS), more_delays={3: 24 * MS}, collectives=1, jitter_ns=0))
    assert pointed(summary)["rank"] == 1
    assert pointed(summary)["waits_caused_ns"] == 6 * MS


@pytest.mark.parametrize("straggler", [None, (1, 20 * MS)])
def test_clock_shifts_do_not_change_skew(straggler):
    """Each rank's clock off by a different constant (up to 50 ms), the offsets unknown (0) or
    wrong: the same skew, straggler and summary figures as on one clock."""
    reference = summarize(job(straggler=straggler))
    shifted = summarize(job(straggler=straggler, shifts=SHIFTS))
    assert comparable(shifted) == comparable(reference)
    wrong = summarize(job(straggler=straggler, shifts=SHIFTS, offsets=[0, 3 * MS, 7 * MS, -9 * MS]))
    assert comparable(wrong) == comparable(reference)
    offsets = [r["clock_offset_ns"] for r in shifted["ranks"]]
    assert offsets == [-s for s in SHIFTS]  # ends coincide exactly: the shifts are recovered
    assert shifted["skew"]["max_clock_uncertainty_ns"] == 0
    assert {a["method"] for a in shifted["skew"]["alignment"][1:]} == {"collective ends"}


def test_no_align_keeps_the_source_offsets_and_names_no_unverified_straggler():
    no_align = config_mod.load(None, {"clock": {"align": False}})
    summary = summarize(job(shifts=SHIFTS, straggler=(3, 20 * MS)), no_align)
    assert [r["clock_offset_ns"] for r in summary["ranks"]] == [0, 0, 0, 0]
    assert summary["skew"]["aligned"] is False
    # rank 3 is late, but its clock is 50 ms ahead and nothing vouches for its offset: the waits
    # it seems to cause are what the others' ops lasted, and its name waits for a verified clock
    assert summary["skew"]["straggler"] is None
    [note] = [n for n in summary["skew"]["notes"] if "unverified" in n]
    assert note.startswith("rank 3 costs the others")
    # a source that states a bound (ping-pong) is trusted as it is
    results = job(straggler=(1, 20 * MS))
    results = [replace(r, clock=replace(r.clock, uncertainty_ns=0 if r.rank == 0 else 10_000)) for r in results]
    assert pointed(summarize(results, no_align))["rank"] == 1


def test_step_skew_spread_and_imbalance():
    results = job(straggler=(2, 20 * MS), shifts=SHIFTS)
    # rank 3's steps end 10 ms later than the others' (on the true clock)
    bounds = results[3].markers.step_bounds
    later = replace(bounds, end_ns=[e + 10 * MS for e in bounds.end_ns])
    results[3] = replace(results[3], markers=replace(results[3].markers, step_bounds=later))
    summary = summarize(results)
    steps = summary["skew"]["steps"]
    assert [s["step"] for s in steps] == list(range(6))
    assert all(s["start_spread_ns"] == 0 and s["end_spread_ns"] == 10 * MS for s in steps)
    assert all(s["slowest_rank"] == 3 and s["imbalance"] == pytest.approx(1.1) for s in steps)
    forward = next(p for p in steps[0]["phases"] if p["name"] == "forward")
    assert forward["busy_max_rank"] == 2 and forward["busy_max_ns"] == 50 * MS
    assert forward["busy_median_ns"] == 30 * MS
    phases = {p["name"]: p for p in summary["skew"]["phases"]}
    assert phases["forward"]["busy_total_max_rank"] == 2 and phases["forward"]["steps"] == 6


def test_rows_are_capped_and_aggregates_cover_all():
    capped = config_mod.load(None, {"skew": {"max_rows": 4}})
    summary = summarize(job(straggler=(2, 20 * MS), steps=6), capped)
    sk = summary["skew"]
    assert sk["collectives_total"] == 18 and len(sk["collectives"]) == 4 == sk["collectives_shown"]
    assert sk["kinds"][0]["matched"] == 18 and len(sk["steps"]) == 4 and sk["steps_summary"]["count"] == 6
    # the rows kept are those with the largest arrival skew: the straggler's
    assert all(c["ordinal"] == 0 and c["last_rank"] == 2 for c in sk["collectives"])


def test_scale_is_vectorized():
    """256 ranks × 2,000 collectives: matching, alignment and skew stay well under seconds."""
    ranks, n = 256, 2_000
    rng = np.random.default_rng(0)
    arrivals = np.arange(n)[None, :] * 10 * MS + rng.integers(0, 50_000, size=(ranks, n))
    arrivals[7, ::10] += 5 * MS  # rank 7 late by 5 ms at the first collective of every step
    ends = arrivals.max(axis=0) + 100_000
    shifts = rng.integers(-50 * MS, 50 * MS, size=ranks)
    collectives = [{"name": ["AllReduce"] * n, "start_ns": (arrivals[r] + shifts[r]).tolist(),
                    "end_ns": (ends + shifts[r]).tolist(), "step": (np.arange(n) // 10).tolist()}
                   for r in range(ranks)]
    began = time.perf_counter()
    m = _match(collectives, list(range(ranks)))
    refined = align.refine_offsets(m.end_ns, m.present, np.zeros(ranks), np.zeros(ranks))
    offsets = [o["offset_ns"] for o in refined]
    out = skew.collective_skew(m, offsets, [o["uncertainty_ns"] for o in refined], CONFIG)
    elapsed = time.perf_counter() - began
    assert offsets == (shifts[0] - shifts).tolist()
    assert out.straggler.rank == 7 and out.straggler.late_steps == 200
    assert elapsed < 10, elapsed


def test_unique_rows_matches_numpy_on_packed_and_general_paths():
    rng = np.random.default_rng(1)
    small = rng.integers(-5, 5, size=(500, 3))  # few possible keys: counted
    wide = rng.integers(0, 10**6, size=(500, 2))  # packed, then sorted
    huge = np.array([[2**61, 1, 0], [-(2**61), 3, 2], [2**61, 1, 0]])  # spans too wide to pack
    for keys in (small, wide, huge, np.zeros((0, 2), np.int64)):
        keys = keys.astype(np.int64)
        got = align.unique_rows(keys)
        want = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1].reshape(-1))
        assert np.array_equal(got[2], want[2])
