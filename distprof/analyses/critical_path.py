"""Critical path across ranks: what sets each step's time (docs/critical-path.md).

The what-if replay (analyses/replay.py) computes every time as the max over its predecessors: a
chain point is max(previous point + segment, waited op's end + gap); an op starts at
max(ready, lane predecessor's end) + launch delay and ends at max(start, last arrival + transfer).
Walking back from a step's end and always taking the predecessor that set the max gives the
critical path: the work whose shortening shortens the step. It crosses ranks at joins: where a
transfer started at another member's arrival, the path continues on that member's chain. Time a
rank spends waiting where the replay sees it wait is therefore never on the path; the path goes
through whoever it waited for.

A segment of the issuing thread is compute, except where the thread sits in a collective that
the replay does not make it wait for (its next point comes too long after the op's end): a
blocking call on the thread itself (MPI), or a synchronous call run by another thread (gloo's
workers) outside every phase. There the path is cut at the op: WAIT until its last member
arrives, COMMUNICATION from then to its end, as a join would read, on the issuing thread's lane.

Per step, the walk starts at the step end of the rank whose replayed step is the job's step time
(the median over ranks; with an even count, the rank closest to the median) and stops at that
rank's step start, so the path's length is that rank's replayed step. That rank is a tie-break
among balanced ranks and holds the path's tail in any job, so its share says where the walk
starts, not who is late: ``rank_reading`` says how to read the shares by rank. Numbers and codes
only.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from .. import columns
from ..events import HOST_THREAD
from ..sections.findings import Finding
from ..sections.whatif import CriticalPath, Dominant, PathSegment, PathStep, PathTop, ScenarioShares
from ..typed import Reason
from . import replay
from .cost import FINDING_SCENARIOS
from .replay import Graph, ReplayTimes

COMPUTE, COMMUNICATION, HOST, WAIT, IDLE = "compute", "communication", "host", "wait", "idle"
KINDS = (COMPUTE, COMMUNICATION, HOST, WAIT, IDLE)  # HOST: older summaries' whole segment in a blocking call
CHAIN_LANE = "thread"          # the issuing thread of the rank (the replay's chain)
NO_PHASE = "(no phase)"
TRACE_START = "(trace starts)"  # the path reaches a rank's first point: its trace starts after the step did
DOMINANT_SHARE = 0.5           # a phase or name above this share of the path dominates it
TOP = 10
NESTING = 8                    # phases looked back over to find the one holding a time
_POINT, _OP_END, _OP_START = range(3)
_NEG = np.iinfo(np.int64).min // 4


class _PhaseSpans(msgspec.Struct, frozen=True):
    """Phase instances on the replayed clock, in the order of their start points."""

    rank: np.ndarray        # rank row
    name: np.ndarray        # object
    start: np.ndarray
    end: np.ndarray


class _Pieces(msgspec.Struct, frozen=True):
    """Walked pieces of the path in time order: the step, rank row, op (-1: none), kind, start
    and end of each; ``chain``: a piece of the issuing thread (the walk's COMPUTE pieces)."""

    step: np.ndarray
    rank: np.ndarray
    op: np.ndarray
    kind: np.ndarray        # object
    start: np.ndarray
    end: np.ndarray
    chain: np.ndarray


class _Segments(msgspec.Struct, frozen=True):
    """The path's labelled segments, every step's in time order: step, rank (its number), lane,
    name, kind, start, end and the phase that holds it ('' for none)."""

    step: np.ndarray
    rank: np.ndarray
    lane: np.ndarray        # object, as name, kind and phase
    name: np.ndarray
    kind: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    phase: np.ndarray


class _WalkedSteps(msgspec.Struct, frozen=True):
    """Per step (ascending), the rank row its walk starts on (``_step_ranks``)."""

    step: np.ndarray
    rank: np.ndarray        # rank row
    ns: np.ndarray          # that rank's replayed step
    job_ns: np.ndarray      # the job's step time
    start_point: np.ndarray  # that rank's step start and end points
    end_point: np.ndarray
    exact: np.ndarray       # its step is the median itself


class _PathColumns(msgspec.Struct, frozen=True):
    """The path's segments (all steps) as columns for its shares: rank number, lane, name, kind
    and phase (strings) and length."""

    rank: np.ndarray
    lane: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    phase: np.ndarray
    ns: np.ndarray


def _binding_waits(g: Graph, r: ReplayTimes, w: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per chain point: the op whose end (+ gap) set its time (-1: the previous point + its
    segment did, or it is a rank's first point)."""
    out = np.full(g.p_t.size, -1, np.int64)
    if not edges.shape[0]:
        return out
    arrive = r.end[edges[:, 1]] + edges[:, 2]
    order = np.lexsort((arrive, edges[:, 0]))           # per point, the latest arrival last
    last = np.r_[edges[order, 0][1:] != edges[order, 0][:-1], True]
    points, ops, times = edges[order, 0][last], edges[order, 1][last], arrive[order][last]
    via_chain = np.where(g.p_first[points], _NEG, r.t[np.maximum(points - 1, 0)] + w[points])
    bound = ~g.p_first[points] & (times >= via_chain)
    out[points[bound]] = ops[bound]
    return out


def _walk(g: Graph, r: ReplayTimes, wait_op: np.ndarray, transfer: np.ndarray, end_point: int,
          stop: int) -> list[tuple]:
    """The path from ``end_point`` back to time ``stop``, latest first, as (rank row, op or -1,
    kind, start, end) with kind COMPUTE for chain segments (refined later), COMMUNICATION for a
    transfer, IDLE for a launch delay or a chain that starts late. One iteration per segment.
    The pieces tile the step: each ends where the later one starts (``_Tiles``), so the path's
    length is the step's, exactly."""
    out = _Tiles(int(r.t[end_point]), int(g.p_rank[end_point]))
    node, at = _POINT, end_point
    for _ in range(g.p_t.size + 2 * g.o_start.size + 2):  # a replay graph has no cycles
        if node == _POINT:
            now = int(r.t[at])
            if now <= stop:
                return out.down_to(stop)
            if g.p_first[at]:
                out.add(g.p_rank[at], -1, IDLE, stop, now)
                return out.down_to(stop)
            op = wait_op[at]
            out.add(g.p_rank[at], -1, COMPUTE, int(r.end[op]) if op >= 0 else int(r.t[at - 1]), now)
            node, at = (_OP_END, op) if op >= 0 else (_POINT, at - 1)
        elif node == _OP_END:
            if r.end[at] <= stop:
                return out.down_to(stop)
            joined = r.last_op[at]  # a receive may have joined a send that started after it ended
            last = joined if r.start[at] < r.start[joined] <= r.end[at] else at
            if r.start[last] + transfer[at] >= r.start[at]:
                out.add(g.o_rank[at], at, COMMUNICATION, int(r.start[last]), int(r.end[at]))
            node, at = _OP_START, last
        else:
            begin = int(r.start[at] - g.o_delta[at])
            if r.start[at] <= stop:
                return out.down_to(stop)
            out.add(g.o_rank[at], at, IDLE, begin, int(r.start[at]))
            prev = g.o_lane_prev[at]
            queued = prev >= 0 and (r.end[prev] >= r.ready[at] or g.o_issue[at] < 0)
            node, at = (_OP_END, prev) if queued else (_POINT, g.o_issue[at])
    raise ValueError("critical path: the replay graph has a cycle")


class _Tiles(list):
    """The walk's pieces, latest first, made to tile the time from the step's end down: a piece
    that reaches past the start of the one after it (a point the trace puts before the end of the
    op it waited for) is cut there; a stretch no piece covers (a launch that waited for nothing the
    walk follows) is IDLE on the rank that holds the path after it. Path length = step, exactly."""

    def __init__(self, ceiling: int, rank: int) -> None:
        super().__init__()
        self.ceiling, self.rank = ceiling, rank

    def add(self, rank: int, op: int, kind: str, start: int, end: int) -> None:
        end = min(end, self.ceiling)
        if end < self.ceiling:
            self.append((self.rank, -1, IDLE, end, self.ceiling))
        start = min(start, end)
        self.append((rank, op, kind, start, end))
        self.ceiling, self.rank = start, rank

    def down_to(self, stop: int) -> list[tuple]:
        if self.ceiling > stop:
            self.append((self.rank, -1, IDLE, stop, self.ceiling))
        return self


def _phase_table(g: Graph, t: np.ndarray) -> _PhaseSpans:
    """Every phase instance on the replayed clock: rank row, name, start, end (in the order of its
    start point); the k-th start of a name on a rank pairs with its k-th end."""
    names, name_code = np.unique(np.asarray([text[:-1] for text in g.labels.tolist()], dtype=str),
                                 return_inverse=True)  # one per label text
    starts = np.flatnonzero(g.p_kind == replay.PHASE_START)
    ends = np.flatnonzero(g.p_kind == replay.PHASE_END)
    keys = [(g.p_rank[rows], name_code.reshape(-1)[g.p_label[rows]]) for rows in (starts, ends)]
    k = [columns.runs(*key)[1] for key in keys]
    code, _ = columns.runs(*(np.r_[keys[0][i], keys[1][i]] for i in (0, 1)), np.r_[k[0], k[1]])
    end_of = np.full(code.size, -1, np.int64)
    end_of[code[starts.size:]] = ends
    pair = end_of[code[:starts.size]]
    starts, pair = starts[pair >= 0], pair[pair >= 0]
    return _PhaseSpans(rank=g.p_rank[starts],
                       name=names.astype(object)[name_code.reshape(-1)[g.p_label[starts]]],
                       start=t[starts], end=t[pair])


def _phases_at(phases: _PhaseSpans, rank: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per (rank row, time): the innermost phase that holds it (the latest started of those that
    hold it, looking back over ``NESTING`` phases), or ''. Vectorized over the queries."""
    out = np.full(rank.size, "", dtype=object)
    if not len(phases.rank) or not rank.size:
        return out
    order = np.lexsort((phases.start, phases.rank))
    key_rank, starts = np.asarray(phases.rank, np.int64)[order], np.asarray(phases.start, np.int64)[order]
    ends, names = np.asarray(phases.end, np.int64)[order], np.asarray(phases.name, dtype=object)[order]
    # phases and queries in one (rank, time) order, a phase before a query at the same time: the
    # running max of phase positions is, per query, the last phase started at or before it
    is_query = np.r_[np.zeros(starts.size, np.int64), np.ones(rank.size, np.int64)]
    order = np.lexsort((is_query, np.r_[starts, at], np.r_[key_rank, rank]))
    position = np.r_[np.arange(starts.size), np.full(rank.size, -1)][order]
    last = np.empty(rank.size, np.int64)
    last[order[is_query[order] == 1] - starts.size] = np.maximum.accumulate(position)[is_query[order] == 1]
    found = np.full(rank.size, -1, np.int64)
    for back in range(NESTING):  # a few passes: the enclosing phases of a nested one
        k = last - back
        ok = (found < 0) & (k >= 0)
        kk = np.maximum(k, 0)
        hit = ok & (key_rank[kk] == rank) & (ends[kk] > at)
        found[hit] = kk[hit]
    out[found >= 0] = names[found[found >= 0]]
    return out


def _on_lanes(g: Graph, ops: np.ndarray, lanes_of: list[set[str]] | None) -> np.ndarray:
    """Per op of ``ops``: it runs on one of its rank's ``lanes_of`` (lane labels per rank row)."""
    pairs = [(row, str(lane))  # per rank's lanes
             for row, lanes in enumerate(lanes_of or []) for lane in lanes]
    if not pairs or not ops.size:
        return np.zeros(ops.size, bool)
    code, _ = columns.runs(np.r_[np.asarray([row for row, _ in pairs], np.int64), g.o_rank[ops]],
                           np.concatenate([np.asarray([lane for _, lane in pairs], dtype=str),
                                           g.o_lane[ops].astype(str)]))
    chain_lane = np.zeros(code.size, bool)
    chain_lane[code[:len(pairs)]] = True
    return chain_lane[code[len(pairs):]]


def _blocking_ops(g: Graph, r: ReplayTimes, phases: _PhaseSpans, chain_lanes: list[set[str]] | None,
                  thread_lanes: list[set[str]] | None) -> np.ndarray:
    """The host collectives the issuing thread sits in, sorted by (rank row, start): those on that
    thread itself (``chain_lanes``: blocking MPI on the main thread), and those on another host
    thread (``thread_lanes``: gloo's workers; not GPU streams) that run outside every phase with no
    point of the issuing thread during them (a synchronous ``dist.all_gather``: the thread waits
    in it, and nothing says it computed). The replay keeps such a stretch as the segment it lies
    in when the thread's next point comes too late after the op's end to count as a wait; it is
    still the collective's time, not compute. An op that overlaps a phase (a DDP bucket during
    backward) runs beside the work."""
    host = np.flatnonzero(~g.o_gpu)
    if not host.size:
        return host
    rank, start, end = g.o_rank[host], r.start[host], r.end[host]
    # the thread's first point after the op's start
    after = columns.search(g.p_rank, r.t, rank, start, "right")
    nxt = np.minimum(after, g.p_t.size - 1)
    quiet = (after >= g.p_t.size) | (g.p_rank[nxt] != rank) | (r.t[nxt] >= end)
    outside = _phases_at(phases, rank, start + (end - start) // 2) == ""
    beside = _on_lanes(g, host, thread_lanes) & quiet & outside & (end > start)
    blocking = host[_on_lanes(g, host, chain_lanes) | beside]
    return blocking[np.lexsort((r.start[blocking], g.o_rank[blocking]))]


def _split_at_ops(g: Graph, r: ReplayTimes, walked: _Pieces, ops: np.ndarray) -> _Pieces:
    """The walked pieces with each chain piece (kind COMPUTE) cut where a blocking op (``ops``,
    sorted by rank row and start) starts, has its last member arrive, and ends; a cut inside an op
    is WAIT before the last arrival and COMMUNICATION after it, as at a join; ``chain`` still marks
    the pieces of the issuing thread. Vectorized: one search for the cuts inside each piece."""
    compute = walked.chain
    if not ops.size:
        return walked
    last = np.clip(r.start[r.last_op[ops]], r.start[ops], r.end[ops])
    cut_rank = np.repeat(g.o_rank[ops], 3)
    cut_t = np.stack([r.start[ops], last, r.end[ops]], axis=1).reshape(-1)
    order = np.lexsort((cut_t, cut_rank))
    cut_rank, cut_t = cut_rank[order], cut_t[order]
    lo = columns.search(cut_rank, cut_t, walked.rank, walked.start, "right")
    hi = columns.search(cut_rank, cut_t, walked.rank, walked.end, "left")
    pieces = np.where(compute, 1 + np.maximum(hi - lo, 0), 1)
    row = np.repeat(np.arange(compute.size), pieces)
    k = np.arange(row.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # which piece of its row
    first, final = k == 0, k == pieces[row] - 1
    at = lo[row] + k  # the cut that ends the piece (the one before it starts it)
    split = columns.take(walked, row)
    start = np.where(first, split.start, cut_t[np.clip(at - 1, 0, cut_t.size - 1)])
    end = np.where(final, split.end, cut_t[np.minimum(at, cut_t.size - 1)])
    mid = start + (end - start) // 2
    found = columns.search(g.o_rank[ops], r.start[ops], split.rank, mid, "right") - 1
    op = ops[np.maximum(found, 0)]
    inside = split.chain & (found >= 0) & (g.o_rank[op] == split.rank) & (r.end[op] > mid) \
        & (r.start[op] <= mid)
    waiting = mid < np.clip(r.start[r.last_op[op]], r.start[op], r.end[op])
    kind = np.where(inside, np.where(waiting, WAIT, COMMUNICATION), split.kind).astype(object)
    split = replace(split, op=np.where(inside, op, split.op), kind=kind, start=start, end=end)
    return columns.take(split, end > start)


def _segments(g: Graph, r: ReplayTimes, walked: _Pieces, chain_lanes: list[set[str]] | None,
              thread_lanes: list[set[str]] | None = None) -> _Segments:
    """The walked pieces of every step (in time order, clipped at their step's start), cut at the
    collectives the issuing thread sits in, labelled (phase, name, lane) and joined where
    neighbours are the same work."""
    phases = _phase_table(g, r.t)
    walked = _split_at_ops(g, r, walked, _blocking_ops(g, r, phases, chain_lanes, thread_lanes))
    rank, op, kind, start, end = walked.rank, walked.op, walked.kind, walked.start, walked.end
    phase = _phases_at(phases, rank, start + (end - start) // 2)
    name = np.where(phase == "", NO_PHASE, phase).astype(object)
    name[(kind == IDLE) & (op < 0)] = TRACE_START
    lane = np.full(op.size, CHAIN_LANE, dtype=object)
    on_op = op >= 0
    name[on_op] = g.o_name[op[on_op]]
    lane[on_op & ~walked.chain] = g.o_lane[op[on_op & ~walked.chain]]
    labelled = _Segments(step=walked.step, rank=g.rank_numbers[rank], lane=lane, name=name, kind=kind,
                         start_ns=start, end_ns=end, phase=phase)
    same = np.r_[False, start[1:] == end[:-1]] if start.size else np.zeros(0, bool)
    for label in (labelled.step, labelled.rank, labelled.lane, labelled.name, labelled.kind, labelled.phase):
        same[1:] &= label[1:] == label[:-1]
    heads = np.flatnonzero(~same)
    tails = np.r_[heads[1:], start.size][:heads.size] - 1
    return replace(columns.take(labelled, heads), end_ns=end[tails])


def _walked(g: Graph, r: ReplayTimes, steps: _WalkedSteps, wait_op: np.ndarray,
            transfer: np.ndarray) -> _Pieces:
    """Every step's walk, in time order, clipped at its step start, empty pieces left out."""
    pieces = []
    for index, first_point, last_point in zip(steps.step.tolist(), steps.start_point.tolist(),
                                              steps.end_point.tolist()):  # one iteration per step
        stop = int(r.t[first_point])
        pieces += [(index, stop, *piece) for piece in _walk(g, r, wait_op, transfer, last_point, stop)[::-1]]
    values = list(zip(*pieces)) if pieces else [()] * 7
    step, stop, rank, op, start, end = (np.asarray(values[i], np.int64) for i in (0, 1, 2, 3, 5, 6))
    kind = np.asarray(values[4], dtype=object)
    start = np.maximum(start, stop)
    walked = _Pieces(step=step, rank=rank, op=op, kind=kind, start=start, end=end, chain=kind == COMPUTE)
    return columns.take(walked, end > start)


def _step_ranks(g: Graph, t: np.ndarray) -> _WalkedSteps:
    """Per step (ascending): the rank row whose replayed step is the job's step time (the median
    over ranks; with an even count the rank closest to it, ``exact`` False), its step's points
    and duration."""
    ns = replay.step_ns(g, t)
    steps, job = replay.job_steps(g, ns)
    job_ns = job[np.searchsorted(steps, g.step_index)]
    off = np.abs(ns - job_ns)
    order = np.lexsort((g.step_rank, off, g.step_index))
    head = np.flatnonzero(np.r_[True, g.step_index[order][1:] != g.step_index[order][:-1]]) if order.size \
        else np.zeros(0, np.int64)
    chosen = order[head]
    count = np.diff(np.r_[head, order.size])
    return _WalkedSteps(step=g.step_index[chosen], rank=g.step_rank[chosen], ns=ns[chosen],
                        job_ns=job_ns[chosen], start_point=g.step_start[chosen], end_point=g.step_end[chosen],
                        exact=(count % 2 == 1) & (off[chosen] == 0))


def paths(g: Graph, r: ReplayTimes, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
          chain_lanes: list[set[str]] | None = None,
          thread_lanes: list[set[str]] | None = None) -> list[PathStep]:
    """Per step: the critical path (rank, length, segments) of a replay with inputs (w, transfer,
    edges) and its times ``r``; ``chain_lanes``: per rank row, the labels of its computing thread;
    ``thread_lanes``: of all its host threads (where a collective the computing thread waits in
    may run)."""
    steps = _step_ranks(g, r.t)
    walked = _walked(g, r, steps, _binding_waits(g, r, w, edges), transfer)
    segments = _segments(g, r, walked, chain_lanes, thread_lanes)
    # a step's segments are together, steps ascending
    low = np.searchsorted(segments.step, steps.step, "left")
    high = np.searchsorted(segments.step, steps.step, "right")
    out = []
    for i, (lo, hi) in enumerate(zip(low.tolist(), high.tolist())):  # one iteration per step
        out.append(PathStep(step=int(steps.step[i]), rank=int(g.rank_numbers[steps.rank[i]]),
                            job_step_ns=int(round(float(steps.job_ns[i]))), rank_step_ns=int(steps.ns[i]),
                            rank_rule="median" if steps.exact[i] else "closest_to_median",
                            length_ns=int((segments.end_ns[lo:hi] - segments.start_ns[lo:hi]).sum()),
                            segments=_rows(segments, lo, hi)))
    return out


def _rows(segments: _Segments, lo: int, hi: int) -> list[PathSegment]:
    """Segments ``lo:hi`` as records (plain ints and strings)."""
    fields = (segments.rank, segments.lane, segments.name, segments.kind, segments.start_ns, segments.end_ns,
              segments.phase)
    return [PathSegment(rank=int(rank), lane=str(lane), name=str(name), kind=str(kind), start_ns=int(start),
                        end_ns=int(end), phase=str(phase)) for rank, lane, name, kind, start, end, phase in
            zip(*(values[lo:hi].tolist() for values in fields))]


def _path_columns(rows: list[PathSegment]) -> _PathColumns:
    """The path's segments ``rows`` as columns (one pass per column over them)."""
    def text(values: list[str]) -> np.ndarray:
        return np.asarray(values, dtype=str)
    start = np.asarray([row.start_ns for row in rows], np.int64)
    return _PathColumns(rank=np.asarray([row.rank for row in rows], np.int64),
                        lane=text([row.lane for row in rows]), name=text([row.name for row in rows]),
                        kind=text([row.kind for row in rows]), phase=text([row.phase for row in rows]),
                        ns=np.asarray([row.end_ns for row in rows], np.int64) - start)


def _shares(keys: np.ndarray, ns: np.ndarray, total: int, as_key: type = str) -> dict:
    """Share of the total path length (pieces of length ``ns``) per value of ``keys``, largest
    first, ties in key order (keys as ``as_key``: int for ranks, else strings)."""
    if not total:
        return {}
    values, member = np.unique(keys, return_inverse=True)
    length = np.zeros(values.size, np.int64)
    np.add.at(length, member.reshape(-1), ns)
    order = np.argsort(-length, kind="stable")
    return {as_key(key): float(value / total) for key, value in zip(values[order].tolist(), length[order])}


def scenario_shares(frame: _PathColumns, total: int, straggler_rank: int | None,
                    dataloader: str) -> ScenarioShares:
    """Per what-if scenario, the share of the path it acts on (the part it can shorten): the
    straggler's own work, the transfers at joins, the dataloader phase, the issuing threads'
    segments; None where the scenario has nothing to act on (no straggler named). A collective's
    time inside a segment of the issuing thread (lane ``thread``: the replay sees no wait there)
    is that segment's, as the replay keeps it: not a transfer the communication scenarios
    shorten. ``frame``: the path's segments as columns."""
    def share(mask) -> float:
        return float(frame.ns[mask].sum() / total) if total else 0.0
    chain = frame.lane == CHAIN_LANE
    transfer = (frame.kind == COMMUNICATION) & ~chain
    return ScenarioShares(
        no_straggler=None if straggler_rank is None else share((frame.rank == straggler_rank) & ~transfer),
        overlap_communication=share(transfer), comm_bandwidth_x2=share(transfer),
        no_dataloader_wait=share(frame.phase == dataloader),
        balanced_ranks=share(chain & (frame.kind != IDLE)))


def _rank_reading(steps: list[PathStep], frame: _PathColumns, total: int, straggler_rank: int | None,
                  n_ranks: int) -> dict:
    """How to read the path's shares by rank. Each step's walk starts on the rank closest to the
    median (a tie-break among balanced ranks), so that rank holds the path's tail however balanced
    the job is: its share says where the walk starts, not who is late. ``rank_reading``:
    "straggler" (the skew analysis named one: the shares show what it sets), "no_straggler" (none
    named: no rank's share is a culprit), "one_rank"; ``walked_from``: steps walked from each rank;
    ``share_walked_rank``: the path on the rank its step is walked from; ``share_by_rank_waited_for``:
    the rest, by rank (where a walked rank waited for another)."""
    walked = np.repeat(np.asarray([step.rank for step in steps], np.int64),
                       [len(step.segments) for step in steps])
    own = frame.rank == walked
    ranks, count = np.unique(np.asarray([step.rank for step in steps], np.int64), return_counts=True)
    order = np.argsort(-count, kind="stable")
    code = "straggler" if straggler_rank is not None else "one_rank" if n_ranks < 2 else "no_straggler"
    return {"rank_reading": code, "walked_from": {int(r): int(c) for r, c in zip(ranks[order], count[order])},
            "share_walked_rank": float(frame.ns[own].sum() / total) if total else 0.0,
            "share_by_rank_waited_for": _shares(frame.rank[~own], frame.ns[~own], total, int)}


def _top(frame: _PathColumns, total: int) -> list[PathTop]:
    """The ``TOP`` (name, kind) pairs by path length, ties in order of first appearance, with the
    ranks where they lie on the path."""
    code, _ = columns.runs(frame.name, frame.kind)
    first = np.full(code.size, code.size, np.int64)
    np.minimum.at(first, code, np.arange(code.size))
    ns = np.zeros(code.size, np.int64)
    np.add.at(ns, code, frame.ns)
    groups = np.unique(code)
    groups = groups[np.argsort(first[groups], kind="stable")]           # first appearance
    groups = groups[np.argsort(-ns[groups], kind="stable")][:TOP]       # longest first
    return [PathTop(name=str(frame.name[first[c]]), kind=str(frame.kind[first[c]]), ns=int(ns[c]),
                    share=float(ns[c] / total) if total else 0.0,
                    ranks=[int(x) for x in np.unique(frame.rank[code == c]).tolist()])
            for c in groups.tolist()]


def critical_path(g: Graph, r: ReplayTimes, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
                  chain_lanes: list[set[str]] | None = None, straggler_rank: int | None = None,
                  dataloader: str = "Dataloader", thread_lanes: list[set[str]] | None = None) -> CriticalPath:
    """summary.json's ``critical_path``: the path of every step, the shares of the total path
    length (all steps) by rank, kind and phase, how to read the shares by rank (``rank_reading``),
    the top contributors by name, ``dominant``: the phase or name that holds more than
    ``DOMINANT_SHARE`` of the path (None: none does), and ``scenario_shares``: the part of the
    path each what-if scenario acts on."""
    steps = paths(g, r, w, transfer, edges, chain_lanes, thread_lanes)
    frame = _path_columns([seg for step in steps for seg in step.segments])
    total = int(frame.ns.sum())
    top = _top(frame, total)
    by_phase = _shares(frame.phase, frame.ns, total)
    dominant = None
    for by, shares in (("phase", by_phase), ("name", {t.name: t.share for t in top})):
        key, share = next(iter(shares.items()), (None, 0.0))
        if key is not None and share > DOMINANT_SHARE and (by != "phase" or key):
            dominant = Dominant(by=by, name=key, share=share)
            break
    return CriticalPath(steps=steps, length_ns=total, share_by_rank=_shares(frame.rank, frame.ns, total, int),
                        **_rank_reading(steps, frame, total, straggler_rank, g.n_ranks),
                        share_by_kind=_shares(frame.kind, frame.ns, total), share_by_phase=by_phase, top=top,
                        dominant=dominant,
                        scenario_shares=scenario_shares(frame, total, straggler_rank, dataloader))


def safe_critical_path(g: Graph | None, results: list, warnings: list[str], straggler_rank: int | None = None,
                       dataloader: str = "Dataloader", replayed: tuple | None = None) -> CriticalPath | None:
    """``critical_path`` of the measured replay for pipeline.combine (None without a graph or
    steps); ``results`` (RankResults, the graph's rows) name each rank's computing threads;
    ``replayed``: the what-if's measured replay of ``g``, reused. A graph the walk cannot follow
    costs the critical path, with a warning, not the merge."""
    if g is None or not g.step_start.size:
        return None
    try:
        inputs = (g.p_w, g.o_transfer, g.edges)
        threads = [{lane.label: lane.computation_ns > 0 for lane in result.lanes
                    if lane.lane_kind == HOST_THREAD} for result in results]
        chain_lanes = [{label for label, computes in lanes.items() if computes} for lanes in threads]
        return critical_path(g, replay.replay_times(g, *inputs, replayed=replayed), *inputs, chain_lanes,
                             straggler_rank, dataloader,
                             [set(lanes) for lanes in threads])
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(Reason("critical_path_skipped", {"error": f"{type(error).__name__}: {error}"}))
        return None


def with_path_evidence(findings: list[Finding], path: CriticalPath | None) -> list[Finding]:
    """Findings with ``critical_path_share`` in their evidence: the share of the critical path that
    the scenario pricing their fix acts on (the straggler's own work, the communication, ...),
    where there is a path and that scenario acts on some of it."""
    shares = path.scenario_shares if path is not None else None
    out = []
    for finding in findings:  # one per finding (a short list)
        share = getattr(shares, FINDING_SCENARIOS.get(finding.finding, ""), None)
        if share is not None and "critical_path_share" in finding.evidence.__struct_fields__:
            finding = msgspec.structs.replace(
                finding, evidence=msgspec.structs.replace(finding.evidence, critical_path_share=share))
        out.append(finding)
    return out
