"""The Distributed Summary of one rank, and its statistics across ranks.

Definitions (DESIGN.md): over the window W (union of ProfileSteps, else the whole trace),
Communication = |∪ comm|, Computation = |∪ compute|, Overlap = |comm ∩ compute|,
Memory = |∪ memcpy/memset|, Exposed = Communication − Overlap,
Idle = |W| − |comm ∪ compute ∪ memory|.
GPU traces: computation = kernels, communication = NCCL kernels plus the host ranges that are
real transfers (MPI calls, gloo:*), not the NCCL/c10d API calls that only enqueue kernels.
Host-only traces: communication ranges, and computation = COMPUTE ranges (the aten ops of a CPU
PyTorch trace) when there are any, else compute phases; either excludes the communication
nested in it on the same thread (a thread blocked in MPI is not computing). A collective is
communication where it *executes*: a ``c10d::*`` op whose rank runs its collectives on another
thread (gloo's ``gloo:*`` worker ranges) only issues them; that call is host time, not
communication on the calling thread (the way NCCL API calls are not communication on GPU traces).
"""

from __future__ import annotations

import numpy as np

from .. import events as ev
from .. import lanes as lanes_mod
from .. import rankview
from ..results import FIGURES, Lane, RankFigures
from . import intervals as iv

# host API calls that only enqueue communication kernels: not communication on GPU traces
ENQUEUE_PREFIXES = ("nccl", "c10d::", "record_param_comms")
# host-only traces: ops that issue a collective a backend thread may execute (gloo's workers)
ISSUE_PREFIXES = ("c10d::",)


def analysis_window(events: ev.Table, mode: str = "steps") -> iv.IntervalSet:
    """Union of the ProfileStep ranges (mode 'steps'); the whole trace span when there are
    none, or with mode 'all'. Built once per rank inside a ``rankview.shared`` block."""
    return rankview.once(events, ("window", mode), lambda: _analysis_window(events, mode))


def step_rows(events: ev.Table) -> np.ndarray:
    """Boolean mask of the ProfileStep ranges (one per step)."""
    return rankview.once(events, ("step_rows",), lambda: events["kind"].eq(ev.RANGE)
                         & events["name"].eq(ev.PROFILE_STEP))


def _analysis_window(events: ev.Table, mode: str) -> iv.IntervalSet:
    steps = step_rows(events)
    if steps.any() and mode == "steps":
        return iv.union(events["start_ns"][steps], events["end_ns"][steps])
    if not len(events):
        return iv.empty()
    return (np.array([events["start_ns"].min()], np.int64), np.array([events["end_ns"].max()], np.int64))


def is_gpu_trace(events: ev.Table) -> bool:
    return bool(events["kind"].eq(ev.KERNEL).any())


def work_masks(events: ev.Table, config: dict) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the communication rows and the computation rows (built once per rank
    inside a ``rankview.shared`` block; read-only)."""
    non_compute = tuple(sorted(set(config["phases"]["non_compute"])))
    return rankview.once(events, ("work_masks", non_compute), lambda: _work_masks(events, config))


def _work_masks(events: ev.Table, config: dict) -> tuple[np.ndarray, np.ndarray]:
    kind, category = events["kind"], events["category"]
    is_range = kind.eq(ev.RANGE)
    host_range = is_range | kind.eq(ev.COMM_OP)
    host_comm = host_range & category.eq(ev.COMMUNICATION)
    if is_gpu_trace(events):
        kernel = kind.eq(ev.KERNEL)
        return kernel & category.eq(ev.COMMUNICATION) | host_comm & ~_enqueue_calls(events), \
            kernel & category.eq(ev.COMPUTE)
    host_comm = host_comm & ~issued_elsewhere(events, host_comm)
    compute = is_range & category.eq(ev.COMPUTE)
    if not compute.any():
        non_compute = set(config["phases"]["non_compute"]) | {ev.PROFILE_STEP}
        compute = is_range & category.eq(ev.PHASE) & ~events["name"].isin(non_compute)
    return host_comm, compute


def _enqueue_calls(events: ev.Table) -> np.ndarray:
    """Rows that are NCCL/c10d host API calls (by name, per distinct name): on a GPU trace their
    kernels are the communication, the call itself only enqueues them."""
    return events["name"].where(lambda name: name.lower().startswith(ENQUEUE_PREFIXES))


def issued_elsewhere(events: ev.Table, comm_mask: np.ndarray) -> np.ndarray:
    """Communication rows that only issue a collective: ``c10d::*`` ops on a lane when the rank's
    other communication rows (the execution, e.g. ``gloo:*`` on gloo's worker threads) lie on
    some other lane. Placement and the summary then read the execution lane, not the caller's."""
    comm_mask = np.asarray(comm_mask, bool)
    issue = comm_mask & events["name"].where(lambda name: name.startswith(ISSUE_PREFIXES))
    execution = comm_mask & ~issue
    if not issue.any() or not execution.any():
        return np.zeros(len(events), bool)
    _, index = lanes_mod.lane_index(events)
    execution_lanes = np.unique(index[execution])
    on_execution_lane = np.isin(index, execution_lanes)
    return issue & (execution_lanes.size - on_execution_lane.astype(np.int64) > 0)


def memory_mask(events: ev.Table) -> np.ndarray:
    """Rows that are memcpy/memset work."""
    return events["kind"].isin((ev.MEMCPY, ev.MEMSET))


def work_sets(events: ev.Table, config: dict, window: iv.IntervalSet, lane_names: dict | None = None):
    """Total communication/computation interval sets inside the window, and the per-lane figures
    (built once per rank inside a ``rankview.shared`` block, where the window is the rank's
    analysis window and the lane names its trace's)."""
    key = ("work_sets", config["window"], tuple(sorted(set(config["phases"]["non_compute"]))))
    return rankview.once(events, key, lambda: _work_sets(events, config, window, lane_names))


def exposed_per_op(events: ev.Table, config: dict, rows: np.ndarray) -> np.ndarray:
    """Per communication row: the part of it no computation of the rank overlaps (the
    computation set of the Distributed Summary, so inside the analysis window). Where such an op
    waits for a late peer, only this part of the wait can be exposed."""
    _, computation, _ = work_sets(events, config, analysis_window(events, config["window"]))
    start, end = events["start_ns"][rows], events["end_ns"][rows]
    return (end - start) - iv.covered_lengths(computation, start, end)


def _work_sets(events: ev.Table, config: dict, window: iv.IntervalSet, lane_names: dict | None):
    comm_mask, compute_mask = work_masks(events, config)
    starts, ends = events["start_ns"], events["end_ns"]
    keys, index = lanes_mod.lane_index(events)
    gpu = is_gpu_trace(events)
    lanes = []
    comm_parts, comp_parts = [], []
    for position in np.unique(index[comm_mask | compute_mask]):  # one iteration per lane, not per event
        on_lane = index == position
        comm = iv.covered_within(starts[on_lane & comm_mask], ends[on_lane & comm_mask], window)
        comp = iv.covered_within(starts[on_lane & compute_mask], ends[on_lane & compute_mask], window)
        if not gpu:
            comp = iv.difference(comp, comm)  # time blocked in communication is not computation
        key = keys[int(position)]
        lanes.append(Lane(lanes_mod.label(key, lane_names), key.device, key.kind, iv.total(comm), iv.total(comp)))
        comm_parts.append(comm)
        comp_parts.append(comp)
    return _union_all(comm_parts), _union_all(comp_parts), tuple(lanes)


def _union_all(sets: list[iv.IntervalSet]) -> iv.IntervalSet:
    if not sets:
        return iv.empty()
    return iv.union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))


def rank_figures(events: ev.Table, config: dict, lane_names: dict | None = None,
                 gpu_step_windows: dict | None = None) -> tuple[RankFigures, tuple[Lane, ...]]:
    """The Distributed Summary figures of one rank, and its lanes (``lane_names``: thread names
    by lane id, for the labels; ``gpu_step_windows``: the source's per-step GPU windows)."""
    window = analysis_window(events, config["window"])
    comm_set, comp_set, lanes = work_sets(events, config, window, lane_names)
    memory = memory_mask(events)
    memory_set = iv.covered_within(events["start_ns"][memory], events["end_ns"][memory], window)
    window_ns = iv.total(window)
    communication_ns = iv.total(comm_set)
    computation_ns = iv.total(comp_set)
    overlap_ns = iv.total(iv.intersect(comm_set, comp_set))
    busy_ns = iv.total(iv.union_sets(iv.union_sets(comm_set, comp_set), memory_set))
    figures = RankFigures(
        window_ns=window_ns, steps=int(step_rows(events).sum()), communication_ns=communication_ns,
        computation_ns=computation_ns, memory_ns=iv.total(memory_set), overlap_ns=overlap_ns,
        exposed_communication_ns=communication_ns - overlap_ns,
        overlap_ratio=(overlap_ns / communication_ns) if communication_ns else None,
        idle_ns=window_ns - busy_ns,
        gpu_window_ns=gpu_window_ns(gpu_step_windows) if is_gpu_trace(events) else None)
    return figures, lanes


def gpu_window_ns(gpu_step_windows: dict | None) -> int | None:
    """|∪ per-step GPU windows| (span of the GPU work launched in each step); None when the
    source gives none (no steps, or no such windows)."""
    if not gpu_step_windows or not len(gpu_step_windows.get("start_ns", ())):
        return None
    starts = np.asarray(gpu_step_windows["start_ns"], np.int64)
    ends = np.asarray(gpu_step_windows["end_ns"], np.int64)
    return iv.total(iv.union(starts, np.maximum(ends, starts)))


def across_ranks(rank_rows: list[dict], figures=FIGURES) -> dict:
    """min / median / max / mean and the rank holding the max, for each figure."""
    stats = {}
    for figure in figures:
        pairs = [(row["rank"], row[figure]) for row in rank_rows if row.get(figure) is not None]
        if not pairs:
            stats[figure] = None
            continue
        ranks = np.array([p[0] for p in pairs])
        values = np.array([p[1] for p in pairs], dtype=float)
        is_int = figure.endswith("_ns")
        as_out = (lambda v: int(round(v))) if is_int else float
        stats[figure] = {"min": as_out(values.min()), "median": as_out(np.median(values)),
                         "max": as_out(values.max()), "mean": as_out(values.mean()),
                         "max_rank": int(ranks[int(values.argmax())]),
                         "min_rank": int(ranks[int(values.argmin())])}
    return stats
