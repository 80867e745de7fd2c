"""Diff of two runs: did the change help, by how much, and is it real?

Works on two typed summaries (:class:`distprof.results.Summary`, read from summary.json by
attribute), so it reads any distprof output and survives changes of the internals. Numbers and
codes only, as the typed :class:`~distprof.sections.diff.Diff` (``diff.json``); ``reports/diff_report.py``
phrases them.

* **Step time**: the job's step time of analyses.steptime (per step the median rank's
  ProfileStep, the run's figure the median over steps). Both runs' figures, their difference,
  and a seeded percentile bootstrap interval of the difference (steps resampled);
  ``significant`` only when the interval excludes 0 and the change is at least ``MIN_CHANGE``
  (5%) of the step time, and larger than either run drifts by (``drift``).
  The interval covers the step-to-step noise inside each run, not the run-to-run noise of a
  shared machine.
* **Ranks**: every Distributed Summary figure (results.RankFigures) before/after per rank
  (matched by rank number) and across ranks, with delta (after - before) and relative delta.
* **Unit of work**: the most frequent compute kernel (else user range, else phase) present in
  both runs, by base name (names.base_name), never a step marker; the most frequent by both
  runs' calls together, so swapping before and after names the same unit; its count compared
  per rank-step (in all without steps), so equal counts read as the same; figures per unit apply
  when a side has no steps or the step counts differ.
* **Movers**: phases, kernels, user ranges and collectives ranked by absolute change per step
  (per unit, or per window, when there are no steps), an op's calls under its base name, never
  a step marker (``ProfilerStep#N`` rows and the ProfileStep phase are the step itself, whose
  time the step-time verdict gives).
* **Findings**: resolved / new / kept by finding code, and stream placement verdicts that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from msgspec.structs import asdict, replace

from .. import names
from ..config import DIFF_MIN_CHANGE
from ..results import RankFigures, Summary
from ..sections.diff import (
    AcrossChanges,
    Change,
    CheckChange,
    Diff,
    DiffWarning,
    FindingBrief,
    FindingChange,
    FindingChanges,
    Mover,
    RankChange,
    RunsSide,
    RunsStepTime,
    Sources,
    StatsChange,
    StepTime,
    UnitOfWork,
    WorldSizes,
)
from ..sections.findings import Check, Finding
from ..sections.skew import KindRow
from ..sections.tables import FigureStats, RatioStats
from ..typed import ABSENT
from . import machine, steptime

FIGURES = RankFigures.__struct_fields__   # every Distributed Summary figure of a rank
ACROSS_STATS = ("min", "median", "max", "mean")
MIN_STEPS = 5           # fewer steps on a side: no interval ("too few steps")
RESAMPLES = 4000
SEED = 0
LEVEL = 0.95
MIN_CHANGE = DIFF_MIN_CHANGE  # smaller relative changes of the median step are never called significant
DRIFT_PARTS = 5         # a run's level wanders by the spread of its fifths' medians (``drift``)
CONTENTION_SHARE = 0.5  # a change the host counters explain this share of (core waits, steal): the machine
TOP_MOVERS = 20
COMM_PREFIXES = ("nccl",)
_NOT_UNITS = ("Others",)    # a model row that is not a repeated unit of work (nor is a step: names.is_step_name)


def change(before: float | None, after: float | None) -> Change:
    """before, after, delta (after - before) and relative delta (None where undefined)."""
    delta = None if before is None or after is None else after - before
    relative = delta / before if delta is not None and before else None
    return Change(before, after, delta, relative)


# -- step time --------------------------------------------------------------------------------

def step_durations(summary: Summary, since: int | None = None) -> np.ndarray:
    """The job's step time of each step (analyses.steptime: the median over ranks of the step's
    ProfileStep duration), as merge wrote it; ``since``: only the steps from that one on.

    From ``tables.merged.steps.median_ns`` (all steps, up to 2000), else ``skew.steps`` (at most
    ``skew.max_rows`` steps kept). A step whose time is unknown (null, or NaN in a damaged
    summary) is left out: one NaN made the median and every resample NaN."""
    steps = summary.tables.merged.steps
    per_step = steps.median_ns
    if per_step:
        durations = np.asarray([np.nan if x is None else x for x in per_step], dtype=np.float64)
        if since is not None and len(steps.step) == durations.size:
            durations = durations[np.asarray(steps.step, np.int64) >= since]
        return durations[np.isfinite(durations)]
    rows = summary.skew.steps
    durations = np.asarray([r.duration_median_ns for r in rows if r.duration_median_ns is not None], np.float64)
    return durations[np.isfinite(durations)]


def bootstrap_interval(before: np.ndarray, after: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED,
                       level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap interval of median(after) - median(before).

    Each side is resampled with replacement on its own (the runs are independent), all
    resamples at once as one index matrix per side."""
    rng = np.random.default_rng(seed)
    b = np.median(before[rng.integers(0, before.size, (resamples, before.size))], axis=1)
    a = np.median(after[rng.integers(0, after.size, (resamples, after.size))], axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(a - b, [tail, 100 - tail])
    return float(low), float(high)


def onset(summary: Summary) -> int | None:
    """The step a run changed at: its straggler's onset (the one change-point rule, analyses/changepoint.py),
    None when it has none."""
    straggler = summary.skew.straggler
    return straggler.onset_step if straggler is not None and straggler.pattern == "since step" else None


def drift(durations: np.ndarray, start_up: bool = True) -> float:
    """How far a run's level wanders within it: the spread (max - min) of the medians of its
    consecutive fifths (``DRIFT_PARTS``; halves for 4 to 9 steps), its first step left out where
    ``start_up`` (the start-up is no level the run holds). Why fifths: a run's step time moves in
    stretches of a few steps (another process takes a core for a while), so two runs of one config differ
    by about the stretches each visits, which neither a bootstrap over single steps (20 of 190 pairs of one
    config called significant here) nor the gap between two halves (still 20) sees: the fifths' spread
    left 2 of those 190 pairs, and every pair with a real 10% change (72 of 72), above it."""
    steady = durations[1:] if start_up and durations.size > 2 * DRIFT_PARTS else durations
    parts = min(DRIFT_PARTS, steady.size // 2)
    if parts < 2:
        return 0.0
    medians = [np.median(part) for part in np.array_split(steady, parts)]
    return float(max(medians) - min(medians))


def _host_share(summary: Summary, field: str) -> float | None:
    shares = [getattr(h, field) for h in summary.machine if getattr(h, field) is not ABSENT]
    return float(np.median(shares)) if shares else None


def machine_change_ns(before: Summary, after: Summary, before_ns: float, after_ns: float) -> float | None:
    """How much of a step time change the machine explains, by the host counters of both runs
    (analyses/hostload.py): the change in what the training threads waited for a core per step, plus
    the before step scaled by the CPU the hypervisor left each run, (1 - steal before) / (1 - steal after)
    - 1 (two runs of one config here: 8% stolen, 64 ms a step; 23% stolen, 92 ms). None where either run
    does not record them."""
    waits = [_host_share(before, "runqueue_share"), _host_share(after, "runqueue_share")]
    steal = [_host_share(before, "steal_share"), _host_share(after, "steal_share")]
    if None in waits and None in steal:
        return None
    out = 0.0
    if None not in waits:
        out += waits[1] * after_ns - waits[0] * before_ns
    if None not in steal and steal[1] < 1:
        out += before_ns * ((1 - steal[0]) / (1 - steal[1]) - 1)
    return out


def step_time(before: Summary, after: Summary, resamples: int = RESAMPLES, seed: int = SEED,
              min_change: float = MIN_CHANGE) -> StepTime:
    """Median step time of both runs, the change, and whether it is significant: the interval
    excludes 0, the change is at least ``min_change`` of the median (as asv's factor) *and* larger
    than either run drifts within itself (``drift``: the run-to-run noise one pair can see;
    ``smallest_ns`` is the smallest change this pair can tell apart). Where the after run changed at
    step k (its straggler's onset) and the before run did not, its steps since k are compared
    (``since_step``): a fault from mid-run, diluted over the whole run, read as no change."""
    changed = onset(after) if onset(before) is None else None
    b, a = step_durations(before), step_durations(after, changed)
    before_ns, after_ns = steptime.run_step_time(b), steptime.run_step_time(a)
    moved = change(before_ns, after_ns) if b.size and a.size else Change(None, None, None, None)
    base = StepTime(before_median_ns=before_ns, after_median_ns=after_ns, since_step=changed, delta_ns=moved.delta,
                    relative=moved.relative, ci_low_ns=None, ci_high_ns=None, significant=False,
                    excludes_zero=False, min_change=min_change, steps_before=int(b.size), steps_after=int(a.size),
                    level=LEVEL, resamples=resamples, seed=seed, min_steps=MIN_STEPS, reason=None,
                    before_steps_ns=b.astype(np.int64).tolist(), after_steps_ns=a.astype(np.int64).tolist())
    if not b.size or not a.size:
        return replace(base, reason="no_steps")
    if min(b.size, a.size) < MIN_STEPS:
        return replace(base, reason="too_few_steps")
    low, high = bootstrap_interval(b, a, resamples, seed)
    excludes = bool(low > 0 or high < 0)
    large = abs(moved.relative or 0.0) >= min_change
    noise = max(drift(b), drift(a, changed is None))  # since the change point, where there is one
    smallest = max(noise, min_change * (before_ns or 0.0), (high - low) / 2)
    beyond = abs(moved.delta or 0.0) > noise
    contention = machine_change_ns(before, after, before_ns, after_ns)
    machine = contention is not None and contention * (moved.delta or 0.0) > 0 and \
        abs(contention) >= CONTENTION_SHARE * abs(moved.delta or 0.0)
    reason = (None if not excludes else "below_min_change" if not large else "within_drift" if not beyond
              else "machine" if machine else None)
    return replace(base, ci_low_ns=low, ci_high_ns=high, excludes_zero=excludes, drift_ns=noise,
                   smallest_ns=smallest, machine_change_ns=contention,
                   significant=excludes and large and beyond and not machine, reason=reason)


def _run_medians(durations: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(runs, resamples): each run's step time (median step) over steps resampled with replacement."""
    return np.stack([np.median(d[rng.integers(0, d.size, (resamples, d.size))], axis=1) for d in durations])


def _side_resamples(durations: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """A side's step time (the median of its runs') per two-level resample: runs drawn with
    replacement, then each drawn run's steps: the interval sees run-to-run and step noise both."""
    per_run = _run_medians(durations, resamples, rng)
    drawn = rng.integers(0, len(durations), (resamples, len(durations)))
    return np.median(per_run[drawn, np.arange(resamples)[:, None]], axis=1)


def runs_step_time(befores: Sequence[Summary], afters: Sequence[Summary], resamples: int = RESAMPLES,
                   seed: int = SEED, min_change: float = MIN_CHANGE) -> RunsStepTime:
    """Several runs a side: each run's step time (analyses.steptime), each side's the median of its
    runs', their spread (max - min over the median: the run-to-run noise), and a seeded two-level
    bootstrap interval of the change (runs, then steps). ``significant`` when the interval
    excludes 0 and the change is at least ``min_change``, as for one run a side."""
    sides = {"before": [step_durations(s) for s in befores], "after": [step_durations(s) for s in afters]}
    summed = {side: _runs_side(runs) for side, runs in sides.items()}
    moved = change(summed["before"].median_ns, summed["after"].median_ns)
    base = RunsStepTime(level=LEVEL, resamples=resamples, seed=seed, min_change=min_change, ci_low_ns=None,
                        ci_high_ns=None, significant=False, excludes_zero=False, reason=None,
                        before=summed["before"], after=summed["after"], delta_ns=moved.delta, relative=moved.relative)
    if any(d.size < MIN_STEPS for runs in sides.values() for d in runs):
        return replace(base, reason="too_few_steps")
    rng = np.random.default_rng(seed)
    before, after = (_side_resamples(sides[s], resamples, rng) for s in ("before", "after"))
    tail = 100 * (1 - LEVEL) / 2
    low, high = (float(x) for x in np.percentile(after - before, [tail, 100 - tail]))
    excludes, large = bool(low > 0 or high < 0), abs(moved.relative or 0.0) >= min_change
    return replace(base, ci_low_ns=low, ci_high_ns=high, excludes_zero=excludes, significant=excludes and large,
                   reason="below_min_change" if excludes and not large else None)


def _runs_side(runs: list[np.ndarray]) -> RunsSide:
    """Each run's step time, their median and their spread ((max - min) / median; None with one run)."""
    times = [steptime.run_step_time(d) if d.size else None for d in runs]
    known = [x for x in times if x is not None]
    median = float(np.median(known)) if known else None
    return RunsSide(runs_ns=times, steps=[int(d.size) for d in runs], median_ns=median,
                    spread=(max(known) - min(known)) / median if len(known) > 1 and median else None)


def median_run(summaries: Sequence[Summary]) -> int:
    """Index of a side's median run by step time (the lower middle one for an even count; runs
    without steps last): the run the detailed comparison uses."""
    times = [steptime.run_step_time(d) if (d := step_durations(s)).size else float("inf") for s in summaries]
    return int(np.argsort(times, kind="stable")[(len(times) - 1) // 2])


# -- ranks ------------------------------------------------------------------------------------

def _by_name(record: Any) -> dict[str, Any]:
    """A record's fields by name in their order, values shared: diff.json keys every figure by its
    name, so the figures are walked as the codec walks them, not named one by one."""
    return asdict(record)  # shallow: the values shared, not copied


def rank_changes(before: Summary, after: Summary) -> list[RankChange]:
    """Per rank (matched by rank number): the figures of both runs and their changes."""
    b = {r.rank: _by_name(r.figures) for r in before.ranks}
    a = {r.rank: _by_name(r.figures) for r in after.ranks}
    out = []
    for rank in sorted(set(b) | set(a)):
        rb, ra = b.get(rank), a.get(rank)
        figures = {k: change(rb[k] if rb else None, ra[k] if ra else None) for k in FIGURES}
        out.append(RankChange(rank=rank, before={k: rb[k] for k in FIGURES} if rb else None,
                              after={k: ra[k] for k in FIGURES} if ra else None,
                              delta={k: v.delta for k, v in figures.items()},
                              relative={k: v.relative for k, v in figures.items()}))
    return out


def _stats(stats: FigureStats | RatioStats | None) -> tuple:
    """A figure's across-ranks statistics in ACROSS_STATS order (None each where no rank has it)."""
    return (None,) * len(ACROSS_STATS) if stats is None else (stats.min, stats.median, stats.max, stats.mean)


def across_changes(before: Summary, after: Summary) -> AcrossChanges:
    """Across ranks: min / median / max / mean of each figure, before and after."""
    b, a = _by_name(before.across_ranks), _by_name(after.across_ranks)
    return AcrossChanges(**{key: StatsChange(*(change(x, y) for x, y in zip(_stats(b[key]), _stats(a[key]))))
                            for key in AcrossChanges.__struct_fields__})


def warnings(before: Summary, after: Summary) -> list[DiffWarning]:
    """Codes for what makes the comparison weaker (the report words them)."""
    out = []
    wb, wa = before.world_size, after.world_size
    if wb != wa:
        out.append(DiffWarning(code="world_size_differs", before=wb, after=wa))
    rb = {r.rank for r in before.ranks}
    ra = {r.rank for r in after.ranks}
    if rb != ra:
        out.append(DiffWarning(code="ranks_differ", only_before=sorted(rb - ra), only_after=sorted(ra - rb)))
    return out


# -- unit of work ------------------------------------------------------------------------------

def _by_base_name(rows: Iterable[tuple[str, int | None, int | None]]) -> dict[str, dict]:
    """(name, calls, total_ns) rows with calls, summed under their base name (names.base_name: one
    row per op, not per call, also for summaries written before merge grouped them); never a step
    marker. The sums are the diff's own {"calls", "total_ns"}."""
    out: dict[str, dict] = {}
    for row_name, calls, total in rows:  # one per table row (at most summaries.MAX_ROWS)
        name = names.base_name(row_name)
        if not calls or names.is_step_name(name):
            continue
        if name in out:
            seen = out[name]["total_ns"]
            total = None if seen is None or total is None else seen + total
            out[name] = {"calls": out[name]["calls"] + calls, "total_ns": total}
        else:
            out[name] = {"calls": calls, "total_ns": total}
    return out


def _unit_candidates(summary: Summary, prefixes: tuple[str, ...]) -> list[tuple[str, dict[str, dict]]]:
    """Repeated units by table, in order of preference: compute kernels, user ranges, phases."""
    merged = summary.tables.merged
    kernels = _by_base_name((r.name, r.calls, r.total_ns) for r in merged.kernel.rows
                            if not str(r.name).startswith(prefixes))
    users = _by_base_name((r.name, r.calls, r.total_ns) for r in merged.user.rows)
    phases = _by_base_name((r.name, r.calls, r.gpu_total_ns or r.cpu_total_ns)
                           for r in merged.model if r.name not in _NOT_UNITS)
    return [("kernel", kernels), ("user", users), ("phase", phases)]


def _rank_sum(summary: Summary, figure: Callable[[RankFigures], float | None]) -> int:
    """A figure summed over the ranks (the merged tables sum their counts the same way)."""
    return int(sum(figure(r.figures) or 0 for r in summary.ranks))


def _rank_steps(summary: Summary) -> int:
    return _rank_sum(summary, lambda f: f.steps)


# the rank figures a unit of work is priced in: (diff.json key, the figure)
_PER_UNIT: tuple[tuple[str, Callable[[RankFigures], float | None]], ...] = (
    ("window_per_unit_ns", lambda f: f.window_ns),
    ("communication_per_unit_ns", lambda f: f.communication_ns),
    ("computation_per_unit_ns", lambda f: f.computation_ns),
    ("exposed_communication_per_unit_ns", lambda f: f.exposed_communication_ns),
    ("idle_per_unit_ns", lambda f: f.idle_ns))


def dominant_unit(before: Summary, after: Summary, prefixes: tuple[str, ...] = COMM_PREFIXES) -> tuple | None:
    """(source, name, row before, row after) of the most frequent unit present in both runs: by
    both runs' calls, then time, then name, a rule symmetric in before and after (by the before
    run's alone, two ops tied in calls gave AccumulateGrad one way and copy_bucket_to_grad the other)."""
    for (source, b), (_, a) in zip(_unit_candidates(before, prefixes), _unit_candidates(after, prefixes)):
        common = [name for name in b if name in a]
        if common:
            name = min(common, key=lambda n: (-(b[n]["calls"] + a[n]["calls"]),
                                              -((b[n]["total_ns"] or 0) + (a[n]["total_ns"] or 0)), n))
            return source, name, b[name], a[name]
    return None


def unit_of_work(before: Summary, after: Summary, prefixes: tuple[str, ...] = COMM_PREFIXES) -> UnitOfWork | None:
    """Figures per unit of the dominant repeated unit, and whether they replace per-step ones.

    ``applies`` when a side has no steps or the step counts differ: then totals only compare
    per unit of work. ``per_step``: units per rank-step (None without steps on a side), the rate
    the report words: equal counts over equal steps are the same number, where units per second
    of window (``per_second``, counts and windows summed over ranks) read "31% fewer" whenever
    the window grew."""
    unit = dominant_unit(before, after, prefixes)
    if unit is None:
        return None
    source, name, rb, ra = unit
    sb, sa = _rank_steps(before), _rank_steps(after)
    reason = "no_steps" if not sb or not sa else "step_counts_differ" if sb != sa else None
    cb, ca = int(rb["calls"]), int(ra["calls"])
    wb, wa = _rank_sum(before, lambda f: f.window_ns), _rank_sum(after, lambda f: f.window_ns)
    per_unit = {key: change(_rank_sum(before, figure) / cb, _rank_sum(after, figure) / ca) for key, figure in _PER_UNIT}
    return UnitOfWork(source=source, name=name, applies=reason is not None, reason=reason,
                      count=change(cb, ca), window_ns=change(wb, wa),
                      per_step=change(cb / sb if sb else None, ca / sa if sa else None),
                      per_second=change(1e9 * cb / wb if wb else None, 1e9 * ca / wa if wa else None),
                      cost_per_unit_ns=change(rb["total_ns"] / cb if rb["total_ns"] is not None else None,
                                              ra["total_ns"] / ca if ra["total_ns"] is not None else None),
                      **per_unit)


# -- movers -----------------------------------------------------------------------------------

def _rows(summary: Summary) -> dict[tuple, float]:
    """(category, name, metric) -> total over ranks, from the summary tables and the skew; None
    where a part is unknown (null: a NaN of a damaged summary as cli.finite reads it)."""
    merged, out = summary.tables.merged, {}
    for row in merged.model:
        if names.is_step_name(row.name):  # the step itself, not a part that moved
            continue
        for metric, total in (("cpu_total_ns", row.cpu_total_ns), ("gpu_total_ns", row.gpu_total_ns)):
            if total is not None:
                out[("phase", row.name, metric)] = total
    for category, rows in (("kernel", merged.kernel.rows), ("user", merged.user.rows),
                           ("memory", merged.memory.rows)):
        for row in rows:  # an op's calls under its base name
            if names.is_step_name(names.base_name(row.name)):  # ProfilerStep#N: 5 of 10 movers were steps
                continue
            key = (category, names.base_name(row.name), "total_ns")
            seen, total = out.get(key, 0), row.total_ns
            out[key] = None if seen is None or total is None else seen + total  # None: unknown, not 0
    for kind in summary.skew.kinds:
        name = collective_name(kind)
        waits = list(kind.wait_ns_by_rank.values())
        out[("collective", name, "wait_ns")] = None if None in waits else sum(waits)
        if kind.transfer_ns_total is not None:
            out[("collective", name, "transfer_ns")] = kind.transfer_ns_total
    return out


def collective_name(kind: KindRow) -> str:
    """kind x group, as the skew aggregates them."""
    return str(kind.name) if kind.group is None else f"{kind.name} group={kind.group}"


def movers(before: Summary, after: Summary, per: str, divisors: tuple[float, float],
           top: int = TOP_MOVERS) -> list[Mover]:
    """The largest absolute changes of time per ``per`` (step, unit or window)."""
    rb, ra = _rows(before), _rows(after)
    out = []
    for key in dict.fromkeys([*rb, *ra]):
        if rb.get(key, 0) is None or ra.get(key, 0) is None:  # unknown on a side: no mover to rank
            continue
        moved = change(rb.get(key, 0) / divisors[0], ra.get(key, 0) / divisors[1])
        if moved.delta:
            out.append(Mover(key[0], key[1], key[2], per, moved.before, moved.after, moved.delta, moved.relative))
    out.sort(key=lambda m: -abs(m.delta))
    return out[:top]


def normaliser(before: Summary, after: Summary, unit: UnitOfWork | None) -> tuple[str, tuple[float, float]]:
    """Per rank-step when both runs have steps, else per unit of work, else per window."""
    sb, sa = _rank_steps(before), _rank_steps(after)
    if sb and sa:
        return "step", (sb, sa)
    if unit is not None and unit.count.before and unit.count.after:
        return "unit", (unit.count.before, unit.count.after)
    return "window", (1, 1)


# -- findings and checks ----------------------------------------------------------------------

def finding_code(finding: Finding) -> str:
    """The key two runs' findings match on: the diagnosis' ``finding`` (its code, e.g.
    ``serialized_communication``)."""
    return str(finding.finding)


def _brief(finding: Finding | None) -> FindingBrief | None:
    if finding is None:
        return None
    return FindingBrief(severity=finding.severity, cost_ns=finding.cost_ns, ranks=finding.ranks)


MOVES = ("straggler",)  # findings about one rank: on another rank, they are another finding


def _key(finding: Finding) -> tuple[str, tuple[int, ...]]:
    """What two runs' findings match on: the code, and for a finding about one rank (the straggler) its
    rank: a straggler that moved from rank 1 to rank 0 is one resolved and one new, not "kept"."""
    code = finding_code(finding)
    return code, tuple(finding.ranks) if code in MOVES else ()


def finding_changes(before: Summary, after: Summary) -> FindingChanges:
    """Findings resolved (before only), new (after only) and kept (both), by code (and rank, for MOVES)."""
    b = {_key(f): f for f in before.findings}
    a = {_key(f): f for f in after.findings}

    def entry(key: tuple) -> FindingChange:
        return FindingChange(code=key[0], before=_brief(b.get(key)), after=_brief(a.get(key)),
                             **({"ranks": list(key[1])} if key[1] else {}))
    return FindingChanges(resolved=[entry(k) for k in b if k not in a], new=[entry(k) for k in a if k not in b],
                          kept=[entry(k) for k in b if k in a])


def check_changes(before: Summary, after: Summary) -> list[CheckChange]:
    """Checks (stream placement per rank and device) whose status changed, or that one run lacks."""
    def key(check: Check) -> tuple:
        return check.check, check.rank, check.device
    b = {key(c): c.status for c in before.checks}
    a = {key(c): c.status for c in after.checks}
    return [CheckChange(check=k[0], rank=k[1], device=k[2], before=b.get(k), after=a.get(k))
            for k in dict.fromkeys([*b, *a]) if b.get(k) != a.get(k)]


def diff(before: Summary, after: Summary, resamples: int = RESAMPLES, seed: int = SEED,
         prefixes: tuple[str, ...] = COMM_PREFIXES, min_change: float = MIN_CHANGE,
         more_before: Sequence[Summary] = (), more_after: Sequence[Summary] = ()) -> Diff:
    """The whole diff of two summaries (the ``diff.json`` contract). ``more_before`` /
    ``more_after``: the other runs of each side (``before`` and ``after`` being its median run);
    with two or more runs a side, ``runs`` judges the step time between runs."""
    unit = unit_of_work(before, after, prefixes)
    per, divisors = normaliser(before, after, unit)
    befores, afters = [before, *more_before], [after, *more_after]
    return Diff(world_size=WorldSizes(before.world_size, after.world_size),
                source=Sources(before.source, after.source),
                warnings=warnings(before, after),
                machine=machine.differences([h for s in befores for h in s.machine],
                                            [h for s in afters for h in s.machine]),
                runs=(runs_step_time(befores, afters, resamples, seed, min_change)
                      if len(befores) > 1 and len(afters) > 1 else None),
                step_time=step_time(before, after, resamples, seed, min_change),
                ranks=rank_changes(before, after),
                across_ranks=across_changes(before, after),
                unit_of_work=unit,
                movers_per=per,
                movers=movers(before, after, per, divisors),
                findings=finding_changes(before, after),
                checks_changed=check_changes(before, after))
