"""Stream placement check on traces whose lanes are known by construction."""

from pathlib import Path

import kineto_fixtures as kf
import numpy as np
import pytest
from result_views import summary_json

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline, sources
from distprof.analyses import streams
from distprof.reports.findings import text

CONFIG = config_mod.load()


def host_rank(comm_lane: int, rank: int = 0):
    """One step [0, 100): compute phases on thread 1, two allreduces on ``comm_lane``.

    On thread 2 they run [10, 30) and [40, 60), inside forward [0, 50): overlap 40 of 40.
    On thread 1 they run after backward, [70, 80) and [80, 90): serialized.
    """
    comm = [(10, 30), (40, 60)] if comm_lane == 2 else [(70, 80), (80, 90)]
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, 1),
            (ev.RANGE, ev.PHASE, "forward", 0, 50, 1),
            (ev.RANGE, ev.PHASE, "backward", 50, 70, 1),
            (ev.RANGE, ev.PHASE, "optimizer", 90, 100, 1)]
    rows += [(ev.COMM_OP, ev.COMMUNICATION, "allreduce", s, e, comm_lane) for s, e in comm]
    kind, category, name, start, end, lane = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                            end_ns=end.astype(np.int64), lane=lane.astype(np.int64), step=0, rank=rank)
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=rank), CONFIG)


def gpu_rank(nccl_stream: int, nccl_start: int = 300):
    """Compute kernels on stream 7 over [0, 400) and [450, 900); one AllReduce kernel of 100 ns
    on ``nccl_stream`` starting at ``nccl_start``."""
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1, ev.HOST_THREAD),
            (ev.KERNEL, ev.COMPUTE, "gemm", 0, 400, 7, ev.GPU_STREAM),
            (ev.KERNEL, ev.COMPUTE, "gemm", 450, 900, 7, ev.GPU_STREAM),
            (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", nccl_start,
             nccl_start + 100, nccl_stream, ev.GPU_STREAM)]
    kind, category, name, start, end, lane, lane_kind = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                            end_ns=end.astype(np.int64), lane=lane.astype(np.int64), lane_kind=lane_kind,
                            device=0, step=0)
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=0, device=0), CONFIG)


def test_comm_on_the_compute_thread_fails_and_names_kind_and_lane():
    [row] = streams.rank_stream_checks(host_rank(comm_lane=1), CONFIG)
    assert row.status == "FAIL" and row.check == "stream_placement"
    assert text(row.message) == ("allreduce runs on the compute thread (thread 1): "
                              "communication is serialized with computation")
    assert row.comm_lanes == ["thread 1"] and row.compute_lanes == ["thread 1"]
    assert row.shared_lanes == ["thread 1"] and row.shared_communication_ns == 20
    assert row.exposed_communication_ns == 20 and row.device is None
    assert "separate stream or thread" in text(row.advice)


def test_comm_on_its_own_thread_passes():
    [row] = streams.rank_stream_checks(host_rank(comm_lane=2), CONFIG)
    assert row.status == "PASS", text(row.message)
    assert row.comm_lanes == ["thread 2"] and row.compute_lanes == ["thread 1"]
    assert row.overlap_ratio == 1.0


def test_nccl_on_the_compute_stream_fails():
    [row] = streams.rank_stream_checks(gpu_rank(nccl_stream=7), CONFIG)
    assert row.status == "FAIL" and row.device == 0
    assert text(row.message).startswith("allreduce runs on the compute stream (cuda:0/stream 7)")
    assert row.kinds == ["allreduce"]


def test_separate_stream_without_overlap_warns():
    # the AllReduce runs [900, 1000), after the last gemm: it hides behind nothing
    result = gpu_rank(nccl_stream=13, nccl_start=900)
    [row] = streams.rank_stream_checks(result, CONFIG)
    assert row.status == "WARN" and row.overlap_ratio == 0.0
    assert text(row.message).startswith("separate stream, but communication does not overlap computation")
    # [400, 500): half of it under the second gemm; 50% is under a 60% threshold
    [row] = streams.rank_stream_checks(gpu_rank(nccl_stream=13, nccl_start=400),
                                       config_mod.load(None, {"checks": {"overlap_warn_ratio": 0.6}}))
    assert row.status == "WARN" and row.overlap_ratio == 0.5


def test_separate_stream_with_overlap_passes():
    [row] = streams.rank_stream_checks(gpu_rank(nccl_stream=13), CONFIG)
    assert row.status == "PASS" and row.comm_lanes == ["cuda:0/stream 13"]


def test_rank_without_communication_is_not_applicable():
    events = ev.make_events(kind=ev.RANGE, category=ev.PHASE, name=np.array(["ProfileStep", "forward"], object),
                            start_ns=np.array([0, 0]), end_ns=np.array([10, 5]), step=0)
    [row] = streams.rank_stream_checks(pipeline.reduce_rank(ev.RankTrace(events=events, rank=3), CONFIG), CONFIG)
    assert row.status == "N/A" and row.rank == 3 and "no communication" in text(row.message)


def test_every_rank_gets_a_row_in_the_summary():
    results = [host_rank(comm_lane=1, rank=0), host_rank(comm_lane=2, rank=1)]
    summary = summary_json(pipeline.combine(results, CONFIG, source="test"))
    assert [(c["rank"], c["status"]) for c in summary["checks"]] == [(0, "FAIL"), (1, "PASS")]
    assert summary["findings"][0]["finding"] == "serialized_communication"
    assert summary["findings"][0]["ranks"] == [0]


# -- host collectives: issued on the main thread, executed by a backend thread (issue 22, point 3) --

MS = 1_000_000
DDP = Path(__file__).parent / "data" / "torch_ddp"


def kineto_rank(tmp_path, execution_tid: int | None, compute=((1 * MS, 4 * MS), (5 * MS, 8 * MS))):
    """A CPU-only (gloo) Kineto rank, one step [0, 10 ms) on thread 100: aten::mm at ``compute``, a
    ``c10d::allreduce_`` issue call [4.0, 4.1) ms on thread 100; its execution ``gloo:all_reduce``
    [4.2, 6.0) ms on thread ``execution_tid`` (None: not recorded, the op is all there is)."""
    trace = kf.KinetoTrace(rank=0, world_size=2, pid=100, backend="gloo", base_time_ns=None)
    trace.step(1, 0, 10 * MS)
    trace.cpu_op("## backward ##", 1 * MS, 9 * MS, cat="user_annotation")
    for start, end in compute:
        trace.cpu_op("aten::mm", start, end)
    trace.cpu_op("c10d::allreduce_", 4 * MS, 4 * MS + 100_000)
    if execution_tid is not None:
        trace.cpu_op("gloo:all_reduce", 4 * MS + 200_000, 6 * MS, tid=execution_tid, cat="user_annotation")
    [rank] = sources.read(trace.write(tmp_path / "rank0.json"), CONFIG)
    return pipeline.reduce_rank(rank, CONFIG)


def test_issue_on_main_thread_executed_by_gloo_worker_passes(tmp_path):
    result = kineto_rank(tmp_path, execution_tid=200)
    [row] = streams.rank_stream_checks(result, CONFIG)
    assert row.status == "PASS", text(row.message)
    assert row.comm_lanes == ["thread 200"] and row.compute_lanes == ["thread 100"]
    # communication is the execution [4.2, 6.0) ms; the issue call [4.0, 4.1) ms is not
    assert result.figures.communication_ns == 1_800_000
    assert result.figures.overlap_ns == 1 * MS  # under aten::mm [5, 8) ms


def test_issue_and_blocked_wait_without_compute_under_it_warns(tmp_path):
    # the main thread computes nothing while the worker runs: exposed, not serialized on a lane
    result = kineto_rank(tmp_path, execution_tid=200, compute=((1 * MS, 4 * MS), (6 * MS, 8 * MS)))
    [row] = streams.rank_stream_checks(result, CONFIG)
    assert row.status == "WARN" and row.overlap_ratio == 0.0
    assert result.figures.exposed_communication_ns == 1_800_000


@pytest.mark.parametrize("execution_tid", [100, None], ids=["gloo-range-on-main", "op-only"])
def test_execution_on_the_main_thread_fails(tmp_path, execution_tid):
    result = kineto_rank(tmp_path, execution_tid=execution_tid)
    [row] = streams.rank_stream_checks(result, CONFIG)
    assert row.status == "FAIL" and row.shared_lanes == ["thread 100"]


@pytest.mark.parametrize("name", ["healthy", "nosync"])
def test_real_ddp_job_passes_on_every_rank(name):
    results = [pipeline.reduce_rank(trace, CONFIG) for path in sorted((DDP / name).glob("rank*.json.gz"))
               for trace in sources.read(path, CONFIG)]
    summary = summary_json(pipeline.combine(results, CONFIG, source="kineto"))
    assert [(c["rank"], c["status"]) for c in summary["checks"]] == [(0, "PASS"), (1, "PASS")]
    assert not [f for f in summary["findings"] if f["finding"] == "serialized_communication"]
    for result in results:  # the communication lanes are gloo's workers, not the thread of the steps
        assert all(lane.communication_ns == 0 for lane in result.lanes if lane.computation_ns > 0)


def test_real_blocking_allreduce_warns_but_does_not_fail():
    # --manual-sync: dist.all_reduce per gradient after backward; gloo runs it while the main thread waits
    for path in sorted((DDP / "manual_sync").glob("rank*.json.gz")):
        [trace] = sources.read(path, CONFIG)
        [row] = streams.rank_stream_checks(pipeline.reduce_rank(trace, CONFIG), CONFIG)
        assert row.status == "WARN" and row.overlap_ratio < 0.1


@pytest.mark.parametrize("comm_start, status", [(300, "PASS"), (900, "WARN")])
def test_host_thread_communication_beside_gpu_kernels_is_one_row(comm_start, status):
    """gloo (or MPI) on a host thread, kernels on stream 7 [0, 400) [450, 900): one row for the
    device with both lanes; overlap decides (100 ns at 300: all under the first gemm; at 900: none)."""
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1, ev.HOST_THREAD, -1),
            (ev.KERNEL, ev.COMPUTE, "gemm", 0, 400, 7, ev.GPU_STREAM, 0),
            (ev.KERNEL, ev.COMPUTE, "gemm", 450, 900, 7, ev.GPU_STREAM, 0),
            (ev.COMM_OP, ev.COMMUNICATION, "gloo:all_reduce", comm_start, comm_start + 100, 2, ev.HOST_THREAD, -1)]
    kind, category, name, start, end, lane, lane_kind, device = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                            end_ns=end.astype(np.int64), lane=lane.astype(np.int64), lane_kind=lane_kind,
                            device=device.astype(np.int64), step=0)
    result = pipeline.reduce_rank(ev.RankTrace(events=events, rank=0, device=0), CONFIG)
    [row] = streams.rank_stream_checks(result, CONFIG)
    assert (row.device, row.status) == (0, status)
    assert row.comm_lanes == ["thread 2"] and row.compute_lanes == ["cuda:0/stream 7"]
