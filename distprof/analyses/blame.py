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

A pipeline is different: a stage waits for the one before by construction (the bubble), and where
the waits of a send/recv end depends on its place in the schedule (the last stage runs a
micro-batch's forward and backward before its first backward send, the others only the backward),
so no hand-over can be charged by what its receiver waited. A stage's own delay is its time
outside communication beyond the median stage's in the same step (``pipeline_excess``): every stage
of a balanced pipeline computes as long; a slow one (in forward, backward or loading its data)
computes longer by its delay, and the others wait for it.
"""

from __future__ import annotations

import numpy as np

from ..columns import search, union_per_key
from ..results import RankMarkers
from .collectives import Instances


def _carried(present: np.ndarray, start: np.ndarray, end: np.ndarray, wait: np.ndarray, lateness: np.ndarray,
             last_row: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ranks, instances), twice: the column of the rank's latest-ending op that ended before it
    arrived at this one (-1: none), and what the rank carried in through that op's step: its waits
    at its ops of the step up to that op and its lateness at those it was last at. All ranks in one
    grouped search, the sums by one cumulative sum over runs of (rank, step) in end order."""
    rows, cols = np.nonzero(present)
    previous, carried = np.full(present.shape, -1, np.int64), np.zeros(present.shape, np.int64)
    if not rows.size:
        return previous, carried
    ends = end[rows, cols]
    order = np.lexsort((ends, rows))
    sorted_rows, sorted_ends, sorted_cols = rows[order], ends[order], cols[order]
    was_last = last_row[sorted_cols] == sorted_rows
    carry = wait[sorted_rows, sorted_cols] + np.where(was_last, lateness[sorted_cols], 0)
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


def resumed_behind(present: np.ndarray, start: np.ndarray, duration: np.ndarray, step: np.ndarray) -> np.ndarray:
    """(ranks, instances): how long after the earliest member each rank resumed before arriving at the
    instance (the end of its latest op that ended before it arrived; 0 where unknown): a delay a rank
    carried in is at most this. Ranks that left their previous op together carry nothing (everyone
    resumed at once after a wait: the waits were absorbed)."""
    end = start + duration
    zeros = np.zeros(present.shape[1], np.int64)
    previous, _ = _carried(present, start, end, np.zeros_like(start), zeros, zeros - 1, step)
    rows = np.arange(present.shape[0])[:, None]
    known = present & (previous >= 0)
    resume = np.where(known, end[rows, np.maximum(previous, 0)], np.iinfo(np.int64).max)
    earliest = resume.min(axis=0) if resume.size else zeros
    return np.where(known, resume - earliest[None, :], 0)


def own_charges(present: np.ndarray, start: np.ndarray, duration: np.ndarray, inst: Instances,
                counted: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Per instance, the last rank's own share of what the second-latest waited for it (ns; 0
    where not ``counted``). ``start``/``duration``: (ranks, instances) on the aligned clock;
    ``inst``: analyses.collectives.instances (its ``wait`` caps what anyone waited); ``step``:
    per instance, its step: what a rank carried in is summed over its ops of one step. A step's
    first op is split at the rank's last op of the step before, with what it carried in there:
    a delay passed on at a step's end (a data-parallel partner that waited for the late rank at
    the last allgather) reaches the next step's first tensor-parallel allreduce late. Idle time
    between steps that absorbs a delay (the optimizer, data loading) leaves the two ranks resuming
    together, and ``behind`` is then small."""
    n = present.shape[1]
    out = np.zeros(n, np.int64)
    charged = np.flatnonzero(counted)
    if not charged.size:
        return out
    end = start + duration
    wait, last_row = inst.wait, inst.last_row
    lateness = wait[inst.second_row, np.arange(n)]  # what the second-latest waited for the last one
    previous, carried = _carried(present, start, end, wait, lateness, last_row, step)
    late, waiter = last_row[charged], inst.second_row[charged]
    mine, theirs = previous[late, charged], previous[waiter, charged]
    p = np.maximum(mine, 0)
    carried_in = np.where(mine >= 0, carried[late, charged], 0)
    behind = np.where((mine >= 0) & (theirs >= 0),
                      end[late, p] - end[waiter, np.maximum(theirs, 0)], np.where(mine >= 0, carried_in, 0))
    waited = lateness[charged]
    out[charged] = waited - np.clip(np.minimum(behind, carried_in), 0, waited)
    return out


def _step_index(steps: np.ndarray, step_of) -> tuple[np.ndarray, np.ndarray]:
    """Per item, the position of its step among ``steps`` and whether it is one of them."""
    step_of = np.asarray(step_of, np.int64)
    at = np.searchsorted(steps, step_of)
    return at, (at < steps.size) & (steps[np.minimum(at, max(steps.size - 1, 0))] == step_of)


MIN_PIPELINE_STAGES = 3  # fewer stages: no median that one slow stage cannot move (two: which is slow?)


def stage_pairs(present: np.ndarray, p2p: np.ndarray, step: np.ndarray) -> np.ndarray:
    """(rank row, step) pairs, unique and sorted, of the ranks with a matched send/recv in that step:
    the pipeline stages of each step. ``present``: the matching's (ranks, collectives); ``p2p``: which
    collectives are send/recv pairs; ``step``: each collective's step."""
    rows, cols = np.nonzero(present[:, p2p])
    pairs = np.stack([rows, np.asarray(step, np.int64)[p2p][cols]], axis=1)
    return np.unique(pairs, axis=0) if pairs.size else np.zeros((0, 2), np.int64)


def pipeline_excess(stage_steps: np.ndarray, markers: list[RankMarkers], steps: np.ndarray) -> np.ndarray:
    """(ranks, steps): each pipeline stage's time outside communication in the step, from the step's
    start to the end of its last communication op or annotated phase there (not the idle time to the
    step's end), less the union of its communication ops (send/recv, and collectives of other
    groups), beyond the median stage's of that step, >= 0. ``stage_steps`` (ranks, steps): whether
    the rank takes part in the step's send/recv; ``markers``: per rank, its aligned RankMarkers
    (step bounds, phases, communication ops); ``steps``: the step numbers. Steps with fewer
    than MIN_PIPELINE_STAGES stages charge nobody."""
    n_rows, n_steps = stage_steps.shape
    outside = np.zeros((n_rows, n_steps), np.int64)
    for row, marks in enumerate(markers):  # one pass per rank: a few arrays each
        bounds_at, bounds_ok = _step_index(steps, marks.step_bounds.step)
        op_at, in_step = _step_index(steps, marks.collectives.step)
        phase_at, phase_ok = _step_index(steps, marks.phases.step)
        op_at, op_start, op_end = (op_at[in_step], np.asarray(marks.collectives.start_ns, np.int64)[in_step],
                                   np.asarray(marks.collectives.end_ns, np.int64)[in_step])
        last_end = np.full(n_steps, np.iinfo(np.int64).min)
        np.maximum.at(last_end, op_at, op_end)
        np.maximum.at(last_end, phase_at[phase_ok], np.asarray(marks.phases.end_ns, np.int64)[phase_ok])
        step_start = np.zeros(n_steps, np.int64)
        step_start[bounds_at[bounds_ok]] = np.asarray(marks.step_bounds.start_ns, np.int64)[bounds_ok]
        has = np.zeros(n_steps, bool)
        has[bounds_at[bounds_ok]] = True
        has &= last_end > np.iinfo(np.int64).min
        outside[row] = np.where(has, last_end - step_start, 0) - union_per_key(op_at, op_start, op_end, n_steps)
    staged = stage_steps & (stage_steps.sum(axis=0) >= MIN_PIPELINE_STAGES)[None, :]
    excess = np.zeros((n_rows, n_steps), np.int64)
    cols = staged.any(axis=0)
    if cols.any():
        median = np.nanmedian(np.where(staged, outside, np.nan)[:, cols], axis=0)
        excess[:, cols] = np.maximum(outside[:, cols] - np.round(median)[None, :], 0)
    return np.where(staged, excess, 0)
