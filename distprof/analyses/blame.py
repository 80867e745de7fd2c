"""Causal blame: how much of a rank's lateness at a collective (or send) is its *own* delay.

A rank that arrives last because it waited earlier for another rank (in another process group,
or for the previous pipeline stage) only passes that delay on; and one delay of a rank, seen by
two groups it belongs to (tensor parallel first, data parallel later), is still one delay. Wait
states propagate, as in Scalasca's root-cause analysis, and are charged once, to their root.

Per matched instance j whose last arrival R made the second-latest S wait L (``counted``), each
arrival is split at the end of the rank's previous communication op p (when it resumed):
L = (R's resume − S's resume) + (R's time since then − S's time since then). Of the first part,
R's own new delay is not what R carried in through the step up to p: the time it waited at its
ops of the step (a delay passed on, charged where it began) and its lateness at those it was last
at (its own delay, charged there already). So R is charged L less min(R's resume − S's resume,
what R carried in), >= 0. (Capped by what R carried in: S's idle time before j is not R's to keep.)
The whole step counts, not p alone: a rank that waited 40 ms at a tensor-parallel allreduce and
then ran three more allreduces on time is still 40 ms behind at the data-parallel allgather.
"""

from __future__ import annotations

import numpy as np

from ..columns import group_medians, lookup, runs, search


def _carried(present: np.ndarray, start: np.ndarray, end: np.ndarray, wait: np.ndarray, lateness: np.ndarray,
             last_row: np.ndarray, step: np.ndarray, p2p: np.ndarray,
             p2p_charged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ranks, instances), twice: the column of the rank's latest-ending op that ended before it
    arrived at this one (-1: none), and what the rank carried in through that op's step: its waits
    at its collectives of the step up to that op and its lateness at those it was last at; at a
    send/recv it was last at, only what was charged there (``p2p_charged``: the rest of a send/recv's
    wait and lateness is the pipeline's structure; own_charges takes the previous op's whole).
    All ranks in one grouped search, the sums by one cumulative sum over runs of (rank, step) in
    end order."""
    rows, cols = np.nonzero(present)
    previous, carried = np.full(present.shape, -1, np.int64), np.zeros(present.shape, np.int64)
    if not rows.size:
        return previous, carried
    ends = end[rows, cols]
    order = np.lexsort((ends, rows))
    sorted_rows, sorted_ends, sorted_cols = rows[order], ends[order], cols[order]
    was_last = last_row[sorted_cols] == sorted_rows
    carry = np.where(p2p[sorted_cols], np.where(was_last, p2p_charged[sorted_cols], 0),
                     wait[sorted_rows, sorted_cols] + np.where(was_last, lateness[sorted_cols], 0))
    sorted_steps = step[sorted_cols]
    new_run = np.r_[True, (sorted_rows[1:] != sorted_rows[:-1]) | (sorted_steps[1:] != sorted_steps[:-1])]
    through = np.cumsum(carry)
    head = np.maximum.accumulate(np.where(new_run, np.arange(sorted_cols.size), 0))
    through -= through[head] - carry[head]  # restarted at each run's first op
    found = search(sorted_rows, sorted_ends, rows, start[rows, cols], side="right") - 1
    at = np.maximum(found, 0)
    mine = (found >= 0) & (sorted_rows[at] == rows)
    previous[rows, cols] = np.where(mine, sorted_cols[at], -1)
    carried[rows, cols] = np.where(mine, through[at], 0)
    return previous, carried


def own_charges(present: np.ndarray, start: np.ndarray, duration: np.ndarray, inst: dict,
                counted: np.ndarray, step: np.ndarray, p2p: np.ndarray | None = None,
                p2p_charged: np.ndarray | None = None) -> np.ndarray:
    """Per instance, the last rank's own share of what the second-latest waited for it (ns; 0
    where not ``counted``). ``start``/``duration``: (ranks, instances) on the aligned clock;
    ``inst``: analyses.collectives.instances (its ``wait`` caps what anyone waited); ``step``:
    per instance, its step: a delay is carried in from an op of the same step only (between
    steps the ranks run the optimizer and load data, and idle time there absorbs it); ``p2p``:
    the instances that are send/recv pairs (None: none); ``p2p_charged``: per instance, what a
    first pass charged at a send/recv once the pipeline's structure was taken off (its stage's
    delay, carried to the later hand-overs of the step, not charged there again)."""
    n = present.shape[1]
    out = np.zeros(n, np.int64)
    charged = np.flatnonzero(counted)
    if not charged.size:
        return out
    end = start + duration
    columns = np.arange(n)
    wait, last_row = inst["wait"], inst["last_row"]
    lateness = wait[inst["second_row"], columns]  # what the second-latest waited for the last one
    p2p = np.zeros(n, bool) if p2p is None else p2p
    p2p_charged = np.zeros(n, np.int64) if p2p_charged is None else p2p_charged
    previous, carried = _carried(present, start, end, wait, lateness, last_row, step, p2p, p2p_charged)
    late, waiter = last_row[charged], inst["second_row"][charged]
    mine, theirs = previous[late, charged], previous[waiter, charged]
    mine = np.where(step[np.maximum(mine, 0)] == step[charged], mine, -1)
    theirs = np.where(step[np.maximum(theirs, 0)] == step[charged], theirs, -1)
    p = np.maximum(mine, 0)
    last_at_p = last_row[p] == late
    own_at_p = wait[late, p] + np.where(last_at_p, lateness[p], 0)  # a send/recv just before: its whole
    carried_in = np.where(mine >= 0, carried[late, charged]
                          + np.where(p2p[p], own_at_p - np.where(last_at_p, p2p_charged[p], 0), 0), 0)
    behind = np.where((mine >= 0) & (theirs >= 0),
                      end[late, p] - end[waiter, np.maximum(theirs, 0)], np.where(mine >= 0, carried_in, 0))
    waited = lateness[charged]
    out[charged] = waited - np.clip(np.minimum(behind, carried_in), 0, waited)
    return out


def beyond_pipeline(own: np.ndarray, p2p: np.ndarray, step: np.ndarray, ordinal: np.ndarray,
                    forward: np.ndarray) -> np.ndarray:
    """Charges with a pipeline's structure taken off. A receive waits for the previous stage to
    compute its input: that dependency (the pipeline's bubble) is no delay of the sender. Per
    send/recv, what its sender's charge exceeds the median charge of the same hand-over (the
    ordinal-th of the step, in the same direction) at the other stage boundaries: a balanced
    pipeline charges nobody; a slow stage is charged what it adds over its neighbours. A
    pipeline of two stages has one boundary, nothing to compare with: no p2p charge at all."""
    out = own.copy()
    rows = np.flatnonzero(p2p)
    if not rows.size:
        return out
    key, _ = runs(step[rows], ordinal[rows], forward[rows].astype(np.int64))
    medians = lookup(group_medians(key, own[rows].astype(np.float64)), key)
    alone = np.bincount(key)[key] < 3  # fewer than three boundaries: no median that a slow one cannot move
    out[rows] = np.where(alone, 0, np.maximum(own[rows] - np.round(medians), 0)).astype(np.int64)
    return out
