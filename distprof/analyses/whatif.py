"""What-if: replay the merged, aligned multi-rank timeline as a dependency graph and predict the
step time if one thing changed (DESIGN "What-if"). Numbers only; reports/whatif_report.py
phrases them (the one-line ``why`` of each scenario is kept here, like diagnose's messages).

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..align import Matching
from ..results import RankResult
from . import steptime

WAIT_TOLERANCE_NS = 1_000_000     # a chain point this soon after an op's end waited for it ...
WAIT_SHARE = 0.1                  # ... or, for a host op, this share of its segment
GAIN_SHARE = 0.01                 # a rank gains when its median step drops by more than this share
REPLAY_ERROR_TARGET = 0.05
SCENARIOS = ("no_straggler", "overlap_communication", "comm_bandwidth_x2", "no_dataloader_wait", "balanced_ranks")
_NEG = np.iinfo(np.int64).min // 4
# chain point kinds, in their order at equal times
_PHASE_END, _STEP_END, _STEP_START, _PHASE_START, _ISSUE = range(5)


@dataclass(frozen=True)
class Graph:
    """The replay graph, flat over all ranks. Points (chain) sorted by rank then time; ops in
    rank order; ``edges``: (point, op, gap) waits of the chain on an op's end."""

    n_ranks: int
    rank_numbers: np.ndarray
    p_rank: np.ndarray
    p_t: np.ndarray
    p_w: np.ndarray
    p_first: np.ndarray
    p_key: np.ndarray
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
    edges: np.ndarray          # (n, 3) int64: point, op, gap
    p_kind: np.ndarray         # _PHASE_END, _STEP_END, _STEP_START, _PHASE_START or _ISSUE
    p_label: np.ndarray        # "name<" / "name>" for phase bounds, "@op" for issues


def _points(markers, step_set: set, dataloader: str) -> pd.DataFrame:
    """One rank's chain points without the issue points: step and phase bounds."""
    sb, ph = markers.step_bounds, markers.phases
    frames = [pd.DataFrame({"t": sb["end_ns"], "kind": _STEP_END, "step": sb["step"], "label": "step>"}),
              pd.DataFrame({"t": sb["start_ns"], "kind": _STEP_START, "step": sb["step"], "label": "step<"})]
    if ph.get("step"):
        phases = pd.DataFrame(ph)
        phases = phases[phases["step"].isin(step_set)]
        frames += [pd.DataFrame({"t": phases["start_ns"], "kind": _PHASE_START, "step": phases["step"],
                                 "label": phases["name"].astype(str) + "<"}),
                   pd.DataFrame({"t": phases["end_ns"], "kind": _PHASE_END, "step": phases["step"],
                                 "label": phases["name"].astype(str) + ">"})]
    out = pd.concat(frames, ignore_index=True)
    out["loader"] = np.where(out["label"] == dataloader + "<", 1, np.where(out["label"] == dataloader + ">", -1, 0))
    return out


def _ops(markers, step_set: set, columns: dict) -> pd.DataFrame:
    """One rank's collectives inside its steps, with their matched column (-1: none), their
    lane predecessor and whether they were queued behind it."""
    c = markers.collectives
    ops = pd.DataFrame({"name": c["name"], "start": c["start_ns"], "end": c["end_ns"], "lane": c["lane"],
                        "step": c["step"], "launch": c["launch_ns"]})
    ops = ops[ops["step"].isin(step_set)].reset_index(drop=True)
    ops["col"] = [columns.get(key, -1) for key in zip(ops["start"].tolist(), ops["end"].tolist())]
    ops = ops.sort_values(["lane", "start"], kind="stable")
    same_lane = ops["lane"].eq(ops["lane"].shift())
    prev_end = ops["end"].shift().where(same_lane)
    prev_id = pd.Series(ops.index, index=ops.index).shift().where(same_lane)
    serial = prev_end.notna() & (prev_end <= ops["start"])
    ops["lane_prev"] = np.where(serial, prev_id.fillna(-1), -1).astype(np.int64)
    ops["prev_end"] = np.where(serial, prev_end.fillna(0), _NEG).astype(np.int64)
    # a host range (launch = its own start) or GPU work whose launch was not captured: no hand-over
    # time to its lane is known
    ops["host"] = (ops["launch"] < 0) | (ops["launch"] >= ops["start"])
    ops["queued"] = serial & ops["host"] & (ops["start"] - ops["prev_end"] <= WAIT_TOLERANCE_NS)
    return ops.sort_index()


def _synced(op_end: np.ndarray, syncs: dict) -> np.ndarray:
    """Per op: a host sync call was blocked at its end and returned within ``WAIT_TOLERANCE_NS``."""
    sync_start = np.asarray(syncs.get("start_ns", []), np.int64)
    sync_end = np.asarray(syncs.get("end_ns", []), np.int64)
    if not sync_end.size:
        return np.zeros(op_end.size, bool)
    order = np.argsort(sync_end, kind="stable")
    first = np.minimum(np.searchsorted(sync_end[order], op_end, side="left"), order.size - 1)
    hit = order[first]
    return (sync_end[hit] >= op_end) & (sync_end[hit] - op_end <= WAIT_TOLERANCE_NS) & (sync_start[hit] <= op_end)


def _waits(t: np.ndarray, issue_of_point: np.ndarray, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For each chain point of one rank: the op it waited for (-1: none) and the gap after its end."""
    ends = ops["end"].to_numpy(np.int64)
    if not ends.size:
        return np.full(t.size, -1, np.int64), np.zeros(t.size, np.int64)
    order = np.argsort(ends, kind="stable")
    found = np.searchsorted(ends[order], t, side="right") - 1
    op = np.where(found >= 0, order[np.maximum(found, 0)], -1)
    end = np.where(op >= 0, ends[np.maximum(op, 0)], _NEG)
    prev_t = np.concatenate([[_NEG], t[:-1]])
    # a host op (no launch before its start) blocks the thread that waits for it, and what that
    # thread does next (unpack, divide) comes before its next point: a share of the segment. A
    # GPU op is waited for only through a sync call that returns with it; the host otherwise runs
    # ahead, and a point that merely comes soon after a kernel's end did not wait for it.
    host = ops["host"].to_numpy(bool)[np.maximum(op, 0)]
    synced = ops["synced"].to_numpy(bool)[np.maximum(op, 0)]
    tolerance = np.where(host, np.maximum(WAIT_TOLERANCE_NS, WAIT_SHARE * (t - prev_t)), WAIT_TOLERANCE_NS)
    ok = (op >= 0) & (host | synced) & (end > prev_t) & (t - end <= tolerance) & (issue_of_point != op)
    ok[0] = False
    return np.where(ok, op, -1), np.where(ok, t - end, 0)


def _rank_graph(result: RankResult, row: int, columns: dict, dataloader: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Chain points and ops of one rank (common clock), op ids local to the rank."""
    markers = result.aligned_markers()
    offset = int(result.clock.offset_ns)
    step_set = set(markers.step_bounds["step"])
    points = _points(markers, step_set, dataloader)
    own = {(s + offset, e + offset): col for (s, e), col in columns.items()}
    ops = _ops(markers, step_set, own)
    ops["synced"] = _synced(ops["end"].to_numpy(np.int64), markers.syncs)
    issue_t = np.where(ops["launch"] >= 0, ops["launch"], ops["start"])
    issues = pd.DataFrame({"t": issue_t, "kind": _ISSUE, "step": ops["step"], "label": "@" + ops["name"].astype(str),
                           "loader": 0, "op": ops.index})[~ops["queued"].to_numpy()]
    points = pd.concat([points.assign(op=-1), issues], ignore_index=True)
    points = points.sort_values(["t", "kind"], kind="stable", ignore_index=True)
    ops["issue"] = -1
    is_issue = points["op"].to_numpy() >= 0
    ops.loc[points["op"].to_numpy()[is_issue], "issue"] = np.flatnonzero(is_issue)
    t = points["t"].to_numpy(np.int64)
    wait_op, gap = _waits(t, np.where(is_issue, points["op"].to_numpy(), -2), ops)
    points["wait_op"], points["gap"] = wait_op, gap
    points["w"] = np.where(wait_op >= 0, 0, np.diff(t, prepend=t[:1]))
    pair = points["label"].shift(fill_value="") + "|" + points["label"]
    points["key"] = points["step"].astype(str) + "|" + pair
    points["key"] = points["key"] + "#" + points.groupby("key").cumcount().astype(str)
    points["in_loader"] = points["loader"].cumsum().shift(fill_value=0) > 0
    points["rank"] = row
    return points, ops


def build_graph(results: list[RankResult], matching: Matching, dataloader: str = "Dataloader") -> Graph:
    """The replay graph of aligned results; ``matching`` rows follow ``results``."""
    point_frames, op_frames = [], []
    point_base = op_base = 0
    n_cols = matching.size
    for row, result in enumerate(results):  # one iteration per rank
        present = np.flatnonzero(matching.present[row]) if n_cols else np.zeros(0, np.int64)
        columns = {(int(s), int(e)): int(j) for s, e, j in
                   zip(matching.start_ns[row, present], matching.end_ns[row, present], present)}
        points, ops = _rank_graph(result, row, columns, dataloader)
        ops["rank"] = row
        ops["issue"] = np.where(ops["issue"] >= 0, ops["issue"] + point_base, -1)
        ops["lane_prev"] = np.where(ops["lane_prev"] >= 0, ops["lane_prev"] + op_base, -1)
        points["wait_op"] = np.where(points["wait_op"] >= 0, points["wait_op"] + op_base, -1)
        ops["id"] = np.arange(len(ops)) + op_base
        point_frames.append(points)
        op_frames.append(ops)
        point_base += len(points)
        op_base += len(ops)
    points = pd.concat(point_frames, ignore_index=True)
    ops = pd.concat(op_frames, ignore_index=True)
    return _finish_graph(results, points, ops, n_cols)


def _finish_graph(results: list[RankResult], points: pd.DataFrame, ops: pd.DataFrame, n_cols: int) -> Graph:
    """Columns (singletons for unmatched ops), transfers, launch delays and step indices."""
    rank = points["rank"].to_numpy(np.int64)
    first = np.r_[True, rank[1:] != rank[:-1]] if rank.size else np.zeros(0, bool)
    col = ops["col"].to_numpy(np.int64)
    col = np.where(col >= 0, col, n_cols + np.arange(col.size))
    start, end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    last = _join_last(col, start, end)
    column_last = pd.Series(start).groupby(col).transform("max").to_numpy()
    issue_t = np.where(ops["launch"].to_numpy() >= 0, ops["launch"].to_numpy(), start)
    ready = _measured_ready(issue_t, ops["issue"].to_numpy(), ops["lane_prev"].to_numpy())
    prev_end = ops["prev_end"].to_numpy(np.int64)
    delta = np.maximum(start - np.maximum(ready, prev_end), 0)
    is_start = points["kind"].to_numpy() == _STEP_START
    is_end = points["kind"].to_numpy() == _STEP_END
    ends = pd.DataFrame({"rank": rank[is_end], "step": points["step"].to_numpy()[is_end],
                         "p": np.flatnonzero(is_end)})
    starts = pd.DataFrame({"rank": rank[is_start], "step": points["step"].to_numpy()[is_start],
                           "p": np.flatnonzero(is_start)})
    steps = starts.merge(ends, on=["rank", "step"], suffixes=("_s", "_e"))
    op_end_point = ops[["rank", "step"]].merge(ends, on=["rank", "step"], how="left")["p"].fillna(-1)
    wait_op = points["wait_op"].to_numpy(np.int64)
    waited = np.flatnonzero(wait_op >= 0)
    edges = np.stack([waited, wait_op[waited], points["gap"].to_numpy(np.int64)[waited]], axis=1) \
        if waited.size else np.zeros((0, 3), np.int64)
    return Graph(len(results), np.asarray([r.rank for r in results]), rank, points["t"].to_numpy(np.int64),
                 points["w"].to_numpy(np.int64), first, points["key"].to_numpy(object),
                 points["in_loader"].to_numpy(bool), wait_op >= 0, steps["rank"].to_numpy(np.int64),
                 steps["step"].to_numpy(np.int64), steps["p_s"].to_numpy(np.int64), steps["p_e"].to_numpy(np.int64),
                 ops["rank"].to_numpy(np.int64), col, ops["issue"].to_numpy(np.int64),
                 ops["lane_prev"].to_numpy(np.int64), delta, end - last, start, end,
                 op_end_point.to_numpy(np.int64), last < column_last, ~ops["host"].to_numpy(bool), edges,
                 points["kind"].to_numpy(np.int64), points["label"].to_numpy(object))


def _join_last(col: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per op: the last arrival of its column among the members that arrived before it ended
    (all of them, when the column is one join; fewer where the trace's groups or clocks put
    two joins in one column: a member cannot have waited for one that came after it ended)."""
    frame = pd.DataFrame({"op": np.arange(col.size), "col": col, "end": end})
    arrivals = pd.DataFrame({"col": col, "last": start}).sort_values("last", kind="stable")
    joined = pd.merge_asof(frame.sort_values("end", kind="stable"), arrivals, left_on="end", right_on="last",
                           by="col", direction="backward")
    return joined.sort_values("op")["last"].to_numpy(np.int64)


def _measured_ready(issue_t: np.ndarray, issue: np.ndarray, lane_prev: np.ndarray) -> np.ndarray:
    """When each op was ready: its issue time, or for an op queued on its lane the ready time
    of the op before it (ops come in lane order, so one pass in index order suffices)."""
    ready = issue_t.copy()
    for op in np.flatnonzero(issue < 0):  # queued ops only: their predecessor comes first
        ready[op] = ready[lane_prev[op]] if lane_prev[op] >= 0 else issue_t[op]
    return ready


class _Chains:
    """The chains of all ranks under given segment durations and waits, advanced lazily:
    ``at(p)`` is point p's time once every op it waits for has its end in ``b``."""

    def __init__(self, g: Graph, w: np.ndarray) -> None:
        total = np.cumsum(w)
        first = np.flatnonzero(g.p_first)
        base = np.repeat(total[first] - w[first], np.diff(np.r_[first, g.p_t.size]))
        self.W = total - base                         # compute since the rank's first point
        self.b = np.full(g.p_t.size, _NEG, np.int64)  # latest (waited end + gap) per point
        self.b[first] = g.p_t[first]
        self.pb = np.full(g.p_t.size, _NEG, np.int64)
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
        if p >= lo:
            prev = self.pb[lo - 1] if lo > self.first[r] else _NEG
            seg = np.r_[prev, self.b[lo:p + 1] - self.W[lo:p + 1]]
            self.pb[lo:p + 1] = np.maximum.accumulate(seg)[1:]
            self.upto[r] = p
        return int(self.W[p] + self.pb[p])

    def all(self) -> np.ndarray:
        """Every point's time (advances each rank to its last point)."""
        for last in self.last[self.last >= 0].tolist():  # one call per rank
            self.at(last)
        return self.W + self.pb


def _column_order(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Ops grouped by column, columns in the order of their measured last arrival (then end):
    every op a chain point or lane waits for comes before it. Returns (ops, column offsets)."""
    frame = pd.DataFrame({"col": g.o_col, "start": g.o_start, "end": g.o_end})
    keys = frame.groupby("col").agg(last=("start", "max"), end=("end", "max"))
    rank_of = pd.Series(np.arange(len(keys)), index=keys.sort_values(["last", "end"], kind="stable").index)
    position = rank_of.loc[g.o_col].to_numpy() if g.o_col.size else np.zeros(0, np.int64)
    ops = np.argsort(position, kind="stable")
    offsets = np.searchsorted(position[ops], np.arange(len(keys) + 1))
    return ops, offsets


def replay(g: Graph, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
           hoist: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Point times and op ends with segment durations ``w``, transfers ``transfer`` and chain
    waits ``edges`` (point, op, gap); ``hoist`` (per op: from point, to point, fraction in ppm;
    from = -1: none) readies an op at that fraction of the stretch between two earlier chain
    points instead of at its issue point. One Python iteration per collective (matched column)
    in measured order, a short loop over its members (the ranks of its group); the chains
    advance by vectorized cumulative maxima."""
    chains = _Chains(g, w)
    by_op = edges[np.argsort(edges[:, 1], kind="stable")]
    edge_offsets = np.searchsorted(by_op[:, 1], np.arange(g.o_start.size + 1))
    ends = np.full(g.o_start.size, _NEG, np.int64)
    ready = np.full(g.o_start.size, _NEG, np.int64)
    ops, offsets = _column_order(g)
    for k in range(offsets.size - 1):  # one iteration per collective
        members = ops[offsets[k]:offsets[k + 1]]
        starts = np.empty(members.size, np.int64)
        for i, op in enumerate(members.tolist()):  # one iteration per rank of the collective
            prev = g.o_lane_prev[op]
            if hoist is not None and hoist[op, 0] >= 0:
                begin = chains.at(hoist[op, 0])
                ready[op] = begin + (chains.at(hoist[op, 1]) - begin) * hoist[op, 2] // 1_000_000
            else:
                ready[op] = chains.at(g.o_issue[op]) if g.o_issue[op] >= 0 else ready[prev]
            starts[i] = max(ready[op], ends[prev] if prev >= 0 else _NEG) + g.o_delta[op]
        if g.o_partial[members].any():  # two joins in one column: each member joins who came before its end
            joins = g.o_start[members][None, :] <= g.o_end[members][:, None]
            last = np.where(joins, starts[None, :], _NEG).max(axis=1)
        else:
            last = starts.max()
        ends[members] = np.maximum(starts, last + transfer[members])
        mine = np.concatenate([np.arange(edge_offsets[op], edge_offsets[op + 1]) for op in members.tolist()]) \
            if edge_offsets[members + 1].sum() > edge_offsets[members].sum() else np.zeros(0, np.int64)
        if mine.size:
            np.maximum.at(chains.b, by_op[mine, 0], ends[by_op[mine, 1]] + by_op[mine, 2])
    return chains.all(), ends


# -- scenarios: new durations or dependencies, replayed --------------------------------------

def _segment_medians(g: Graph, rows: np.ndarray, w: np.ndarray | None = None) -> pd.Series:
    """Median duration per segment key over the chain segments of ``rows`` (rank rows) that
    compute (not first, not waited), under durations ``w`` (the measured ones by default)."""
    use = np.isin(g.p_rank, rows) & ~g.p_first & ~g.p_waited
    return pd.Series((g.p_w if w is None else w)[use]).groupby(g.p_key[use]).median()


def _with_medians(g: Graph, medians: pd.Series, rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Segment durations ``w`` with those of ``rows`` set to the medians of their keys."""
    w = w.copy()
    use = np.flatnonzero(np.isin(g.p_rank, rows) & ~g.p_first & ~g.p_waited)
    median = medians.reindex(g.p_key[use]).to_numpy(np.float64)
    known = ~np.isnan(median)
    w[use[known]] = np.round(median[known]).astype(np.int64)
    return w


def _phase_keys(keys: np.ndarray) -> np.ndarray:
    """Segment keys without their step (``step|from|to#k`` → ``from|to#k``): the same segment of
    every step."""
    return pd.Series(keys, dtype=object).str.split("|", n=1).str[1].to_numpy(object)


def _without_lateness(g: Graph, row: int, others: np.ndarray) -> np.ndarray:
    """Segment durations with the straggler's (``row``) lateness removed and its jitter kept.

    Its lateness per segment is its median excess over the other ranks' same segment of the same
    step; that is taken off every step's segment. A rank's step-to-step variation is not
    lateness: capping it at the others' median would make it never the slowest, and with few
    ranks predict a job faster than the one measured without the straggler. Two bounds: a
    segment never drops below the others' median of its step (or its own, when shorter), and it
    is never longer than the longest the other ranks show for that segment (one-off late steps).
    """
    w = g.p_w.copy()
    use = np.flatnonzero((g.p_rank == row) & ~g.p_first & ~g.p_waited)
    same_step = _segment_medians(g, others).reindex(g.p_key[use]).to_numpy(np.float64)
    known = ~np.isnan(same_step)
    use, same_step = use[known], same_step[known]
    if not use.size:
        return w
    own = w[use].astype(np.float64)
    phase = _phase_keys(g.p_key[use])
    lateness = pd.Series(own - same_step).groupby(phase).transform("median").clip(lower=0).to_numpy()
    rest = np.isin(g.p_rank, others) & ~g.p_first & ~g.p_waited
    longest = pd.Series(g.p_w[rest]).groupby(_phase_keys(g.p_key[rest])).max().reindex(phase).to_numpy(np.float64)
    floor = np.minimum(own, same_step)
    ceiling = np.maximum(np.nan_to_num(longest, nan=np.inf), floor)
    w[use] = np.round(np.clip(own - lateness, floor, ceiling)).astype(np.int64)
    return w


def _named(g: Graph, rank: int | None) -> tuple[int | None, dict]:
    """The row of the rank the skew analysis named a straggler (None: it named none)."""
    rows = np.flatnonzero(g.rank_numbers == rank) if rank is not None else np.zeros(0, np.int64)
    return (int(rows[0]), {"rank": int(rank)}) if rows.size else (None, {"reason": "not_named"})


def _input_phases(g: Graph, waited: np.ndarray) -> np.ndarray:
    """Per op (rows: from point, to point, fraction in ppm; -1: keep its issue point): where a
    collective could have been issued had it been issued as soon as its input was ready. The
    K collectives issued one after another right after a phase ends (outside every phase, no
    phase opens in between, same step; ops queued behind them on their lane included), of which the chain waits for at
    least one, are taken to have their inputs ready evenly through that phase, the k-th at
    (k + 1) / K of it, as DDP buckets during backward; the last stays at the phase's end. A
    collective issued inside a phase keeps its issue point."""
    hoist = np.full((g.o_start.size, 3), -1, np.int64)
    root = g.o_issue.copy()
    for op in np.flatnonzero(root < 0):  # queued ops only, in lane order: their predecessor comes first
        root[op] = root[g.o_lane_prev[op]] if g.o_lane_prev[op] >= 0 else -1
    bound = (g.p_kind == _PHASE_END) | (g.p_kind == _PHASE_START) | (g.p_kind == _STEP_START)
    last_bound = np.maximum.accumulate(np.where(bound, np.arange(g.p_kind.size), -1))
    after = np.where(root >= 0, last_bound[np.maximum(root, 0)], -1)
    safe = np.maximum(after, 0)
    step_in = (g.p_kind == _PHASE_START).astype(np.int64) - (g.p_kind == _PHASE_END)
    opened = np.cumsum(step_in)  # phases open at each point, counted from the rank's first point
    depth = opened - np.repeat(opened[g.p_first] - step_in[g.p_first],
                               np.diff(np.r_[np.flatnonzero(g.p_first), g.p_kind.size]))
    ok = (after >= 0) & (g.p_kind[safe] == _PHASE_END) & (g.p_rank[safe] == g.p_rank[np.maximum(root, 0)]) \
        & ~g.p_loader[safe] & (depth[np.maximum(root, 0)] == 0)  # issued outside every phase
    groups = np.unique(after[ok])
    serialized = np.unique(after[waited[ok[waited]]]) if waited.size else np.zeros(0, np.int64)
    starts = _phase_starts(g, np.intersect1d(groups, serialized))
    for end, begin in starts.items():  # one iteration per phase end that waited-for collectives follow
        mine = np.flatnonzero(ok & (after == end))
        mine = mine[np.lexsort((g.o_start[mine], root[mine]))]
        hoist[mine] = np.stack([np.full(mine.size, begin), np.full(mine.size, end),
                                (np.arange(1, mine.size + 1) * 1_000_000) // mine.size], axis=1)
    return hoist


def _phase_starts(g: Graph, ends: np.ndarray) -> dict[int, int]:
    """The start point of each phase-end point (the latest same-named start before it on its rank)."""
    out = {}
    for end in ends.tolist():  # one per phase end that collectives follow
        name = str(g.p_label[end])[:-1] + "<"
        lo = end
        while lo > 0 and not g.p_first[lo] and g.p_label[lo] != name:
            lo -= 1
        if g.p_label[lo] == name and g.p_rank[lo] == g.p_rank[end]:
            out[end] = lo
    return out


def _scenario_inputs(name: str, g: Graph, context: dict, base: tuple) -> tuple[tuple | None, dict]:
    """(w, transfer, edges) of a scenario applied on top of ``base`` (the measured durations and
    waits, or another scenario's), or None, and what it changed (or why it does not apply)."""
    w, transfer, edges, hoist = base
    if name == "no_straggler":
        row, info = context["straggler"]
        if row is None:
            return None, info
        new_w = w - (g.p_w - _without_lateness(g, row, np.setdiff1d(np.arange(g.n_ranks), [row])))
        steps = max(int(np.unique(g.step_index[g.step_rank == row]).size), 1)
        return (new_w, transfer, edges, hoist), {**info, "removed_per_step_ns": int((w - new_w).sum() // steps)}
    if name == "balanced_ranks":
        if g.n_ranks < 2:
            return None, {"reason": "one_rank"}
        rows = np.arange(g.n_ranks)
        return (_with_medians(g, _segment_medians(g, rows, w), rows, w), transfer, edges, hoist), {}
    if name == "comm_bandwidth_x2":
        if not (transfer > 0).any():
            return None, {"reason": "no_transfer"}
        return (w, transfer // 2, edges, hoist), {"transfer_ns": int(transfer.sum())}
    if name == "no_dataloader_wait":
        removed = int(w[g.p_loader].sum())
        if removed <= 0:
            return None, {"reason": "no_dataloader", "phase": context["dataloader"]}
        return (np.where(g.p_loader, 0, w), transfer, edges, hoist), {"removed_ns": removed}
    if name == "overlap_communication":
        if not edges.shape[0]:
            return None, {"reason": "already_overlapped"}
        done = (g.o_step_end >= 0) & (g.o_end <= g.p_t[np.maximum(g.o_step_end, 0)] + WAIT_TOLERANCE_NS)
        ops = np.flatnonzero(done)
        step_end = np.stack([g.o_step_end[ops], ops, np.zeros(ops.size, np.int64)], axis=1)
        ready_early = _input_phases(g, np.unique(edges[:, 1]))
        return (w, transfer, step_end, ready_early), {"waits_removed": int(edges.shape[0]),
                                                      "issued_earlier": int((ready_early[:, 0] >= 0).sum())}
    raise ValueError(f"unknown what-if scenario {name!r}; known: {', '.join(SCENARIOS)}")


def _step_table(g: Graph, t: np.ndarray) -> pd.DataFrame:
    """Per (rank row, step): the step's duration under point times ``t``."""
    return pd.DataFrame({"rank": g.step_rank, "step": g.step_index, "ns": t[g.step_end] - t[g.step_start]})


def _job_steps(table: pd.DataFrame) -> pd.Series:
    """Per step: the job's step time (analyses.steptime: the median over ranks of the step's duration)."""
    steps, per_step = steptime.per_step(table["step"].to_numpy(), table["ns"].to_numpy())
    return pd.Series(per_step, index=pd.Index(steps, name="step"))


def _rank_medians(table: pd.DataFrame) -> pd.Series:
    return table.groupby("rank")["ns"].median()


WHY = {
    "not_named": "no straggler named by the skew analysis (skew.notes say why)",
    "one_rank": "one rank: nothing to balance",
    "no_transfer": "no collective with a measured transfer time",
    "no_dataloader": "no {phase} phase with time in it",
    "already_overlapped": "no step waits for its communication (already overlapped, or not shown by the trace)",
    "no_steps": "no ProfileStep markers: there is no step to replay",
}


def _why(info: dict) -> str:
    """The one line saying why a scenario does not apply."""
    return WHY[info["reason"]].format(phase=info.get("phase", "Dataloader"))


def _replay_notes(g: Graph, error: float | None) -> list[str]:
    """Why the replay misses the measured steps, when it does."""
    if error is None or error <= REPLAY_ERROR_TARGET:
        return []
    return ["the chain's waits and lanes do not explain the measured order (events the compact "
                     "results do not keep)"]


def _partial_note(g: Graph) -> list[str]:
    """Columns that are not one join: said, because the matching (not the replay) may be wrong."""
    partial = int(np.unique(g.o_col[g.o_partial]).size)
    if not partial:
        return []
    return [f"{partial} of {np.unique(g.o_col).size} matched collectives have members that end before others "
            "arrive (their process group not named by the trace, or clocks off): each member joins only the "
            "members that arrived before it ended"]


def _unwaited_gpu_note(g: Graph) -> list[str]:
    """GPU collectives that the host never waits for: what faster communication cannot show."""
    gpu = np.flatnonzero(g.o_gpu)
    if not gpu.size or np.isin(gpu, g.edges[:, 1]).any():
        return []
    return [f"the host waits for none of the {gpu.size} GPU collectives (no sync call returns with one): a "
            "scenario that speeds communication up saves time only where a rank waits for it, and the "
            "dependencies of kernels on other streams are not modelled"]


def whatif(results: list[RankResult], matching: Matching, config: dict,
           scenarios: tuple[str, ...] = SCENARIOS, straggler_rank: int | None = None) -> dict:
    """summary.json's ``whatif``: measured and replayed median step, the replay error (median over
    steps of |replayed − measured| / measured) and each scenario's predicted median step,
    saving against the measured one and the ranks whose own median step drops.
    ``straggler_rank``: the rank the skew analysis named (skew.py holds the one straggler rule),
    None when it named none: no_straggler then does not apply. Where it applies, every other
    scenario is also replayed on top of it (``saving_after_straggler_ns``): a delay the straggler
    causes is its cost, not also that of the waits it propagates into."""
    dataloader = str(config.get("phases", {}).get("dataloader", "Dataloader"))
    g = build_graph(results, matching, dataloader)
    if not g.step_start.size:
        info = {"reason": "no_steps"}
        return {"measured_step_ns": None, "replayed_step_ns": None, "replay_error": None, "replay_error_max": None,
                "steps": 0, "notes": [_why(info)],
                "scenarios": [{"name": n, "predicted_step_ns": None, "saving_ns": None, "ranks_gaining": [],
                               "applies": False, "why": _why(info)} for n in scenarios]}
    measured = _step_table(g, g.p_t)
    measured_inputs = (g.p_w, g.o_transfer, g.edges, None)
    t, _ = replay(g, *measured_inputs)
    replayed = _step_table(g, t)
    job_measured, job_replayed = _job_steps(measured), _job_steps(replayed)
    errors = (job_replayed - job_measured).abs() / job_measured.clip(lower=1)
    measured_ns = int(round(job_measured.median()))
    context = {"dataloader": dataloader, "straggler": _named(g, straggler_rank)}
    base_by_rank = _rank_medians(replayed)
    fixed, _ = _scenario_inputs("no_straggler", g, context, measured_inputs)
    fixed_ns = int(round(_job_steps(_step_table(g, replay(g, *fixed)[0])).median())) if fixed else None
    rows = [_scenario(name, g, context, measured_ns, base_by_rank, measured_inputs)
            | ({"saving_after_straggler_ns": _saving_on(name, g, context, fixed, fixed_ns)}
               if fixed is not None and name != "no_straggler" else {}) for name in scenarios]
    error = float(errors.median())
    return {"measured_step_ns": measured_ns, "replayed_step_ns": int(round(job_replayed.median())),
            "replay_error": error, "replay_error_max": float(errors.max()), "steps": int(job_measured.size),
            "notes": _partial_note(g) + _replay_notes(g, error) + _unwaited_gpu_note(g), "scenarios": rows}


def _saving_on(name: str, g: Graph, context: dict, base: tuple, base_ns: int) -> int | None:
    """The saving of a scenario replayed on top of ``base`` (another scenario's inputs), against
    ``base_ns`` (that scenario's predicted step); None when it does not apply there."""
    inputs, _ = _scenario_inputs(name, g, context, base)
    if inputs is None:
        return None
    return base_ns - int(round(_job_steps(_step_table(g, replay(g, *inputs)[0])).median()))


def _scenario(name: str, g: Graph, context: dict, measured_ns: int, base_by_rank: pd.Series,
              base: tuple) -> dict:
    """One scenario's row: replayed with its changes, or why it does not apply."""
    inputs, info = _scenario_inputs(name, g, context, base)
    if inputs is None:
        return {"name": name, "predicted_step_ns": None, "saving_ns": None, "ranks_gaining": [],
                "applies": False, "why": _why(info), **{k: v for k, v in info.items() if k != "reason"}}
    t, _ = replay(g, *inputs)
    table = _step_table(g, t)
    predicted = int(round(_job_steps(table).median()))
    by_rank = _rank_medians(table)
    gain = base_by_rank - by_rank.reindex(base_by_rank.index)
    gaining = [int(g.rank_numbers[r]) for r in gain.index[(gain > GAIN_SHARE * base_by_rank).to_numpy()]]
    return {"name": name, "predicted_step_ns": predicted, "saving_ns": measured_ns - predicted,
            "ranks_gaining": gaining, "applies": True, "why": None, **info}


def safe_whatif(results: list[RankResult], matching: Matching, config: dict, warnings: list[str],
                straggler_rank: int | None = None) -> dict | None:
    """``whatif`` for pipeline.combine: a trace the replay cannot read costs the what-if, with a
    warning saying so, not the whole merge."""
    try:
        return whatif(results, matching, config, straggler_rank=straggler_rank)
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(f"what-if replay skipped: {type(error).__name__}: {error}")
        return None
