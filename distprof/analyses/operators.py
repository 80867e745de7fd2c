"""The Operator Summary (Paddle's): per framework operator, calls, CPU total/self/avg/max/min and
the GPU time of the kernels launched under it, per rank and merged across ranks.

Operators are the Kineto ``cpu_op`` rows (``RankTrace.profiles["operators"]``), else the host
ranges named ``aten::...`` (nsys NVTX ranges of ``torch.autograd.profiler.emit_nvtx``, whose
``, seq = N`` / ``, sizes = [...]`` tails are cut from the name). An operator belongs to the
window when its start lies in it.

* **self** = own duration − Σ durations of its direct child operators (same thread, contained):
  nested operators (``aten::linear`` → ``aten::addmm``) are not counted twice in ``cpu_self_ns``.
* **GPU** = the GPU ops (kernels, memcpy, memset) whose launching runtime call (the one launch
  join) lies under the operator, its children's included; None on traces without GPU work.
* **ratio** = CPU total / |W| (nested operators overlap, so ratios add up to more than 1).

Everything is sorts, ``searchsorted`` and group-bys; the only loops run once per nesting level.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from .. import events as ev
from ..columns import Groups
from ..joins import innermost_enclosing
from ..rankview import RankView
from ..sections.tables import (
    Dropped,
    MergedOperatorRow,
    MergedOperatorTable,
    OperatorRow,
    OperatorTable,
    SentTables,
)
from . import intervals as iv
from . import stacked

MAX_ROWS = 200
_NVTX_OP = re.compile(r"^(aten|c10d|prim|quantized|torchvision)::")
_NVTX_TAIL = re.compile(r",\s*(seq|sizes|op_id|stack|input_op_ids)\s*=.*$")
_NVTX_SIZES = re.compile(r"sizes\s*=\s*(\[.*?\]\])")


def op_tree(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent (index of the innermost enclosing operator on the same thread, -1 for a top-level
    one) and nesting depth (1 = top level) of nested intervals; equal intervals nest in row order."""
    n = start.size
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.lexsort((np.arange(n), -end, start, thread))
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)
    # depth sweep: at one time ends close before starts open (half-open), a zero-length op's own
    # end comes after its start; starts at one time in nesting order
    tie = np.concatenate([np.ones(n, np.int8), np.where(end == start, 2, 0).astype(np.int8)])
    sweep = np.lexsort((np.concatenate([position, position]), tie, np.concatenate([start, end]),
                        np.concatenate([thread, thread])))
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    level = np.empty(2 * n, np.int64)
    level[sweep] = np.cumsum(delta[sweep])
    depth = np.maximum(level[:n], 1)
    # parent: the last operator before it (nesting order) on the same thread one level up
    _, thread_code = np.unique(thread, return_inverse=True)
    span = (int(depth.max()) + 1) * n
    key = thread_code.ravel().astype(np.int64) * span + depth * n + position
    ordered = np.sort(key)
    query = key - n  # same thread, depth - 1, same position
    at = np.searchsorted(ordered, query, side="left") - 1
    found = (at >= 0) & (depth > 1)
    found &= ordered[np.maximum(at, 0)] // n == query // n
    parent = np.full(n, -1, np.int64)
    parent_pos = ordered[np.maximum(at, 0)] % n
    parent[found] = order[parent_pos[found]]
    safe = np.maximum(parent, 0)
    contained = (start[safe] <= start) & (end <= end[safe])
    parent[~contained] = -1
    return parent, depth


def up_the_tree(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each operator's value plus those of all its descendants (one pass per nesting level)."""
    total = values.astype(np.float64 if values.dtype.kind == "f" else np.int64, copy=True)
    for level in range(int(depth.max(initial=1)), 1, -1):  # deepest level first
        at = np.flatnonzero((depth == level) & (parent >= 0))
        np.add.at(total, parent[at], total[at])
    return total


def nvtx_operators(events: ev.Events, needs_shapes: Callable | None = None) -> tuple[ev.Table, list]:
    """Operators of a trace without a cpu_op side table: host ranges named ``aten::...`` (nsys NVTX
    of emit_nvtx), names without their ``, seq = N, sizes = [...]`` tails; the ``sizes`` (emit_nvtx
    with record_shapes) as Input Dims: (operators, distinct dims). ``needs_shapes`` (clean names ->
    a mask) picks the ops whose sizes are decoded (all when None): a name with its ``seq`` is
    distinct per call, so decoding every op's sizes is a JSON parse per event."""
    host = events.lane_kind.eq(ev.HOST_THREAD) & events.kind.isin((ev.RANGE, ev.COMM_OP))
    rows = np.flatnonzero(host & events.name.where(_NVTX_OP.match))
    names = [str(name) for name in events.name.texts]
    codes = events.name.codes[rows]
    clean = np.asarray([_NVTX_TAIL.sub("", n) for n in names], object)
    wanted = np.ones(len(names), bool) if needs_shapes is None else needs_shapes(clean)
    sizes = [_nvtx_sizes(n) if want else None for n, want in zip(names, wanted.tolist())]
    distinct = sorted({text for text in sizes if text is not None})
    index = {text: at for at, text in enumerate(distinct)}
    dims_code = np.array([index.get(text, -1) for text in sizes] + [-1], np.int64)
    ops = ev.Operators({"start_ns": events.start_ns[rows], "end_ns": events.end_ns[rows],
                    "pid": events.pid[rows], "lane": events.lane[rows], "name": ev.Texts.of(clean[codes]),
                    "flops": np.full(rows.size, np.nan), "dims": dims_code[codes],
                    "concrete": np.full(rows.size, -1, np.int64)})
    return ops, [json.loads(text) for text in distinct]


def _nvtx_sizes(name: str) -> str | None:
    """The JSON text of ``sizes = [[...], ...]`` in an emit_nvtx range name, or None."""
    match = _NVTX_SIZES.search(name)
    if not match:
        return None
    try:
        json.loads(match.group(1))
    except ValueError:
        return None
    return match.group(1)


def thread_keys(*pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """One int64 key per (pid, lane) pair, equal across the given arrays for equal pairs (each
    side's dense code, combined: 1-D sorts only)."""
    pid = np.concatenate([np.asarray(p, np.int64) for p, _ in pairs])
    lane = np.concatenate([np.asarray(lane, np.int64) for _, lane in pairs])
    lanes, lane_code = np.unique(lane, return_inverse=True)
    _, pid_code = np.unique(pid, return_inverse=True)
    key = pid_code.ravel().astype(np.int64) * max(lanes.size, 1) + lane_code.ravel()
    return np.split(key, np.cumsum([p.size for p, _ in pairs])[:-1])


def launched_gpu_ns(view: RankView, operators: ev.Table, op_thread: np.ndarray) -> np.ndarray | None:
    """Per operator, the GPU time of the GPU ops whose launching call (the view's launch join)
    lies under it (innermost operator only; see :func:`up_the_tree`); None when the trace has no
    GPU work."""
    events = view.events
    gpu = np.flatnonzero(view.gpu_work)
    if not gpu.size:
        return None
    pid, lane, start, end = events.pid, events.lane, events.start_ns, events.end_ns
    launch = view.launch[gpu]
    launched = launch >= 0
    call = launch[launched]
    call_thread, = thread_keys((pid[call], lane[call]))
    op_of = innermost_enclosing(op_thread, operators.start_ns, operators.end_ns,
                                call_thread, start[call], end[call])
    duration = (end - start)[gpu[launched]]
    hit = op_of >= 0
    return np.bincount(op_of[hit], weights=duration[hit], minlength=len(operators)).astype(np.int64)


class OperatorTree(msgspec.Struct, frozen=True):
    """A rank's framework operators with their nesting (:func:`prepared`): what the Operator Summary and
    the FLOPs profile share. numpy columns that stay on the rank (never written), so not a sections record."""

    ops: ev.Table                  # start_ns, end_ns, pid, lane, name, flops, dims, concrete
    thread: np.ndarray             # one key per (pid, lane): thread_keys
    parent: np.ndarray             # the innermost enclosing operator on the thread, -1: none (op_tree)
    depth: np.ndarray              # 1 = top level
    duration: np.ndarray
    self_ns: np.ndarray            # own duration less its direct child operators'
    input_dims: list               # the distinct Input Dims that ops.dims indexes
    concrete_inputs: list          # the distinct Concrete Inputs that ops.concrete indexes


def prepared(events: ev.Events, profiles: dict, needs_shapes: Callable | None = None) -> OperatorTree:
    """The operators with their nesting, thread keys and self time: what the Operator Summary and
    the FLOPs profile share (from the source's side table, else from NVTX op ranges, their shapes
    decoded where ``needs_shapes`` says: see :func:`nvtx_operators`)."""
    ops = profiles.get("operators")
    dims, concrete = profiles.get("input_dims") or [], profiles.get("concrete_inputs") or []
    if ops is None or not len(ops):
        ops, dims = nvtx_operators(events, needs_shapes)
    start, end = ops.start_ns, ops.end_ns
    pid, lane = ops.pid, ops.lane
    (thread,) = thread_keys((pid, lane)) if len(ops) else (np.empty(0, np.int64),)
    parent, depth = op_tree(thread, start, end)
    duration = end - start
    child = np.bincount(parent[parent >= 0], weights=duration[parent >= 0], minlength=len(ops)).astype(np.int64)
    return OperatorTree(ops=ops, thread=thread, parent=parent, depth=depth, duration=duration,
                        self_ns=np.maximum(duration - child, 0), input_dims=dims, concrete_inputs=concrete)


def operator_table(view: RankView, tree: OperatorTree, in_window: np.ndarray,
                   limit: int = MAX_ROWS) -> OperatorTable:
    """One rank's Operator Summary over its view's window: rows by name, sorted by CPU total,
    ``limit`` kept."""
    ops = tree.ops
    window_ns = iv.total(view.window)
    own_gpu = launched_gpu_ns(view, ops, tree.thread) if len(ops) else None
    gpu = None if own_gpu is None else up_the_tree(own_gpu, tree.parent, tree.depth)
    names = ops.name.take(in_window)
    if not len(names):
        return OperatorTable(rows=[], denominator_ns=int(window_ns),
                             dropped=Dropped(rows=0, calls=0, total_ns=0))
    texts, group_of = ev.distinct_texts(names)  # sorted texts, each row's position: no per-row text
    cpu, own = np.asarray(tree.duration, np.int64)[in_window], np.asarray(tree.self_ns, np.int64)[in_window]
    calls = np.bincount(group_of, minlength=texts.size)
    cpu_total = _sums(group_of, cpu, texts.size)
    cpu_max = np.full(texts.size, np.iinfo(np.int64).min)
    cpu_min = np.full(texts.size, np.iinfo(np.int64).max)
    np.maximum.at(cpu_max, group_of, cpu)
    np.minimum.at(cpu_min, group_of, cpu)
    columns = {"name": texts, "calls": calls, "cpu_total_ns": cpu_total,
               "cpu_self_ns": _sums(group_of, own, texts.size),
               "cpu_avg_ns": cpu_total / calls, "cpu_max_ns": cpu_max, "cpu_min_ns": cpu_min,
               "gpu_total_ns": None, "gpu_avg_ns": None,
               "ratio": cpu_total / window_ns if window_ns else None}
    if gpu is not None:
        gpu_total = _sums(group_of, np.asarray(gpu)[in_window], texts.size)
        columns.update(gpu_total_ns=gpu_total, gpu_avg_ns=gpu_total / calls)
    order = np.lexsort((np.arange(texts.size), -cpu_total))  # CPU total down, then name (texts are sorted)
    kept, rest = order[:limit], order[limit:]
    return OperatorTable(rows=_records(columns, kept, OperatorRow), denominator_ns=int(window_ns),
                         dropped=Dropped(rows=int(rest.size), calls=int(calls[rest].sum()),
                                         total_ns=int(cpu_total[rest].sum())))


def _sums(group_of: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Per group sums of int64 (or float) values, in the values' own dtype."""
    sums = np.zeros(groups, values.dtype)
    np.add.at(sums, group_of, values)
    return sums


_INTS = frozenset({"calls", "cpu_total_ns", "cpu_self_ns", "cpu_max_ns", "cpu_min_ns", "gpu_total_ns",
                   "ranks", "max_rank"})


def _records(columns: dict, kept: np.ndarray, record: type) -> list:
    """The ``kept`` groups of per-name numpy columns (one per field of ``record``; a column of None is None in
    every row) as ``record`` rows: ints, floats (NaN: None) and texts as Python's own, a column at a time."""
    index = kept.tolist()  # at most ``limit`` rows
    values = [_column_values(key, columns[key], kept, index) for key in record.__struct_fields__]
    return [record(*row) for row in zip(*values)]


def _column_values(key: str, column: Any, kept: np.ndarray, index: list) -> list:
    """One column's kept values as _scalar makes them, numbers converted by numpy (tolist) in one pass."""
    if column is None:
        return [None] * len(index)
    if not isinstance(column, np.ndarray) or column.dtype.kind not in "iuf":  # texts: one by one
        return [_scalar(key, column[g]) for g in index]
    picked = column[kept]
    if picked.dtype.kind != "f":
        return picked.tolist() if key in _INTS else [str(value) for value in picked.tolist()]
    missing = np.isnan(picked)
    out = (np.where(missing, 0, picked).astype(np.int64) if key in _INTS else picked).tolist()
    return [None if gone else value for value, gone in zip(out, missing.tolist())] if missing.any() else out


def _scalar(key: str, value: Any) -> Any:
    if value is None or value != value:
        return None
    if key in _INTS:
        return int(value)
    return float(value) if isinstance(value, (float, np.floating)) else str(value)


def merge_operator_tables(tables: list[SentTables], ranks: list[int],
                          limit: int = MAX_ROWS) -> MergedOperatorTable:
    """The Operator Summary across ranks: sums, max of maxes, min of mins, avg = Σ total / Σ calls,
    the number of ranks that ran the operator and the rank with the largest CPU total (numpy over
    the ranks' rows: no pandas on rank 0)."""
    with_rows = [(t, r) for t, r in zip(tables, ranks) if t.operator is not None and t.operator.rows]
    denominator = int(sum(t.window_ns for t in tables))
    own = [t.operator.dropped for t in tables if t.operator is not None]
    dropped = Dropped(rows=sum(d.rows for d in own), calls=sum(d.calls for d in own),
                      total_ns=sum(d.total_ns for d in own))
    if not with_rows:
        return MergedOperatorTable(rows=[], denominator_ns=denominator, dropped=dropped)
    rows, rank_of = stacked.stack([t for t, _ in with_rows], [r for _, r in with_rows], "operator")
    codes, names = ev.factorize([row.name for row in rows])
    groups = Groups.of(codes, len(names))
    calls, total, own_ns, longest, shortest = stacked.ints(rows, "calls", "cpu_total_ns", "cpu_self_ns",
                                                          "cpu_max_ns", "cpu_min_ns")
    gpu, has_gpu = stacked.optional(rows, "gpu_total_ns")
    calls, top, total = groups.sum(calls), rank_of[groups.first_max(total)], groups.sum(total)
    gpu_total = groups.sum(gpu) if has_gpu.any() else None  # a rank without GPU work adds nothing
    columns = {"name": names, "calls": calls, "cpu_total_ns": total, "cpu_self_ns": groups.sum(own_ns),
               "cpu_avg_ns": total / calls, "cpu_max_ns": groups.max(longest), "cpu_min_ns": groups.min(shortest),
               "gpu_total_ns": gpu_total, "gpu_avg_ns": None if gpu_total is None else gpu_total / calls,
               "ratio": total / denominator if denominator else None, "ranks": groups.distinct(rank_of),
               "max_rank": top}
    order = stacked.key_order(total, names)
    kept, rest = order[:limit], order[limit:]
    return MergedOperatorTable(rows=_records(columns, kept, MergedOperatorRow), denominator_ns=denominator,
                               dropped=Dropped(rows=dropped.rows + int(rest.size),
                                               calls=dropped.calls + int(calls[rest].sum()),
                                               total_ns=dropped.total_ns + int(total[rest].sum())))


def trimmed(table: OperatorTable, rows: int) -> OperatorTable:
    """A rank's Operator Summary cut to ``rows`` for summary.json's ``by_rank`` (dropped counts CPU total)."""
    return stacked.cut(table, rows, "cpu_total_ns")
