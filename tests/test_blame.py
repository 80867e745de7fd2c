"""Causal blame on jobs whose timing is known by construction: a delay passed on through a second
process group or a pipeline stage is charged to the rank it started on, and once."""

import numpy as np
import pytest
from result_views import summary_json

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline
from distprof.results import Summary

CONFIG = config_mod.load()
MS = 1_000_000
STEP_NS = 200 * MS


def _result(rank: int, rows: list[tuple], meta: dict | None = None):
    """One rank's RankResult from (kind, category, name, start, end, lane, step, collective, group, peer) rows
    (``meta``: the rank file's, e.g. its host and that host's cores)."""
    columns = list(zip(*rows))
    kind, category, name = (np.array(c, dtype=object) for c in columns[:3])
    start, end, lane, step = (np.array(c, np.int64) for c in columns[3:7])
    collective, group = (np.array(c, dtype=object) for c in columns[7:9])
    events = ev.make_events(kind=kind, category=category, name=name, rank=rank, start_ns=start, end_ns=end,
                            lane=lane, step=step, collective=collective, group=group,
                            peer=np.array(columns[9], np.int64))
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=rank, meta=dict(meta or {})), CONFIG)


def _phase(name: str, start: int, end: int, step: int) -> tuple:
    return (ev.RANGE, ev.PHASE, name, start, end, 1, step, "", "", -1)


def _comm(kind: str, start: int, end: int, step: int, group: str, peer: int = -1) -> tuple:
    return (ev.COMM_OP, ev.COMMUNICATION, kind, start, end, 1, step, kind, group, peer)


def summarize(rows_by_rank: dict[int, list[tuple]], meta: dict | None = None) -> dict:
    results = [_result(rank, rows, meta) for rank, rows in sorted(rows_by_rank.items())]
    return summary_json(pipeline.combine(results, CONFIG, source="test", world_size=len(results)))


def tp_dp_job(delay_ns: int, late_rank: int = 3, steps: int = 6, late_steps=None, delays=None,
              tp_ops: int = 1, meta: dict | None = None) -> dict:
    """summary.json of the TP x DP job of ``_tp_dp_rows``."""
    return summarize(_tp_dp_rows(delay_ns, late_rank, steps, late_steps, delays, tp_ops), meta)


def _tp_dp_rows(delay_ns: int = 0, late_rank: int = 3, steps: int = 6, late_steps=None, delays=None,
                tp_ops: int = 1) -> dict:
    """TP groups {0,1}, {2,3} allreduce after forward; DP groups {0,2}, {1,3} allgather after
    backward. The late rank's forward takes ``delay_ns`` longer in ``late_steps`` (all): its TP
    partner waits for it, and so does its DP partner; the TP partner then reaches its own DP
    allgather late by the same delay, which it only passes on. ``delays`` ({rank: [ns per
    step]}) adds more, per rank and step. ``tp_ops``: the TP pair runs that many allreduces, the
    later ones 2 ms apart and on time (as the layers of a forward do)."""
    tp_of, dp_of = {0: "tp0", 1: "tp0", 2: "tp1", 3: "tp1"}, {0: "dp0", 2: "dp0", 1: "dp1", 3: "dp1"}
    rows = {r: [] for r in range(4)}
    for s in range(steps):
        base = s * STEP_NS
        late = late_steps is None or s in late_steps
        forward_end = {r: base + 40 * MS + (delay_ns if r == late_rank and late else 0)
                       + (delays or {}).get(r, [0] * steps)[s] for r in range(4)}
        tp_end = {r: max(forward_end[q] for q in range(4) if tp_of[q] == tp_of[r]) + 1 * MS for r in range(4)}
        more_tp = {r: [(tp_end[r] + (k + 1) * 2 * MS + k * MS, tp_end[r] + (k + 1) * 3 * MS) for k in range(tp_ops - 1)]
                   for r in range(4)}
        tp_done = {r: more_tp[r][-1][1] if more_tp[r] else tp_end[r] for r in range(4)}
        dp_arrive = {r: tp_done[r] + 40 * MS for r in range(4)}
        dp_end = {r: max(dp_arrive[q] for q in range(4) if dp_of[q] == dp_of[r]) + 1 * MS for r in range(4)}
        for r in range(4):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, dp_end[r] + 5 * MS, 1, s, "", "", -1),
                        _phase("forward", base + 5 * MS, forward_end[r], s),
                        _comm(ev.ALLREDUCE, forward_end[r], tp_end[r], s, tp_of[r]),
                        *[_comm(ev.ALLREDUCE, begin, end, s, tp_of[r]) for begin, end in more_tp[r]],
                        _phase("backward", tp_done[r], dp_arrive[r], s),
                        _comm(ev.ALLGATHER, dp_arrive[r], dp_end[r], s, dp_of[r]),
                        _phase("optimizer", dp_end[r], dp_end[r] + 5 * MS, s)]
    return rows


def pipeline_job(delay_ns: int, late_stage: int, stages: int = 4, steps: int = 6, meta: dict | None = None) -> dict:
    """A forward-only send/recv pipeline, one micro-batch a step: stage r receives from r-1 (its recv
    lasts until the send arrives), computes 20 ms (+ the delay on the late stage) and sends to r+1
    (an eager send: 0.1 ms, nobody waits for its receiver). Every step lasts 150 ms: the delay
    costs no step time."""
    rows = {r: [] for r in range(stages)}
    for s in range(steps):
        base = s * STEP_NS
        ready = base + 5 * MS  # when the stage's input is there
        for r in range(stages):
            if r > 0:
                rows[r].append(_comm(ev.RECV, base + 5 * MS, ready, s, "pp", peer=r - 1))
            compute_end = ready + 20 * MS + (delay_ns if r == late_stage else 0)
            rows[r].append(_phase("forward", ready, compute_end, s))
            if r < stages - 1:
                rows[r].append(_comm(ev.SEND, compute_end, compute_end + MS // 10, s, "pp", peer=r + 1))
            ready = compute_end + MS // 10
        for r in range(stages):
            rows[r].append((ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, base + 150 * MS, 1, s, "", "", -1))
    return summarize(rows, meta)


CROWDED = {"hostname": "vm", "cpus": 2}  # 4 ranks on a host of 2 cores: the replay gives no cost there


def test_on_a_crowded_host_a_fix_the_replay_prices_under_the_floor_is_not_named():
    """Ranks outnumbering their host's cores: the replay gives no cost (it over-prices: a rank that
    waits frees a core it cannot see), but a fix it prices under the floor even so saves little.
    The pipeline whose fixed 150 ms steps absorb stage 1's 15 ms is held unconfirmed there too (it
    was named on its waits alone); the TP x DP job's 30 ms root, which its steps feel, is named,
    with no cost."""
    held = pipeline_job(15 * MS, late_stage=1, meta=CROWDED)["skew"]
    assert held["straggler"] is None and held["unconfirmed_straggler"]["rank"] == 1
    assert held["unconfirmed_straggler"]["share"] < CONFIG["skew"]["straggler_min_step_fraction"]
    # there the replay's saving is an upper bound, and the row says so; not where ranks have cores
    assert held["unconfirmed_straggler"]["saving_upper_bound"] is True
    alone = pipeline_job(15 * MS, late_stage=1)["skew"]["unconfirmed_straggler"]
    assert "saving_upper_bound" not in alone and alone["saving_ns"] == held["unconfirmed_straggler"]["saving_ns"]
    named = tp_dp_job(30 * MS, meta=CROWDED)
    assert any("outnumber" in w for w in named["warnings"])
    assert named["skew"]["straggler"]["rank"] == 3 and named["skew"]["straggler"]["cost_ns"] is None


def _waits_caused(summary: dict) -> dict[int, int]:
    return {r["rank"]: r["waits_caused_ns"] for r in summary["skew"]["ranks"]}


def test_a_delay_passed_on_through_a_second_group_is_charged_to_its_root_once():
    summary = tp_dp_job(30 * MS)
    caused = _waits_caused(summary)
    assert caused[3] == 30 * MS  # rank 2 (TP) and rank 1 (DP) waited for the same 30 ms: counted once
    assert caused[2] == 0  # rank 2 reached its DP allgather late only because it waited for rank 3
    assert caused[0] == caused[1] == 0
    assert summary["skew"]["straggler"]["rank"] == 3
    # the replay prices it at what the construction says: 117 ms steps, 87 ms without the delay
    assert summary["skew"]["straggler"]["cost_ns"] == 30 * MS


def test_a_late_pipeline_stage_is_the_root_and_the_stages_after_it_only_pass_it_on():
    summary = pipeline_job(15 * MS, late_stage=1)
    caused = _waits_caused(summary)
    assert caused[1] == 15 * MS
    assert caused[2] == caused[3] == caused[0] == 0
    # the waits point at rank 1; the fixed 150 ms steps absorb its delay, so the replay prices
    # its fix under the floor and it is not named (test_pipelines prices a pipeline whose steps
    # end with their work)
    assert summary["skew"]["straggler"] is None
    assert summary["skew"]["unconfirmed_straggler"]["rank"] == 1
    kinds = {(k["name"], k["group"]) for k in summary["skew"]["kinds"]}
    assert ("p2p", "pp") in kinds


def test_a_healthy_pipeline_has_no_straggler():
    summary = pipeline_job(0, late_stage=1)
    assert summary["skew"]["straggler"] is None
    assert set(_waits_caused(summary).values()) == {0}


def test_a_delay_waited_for_several_ops_before_is_still_passed_on():
    """The TP pair waits for rank 3 at its first allreduce, then runs two more on time: rank 2 still
    reaches its DP allgather 30 ms behind rank 0, and rank 3 its own 30 ms behind rank 1. Both
    carried the delay through the step (a wait, a lateness already charged), not from the op just
    before: one delay, one root (the real TP x DP demo named no straggler before this rule)."""
    summary = tp_dp_job(30 * MS, tp_ops=3)
    caused = _waits_caused(summary)
    assert caused[3] == 30 * MS
    assert caused[2] == caused[0] == caused[1] == 0
    assert summary["skew"]["straggler"]["rank"] == 3


@pytest.mark.parametrize("late_rank", [0, 2])
def test_the_root_is_found_whichever_rank_is_late(late_rank):
    summary = tp_dp_job(25 * MS, late_rank=late_rank)
    assert summary["skew"]["straggler"]["rank"] == late_rank
    assert _waits_caused(summary)[late_rank] == 25 * MS


def test_a_rank_that_turns_slow_mid_run_and_stays_slow_is_named_since_that_step():
    summary = tp_dp_job(20 * MS, late_rank=1, steps=8, late_steps=range(3, 8))
    straggler = summary["skew"]["straggler"]
    assert (straggler["rank"], straggler["pattern"], straggler["onset_step"]) == (1, "since step", 3)
    assert straggler["waits_caused_ns"] == 20 * MS  # per step since it turned slow
    # the replay removes its lateness from step 3 on and prices it per step since then
    assert straggler["cost_ns"] == 20 * MS
    no_straggler = next(row for row in summary["whatif"]["scenarios"] if row["name"] == "no_straggler")
    assert (no_straggler["since_step"], no_straggler["removed_per_step_ns"]) == (3, 20 * MS)
    [finding] = [f for f in summary["findings"] if f["finding"] == "straggler"]
    assert "late since step 3" in finding["message"]


@pytest.mark.parametrize("onset", range(1, 7))
def test_an_onset_at_any_step_from_the_second_to_the_last_but_one_is_found(onset):
    """8 steps, rank 1 slow by 20 ms from step ``onset`` (1..n-2) on: "since step" that step, its
    waits and cost per faulty step (a rank late in 7 of 8 steps was "persistent", averaged)."""
    summary = tp_dp_job(20 * MS, late_rank=1, steps=8, late_steps=range(onset, 8))
    straggler = summary["skew"]["straggler"]
    assert (straggler["rank"], straggler["pattern"], straggler["onset_step"]) == (1, "since step", onset)
    assert straggler["waits_caused_ns"] == straggler["cost_ns"] == 20 * MS


def test_a_rank_slow_from_the_first_step_is_persistent():
    straggler = tp_dp_job(20 * MS, late_rank=1, steps=8)["skew"]["straggler"]
    assert (straggler["rank"], straggler["pattern"], straggler["onset_step"]) == (1, "persistent", None)


def test_the_phase_excess_of_a_rank_slow_since_a_step_is_per_faulty_step():
    """Rank 1's forward is 30 ms longer from step 5 of 8: "forward, +30 ms a step" since step 5, not
    30 x 3 / 8 = 11.25 ms averaged over every step."""
    straggler = tp_dp_job(30 * MS, late_rank=1, steps=8, late_steps=range(5, 8))["skew"]["straggler"]
    assert (straggler["pattern"], straggler["onset_step"]) == ("since step", 5)
    assert (straggler["phase"], straggler["phase_extra_ns"]) == ("forward", 30 * MS)


@pytest.mark.parametrize("late_steps", [{4}, {2, 3, 4}, {5, 6}])
def test_a_burst_that_ended_or_a_short_tail_is_no_straggler(late_steps):
    summary = tp_dp_job(20 * MS, late_rank=1, steps=8, late_steps=late_steps)
    assert summary["skew"]["straggler"] is None
    assert any("transient" in note for note in summary["skew"]["notes"])


def test_a_rank_slightly_late_before_its_onset_is_named_since_the_step_up():
    """Rank 1: 6 ms late in step 1 (above the 5%-of-step threshold: late, by noise), 20 ms in steps
    4-7: every step since 4 costs more than any before, and more than any rank cost before: since
    step 4 (the old rule wanted it never late before)."""
    summary = tp_dp_job(0, delays={1: [0, 6 * MS, 0, 0, 20 * MS, 20 * MS, 20 * MS, 20 * MS]}, steps=8)
    straggler = summary["skew"]["straggler"]
    assert (straggler["rank"], straggler["pattern"], straggler["onset_step"]) == (1, "since step", 4)
    assert straggler["waits_caused_ns"] == 20 * MS


def test_the_onset_rank_is_found_when_another_cost_more_before_it():
    """Rank 0: 19 ms late in steps 0-3 (a burst that ended, 76 ms in all); rank 1: 24 ms in steps
    5-7 (72 ms in all): the rank late at the end is the one that turned slow."""
    summary = tp_dp_job(0, delays={0: [19 * MS] * 4 + [0] * 4, 1: [0] * 5 + [24 * MS] * 3}, steps=8)
    straggler = summary["skew"]["straggler"]
    assert (straggler["rank"], straggler["pattern"], straggler["onset_step"]) == (1, "since step", 5)
    # priced per step since step 5: over all 8 steps (3 late) its median lateness, and so the
    # replay's saving, was 0, which the floor would now take as no straggler
    assert straggler["cost_ns"] == 24 * MS


def test_an_onset_no_later_than_the_noise_before_it_is_no_straggler():
    """Rank 0 cost 30 ms in step 1; rank 1 costs 20 ms from step 4: not above what came before."""
    summary = tp_dp_job(0, delays={0: [0, 30 * MS] + [0] * 6, 1: [0] * 4 + [20 * MS] * 4}, steps=8)
    assert summary["skew"]["straggler"] is None


def test_placement_advice_names_each_kinds_own_groups_and_a_forward_reduction_is_not_bucketed():
    """TP allreduce nested in forward, DP allgather after backward, all on the compute thread: the
    advice names the allreduce's TP group only, the allgather's DP group only, and does not offer
    buckets for the reduction the next layer needs at once."""
    tp_of, dp_of = {0: "tp0", 1: "tp0", 2: "tp1", 3: "tp1"}, {0: "dp0", 2: "dp0", 1: "dp1", 3: "dp1"}
    rows = {r: [] for r in range(4)}
    for s in range(4):
        base = s * STEP_NS
        for r in range(4):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, base + 100 * MS, 1, s, "", "", -1),
                        _phase("forward", base + 5 * MS, base + 50 * MS, s),
                        _comm(ev.ALLREDUCE, base + 40 * MS, base + 45 * MS, s, tp_of[r]),
                        _phase("backward", base + 50 * MS, base + 90 * MS, s),
                        _comm(ev.ALLGATHER, base + 90 * MS, base + 95 * MS, s, dp_of[r])]
    summary = summarize(rows)
    [finding] = [f for f in summary["findings"] if f["finding"] == "serialized_communication"]
    worst = finding["evidence"]["worst_rank"]
    assert finding["evidence"]["groups_by_kind"] == {"allgather": [dp_of[worst]], "allreduce": [tp_of[worst]]}
    assert finding["evidence"]["in_forward"] == ["allreduce"]
    advice = finding["advice"]
    assert f"the allreduce (group {tp_of[worst]}) inside forward (tensor parallel)" in advice
    assert f"issue the allgather (group {dp_of[worst]})" in advice and "in buckets" not in advice


def test_the_straggler_phase_is_judged_by_its_own_work_not_the_waits_nested_in_the_others():
    """One TP group of 4, its allreduce nested at the end of forward; rank 3's forward computes
    30 ms longer. Every other rank's forward lasts as long (it waits in the nested allreduce), so
    forward's duration shows no excess; its own work does: 30 ms per step, in forward."""
    rows = {r: [] for r in range(4)}
    for s in range(6):
        base = s * STEP_NS
        compute_end = {r: base + 40 * MS + (30 * MS if r == 3 else 0) for r in range(4)}
        done = max(compute_end.values()) + MS
        for r in range(4):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, done + 50 * MS, 1, s, "", "", -1),
                        _phase("forward", base + 5 * MS, done, s),
                        _comm(ev.ALLREDUCE, compute_end[r], done, s, "tp"),
                        _phase("backward", done, done + 40 * MS, s)]
    straggler = summarize(rows)["skew"]["straggler"]
    assert straggler["rank"] == 3
    assert (straggler["phase"], straggler["phase_extra_ns"]) == ("forward", 30 * MS)


def hidden_wait_job(lead_ns: int, steps: int = 6) -> dict:
    """Three ranks, 50 ms steps: forward, backward, optimizer on the thread that runs the steps; in
    backward each rank issues an allreduce on a worker thread (lane 7), rank 1 ``lead_ns`` later
    than ranks 0 and 2, which wait that long for it. The allreduce ends long before any rank
    needs it (the optimizer), so no step of the others is any shorter without rank 1's lateness."""
    rows = {0: [], 1: [], 2: []}
    for s in range(steps):
        base = s * 50 * MS
        arrive = {0: base + 25 * MS, 1: base + 25 * MS + lead_ns, 2: base + 25 * MS}
        for r in (0, 1, 2):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, base + 50 * MS, 1, s, "", "", -1),
                        _phase("forward", base, base + 20 * MS, s),
                        _phase("backward", base + 20 * MS, base + 45 * MS, s),
                        (ev.COMM_OP, ev.COMMUNICATION, ev.ALLREDUCE, arrive[r], arrive[1] + MS, 7, s, ev.ALLREDUCE,
                         "dp", -1),
                        _phase("optimizer", base + 45 * MS, base + 50 * MS, s)]
    return summarize(rows)


def test_a_rank_whose_lateness_costs_no_step_time_is_not_named():
    # ranks 0 and 2 wait 5 ms a step (10% of the step) for rank 1, out of sight of their steps:
    # the replay prices removing rank 1's lateness at 0, under the 5% a straggler must cost
    summary = hidden_wait_job(5 * MS)
    assert _waits_caused(summary)[1] == 5 * MS
    assert summary["skew"]["straggler"] is None
    unconfirmed = summary["skew"]["unconfirmed_straggler"]
    assert (unconfirmed["rank"], unconfirmed["saving_ns"], unconfirmed["floor"]) == (1, 0, 0.05)
    assert unconfirmed["waits_caused_ns"] == 5 * MS
    assert not [f for f in summary["findings"] if f["finding"] == "straggler"]
    no_straggler = next(row for row in summary["whatif"]["scenarios"] if row["name"] == "no_straggler")
    assert not no_straggler["applies"]


def test_the_straggler_line_says_why_the_waits_did_not_name_a_rank():
    from distprof.reports.findings import straggler_line
    summary = hidden_wait_job(5 * MS)
    unconfirmed = Summary.from_json(summary).skew.unconfirmed_straggler
    line = straggler_line(None, lambda ns: f"{ns / MS:.1f} ms", unconfirmed)
    assert line == ("Straggler: none (rank 1 is last in 6 of its 6 collectives and the others wait 5.0 ms per step "
                    "for it, but removing its lateness saves 0.0 ms per step: 0.0% of the step, under the 5% a "
                    "straggler costs)")


def test_on_a_crowded_host_the_straggler_line_gives_the_saving_as_an_upper_bound():
    from distprof.reports.findings import straggler_line
    summary = pipeline_job(15 * MS, late_stage=1, meta=CROWDED)
    unconfirmed = Summary.from_json(summary).skew.unconfirmed_straggler
    line = straggler_line(None, lambda ns: f"{ns / MS:.1f} ms", unconfirmed)
    assert "removing its lateness saves at most " in line
    assert line.endswith("; an upper bound: its ranks share cores, and the replay cannot see the core a waiting "
                         "rank frees)")


def test_a_rank_late_every_step_that_does_not_lead_reads_as_spread_not_rotating():
    """Rank 1 late 20 ms in every step; rank 2 late 35 ms in steps 2 and 4 (70 ms against rank 1's
    120 ms: less than twice): no straggler, because rank 2 costs nearly as much, not because the
    late rank rotates (rank 1 is the worst in 4 of the 6 steps)."""
    summary = tp_dp_job(0, delays={1: [20 * MS] * 6, 2: [0, 0, 35 * MS, 0, 35 * MS, 0]})
    assert summary["skew"]["straggler"] is None
    [note] = [n for n in summary["skew"]["notes"] if "straggler" in n]
    assert note.startswith("rank 1 costs the others 20.0 ms per step, but rank 2 costs nearly as much (11.7 ms)"), note


@pytest.mark.parametrize(("delays", "why"), [
    ({1: [20 * MS] * 6, 2: [0, 0, 35 * MS, 0, 35 * MS, 0]},
     "rank 1 costs the others 20.00 ms per step, but rank 2 costs nearly as much (11.67 ms): no single straggler"),
    ({1: [0, 0, 0, 20 * MS, 0, 0]}, "rank 1 is late only in step(s) 3 (1 of 6): transient, not a straggler"),
])
def test_the_first_screen_says_why_no_straggler_is_named(delays, why):
    # it said "no rank makes the others wait ... in enough steps" whatever the reason
    from distprof.reports import text
    summary = tp_dp_job(0, delays=delays)
    [line] = [line for line in text.answer_lines(Summary.from_json(summary), width=1000)
              if line.startswith("Straggler:")]
    assert line.startswith(f"Straggler: none ({why}"), line
    # the reason is one of the skew notes (summary.json's readable units), pointed at by its index
    note = summary["skew"]["notes"][summary["skew"]["no_straggler_note"]]
    assert note.startswith("rank 1 ") and why.split(": ")[-1] in note


def test_the_skew_notes_are_reasons_until_the_reports_word_them():
    """The analysis gives why no straggler is named as a code and its figures (a rank late in one
    step: transient); reports/findings.py words it, durations as units.duration tokens."""
    from distprof.reports import findings as findings_report
    from distprof.typed import Reason
    from distprof.units import duration
    late = [0, 0, 0, 20 * MS, 0, 0]
    results = [_result(rank, rows) for rank, rows in sorted(_tp_dp_rows(delays={1: late}).items())]
    summary = pipeline.combine(results, CONFIG, source="test", world_size=len(results))
    reason = summary.skew.notes[summary.skew.no_straggler_note]
    assert isinstance(reason, Reason) and reason.code == "transient"
    assert reason.figures["rank"] == 1 and reason.figures["steps"] == [3]
    worded = findings_report.worded(summary)
    assert all(isinstance(note, str) for note in worded.skew.notes)
    assert worded.skew.notes[worded.skew.no_straggler_note] == (
        f"rank 1 is late only in step(s) 3 (1 of 6): transient, not a straggler (costs "
        f"{duration(reason.figures['per_step_ns'])} per step on average)")


def test_a_delay_passed_on_at_a_step_end_is_not_charged_again_at_the_next_step_start():
    """Steps back to back: a TP allreduce after 10 ms of forward, 10 ms of backward (+ the delay on
    rank 1), a DP allgather, the next step at once. Rank 3 waits for rank 1 at the DP allgather and
    so starts the next step late, as rank 1 does: at the next TP allreduces ranks 0 and 2 wait for
    ranks 1 and 3. That is rank 1's delay passed on over the step's end (by the rule of one step
    only, rank 1 was charged 2 delays a step and rank 3 one): rank 1 is charged it once, rank 3 nothing."""
    tp_of, dp_of = {0: "tp0", 1: "tp0", 2: "tp1", 3: "tp1"}, {0: "dp0", 2: "dp0", 1: "dp1", 3: "dp1"}
    rows, start, delay = {r: [] for r in range(4)}, {r: 0 for r in range(4)}, 8 * MS
    for s in range(6):
        forward_end = {r: start[r] + 10 * MS for r in range(4)}
        tp_end = {r: max(forward_end[q] for q in range(4) if tp_of[q] == tp_of[r]) + MS for r in range(4)}
        dp_arrive = {r: tp_end[r] + 10 * MS + (delay if r == 1 else 0) for r in range(4)}
        dp_end = {r: max(dp_arrive[q] for q in range(4) if dp_of[q] == dp_of[r]) + MS for r in range(4)}
        for r in range(4):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start[r], dp_end[r], 1, s, "", "", -1),
                        _phase("forward", start[r], forward_end[r], s),
                        _comm(ev.ALLREDUCE, forward_end[r], tp_end[r], s, tp_of[r]),
                        _phase("backward", tp_end[r], dp_arrive[r], s),
                        _comm(ev.ALLGATHER, dp_arrive[r], dp_end[r], s, dp_of[r])]
            start[r] = dp_end[r]
    caused = _waits_caused(summarize(rows))
    assert caused == {0: 0, 1: delay, 2: 0, 3: 0}


def _rotating_job(steps: int = 8) -> dict:
    """4 ranks, one data-parallel group, two allreduces a step. Rank 3's forward is 20 ms longer in
    every step (the straggler); before the second allreduce rank ``step % 3`` is 10 ms late on its
    own (the last arriver rotates among ranks 0-2, as in the DLRM trace)."""
    rows = {r: [] for r in range(4)}
    for s in range(steps):
        base = s * STEP_NS
        for r in range(4):
            forward_end = base + 40 * MS + (20 * MS if r == 3 else 0)
            backward_end = base + 100 * MS + (10 * MS if r == s % 3 else 0)
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, base + 120 * MS, 1, s, "", "", -1),
                        _phase("forward", base, forward_end, s),
                        _comm(ev.ALLREDUCE, forward_end, base + 61 * MS, s, "dp"),
                        _phase("backward", base + 61 * MS, backward_end, s),
                        _comm(ev.ALLREDUCE, backward_end, base + 111 * MS, s, "dp")]
    return summarize(rows)


def test_the_straggler_is_credited_only_with_the_waits_for_it():
    """Each of ranks 0-2 waits 20 ms for rank 3 in every step, and 10 ms in the 5-6 steps where another
    of them is last at the second allreduce. Only the first are rank 3's: 8 x 20 ms each (was 210-220 ms,
    with the waits for the rotating ranks), never more than the waits it caused."""
    summary = _rotating_job()
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 3 and straggler["pattern"] == "persistent"
    assert straggler["exposed_waits_ns_by_rank"] == {"0": 160 * MS, "1": 160 * MS, "2": 160 * MS}
    assert max(straggler["exposed_waits_ns_by_rank"].values()) <= straggler["total_waits_caused_ns"]
    # the placement checks leave out only those: no check is netted of the waits for the rotating ranks
    assert {c["rank"]: c.get("waits_for_straggler_ns") for c in summary["checks"]} == \
        {0: 160 * MS, 1: 160 * MS, 2: 160 * MS, 3: None}


def test_a_wait_for_a_rank_that_carried_the_stragglers_delay_is_the_stragglers():
    """TP x DP, rank 3 late by 30 ms: rank 2 waits for it in their TP allreduce and reaches its DP
    allgather 30 ms late, where rank 0 waits for rank 2. That wait is rank 3's (carried), as are the
    direct waits of ranks 2 (TP) and 1 (DP): 6 steps x 30 ms each."""
    straggler = tp_dp_job(30 * MS)["skew"]["straggler"]
    assert straggler["rank"] == 3
    assert straggler["exposed_waits_ns_by_rank"] == {"0": 180 * MS, "1": 180 * MS, "2": 180 * MS}
