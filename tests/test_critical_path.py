"""Critical path across ranks (analyses/critical_path.py): by construction on synthetic jobs whose
path is known, and on the real traces of tests/data (length = the replayed step; the late rank
holds the largest share)."""

from pathlib import Path

import numpy as np
import pytest
from allreduce_jobs import COMM_LANE, CONFIG, MS, OPT, F, T, job, reduced
from result_views import summary_json

from distprof import align, pipeline
from distprof import events as ev
from distprof.analyses import critical_path, replay

DATA = Path(__file__).parent / "data"


def late_job(ranks: int, late: int, delay: int, steps: int = 3) -> list:
    """Each step on every rank: forward (``delay`` longer on rank ``late``), then a blocking
    allreduce on a worker thread from the rank's arrival to ``T`` after the last arrival, then the
    optimizer from the allreduce's end. By construction the path of every step is: the late
    rank's forward, the transfer (last arrival to end), the optimizer of the rank walked from."""
    return job(ranks, [late] * steps, delay)


def summarize(results) -> dict:
    return summary_json(pipeline.combine(results, CONFIG, source="test", world_size=len(results)))


def test_three_ranks_one_late_gives_exactly_the_known_path():
    delay = 30 * MS
    results = late_job(3, late=2, delay=delay)
    summary = summarize(results)
    path = summary["critical_path"]
    comm_lane = results[0].markers.collectives.lane[0]
    step_ns = F + delay + T + OPT
    assert len(path["steps"]) == 3
    for s, step in enumerate(path["steps"]):
        begin = s * step_ns
        # every rank's step is the same: the median is each of them; the walk starts on rank 0
        assert step["rank"] == 0 and step["rank_rule"] == "median" and step["length_ns"] == step_ns
        assert step["segments"] == [
            {"rank": 2, "lane": "thread", "name": "forward", "kind": "compute", "start_ns": begin,
             "end_ns": begin + F + delay, "phase": "forward"},
            {"rank": 0, "lane": comm_lane, "name": "allreduce", "kind": "communication",
             "start_ns": begin + F + delay, "end_ns": begin + F + delay + T, "phase": ""},
            {"rank": 0, "lane": "thread", "name": "optimizer", "kind": "compute",
             "start_ns": begin + F + delay + T, "end_ns": begin + step_ns, "phase": "optimizer"}]
    total = 3 * step_ns
    assert path["length_ns"] == total
    assert path["share_by_rank"] == pytest.approx({"2": (F + delay) / step_ns, "0": (T + OPT) / step_ns})
    assert path["share_by_kind"] == pytest.approx({"compute": (F + delay + OPT) / step_ns,
                                                   "communication": T / step_ns})
    assert path["top"][0] == {"name": "forward", "kind": "compute", "ns": 3 * (F + delay),
                              "share": pytest.approx((F + delay) / step_ns), "ranks": [2]}
    # what each what-if scenario acts on: the straggler's forward, the transfer, the compute
    assert summary["skew"]["straggler"]["rank"] == 2
    assert path["scenario_shares"] == pytest.approx({
        "no_straggler": (F + delay) / step_ns, "overlap_communication": T / step_ns, "comm_bandwidth_x2": T / step_ns,
        "no_dataloader_wait": 0.0, "balanced_ranks": (F + delay + OPT) / step_ns})
    straggler = next(f for f in summary["findings"] if f["finding"] == "straggler")
    assert straggler["evidence"]["critical_path_share"] == pytest.approx((F + delay) / step_ns)
    # forward is 50 of 65 ms of the path: it dominates
    assert path["dominant"] == {"by": "phase", "name": "forward", "share": pytest.approx((F + delay) / step_ns)}


def overlapped_job(ranks: int, steps: int = 3) -> list:
    """Each step: forward F; an allreduce on a worker thread issued at F/4 that ends at F/2 (hidden
    behind forward: nothing waits for it); the optimizer from forward's end."""
    rows = {r: [] for r in range(ranks)}
    for s in range(steps):
        start = s * (F + OPT)
        for r in range(ranks):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start, start + F + OPT, 1, s, ""),
                        (ev.RANGE, ev.PHASE, "forward", start, start + F, 1, s, ""),
                        (ev.COMM_OP, ev.COMMUNICATION, "gloo:all_reduce", start + F // 4, start + F // 2, COMM_LANE,
                         s, "allreduce"),
                        (ev.RANGE, ev.PHASE, "optimizer", start + F, start + F + OPT, 1, s, "")]
    return [reduced(r, rows[r], CONFIG) for r in range(ranks)]


def test_serial_communication_is_on_the_path_overlapped_is_not():
    serial = summarize(late_job(3, late=1, delay=0))["critical_path"]
    overlapped = summarize(overlapped_job(3))["critical_path"]
    assert serial["share_by_kind"]["communication"] == pytest.approx(T / (F + T + OPT))
    assert overlapped["share_by_kind"] == {"compute": 1.0}
    assert [(s["name"], s["end_ns"] - s["start_ns"]) for s in overlapped["steps"][1]["segments"]] == \
        [("forward", F), ("optimizer", OPT)]


def test_the_time_a_rank_waits_is_never_on_the_path():
    path = summarize(late_job(3, late=1, delay=40 * MS))["critical_path"]
    for step in path["steps"]:
        # ranks 0 and 2 wait from their arrival (F) to rank 1's (F + 40 ms): no segment of theirs there
        begin = step["segments"][0]["start_ns"]
        waits = [(begin + F, begin + F + 40 * MS)]
        for seg in step["segments"]:
            if seg["rank"] != 1:
                assert all(seg["end_ns"] <= a or seg["start_ns"] >= b for a, b in waits), seg


def test_an_even_rank_count_walks_from_the_rank_closest_to_the_median_and_says_so():
    path = summarize(late_job(2, late=1, delay=10 * MS))["critical_path"]
    assert all(step["rank_rule"] == "closest_to_median" for step in path["steps"])
    assert all(step["length_ns"] == step["rank_step_ns"] == F + 10 * MS + T + OPT for step in path["steps"])


def test_a_job_without_steps_has_no_critical_path():
    events = ev.make_events(kind=[ev.RANGE], category=[ev.PHASE], name=["forward"], start_ns=[0], end_ns=[MS])
    assert summarize([pipeline.reduce_rank(ev.RankTrace(events=events, rank=0), CONFIG)])["critical_path"] is None


REAL = ["torch_cpu/rank*.json.gz", "torch_cpu_nolate/rank*.json.gz", "kineto_h100/gloo_cuda/rank*.json.gz",
        "demo_ranks/rank*.sqlite", "kineto/hta_trace_filter_2rank/*.json.gz",
        "kineto/hta_nccl_parser_config_1of2/*.json.gz", "kineto/hta_negative_queue_1of16/*.json.gz",
        "kineto/hta_trace_diff_control_1of8/*.json.gz", "kineto_h100/nccl_world1/*.json.gz",
        "torch_cpu_whatif/late/rank*.json.gz", "torch_cpu_whatif/clean/rank*.json.gz",
        "torch_pp/late1/rank*.json.gz", "torch_tpdp/*/rank*.json.gz",
        # a point before the end of the op it waited for (DDP pair: a step 0.2-2.9 ms longer, two
        # segments overlapping), a launch that waited for nothing the walk follows (up to 32 ms short)
        "torch_ddp/healthy/rank*.json.gz", "torch_ddp/late_nosync/rank*.json.gz",
        "torch_pp/comm1_kernel/rank*.json.gz"]


@pytest.mark.parametrize("pattern", REAL)
def test_length_is_the_replayed_step_on_real_traces(pattern):
    summary = pipeline.merge_files(sorted(DATA.glob(pattern)), CONFIG)
    path = summary.critical_path
    aligned = align.align(list(summary.ranks), CONFIG)
    g = replay.build_graph(aligned.results, aligned.matching)
    t, _ = replay.replay(g, g.p_w, g.o_transfer, g.edges)
    replayed = {(int(g.rank_numbers[r]), int(s)): int(t[e] - t[b])
                for r, s, b, e in zip(g.step_rank, g.step_index, g.step_start, g.step_end)}
    assert path is not None and len(path.steps) == summary.whatif.steps
    for step in path.steps:
        durations = sorted(ns for (rank, s), ns in replayed.items() if s == step.step)
        median = float(np.median(durations))
        assert step.rank_step_ns == replayed[(step.rank, step.step)]
        assert step.length_ns == step.rank_step_ns  # the segments tile the step: none overlap, none missing
        assert abs(step.rank_step_ns - median) == min(abs(d - median) for d in durations)
        segs = step.segments
        # one unbroken walk: each segment starts where the one before it ended
        assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))
        assert sum(s.end_ns - s.start_ns for s in segs) == step.rank_step_ns
        assert all(s.kind in critical_path.KINDS and s.end_ns > s.start_ns for s in segs)
    assert abs(sum(path.share_by_rank.values()) - 1) < 1e-9
    # the times walked are the replay's: each op's end is its last arrival + transfer (or its start),
    # each point is the later of (previous point + segment) and (waited op's end + gap)
    times = replay.replay_times(g, g.p_w, g.o_transfer, g.edges)
    assert (times.t == t).all()
    assert (times.end == np.maximum(times.start, times.start[times.last_op] + g.o_transfer)).all()
    via = np.where(g.p_first, g.p_t, np.r_[0, t[:-1]] + g.p_w)
    if g.edges.shape[0]:
        np.maximum.at(via, g.edges[:, 0], times.end[g.edges[:, 1]] + g.edges[:, 2])
    assert (via == t).all()


def test_multi_group_gloo_the_late_rank_holds_the_largest_share():
    # tests/data/torch_cpu: 4 ranks, several process groups, rank 2 late (make_traces.py)
    path = summary_json(pipeline.merge_files(sorted(DATA.glob("torch_cpu/rank*.json.gz")), CONFIG))["critical_path"]
    shares = path["share_by_rank"]
    assert max(shares, key=shares.get) == "2" and shares["2"] > 0.5


def test_nsys_gpu_job_path_is_its_step(tmp_path):
    # 2 ranks of nsys exports written with nsys's own DDL: 4 ProfileStep NVTX ranges, NCCL kernels
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL not available")
    paths = [fx.bulk_kernels(tmp_path / f"rank{r}.sqlite", 4000, rank=r) for r in (0, 1)]
    path = summary_json(pipeline.merge_files(paths, CONFIG))["critical_path"]
    assert len(path["steps"]) == 4
    for step in path["steps"]:
        assert step["length_ns"] == step["rank_step_ns"]
        assert all(a["end_ns"] == b["start_ns"] for a, b in zip(step["segments"], step["segments"][1:]))


def test_a_segment_takes_the_innermost_phase_of_its_own_rank():
    phases = critical_path._PhaseSpans(rank=np.array([0, 0, 1]),
                                       name=np.array(["step", "forward", "backward"], dtype=object),
                                       start=np.array([0, 10, 0]), end=np.array([100, 20, 50]))
    rank = np.array([0, 0, 0, 0, 1, 1])
    at = np.array([5, 15, 50, 150, 15, 60])
    assert critical_path._phases_at(phases, rank, at).tolist() == ["step", "forward", "step", "", "backward", ""]


G = 8 * MS  # unannotated work after a synchronous collective returns: too long after it to read as a wait


def sync_collective_job(ranks: int, late: int, delay: int, lane: int, steps: int = 3) -> list:
    """Each step: forward F (``delay`` longer on rank ``late``), then a synchronous allgather outside
    every phase on ``lane`` (a gloo worker, or the issuing thread itself as MPI's blocking calls)
    from the rank's arrival to ``T`` after the last arrival, then ``G`` of unannotated work and the
    optimizer. The next point comes ``G`` after the op's end, too late to count as a wait: the
    replay keeps the stretch as one segment of the issuing thread, which sits in the allgather
    from its arrival to its end (waiting until the last arrival, then the transfer)."""
    rows = {r: [] for r in range(ranks)}
    start = 0
    for s in range(steps):
        arrive = start + F + np.where(np.arange(ranks) == late, delay, 0)
        done = int(arrive.max()) + T
        for r in range(ranks):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start, done + G + OPT, 1, s, ""),
                        (ev.RANGE, ev.PHASE, "forward", start, int(arrive[r]), 1, s, ""),
                        (ev.COMM_OP, ev.COMMUNICATION, "gloo:all_gather", int(arrive[r]), done, lane, s, "allgather"),
                        (ev.RANGE, ev.PHASE, "optimizer", done + G, done + G + OPT, 1, s, "")]
        start = done + G + OPT
    return [reduced(r, rows[r], CONFIG) for r in range(ranks)]


def test_a_synchronous_collective_outside_phases_is_wait_and_transfer_not_compute():
    delay = 30 * MS
    path = summarize(sync_collective_job(3, late=2, delay=delay, lane=COMM_LANE))["critical_path"]
    step_ns = F + delay + T + G + OPT
    for s, step in enumerate(path["steps"]):
        begin = s * step_ns
        # the walk starts on rank 0 (every rank's step is the same) and stays there: no wait edge
        # takes it to rank 2; rank 0's time in the allgather is its wait for rank 2, then the transfer
        cuts = np.cumsum([begin, F, delay, T, G, OPT]).tolist()
        assert [(seg["rank"], seg["lane"], seg["name"], seg["kind"], seg["start_ns"], seg["end_ns"])
                for seg in step["segments"]] == [
            (0, "thread", "forward", "compute", cuts[0], cuts[1]),
            (0, "thread", "allgather", "wait", cuts[1], cuts[2]),
            (0, "thread", "allgather", "communication", cuts[2], cuts[3]),
            (0, "thread", "(no phase)", "compute", cuts[3], cuts[4]),
            (0, "thread", "optimizer", "compute", cuts[4], cuts[5])]
    assert path["share_by_kind"] == pytest.approx({"compute": (F + G + OPT) / step_ns, "wait": delay / step_ns,
                                                   "communication": T / step_ns})
    # the replay keeps that stretch as a segment of the thread, not a transfer it could shorten
    assert path["scenario_shares"]["comm_bandwidth_x2"] == 0.0
    assert path["scenario_shares"]["balanced_ranks"] == pytest.approx(1.0)


def test_a_blocking_call_on_the_issuing_thread_leads_the_path_to_the_rank_it_waited_for():
    # the same job with the allgather a blocking call of the thread that runs the steps (MPI's
    # blocking calls, gloo's send/recv): the thread resumes when it returns, so it waited for it,
    # and the path goes through the late rank's forward, then the transfer (issue 36: a recv that
    # waits for the previous pipeline stage)
    delay = 30 * MS
    path = summarize(sync_collective_job(3, late=2, delay=delay, lane=1))["critical_path"]
    step_ns = F + delay + T + G + OPT
    for s, step in enumerate(path["steps"]):
        cuts = np.cumsum([s * step_ns, F + delay, T, G, OPT]).tolist()
        assert [(seg["rank"], seg["name"], seg["kind"], seg["start_ns"], seg["end_ns"])
                for seg in step["segments"]] == [
            (2, "forward", "compute", cuts[0], cuts[1]),
            (0, "allgather", "communication", cuts[1], cuts[2]),
            (0, "(no phase)", "compute", cuts[2], cuts[3]),
            (0, "optimizer", "compute", cuts[3], cuts[4])]
    assert path["share_by_rank_waited_for"] == pytest.approx({"2": (F + delay) / step_ns})
    assert path["scenario_shares"]["comm_bandwidth_x2"] == pytest.approx(T / step_ns)


def by_rank_line(path: dict) -> str:
    """The whole "by rank:" line of summary.json's ``critical_path`` (rendered from its typed value, wide
    enough not to wrap it: the console's width would)."""
    from distprof.reports import critical_path_report
    from distprof.sections.whatif import CriticalPath
    typed = CriticalPath.from_json(path)
    return next(line for line in critical_path_report.render(typed, width=1000).splitlines()
                if line.startswith("by rank:"))


def test_a_balanced_job_reads_as_no_culprit_though_the_walk_starts_on_one_rank():
    # two ranks, same work: the even count's tie-break walks every step from rank 0, whose
    # share is then 100% by construction: it must not read as rank 0 setting the step
    summary = summarize(late_job(2, late=1, delay=0))
    path = summary["critical_path"]
    assert summary["skew"]["straggler"] is None
    assert path["share_by_rank"] == {"0": 1.0}
    assert path["rank_reading"] == "no_straggler" and path["walked_from"] == {"0": 3}
    assert path["share_walked_rank"] == 1.0 and path["share_by_rank_waited_for"] == {}
    assert by_rank_line(path) == ("by rank: no straggler named; 100% on the rank each walk starts from (rank 0 "
                                  "in 3 of 3 steps: by construction, not a culprit); waited for: none")


def test_a_late_rank_is_read_from_the_ranks_the_walk_waited_for():
    delay = 30 * MS
    summary = summarize(late_job(2, late=1, delay=delay))
    path = summary["critical_path"]
    step_ns = F + delay + T + OPT
    assert summary["skew"]["straggler"]["rank"] == 1
    assert path["rank_reading"] == "straggler" and path["walked_from"] == {"0": 3}
    assert path["share_walked_rank"] == pytest.approx((T + OPT) / step_ns)
    assert path["share_by_rank_waited_for"] == pytest.approx({"1": (F + delay) / step_ns})
    assert by_rank_line(path) == f"by rank: rank 1 {100 * (F + delay) / step_ns:.0f}%, rank 0 " \
                                 f"{100 * (T + OPT) / step_ns:.0f}%"


def test_real_ddp_healthy_blames_no_rank_and_late_names_the_late_one():
    # tests/data/torch_ddp: 2 ranks; healthy: no straggler; late: rank 1 sleeps 25 ms in forward
    healthy = summary_json(pipeline.merge_files(sorted(DATA.glob("torch_ddp/healthy/rank*.json.gz")),
                                                CONFIG))["critical_path"]
    assert healthy["rank_reading"] == "no_straggler" and healthy["walked_from"] == {"0": 8}
    assert healthy["share_walked_rank"] + sum(healthy["share_by_rank_waited_for"].values()) == pytest.approx(1.0)
    line = by_rank_line(healthy)
    assert line.startswith("by rank: no straggler named; ") and "not a culprit" in line
    late = summary_json(pipeline.merge_files(sorted(DATA.glob("torch_ddp/late/rank*.json.gz")),
                                             CONFIG))["critical_path"]
    assert late["rank_reading"] == "straggler"
    assert max(late["share_by_rank"], key=late["share_by_rank"].get) == "1" and late["share_by_rank"]["1"] > 0.5
    assert by_rank_line(late).startswith("by rank: rank 1 ")
