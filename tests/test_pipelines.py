"""Send/recv pipelines (issue 36, point 5): recognised from the matched pairs, each stage's bubble
per step, and a recv waiting for its input is a dependency, not serialized communication. Jobs
whose timing is fixed by construction (test_blame's pipeline)."""

import numpy as np
import pytest
from test_blame import MS, _phase, pipeline_job, summarize

from distprof import events as ev
from distprof.analyses.pipelines import chains
from distprof.reports.findings import text


def _pairs(*edges):
    return np.array([a for a, _ in edges]), np.array([b for _, b in edges])


@pytest.mark.parametrize(("edges", "expected"), [
    ([(0, 1), (1, 2), (2, 3), (3, 2), (2, 1), (1, 0)], [[0, 1, 2, 3]]),  # forward and backward hand-overs
    ([(4, 5), (5, 6), (0, 1)], [[0, 1], [4, 5, 6]]),                      # two pipelines (two DP replicas)
    ([(0, 1), (1, 2), (2, 3), (3, 0)], []),                               # a ring: sequence parallelism
    ([(0, 1), (0, 2), (0, 3)], []),                                       # a star: one rank feeds three
    ([(2, 2), (-1, 3)], []),                                              # no pair of two known ranks
])
def test_chains_are_simple_paths_only(edges, expected):
    assert sorted(chains(*_pairs(*edges))) == expected


def test_bubble_per_stage_by_construction():
    """Stage r posts its recv at 5 ms; its input comes when stage r-1 sends, after r-1's 20 ms of
    compute and the 0.1 ms sends before it: it waits 20 ms x r + 0.1 ms x (r-1), +15 ms for every
    stage after the late stage 1. Eager sends wait for nobody."""
    summary = pipeline_job(15 * MS, late_stage=1)
    (pipeline,) = summary["skew"]["pipelines"]
    assert pipeline["ranks"] == [0, 1, 2, 3] and pipeline["steps"] == 6
    upstream = [s["upstream_ns"] for s in pipeline["stages"]]
    assert upstream == [0, 20 * MS, 40 * MS + MS // 10 + 15 * MS, 60 * MS + 2 * MS // 10 + 15 * MS]
    assert [s["downstream_ns"] for s in pipeline["stages"]] == [0, 0, 0, 0]
    assert [s["bubble_ns"] for s in pipeline["stages"]] == upstream
    step_ns = summary["skew"]["steps_summary"]["duration_median_ns"]
    assert pipeline["stages"][3]["share"] == pytest.approx(upstream[3] / step_ns)


def test_pipeline_recv_on_the_compute_thread_is_a_dependency_not_serialization():
    summary = pipeline_job(0, late_stage=-1)
    checks = summary["checks"]
    # every stage computes and sends/receives on one thread: a FAIL without the pipeline rule
    assert all(c["shared_lanes"] for c in checks if c["rank"])
    assert {c["status"] for c in checks} == {"PASS"}
    assert all(c["pipeline_ranks"] == [0, 1, 2, 3] for c in checks if c["rank"])
    assert "not serialized communication" in text(checks[1]["message"])
    assert not [f for f in summary["findings"] if f["finding"] == "serialized_communication"]


def _hand_over(rows: list, lane: int, step: int, begin: int, sent: int | None, work: int,
               peers: tuple[int, int]) -> int:
    """One stage's pass: a blocking recv from ``peers[0]`` posted at ``begin`` that returns 0.1 ms
    after that stage's send (``sent``; None: the first stage, nothing to receive), ``work`` of
    compute, an eager 0.1 ms send to ``peers[1]`` (-1: none). Returns when the send starts."""
    ready = begin if sent is None else max(begin, sent + MS // 10)
    if sent is not None:
        rows.append((ev.COMM_OP, ev.COMMUNICATION, ev.RECV, begin, ready, lane, step, ev.RECV, "pp", peers[0]))
    if peers[1] >= 0:
        rows.append((ev.COMM_OP, ev.COMMUNICATION, ev.SEND, ready + work, ready + work + MS // 10, lane, step,
                     ev.SEND, "pp", peers[1]))
    return ready + work


def _stage_steps(delay_ns: int, late_stage: int, lane: int, stages: int = 4, steps: int = 6) -> dict:
    """A one-micro-batch pipeline whose steps follow each other: per stage a forward phase (recv
    from the stage before, 20 ms of compute, + the delay on the late stage, send on) and a
    backward phase (recv from the stage after, 10 ms, send back), the transfers blocking calls
    on ``lane`` (1: the thread that runs the steps). No point marks a recv's return but the
    return itself: only a blocking call tells the replay that the compute waited for it."""
    rows = {r: [] for r in range(stages)}
    step_start = [0] * stages
    for s in range(steps):
        sent, forward_end = None, {}
        for r in range(stages):
            work = 20 * MS + (delay_ns if r == late_stage else 0)
            sent = _hand_over(rows[r], lane, s, step_start[r], sent, work, (r - 1, r + 1 if r < stages - 1 else -1))
            forward_end[r] = sent + MS // 10
            rows[r].append(_phase("forward", step_start[r], forward_end[r], s))
        sent = None
        for r in reversed(range(stages)):
            sent = _hand_over(rows[r], lane, s, forward_end[r], sent, 10 * MS, (r + 1, r - 1))
            end = sent + MS // 10
            rows[r] += [_phase("backward", forward_end[r], end, s),
                        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, step_start[r], end, 1, s, "", "", -1)]
            step_start[r] = end
    return summarize(rows)


def _scenario(summary: dict, name: str) -> dict:
    return next(row for row in summary["whatif"]["scenarios"] if row["name"] == name)


def test_a_recv_on_the_steps_thread_carries_the_late_stage_delay_through_the_replay():
    """Stage 1 computes 15 ms longer: every later stage receives, and so ends, 15 ms later. Without
    it the replay's job step is 15 ms shorter; the recv waits are the pipeline's dependencies,
    which no overlap removes."""
    summary = _stage_steps(15 * MS, late_stage=1, lane=1)
    assert summary["skew"]["straggler"]["rank"] == 1
    assert summary["skew"]["straggler"]["cost_ns"] == 15 * MS
    # each stage is charged its time outside send/recv (from the step's start to its last send/recv or
    # phase) beyond the median stage's: stage 1 45 ms, stage 2 30, stages 0 and 3 30.1 (the construction
    # ends the phase of a pass without a send 0.1 ms after its compute): median 30.1 ms. Once per step:
    # the backward hand-over to stage 0, which waits through stage 1's forward too, does not charge it
    # again (it was 30 ms: counted in both directions)
    assert {r["rank"]: r["waits_caused_ns"] for r in summary["skew"]["ranks"]} == \
        {0: 0, 1: 15 * MS - MS // 10, 2: 0, 3: 0}
    assert _scenario(summary, "no_straggler")["saving_ns"] == 15 * MS
    assert (_scenario(summary, "overlap_communication")["saving_ns"] or 0) <= 0


def test_a_recv_on_another_thread_is_not_taken_as_the_steps_thread_waiting():
    # the same job with the transfers on a worker thread: nothing says the compute waited for
    # them, so the replay keeps each stage's stretch as it was measured and the late stage only
    # shortens its own step
    summary = _stage_steps(15 * MS, late_stage=1, lane=7)
    straggler = summary["skew"]["straggler"] or summary["skew"]["unconfirmed_straggler"]
    assert straggler["rank"] == 1
    assert (straggler.get("cost_ns") or straggler.get("saving_ns")) < 15 * MS


def _gpipe_steps(delay_ns: int, late_stage: int, stages: int = 4, micro: int = 2, steps: int = 6) -> dict:
    """A GPipe schedule as the demo's pp4 runs it, steps back to back on one thread per stage:
    every micro-batch's forward (recv from the stage before, 2 ms, send on), then their backwards in
    reverse order (recv from the stage after, 4 ms, send back); the late stage computes ``delay_ns``
    more a step, spread over its forward passes. Sends are eager (0.1 ms), a recv returns 0.1 ms after
    its send. The last stage runs a micro-batch's forward and backward back to back before its first
    backward send, the others only the backward: the waits of a hand-over depend on its place in the
    schedule, not only on a stage's delay."""
    rows = {r: [] for r in range(stages)}
    free = [0] * stages  # when each stage's thread is next free

    def hand_over(r: int, s: int, sent: int | None, work: int, phase: str, peers: tuple[int, int]) -> int:
        begin = free[r]
        ready = begin if sent is None else max(begin, sent + MS // 10)
        if sent is not None:
            rows[r].append((ev.COMM_OP, ev.COMMUNICATION, ev.RECV, begin, ready, 1, s, ev.RECV, "pp", peers[0]))
        rows[r].append(_phase(phase, ready, ready + work, s))
        free[r] = ready + work
        if 0 <= peers[1] < stages:
            rows[r].append((ev.COMM_OP, ev.COMMUNICATION, ev.SEND, free[r], free[r] + MS // 10, 1, s, ev.SEND, "pp",
                            peers[1]))
            free[r] += MS // 10
        return ready + work

    for s in range(steps):
        start = list(free)
        for _ in range(micro):
            sent = None
            for r in range(stages):
                sent = hand_over(r, s, sent, 2 * MS + (delay_ns // micro if r == late_stage else 0), "forward",
                                 (r - 1, r + 1))
        for _ in range(micro):
            sent = None
            for r in reversed(range(stages)):
                sent = hand_over(r, s, sent, 4 * MS, "backward", (r + 1, r - 1))
        for r in range(stages):
            rows[r].append((ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start[r], free[r], 1, s, "", "", -1))
    return summarize(rows)


def test_a_balanced_gpipe_charges_no_stage_and_a_slow_one_its_delay():
    """Each stage computes 2 x (2 + 4) ms a step outside its sends and recvs, whatever its place: no
    charge in the balanced pipeline (the last stage's forward before its first backward send is not a
    delay), and the slow stage, first, middle or last, is charged exactly its 3 ms a step, once."""
    caused = {r["rank"]: r["waits_caused_ns"] for r in _gpipe_steps(0, late_stage=-1)["skew"]["ranks"]}
    assert caused == {0: 0, 1: 0, 2: 0, 3: 0}
    for late in range(4):
        summary = _gpipe_steps(3 * MS, late_stage=late)
        assert {r["rank"]: r["waits_caused_ns"] for r in summary["skew"]["ranks"]} == \
            {r: 3 * MS if r == late else 0 for r in range(4)}
