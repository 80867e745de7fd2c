"""Imbalance across ranks: the finding for lateness no single rank owns (docs/diagnosis.md).

When the skew analysis names no straggler because the late rank rotates (different ranks last in
different steps) or the delay is spread over two ranks, the waits are still real: they come from
ranks whose work differs. The fix is to balance it (the what-if ``balanced_ranks``), and the finding
names where the work differs: per step, each phase's own time (its busy time less the communication
on its own lane: ``markers.phases`` ``compute_ns``) across ranks, the phases whose spread is largest and
the ranks slowest in them. It is never emitted beside a straggler (a delay is charged once, to its
cause) nor where the replay prices balancing under the straggler's floor (a wrong finding is worse
than a missing one). Codes and numbers only: reports/findings.py words them.
"""

from __future__ import annotations

import msgspec
import numpy as np

from .. import events as ev
from ..results import RankResult
from ..sections.findings import ImbalanceEvidence, LateStep, Observed, PhaseSpread
from ..sections.skew import Skew
from ..sections.whatif import WhatIf
from ..typed import Reason

SCENARIO = "balanced_ranks"
PHASES_SHOWN = 4
NOTES = {"late_rank_rotates": "rotates", "delay_spread": "spread"}  # skew note code -> pattern


class PhaseMatrix(msgspec.Struct, frozen=True):
    """The ranks' own time per (step, phase name) column: ``times`` (rank rows, columns; NaN: the rank
    has no such phase in that step), each column's phase (``name``: a code into ``names``)."""

    times: np.ndarray
    name: np.ndarray
    names: list[str]
    ranks: list[int]


def phase_matrix(results: list[RankResult]) -> PhaseMatrix | None:
    """Per (step, phase name) column and rank row, the phase's own time (NaN: the rank has no such
    phase in that step); columns that fewer than two ranks have are dropped. None when none is left."""
    rows, steps, names, values = [], [], [], []
    for row, result in enumerate(results):  # one iteration per rank
        phases = result.markers.phases
        own = phases.own_ns
        rows.append(np.full(len(own), row, np.int64))
        steps.append(np.asarray(phases.step[:len(own)], np.int64))
        names += list(phases.name[:len(own)])
        values.append(np.asarray(own, np.float64))
    if not names:
        return None
    rank_row, step, value = np.concatenate(rows), np.concatenate(steps), np.concatenate(values)
    codes, distinct = ev.factorize([str(name) for name in names])
    keep = step >= 0
    keys, column = np.unique(step[keep] * len(distinct) + codes[keep], return_inverse=True)
    matrix = np.zeros((len(results), keys.size))
    counted = np.zeros(matrix.shape, np.int64)
    np.add.at(matrix, (rank_row[keep], column), value[keep])
    np.add.at(counted, (rank_row[keep], column), 1)
    shared = (counted > 0).sum(axis=0) >= 2
    if not shared.any():
        return None
    return PhaseMatrix(times=np.where(counted > 0, matrix, np.nan)[:, shared], name=keys[shared] % len(distinct),
                       names=distinct, ranks=[r.rank for r in results])


def phase_spreads(phases: PhaseMatrix, step_ns: int | None) -> list[PhaseSpread]:
    """Per phase name, its spread across ranks (median over steps), largest first."""
    times = phases.times
    top, bottom, middle = np.nanmax(times, axis=0), np.nanmin(times, axis=0), np.nanmedian(times, axis=0)
    slowest = np.nanargmax(times, axis=0)
    out = []
    for code in np.unique(phases.name):  # one iteration per phase name
        cols = phases.name == code
        counts = np.bincount(slowest[cols], minlength=times.shape[0])
        spread = float(np.median(top[cols] - bottom[cols]))
        out.append(PhaseSpread(
            phase=str(phases.names[code]), steps=int(cols.sum()), spread_ns=int(round(spread)),
            excess_ns=int(round(float(np.median(top[cols] - middle[cols])))),
            spread_share=spread / step_ns if step_ns else None,
            slowest_steps_by_rank={phases.ranks[r]: int(counts[r]) for r in np.argsort(-counts, kind="stable")
                                   if counts[r]}))
    return sorted(out, key=lambda p: -p.spread_ns)


def rank_excess(phases: PhaseMatrix | None, rank: int) -> tuple[str, int] | None:
    """The phase in which ``rank`` spends the most own time per step over the other ranks' median
    (median over the steps both have), and that excess; None when it is in none above them."""
    if phases is None or rank not in phases.ranks:
        return None
    row = phases.ranks.index(rank)
    times = phases.times
    others = np.nanmedian(np.delete(times, row, axis=0), axis=0) if times.shape[0] > 1 else np.full(times.shape[1],
                                                                                                   np.nan)
    excess = times[row] - others
    best = None
    for code in np.unique(phases.name):  # one iteration per phase name
        mine = excess[(phases.name == code) & ~np.isnan(excess)]
        value = float(np.median(mine)) if mine.size else 0.0
        if value > 0 and (best is None or value > best[1]):
            best = (str(phases.names[code]), int(round(value)))
    return best


def replay_disagrees(whatif: WhatIf | None, floor: float, share_of_steps: float = 1.0) -> bool:
    """The one cost model's veto, as the straggler's (skew.straggler_min_step_fraction, rule (e)): the
    replay prices balancing the ranks under ``floor`` of the measured step. Judged wherever the replay
    priced it, also on hosts whose ranks outnumber their cores (there its saving is an upper bound:
    under the floor, the fix saves little); not where the host waits for none of its GPU collectives
    (the replay cannot see a rank wait there: its saving is no evidence) or the replay did not run.
    ``share_of_steps``: the share of the steps the imbalance is in (since its onset): the saving per step
    over the window is theirs."""
    if whatif is None:
        return False
    row = next((s for s in whatif.scenarios if s.name == SCENARIO), None)
    step_ns = whatif.measured_step_ns
    if row is None or not row.applies or not step_ns:
        return False
    if any(isinstance(note, Reason) and note.code == "gpu_waits_unseen" for note in whatif.notes):
        return False
    return max(int(row.saving_ns or 0), 0) < floor * step_ns * max(share_of_steps, 1e-9)


def _no_straggler_note(skew: Skew, late_share: float) -> Reason | None:
    """The skew note that says why no straggler was named, when it is a spread delay (a rank late in
    most steps, another nearly as late) or a rotation in most steps: some rank costs the others the
    straggler's threshold in ``straggler_min_late_share`` of the steps, as a straggler must (rule (b)).
    A rotation in fewer steps is the noise of a busy machine (a clean 4-rank run on 2 cores: late in 2
    of 3 steps, its phases 0.07 ms apart), not work to balance."""
    index, notes = skew.no_straggler_note, skew.notes
    note = notes[index] if index is not None and 0 <= index < len(notes) else None
    if not isinstance(note, Reason) or note.code not in NOTES:
        return None
    late, units = note.figures.get("late_units"), note.figures.get("units")
    most = late is None or not units or late >= np.ceil(late_share * units - 1e-9)
    return note if most else None


def imbalance_findings(results: list[RankResult], skew: Skew | None, whatif: WhatIf | None,
                       config: dict) -> list[Observed]:
    """The imbalance finding, unpriced (analyses/cost.py prices it by balanced_ranks): when no
    straggler is named because the late rank rotates (in most steps) or the delay is spread, and the
    replay does not price balancing under the floor. Figure: the largest phase's excess of the slowest rank over
    the median rank per step. None without a skew analysis."""
    if skew is None:
        return []
    note = _no_straggler_note(skew, float(config["skew"]["straggler_min_late_share"]))
    floor = float(config["skew"]["straggler_min_step_fraction"])
    if skew.straggler or skew.unconfirmed_straggler or note is None or len(results) < 2 \
            or replay_disagrees(whatif, floor):
        return []
    step_ns = (whatif.measured_step_ns if whatif is not None else None) \
        or (skew.steps_summary.duration_median_ns if skew.steps_summary else None)
    phases = phase_matrix(results)
    spreads = phase_spreads(phases, step_ns) if phases is not None else []
    figures = note.figures
    late = list(figures.get("ranks") or [figures["rank"], figures["second"]])
    worst = [LateStep(step=int(s), rank=int(r), waits_caused_ns=int(round(ns)))
             for s, r, ns in figures.get("worst", [])]
    evidence = ImbalanceEvidence(ranks_total=len(results), pattern=NOTES[note.code], late_ranks=late,
                                 worst_by_step=worst, phases=spreads[:PHASES_SHOWN], phases_compared=len(spreads),
                                 step_ns=int(step_ns) if step_ns else None, floor_share=floor)
    slowest = sorted({r for p in spreads[:1] for r in p.slowest_steps_by_rank} | set(late))
    return [Observed(finding="imbalance", figure_ns=spreads[0].excess_ns if spreads else 0, ranks=slowest,
                     evidence=evidence)]
