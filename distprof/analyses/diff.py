"""Diff of two runs: did the change help, by how much, and is it real?

Works on two ``summary.json`` dicts (the documented keys only), so it reads any distprof output
and survives changes of the internals. Numbers and codes only; ``reports/diff_report.py``
phrases them.

* **Step time**: the job's step time of analyses.steptime (per step the median rank's
  ProfileStep, the run's figure the median over steps). Both runs' figures, their difference,
  and a seeded percentile bootstrap interval of the difference (steps resampled);
  ``significant`` only when the interval excludes 0 and the change is at least ``MIN_CHANGE``
  (10%) of the step time.
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
  time the step-time verdict gives); bandwidth when the summaries hold bytes.
* **Findings**: resolved / new / kept by finding code, and stream placement verdicts that changed.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from .. import names
from ..config import DIFF_MIN_CHANGE
from ..results import RankFigures
from . import machine, steptime

FIGURES = tuple(f.name for f in fields(RankFigures))   # every Distributed Summary figure of a rank
ACROSS_STATS = ("min", "median", "max", "mean")
MIN_STEPS = 5           # fewer steps on a side: no interval ("too few steps")
RESAMPLES = 4000
SEED = 0
LEVEL = 0.95
MIN_CHANGE = DIFF_MIN_CHANGE  # smaller relative changes of the median step are never called significant
TOP_MOVERS = 20
COMM_PREFIXES = ("nccl",)
_NOT_UNITS = ("Others",)    # a model row that is not a repeated unit of work (nor is a step: names.is_step_name)


def change(before: float | None, after: float | None) -> dict:
    """before, after, delta (after - before) and relative delta (None where undefined)."""
    delta = None if before is None or after is None else after - before
    relative = delta / before if delta is not None and before else None
    return {"before": before, "after": after, "delta": delta, "relative": relative}


# -- step time --------------------------------------------------------------------------------

def step_durations(summary: dict) -> np.ndarray:
    """The job's step time of each step (analyses.steptime: the median over ranks of the step's
    ProfileStep duration), as merge wrote it.

    From ``tables.merged.steps.median_ns`` (all steps, up to 2000), else ``skew.steps`` (at most
    ``skew.max_rows`` steps kept). A step whose time is unknown (null, or NaN in a damaged
    summary) is left out: one NaN made the median and every resample NaN."""
    steps = ((summary.get("tables") or {}).get("merged") or {}).get("steps") or {}
    if steps.get("median_ns"):
        durations = np.asarray([np.nan if x is None else x for x in steps["median_ns"]], dtype=np.float64)
        return durations[np.isfinite(durations)]
    rows = (summary.get("skew") or {}).get("steps") or []
    durations = np.asarray([r["duration_median_ns"] for r in rows if r.get("duration_median_ns") is not None],
                           np.float64)
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


def step_time(before: dict, after: dict, resamples: int = RESAMPLES, seed: int = SEED,
              min_change: float = MIN_CHANGE) -> dict:
    """Median step time of both runs, the change, and whether it is significant: the interval
    excludes 0 *and* the change is at least ``min_change`` of the median (as asv's factor).
    The interval knows only the noise inside each run; two runs of one configuration on a
    shared machine also differ by a few percent from run to run, which no interval of one pair
    can see, so a smaller change is reported (``excludes_zero``) but not called significant."""
    b, a = step_durations(before), step_durations(after)
    out = {"before_median_ns": steptime.run_step_time(b), "after_median_ns": steptime.run_step_time(a),
           "delta_ns": None, "relative": None, "ci_low_ns": None, "ci_high_ns": None, "significant": False,
           "excludes_zero": False, "min_change": min_change, "steps_before": int(b.size),
           "steps_after": int(a.size), "level": LEVEL, "resamples": resamples, "seed": seed,
           "min_steps": MIN_STEPS, "reason": None, "before_steps_ns": b.astype(np.int64).tolist(),
           "after_steps_ns": a.astype(np.int64).tolist()}
    if b.size and a.size:
        moved = change(out["before_median_ns"], out["after_median_ns"])
        out["delta_ns"], out["relative"] = moved["delta"], moved["relative"]
    if not b.size or not a.size:
        out["reason"] = "no_steps"
    elif min(b.size, a.size) < MIN_STEPS:
        out["reason"] = "too_few_steps"
    else:
        low, high = bootstrap_interval(b, a, resamples, seed)
        excludes = bool(low > 0 or high < 0)
        large = abs(out["relative"] or 0.0) >= min_change
        out.update(ci_low_ns=low, ci_high_ns=high, excludes_zero=excludes, significant=excludes and large,
                   reason="below_min_change" if excludes and not large else None)
    return out


def _run_medians(durations: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(runs, resamples): each run's step time (median step) over steps resampled with replacement."""
    return np.stack([np.median(d[rng.integers(0, d.size, (resamples, d.size))], axis=1) for d in durations])


def _side_resamples(durations: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """A side's step time (the median of its runs') per two-level resample: runs drawn with
    replacement, then each drawn run's steps: the interval sees run-to-run and step noise both."""
    per_run = _run_medians(durations, resamples, rng)
    drawn = rng.integers(0, len(durations), (resamples, len(durations)))
    return np.median(per_run[drawn, np.arange(resamples)[:, None]], axis=1)


def runs_step_time(befores: list[dict], afters: list[dict], resamples: int = RESAMPLES, seed: int = SEED,
                   min_change: float = MIN_CHANGE) -> dict:
    """Several runs a side: each run's step time (analyses.steptime), each side's the median of its
    runs', their spread (max - min over the median: the run-to-run noise), and a seeded two-level
    bootstrap interval of the change (runs, then steps). ``significant`` when the interval
    excludes 0 and the change is at least ``min_change``, as for one run a side."""
    sides = {"before": [step_durations(s) for s in befores], "after": [step_durations(s) for s in afters]}
    out: dict = {"level": LEVEL, "resamples": resamples, "seed": seed, "min_change": min_change,
                 "ci_low_ns": None, "ci_high_ns": None, "significant": False, "excludes_zero": False, "reason": None}
    for side, runs in sides.items():
        times = [steptime.run_step_time(d) if d.size else None for d in runs]
        known = [x for x in times if x is not None]
        median = float(np.median(known)) if known else None
        out[side] = {"runs_ns": times, "steps": [int(d.size) for d in runs], "median_ns": median,
                     "spread": (max(known) - min(known)) / median if len(known) > 1 and median else None}
    moved = change(out["before"]["median_ns"], out["after"]["median_ns"])
    out["delta_ns"], out["relative"] = moved["delta"], moved["relative"]
    if any(d.size < MIN_STEPS for runs in sides.values() for d in runs):
        out["reason"] = "too_few_steps"
        return out
    rng = np.random.default_rng(seed)
    before, after = (_side_resamples(sides[s], resamples, rng) for s in ("before", "after"))
    tail = 100 * (1 - LEVEL) / 2
    low, high = (float(x) for x in np.percentile(after - before, [tail, 100 - tail]))
    excludes, large = bool(low > 0 or high < 0), abs(out["relative"] or 0.0) >= min_change
    out.update(ci_low_ns=low, ci_high_ns=high, excludes_zero=excludes, significant=excludes and large,
               reason="below_min_change" if excludes and not large else None)
    return out


def median_run(summaries: list[dict]) -> int:
    """Index of a side's median run by step time (the lower middle one for an even count; runs
    without steps last): the run the detailed comparison uses."""
    times = [steptime.run_step_time(d) if (d := step_durations(s)).size else float("inf") for s in summaries]
    return int(np.argsort(times, kind="stable")[(len(times) - 1) // 2])


# -- ranks ------------------------------------------------------------------------------------

def rank_changes(before: dict, after: dict) -> list[dict]:
    """Per rank (matched by rank number): the figures of both runs and their changes."""
    b = {r["rank"]: r for r in before.get("ranks") or []}
    a = {r["rank"]: r for r in after.get("ranks") or []}
    out = []
    for rank in sorted(set(b) | set(a)):
        rb, ra = b.get(rank), a.get(rank)
        figures = {k: change(rb.get(k) if rb else None, ra.get(k) if ra else None) for k in FIGURES}
        out.append({"rank": rank,
                    "before": {k: rb.get(k) for k in FIGURES} if rb else None,
                    "after": {k: ra.get(k) for k in FIGURES} if ra else None,
                    "delta": {k: v["delta"] for k, v in figures.items()},
                    "relative": {k: v["relative"] for k, v in figures.items()}})
    return out


def across_changes(before: dict, after: dict) -> dict:
    """Across ranks: min / median / max / mean of each figure, before and after."""
    b, a = before.get("across_ranks") or {}, after.get("across_ranks") or {}
    return {key: {stat: change((b.get(key) or {}).get(stat), (a.get(key) or {}).get(stat))
                  for stat in ACROSS_STATS}
            for key in FIGURES if key in b or key in a}


def warnings(before: dict, after: dict) -> list[dict]:
    """Codes for what makes the comparison weaker (the report words them)."""
    out = []
    wb, wa = before.get("world_size"), after.get("world_size")
    if wb != wa:
        out.append({"code": "world_size_differs", "before": wb, "after": wa})
    rb = {r["rank"] for r in before.get("ranks") or []}
    ra = {r["rank"] for r in after.get("ranks") or []}
    if rb != ra:
        out.append({"code": "ranks_differ", "only_before": sorted(rb - ra), "only_after": sorted(ra - rb)})
    return out


# -- unit of work ------------------------------------------------------------------------------

def _merged(summary: dict) -> dict:
    return ((summary.get("tables") or {}).get("merged")) or {}


def _by_base_name(rows: list[dict]) -> dict[str, dict]:
    """Rows with calls, summed under their base name (names.base_name: one row per op, not per
    call, also for summaries written before merge grouped them); never a step marker."""
    out: dict[str, dict] = {}
    for row in rows:  # one per table row (at most summaries.MAX_ROWS)
        name = names.base_name(row["name"])
        if not row.get("calls") or names.is_step_name(name):
            continue
        total = row.get("total_ns")
        if name in out:
            seen = out[name]["total_ns"]
            total = None if seen is None or total is None else seen + total
            out[name] = {"calls": out[name]["calls"] + row["calls"], "total_ns": total}
        else:
            out[name] = {"calls": row["calls"], "total_ns": total}
    return out


def _unit_candidates(summary: dict, prefixes: tuple[str, ...]) -> list[tuple[str, dict[str, dict]]]:
    """Repeated units by table, in order of preference: compute kernels, user ranges, phases."""
    merged = _merged(summary)
    kernels = _by_base_name([r for r in (merged.get("kernel") or {}).get("rows") or []
                             if not str(r["name"]).startswith(prefixes)])
    users = _by_base_name((merged.get("user") or {}).get("rows") or [])
    phases = _by_base_name([{"name": r["name"], "calls": r.get("calls"),
                             "total_ns": r.get("gpu_total_ns") or r.get("cpu_total_ns")}
                            for r in merged.get("model") or [] if r["name"] not in _NOT_UNITS])
    return [("kernel", kernels), ("user", users), ("phase", phases)]


def _rank_sum(summary: dict, key: str) -> int:
    """A figure summed over the ranks (the merged tables sum their counts the same way)."""
    return int(sum(r.get(key) or 0 for r in summary.get("ranks") or []))


def _rank_steps(summary: dict) -> int:
    return _rank_sum(summary, "steps")


def dominant_unit(before: dict, after: dict, prefixes: tuple[str, ...] = COMM_PREFIXES) -> tuple | None:
    """(source, name, row before, row after) of the most frequent unit present in both runs: by
    both runs' calls, then time, then name, a rule symmetric in before and after (by the before
    run's alone, two ops tied in calls gave AccumulateGrad one way and copy_bucket_to_grad the other)."""
    for (source, b), (_, a) in zip(_unit_candidates(before, prefixes), _unit_candidates(after, prefixes)):
        common = [name for name in b if name in a]
        if common:
            name = min(common, key=lambda n: (-(b[n]["calls"] + a[n]["calls"]),
                                              -((b[n].get("total_ns") or 0) + (a[n].get("total_ns") or 0)), n))
            return source, name, b[name], a[name]
    return None


def unit_of_work(before: dict, after: dict, prefixes: tuple[str, ...] = COMM_PREFIXES) -> dict | None:
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
    wb, wa = _rank_sum(before, "window_ns"), _rank_sum(after, "window_ns")
    out = {"source": source, "name": name, "applies": reason is not None, "reason": reason,
           "count": change(cb, ca), "window_ns": change(wb, wa),
           "per_step": change(cb / sb if sb else None, ca / sa if sa else None),
           "per_second": change(1e9 * cb / wb if wb else None, 1e9 * ca / wa if wa else None),
           "cost_per_unit_ns": change(rb["total_ns"] / cb if rb.get("total_ns") is not None else None,
                                      ra["total_ns"] / ca if ra.get("total_ns") is not None else None)}
    for key in ("window_ns", "communication_ns", "computation_ns", "exposed_communication_ns", "idle_ns"):
        out[f"{key.removesuffix('_ns')}_per_unit_ns"] = change(_rank_sum(before, key) / cb,
                                                               _rank_sum(after, key) / ca)
    return out


# -- movers -----------------------------------------------------------------------------------

def _rows(summary: dict) -> dict[tuple, float]:
    """(category, name, metric) -> total over ranks, from the summary tables and the skew; None
    where a part is unknown (null: a NaN of a damaged summary as cli.finite reads it)."""
    merged, out = _merged(summary), {}
    for row in merged.get("model") or []:
        if names.is_step_name(row["name"]):  # the step itself, not a part that moved
            continue
        for side in ("cpu", "gpu"):
            if row.get(f"{side}_total_ns") is not None:
                out[("phase", row["name"], f"{side}_total_ns")] = row[f"{side}_total_ns"]
    for table, category in (("kernel", "kernel"), ("user", "user"), ("memory", "memory")):
        for row in (merged.get(table) or {}).get("rows") or []:  # an op's calls under its base name
            if names.is_step_name(names.base_name(row["name"])):  # ProfilerStep#N: 5 of 10 movers were steps
                continue
            key = (category, names.base_name(row["name"]), "total_ns")
            seen, total = out.get(key, 0), row["total_ns"]
            out[key] = None if seen is None or total is None else seen + total  # None: unknown, not 0
    for kind in (summary.get("skew") or {}).get("kinds") or []:
        name = collective_name(kind)
        waits = list((kind.get("wait_ns_by_rank") or {}).values())
        out[("collective", name, "wait_ns")] = None if None in waits else sum(waits)
        if kind.get("transfer_ns_total") is not None:
            out[("collective", name, "transfer_ns")] = kind["transfer_ns_total"]
    return out


def collective_name(kind: dict) -> str:
    """kind x group x size where the summary has them (group and bytes may be absent)."""
    parts = [str(kind.get("name") or kind.get("kind"))]
    for key in ("group", "process_group", "bytes"):
        if kind.get(key) is not None:
            parts.append(f"{key}={kind[key]}")
    return " ".join(parts)


def _bandwidth(summary: dict) -> dict[tuple, float]:
    """Bus bandwidth per collective kind, only where the summary knows the bytes."""
    return {("bandwidth", collective_name(k), "busbw_gbps"): k["busbw_gbps"]
            for k in (summary.get("skew") or {}).get("kinds") or []
            if k.get("bytes") is not None and k.get("busbw_gbps") is not None}


def movers(before: dict, after: dict, per: str, divisors: tuple[float, float], top: int = TOP_MOVERS) -> list[dict]:
    """The largest absolute changes of time per ``per`` (step, unit or window), then bandwidth."""
    rb, ra = _rows(before), _rows(after)
    out = []
    for key in dict.fromkeys([*rb, *ra]):
        if rb.get(key, 0) is None or ra.get(key, 0) is None:  # unknown on a side: no mover to rank
            continue
        moved = change(rb.get(key, 0) / divisors[0], ra.get(key, 0) / divisors[1])
        if moved["delta"]:
            out.append({"category": key[0], "name": key[1], "metric": key[2], "per": per, **moved})
    out.sort(key=lambda m: -abs(m["delta"]))
    bb, ba = _bandwidth(before), _bandwidth(after)
    bandwidth = [{"category": k[0], "name": k[1], "metric": k[2], "per": None, **change(bb[k], ba[k])}
                 for k in bb if k in ba]
    return out[:top] + sorted(bandwidth, key=lambda m: -abs(m["delta"] or 0))


def normaliser(before: dict, after: dict, unit: dict | None) -> tuple[str, tuple[float, float]]:
    """Per rank-step when both runs have steps, else per unit of work, else per window."""
    sb, sa = _rank_steps(before), _rank_steps(after)
    if sb and sa:
        return "step", (sb, sa)
    if unit is not None and unit["count"]["before"] and unit["count"]["after"]:
        return "unit", (unit["count"]["before"], unit["count"]["after"])
    return "window", (1, 1)


# -- findings and checks ----------------------------------------------------------------------

def finding_code(finding: dict) -> str:
    """The key two runs' findings match on: the diagnosis' ``finding`` (its code, e.g.
    ``serialized_communication``); ``code``, ``name`` or ``kind`` only where it is missing."""
    return str(finding.get("finding") or finding.get("code") or finding.get("name") or finding.get("kind"))


def _brief(finding: dict | None) -> dict | None:
    if finding is None:
        return None
    return {"severity": finding.get("severity"), "cost_ns": finding.get("cost_ns"), "ranks": finding.get("ranks")}


def finding_changes(before: dict, after: dict) -> dict:
    """Findings resolved (before only), new (after only) and kept (both), by code."""
    b = {finding_code(f): f for f in before.get("findings") or [] if isinstance(f, dict)}
    a = {finding_code(f): f for f in after.get("findings") or [] if isinstance(f, dict)}

    def entry(code: str) -> dict:
        return {"code": code, "before": _brief(b.get(code)), "after": _brief(a.get(code))}
    return {"resolved": [entry(c) for c in b if c not in a], "new": [entry(c) for c in a if c not in b],
            "kept": [entry(c) for c in b if c in a]}


def check_changes(before: dict, after: dict) -> list[dict]:
    """Checks (stream placement per rank and device) whose status changed, or that one run lacks."""
    def key(check: dict) -> tuple:
        return check.get("check"), check.get("rank"), check.get("device")
    b = {key(c): c.get("status") for c in before.get("checks") or [] if isinstance(c, dict)}
    a = {key(c): c.get("status") for c in after.get("checks") or [] if isinstance(c, dict)}
    return [{"check": k[0], "rank": k[1], "device": k[2], "before": b.get(k), "after": a.get(k)}
            for k in dict.fromkeys([*b, *a]) if b.get(k) != a.get(k)]


def diff(before: dict, after: dict, resamples: int = RESAMPLES, seed: int = SEED,
         prefixes: tuple[str, ...] = COMM_PREFIXES, min_change: float = MIN_CHANGE,
         more_before: list[dict] = (), more_after: list[dict] = ()) -> dict:
    """The whole diff of two summaries (the ``diff.json`` contract). ``more_before`` /
    ``more_after``: the other runs of each side (``before`` and ``after`` being its median run);
    with two or more runs a side, ``runs`` judges the step time between runs."""
    unit = unit_of_work(before, after, prefixes)
    per, divisors = normaliser(before, after, unit)
    befores, afters = [before, *more_before], [after, *more_after]
    return {"world_size": {"before": before.get("world_size"), "after": after.get("world_size")},
            "source": {"before": before.get("source"), "after": after.get("source")},
            "warnings": warnings(before, after),
            "machine": machine.differences([h for s in befores for h in s.get("machine") or []],
                                           [h for s in afters for h in s.get("machine") or []]),
            "runs": (runs_step_time(befores, afters, resamples, seed, min_change)
                     if len(befores) > 1 and len(afters) > 1 else None),
            "step_time": step_time(before, after, resamples, seed, min_change),
            "ranks": rank_changes(before, after),
            "across_ranks": across_changes(before, after),
            "unit_of_work": unit,
            "movers_per": per,
            "movers": movers(before, after, per, divisors),
            "findings": finding_changes(before, after),
            "checks_changed": check_changes(before, after)}
