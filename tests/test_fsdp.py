"""FSDP / ZeRO (issue 55, item 5): the straggler's phase counts host time inside the phase net of the
communication its thread waited through, so a late rank sleeping in a forward that holds FSDP's
all-gathers is named with its forward.

Real job: tests/data/torch_fsdp/late (make_traces.py there: torch FSDP2 ``fully_shard``, gloo, 2 ranks,
torch 2.13 CPU, rank 1 sleeping 20 ms inside ``## forward ##`` every step). The figure is computed
here from the raw JSON with plain ``json``/``gzip`` and Python lists, never through distprof."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import kineto_fixtures as kf

from distprof import config as config_mod
from distprof.analyses import sharded as sharded_mod
from distprof.cli import merge_files
from distprof.sections.findings import Evidence, Observed
from distprof.sections.sharded import ShardedRank

LATE = sorted((Path(__file__).resolve().parent / "data" / "torch_fsdp" / "late").glob("rank*.json.gz"))
MS = 1_000_000
RESUME_NS, RESUME_SHARE = 1_000_000, 0.25  # the rule's constants (analyses/skew.py), said in docs/diagnosis.md


# -- plain Python over the raw JSON ----------------------------------------------------------

def _raw(path: Path) -> tuple[int, list[dict]]:
    with gzip.open(path, "rb") as handle:
        document = json.load(handle, parse_float=Decimal)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("dur"), (int, Decimal))]
    for e in events:
        e["s"], e["e"] = int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)
    return document["distributedInfo"]["rank"], events


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _minus(spans: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for start, end in _union(spans):
        cursor = start
        for a, b in _union(holes):
            if b <= cursor or a >= end:
                continue
            if a > cursor:
                out.append((cursor, a))
            cursor = max(cursor, b)
        if cursor < end:
            out.append((cursor, end))
    return out


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> int:
    return sum(max(0, min(b, end) - max(a, start)) for a, b in _union(spans))


def _forward_net(events: list[dict]) -> tuple[int, int]:
    """(sum over the profiled steps of the forward's wall time less the communication its thread
    waited through, steps): c10d calls on the main thread, and each gloo worker range whose end the
    main thread resumes at (its first boundary from 1 ms before the end on, within 1 ms or a quarter
    of the wait), from the range's start or the thread's previous boundary, less the main thread's aten ops."""
    main = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
    mine = [e for e in events if e["tid"] == main]
    bounds = sorted({e["s"] for e in mine} | {e["e"] for e in mine})
    waits = []
    for op in (e for e in events if e["name"].startswith("gloo:") and e["tid"] != main):
        after = next((i for i, b in enumerate(bounds) if b > max(op["e"] - RESUME_NS, op["s"])), None)
        if not after:
            continue
        lo = max(bounds[after - 1], op["s"])
        if lo < bounds[after] and bounds[after] - op["e"] <= max(RESUME_NS, RESUME_SHARE * (op["e"] - lo)):
            waits.append((lo, bounds[after]))
    aten = [(e["s"], e["e"]) for e in mine if e["name"].startswith("aten::")]
    blocked = _union([(e["s"], e["e"]) for e in mine if e["name"].startswith("c10d::")] + _minus(waits, aten))
    forwards = [e for e in mine if e["name"] == "## forward ##"]
    return sum(f["e"] - f["s"] - _inside(blocked, f["s"], f["e"]) for f in forwards), len(forwards)


def test_real_fsdp_straggler_is_named_with_its_forward():
    """The merge names rank 1 and its forward, by its excess per step over rank 0's forward net of the
    communication each waited through: the same figure as plain Python over the raw JSON, and about
    the 20 ms it sleeps there (before, 'outside any annotated phase': the forward's own ops only)."""
    summary = merge_files(LATE, config_mod.load(None))
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "## forward ##"
    net = dict(_raw_net(path) for path in LATE)
    steps = net[1][1]
    expected = (net[1][0] - net[0][0]) / steps
    assert abs(straggler["phase_extra_ns"] - expected) <= 0.01 * expected
    assert 18 * MS <= straggler["phase_extra_ns"] <= 30 * MS
    [finding] = [f for f in summary["findings"] if f["finding"] == "straggler"]
    assert finding["evidence"]["slow_phase"] == "## forward ##"


def _raw_net(path: Path) -> tuple[int, tuple[int, int]]:
    rank, events = _raw(path)
    return rank, _forward_net(events)


# -- by construction ---------------------------------------------------------------------------

STEP = 40 * MS


def _rank_trace(rank: int, late: bool) -> kf.KinetoTrace:
    """3 steps of a forward (0-24 ms) holding two all-gathers on a gloo worker thread (tid 9): the first
    prefetched (2.1-3 ms on both ranks), the second issued at 3 ms by rank 0, which waits in an unrecorded
    wait() until 22.5 ms, and at 22 ms by rank 1, which sleeps from 2 to 22 ms (no op on its thread); then
    both compute 22.7-23.9 ms. Backward 26-36 ms of compute."""
    trace = kf.KinetoTrace(rank=rank, world_size=2, pid=100 + rank, tid=7, backend="gloo")  # one clock
    trace.distributed = {"pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
    shapes = {"Input Dims": [[64]], "Input type": ["float"], "Concrete Inputs": [""]}
    for step in range(3):
        t = step * STEP
        trace.step(step + 1, t, t + STEP - MS)
        trace.cpu_op("## forward ##", t, t + 24 * MS, cat="user_annotation")
        trace.cpu_op("aten::addmm", t + MS // 10, t + 2 * MS)
        trace.cpu_op("c10d::_allgather_base_", t + 2 * MS, t + 2 * MS + MS // 10)
        trace.cpu_op("gloo:all_gather", t + 2 * MS + MS // 10, t + 3 * MS, tid=9, cat="user_annotation", **shapes)
        issue = 22 * MS if late else 3 * MS
        trace.cpu_op("c10d::_allgather_base_", t + issue, t + issue + MS // 10)
        trace.cpu_op("gloo:all_gather", t + issue + MS // 10, t + 22 * MS + MS // 2, tid=9, cat="user_annotation",
                     **shapes)
        trace.cpu_op("aten::addmm", t + 22 * MS + 7 * MS // 10, t + 24 * MS - MS // 10)
        trace.cpu_op("## backward ##", t + 26 * MS, t + 36 * MS, cat="user_annotation")
        trace.cpu_op("aten::mm", t + 26 * MS + MS // 10, t + 36 * MS - MS // 10)
    return trace


def test_a_sleep_in_forward_counts_and_the_wait_for_it_does_not(tmp_path):
    """Rank 0's forward is as long as rank 1's, but 19.6 ms of it is waiting for rank 1's all-gather on
    the gloo thread; rank 1's sleep has a prefetched all-gather under it that ended 19 ms before it
    resumed (no wait). So rank 1's forward is 19.9 ms more per step, and is named."""
    paths = [_rank_trace(rank, late=rank == 1).write(tmp_path / f"rank{rank}.json") for rank in (0, 1)]
    skew = merge_files(paths, config_mod.load(None))["skew"]
    forward = next(p for p in skew["phases"] if p["name"] == "## forward ##")
    # rank 0: 24 ms less its c10d calls (0.2) and its waits 2.1-3 (idle to the prefetch's end) and
    # 3.1-22.7 ms (19.6) = 3.3 ms a step; rank 1: 24 ms less its c10d calls and its wait 22.1-22.7 = 23.2 ms
    assert forward["compute_ns_by_rank"] == {"0": 3 * 33 * MS // 10, "1": 3 * 232 * MS // 10}
    # named, then left unconfirmed: the synthetic steps are 39 ms on both ranks whatever waits, so no fix saves
    straggler = skew["straggler"] or skew["unconfirmed_straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "## forward ##"
    assert straggler["phase_extra_ns"] == 199 * MS // 10


# -- B: all-gather / reduce-scatter exposure per phase, the exposed_allgather finding -------------------

def _sharded_trace(rank: int, overlapped: bool) -> kf.KinetoTrace:
    """3 steps of 39 ms, both ranks alike. Forward 0-20 ms: an all-gather on the gloo thread (tid 9) at
    0.6-6 ms, under an addmm at 1-9 ms (``overlapped``; else at 6.1-9 ms), then one at 10-14 ms the main
    thread waits for, then an addmm at 14.1-19.9. Backward 21-35 ms: an all-gather at 21.05-25 ms under
    an mm at 21.1-29 ms (else 25.1-29), then a reduce-scatter (gloo runs it as gloo:all_reduce, issued by
    c10d::_reduce_scatter_base_) at 29.1-33 ms that it waits for, then an mm at 33.1-34.9."""
    trace = kf.KinetoTrace(rank=rank, world_size=2, pid=100 + rank, tid=7, backend="gloo")  # one clock
    trace.distributed = {"pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
    shapes = {"Input Dims": [[64]], "Input type": ["float"], "Concrete Inputs": [""]}
    op_shapes = {"Input Dims": [[128], [64]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}
    rs_shapes = {"Input Dims": [[64], [128]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}
    us = MS // 1000
    for step in range(3):
        t = step * STEP

        def op(name: str, start_us: int, end_us: int, tid: int | None = None, t: int = t, **args) -> None:
            trace.cpu_op(name, t + start_us * us, t + end_us * us, tid=tid,
                         cat="user_annotation" if tid or name.startswith("##") else "cpu_op", **args)

        trace.step(step + 1, t, t + STEP - MS)
        op("## forward ##", 0, 20_000)
        op("c10d::_allgather_base_", 500, 600, **op_shapes)
        op("gloo:all_gather", 600, 6_000, tid=9, **shapes)
        op("aten::addmm", 1_000 if overlapped else 6_100, 9_000)
        op("c10d::_allgather_base_", 9_900, 10_000, **op_shapes)
        op("gloo:all_gather", 10_000, 14_000, tid=9, **shapes)
        op("aten::addmm", 14_100, 19_900)
        op("## backward ##", 21_000, 35_000)
        op("c10d::_allgather_base_", 21_000, 21_050, **op_shapes)
        op("gloo:all_gather", 21_050, 25_000, tid=9, **shapes)
        op("aten::mm", 21_100 if overlapped else 25_100, 29_000)
        op("c10d::_reduce_scatter_base_", 29_000, 29_100, **rs_shapes)
        op("gloo:all_reduce", 29_100, 33_000, tid=9, **{**shapes, "Input Dims": [[128]]})
        op("aten::mm", 33_100, 34_900)
    return trace


def _sharded_job(tmp_path, overlapped: bool) -> dict:
    paths = [_sharded_trace(rank, overlapped).write(tmp_path / f"rank{rank}.json") for rank in (0, 1)]
    return merge_files(paths, config_mod.load(None))


def test_allgather_and_reduce_scatter_exposure_per_phase_by_construction(tmp_path):
    """Per step: forward all-gathers 5.4 + 4 ms, exposed 0.4 (before the addmm starts) + 4 (waited for);
    backward all-gather 3.95 ms, exposed 0.05 (before the mm starts), reduce-scatter 3.9 ms exposed; the gloo
    all-reduce issued by c10d::_reduce_scatter_base_ is a reduce-scatter in the Collectives table too."""
    summary = _sharded_job(tmp_path, overlapped=True)
    assert {row["kind"] for row in summary["collectives"]["rows"]} == {"allgather", "reduce_scatter"}
    for row in summary["sharded"]:
        phases = {p["phase"]: p for p in row["phases"]}
        assert set(phases) == {"## forward ##", "## backward ##"}
        forward, backward = phases["## forward ##"], phases["## backward ##"]
        assert (forward["steps"], forward["allgather_ns"], forward["allgather_exposed_ns"]) == (3, 3 * 94 * MS // 10,
                                                                                            3 * 44 * MS // 10)
        assert (forward["reduce_scatter_ns"], backward["allgather_exposed_ns"]) == (0, 3 * 50 * MS // 1000)
        assert backward["allgather_ns"] == 3 * 3_950 * MS // 1000
        assert backward["reduce_scatter_ns"] == backward["reduce_scatter_exposed_ns"] == 3 * 39 * MS // 10
        assert row["allgather_exposed_ns"] == 3 * 445 * MS // 100 and row["waits_for_straggler_ns"] == 0
    # 4.45 ms of a 39 ms step (11% > 5%), and all-gathers + reduce-scatters are all the exposed communication;
    # overlap 52% of the communication: no low-overlap finding to replace
    [finding] = [f for f in summary["findings"] if f["finding"] == "exposed_allgather"]
    assert finding["figure_ns"] == 445 * MS // 100 and finding["ranks"] == [0, 1]
    assert finding["evidence"]["reduce_scatter_exposed_ns"] == 39 * MS // 10
    assert finding["evidence"]["replaces"] is None and finding["evidence"]["share_of_exposed"] == 1.0
    assert finding["priced_by"] in ("overlap_communication", None)
    assert "exposed all-gather on 2/2 ranks" in finding["message"] and "## forward ##" in finding["message"]


def test_exposed_allgather_stands_for_the_low_overlap_finding(tmp_path):
    """With nothing overlapped the placement check warns, and its unoverlapped_communication finding is the
    same time as the exposed all-gathers: one finding, exposed_allgather, says it (charged once)."""
    summary = _sharded_job(tmp_path, overlapped=False)
    codes = [f["finding"] for f in summary["findings"]]
    assert "exposed_allgather" in codes and "unoverlapped_communication" not in codes
    assert any(c["status"] == "WARN" for c in summary["checks"])
    [finding] = [f for f in summary["findings"] if f["finding"] == "exposed_allgather"]
    assert finding["evidence"]["replaces"] == "unoverlapped_communication"
    assert finding["figure_ns"] == (54 + 40 + 39.5) * MS // 10  # every all-gather exposed whole


def _raw_sharded(events: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """(phase, kind) -> (|∪ its gloo ranges| in the profiled steps, of it outside every thread's aten ops
    that are not inside that thread's gloo ranges): gloo:all_gather the all-gathers, gloo:all_reduce the
    reduce-scatters (FSDP issues no all-reduce), each in the phase on the main thread its start lies in."""
    main = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
    window = _union([(e["s"], e["e"]) for e in events if e["name"].startswith("ProfilerStep#")])
    computation = []
    for tid in {e["tid"] for e in events}:
        gloo = [(e["s"], e["e"]) for e in events if e["tid"] == tid and e["name"].startswith("gloo:")]
        computation += _minus([(e["s"], e["e"]) for e in events if e["tid"] == tid and e["name"].startswith("aten::")],
                              gloo)
    phases = [e for e in events if e["tid"] == main and e["name"] in ("## forward ##", "## backward ##")]
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for op in (e for e in events if e["name"] in ("gloo:all_gather", "gloo:all_reduce")):
        phase = next((p["name"] for p in phases if p["s"] <= op["s"] < p["e"]), "")
        kind = "allgather" if op["name"] == "gloo:all_gather" else "reduce_scatter"
        spans.setdefault((phase, kind), []).append((op["s"], op["e"]))
    out = {}
    for key, ops in spans.items():
        inside = [(max(a, c), min(b, d)) for a, b in _union(ops) for c, d in window if max(a, c) < min(b, d)]
        out[key] = (sum(b - a for a, b in inside), sum(b - a for a, b in _minus(inside, computation)))
    return out


def test_real_fsdp_exposure_per_phase_and_the_finding():
    """summary.sharded per rank and phase equals plain Python over the raw JSON: the all-gathers in forward
    and backward, the reduce-scatters (gloo:all_reduce issued by c10d::_reduce_scatter_base_) in backward,
    nothing overlapped (FSDP2 on CPU waits for each at once). The exposed_allgather finding stands for the
    low-overlap one, priced by overlap_communication after the straggler's fix, its figure the worst rank's
    exposed all-gather per step net of its waits for the straggler."""
    summary = merge_files(LATE, config_mod.load(None))
    raw = dict((rank, _raw_sharded(events)) for rank, events in map(_raw, LATE))
    for row in summary["sharded"]:
        expected = raw[row["rank"]]
        for phase in row["phases"]:
            for kind in ("allgather", "reduce_scatter"):
                total, exposed = expected.get((phase["phase"], kind), (0, 0))
                assert phase[f"{kind}_ns"] == total and phase[f"{kind}_exposed_ns"] == exposed
        assert {p["phase"] for p in row["phases"]} == {phase for phase, _ in expected}
        assert expected[("## backward ##", "reduce_scatter")][0] > 0 and not (row["phases"][0]["phase"] == "")
    codes = [f["finding"] for f in summary["findings"]]
    assert "exposed_allgather" in codes and "unoverlapped_communication" not in codes
    [finding] = [f for f in summary["findings"] if f["finding"] == "exposed_allgather"]
    assert finding["evidence"]["replaces"] == "unoverlapped_communication"
    assert finding["priced_by"] == "overlap_communication" and finding["priced_after_straggler"]
    net = {row["rank"]: round((row["allgather_exposed_ns"] - row["allgather_waits_for_straggler_ns"]) / row["steps"])
           for row in summary["sharded"]}
    assert finding["figure_ns"] == max(net.values()) and finding["evidence"]["worst_rank"] == max(net, key=net.get)
    assert 0 < net[0] < summary["sharded"][0]["allgather_exposed_ns"] / 4  # rank 0 waited for rank 1: left out


def _row(rank: int, allgather: int, reduce_scatter: int, exposed: int, owed: int = 0) -> ShardedRank:
    return ShardedRank(rank=rank, steps=1, allgather_ns=allgather, allgather_exposed_ns=allgather,
                       reduce_scatter_ns=reduce_scatter, reduce_scatter_exposed_ns=reduce_scatter,
                       exposed_communication_ns=exposed, waits_for_straggler_ns=owed,
                       allgather_waits_for_straggler_ns=owed, reduce_scatter_waits_for_straggler_ns=0, phases=[])


def _results(window: int = 100 * MS) -> list:
    return [SimpleNamespace(rank=rank, figures=SimpleNamespace(window_ns=window), frameworks=()) for rank in (0, 1)]


def test_which_finding_says_the_exposed_all_gathers():
    """Made when the exposed all-gather (net of the straggler's waits) reaches 5% of the window and
    all-gathers + reduce-scatters are at least half of the exposed communication; in place of the
    low-overlap finding; never beside serialized communication (its fix comes first)."""
    config = config_mod.load(None)
    low = Observed(finding="unoverlapped_communication", figure_ns=0, ranks=[], evidence=Evidence())
    made = sharded_mod.exposed_allgather_findings([_row(0, 8 * MS, 2 * MS, 12 * MS)], [low], _results(), config)
    assert [f.finding for f in made] == ["exposed_allgather"] and made[0].evidence.replaces == low.finding
    assert made[0].figure_ns == 8 * MS and made[0].evidence.share_of_exposed == 10 / 12
    serialized = [Observed(finding="serialized_communication", figure_ns=0, ranks=[], evidence=Evidence())]
    assert sharded_mod.exposed_allgather_findings([_row(0, 8 * MS, 0, 8 * MS)], serialized, _results(),
                                                  config) == serialized
    assert sharded_mod.exposed_allgather_findings([_row(0, 8 * MS, 0, 20 * MS)], [low], _results(), config) == [low]
    assert sharded_mod.exposed_allgather_findings([_row(0, 4 * MS, 0, 4 * MS)], [low], _results(), config) == [low]
    # 30 ms exposed, 25 of it waiting for the straggler: 5 ms of its own, at the limit
    owed = sharded_mod.exposed_allgather_findings([_row(0, 30 * MS, 0, 30 * MS, 25 * MS)], [], _results(), config)
    assert owed[0].figure_ns == 5 * MS and owed[0].evidence.waits_for_straggler_ns == 25 * MS
