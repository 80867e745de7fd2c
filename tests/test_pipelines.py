"""Send/recv pipelines (issue 36, point 5): recognised from the matched pairs, each stage's bubble
per step, and a recv waiting for its input is a dependency, not serialized communication. Jobs
whose timing is fixed by construction (test_blame's pipeline)."""

from pathlib import Path

import numpy as np
import pytest
from result_views import summary_json
from test_blame import MS, _phase, pipeline_job, summarize
from test_kineto_p2p import OP, RANGE, peer_of, raw_events

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline
from distprof.analyses.pipelines import chains
from distprof.analyses.replay import JOIN_SLACK_NS
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


def _gpipe_steps(delay_ns: int, late_stage: int, stages: int = 4, micro: int = 2, steps: int = 6,
                 pause: bool = False, recv_lag: int = MS // 10) -> dict:
    """A GPipe schedule as the demo's pp4 runs it, steps back to back on one thread per stage:
    every micro-batch's forward (recv from the stage before, 2 ms, send on), then their backwards in
    reverse order (recv from the stage after, 4 ms, send back); the late stage computes ``delay_ns``
    more a step, spread over its forward passes. Sends are eager (0.1 ms), a recv returns 0.1 ms after
    its send (``recv_lag`` after its send starts). The last stage runs a micro-batch's forward and
    backward back to back before its first backward send, the others only the backward: the waits of
    a hand-over depend on its place in the schedule, not only on a stage's delay. ``pause``: the whole
    delay in the first micro-batch's forward instead."""
    rows = {r: [] for r in range(stages)}
    free = [0] * stages  # when each stage's thread is next free

    def hand_over(r: int, s: int, sent: int | None, work: int, phase: str, peers: tuple[int, int]) -> int:
        begin = free[r]
        ready = begin if sent is None else max(begin, sent + recv_lag)
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
        for m in range(micro):
            sent = None
            for r in range(stages):
                extra = (delay_ns if m == 0 else 0) if pause else delay_ns // micro
                sent = hand_over(r, s, sent, 2 * MS + (extra if r == late_stage else 0), "forward", (r - 1, r + 1))
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


def test_the_replay_removes_a_late_stage_whatever_its_place():
    """The no-straggler replay of a GPipe with one stage 3 ms slow a step predicts the step of the same
    pipeline balanced (measured: 30.8 ms against 33.8). Stages run different segments (the first has
    no recv, the last no forward send), so the stage's lateness is its time outside communication per
    phase beyond the other stages' (before, the first stage's fix was priced under the floor and
    withheld). The last stage is predicted 0.6 ms under the balanced step, by this replay as by the
    one before it: asserted as it is."""
    balanced = _gpipe_steps(0, late_stage=-1)["whatif"]["measured_step_ns"]
    for late in range(4):
        summary = _gpipe_steps(3 * MS, late_stage=late)
        assert summary["skew"]["straggler"]["rank"] == late
        assert summary["whatif"]["measured_step_ns"] - balanced in (3 * MS, 3 * MS - MS // 10)
        error = _scenario(summary, "no_straggler")["predicted_step_ns"] - balanced
        assert abs(error) <= (MS // 10 if late < 3 else 6 * MS // 10)


def test_balanced_stages_predict_the_balanced_pipeline():
    """balanced_ranks on a pipeline sets every stage's time outside communication in a step's phase
    to the stages' median there: with one stage 3 ms slow a step, first, middle or last, it predicts
    the balanced pipeline's measured step within 0.1 ms (it compared unlike segments across stages
    before: the first stage 1.5 ms over, the last 0.6 ms under), and on the balanced pipeline it saves
    nothing."""
    balanced = _gpipe_steps(0, late_stage=-1)["whatif"]
    assert _scenario({"whatif": balanced}, "balanced_ranks")["saving_ns"] == 0
    for late in range(4):
        summary = _gpipe_steps(3 * MS, late_stage=late)
        error = _scenario(summary, "balanced_ranks")["predicted_step_ns"] - balanced["measured_step_ns"]
        assert abs(error) <= MS // 10, (late, error)


def test_a_recv_recorded_as_ended_before_its_send_began_still_waited_for_it():
    """A recv whose range closes 0.5 ms before its send's opens (two ranks record one hand-over at
    different moments of it) joined that send: the replay runs (it was skipped before), reproduces the
    measured steps, and removing the late first stage predicts the balanced pipeline's step."""
    balanced = _gpipe_steps(0, late_stage=-1, recv_lag=-MS // 2)["whatif"]
    assert balanced["replay_error"] == 0
    summary = _gpipe_steps(3 * MS, late_stage=0, recv_lag=-MS // 2)
    assert summary["whatif"]["replay_error"] == 0 and summary["skew"]["straggler"]["rank"] == 0
    assert _scenario(summary, "no_straggler")["predicted_step_ns"] == balanced["measured_step_ns"]


COMM1 = sorted((Path(__file__).resolve().parent / "data" / "torch_pp" / "comm1_kernel").glob("rank*.json.gz"))
COMM1_EFFECT_NS = 20_399_930  # its median step less its paired clean runs' (tests/data/torch_pp/README.md)


def _raw_hand_overs(paths: list[Path]) -> list[tuple]:
    """Per send/recv pair (the k-th c10d::send from a to b with the k-th c10d::recv_ on b from a), read
    with the standard library: (the send op's start, its gloo:send range's start, the gloo:recv range's
    end), in µs. Each op's gloo range is the one of the same index in start order."""
    ops = {}
    for path in paths:
        rank, events = raw_events(path)
        for side in ("send", "recv"):
            op = sorted((e for e in events if e["name"] == OP[side]), key=lambda e: e["ts"])
            ranged = sorted((e for e in events if e["name"] == RANGE[side]), key=lambda e: e["ts"])
            ops[rank, side] = list(zip(op, ranged, strict=True))
    pairs = []
    for sender, receiver in {(a, peer_of(o)) for (a, side), rows in ops.items() if side == "send" for o, _ in rows}:
        sends = [row for row in ops[sender, "send"] if peer_of(row[0]) == receiver]
        recvs = [row for row in ops[receiver, "recv"] if peer_of(row[0]) == sender]
        pairs += [(s_op["ts"], s_range["ts"], r_range["ts"] + r_range["dur"])
                  for (s_op, s_range), (_, r_range) in zip(sends, recvs, strict=True)]
    return pairs


def test_a_real_pipeline_stage_slow_before_its_send_is_named_and_priced():
    """A real 4-stage gloo pipeline (kernel waits of 2 ms), stage 1 pausing 20.8 ms before its first
    backward send each step: 11 of its 96 recvs are recorded as ended before their send's gloo range
    began (by up to 0.69 ms; every send op began before), and those recvs still waited for their send.
    Stage 1 is named, and the fix is priced within 15% of the effect measured against paired runs
    without the pause (it was priced at 11.3 ms, 45% under, while the replay took those recvs for
    transfers that needed no send)."""
    pairs = _raw_hand_overs(COMM1)
    early = [send_range - recv_end for _, send_range, recv_end in pairs if recv_end < send_range]
    assert len(pairs) == 96 and len(early) == 11 and max(early) * 1000 < JOIN_SLACK_NS
    assert all(send_op <= recv_end for send_op, _, recv_end in pairs)
    summary = summary_json(pipeline.merge_files(COMM1, config_mod.load()))
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 1
    assert abs(straggler["cost_ns"] - COMM1_EFFECT_NS) <= 0.15 * COMM1_EFFECT_NS
    # balancing the stages removes the same pause: 21.8 ms (it was 0.57 ms, segments compared across
    # unlike stages)
    balanced = _scenario(summary, "balanced_ranks")["saving_ns"]
    assert abs(balanced - COMM1_EFFECT_NS) <= 0.15 * COMM1_EFFECT_NS
