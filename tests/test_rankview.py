"""The per-rank view: one frozen value per rank, built once by pipeline.reduce_rank (one lane sort,
one launch join); its launch column equal to the join of any subset of the rows; and the numpy
lane index equal to a plain-Python grouping of the rows."""


import numpy as np
import pytest

from distprof import config as config_mod
from distprof import events as ev
from distprof import lanes, pipeline
from distprof.analyses import distributed
from distprof.joins import launch_join

CONFIG = config_mod.load()


def table():
    """Six rows on four lanes, given out of lane order: (pid, device, lane, lane kind) by construction."""
    keys = [(7, -1, 3, ev.HOST_THREAD), (7, 0, 9, ev.GPU_STREAM), (5, -1, 3, ev.HOST_THREAD),
            (7, -1, 3, ev.HOST_THREAD), (7, 0, 2, ev.GPU_STREAM), (5, -1, 3, ev.HOST_THREAD)]
    pid, device, lane, kind = (np.array(column) for column in zip(*keys))
    n = len(keys)
    start = np.arange(n, dtype=np.int64) * 10
    return ev.make_events(kind=np.where(kind == ev.GPU_STREAM, ev.KERNEL, ev.RANGE), category=ev.COMPUTE,
                          name=np.array([f"op{i}" for i in range(n)], object), start_ns=start,
                          end_ns=start + 5, pid=pid, device=device, lane=lane, lane_kind=kind)


def gpu_table():
    """GPU work and the runtime calls that launched it, in two processes that reuse correlation
    ids: a step, kernels (one an NCCL allreduce), a memcpy, a kernel whose call was not captured."""
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, 1, -1, 1, -1),
            (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 1, 2, 1, -1, 1, 11),
            (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 3, 4, 2, -1, 1, 11),
            (ev.RUNTIME, ev.RUNTIME_CAT, "cudaMemcpyAsync", 5, 6, 1, -1, 1, 12),
            (ev.KERNEL, ev.COMPUTE, "gemm", 10, 20, 1, 0, 7, 11),
            (ev.KERNEL, ev.COMMUNICATION, "ncclAllReduce", 15, 40, 2, 0, 8, 11),
            (ev.MEMCPY, ev.MEMORY, "HtoD", 20, 30, 1, 0, 7, 12),
            (ev.KERNEL, ev.COMPUTE, "relu", 50, 60, 1, 0, 7, 13)]
    kind, category, name, *ints = (np.array(column, dtype=object) for column in zip(*rows))
    start, end, pid, device, lane, corr = (column.astype(np.int64) for column in ints)
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start, end_ns=end, pid=pid,
                          device=device, lane=lane, correlation_id=corr, step=0,
                          lane_kind=np.where(device >= 0, ev.GPU_STREAM, ev.HOST_THREAD))


def test_lane_index_matches_plain_grouping():
    events = table()
    rows = list(zip(events["pid"].tolist(), events["device"].tolist(), events["lane"].tolist(),
                    events["lane_kind"].values().tolist()))
    expected_keys = sorted(set(rows))
    keys, index = lanes.lane_index(events)
    assert [tuple(k) for k in keys] == expected_keys
    assert index.tolist() == [expected_keys.index(row) for row in rows]


def test_view_holds_the_pieces_and_is_frozen():
    view = distributed.rank_view(gpu_table(), CONFIG, {1: "MainThread"})
    assert [tuple(key) for key in view.lanes] == [(1, -1, 1, ev.HOST_THREAD), (1, 0, 7, ev.GPU_STREAM),
                                                  (2, -1, 1, ev.HOST_THREAD), (2, 0, 8, ev.GPU_STREAM)]
    assert view.labels.tolist() == ["thread 1 (MainThread)", "cuda:0/stream 7", "thread 1 (MainThread)",
                                    "cuda:0/stream 8"]
    assert view.gpu and view.steps.tolist() == [True] + [False] * 7
    assert [w.tolist() for w in view.window] == [[0], [100]]
    assert np.flatnonzero(view.comm).tolist() == [5] and np.flatnonzero(view.compute).tolist() == [4, 7]
    assert view.launch.tolist() == [-1, -1, -1, -1, 1, 2, 3, -1]  # by process and correlation id
    with pytest.raises(AttributeError):  # frozen: a new view is made, never this one changed
        view.window = ([], [])


def test_launch_column_is_the_join_of_any_subset_of_rows():
    """One join per rank serves every analysis: a GPU op's launching call depends on the op and
    all the calls, never on which other ops were joined with it."""
    events = gpu_table()
    view = distributed.rank_view(events, CONFIG)
    calls = np.flatnonzero(events["kind"].eq(ev.RUNTIME))
    correlation, pid = events["correlation_id"], events["pid"]
    for rows in (np.array([5]), np.array([4, 7]), np.array([6, 5]), np.arange(4, 8)):
        found = launch_join(correlation[rows], correlation[calls], pid[rows], pid[calls])
        assert view.launch[rows].tolist() == np.where(found >= 0, calls[np.maximum(found, 0)], -1).tolist()


def test_reduce_rank_builds_the_view_once(monkeypatch):
    counts = {"view": 0, "lanes": 0, "join": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(distributed, "rank_view", counted("view", distributed.rank_view))
    monkeypatch.setattr(lanes, "lane_index", counted("lanes", lanes.lane_index))
    monkeypatch.setattr(distributed, "launch_join", counted("join", distributed.launch_join))
    result = pipeline.reduce_rank(ev.RankTrace(events=gpu_table(), rank=0, device=0), CONFIG)
    assert counts == {"view": 1, "lanes": 1, "join": 1}
    assert result.figures.steps == 1 and result.gpu_gaps is not None
    assert result.markers.collectives.launch_ns == [3]  # the allreduce: launched at 3 by process 2


def test_empty_table_has_an_empty_view():
    view = distributed.rank_view(table().take(slice(0, 0)), CONFIG)
    assert view.lanes == () and view.lane_of.size == 0 and view.launch.size == 0
    assert view.window[0].size == 0 and view.lane_work == ()
