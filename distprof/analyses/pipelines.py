"""Send/recv pipelines: which ranks form one, in stage order, and each stage's bubble: the time
it waits in send/recv for its neighbour stages. In a pipeline a recv that waits for the previous
stage's activations is a dependency, not serialized communication: the placement check says so
(analyses.streams) and this is where that time is shown instead. Numbers only."""

from __future__ import annotations

import numpy as np

from ..columns import union_per_key
from ..matching import Matching
from ..sections.skew import Pipeline, Stage
from . import collectives as coll


def chains(sender: np.ndarray, receiver: np.ndarray) -> list[list[int]]:
    """The pipelines among the matched send/recv pairs: each connected part of the graph of
    sender–receiver pairs that is a simple path of two or more ranks (each rank exchanges with at
    most two others, and no cycle: a ring of sequence-parallel exchanges is not a pipeline), as
    its ranks from one end to the other. One iteration per rank pair, not per op."""
    pairs = {tuple(sorted(p)) for p in zip(sender.tolist(), receiver.tolist()) if min(p) >= 0 and p[0] != p[1]}
    neighbours: dict[int, set[int]] = {}
    for a, b in pairs:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    out, seen = [], set()
    for end in sorted(rank for rank, near in neighbours.items() if len(near) == 1):
        if end in seen:
            continue
        path = [end]
        while True:  # walk the path to its other end
            ahead = [n for n in neighbours[path[-1]] if n not in path]
            if len(ahead) != 1 or len(neighbours[ahead[0]]) > 2:
                break
            path.append(ahead[0])
        seen.update(path)
        if len(neighbours[path[-1]]) == 1 and len(path) >= 2:
            out.append(path)
    return out


def _oriented(path: list[int], matching: Matching, start: np.ndarray) -> list[int]:
    """Stage 0 first: the end whose first send is earlier (on the aligned clock)."""
    row_of = {rank: row for row, rank in enumerate(matching.ranks.tolist())}

    def first_send(end: int) -> int:
        mine = matching.sender == end
        return int(start[row_of[end], mine].min()) if mine.any() else np.iinfo(np.int64).max

    return path if first_send(path[0]) <= first_send(path[-1]) else path[::-1]


def bubbles(matching: Matching, inst: coll.Instances, step_ns: float | None) -> list[Pipeline]:
    """Per pipeline, per stage: what it waits per step in its send/recv for the stage before it
    (``upstream_ns``: activations not there yet) and after it (``downstream_ns``: gradients, or a
    receiver not ready), and both together (``bubble_ns``, a union: waits at once count once),
    with ``share`` of the step. Waits are inst's (the last member's start − this member's, on the
    aligned clock, no more than the op lasted)."""
    p2p = np.flatnonzero((np.asarray(matching.name, dtype=str) == coll.P2P) & (matching.sender >= 0)) \
        if matching.sender.size == matching.size else np.zeros(0, np.int64)
    if not p2p.size:
        return []
    out = []
    for path in chains(matching.sender[p2p], matching.receiver[p2p]):  # one per pipeline
        path = _oriented(path, matching, inst.start)
        out.append(_stage_waits(matching, inst, p2p, path, step_ns))
    return out


def _stage_waits(matching: Matching, inst: coll.Instances, p2p: np.ndarray, path: list[int],
                 step_ns: float | None) -> Pipeline:
    stage_of = np.full(int(max(matching.ranks.max(), max(path))) + 1, -1, np.int64)
    stage_of[path] = np.arange(len(path))
    columns = p2p[np.isin(matching.sender[p2p], path) & np.isin(matching.receiver[p2p], path)]
    rows, where = np.nonzero(matching.present[:, columns])
    column = columns[where]
    me = matching.ranks[rows]
    peer = np.where(matching.sender[column] == me, matching.receiver[column], matching.sender[column])
    upstream = stage_of[peer] < stage_of[me]
    start = inst.start[rows, column]
    end = start + inst.wait[rows, column]
    steps = np.unique(matching.step[columns])
    units = max(int(steps.size), 1)
    n_rows = matching.present.shape[0]
    up = union_per_key(rows[upstream], start[upstream], end[upstream], n_rows) / units
    down = union_per_key(rows[~upstream], start[~upstream], end[~upstream], n_rows) / units
    both = union_per_key(rows, start, end, n_rows) / units
    row_of = {rank: row for row, rank in enumerate(matching.ranks.tolist())}
    stages = [Stage(stage=k, rank=rank, bubble_ns=int(round(both[row_of[rank]])),
                    upstream_ns=int(round(up[row_of[rank]])), downstream_ns=int(round(down[row_of[rank]])),
                    share=float(both[row_of[rank]] / step_ns) if step_ns else None)
              for k, rank in enumerate(path) if rank in row_of]
    return Pipeline(ranks=path, steps=units, stages=stages)
