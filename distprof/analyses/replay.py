"""The replay: the merged, aligned multi-rank timeline as a dependency graph, and the times it
gives when the graph's durations are changed (docs/whatif.md). analyses/whatif.py changes them,
one scenario at a time; analyses/critical_path.py walks the replayed times back.

The graph, per rank, on the common clock, at the granularity the compact results keep:

* the **chain** (the issuing thread): step starts and ends, phase starts and ends and the
  points where collectives are issued (the launching call for GPU work, else the op's start),
  in time order; between two points the chain computes (``w`` = the measured gap);
* a collective runs on its **lane** (GPU stream, gloo worker, comm thread, or the main thread
  for blocking MPI) from max(issue, the lane's previous op's end) plus the measured launch
  delay; an op that starts right where the lane's previous op ended (and whose launch is not
  known) was queued there: its issue is the previous op's;
* each **matched collective is a cross-rank join**: its transfer starts at the last member's
  arrival and takes the measured transfer (own end − last arrival, never below 0);
* the chain **waits** for a collective only where the trace shows it: the next chain point comes
  within ``WAIT_TOLERANCE_NS`` after the op's end, or for a host op (gloo, MPI, a comm thread)
  within ``WAIT_SHARE`` of the segment it ends (the compute before the op's end is then taken as
  0, the gap after it kept); a GPU op only where a host sync call (stream/event/device
  synchronize, a synchronous memcpy) was blocked at its end and returned with it;
* steps follow each other on the chain with the measured gaps.

Replay recomputes the times with the measured durations: joins are processed one collective
(matched column) at a time in the order of their measured last arrival, vectorized over the
column's members; each member's chain is advanced by a cumulative max over its chain points
(t_i = max(t_{i-1} + w_i, waited end + gap)). With the measured durations the replay reproduces
every step exactly, except where a transfer would be negative (a member ends before the last
arrival on the aligned clock: clock error or mismatched ops); that is the replay error.
What the model cannot know: CPU contention between ranks on one host, caches that warm or cool
when timing moves, network links shared with other jobs, compute hidden inside a waited segment.

Numpy only, no pandas (importing it costs 0.4 s of a ``distprof merge`` process, and its
group-bys about 1 ms each on tables this small): the graph of all ranks is built at once from
flat columns (sorts and searches over (rank, time) keys), so rank 0's combine grows linearly with
the ranks at a small cost per rank.
"""


from __future__ import annotations

from itertools import chain

import msgspec
import numpy as np

from .. import columns
from ..events import HOST_THREAD
from ..matching import Matching
from ..results import CollectiveMarkers, RankResult
from . import steptime

WAIT_TOLERANCE_NS = 1_000_000     # a chain point this soon after an op's end waited for it ...
WAIT_SHARE = 0.1                  # ... or, for a host op, this share of its segment
EARLY_RESUME_NS = 1_000_000       # a host op's recorded end this late after the point it woke still counts
EARLY_RESUME_MAX_NS = 3_000_000   # ... or this late, where another member's range had closed by the point
JOIN_SLACK_NS = 1_000_000         # a member arriving this soon after an op's recorded end still joined it
NEG = np.iinfo(np.int64).min // 4
# chain point kinds, in their order at equal times: a blocking call returns before the phase
# around it ends
_RETURN, PHASE_END, _STEP_END, STEP_START, PHASE_START, _ISSUE = range(-1, 5)


class Graph(msgspec.Struct, frozen=True):
    """The replay graph, flat over all ranks. Points (chain) sorted by rank then time; ops in
    rank order; ``edges``: (point, op, gap) waits of the chain on an op's end. A segment (the
    stretch of chain ending at a point) is named by the labels of its two points and how many
    times that pair came before in its step: ``p_key`` codes that name with its step (the same
    segment of the same step on every rank), ``p_phase_key`` without it (of every step)."""

    n_ranks: int
    rank_numbers: np.ndarray
    p_rank: np.ndarray
    p_t: np.ndarray
    p_w: np.ndarray
    p_first: np.ndarray
    p_key: np.ndarray
    p_phase_key: np.ndarray
    p_loader: np.ndarray       # the segment ending here lies inside the dataloader phase
    p_waited: np.ndarray
    step_rank: np.ndarray
    step_index: np.ndarray
    step_start: np.ndarray     # point indices
    step_end: np.ndarray
    o_rank: np.ndarray
    o_col: np.ndarray
    o_issue: np.ndarray        # point index, -1 when queued on its lane
    o_lane_prev: np.ndarray
    o_delta: np.ndarray
    o_transfer: np.ndarray
    o_start: np.ndarray
    o_end: np.ndarray
    o_step_end: np.ndarray     # point index of its step's end
    o_partial: np.ndarray      # some members of its column arrived after it ended: not one join
    o_gpu: np.ndarray          # GPU work (launched before it started), not a host range
    o_recv: np.ndarray         # the receiving side of a matched send/recv: joins its send (JOIN_SLACK_NS)
    edges: np.ndarray          # (n, 3) int64: point, op, gap
    e_needed: np.ndarray       # per edge: a blocking call's return that work comes right after
    #                            (no scenario overlaps it: the thread needs its result, as a
    #                            pipeline stage needs the activations its recv brings)
    p_kind: np.ndarray         # _RETURN, PHASE_END, _STEP_END, STEP_START, PHASE_START or _ISSUE
    p_step: np.ndarray         # the step of each point
    p_label: np.ndarray        # code into ``labels``
    labels: np.ndarray         # label texts, sorted: "name<" / "name>" for phase bounds, "step<" /
    #                            "step>", "@op" for issues, "" (before a rank's first point)
    o_name: np.ndarray         # each op's name and lane label (the critical path's segments)
    o_lane: np.ndarray


def along_queues(values: np.ndarray, queued: np.ndarray, prev: np.ndarray, fallback) -> np.ndarray:
    """``values`` where each queued op takes its lane predecessor's value (``fallback`` without
    one), as one pass in op order would: through a chain of queued ops, from its head; from a
    predecessor that comes later in op order, that one's own value. Pointer jumping: log(queue
    length) vectorized passes."""
    index = np.arange(values.size)
    safe = np.maximum(prev, 0)
    own = np.where(queued, np.where(prev >= 0, values[safe], fallback), values)
    follow = np.where(queued & (prev >= 0) & (prev < index) & queued[safe], prev, index)
    while True:  # log2 of the longest queue
        further = follow[follow]
        if (further == follow).all():
            return own[follow]
        follow = further


# -- the graph, all ranks at once --------------------------------------------------------------

class _Steps(msgspec.Struct, frozen=True):
    """Every rank's ProfileSteps, flat over the ranks, on the common clock."""

    row: np.ndarray         # the rank row of each
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray


class _Phases(msgspec.Struct, frozen=True):
    """Every rank's phase ranges (ranks that have any), flat over the ranks, on the common clock."""

    row: np.ndarray
    step: np.ndarray
    name: np.ndarray        # str
    start_ns: np.ndarray
    end_ns: np.ndarray


class _Syncs(msgspec.Struct, frozen=True):
    """Every rank's host sync calls (stream/event/device synchronize, synchronous memcpy), flat
    over the ranks, on the common clock."""

    row: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray


class _OpMarkers(msgspec.Struct, frozen=True):
    """Every rank's collectives as its markers give them, flat over the ranks: times on the common
    clock (``launch_ns`` -1: no launch known) and on the rank's own (the matching's)."""

    row: np.ndarray
    name: np.ndarray        # str
    lane: np.ndarray        # str: the lane's label
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    launch_ns: np.ndarray
    blocking: np.ndarray    # a host call on the steps' thread
    own_start: np.ndarray
    own_end: np.ndarray


class _LaneLinks(msgspec.Struct, frozen=True):
    """Per op, how it follows the op before it on its lane (``_lane_links``)."""

    lane_prev: np.ndarray   # that op (-1: none it ran after)
    prev_end: np.ndarray    # its end (NEG: none)
    host: np.ndarray        # no hand-over time to the lane known
    queued: np.ndarray      # queued behind it: issued with it


class _Ops(msgspec.Struct, frozen=True):
    """The graph's ops: the collectives in their ranks' steps, with their matching column (-1:
    none), lane links (``_LaneLinks``), whether each is the receiving side of a matched send/recv
    and whether a host sync call returned with it."""

    row: np.ndarray
    name: np.ndarray
    lane: np.ndarray
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    launch_ns: np.ndarray
    blocking: np.ndarray
    col: np.ndarray
    lane_prev: np.ndarray
    prev_end: np.ndarray
    host: np.ndarray
    queued: np.ndarray
    recv: np.ndarray
    synced: np.ndarray


class _Labels(msgspec.Struct, frozen=True):
    """The label texts of chain points (sorted) and the code of each kind of point."""

    texts: np.ndarray       # object
    empty: np.int64         # "": before a rank's first point
    step_end: np.int64      # "step>"
    step_start: np.int64    # "step<"
    phase_start: np.ndarray  # per phase: "name<"
    phase_end: np.ndarray   # per phase: "name>"
    issue: np.ndarray       # per op: "@name"
    returned: np.ndarray    # per op: "@name>", a blocking call's return
    loader: np.ndarray      # per text: +1 where the dataloader opens, -1 where it closes, else 0


class _ChainPoints(msgspec.Struct, frozen=True):
    """Every rank's chain points in rank then time order (``_chain_points``)."""

    rank: np.ndarray        # rank row
    t: np.ndarray
    kind: np.ndarray        # _RETURN, PHASE_END, ...
    step: np.ndarray
    label: np.ndarray       # code into ``_Labels.texts``
    op: np.ndarray          # the op issued there (-1: none)


class _Segments(msgspec.Struct, frozen=True):
    """Per chain point, the segment of chain ending there, as measured."""

    first: np.ndarray       # a rank's first point: no segment ends there
    w: np.ndarray           # its compute (0 where the point waited)
    in_loader: np.ndarray   # it lies inside the dataloader phase
    wait_op: np.ndarray     # the op the point waited for (-1: none)
    gap: np.ndarray         # the point's time after that op's end
    key: np.ndarray         # its name with its step (``Graph.p_key``)
    phase_key: np.ndarray   # its name (``Graph.p_phase_key``)


def _flat(tables: list, names: tuple[str, ...],
          texts: tuple[str, ...] = ()) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-rank marker columns (results.RankMarkers' records) as flat columns: each entry's rank row, and
    the columns ``names`` in that order (``texts``: read as strings)."""
    sizes = [len(getattr(table, names[0])) for table in tables]
    if any(len(getattr(table, name)) != size for table, size in zip(tables, sizes) for name in names):
        raise ValueError("rank markers with columns of unequal length")
    row = np.repeat(np.arange(len(tables), dtype=np.int64), sizes)
    return row, [np.asarray(list(chain.from_iterable(getattr(table, name) for table in tables)),  # a few columns
                            dtype=str if name in texts else np.int64) for name in names]


def _gather(results: list[RankResult]) -> tuple[_Steps, _Phases, _OpMarkers, _Syncs]:
    """Every rank's step bounds, phases (of ranks that have any), collectives and host sync calls
    as flat columns on the common clock (its own times + its rank's offset, as
    ``RankResult.aligned_markers``; -1 launches stay -1). The markers' columns are read here only."""
    markers = [result.markers for result in results]
    offset = np.asarray([int(result.clock.offset_ns) for result in results], np.int64)
    row, (step, start, end) = _flat([m.step_bounds for m in markers], ("step", "start_ns", "end_ns"))
    steps = _Steps(row, step, start + offset[row], end + offset[row])
    row, (step, name, start, end) = _flat([m.phases for m in markers],
                                          ("step", "name", "start_ns", "end_ns"), texts=("name",))
    phases = _Phases(row, step, name, start + offset[row], end + offset[row])
    row, (name, lane, step, start, end, launch, blocking) = _flat(
        [_with_blocking(m.collectives) for m in markers],
        ("name", "lane", "step", "start_ns", "end_ns", "launch_ns", "blocking"), texts=("name", "lane"))
    ops = _OpMarkers(row, name, lane, step, start + offset[row], end + offset[row],
                     np.where(launch >= 0, launch + offset[row], -1), blocking, own_start=start, own_end=end)
    row, (start, end) = _flat([m.syncs for m in markers], ("start_ns", "end_ns"))
    return steps, phases, ops, _Syncs(row, start + offset[row], end + offset[row])


def _with_blocking(collectives: CollectiveMarkers) -> CollectiveMarkers:
    """The collectives with ``blocking`` (a host call on the steps' thread), False where the
    markers predate it."""
    if len(collectives.blocking) == len(collectives.start_ns):
        return collectives
    return msgspec.structs.replace(collectives, blocking=[False] * len(collectives.start_ns))


def _in_steps(row: np.ndarray, step: np.ndarray, steps: _Steps) -> np.ndarray:
    """Per entry: its step is one of its rank's ProfileSteps."""
    code, _ = columns.runs(np.r_[steps.row, row], np.r_[steps.step, step])
    known = np.zeros(code.size, bool)
    known[code[:steps.row.size]] = True
    return known[code[steps.row.size:]]


def _graph_ops(results: list[RankResult], markers: _OpMarkers, syncs: _Syncs, matching: Matching) -> _Ops:
    """The graph's ops (``markers``: the collectives in the ranks' steps) with what the graph needs
    of each: its matching column, its lane links, its role in a send/recv, a sync call's return."""
    col = _matched_columns(markers, matching)
    links = _lane_links(markers, _on_computing_thread(results, markers))
    recv = _receives(markers.row, col, matching, np.asarray([r.rank for r in results], np.int64))
    return _Ops(row=markers.row, name=markers.name, lane=markers.lane, step=markers.step,
                start_ns=markers.start_ns, end_ns=markers.end_ns, launch_ns=markers.launch_ns,
                blocking=markers.blocking, col=col, lane_prev=links.lane_prev, prev_end=links.prev_end,
                host=links.host, queued=links.queued, recv=recv, synced=_synced(markers, syncs))


def _matched_columns(ops: _OpMarkers, matching: Matching) -> np.ndarray:
    """Per op: the matching column whose start and end (own clock) on the op's rank are the op's
    (the last such column where several are), -1 where none is."""
    rows, cols = np.nonzero(matching.present) if matching.size else (np.zeros(0, np.int64),) * 2
    if not rows.size or not ops.row.size:
        return np.full(ops.row.size, -1, np.int64)
    code, _ = columns.runs(np.r_[rows, ops.row], np.r_[matching.start_ns[rows, cols], ops.own_start],
                    np.r_[matching.end_ns[rows, cols], ops.own_end])
    column = np.full(int(code.max()) + 1, -1, np.int64)
    np.maximum.at(column, code[:rows.size], cols)
    return column[code[rows.size:]]


def _on_computing_thread(results: list[RankResult], ops: _OpMarkers) -> np.ndarray:
    """Per op: its lane is a host thread of its rank that computes (the chain's own thread: blocking
    MPI), not a worker that only communicates (gloo's) or a GPU stream."""
    pairs = [(row, lane.label) for row, result in enumerate(results) for lane in result.lanes
             if lane.lane_kind == HOST_THREAD and lane.computation_ns > 0]
    if not pairs or not ops.row.size:
        return np.zeros(ops.row.size, bool)
    rows = np.asarray([row for row, _ in pairs], np.int64)
    labels = np.asarray([label for _, label in pairs], dtype=str)
    code, _ = columns.runs(np.r_[rows, ops.row], np.r_[labels, ops.lane.astype(str)])
    return np.isin(code[rows.size:], code[:rows.size])


def _receives(row: np.ndarray, col: np.ndarray, matching: Matching, rank_numbers: np.ndarray) -> np.ndarray:
    """Per op (its rank row and matching column): whether it is the receiving side of a matched
    send/recv (its rank is the column's receiver)."""
    if not matching.size or not col.size or matching.receiver.size != matching.size:
        return np.zeros(col.size, bool)
    receiver = np.where(col >= 0, matching.receiver[np.maximum(col, 0)], -1)
    return (receiver >= 0) & (receiver == rank_numbers[row])


def _lane_links(ops: _OpMarkers, on_chain: np.ndarray) -> _LaneLinks:
    """Per op: its lane predecessor where it ran after it (-1: none), that one's end (NEG: none),
    whether it is a host op (no hand-over time to its lane known: a host range, launch = its own
    start, or GPU work whose launch was not captured) and whether it was queued behind it (never
    behind a blocking call: the thread that waited for it issued the next op after it returned).
    ``on_chain``: per op, its lane is its rank's computing thread."""
    row, start, end, launch = ops.row, ops.start_ns, ops.end_ns, ops.launch_ns
    if not row.size:
        return _LaneLinks(lane_prev=row, prev_end=row, host=row.astype(bool), queued=row.astype(bool))
    order = np.lexsort((start, np.unique(ops.lane, return_inverse=True)[1].reshape(-1), row))
    lane = ops.lane[order]
    same = np.r_[False, (row[order][1:] == row[order][:-1]) & (lane[1:] == lane[:-1])]
    before = np.r_[-1, order[:-1]]
    before_end = end[np.maximum(before, 0)]
    serial = same & (before_end <= start[order])
    lane_prev, prev_end = np.full(row.size, -1, np.int64), np.full(row.size, NEG, np.int64)
    lane_prev[order] = np.where(serial, before, -1)
    prev_end[order] = np.where(serial, before_end, NEG)
    host = (launch < 0) | (launch >= start)
    # an op right after a blocking one on a worker's lane (not the computing thread's own) was issued
    # by the thread that waited for that one, after it returned: not queued behind it (gloo's worker
    # runs the next exchange at once)
    after_blocking = (lane_prev >= 0) & ops.blocking.astype(bool)[np.maximum(lane_prev, 0)] & ~on_chain
    queued = (lane_prev >= 0) & host & (start - prev_end <= WAIT_TOLERANCE_NS) & ~after_blocking
    return _LaneLinks(lane_prev=lane_prev, prev_end=prev_end, host=host, queued=queued)


def _synced(ops: _OpMarkers, syncs: _Syncs) -> np.ndarray:
    """Per op: a host sync call of its rank was blocked at its end and returned within
    ``WAIT_TOLERANCE_NS`` (the first call of the rank, in end order, ending at or after it)."""
    if not syncs.row.size or not ops.row.size:
        return np.zeros(ops.row.size, bool)
    order = np.lexsort((syncs.end_ns, syncs.row))
    row, start, end = syncs.row[order], syncs.start_ns[order], syncs.end_ns[order]
    op_end = ops.end_ns
    hit = np.minimum(columns.search(row, end, ops.row, op_end, "left"), order.size - 1)
    return (row[hit] == ops.row) & (end[hit] >= op_end) & (end[hit] - op_end <= WAIT_TOLERANCE_NS) \
        & (start[hit] <= op_end)


def _labels(phase_names: np.ndarray, op_names: np.ndarray, dataloader: str) -> _Labels:
    """The label texts of chain points (sorted) and the codes of each kind of point: "" (before a
    rank's first point), "step>", "step<", per phase "name<" and "name>", per op "@name" (issue)
    and "@name>" (a blocking call's return); and
    the dataloader's bounds (+1 where it opens, -1 where it closes) per text."""
    phase_set, phase_code = np.unique(phase_names, return_inverse=True)
    op_set, op_code = np.unique(op_names, return_inverse=True)
    raw = ["", "step>", "step<", *(f"{name}<" for name in phase_set.tolist()),
           *(f"{name}>" for name in phase_set.tolist()), *(f"@{name}" for name in op_set.tolist()),
           *(f"@{name}>" for name in op_set.tolist())]
    texts, code = np.unique(np.asarray(raw, dtype=str), return_inverse=True)
    code, n, m, phase_code = code.reshape(-1), phase_set.size, op_set.size, phase_code.reshape(-1)
    op_code = op_code.reshape(-1)
    return _Labels(texts=texts.astype(object), empty=code[0], step_end=code[1], step_start=code[2],
                   phase_start=code[3:3 + n][phase_code], phase_end=code[3 + n:3 + 2 * n][phase_code],
                   issue=code[3 + 2 * n:3 + 2 * n + m][op_code], returned=code[3 + 2 * n + m:][op_code],
                   loader=np.where(texts == dataloader + "<", 1, np.where(texts == dataloader + ">", -1, 0)))


def _chain_points(steps: _Steps, phases: _Phases, ops: _Ops, labels: _Labels) -> _ChainPoints:
    """Every rank's chain points in rank then time order (at equal times in kind order, then as
    listed): step ends and starts, phase starts and ends (of phases in the rank's steps) and the
    issue points of the ops not queued on their lane (``op``: the op issued there, else -1)."""
    keep = _in_steps(phases.row, phases.step, steps)
    issued = np.flatnonzero(~ops.queued)
    returned = np.flatnonzero(ops.blocking.astype(bool) & ops.host)
    issue_t = np.where(ops.launch_ns >= 0, ops.launch_ns, ops.start_ns)[issued]
    parts = [(steps.row, steps.end_ns, _STEP_END, steps.step, labels.step_end),
             (steps.row, steps.start_ns, STEP_START, steps.step, labels.step_start),
             (phases.row[keep], phases.start_ns[keep], PHASE_START, phases.step[keep],
              labels.phase_start[keep]),
             (phases.row[keep], phases.end_ns[keep], PHASE_END, phases.step[keep], labels.phase_end[keep]),
             (ops.row[returned], ops.end_ns[returned], _RETURN, ops.step[returned],
              labels.returned[returned]),
             (ops.row[issued], issue_t, _ISSUE, ops.step[issued], labels.issue[issued])]
    rank, t, step = (np.concatenate([part[i] for part in parts]).astype(np.int64) for i in (0, 1, 3))
    kind = np.concatenate([np.full(part[0].size, part[2], np.int64) for part in parts])
    label = np.concatenate([np.broadcast_to(part[4], part[0].shape) for part in parts]).astype(np.int64)
    op = np.r_[np.full(t.size - issued.size, -1, np.int64), issued]
    order = np.lexsort((kind, t, rank))
    return _ChainPoints(rank=rank[order], t=t[order], kind=kind[order], step=step[order], label=label[order],
                        op=op[order])


def _latest_ended(ops: _Ops, order: np.ndarray, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per point, its rank's op with the latest end at or before ``t`` (-1: none); ``order``: ops by
    (row, end)."""
    found = columns.search(ops.row[order], ops.end_ns[order], rank, t, "right") - 1
    safe = np.maximum(found, 0)
    return np.where((found >= 0) & (ops.row[order][safe] == rank), order[safe], -1)


def _resumed_early(ops: _Ops, order: np.ndarray, rank: np.ndarray, t: np.ndarray,
                   first: np.ndarray) -> np.ndarray:
    """Per point, the host op it resumed from before that op's range closed (-1: none). A host op's
    range may close a little after the thread it woke has resumed (gloo's worker ends its range after
    wait() returned): one that started before the point counts up to EARLY_RESUME_NS after it, or up
    to EARLY_RESUME_MAX_NS after it where another member's range of the same collective had closed by
    the point (the collective was done; a thread that moved on while its own asynchronous op still
    ran, as the last rank to arrive does, has no such member). The first point that resumes only:
    the points after it, before the range closes, are the thread's own work again."""
    col = ops.col
    first_end = np.full(int(col.max(initial=0)) + 1, np.iinfo(np.int64).max)  # per column; one at least
    np.minimum.at(first_end, col[col >= 0], ops.end_ns[col >= 0])
    out = np.full(t.size, -1, np.int64)
    # the nearer window wins
    for window, need_done in ((EARLY_RESUME_MAX_NS, True), (EARLY_RESUME_NS, False)):
        late = _latest_ended(ops, order, rank, t + window)
        safe = np.maximum(late, 0)
        done = (col[safe] >= 0) & (first_end[np.maximum(col[safe], 0)] <= t)
        use = (late >= 0) & ops.host[safe] & (ops.end_ns[safe] > t) & (ops.start_ns[safe] < t) \
            & (done | (not need_done))
        out = np.where(use, late, out)
    again = (out >= 0) & np.r_[False, (out[1:] == out[:-1])] & ~first
    return np.where(again, -1, out)


def _waits(points: _ChainPoints, first: np.ndarray, ops: _Ops) -> tuple[np.ndarray, np.ndarray]:
    """For each chain point: the op it waited for (-1: none) and the gap after its end. The
    candidate is its rank's op with the latest end at or before the point (the last listed among
    equal ends). A host op (no launch before its start) blocks the thread that waits for it, and
    what that thread does next (unpack, divide) comes before its next point: a share of the
    segment. A GPU op is waited for only through a sync call that returns with it; the host
    otherwise runs ahead, and a point that merely comes soon after a kernel's end did not wait."""
    t, rank = points.t, points.rank
    if not ops.row.size:
        return np.full(t.size, -1, np.int64), np.zeros(t.size, np.int64)
    order = np.lexsort((ops.end_ns, ops.row))
    op = _latest_ended(ops, order, rank, t)
    late = _resumed_early(ops, order, rank, t, first)
    op = np.where(late >= 0, late, op)
    end = np.where(op >= 0, ops.end_ns[np.maximum(op, 0)], NEG)
    prev_t = np.where(first, NEG, np.r_[NEG, t[:-1]])
    host, synced = ops.host[np.maximum(op, 0)], ops.synced[np.maximum(op, 0)]
    tolerance = np.where(host, np.maximum(WAIT_TOLERANCE_NS, WAIT_SHARE * (t - prev_t)), WAIT_TOLERANCE_NS)
    issued_here = np.where(points.op >= 0, points.op, -2)
    ok = (op >= 0) & (host | synced) & (end > prev_t) & (t - end <= tolerance) & (issued_here != op) & ~first
    return np.where(ok, op, -1), np.where(ok, t - end, 0)


def _segment_keys(points: _ChainPoints, first: np.ndarray, labels: _Labels) -> tuple[np.ndarray, np.ndarray]:
    """Per point, codes of the segment ending there: the texts of its two points joined (``from|to``),
    the k-th time that pair comes in its step on its rank; with the step (``p_key``) and without
    (``p_phase_key``). Pairs whose joined texts coincide are one pair."""
    label, texts = points.label, labels.texts
    before = np.where(first, labels.empty, np.r_[labels.empty, label[:-1]])
    pair, _ = columns.runs(before, label)
    heads = np.unique(pair, return_index=True)[1]
    joined = [f"{texts[a]}|{texts[b]}"  # per pair
              for a, b in zip(before[heads].tolist(), label[heads].tolist())]
    text = np.unique(np.asarray(joined, dtype=str), return_inverse=True)[1].reshape(-1)[pair]
    _, k = columns.runs(points.rank, points.step, text)
    return columns.runs(points.step, text, k)[0], columns.runs(text, k)[0]


def build_graph(results: list[RankResult], matching: Matching, dataloader: str = "Dataloader") -> Graph:
    """The replay graph of aligned results; ``matching`` rows follow ``results``. All ranks at
    once: flat columns, a few sorts, no loop per rank beyond reading its markers."""
    steps, phases, markers, syncs = _gather(results)
    markers = columns.take(markers, _in_steps(markers.row, markers.step, steps))
    ops = _graph_ops(results, markers, syncs, matching)
    labels = _labels(phases.name, ops.name, dataloader)
    points = _chain_points(steps, phases, ops, labels)
    rank = points.rank
    first = np.r_[True, rank[1:] != rank[:-1]] if rank.size else np.zeros(0, bool)
    wait_op, gap = _waits(points, first, ops)
    issue = np.full(ops.row.size, -1, np.int64)
    issue[points.op[points.op >= 0]] = np.flatnonzero(points.op >= 0)
    t = points.t
    w = np.where(wait_op >= 0, 0, np.where(first, 0, np.diff(t, prepend=t[:1])))
    loader = labels.loader[points.label]
    opened = np.cumsum(loader) - loader  # dataloader bounds before each point, from the first rank's
    heads = np.flatnonzero(first)
    in_loader = opened - np.repeat(opened[heads], np.diff(np.r_[heads, t.size])) > 0
    key, phase_key = _segment_keys(points, first, labels)
    segments = _Segments(first=first, w=w, in_loader=in_loader, wait_op=wait_op, gap=gap, key=key,
                         phase_key=phase_key)
    return _finish_graph(results, matching.size, points, segments, ops, issue, labels.texts)


def _step_points(points: _ChainPoints, ops: _Ops) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The start and end point of every step (rank order, then step start order) and per op its
    step's end point (-1: none)."""
    kind, rank, step = points.kind, points.rank, points.step
    starts, ends = np.flatnonzero(kind == STEP_START), np.flatnonzero(kind == _STEP_END)
    code, _ = columns.runs(np.r_[rank[starts], rank[ends], ops.row],
                           np.r_[step[starts], step[ends], ops.step])
    start_code, end_code = code[:starts.size], code[starts.size:starts.size + ends.size]
    if np.unique(end_code).size < ends.size or np.unique(start_code).size < starts.size:
        raise ValueError("a rank has two ProfileSteps with one step number: the replay needs one per step")
    end_of = np.full(int(code.max()) + 1 if code.size else 0, -1, np.int64)
    end_of[end_code] = ends
    matched = end_of[start_code] >= 0
    return starts[matched], end_of[start_code][matched], end_of[code[starts.size + ends.size:]]


def _finish_graph(results: list[RankResult], n_cols: int, points: _ChainPoints, segments: _Segments,
                  ops: _Ops, issue: np.ndarray, texts: np.ndarray) -> Graph:
    """Columns (singletons for unmatched ops), transfers, launch delays and step indices; ``issue``:
    per op, its issue point (-1: queued on its lane); ``texts``: the points' label texts."""
    col = np.where(ops.col >= 0, ops.col, n_cols + np.arange(ops.col.size))
    start, end, launch = ops.start_ns, ops.end_ns, ops.launch_ns
    last = _join_last(col, start, end, np.where(ops.recv, JOIN_SLACK_NS, 0))
    column_last = np.full(int(col.max()) + 1 if col.size else 0, NEG, np.int64)
    np.maximum.at(column_last, col, start)
    ready = _measured_ready(np.where(launch >= 0, launch, start), issue, ops.lane_prev)
    delta = np.maximum(start - np.maximum(ready, ops.prev_end), 0)
    step_start, step_end, op_step_end = _step_points(points, ops)
    wait_op = segments.wait_op
    waited = np.flatnonzero(wait_op >= 0)
    edges = np.stack([waited, wait_op[waited], segments.gap[waited]], axis=1) if waited.size \
        else np.zeros((0, 3), np.int64)
    needed = _needed_returns(points, waited)
    return Graph(
        n_ranks=len(results), rank_numbers=np.asarray([r.rank for r in results]), p_rank=points.rank,
        p_t=points.t, p_w=segments.w, p_first=segments.first, p_key=segments.key,
        p_phase_key=segments.phase_key, p_loader=segments.in_loader, p_waited=wait_op >= 0,
        step_rank=points.rank[step_start], step_index=points.step[step_start], step_start=step_start,
        step_end=step_end, o_rank=ops.row, o_col=col, o_issue=issue, o_lane_prev=ops.lane_prev,
        o_delta=delta, o_transfer=end - last, o_start=start, o_end=end, o_step_end=op_step_end,
        o_partial=last < column_last[col], o_gpu=~ops.host, o_recv=ops.recv, edges=edges, e_needed=needed,
        p_kind=points.kind, p_step=points.step,
        p_label=points.label, labels=texts, o_name=ops.name.astype(object),
        o_lane=ops.lane.astype(object))


def _needed_returns(points: _ChainPoints, waited: np.ndarray) -> np.ndarray:
    """Per wait edge (its point in ``waited``): the return of a blocking call after which the
    thread works on (more than ``WAIT_TOLERANCE_NS`` before its next point) with what the call
    brought. A return right before the next point (a phase's end, the step's end) is a wait
    that overlapping could hide."""
    t, rank, kind = points.t, points.rank, points.kind
    after = np.minimum(waited + 1, t.size - 1)
    work = np.where(rank[after] == rank[waited], t[after] - t[waited], 0)
    return (kind[waited] == _RETURN) & (work > WAIT_TOLERANCE_NS)


def _join_last(col: np.ndarray, start: np.ndarray, end: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """Per op: the last arrival of its column among the members that arrived before it ended
    (all of them, when the column is one join; fewer where the trace's groups or clocks put
    two joins in one column: a member cannot have waited for one that came after it ended), or
    up to ``slack`` after (a receive: ``JOIN_SLACK_NS``). Two ranks record one hand-over at
    different moments of it (a gloo recv's range closes up to 0.5 ms before its send's range
    opens); a recv recorded as ended before its send still needed it."""
    order = np.lexsort((start, col))
    found = columns.search(col[order], start[order], col, end + slack, "right") - 1
    if ((found < 0) | (col[order][np.maximum(found, 0)] != col)).any():
        raise ValueError("a collective ends before any member of its column arrived")
    return start[order][found]


def _joins(g: Graph, members: np.ndarray) -> np.ndarray:
    """(members, members): whether each member (row) joined each other (column) as ``_join_last``
    decides it: that one arrived before the row's op ended (a receive: up to JOIN_SLACK_NS after)."""
    slack = np.where(g.o_recv[members], JOIN_SLACK_NS, 0)
    return g.o_start[members][None, :] <= (g.o_end[members] + slack)[:, None]


def _measured_ready(issue_t: np.ndarray, issue: np.ndarray, lane_prev: np.ndarray) -> np.ndarray:
    """When each op was ready: its issue time, or for an op queued on its lane the ready time
    of the op before it."""
    return along_queues(issue_t, issue < 0, lane_prev, issue_t)

class _Chains:
    """The chains of all ranks under given segment durations and waits, advanced lazily:
    ``at(p)`` is point p's time once every op it waits for has its end in ``b``. A point's time
    is fixed when its rank's chain is first advanced to it (``b`` raised later is not seen)."""

    def __init__(self, g: Graph, w: np.ndarray) -> None:
        total = np.cumsum(w)
        first = np.flatnonzero(g.p_first)
        base = np.repeat(total[first] - w[first], np.diff(np.r_[first, g.p_t.size]))
        self.W = total - base                         # compute since the rank's first point
        self.b = np.full(g.p_t.size, NEG, np.int64)  # latest (waited end + gap) per point
        self.b[first] = g.p_t[first]
        self.pb = np.full(g.p_t.size, NEG, np.int64)
        self.first = np.full(g.n_ranks, -1, np.int64)  # first point of each rank row (-1: none)
        self.first[g.p_rank[first]] = first
        self.last = np.full(g.n_ranks, -1, np.int64)
        self.last[g.p_rank[first]] = np.r_[first[1:], g.p_t.size] - 1
        self.upto = self.first - 1
        self.rank = g.p_rank

    def at(self, p: int) -> int:
        """t_p = W_p + max over the rank's points k <= p of (b_k - W_k)."""
        r = self.rank[p]
        lo = self.upto[r] + 1
        if p == lo:  # one point further: scalars (a lone rank's chain advances this way)
            own = int(self.b[p] - self.W[p])
            self.pb[p] = max(own, int(self.pb[lo - 1])) if lo > self.first[r] else own
            self.upto[r] = p
        elif p > lo:
            seg = self.b[lo:p + 1] - self.W[lo:p + 1]
            seg[0] = max(seg[0], self.pb[lo - 1] if lo > self.first[r] else NEG)
            np.maximum.accumulate(seg, out=self.pb[lo:p + 1])
            self.upto[r] = p
        return int(self.W[p] + self.pb[p])

    def at_many(self, points: np.ndarray) -> np.ndarray:
        """``at`` of several points (any ranks, any order; ``b`` unchanged meanwhile): each rank
        advanced once, to its furthest point asked, by a segmented cumulative max over all the
        advanced stretches at once (doubling: log2 of the longest stretch passes)."""
        rank = self.rank[points]
        order = np.lexsort((points, rank))
        furthest = order[np.r_[rank[order][1:] != rank[order][:-1], True]] if order.size else order
        furthest = furthest[points[furthest] > self.upto[rank[furthest]]]
        moved, target = rank[furthest], points[furthest]
        if moved.size:
            lo, size = self.upto[moved] + 1, target - self.upto[moved]
            index = _ranges(lo, lo + size)
            starts = np.cumsum(size) - size
            head = np.repeat(starts, size)  # where each entry's stretch starts
            seg = self.b[index] - self.W[index]
            carry = np.where(lo > self.first[moved], self.pb[np.maximum(lo - 1, 0)], NEG)
            seg[starts] = np.maximum(seg[starts], carry)
            reach, shift = np.arange(index.size) - head, 1
            while shift < size.max():  # log2 of the longest stretch
                seg[shift:] = np.where(reach[shift:] >= shift, np.maximum(seg[shift:], seg[:-shift]),
                                       seg[shift:])
                shift *= 2
            self.pb[index] = seg
            self.upto[moved] = target
        return self.W[points] + self.pb[points]

    def all(self) -> np.ndarray:
        """Every point's time (advances each rank to its last point)."""
        self.at_many(self.last[self.last >= 0])
        return self.W + self.pb


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` over i, without a loop."""
    size = hi - lo
    total = int(size.sum())
    if not total:
        return np.zeros(0, np.int64)
    return np.repeat(lo - (np.cumsum(size) - size), size) + np.arange(total)


def _column_order(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Ops grouped by column, columns in the order of their measured last arrival (then end, then
    column number): every op a chain point or lane waits for comes before it. Returns (ops,
    column offsets)."""
    columns, member = np.unique(g.o_col, return_inverse=True)
    member = member.reshape(-1)
    last, end = np.full(columns.size, NEG, np.int64), np.full(columns.size, NEG, np.int64)
    np.maximum.at(last, member, g.o_start)
    np.maximum.at(end, member, g.o_end)
    position = np.empty(columns.size, np.int64)
    position[np.lexsort((end, last))] = np.arange(columns.size)
    ops = np.argsort(position[member], kind="stable")
    offsets = np.searchsorted(position[member][ops], np.arange(columns.size + 1))
    return ops, offsets



_COLUMN_LOOP_MAX = 16             # a collective of at most this many members is replayed one member at a time


def replay(g: Graph, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
           hoist: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Point times and op ends with segment durations ``w``, transfers ``transfer`` and chain
    waits ``edges`` (point, op, gap); ``hoist`` (per op: from point, to point, fraction in ppm;
    from = -1: none) readies an op at that fraction of the stretch between two earlier chain
    points instead of at its issue point. One Python iteration per collective (matched column)
    in measured order, vectorized over its members (the ranks of its group; a short loop for a
    small one); the chains advance by vectorized cumulative maxima."""
    chains = _Chains(g, w)
    by_op = edges[np.argsort(edges[:, 1], kind="stable")]
    edge_offsets = np.searchsorted(by_op[:, 1], np.arange(g.o_start.size + 1))
    ends = np.full(g.o_start.size, NEG, np.int64)
    ready = np.full(g.o_start.size, NEG, np.int64)
    ops, offsets = _column_order(g)
    queued_inside = _queued_inside(g, ops, offsets)
    single = _single_ops(ops, offsets)
    for k in range(offsets.size - 1):  # one iteration per collective
        if single[k] >= 0:  # one member (a collective seen on one rank only): scalar steps
            _replay_single(g, chains, single[k], ready, ends, transfer, hoist, by_op, edge_offsets)
            continue
        members = ops[offsets[k]:offsets[k + 1]]
        if members.size > _COLUMN_LOOP_MAX and not queued_inside[k]:
            starts = _member_starts(g, chains, members, ready, ends, hoist)
        else:
            starts = _member_starts_one_by_one(g, chains, members, ready, ends, hoist)
        if g.o_partial[members].any():  # two joins in one column: each member joins who came before its end
            joins = _joins(g, members)
            last = np.where(joins, starts[None, :], NEG).max(axis=1)
        else:
            last = starts.max()
        ends[members] = np.maximum(starts, last + transfer[members])
        mine = _ranges(edge_offsets[members], edge_offsets[members + 1])
        if mine.size:
            np.maximum.at(chains.b, by_op[mine, 0], ends[by_op[mine, 1]] + by_op[mine, 2])
    return chains.all(), ends


def _single_ops(ops: np.ndarray, offsets: np.ndarray) -> list[int]:
    """Per column (in replay order): its one op, or -1 when it has several members."""
    return np.where(np.diff(offsets) == 1, ops[np.minimum(offsets[:-1], max(ops.size - 1, 0))], -1).tolist()


def _replay_single(g: Graph, chains: _Chains, op: int, ready: np.ndarray, ends: np.ndarray,
                   transfer: np.ndarray, hoist: np.ndarray | None, by_op: np.ndarray,
                   edge_offsets: np.ndarray) -> None:
    """The loop body of ``replay`` for a one-member column, in Python scalars: the same start as
    ``_member_starts_one_by_one``, the end of a join with itself, and its chain waits raised. A
    trace of one rank's unmatched collectives has thousands of these."""
    start = _member_start(g, chains, op, ready, ends, hoist)
    end = ends[op] = max(start, start + int(transfer[op]))
    for point, gap in by_op[int(edge_offsets[op]):int(edge_offsets[op + 1]), 0::2].tolist():
        if end + gap > chains.b[point]:
            chains.b[point] = end + gap


def _queued_inside(g: Graph, ops: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per column (in replay order): one of its members follows another on its lane (its ready
    time can then be its predecessor's of this very column)."""
    inside = (g.o_lane_prev >= 0) & (g.o_col[np.maximum(g.o_lane_prev, 0)] == g.o_col)
    column = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    return np.bincount(column[inside[ops]], minlength=offsets.size - 1) > 0


def _member_starts_one_by_one(g: Graph, chains: _Chains, members: np.ndarray, ready: np.ndarray,
                              ends: np.ndarray, hoist: np.ndarray | None) -> np.ndarray:
    """The start of each member of one collective (``ready`` filled in on the way), in member
    order: a queued member reads the ready time of its lane predecessor as it is then."""
    return np.array([_member_start(g, chains, op, ready, ends, hoist) for op in members.tolist()], np.int64)


def _member_start(g: Graph, chains: _Chains, op: int, ready: np.ndarray, ends: np.ndarray,
                  hoist: np.ndarray | None) -> int:
    """One op's start (its ``ready`` filled in): when it is ready (its issue point's time, a
    hoisted fraction of a stretch, or its lane predecessor's ready), after its predecessor ends."""
    prev = int(g.o_lane_prev[op])
    if hoist is not None and hoist[op, 0] >= 0:
        begin = chains.at(hoist[op, 0])
        at = begin + (chains.at(hoist[op, 1]) - begin) * int(hoist[op, 2]) // 1_000_000
    else:
        issue = int(g.o_issue[op])
        at = chains.at(issue) if issue >= 0 else int(ready[prev])
    ready[op] = at
    return max(at, int(ends[prev]) if prev >= 0 else NEG) + int(g.o_delta[op])


def _member_starts(g: Graph, chains: _Chains, members: np.ndarray, ready: np.ndarray, ends: np.ndarray,
                   hoist: np.ndarray | None) -> np.ndarray:
    """``_member_starts_one_by_one`` vectorized, for a collective none of whose members is queued
    behind another of its members: the chain times it needs, all at once."""
    prev = g.o_lane_prev[members]
    moved = np.zeros(members.size, bool) if hoist is None else hoist[members, 0] >= 0
    issued = ~moved & (g.o_issue[members] >= 0)
    queued = ~moved & ~issued
    wanted = [g.o_issue[members[issued]]]
    if moved.any():
        wanted += [hoist[members[moved], 0], hoist[members[moved], 1]]
    times = chains.at_many(np.concatenate(wanted))
    at = np.empty(members.size, np.int64)
    at[issued] = times[:issued.sum()]
    if moved.any():
        begin, end = np.split(times[issued.sum():], 2)
        at[moved] = begin + (end - begin) * hoist[members[moved], 2] // 1_000_000
    at[queued] = ready[prev[queued]]
    ready[members] = at
    return np.maximum(at, np.where(prev >= 0, ends[np.maximum(prev, 0)], NEG)) + g.o_delta[members]


class ReplayTimes(msgspec.Struct, frozen=True):
    """A replay's times, all of them, for backtracking (critical_path): point times, and per op
    when it was ready (its issue point's time, or its queue predecessor's ready), started, ended,
    and the member of its join whose start was the last arrival (itself when it came last)."""

    t: np.ndarray
    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    last_op: np.ndarray




def replay_times(g: Graph, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
                 replayed: tuple[np.ndarray, np.ndarray] | None = None) -> ReplayTimes:
    """``replay`` and the op times it implies, re-derived vectorized from its point times and op
    ends (start = max(ready, lane predecessor's end) + launch delay; the last member is the
    latest start among the members the op joined). ``replayed``: that replay's (point times, op
    ends), where the what-if made it already."""
    t, ends = replayed if replayed is not None else replay(g, w, transfer, edges)
    issue_t = np.where(g.o_issue >= 0, t[np.maximum(g.o_issue, 0)], 0)
    ready = _measured_ready(issue_t, g.o_issue, g.o_lane_prev)
    prev_end = np.where(g.o_lane_prev >= 0, ends[np.maximum(g.o_lane_prev, 0)], NEG)
    starts = np.maximum(ready, prev_end) + g.o_delta
    by_start = np.lexsort((-starts, g.o_col))                # per column, the latest start first
    head = np.r_[True, g.o_col[by_start][1:] != g.o_col[by_start][:-1]] if by_start.size \
        else np.zeros(0, bool)
    member = np.unique(g.o_col, return_inverse=True)[1].reshape(-1)
    last_op = by_start[head][member]                          # columns ascending, as np.unique's
    for col in np.unique(g.o_col[g.o_partial]).tolist():  # one per column that is not one join
        members = np.flatnonzero(g.o_col == col)
        joins = _joins(g, members)
        last_op[members] = members[np.where(joins, starts[members][None, :], NEG).argmax(axis=1)]
    return ReplayTimes(t, ready, starts, ends, last_op)


def step_ns(g: Graph, t: np.ndarray) -> np.ndarray:
    """Per (rank row, step) of the graph: the step's duration under point times ``t``."""
    return t[g.step_end] - t[g.step_start]


def job_steps(g: Graph, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps ascending, the job's step time of each): analyses.steptime, the median over ranks
    of the step's duration."""
    return steptime.per_step(g.step_index, ns)


def gpu_waits_unseen(g: Graph) -> bool:
    """The trace has GPU collectives and the host waits for none of them (no sync call returns
    with one): the replay cannot see a rank wait for another's kernels, so a saving it finds
    near 0 says nothing of what the lateness costs."""
    gpu = np.flatnonzero(g.o_gpu)
    return bool(gpu.size) and not np.isin(gpu, g.edges[:, 1]).any()
