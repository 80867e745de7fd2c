"""The two joins every trace source needs, in one place, vectorised (sort + searchsorted, no
per-event Python loop), so that readers, the diagnosis and the Perfetto export agree:

* :func:`launch_join`: each GPU op to the runtime call that launched it (same process and
  correlation id, as CUPTI links them; nsys and Kineto both copy CUPTI's id).
* :func:`innermost_enclosing`: each interval to the innermost range on the same thread that
  contains it (the phase or step a launch or a range belongs to, as the nsys ``nvtx_gpu_proj``
  recipes and the PyTorch profiler attribute GPU work).
* :func:`span_of_groups`: per group (a step), the [min start, max end] of its members: the GPU
  window of a step = the span of the GPU work launched in it.

Pure numpy on plain arrays: no pandas, no event-table knowledge, so any stage can call them.
"""

from __future__ import annotations

import numpy as np

_INT64_MIN, _INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _join_keys(op_correlation: np.ndarray, call_correlation: np.ndarray,
               op_pid: np.ndarray | None, call_pid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per row for (pid, correlation id): the pid as a dense code (its rank among
    the distinct pids of both sides) times the correlation span, plus the correlation id."""
    op_correlation = np.asarray(op_correlation, np.int64)
    call_correlation = np.asarray(call_correlation, np.int64)
    if op_pid is None or call_pid is None:
        return op_correlation, call_correlation
    pids, codes = np.unique(np.concatenate([np.asarray(op_pid, np.int64), np.asarray(call_pid, np.int64)]),
                            return_inverse=True)
    span = int(max(op_correlation.max(initial=0), call_correlation.max(initial=0))) + 1
    if pids.size * span >= 2 ** 62:
        raise ValueError("correlation ids too large to join")
    keys = codes.astype(np.int64) * span
    return keys[:op_correlation.size] + op_correlation, keys[op_correlation.size:] + call_correlation


def launch_join(op_correlation: np.ndarray, call_correlation: np.ndarray, op_pid: np.ndarray | None = None,
                call_pid: np.ndarray | None = None, call_rank: np.ndarray | None = None) -> np.ndarray:
    """For each GPU op, the row (index into the call arrays) of its launching runtime call, or -1.

    Ops and calls match on (pid, correlation id); without pids, on the correlation id alone (one
    process per file, as in Kineto). Negative correlation ids never match. When several calls
    share a key (nsys 2022.2 writes each call twice), the one with the lowest ``call_rank``
    wins, then the first in row order.
    """
    op_key, call_key = _join_keys(op_correlation, call_correlation, op_pid, call_pid)
    result = np.full(op_key.size, -1, np.int64)
    valid_calls = np.flatnonzero(np.asarray(call_correlation) >= 0)
    if not valid_calls.size or not op_key.size:
        return result
    rank = np.zeros(valid_calls.size, np.int64) if call_rank is None else np.asarray(call_rank)[valid_calls]
    order = valid_calls[np.lexsort((valid_calls, rank, call_key[valid_calls]))]
    ordered = call_key[order]
    position = np.minimum(np.searchsorted(ordered, op_key, side="left"), ordered.size - 1)
    found = (ordered[position] == op_key) & (np.asarray(op_correlation) >= 0)
    result[found] = order[position[found]]
    return result


def innermost_enclosing(range_thread: np.ndarray, range_start: np.ndarray, range_end: np.ndarray,
                        query_thread: np.ndarray, query_start: np.ndarray, query_end: np.ndarray) -> np.ndarray:
    """For each query interval, the index of the innermost range on the same thread that
    contains it (``start <= query_start`` and ``query_end <= end``), or -1.

    Ranges are assumed to nest per thread, as push/pop ranges do; ranges are half-open for the
    nesting depth, so a point query at the instant one range ends and the next starts belongs
    to the next. Two sorted sweeps, no loop per event: the first gives the nesting depth of
    every range and query (ranges open at that instant, on that thread); the innermost range
    containing a query is then the last range that started before it on the same thread at the
    query's depth (or, when the query outlives that range, the enclosing depth). A returned
    range always contains its query; with ranges that cross each other (start/end ranges can)
    a query may get -1 or an outer range. "Thread" is any int key (a pid works for steps).
    """
    n, m = range_start.size, query_start.size
    result = np.full(m, -1, np.int64)
    if n == 0 or m == 0:
        return result
    if query_start is query_end:  # points (the step of every event): disjoint ranges need no sweep
        found = _disjoint_enclosing(range_thread, range_start, range_end, query_thread, query_start)
        if found is not None:
            return found
    # sweep 1: at equal times, ends before starts before queries (ranges are half-open for
    # depth); starts at one time, outer (longer) range first
    thread = np.concatenate([range_thread, range_thread, query_thread])
    time = np.concatenate([range_start, range_end, query_start])
    order_at_tie = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8), np.full(m, 2, np.int8)])
    outer_first = np.concatenate([-range_end, np.zeros(n + m, np.int64)])
    order = np.lexsort((outer_first, order_at_tie, time, thread))
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64), np.zeros(m, np.int64)])
    depth = np.empty(2 * n + m, np.int64)
    depth[order] = np.cumsum(delta[order])
    range_depth, query_depth = depth[:n], depth[2 * n:]

    # sweep 2: per (thread, depth), the last range start at or before each query. A query that
    # outlives that range (it crosses the range's end) tries the enclosing depth: one pass per
    # nesting level, over the queries still open, never per event.
    pending = np.flatnonzero(query_depth > 0)
    depth_now = query_depth.copy()
    while pending.size:
        order = np.lexsort((np.concatenate([np.zeros(n, np.int8), np.ones(pending.size, np.int8)]),
                            np.concatenate([range_start, query_start[pending]]),
                            np.concatenate([range_depth, depth_now[pending]]),
                            np.concatenate([range_thread, query_thread[pending]])))
        is_range = order < n
        last_range = np.maximum.accumulate(np.where(is_range, np.arange(order.size), -1))
        query = pending[order[~is_range] - n]
        candidate_at = last_range[~is_range]
        candidate = np.where(candidate_at >= 0, order[np.maximum(candidate_at, 0)], -1)
        safe = np.maximum(candidate, 0)
        same_level = ((candidate >= 0) & (range_thread[safe] == query_thread[query])
                      & (range_depth[safe] == depth_now[query]))
        contains = same_level & (range_start[safe] <= query_start[query]) & (query_end[query] <= range_end[safe])
        result[query[contains]] = candidate[contains]
        pending = query[same_level & ~contains]
        depth_now[pending] -= 1
        pending = pending[depth_now[pending] > 0]
    return result


def _disjoint_enclosing(range_thread: np.ndarray, range_start: np.ndarray, range_end: np.ndarray,
                        query_thread: np.ndarray, query_time: np.ndarray) -> np.ndarray | None:
    """innermost_enclosing for point queries when each thread's ranges have positive length and do
    not overlap (steps): per thread, the last range starting at or before the point, if the point is
    before its end (so a point where one range ends and the next starts is the next's). One
    searchsorted per thread (a handful) instead of two lexsorts over every query; None when some
    ranges of a thread overlap or are empty, where the sweep decides."""
    order = np.lexsort((range_start, range_thread))
    thread, start, end = range_thread[order], range_start[order], range_end[order]
    same_thread = thread[1:] == thread[:-1]
    if (end <= start).any() or (same_thread & (start[1:] < end[:-1])).any():
        return None
    result = np.full(query_time.size, -1, np.int64)
    heads = np.flatnonzero(np.r_[True, ~same_thread])
    for head, tail in zip(heads.tolist(), np.r_[heads[1:], thread.size].tolist()):  # per thread
        mine = np.flatnonzero(query_thread == thread[head])
        at = head + np.searchsorted(start[head:tail], query_time[mine], side="right") - 1
        inside = (at >= head) & (query_time[mine] < end[np.maximum(at, head)])
        result[mine[inside]] = order[at[inside]]
    return result


def span_of_groups(n_groups: int, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """Per group 0..n_groups-1, (min start, max end) of the members with ``group`` >= 0; groups
    without members get (int64 max, int64 min), i.e. ``first > last``."""
    first = np.full(n_groups, _INT64_MAX, np.int64)
    last = np.full(n_groups, _INT64_MIN, np.int64)
    member = np.asarray(group) >= 0
    np.minimum.at(first, group[member], start[member])
    np.maximum.at(last, group[member], end[member])
    return first, last


__all__ = ["launch_join", "innermost_enclosing", "span_of_groups"]
