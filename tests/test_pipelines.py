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
    # the backward hand-over to stage 0 waits through stage 1's forward too: the delay charged at its
    # forward send is carried there, not charged again (it was 30 ms: counted in both directions)
    assert {r["rank"]: r["waits_caused_ns"] for r in summary["skew"]["ranks"]} == {0: 0, 1: 15 * MS, 2: 0, 3: 0}
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
