"""The Phase Summary: one row per phase name a rank marks, per rank and across ranks.

Why: the Model Summary maps phases onto six fixed rows, so a phase the user names
(``with distprof.phase("loss"):``) was counted only under Others. A phase is what the sources call
one: a host range of category PHASE that is not a step, i.e. distprof.phase ranges (native), nsys
ranges of the ``distprof`` domain (NVTX category 1, or none) and Kineto's ``## forward ##`` style
phases (sources/kineto.py ``_PHASE_NAME``); ``distprof.range`` ranges are USER (the UserDefined
Summary).

Per rank (:func:`phase_table`, over the analysed window W):

* **calls**: the phase's ranges whose start lies in W (as every table: a range belongs to the
  step that holds its start);
* **total**: |∪ of those calls ∩ W|: the wall time the phase was open, nested calls of one name
  and calls on several threads at once counted once. Each name has its own union: a phase nested
  in another counts in both rows, so the rows can add up to more than W;
* **avg / max / min**: of the single calls, each its time inside W;
* **ratio**: total / |W| (the steps' union, else the trace): the phase's share of the step.

Across ranks (:func:`merge_phase_tables`): Σ calls and totals, avg = Σ call time / Σ calls, max of
maxes, min of mins, ratio of Σ windows, and the spread of the ranks' totals (min / median / max
with the ranks that hold the min and the max) over the ranks that have the phase. numpy group-bys
throughout: no Python loop per event, only per kept row.
"""

from __future__ import annotations

import numpy as np

from .. import events as ev
from ..columns import Groups, cummax_per_key, group_medians
from ..sections.tables import Dropped, MergedPhaseRow, MergedPhaseTable, PhaseRow, PhaseTable, SentTables
from . import intervals as iv
from . import stacked

MAX_ROWS = 200  # phase names kept per table (summaries.MAX_ROWS)


def phase_rows(events: ev.Events) -> np.ndarray:
    """The rows that are phases: PHASE ranges that are not the steps."""
    return events.kind.eq(ev.RANGE) & events.category.eq(ev.PHASE) & ~ev.step_range_rows(events)


def union_in_window(group: np.ndarray, start: np.ndarray, end: np.ndarray, window: iv.IntervalSet,
                    size: int) -> np.ndarray:
    """|∪ [start, end) ∩ window| per group 0..size-1: each group's intervals merged (one lexsort and
    a segmented running max of the ends), then each merged piece measured against the window."""
    out = np.zeros(size, np.int64)
    if not group.size:
        return out
    order = np.lexsort((start, group))
    group, start, end = group[order], start[order], end[order]
    reach = cummax_per_key(group, end)
    opens = np.r_[True, (group[1:] != group[:-1]) | (start[1:] > reach[:-1])]
    first = np.flatnonzero(opens)
    last = np.r_[first[1:] - 1, group.size - 1]
    np.add.at(out, group[first], iv.covered_lengths(window, start[first], reach[last]))
    return out


def phase_table(events: ev.Events, window: iv.IntervalSet, in_window: np.ndarray,
                limit: int = MAX_ROWS) -> PhaseTable:
    """One rank's Phase Summary over ``window`` (``in_window``: the rows starting in it), total down
    (ties by name), ``limit`` rows kept and the rest counted in ``dropped``."""
    window_ns = int(iv.total(window))
    rows = np.flatnonzero(phase_rows(events) & in_window)
    if not rows.size:
        return PhaseTable(rows=[], denominator_ns=window_ns, dropped=Dropped(rows=0, calls=0, total_ns=0))
    texts, group_of = ev.distinct_texts(events.name.take(rows))  # sorted names, each row's position
    start, end = events.start_ns[rows], events.end_ns[rows]
    inside = iv.covered_lengths(window, start, end)  # each call's time in W
    groups = Groups.of(group_of, texts.size)
    calls, summed = groups.counts(), groups.sum(inside)
    total = union_in_window(group_of, start, end, window, texts.size)
    longest, shortest = groups.max(inside), groups.min(inside)
    order = np.lexsort((np.arange(texts.size), -total))
    kept, rest = order[:limit], order[limit:]
    out = [PhaseRow(name=str(texts[g]), calls=int(calls[g]), total_ns=int(total[g]),
                    avg_ns=float(summed[g] / calls[g]), max_ns=int(longest[g]), min_ns=int(shortest[g]),
                    ratio=float(total[g] / window_ns) if window_ns else None)
           for g in kept.tolist()]  # at most ``limit`` rows
    return PhaseTable(rows=out, denominator_ns=window_ns,
                      dropped=Dropped(rows=int(rest.size), calls=int(calls[rest].sum()),
                                      total_ns=int(total[rest].sum())))


def _spread(groups: Groups, codes: np.ndarray, total: np.ndarray, rank_of: np.ndarray) -> dict:
    """Per phase, by MergedPhaseRow field: the least, median and largest of the ranks' totals and the ranks at
    the ends (a rank has one row per phase, so a group's rows are its ranks)."""
    _, median = group_medians(codes, total)  # every code 0..size-1 has rows: medians in code order
    return {"rank_min_ns": groups.min(total), "rank_median_ns": np.round(median).astype(np.int64),
            "rank_max_ns": groups.max(total), "min_rank": rank_of[groups.first_max(-total)],
            "max_rank": rank_of[groups.first_max(total)]}


def merge_phase_tables(tables: list[SentTables], ranks: list[int], limit: int = MAX_ROWS) -> MergedPhaseTable:
    """The Phase Summary across ranks (tables: the ranks' ``rank_tables``, a table without ``phase``
    adds nothing): Σ calls and totals, max of maxes, min of mins, the ranks' spread, total down."""
    denominator = int(sum(t.window_ns for t in tables))
    with_phase = [(t, r) for t, r in zip(tables, ranks) if t.phase is not None]
    own = [t.phase.dropped for t, _ in with_phase]
    dropped = Dropped(rows=sum(d.rows for d in own), calls=sum(d.calls for d in own),
                      total_ns=sum(d.total_ns for d in own))
    rows, rank_of = stacked.stack([t for t, _ in with_phase], [r for _, r in with_phase], "phase")
    if not rows:
        return MergedPhaseTable(rows=[], denominator_ns=denominator, dropped=dropped)
    codes, names = ev.factorize([row.name for row in rows])
    groups = Groups.of(codes, len(names))
    calls, total, longest, shortest = stacked.ints(rows, "calls", "total_ns", "max_ns", "min_ns")
    call_time = np.array([row.avg_ns for row in rows], np.float64) * calls
    spread = _spread(groups, codes, total, rank_of)
    by_rank = stacked.by_rank(codes, len(names), rank_of, total, ranks)
    calls, total, call_time = groups.sum(calls), groups.sum(total), groups.sum(call_time)
    longest, shortest, present = groups.max(longest), groups.min(shortest), groups.distinct(rank_of)
    order = stacked.key_order(total, names)
    kept, rest = order[:limit], order[limit:]
    merged = [MergedPhaseRow(name=names[g], calls=int(calls[g]), total_ns=int(total[g]),
                             avg_ns=float(call_time[g] / calls[g]), max_ns=int(longest[g]),
                             min_ns=int(shortest[g]),
                             ratio=float(total[g] / denominator) if denominator else None,
                             ranks=int(present[g]),
                             **{key: int(column[g]) for key, column in spread.items()},
                             total_ns_by_rank=by_rank[g])
              for g in kept.tolist()]  # at most ``limit`` rows
    return MergedPhaseTable(rows=merged, denominator_ns=denominator,
                            dropped=Dropped(rows=dropped.rows + int(rest.size),
                                            calls=dropped.calls + int(calls[rest].sum()),
                                            total_ns=dropped.total_ns + int(total[rest].sum())))


def trimmed(table: PhaseTable, rows: int) -> PhaseTable:
    """A rank's Phase Summary cut to ``rows`` for summary.json's ``by_rank``."""
    return stacked.cut(table, rows)
