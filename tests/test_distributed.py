"""Distributed Summary figures on traces whose intervals are known by construction."""

import numpy as np
from msgspec.structs import replace
from result_views import rank_figures, rank_row, summary_json  # noqa: F401

from distprof import align, pipeline
from distprof import config as config_mod
from distprof import events as ev
from distprof.reports.findings import text as words  # a reason code in words, as reports give it

CONFIG = config_mod.load()


def host_trace(shift: int = 0):
    """Two steps on a host-only rank; main thread = lane 1, comm thread = lane 2.

    comm: [40,70) on lane 2 (hides behind backward), [80,95) serial on lane 1, [150,160)
    nested in backward on lane 1 (blocked, so not computation), [250,260) after the last step.
    """
    rows = [  # kind, category, name, start, end, lane
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, 1),
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 100, 200, 1),
        (ev.RANGE, ev.PHASE, "forward", 0, 30, 1),
        (ev.RANGE, ev.PHASE, "backward", 30, 80, 1),
        (ev.COMM_OP, ev.COMMUNICATION, "allreduce", 40, 70, 2),
        (ev.COMM_OP, ev.COMMUNICATION, "allreduce", 80, 95, 1),
        (ev.RANGE, ev.PHASE, "optimizer", 95, 100, 1),
        (ev.RANGE, ev.PHASE, "forward", 100, 130, 1),
        (ev.RANGE, ev.PHASE, "backward", 130, 180, 1),
        (ev.COMM_OP, ev.COMMUNICATION, "allreduce", 150, 160, 1),
        (ev.RANGE, ev.PHASE, "optimizer", 185, 195, 1),
        (ev.RANGE, ev.PHASE, "Dataloader", 195, 200, 1),
        (ev.COMM_OP, ev.COMMUNICATION, "allreduce", 250, 260, 2),
    ]
    kind, category, name, start, end, lane = (np.array(c, dtype=object) for c in zip(*rows))
    start = start.astype(np.int64)
    step = np.select([start < 100, start < 200], [0, 1], -1)
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start + shift,
                          end_ns=end.astype(np.int64) + shift, lane=lane.astype(np.int64), step=step)


def gpu_trace():
    rows = [  # kind, category, name, start, end, stream
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1),
        (ev.KERNEL, ev.COMPUTE, "gemm", 0, 400, 7),
        (ev.KERNEL, ev.COMPUTE, "gemm", 450, 900, 7),
        (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce", 300, 500, 15),
        (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce", 350, 600, 16),
        (ev.MEMCPY, ev.MEMORY, "memcpy HtoD", 900, 950, 7),
        (ev.KERNEL, ev.COMPUTE, "gemm", 1000, 1100, 7),
    ]
    kind, category, name, start, end, lane = (np.array(c, dtype=object) for c in zip(*rows))
    lane_kind = np.where(kind == ev.RANGE, ev.HOST_THREAD, ev.GPU_STREAM)
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=lane.astype(np.int64), lane_kind=lane_kind, device=0)


def test_host_trace_figures():
    figures = rank_figures(host_trace(), CONFIG)
    assert figures["window_ns"] == 200
    assert figures["steps"] == 2
    assert figures["communication_ns"] == 30 + 15 + 10
    assert figures["computation_ns"] == 80 + 85 + 10 - 10
    assert figures["overlap_ns"] == 30
    assert figures["exposed_communication_ns"] == 25
    assert figures["overlap_ratio"] == 30 / 55
    assert figures["idle_ns"] == 10
    assert figures["comm_lanes"] == ["thread 1", "thread 2"]
    assert figures["compute_lanes"] == ["thread 1"]
    by_lane = {lane["lane"]: lane for lane in figures["lanes"]}
    assert by_lane["thread 2"]["communication_ns"] == 30
    assert by_lane["thread 1"]["communication_ns"] == 25


def test_gpu_trace_uses_kernels_and_counts_streams_once():
    figures = rank_figures(gpu_trace(), CONFIG)
    assert figures["window_ns"] == 1000
    assert figures["communication_ns"] == 300          # [300,600) over two streams, once
    assert figures["computation_ns"] == 850
    assert figures["overlap_ns"] == 100 + 150
    assert figures["exposed_communication_ns"] == 50
    assert figures["memory_ns"] == 50                  # memcpy [900,950)
    assert figures["idle_ns"] == 50                    # W − |comm ∪ compute ∪ memory|
    assert figures["comm_lanes"] == ["cuda:0/stream 15", "cuda:0/stream 16"]
    assert figures["compute_lanes"] == ["cuda:0/stream 7"]


def test_window_all_takes_the_whole_trace():
    config = config_mod.load(None, {"window": "all"})
    figures = rank_figures(gpu_trace(), config)
    assert figures["window_ns"] == 1100
    assert figures["computation_ns"] == 950


def test_no_steps_means_whole_trace_and_no_comm_means_no_ratio():
    events = ev.make_events(kind=ev.KERNEL, category=ev.COMPUTE, name=np.array(["k", "k"], dtype=object),
                            start_ns=np.array([10, 50]), end_ns=np.array([20, 60]), lane_kind=ev.GPU_STREAM)
    figures = rank_figures(events, CONFIG)
    assert figures["window_ns"] == 50
    assert figures["computation_ns"] == 20
    assert figures["overlap_ratio"] is None
    assert figures["idle_ns"] == 30


def test_empty_rank():
    figures = rank_figures(ev.empty_events(), CONFIG)
    assert figures["window_ns"] == 0 and figures["communication_ns"] == 0


def test_across_ranks_and_combine():
    results = []
    for rank, shift in ((0, 0), (1, 1_000)):
        trace = ev.RankTrace(events=host_trace(shift), rank=rank, source_file=f"r{rank}")
        results.append(pipeline.reduce_rank(trace, CONFIG))
    results[1] = replace(results[1], figures=replace(results[1].figures, communication_ns=99))  # rank 1 the max
    summary = summary_json(pipeline.combine(results, CONFIG, source="test", world_size=3))
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    comm = summary["across_ranks"]["communication_ns"]
    assert (comm["min"], comm["max"], comm["max_rank"], comm["median"]) == (55, 99, 1, 77)
    assert summary["missing_ranks"] == [2]
    assert any("no data for rank 2 " in w for w in summary["warnings"])
    for key in ("world_size", "source", "ranks", "checks", "skew", "findings", "warnings"):
        assert key in summary
    row = summary["ranks"][0]
    for key in ("window_ns", "steps", "communication_ns", "computation_ns", "overlap_ns",
                "exposed_communication_ns", "overlap_ratio", "idle_ns", "comm_lanes", "compute_lanes",
                "clock_offset_ns", "clock_uncertainty_ns"):
        assert key in row


def test_unknown_ranks_are_numbered_in_input_order():
    results = [pipeline.reduce_rank(ev.RankTrace(events=host_trace(), rank=r, source_file=f"f{i}"), CONFIG)
               for i, r in enumerate((None, 0, None, 0))]
    results, warnings = align.assign_ranks(results)
    assert [(r.source_file, r.rank) for r in results] == [("f1", 0), ("f0", 1), ("f2", 2), ("f3", 3)]
    assert len(warnings) == 1 and "f3" in words(warnings[0])


def test_rank_markers_steps_phases_collectives():
    result = rank_row(pipeline.reduce_rank(ev.RankTrace(events=host_trace(), rank=0), CONFIG))
    assert result["step_bounds"] == {"step": [0, 1], "start_ns": [0, 100], "end_ns": [100, 200]}
    phases = result["phases"]
    rows = list(zip(phases["step"], phases["name"], phases["start_ns"], phases["end_ns"], phases["busy_ns"]))
    assert (0, "backward", 30, 80, 50) in rows
    assert (1, "Dataloader", 195, 200, 5) in rows
    assert result["collectives"]["start_ns"] == [40, 80, 150, 250]
    assert result["collectives"]["name"] == ["allreduce"] * 4
