"""The Distributed Summary of one rank, and its statistics across ranks.

Definitions (docs/summary.md): over the window W (union of ProfileSteps, else the whole trace),
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

Per rank, :func:`rank_view` builds the rank's view (rankview.RankView: window, masks, lanes,
launch join, work sets) once; the figures here and the other per-rank reducers read it.
"""

from __future__ import annotations

import numpy as np

from .. import events as ev
from .. import lanes as lanes_mod
from ..joins import launch_join
from ..rankview import RankView
from ..results import FIGURES, Lane, RankFigures, RankResult
from ..sections.tables import AcrossRanks, FigureStats, RatioStats
from . import intervals as iv

# host API calls that only enqueue communication kernels: not communication on GPU traces
ENQUEUE_PREFIXES = ("nccl", "c10d::", "record_param_comms")
# host-only traces: ops that issue a collective a backend thread may execute (gloo's workers)
ISSUE_PREFIXES = ("c10d::",)
GPU_WORK = (ev.KERNEL, ev.MEMCPY, ev.MEMSET)


def rank_view(events: ev.Events, config: dict, lane_names: dict | None = None) -> RankView:
    """The per-rank view of ``events`` (``lane_names``: thread names by lane id, for the labels):
    built once per rank by pipeline.reduce_rank and handed to every per-rank reducer, so the lane
    sort, the masks and the launch join run once per rank."""
    keys, lane_of = lanes_mod.lane_index(events)
    labels = lanes_mod.labels(keys, lane_names)
    steps = step_rows(events)
    window = analysis_window(events, steps, config["window"])
    gpu, gpu_work = is_gpu_trace(events), events.kind.isin(GPU_WORK)
    comm, compute = work_masks(events, config, lane_of)
    lanes = (keys, lane_of, labels)
    communication, computation, lane_work = work_sets(events, window, (comm, compute), lanes, gpu)
    return RankView(events=events, window=window, steps=steps, gpu=gpu, gpu_work=gpu_work, comm=comm,
                    compute=compute, lanes=tuple(keys), lane_of=lane_of, labels=labels,
                    launch=launch_rows(events, gpu_work),
                    communication=communication, computation=computation, lane_work=lane_work)


def analysis_window(events: ev.Events, steps: np.ndarray, mode: str = "steps") -> iv.IntervalSet:
    """Union of the ProfileStep ranges (``steps``: their rows; mode 'steps'); the whole trace
    span when there are none, or with mode 'all'."""
    if steps.any() and mode == "steps":
        return iv.union(events.start_ns[steps], events.end_ns[steps])
    if not len(events):
        return iv.empty()
    return (np.array([events.start_ns.min()], np.int64), np.array([events.end_ns.max()], np.int64))


def step_rows(events: ev.Events) -> np.ndarray:
    """Boolean mask of the ProfileStep ranges (one per step)."""
    return events.kind.eq(ev.RANGE) & events.name.eq(ev.PROFILE_STEP)


def is_gpu_trace(events: ev.Events) -> bool:
    return bool(events.kind.eq(ev.KERNEL).any())


def launch_rows(events: ev.Events, gpu_work: np.ndarray) -> np.ndarray:
    """Per row, the row of the runtime call that launched it (``gpu_work`` rows only; -1 else, or
    when that call was not captured): the rank's one kernel->launch join (joins.launch_join
    on process and correlation id), which every per-rank analysis reads from the view."""
    work = np.flatnonzero(gpu_work)
    calls = np.flatnonzero(events.kind.eq(ev.RUNTIME))
    out = np.full(len(events), -1, np.int64)
    if work.size and calls.size:
        correlation, pid = events.correlation_id, events.pid
        found = launch_join(correlation[work], correlation[calls], pid[work], pid[calls])
        out[work[found >= 0]] = calls[found[found >= 0]]
    return out


def work_masks(events: ev.Events, config: dict, lane_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the communication rows and the computation rows (``lane_of``: the lane
    index's per-row positions, for the collectives issued on one lane and run on another)."""
    kind, category = events.kind, events.category
    is_range = kind.eq(ev.RANGE)
    host_range = is_range | kind.eq(ev.COMM_OP)
    host_comm = host_range & category.eq(ev.COMMUNICATION)
    if is_gpu_trace(events):
        kernel = kind.eq(ev.KERNEL)
        return kernel & category.eq(ev.COMMUNICATION) | host_comm & ~_enqueue_calls(events), \
            kernel & category.eq(ev.COMPUTE)
    host_comm = host_comm & ~issued_elsewhere(events, host_comm, lane_of)
    compute = is_range & category.eq(ev.COMPUTE)
    if not compute.any():
        non_compute = set(config["phases"]["non_compute"]) | {ev.PROFILE_STEP}
        compute = is_range & category.eq(ev.PHASE) & ~events.name.isin(non_compute)
    return host_comm, compute


def _enqueue_calls(events: ev.Events) -> np.ndarray:
    """Rows that are NCCL/c10d host API calls (by name, per distinct name): on a GPU trace their
    kernels are the communication, the call itself only enqueues them."""
    return events.name.where(lambda name: name.lower().startswith(ENQUEUE_PREFIXES))


def issued_elsewhere(events: ev.Events, comm_mask: np.ndarray, lane_of: np.ndarray) -> np.ndarray:
    """Communication rows that only issue a collective: ``c10d::*`` ops on a lane when the rank's
    other communication rows (the execution, e.g. ``gloo:*`` on gloo's worker threads) lie on
    some other lane. Placement and the summary then read the execution lane, not the caller's."""
    comm_mask = np.asarray(comm_mask, bool)
    issue = comm_mask & events.name.where(lambda name: name.startswith(ISSUE_PREFIXES))
    execution = comm_mask & ~issue
    if not issue.any() or not execution.any():
        return np.zeros(len(events), bool)
    execution_lanes = np.unique(lane_of[execution])
    on_execution_lane = np.isin(lane_of, execution_lanes)
    return issue & (execution_lanes.size - on_execution_lane.astype(np.int64) > 0)


def memory_mask(events: ev.Events) -> np.ndarray:
    """Rows that are memcpy/memset work."""
    return events.kind.isin((ev.MEMCPY, ev.MEMSET))


def work_sets(events: ev.Events, window: iv.IntervalSet, masks: tuple[np.ndarray, np.ndarray],
              lanes: tuple[list, np.ndarray, np.ndarray], gpu: bool):
    """Total communication/computation interval sets inside the window, and the per-lane figures
    (``masks``: work_masks; ``lanes``: the lane keys, per-row positions and labels)."""
    comm_mask, compute_mask = masks
    keys, index, labels = lanes
    starts, ends = events.start_ns, events.end_ns
    lane_work = []
    comm_parts, comp_parts = [], []
    for position in np.unique(index[comm_mask | compute_mask]):  # one iteration per lane, not per event
        on_lane = index == position
        comm = iv.covered_within(starts[on_lane & comm_mask], ends[on_lane & comm_mask], window)
        comp = iv.covered_within(starts[on_lane & compute_mask], ends[on_lane & compute_mask], window)
        if not gpu:
            comp = iv.difference(comp, comm)  # time blocked in communication is not computation
        key = keys[int(position)]
        lane_work.append(Lane(labels[position], key.device, key.kind, iv.total(comm), iv.total(comp),
                              _comm_rules(events, on_lane & comm_mask)))
        comm_parts.append(comm)
        comp_parts.append(comp)
    return _union_all(comm_parts), _union_all(comp_parts), tuple(lane_work)


def _comm_rules(events: ev.Events, rows: np.ndarray) -> tuple[str, ...]:
    """The rules that made these communication rows communication, as the sources said them."""
    rule = events.comm_rule
    return tuple(text for text in rule.texts[np.unique(rule.codes[rows])].tolist() if text) if rows.any() else ()


def exposed_per_op(view: RankView, rows: np.ndarray) -> np.ndarray:
    """Per communication row: the part of it no computation of the rank overlaps (the
    computation set of the Distributed Summary, so inside the analysis window). Where such an op
    waits for a late peer, only this part of the wait can be exposed."""
    start, end = view.events.start_ns[rows], view.events.end_ns[rows]
    return (end - start) - iv.covered_lengths(view.computation, start, end)


def _union_all(sets: list[iv.IntervalSet]) -> iv.IntervalSet:
    if not sets:
        return iv.empty()
    return iv.union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))


def rank_figures(view: RankView,
                 gpu_step_windows: dict | None = None) -> tuple[RankFigures, tuple[Lane, ...]]:
    """The Distributed Summary figures of one rank, and its lanes (``gpu_step_windows``: the
    source's per-step GPU windows)."""
    events, window = view.events, view.window
    comm_set, comp_set = view.communication, view.computation
    memory = memory_mask(events)
    memory_set = iv.covered_within(events.start_ns[memory], events.end_ns[memory], window)
    window_ns = iv.total(window)
    communication_ns = iv.total(comm_set)
    computation_ns = iv.total(comp_set)
    overlap_ns = iv.total(iv.intersect(comm_set, comp_set))
    busy_ns = iv.total(iv.union_sets(iv.union_sets(comm_set, comp_set), memory_set))
    figures = RankFigures(
        window_ns=window_ns, steps=int(view.steps.sum()), communication_ns=communication_ns,
        computation_ns=computation_ns, memory_ns=iv.total(memory_set), overlap_ns=overlap_ns,
        exposed_communication_ns=communication_ns - overlap_ns,
        overlap_ratio=(overlap_ns / communication_ns) if communication_ns else None,
        idle_ns=window_ns - busy_ns,
        gpu_window_ns=gpu_window_ns(gpu_step_windows) if view.gpu else None)
    return figures, view.lane_work


def gpu_window_ns(gpu_step_windows: dict | None) -> int | None:
    """|∪ per-step GPU windows| (span of the GPU work launched in each step); None when the
    source gives none (no steps, or no such windows)."""
    if not gpu_step_windows or not len(gpu_step_windows.get("start_ns", ())):
        return None
    starts = np.asarray(gpu_step_windows["start_ns"], np.int64)
    ends = np.asarray(gpu_step_windows["end_ns"], np.int64)
    return iv.total(iv.union(starts, np.maximum(ends, starts)))


def across_ranks(results: list[RankResult]) -> AcrossRanks:
    """Each Distributed Summary figure across the ranks that have it: min / median / max / mean and
    the ranks holding the max and the min (the first such rank)."""
    return AcrossRanks(**{figure: _figure_stats(figure, [(r.rank, getattr(r.figures, figure)) for r in results])
                          for figure in FIGURES})


def _figure_stats(figure: str, pairs: list[tuple[int, float | None]]) -> FigureStats | RatioStats | None:
    """One figure's statistics over the (rank, value) pairs that have a value: ns figures rounded to ns."""
    pairs = [(rank, value) for rank, value in pairs if value is not None]
    if not pairs:
        return None
    ranks = np.array([rank for rank, _ in pairs])
    values = np.array([value for _, value in pairs], dtype=float)
    is_ns = figure.endswith("_ns")
    as_out = (lambda v: int(round(v))) if is_ns else float
    return (FigureStats if is_ns else RatioStats)(
        min=as_out(values.min()), median=as_out(np.median(values)), max=as_out(values.max()),
        mean=as_out(values.mean()), max_rank=int(ranks[int(values.argmax())]),
        min_rank=int(ranks[int(values.argmin())]))
