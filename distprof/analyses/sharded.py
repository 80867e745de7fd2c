"""Sharded data parallelism (FSDP, ZeRO): each rank's all-gather and reduce-scatter time per annotated phase,
the part no computation hides, and the ``exposed_allgather`` finding.

Per rank, next to its events (``rank_sharded``): the union of its all-gathers and of its reduce-scatters in
the analysed window, and of each the part outside its computation (the Distributed Summary's overlap, per
kind), in total and per phase. An op belongs to the phase its launching call or its own thread is in (the
events' ``phase``), else, a host exchange on a worker thread (gloo), to the phase range its start lies in.

At rank 0 (``across_ranks``): the same with the rank, and the part of its exposed all-gathers and
reduce-scatters that waited for the named straggler (skew.owed_waits): that delay is the straggler's.

The finding (``exposed_allgather_findings``): a rank whose exposed all-gather, net of the straggler's
waits, is at least ``diagnosis.exposed_allgather_share`` of its window, where all-gathers and
reduce-scatters are at least half of its exposed communication (net the same way). Its fix is to hide them
under computation, which the what-if prices as ``overlap_communication``, the scenario of the placement
findings: one delay, one finding. So it replaces ``unoverlapped_communication`` (the generic low-overlap
finding about the same time), and stands back for ``serialized_communication`` (collectives on the compute
stream or thread overlap nothing whatever is prefetched: that fix comes first). Where all-gathers are not
most of the exposed communication it is not made: overlap_communication would price the other collectives too.
"""

from __future__ import annotations

import numpy as np

from .. import events as ev
from ..matching import Matching
from ..rankview import RankView
from ..results import RankResult
from ..sections.findings import ExposedAllgatherEvidence, Observed
from ..sections.sharded import ShardedFigures, ShardedPhase, ShardedRank
from ..sections.skew import StragglerRow
from . import intervals as iv
from . import skew
from .collectives import Instances

KINDS = (ev.ALLGATHER, ev.REDUCE_SCATTER)
MOST_OF_EXPOSED = 0.5     # all-gathers + reduce-scatters at least this share of the exposed communication
MAX_PHASES = 12           # phase rows kept per rank (the largest)


def _phase_ranges(view: RankView) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rank's phase ranges in the window's steps, by start: (start, end, name, step)."""
    events = view.events
    rows = np.flatnonzero(events.kind.eq(ev.RANGE) & events.category.eq(ev.PHASE) & ~view.steps
                          & (events.step >= 0))
    rows = rows[np.argsort(events.start_ns[rows], kind="stable")]
    return (events.start_ns[rows], events.end_ns[rows], events.name.take(rows).values().astype(object),
            events.step[rows])


def _phase_of(view: RankView, rows: np.ndarray, ranges: tuple) -> np.ndarray:
    """Per communication row, its phase name ("" = none): the events' phase (the launching call's, or its
    own thread's), else the phase range its start lies in (a gloo worker's exchange in the forward)."""
    own = view.events.phase.take(rows).values().astype(object)
    starts, ends, names, _ = ranges
    if not starts.size:
        return own
    op_start = view.events.start_ns[rows]
    at = np.searchsorted(starts, op_start, side="right") - 1
    inside = (at >= 0) & (op_start < ends[np.maximum(at, 0)])
    by_time = np.where(inside, names[np.maximum(at, 0)], "")
    return np.where(own != "", own, by_time)


def _figures(view: RankView, rows: np.ndarray) -> tuple[int, int]:
    """(|∪ rows| in the window, of it what the rank's computation does not overlap)."""
    events = view.events
    union = iv.covered_within(events.start_ns[rows], events.end_ns[rows], view.window)
    return iv.total(union), iv.total(iv.difference(union, view.computation))


def rank_sharded(view: RankView) -> ShardedFigures | None:
    """One rank's all-gather / reduce-scatter figures over the window and per phase; None without either."""
    rows, kinds = skew.comm_rows(view)
    kinds = np.asarray(kinds, dtype=object)
    if not np.isin(kinds, KINDS).any():
        return None
    ranges = _phase_ranges(view)
    phase = _phase_of(view, rows, ranges)
    by_kind = {kind: rows[kinds == kind] for kind in KINDS}
    totals = [value for kind in KINDS for value in _figures(view, by_kind[kind])]
    phases = []
    for name in sorted(set(phase[np.isin(kinds, KINDS)].tolist())):  # one iteration per phase name
        values = [value for kind in KINDS for value in _figures(view, rows[(kinds == kind) & (phase == name)])]
        steps = int(np.unique(ranges[3][ranges[2] == name]).size) if name else 0
        phases.append(ShardedPhase(name, steps, *values))
    phases.sort(key=lambda p: -(p.allgather_ns + p.reduce_scatter_ns))
    return ShardedFigures(int(view.steps.sum()), *totals, phases[:MAX_PHASES])


def across_ranks(results: list[RankResult], matching: Matching, inst: Instances | None,
                 straggler: StragglerRow | None) -> list[ShardedRank]:
    """summary.json ``sharded``: per rank with all-gathers or reduce-scatters, its figures and what of their
    exposed part waited for the named straggler (none without one)."""
    owed = {kind: skew.owed_waits(matching, inst, straggler, kind) if straggler and inst else {} for kind in KINDS}
    all_kinds = straggler.exposed_waits_ns_by_rank if straggler else {}
    out = []
    for result in results:  # one per rank
        mine = result.sharded
        if mine is None:
            continue
        out.append(ShardedRank(
            rank=result.rank, steps=mine.steps, allgather_ns=mine.allgather_ns,
            allgather_exposed_ns=mine.allgather_exposed_ns, reduce_scatter_ns=mine.reduce_scatter_ns,
            reduce_scatter_exposed_ns=mine.reduce_scatter_exposed_ns,
            exposed_communication_ns=result.figures.exposed_communication_ns,
            waits_for_straggler_ns=int(all_kinds.get(result.rank, 0)),
            allgather_waits_for_straggler_ns=min(owed[ev.ALLGATHER].get(result.rank, 0), mine.allgather_exposed_ns),
            reduce_scatter_waits_for_straggler_ns=min(owed[ev.REDUCE_SCATTER].get(result.rank, 0),
                                                      mine.reduce_scatter_exposed_ns),
            phases=mine.phases))
    return out


def _per_step(value: int, steps: int) -> int:
    return int(round(value / steps)) if steps > 0 else int(value)


def _net(row: ShardedRank) -> tuple[int, int, int]:
    """(exposed all-gather, exposed reduce-scatter, exposed communication) of a rank, net of its waits
    for the straggler, over the window."""
    allgather = max(row.allgather_exposed_ns - row.allgather_waits_for_straggler_ns, 0)
    reduce_scatter = max(row.reduce_scatter_exposed_ns - row.reduce_scatter_waits_for_straggler_ns, 0)
    return allgather, reduce_scatter, max(row.exposed_communication_ns - row.waits_for_straggler_ns, 0)


def _material(rows: list[ShardedRank], windows: dict[int, int], limit: float) -> dict[int, tuple[int, int, int]]:
    """The ranks whose exposed all-gather (net) reaches ``limit`` of their window, where all-gathers and
    reduce-scatters are most of their exposed communication: rank -> _net."""
    out = {}
    for row in rows:  # one per rank
        allgather, reduce_scatter, exposed = _net(row)
        window = windows.get(row.rank) or 0
        if window and allgather >= limit * window and allgather + reduce_scatter >= MOST_OF_EXPOSED * exposed:
            out[row.rank] = (allgather, reduce_scatter, exposed)
    return out


def exposed_allgather_findings(rows: list[ShardedRank], placement: list[Observed], results: list[RankResult],
                               config: dict) -> list[Observed]:
    """The placement findings with, where a rank's exposed all-gather is material, an ``exposed_allgather``
    finding in place of ``unoverlapped_communication`` (both priced by overlap_communication: one delay,
    one finding). None beside ``serialized_communication``: that placement is the fix to make first."""

    limit = float(config["diagnosis"]["exposed_allgather_share"])
    windows = {r.rank: r.figures.window_ns for r in results}
    hit = _material(rows, windows, limit)
    if not hit or any(f.finding == "serialized_communication" for f in placement):
        return placement
    by_rank = {row.rank: row for row in rows}
    worst = max(hit, key=lambda rank: hit[rank][0])
    row, (allgather, reduce_scatter, exposed) = by_rank[worst], hit[worst]
    replaced = [f for f in placement if f.finding == "unoverlapped_communication"]
    evidence = ExposedAllgatherEvidence(
        worst_rank=worst, ranks_total=len(results), steps=row.steps,
        allgather_exposed_ns=_per_step(allgather, row.steps), allgather_ns=_per_step(row.allgather_ns, row.steps),
        reduce_scatter_exposed_ns=_per_step(reduce_scatter, row.steps),
        exposed_communication_ns=_per_step(exposed, row.steps),
        share_of_exposed=(allgather + reduce_scatter) / exposed if exposed else None,
        window_share=allgather / windows[worst],
        waits_for_straggler_ns=_per_step(row.allgather_waits_for_straggler_ns
                                         + row.reduce_scatter_waits_for_straggler_ns, row.steps),
        allgather_exposed_ns_by_rank={rank: _per_step(net[0], by_rank[rank].steps) for rank, net in hit.items()},
        phases=[p for p in row.phases if p.allgather_exposed_ns or p.reduce_scatter_exposed_ns][:4],
        limit_share=limit, replaces="unoverlapped_communication" if replaced else None,
        pytorch=any(ev.PYTORCH in r.frameworks for r in results if r.rank in hit))
    finding = Observed(finding="exposed_allgather", figure_ns=evidence.allgather_exposed_ns, ranks=sorted(hit),
                       evidence=evidence)
    return [f for f in placement if f.finding != "unoverlapped_communication"] + [finding]
