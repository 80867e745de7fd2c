"""Critical path across ranks: what sets each step's time (DESIGN "What-if").

The what-if replay (analyses/whatif.py) computes every time as the max over its predecessors: a
chain point is max(previous point + segment, waited op's end + gap); an op starts at
max(ready, lane predecessor's end) + launch delay and ends at max(start, last arrival + transfer).
Walking back from a step's end and always taking the predecessor that set the max gives the
critical path: the work whose shortening shortens the step. It crosses ranks at joins: where a
transfer started at another member's arrival, the path continues on that member's chain. Time a
rank spends waiting is therefore never on the path; the path goes through whoever it waited for.

Per step, the walk starts at the step end of the rank whose replayed step is the job's step time
(the median over ranks; with an even count, the rank closest to the median) and stops at that
rank's step start, so the path's length is that rank's replayed step. Numbers and codes only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..events import HOST_THREAD
from . import whatif
from .cost import FINDING_SCENARIOS
from .whatif import Graph, ReplayTimes

COMPUTE, COMMUNICATION, HOST, WAIT, IDLE = "compute", "communication", "host", "wait", "idle"
KINDS = (COMPUTE, COMMUNICATION, HOST, WAIT, IDLE)
CHAIN_LANE = "thread"          # the issuing thread of the rank (the replay's chain)
NO_PHASE = "(no phase)"
TRACE_START = "(trace starts)"  # the path reaches a rank's first point: its trace starts after the step did
DOMINANT_SHARE = 0.5           # a phase or name above this share of the path dominates it
TOP = 10
NESTING = 8                    # phases looked back over to find the one holding a time
_POINT, _OP_END, _OP_START = range(3)
_NEG = np.iinfo(np.int64).min // 4


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
    transfer, IDLE for a launch delay or a chain that starts late. One iteration per segment."""
    out: list[tuple] = []
    node, at = _POINT, end_point
    for _ in range(g.p_t.size + 2 * g.o_start.size + 2):  # a replay graph has no cycles
        if node == _POINT:
            now = int(r.t[at])
            if now <= stop:
                return out
            if g.p_first[at]:
                out.append((g.p_rank[at], -1, IDLE, stop, now))
                return out
            op = wait_op[at]
            out.append((g.p_rank[at], -1, COMPUTE, int(r.end[op]) if op >= 0 else int(r.t[at - 1]), now))
            node, at = (_OP_END, op) if op >= 0 else (_POINT, at - 1)
        elif node == _OP_END:
            if r.end[at] <= stop:
                return out
            last = r.last_op[at] if r.start[r.last_op[at]] > r.start[at] else at
            if r.start[last] + transfer[at] >= r.start[at]:
                out.append((g.o_rank[at], at, COMMUNICATION, int(r.start[last]), int(r.end[at])))
            node, at = _OP_START, last
        else:
            begin = int(r.start[at] - g.o_delta[at])
            if r.start[at] <= stop:
                return out
            out.append((g.o_rank[at], at, IDLE, begin, int(r.start[at])))
            prev = g.o_lane_prev[at]
            queued = prev >= 0 and (r.end[prev] >= r.ready[at] or g.o_issue[at] < 0)
            node, at = (_OP_END, prev) if queued else (_POINT, g.o_issue[at])
    raise ValueError("critical path: the replay graph has a cycle")


def _phase_table(g: Graph, t: np.ndarray) -> pd.DataFrame:
    """Every phase instance on the replayed clock: rank row, name, start, end."""
    kind, label = g.p_kind, pd.Series(g.p_label, dtype=object)
    frames = []
    for mark, bound in ((whatif._PHASE_START, "start"), (whatif._PHASE_END, "end")):
        rows = np.flatnonzero(kind == mark)
        frame = pd.DataFrame({"rank": g.p_rank[rows], "name": label.iloc[rows].str[:-1].to_numpy(),
                              bound: t[rows]})
        frame["k"] = frame.groupby(["rank", "name"]).cumcount()
        frames.append(frame)
    return frames[0].merge(frames[1], on=["rank", "name", "k"])[["rank", "name", "start", "end"]]


def _phases_at(phases: pd.DataFrame, rank: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per (rank row, time): the innermost phase that holds it (the latest started of those that
    hold it, looking back over ``NESTING`` phases), or ''. Vectorized over the queries."""
    out = np.full(rank.size, "", dtype=object)
    if not len(phases) or not rank.size:
        return out
    table = phases.sort_values(["rank", "start"], kind="stable")
    key_rank, starts = table["rank"].to_numpy(np.int64), table["start"].to_numpy(np.int64)
    ends, names = table["end"].to_numpy(np.int64), table["name"].to_numpy(object)
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


def _host_ops_at(g: Graph, r: ReplayTimes, rank: np.ndarray, at: np.ndarray,
                 chain_lanes: list[set[str]] | None) -> np.ndarray:
    """Per (rank row, time): a host-side comm op (a blocking MPI or gloo call: not GPU work) that
    runs then on the rank's own computing thread (``chain_lanes`` per rank row), or -1: a chain
    segment inside one is the host's time in the comm call, not compute. Ops on other threads
    (a comm thread, gloo's workers) run beside the chain and leave its segments compute."""
    out = np.full(rank.size, -1, np.int64)
    pairs = [f"{row}\x00{lane}" for row, lanes in enumerate(chain_lanes or []) for lane in lanes]
    if not pairs or not rank.size or not g.o_rank.size:
        return out
    own = (pd.Series(g.o_rank).astype(str) + "\x00" + pd.Series(g.o_lane, dtype=object)).isin(pairs).to_numpy()
    host = np.flatnonzero(~g.o_gpu & own)
    if not host.size:
        return out
    ops = pd.DataFrame({"rank": g.o_rank[host], "start": r.start[host], "end": r.end[host], "op": host})
    query = pd.DataFrame({"rank": rank, "at": at, "i": np.arange(rank.size)})
    found = pd.merge_asof(query.sort_values("at", kind="stable"), ops.sort_values("start", kind="stable"),
                          left_on="at", right_on="start", by="rank", direction="backward").sort_values("i")
    inside = found["end"].to_numpy(np.float64) > at
    out[inside] = found["op"].to_numpy(np.float64)[inside].astype(np.int64)
    return out


def _segments(g: Graph, r: ReplayTimes, walked: pd.DataFrame, chain_lanes: list[set[str]] | None) -> pd.DataFrame:
    """The walked pieces of every step (columns step, rank row, op, kind, start, end; in time
    order, clipped at their step's start) labelled (host, phase, name, lane) and joined where
    neighbours are the same work."""
    rank, op, kind = (walked[c].to_numpy() for c in ("rank", "op", "kind"))
    start, end = walked["start"].to_numpy(np.int64), walked["end"].to_numpy(np.int64)
    mid = start + (end - start) // 2
    host_op = np.where(kind == COMPUTE, _host_ops_at(g, r, rank, mid, chain_lanes), -1)
    kind = np.where(host_op >= 0, HOST, kind)
    op = np.where(host_op >= 0, host_op, op)
    phase = _phases_at(_phase_table(g, r.t), rank, mid)
    name = np.where(phase == "", NO_PHASE, phase).astype(object)
    name[(kind == IDLE) & (op < 0)] = TRACE_START
    lane = np.full(op.size, CHAIN_LANE, dtype=object)
    on_op = op >= 0
    name[on_op], lane[on_op] = g.o_name[op[on_op]], g.o_lane[op[on_op]]
    lane[kind == HOST] = CHAIN_LANE
    frame = pd.DataFrame({"step": walked["step"].to_numpy(), "rank": g.rank_numbers[rank], "lane": lane,
                          "name": name, "kind": kind, "start_ns": start, "end_ns": end, "phase": phase})
    label = frame[["step", "rank", "lane", "name", "kind", "phase"]]
    same = (label == label.shift()).all(axis=1).to_numpy() & (frame["start_ns"] == frame["end_ns"].shift()).to_numpy()
    first = {c: (c, "first") for c in frame.columns if c != "end_ns"}
    return frame.groupby(np.cumsum(~same)).agg(**first, end_ns=("end_ns", "last"))


def _walked(g: Graph, r: ReplayTimes, steps: pd.DataFrame, wait_op: np.ndarray, transfer: np.ndarray) -> pd.DataFrame:
    """Every step's walk, in time order, clipped at its step start, empty pieces left out."""
    pieces = []
    for row in steps.itertuples(index=False):  # one iteration per step
        stop = int(r.t[row.p_s])
        pieces += [(row.step, stop, *piece) for piece in _walk(g, r, wait_op, transfer, int(row.p_e), stop)[::-1]]
    frame = pd.DataFrame(pieces, columns=["step", "stop", "rank", "op", "kind", "start", "end"])
    frame["start"] = np.maximum(frame["start"].to_numpy(np.int64), frame["stop"].to_numpy(np.int64))
    return frame[frame["end"] > frame["start"]].reset_index(drop=True)


def _step_ranks(g: Graph, t: np.ndarray) -> pd.DataFrame:
    """Per step: the rank row whose replayed step is the job's step time (the median over ranks;
    with an even count the rank closest to it, ``exact`` False), its step's points and duration."""
    table = whatif._step_table(g, t).assign(p_s=g.step_start, p_e=g.step_end)
    job = whatif._job_steps(table)
    table["job_ns"] = job.reindex(table["step"]).to_numpy()
    table["off"] = (table["ns"] - table["job_ns"]).abs()
    chosen = table.sort_values(["step", "off", "rank"], kind="stable").groupby("step").head(1)
    counts = table.groupby("step")["rank"].size()
    return chosen.assign(exact=(counts.reindex(chosen["step"]).to_numpy() % 2 == 1) & (chosen["off"] == 0))


def paths(g: Graph, r: ReplayTimes, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
          chain_lanes: list[set[str]] | None = None) -> list[dict]:
    """Per step: the critical path (rank, length, segments) of a replay with inputs (w, transfer,
    edges) and its times ``r``; ``chain_lanes``: per rank row, the labels of its computing thread."""
    steps = _step_ranks(g, r.t)
    segments = _segments(g, r, _walked(g, r, steps, _binding_waits(g, r, w, edges), transfer), chain_lanes)
    by_step = dict(tuple(segments.groupby("step")))
    out = []
    for row in steps.itertuples(index=False):  # one iteration per step
        mine = by_step.get(row.step, segments.iloc[:0])
        out.append({"step": int(row.step), "rank": int(g.rank_numbers[row.rank]), "job_step_ns": int(round(row.job_ns)),
                    "rank_step_ns": int(row.ns), "rank_rule": "median" if row.exact else "closest_to_median",
                    "length_ns": int((mine["end_ns"] - mine["start_ns"]).sum()), "segments": _rows(mine)})
    return out


_SEGMENT_COLUMNS = ("rank", "lane", "name", "kind", "start_ns", "end_ns", "phase")


def _rows(segments: pd.DataFrame) -> list[dict]:
    """Segments as summary.json rows (plain ints and strings)."""
    return [{"rank": int(rank), "lane": str(lane), "name": str(name), "kind": str(kind), "start_ns": int(start),
             "end_ns": int(end), "phase": str(phase)} for rank, lane, name, kind, start, end, phase in
            segments[list(_SEGMENT_COLUMNS)].itertuples(index=False, name=None)]


def _shares(frame: pd.DataFrame, by: str, total: int) -> dict:
    """Share of the total path length per value of ``by``, largest first (keys as strings)."""
    ns = frame.groupby(by)["ns"].sum().sort_values(ascending=False, kind="stable")
    return {str(key): float(value / total) for key, value in ns.items()} if total else {}


def scenario_shares(frame: pd.DataFrame, total: int, straggler_rank: int | None, dataloader: str) -> dict:
    """Per what-if scenario, the share of the path it acts on (the part it can shorten): the
    straggler's own work, the communication, the dataloader phase, the compute; None where the
    scenario has nothing to act on (no straggler named)."""
    def share(mask) -> float:
        return float(frame["ns"][mask].sum() / total) if total else 0.0
    communication = share(frame["kind"] == COMMUNICATION)
    return {"no_straggler": None if straggler_rank is None else
            share((frame["rank"] == straggler_rank) & (frame["kind"] != COMMUNICATION)),
            "overlap_communication": communication, "comm_bandwidth_x2": communication,
            "no_dataloader_wait": share(frame["phase"] == dataloader),
            "balanced_ranks": share(frame["kind"].isin([COMPUTE, HOST]))}


def critical_path(g: Graph, r: ReplayTimes, w: np.ndarray, transfer: np.ndarray, edges: np.ndarray,
                  chain_lanes: list[set[str]] | None = None, straggler_rank: int | None = None,
                  dataloader: str = "Dataloader") -> dict:
    """summary.json's ``critical_path``: the path of every step, the shares of the total path
    length (all steps) by rank, kind and phase, the top contributors by name, ``dominant``: the
    phase or name that holds more than ``DOMINANT_SHARE`` of the path (None: none does), and
    ``scenario_shares``: the part of the path each what-if scenario acts on."""
    steps = paths(g, r, w, transfer, edges, chain_lanes)
    rows = [seg for step in steps for seg in step["segments"]]
    frame = pd.DataFrame(rows, columns=list(_SEGMENT_COLUMNS))
    frame["ns"] = frame["end_ns"] - frame["start_ns"]
    total = int(frame["ns"].sum())
    by_name = frame.groupby(["name", "kind"], sort=False).agg(ns=("ns", "sum"),
                                                              ranks=("rank", lambda s: sorted(set(s))))
    by_name = by_name.sort_values("ns", ascending=False, kind="stable").head(TOP)
    top = [{"name": str(name), "kind": str(kind), "ns": int(row.ns), "share": float(row.ns / total) if total else 0.0,
            "ranks": [int(x) for x in row.ranks]} for (name, kind), row in by_name.iterrows()]
    by_phase = _shares(frame, "phase", total)
    dominant = None
    for by, shares in (("phase", by_phase), ("name", {t["name"]: t["share"] for t in top})):
        key, share = next(iter(shares.items()), (None, 0.0))
        if key is not None and share > DOMINANT_SHARE and (by != "phase" or key):
            dominant = {"by": by, "name": key, "share": share}
            break
    return {"steps": steps, "length_ns": total, "share_by_rank": _shares(frame, "rank", total),
            "share_by_kind": _shares(frame, "kind", total), "share_by_phase": by_phase, "top": top,
            "dominant": dominant, "scenario_shares": scenario_shares(frame, total, straggler_rank, dataloader)}


def safe_critical_path(g: Graph | None, results: list, warnings: list[str], straggler_rank: int | None = None,
                       dataloader: str = "Dataloader") -> dict | None:
    """``critical_path`` of the measured replay for pipeline.combine (None without a graph or
    steps); ``results`` (RankResults, the graph's rows) name each rank's computing threads. A graph
    the walk cannot follow costs the critical path, with a warning, not the merge."""
    if g is None or not g.step_start.size:
        return None
    try:
        inputs = (g.p_w, g.o_transfer, g.edges)
        chain_lanes = [{lane.label for lane in result.lanes
                        if lane.lane_kind == HOST_THREAD and lane.computation_ns > 0} for result in results]
        return critical_path(g, whatif.replay_times(g, *inputs), *inputs, chain_lanes, straggler_rank, dataloader)
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(f"critical path skipped: {type(error).__name__}: {error}")
        return None


def with_path_evidence(findings: list[dict], path: dict | None) -> list[dict]:
    """Findings with ``critical_path_share`` in their evidence: the share of the critical path that
    the scenario pricing their fix acts on (the straggler's own work, the communication, ...),
    where there is a path and that scenario acts on some of it."""
    shares = (path or {}).get("scenario_shares") or {}
    out = []
    for finding in findings:  # one per finding (a short list)
        share = shares.get(FINDING_SCENARIOS.get(finding.get("finding"), ""))
        evidence = finding.get("evidence")
        if share is not None and isinstance(evidence, dict):
            finding = {**finding, "evidence": {**evidence, "critical_path_share": share}}
        out.append(finding)
    return out
