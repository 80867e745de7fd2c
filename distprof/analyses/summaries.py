"""The summary tables people know from the Paddle profiler, per rank and merged across ranks.

Per rank (:func:`rank_tables`, next to the events, so only these compact rows travel):

* **Device**: GPU utilization = |∪ kernels on the device ∩ W| / |W|; each host thread's busy
  share: ∪ of what runs on it under the step (its ops and calls), not of the ranges that only
  mark where it is: the step ranges (``ProfilerStep#N`` included) and the phases (a thread asleep
  or blocked inside ``## forward ##`` is not busy). Phases count only on host-only traces without
  COMPUTE ranges, where they are the work (as in the Distributed Summary). The process CPU
  utilization (CPU time / wall time, so up to 100 % × cores) when the source recorded
  ``process_cpu_ns`` and ``elapsed_ns``.
* **Overview**: time by event type, each the *union* of that type's intervals within W (parallel
  threads or streams count once), as a share of |W|.
* **Model**: ProfileStep, Dataloader, Forward, Backward, Optimization, Others. CPU time is the
  sum of the phase ranges' durations; GPU time is the sum of the GPU ops (kernels, memcpy,
  memset) whose ``phase`` (filled by the sources from the launching call) maps to the row, one
  "call" per step. Others = ProfileStep − the named rows. Ratios are of the ProfileStep total.
* **Kernel**, **Memory** (memcpy/memset) and **UserDefined** (USER ranges): by name, calls and
  total/avg/max/min, ratio of the table's total (UserDefined: of |W|). UserDefined rows are by
  base name: PyTorch's NVTX op ranges ``aten::to, seq = 12, op_id = 998`` count as ``aten::to``.
* **Phase** (analyses.phases): every phase name its own row (the Model Summary's fixed rows put a
  phase the user names under Others): calls, the union of its calls in W, avg/max/min, share of W.

An event belongs to the window W when its start lies in W (as a range belongs to the step that
holds its start); unions are clipped to W. Everything is numpy group-bys: no Python loop
per event, only per device, lane or table.

:func:`merge_tables` sums those tables across ranks (avg = Σ total / Σ calls, max of maxes, min
of mins) and keeps per-rank columns where they show imbalance.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from .. import events as ev
from .. import lanes as lanes_mod
from .. import names
from ..columns import Groups, group_mean, unique_rows
from ..rankview import RankView
from ..sections.tables import (
    MERGED_DEVICE_LABELS,
    DeviceRow,
    Dropped,
    KernelRow,
    KernelTable,
    MemoryRow,
    MemoryTable,
    MergedDeviceRow,
    MergedKernelRow,
    MergedKernelTable,
    MergedMemoryRow,
    MergedMemoryTable,
    MergedModelRow,
    MergedOverviewRow,
    MergedSteps,
    MergedTables,
    MergedUserRow,
    MergedUserTable,
    ModelRow,
    OverviewRow,
    RankTables,
    SentTables,
    StepTimes,
    Tables,
    UserRow,
    UserTable,
)
from ..typed import ABSENT
from . import intervals as iv
from . import operators, phases, stacked, steptime

MODEL_ROWS = ("ProfileStep", "Dataloader", "Forward", "Backward", "Optimization", "Others")
SORTABLE = ("kernel", "memory", "user")      # tables whose rows are ordered by --sorted-by
MAX_ROWS = 200          # rows kept per by-name table in the merged tables
RANK_ROWS = 20          # rows kept per by-name table in each rank's own copy in summary.json
MAX_STEPS = steptime.MAX_STEPS  # steps kept in the step-time series

_STAT_COLUMNS = ("calls", "total_ns", "avg_ns", "max_ns", "min_ns")
_GPU_KINDS = (ev.KERNEL, ev.MEMCPY, ev.MEMSET)


def model_row(name: str, dataloader: str = "Dataloader") -> str | None:
    """Model Summary row of a phase name ('forward', 'optimizer.step', ...); None for ""."""
    if not name:
        return None
    if name == ev.PROFILE_STEP:
        return "ProfileStep"
    low = name.strip("# ").lower()  # '## forward ##' (record_function markers) is 'forward'
    if name == dataloader or low.startswith(("dataloader", "data_loader", "data loading", "enumerate(dataloader")):
        return "Dataloader"
    if low.startswith(("forward", "fwd")):
        return "Forward"
    if low.startswith(("backward", "bwd")):
        return "Backward"
    if low.startswith(("optim", "opt_step", "optimizer")):
        return "Optimization"
    return "Others"


def rows_in_window(starts: np.ndarray, window: iv.IntervalSet) -> np.ndarray:
    """Rows whose start lies in the (disjoint, sorted) window set."""
    w_start, w_end = window
    if w_start.size == 0:
        return np.zeros(starts.size, dtype=bool)
    at = np.searchsorted(w_start, starts, side="right") - 1
    clipped = np.maximum(at, 0)
    return (at >= 0) & (starts < w_end[clipped])


def _base_names(column: ev.Texts) -> tuple[np.ndarray, np.ndarray]:
    """names.base_name of each row as (codes, texts), computed once per distinct name; texts in
    the order of the names they came from (the by-name tables break ties of total by that order)."""
    base_codes, bases = ev.factorize([names.base_name(text) for text in column.texts])
    return base_codes[column.codes] if len(column) else np.zeros(0, np.int64), ev._object_array(bases)


def _by_name(keys: list[tuple[np.ndarray, np.ndarray]], durations: np.ndarray, denominator: int,
             limit: int, row: Callable[..., Any], table: type) -> Any:
    """A by-name ``table`` sorted by total (ties by the keys' category order), ``limit`` rows kept,
    the rest counted in ``dropped``; ``keys``: (codes, texts) per key column of the rows; ``row``
    makes a kept row of its key texts and its figures (calls, total_ns, avg_ns, max_ns, min_ns, ratio)."""
    known = np.ones(durations.size, bool)
    for codes, _ in keys:
        known &= codes >= 0
    durations = durations[known]
    if not durations.size:
        return table(rows=[], denominator_ns=int(denominator), dropped=Dropped(rows=0, calls=0, total_ns=0))
    stacked = np.column_stack([codes[known] for codes, _ in keys])
    groups, group_of, _ = unique_rows(stacked)  # rows sorted by the keys' codes
    by_group = Groups.of(group_of, len(groups))
    calls, total = by_group.counts(), by_group.sum(durations)
    longest, shortest = by_group.max(durations), by_group.min(durations)
    order = np.argsort(-total, kind="stable")
    kept, rest = order[:limit], order[limit:]
    rows = [row(*(str(texts[groups[g, k]]) for k, (_, texts) in enumerate(keys)),
                calls=int(calls[g]), total_ns=int(total[g]), avg_ns=float(total[g] / calls[g]),
                max_ns=int(longest[g]), min_ns=int(shortest[g]),
                ratio=float(total[g] / denominator) if denominator else None)
            for g in kept.tolist()]  # at most ``limit`` rows
    return table(rows=rows, denominator_ns=int(denominator),
                 dropped=Dropped(rows=int(rest.size), calls=int(calls[rest].sum()),
                                 total_ns=int(total[rest].sum())))


def _durations(events: ev.Events, mask: np.ndarray) -> np.ndarray:
    return (events.end_ns - events.start_ns)[mask]


def device_table(events: ev.Events, window: iv.IntervalSet, meta: dict | None = None) -> list[DeviceRow]:
    """GPU utilization per device, busy share per host thread (labelled as every other table labels
    its lane: with the trace's thread names, ``meta["lane_names"]``), process CPU utilization."""
    window_ns = iv.total(window)
    kind = events.kind
    starts, ends = events.start_ns, events.end_ns
    rows = []
    meta = meta or {}
    if meta.get("process_cpu_ns") is not None and meta.get("elapsed_ns"):
        cpu_ns, elapsed_ns = meta["process_cpu_ns"], meta["elapsed_ns"]
        rows.append(DeviceRow(device="CPU(Process)", kind="cpu_process", busy_ns=int(cpu_ns),
                              elapsed_ns=int(elapsed_ns), utilization=float(cpu_ns) / float(elapsed_ns)))
    kernel = kind.eq(ev.KERNEL)
    devices = events.device
    for device in np.unique(devices[kernel]):  # one iteration per GPU
        on = kernel & (devices == device)
        busy = iv.total(iv.covered_within(starts[on], ends[on], window))
        rows.append(DeviceRow(device=f"GPU{int(device)}", kind="gpu", busy_ns=busy, elapsed_ns=window_ns,
                              utilization=busy / window_ns if window_ns else None))
    host = events.lane_kind.eq(ev.HOST_THREAD) & ~kind.eq(ev.MARK) & ~ev.step_range_rows(events)
    phase = events.category.eq(ev.PHASE)
    if kernel.any() or (kind.eq(ev.RANGE) & events.category.eq(ev.COMPUTE)).any():
        host &= ~phase  # the ops (or kernels) are the work; a phase only marks where they are
    host = np.flatnonzero(host)
    lanes, lane_of, _ = unique_rows(np.column_stack([events.pid[host], events.lane[host]]))
    for (pid, lane), on in zip(lanes.tolist(), Groups.of(lane_of, len(lanes)).members()):  # one per host thread
        busy = iv.total(iv.covered_within(starts[host[on]], ends[host[on]], window))
        key = lanes_mod.LaneKey(int(pid), -1, int(lane), ev.HOST_THREAD)
        rows.append(DeviceRow(device=lanes_mod.label(key, meta.get("lane_names")), kind="host_thread",
                              busy_ns=busy, elapsed_ns=window_ns,
                              utilization=busy / window_ns if window_ns else None))
    return rows


# (side, event type) -> row mask; unions within a type
def _overview_types(events: ev.Events) -> list[tuple[str, str, np.ndarray]]:
    kind, category = events.kind, events.category
    host = events.lane_kind.eq(ev.HOST_THREAD)
    is_step = events.name.eq(ev.PROFILE_STEP)
    host_range = host & kind.isin((ev.RANGE, ev.COMM_OP))
    kernel, comm = kind.eq(ev.KERNEL), category.eq(ev.COMMUNICATION)
    return [
        ("cpu", "ProfileStep", host_range & is_step),
        ("cpu", "Phase", host_range & category.eq(ev.PHASE) & ~is_step),
        ("cpu", "Communication", host_range & comm),
        ("cpu", "UserDefined", host & kind.isin((ev.RANGE, ev.MARK)) & category.eq(ev.USER)),
        ("cpu", "Runtime", kind.eq(ev.RUNTIME)),
        ("gpu", "GPU busy", kind.isin(_GPU_KINDS)),
        ("gpu", "Kernel", kernel & ~comm),
        ("gpu", "Communication kernel", kernel & comm),
        ("gpu", "Memcpy", kind.eq(ev.MEMCPY)),
        ("gpu", "Memset", kind.eq(ev.MEMSET)),
    ]


def overview_table(events: ev.Events, window: iv.IntervalSet, in_window: np.ndarray) -> list[OverviewRow]:
    """Time by event type: calls (starts in W) and |∪ of the type ∩ W| / |W|."""
    window_ns = iv.total(window)
    starts, ends = events.start_ns, events.end_ns
    rows = []
    for side, name, mask in _overview_types(events):  # a fixed handful of types
        calls = int((mask & in_window).sum())
        if not mask.any():
            continue
        total = iv.total(iv.covered_within(starts[mask], ends[mask], window))
        rows.append(OverviewRow(side=side, type=name, calls=calls, total_ns=total,
                                ratio=total / window_ns if window_ns else None))
    return rows


class _Stats(NamedTuple):
    """One side (CPU or GPU) of a Model Summary row: a series' count, sum, mean, max and min."""

    calls: int | None
    total_ns: int | None
    avg_ns: float | None
    max_ns: int | None
    min_ns: int | None


_NO_STATS = _Stats(0, 0, None, None, None)       # a row without calls
_NO_GPU = _Stats(None, None, None, None, None)    # no GPU work in the window: the GPU columns are empty


def _series_stats(values: np.ndarray) -> _Stats:
    return _Stats(calls=int(values.size), total_ns=int(values.sum()),
                  avg_ns=float(values.sum(dtype=np.float64) / values.size),
                  max_ns=int(values.max()), min_ns=int(values.min()))


def _stats_by_row(rows: np.ndarray, values: np.ndarray) -> dict[str, _Stats]:
    """_series_stats of ``values`` per distinct model row (a handful)."""
    return {str(row): _series_stats(values[rows == row]) for row in np.unique(rows)}


def _step_sums(rows: np.ndarray, steps: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, summed duration) per distinct (row, step): one GPU "call" per step and row."""
    row_texts, row_codes = np.unique(rows, return_inverse=True)
    step_values, step_codes = np.unique(steps, return_inverse=True)
    pair = np.asarray(row_codes).ravel() * max(step_values.size, 1) + np.asarray(step_codes).ravel()
    pairs, pair_of = np.unique(pair, return_inverse=True)
    sums = np.zeros(pairs.size, np.int64)
    np.add.at(sums, np.asarray(pair_of).ravel(), durations)
    return row_texts[pairs // max(step_values.size, 1)], sums


def model_table(events: ev.Events, window: iv.IntervalSet, in_window: np.ndarray,
                dataloader: str) -> list[ModelRow]:
    """ProfileStep / Dataloader / Forward / Backward / Optimization / Others, CPU and GPU."""
    kind = events.kind
    phase_range = kind.eq(ev.RANGE) & events.category.eq(ev.PHASE) & in_window
    cpu_rows = events.name.take(phase_range).mapped(lambda n: model_row(n, dataloader))
    cpu_durations = _durations(events, phase_range)
    named_row = np.array([row is not None and row != "Others" for row in cpu_rows.tolist()], bool)
    cpu_stats = _stats_by_row(cpu_rows[named_row].astype(str), cpu_durations[named_row])

    has_steps = "ProfileStep" in cpu_stats
    steps = events.step
    gpu_ops = kind.isin(_GPU_KINDS) & ((steps >= 0) if has_steps else in_window)
    gpu_rows = events.phase.take(gpu_ops).mapped(lambda n: model_row(n, dataloader))
    gpu_rows = np.array(["Others" if row is None else row for row in gpu_rows.tolist()], dtype=object)
    gpu_durations, gpu_steps = _durations(events, gpu_ops), steps[gpu_ops]
    rows_of_sums, sums = _step_sums(gpu_rows.astype(str), gpu_steps, gpu_durations)
    gpu_stats = _stats_by_row(rows_of_sums, sums)
    if has_steps and gpu_durations.size:
        gpu_stats["ProfileStep"] = _series_stats(_step_sums(np.zeros(gpu_steps.size, str), gpu_steps,
                                                            gpu_durations)[1])
    cpu_base = cpu_stats["ProfileStep"].total_ns if has_steps else iv.total(window)
    return _model_rows(cpu_stats, gpu_stats, cpu_base, int(gpu_durations.sum()), has_steps)


def _model_rows(cpu_stats: dict[str, _Stats], gpu_stats: dict[str, _Stats], cpu_base: int, gpu_base: int,
                has_steps: bool) -> list[ModelRow]:
    """The six model rows from per-row CPU and GPU stats (Others: what the named rows leave of the base)."""
    named = ("Dataloader", "Forward", "Backward", "Optimization")
    rest = cpu_base - sum(cpu_stats[n].total_ns for n in named if n in cpu_stats)
    others = _Stats(None, max(rest, 0), None, None, None)
    rows = []
    for name in MODEL_ROWS:  # six fixed rows
        if name == "ProfileStep" and not has_steps:
            continue
        cpu = others if name == "Others" else cpu_stats.get(name, _NO_STATS)
        gpu = gpu_stats.get(name, _NO_STATS) if gpu_base else _NO_GPU
        rows.append(ModelRow(
            name=name, calls=cpu.calls, cpu_total_ns=cpu.total_ns, cpu_avg_ns=cpu.avg_ns,
            cpu_max_ns=cpu.max_ns, cpu_min_ns=cpu.min_ns,
            cpu_ratio=cpu.total_ns / cpu_base if cpu_base else None, gpu_calls=gpu.calls,
            gpu_total_ns=gpu.total_ns, gpu_avg_ns=gpu.avg_ns, gpu_max_ns=gpu.max_ns, gpu_min_ns=gpu.min_ns,
            gpu_ratio=gpu.total_ns / gpu_base if gpu_base else None))
    return rows


def _first_categories(events: ev.Events, kernels: np.ndarray, name_codes: np.ndarray,
                      name_texts: np.ndarray) -> dict[str, str]:
    """Each kernel name's category: that of the name's first row (one per name in practice)."""
    category_codes, category_texts = events.category.codes, events.category.texts
    codes, categories = name_codes[kernels], category_codes[kernels]
    seen = categories >= 0
    distinct, first = np.unique(codes[seen], return_index=True)
    return {str(name_texts[c]): str(category_texts[categories[seen][i]]) for c, i in
            zip(distinct.tolist(), first.tolist())}


def step_times(events: ev.Events) -> StepTimes:
    """ProfileStep durations by step index (the first MAX_STEPS steps)."""
    rows = np.flatnonzero(events.kind.eq(ev.RANGE) & events.name.eq(ev.PROFILE_STEP))
    rows = rows[np.argsort(events.step[rows], kind="stable")][:MAX_STEPS]
    return StepTimes(step=events.step[rows].tolist(),
                     duration_ns=(events.end_ns - events.start_ns)[rows].tolist())


def rank_tables(view: RankView, config: dict, meta: dict | None = None,
                max_rows: int = MAX_ROWS) -> SentTables:
    """All summary tables of one rank (over its view's window) but the Operator Summary (pipeline.reduce_rank
    adds it): compact rows that travel to rank 0 instead of events."""
    events, window = view.events, view.window
    window_ns = iv.total(window)
    starts = events.start_ns
    in_window = rows_in_window(starts, window)
    kind = events.kind
    name_codes, name_texts = events.name.codes, events.name.texts
    kernels = kind.eq(ev.KERNEL) & in_window
    kernel_durations = _durations(events, kernels)
    category_of = _first_categories(events, kernels, name_codes, name_texts)  # rides along with each row
    user_codes, user_texts = _base_names(events.name)  # one row per op, not per PyTorch NVTX call
    user = events.category.eq(ev.USER) & kind.isin((ev.RANGE, ev.MARK)) & in_window
    memory = kind.isin((ev.MEMCPY, ev.MEMSET)) & in_window
    memory_durations = _durations(events, memory)
    return SentTables(
        window_ns=window_ns,
        span_ns=[int(starts.min()), int(events.end_ns.max())] if len(events) else None,
        device=device_table(events, window, meta),
        overview=overview_table(events, window, in_window),
        model=model_table(events, window, in_window, config["phases"]["dataloader"]),
        kernel=_by_name([(name_codes[kernels], name_texts)], kernel_durations, int(kernel_durations.sum()),
                        max_rows, lambda name, **figures: KernelRow(name=name, **figures,
                                                                    category=category_of.get(name, "")),
                        KernelTable),
        memory=_by_name([(kind.codes[memory], kind.texts), (name_codes[memory], name_texts)],
                        memory_durations, int(memory_durations.sum()), max_rows, MemoryRow, MemoryTable),
        user=_by_name([(user_codes[user], user_texts)], _durations(events, user), window_ns, max_rows,
                      UserRow, UserTable),
        steps=step_times(events),
        phase=phases.phase_table(events, window, in_window, max_rows),
    )


# -- across ranks (rank 0, compact tables only) ----------------------------------------------
# numpy over the rows the ranks sent (analyses.stacked): no pandas on rank 0's combine

def _number(value) -> float | None:
    """A float figure for JSON; NaN (a ratio of nothing) is None."""
    return None if value != value else float(value)


def _merge_by_name(tables_by_rank: list[SentTables], ranks: list[int], key: str, keys: list[str], limit: int,
                   denominator: str, row: type) -> Any:
    """A by-name table across ranks: Σ calls and total, max of maxes, min of mins, the number of
    ranks with the row and the rank with its largest total; total down then keys up, ``limit`` kept
    (``row``: the merged row type, whose table type the merged rows are returned in)."""
    table = _MERGED_TABLES[row]
    rows, rank_of = stacked.stack(tables_by_rank, ranks, key)
    own = [getattr(t, key) for t in tables_by_rank]
    dropped = Dropped(rows=sum(t.dropped.rows for t in own), calls=sum(t.dropped.calls for t in own),
                      total_ns=sum(t.dropped.total_ns for t in own))
    denom = sum(t.denominator_ns for t in own) if denominator == "tables" else \
        sum(t.window_ns for t in tables_by_rank)
    if not rows:
        return table(rows=[], denominator_ns=int(denom), dropped=dropped)
    codes, distinct = ev.factorize(list(map(attrgetter(*keys), rows)))
    groups = Groups.of(codes, len(distinct))
    calls, total, longest, shortest = stacked.ints(rows, "calls", "total_ns", "max_ns", "min_ns")
    calls, total, longest, shortest, ranks_in, top = (
        groups.sum(calls), groups.sum(total), groups.max(longest), groups.min(shortest), groups.distinct(rank_of),
        rank_of[groups.first_max(total)])
    with np.errstate(divide="ignore", invalid="ignore"):
        average, ratio = total / calls, total / denom if denom else np.full(total.size, np.nan)
    # the kernel table's category: the first one a rank gave
    extra = {"category": groups.first_known([r.category for r in rows], np.ones(len(rows), bool))} \
        if row is MergedKernelRow else {}
    order = stacked.key_order(total, distinct)
    kept, rest = order[:limit], order[limit:]
    merged = [row(*(distinct[g] if len(keys) > 1 else (distinct[g],)), calls=int(calls[g]),
                  total_ns=int(total[g]), max_ns=int(longest[g]), min_ns=int(shortest[g]),
                  ranks=int(ranks_in[g]), max_rank=int(top[g]), avg_ns=_number(average[g]),
                  ratio=_number(ratio[g]),
                  **{name: column[g] for name, column in extra.items()})
              for g in kept.tolist()]  # at most ``limit`` rows
    dropped = Dropped(rows=dropped.rows + int(rest.size), calls=dropped.calls + int(calls[rest].sum()),
                      total_ns=dropped.total_ns + int(total[rest].sum()))
    return table(rows=merged, denominator_ns=int(denom), dropped=dropped)


_MERGED_TABLES = {MergedKernelRow: MergedKernelTable, MergedMemoryRow: MergedMemoryTable,
                  MergedUserRow: MergedUserTable}


def _model_side(part: np.ndarray, columns: dict, side: str, base: int) -> dict:
    """One side (cpu, gpu) of a merged Model Summary row from the ranks' rows ``part``, by field name."""
    total, has_total = columns[f"{side}_total_ns"]
    keys = [f"{side}_{s}" for s in ("total_ns", "avg_ns", "max_ns", "min_ns", "ratio")]
    if not (part & has_total).any():
        return dict.fromkeys(keys)
    calls, has_calls = columns["calls" if side == "cpu" else "gpu_calls"]
    (maxes, has_max), (mins, has_min) = columns[f"{side}_max_ns"], columns[f"{side}_min_ns"]
    n_calls = int(calls[part & has_calls].sum())
    summed = int(total[part & has_total].sum())
    maxes, mins = maxes[part & has_max], mins[part & has_min]
    return dict(zip(keys, (summed, float(summed / n_calls) if n_calls and maxes.size else None,
                           int(maxes.max()) if maxes.size else None, int(mins.min()) if mins.size else None,
                           float(summed / base) if base else None)))


_MODEL_COLUMNS = ("calls", "cpu_total_ns", "cpu_max_ns", "cpu_min_ns", "gpu_calls", "gpu_total_ns", "gpu_max_ns",
                  "gpu_min_ns")


def _model_bases(tables_by_rank: list[SentTables]) -> tuple[int, int]:
    """The merged Model Summary's ratio bases: Σ the ranks' ProfileStep CPU totals (a rank without steps: its
    window) and Σ their GPU totals (the ProfileStep row's, else the rows')."""
    cpu = sum(t.model[0].cpu_total_ns if t.model and t.model[0].name == "ProfileStep" else t.window_ns
              for t in tables_by_rank)
    gpu = sum(next((r.gpu_total_ns or 0 for r in t.model if r.name == "ProfileStep"),
                   sum(r.gpu_total_ns or 0 for r in t.model)) for t in tables_by_rank)
    return cpu, gpu


def _merge_model(tables_by_rank: list[SentTables], ranks: list[int]) -> list[MergedModelRow]:
    """The Model Summary across ranks: per row, Σ totals and calls, max of maxes, min of mins,
    ratios of Σ ProfileStep (or window), and each rank's CPU and GPU totals."""
    rows, rank_of = stacked.stack(tables_by_rank, ranks, "model")
    if not rows:
        return []
    cpu_base, gpu_base = _model_bases(tables_by_rank)
    codes, names_seen = ev.factorize([row.name for row in rows])
    columns = {key: stacked.optional(rows, key) for key in _MODEL_COLUMNS}
    cpu_by_rank = dict(zip(names_seen, stacked.by_rank(codes, len(names_seen), rank_of,
                                                       columns["cpu_total_ns"][0], ranks)))
    gpu, has_gpu = columns["gpu_total_ns"]
    gpu_by_rank = dict(zip(names_seen, stacked.by_rank(codes[has_gpu], len(names_seen), rank_of[has_gpu],
                                                       gpu[has_gpu], ranks)))
    calls, has_calls = columns["calls"]
    merged = []
    for name in MODEL_ROWS:  # six fixed rows
        if name not in names_seen:
            continue
        part = codes == names_seen.index(name)
        merged.append(MergedModelRow(
            name=name, **_model_side(part, columns, "cpu", cpu_base),
            **_model_side(part, columns, "gpu", gpu_base),
            calls=int(calls[part & has_calls].sum()) if (part & has_calls).any() else None,
            cpu_total_ns_by_rank=cpu_by_rank[name],
            gpu_total_ns_by_rank=gpu_by_rank[name] if (part & has_gpu).any() else None))  # as gpu_total_ns
    return merged


def _merge_overview(tables_by_rank: list[SentTables], ranks: list[int]) -> list[MergedOverviewRow]:
    """Time by event type across ranks: Σ calls and totals, ratio of Σ windows, each rank's total."""
    rows, rank_of = stacked.stack(tables_by_rank, ranks, "overview")
    if not rows:
        return []
    window = sum(t.window_ns for t in tables_by_rank)
    codes, types = ev.factorize([(row.side, row.type) for row in rows])
    groups = Groups.of(codes, len(types))
    calls, total = stacked.ints(rows, "calls", "total_ns")
    by_rank = stacked.by_rank(codes, len(types), rank_of, total, ranks)
    calls, total = groups.sum(calls), groups.sum(total)
    ratio = total / window if window else np.full(total.size, np.nan)
    return [MergedOverviewRow(side=side, type=kind, calls=int(calls[g]), total_ns=int(total[g]),
                              ratio=_number(ratio[g]), total_ns_by_rank=by_rank[g])
            for g, (side, kind) in enumerate(types)]


def _merge_device(tables_by_rank: list[SentTables], ranks: list[int]) -> list[MergedDeviceRow]:
    """Per kind: GPU = each rank's mean over its GPUs, host thread = each rank's busiest thread."""
    rows, rank_of = stacked.stack(tables_by_rank, ranks, "device")
    if not rows:
        return []
    kinds = np.array([row.kind for row in rows], object)
    utilization, known = stacked.optional(rows, "utilization", np.float64)
    merged = []
    for kind, how in (("gpu", "mean"), ("cpu_process", "mean"), ("host_thread", "max")):
        part = (kinds == kind) & known
        if not part.any():
            continue
        present, code = np.unique(rank_of[part], return_inverse=True)  # ranks ascending
        per_rank = group_mean(utilization[part], code, present.size) if how == "mean" else \
            Groups.of(code, present.size).max(utilization[part])
        position = {int(r): k for k, r in enumerate(present.tolist())}
        merged.append(MergedDeviceRow(
            device=MERGED_DEVICE_LABELS[kind], kind=kind, mean=float(per_rank.mean()),
            min=float(per_rank.min()), max=float(per_rank.max()), min_rank=int(present[np.argmin(per_rank)]),
            max_rank=int(present[np.argmax(per_rank)]),
            utilization_by_rank=[float(per_rank[position[r]]) if r in position else None for r in ranks]))
    return merged


def _merge_steps(tables_by_rank: list[SentTables], ranks: list[int]) -> MergedSteps:
    """Per step: min / max duration across ranks and the slowest rank, ``median_ns`` the job's step
    time per step (analyses.steptime); per rank: mean and max."""
    parts = [(t.steps, r) for t, r in zip(tables_by_rank, ranks) if t.steps.step]
    if not parts:
        return MergedSteps(step=[], min_ns=[], median_ns=[], max_ns=[], max_rank=[], ranks=ranks,
                           mean_ns_by_rank=[None] * len(ranks), max_ns_by_rank=[None] * len(ranks))
    steps = np.concatenate([np.asarray(s.step, np.int64) for s, _ in parts])
    durations = np.concatenate([np.asarray(s.duration_ns, np.int64) for s, _ in parts])
    rank_of = np.concatenate([np.full(len(s.step), r, np.int64) for s, r in parts])
    step_values, step_of = np.unique(steps, return_inverse=True)
    by_step = Groups.of(step_of.ravel(), step_values.size)
    median = np.round(steptime.per_step(steps, durations)[1]).astype(np.int64)  # steps ascending, as step_values
    present, rank_code = np.unique(rank_of, return_inverse=True)
    mean = group_mean(durations.astype(np.float64), rank_code.ravel(), present.size)
    longest = Groups.of(rank_code.ravel(), present.size).max(durations)
    position = {int(r): k for k, r in enumerate(present.tolist())}
    return MergedSteps(
        step=step_values.tolist(), min_ns=by_step.min(durations).tolist(), median_ns=median.tolist(),
        max_ns=by_step.max(durations).tolist(), max_rank=rank_of[by_step.first_max(durations)].tolist(),
        ranks=list(ranks),
        mean_ns_by_rank=[float(mean[position[r]]) if r in position else None for r in ranks],
        max_ns_by_rank=[int(longest[position[r]]) if r in position else None for r in ranks])


def _trimmed(tables: SentTables, rank: int, rows: int) -> RankTables:
    """A rank's tables for summary.json: by-name tables cut to ``rows``, no step series."""
    return RankTables(
        rank=rank, window_ns=tables.window_ns, span_ns=tables.span_ns, device=tables.device,
        overview=tables.overview, model=tables.model, kernel=stacked.cut(tables.kernel, rows),
        memory=stacked.cut(tables.memory, rows), user=stacked.cut(tables.user, rows),
        operator=operators.trimmed(tables.operator, rows),
        phase=ABSENT if tables.phase is None else phases.trimmed(tables.phase, rows))


def merge_tables(tables_by_rank: list[SentTables | None], ranks: list[int], max_rows: int = MAX_ROWS,
                 rank_rows: int = RANK_ROWS) -> Tables:
    """The tables across ranks (``merged``) plus each rank's own, trimmed (``by_rank``): the ranks' own
    tables travel to rank 0 as compact rows (RankResult.tables), and the merge works on those rows."""
    pairs = [(t, r) for t, r in zip(tables_by_rank, ranks) if t is not None]
    tables = [t for t, _ in pairs]
    ranks = [int(r) for _, r in pairs]
    merged = MergedTables(
        window_ns=int(sum(t.window_ns for t in tables)),
        device=_merge_device(tables, ranks),
        overview=_merge_overview(tables, ranks),
        model=_merge_model(tables, ranks),
        kernel=_merge_by_name(tables, ranks, "kernel", ["name"], max_rows, "tables", MergedKernelRow),
        memory=_merge_by_name(tables, ranks, "memory", ["kind", "name"], max_rows, "tables", MergedMemoryRow),
        user=_merge_by_name(tables, ranks, "user", ["name"], max_rows, "window", MergedUserRow),
        steps=_merge_steps(tables, ranks),
        operator=operators.merge_operator_tables(tables, ranks, max_rows),
        phase=phases.merge_phase_tables(tables, ranks, max_rows),
    )
    keep = max_rows if len(pairs) == 1 else rank_rows  # one rank: its own tables are the merged ones
    return Tables(ranks=ranks, merged=merged, by_rank=[_trimmed(t, r, keep) for t, r in pairs])
