"""Cross-rank skew: what each rank contributes (step and phase boundaries, collectives) and,
at rank 0, the comparison on the aligned clock.

Per-rank extraction runs where the events are (each rank or merge worker); only these compact
columns travel to rank 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import events as ev
from .. import lanes as lanes_mod
from ..align import Matching, unique_rows
from ..results import RankMarkers
from ..sources.joins import launch_join
from ..units import duration
from .distributed import work_masks

_INT_MIN, _INT_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
# the sync/transfer split and the aligned waits may differ by both ends' clock errors (one rank's
# offset off by +u, another's by -u): up to 2x the largest uncertainty before they "disagree"
SPLIT_TOLERANCE_UNCERTAINTIES = 2
# a kind gets a note when more than this share of its collectives disagree: a few disagreements
# are noise (one late host thread); a quarter or more points at the clocks or the ranks' exits
SPLIT_DISAGREE_NOTE_SHARE = 0.25

def _columns(frame: pd.DataFrame, **columns) -> dict:
    """Named plain-Python lists (picklable, JSON-able) from frame columns."""
    return {key: frame[col].astype(str).tolist() if col == "name" else frame[col].astype("int64").tolist()
            for key, col in columns.items()}


def _kinds(comm: pd.DataFrame) -> list[str]:
    """Each communication row's kind: the source's ``collective`` where it set one, else the kind
    its name says (events.collective_kind, once per distinct name)."""
    names = comm["name"].astype("category")
    by_name = np.array([ev.collective_kind(str(c)) for c in names.cat.categories] or [""], dtype=object)
    from_name = by_name[names.cat.codes.to_numpy()] if len(comm) else np.empty(0, object)
    given = comm["collective"].astype(str).to_numpy(dtype=object)
    return np.where(given != "", given, from_name).tolist()


def _launch_starts(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For each selected row, the start of the runtime call that launched it (GPU work: the host
    side of a collective), -1 where it was not launched by a captured call (host ranges)."""
    kind = events["kind"].to_numpy()
    calls = np.flatnonzero(kind == ev.RUNTIME)
    selected = np.flatnonzero(rows)
    out = np.full(selected.size, -1, np.int64)
    if not calls.size or not selected.size:
        return out
    correlation, pid = events["correlation_id"].to_numpy(), events["pid"].to_numpy()
    gpu = np.isin(kind[selected], (ev.KERNEL, ev.MEMCPY, ev.MEMSET))
    found = launch_join(correlation[selected], correlation[calls], pid[selected], pid[calls])
    found = np.where(gpu, found, -1)
    out[found >= 0] = events["start_ns"].to_numpy()[calls[found[found >= 0]]]
    return out


def _duplicate_ops(events: pd.DataFrame, comm_mask) -> np.ndarray:
    """Rows of ``c10d::*`` operator ranges where the rank also has the exchange itself (``gloo:*``
    ranges on CPU traces, NCCL kernels on GPU): one collective is then counted once, by the
    exchange, not twice under two kinds."""
    comm_mask = np.asarray(comm_mask, bool)
    names = events["name"].astype(str).to_numpy()
    is_op = np.char.startswith(names.astype(str), "c10d::") if names.size else np.zeros(0, bool)
    return comm_mask & is_op if (comm_mask & ~is_op).any() else np.zeros(names.size, bool)


def rank_markers(events: pd.DataFrame, config: dict, lane_names: dict | None = None) -> RankMarkers:
    """Step bounds, per-step phase bounds and the collectives of one rank (own clock)."""
    is_range = (events["kind"] == ev.RANGE).to_numpy()
    names = events["name"].astype(str).to_numpy()
    steps = events[is_range & (names == ev.PROFILE_STEP)]
    step_bounds = _columns(steps, step="step", start_ns="start_ns", end_ns="end_ns")

    phase_rows = events[is_range & (events["category"] == ev.PHASE).to_numpy()
                        & (names != ev.PROFILE_STEP) & (events["step"] >= 0).to_numpy()]
    grouped = (phase_rows.assign(name=phase_rows["name"].astype(str),
                                 duration_ns=phase_rows["end_ns"] - phase_rows["start_ns"])
               .groupby(["step", "name"], sort=True, observed=True)
               .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), busy_ns=("duration_ns", "sum"))
               .reset_index())
    phases = _columns(grouped, step="step", name="name", start_ns="start_ns", end_ns="end_ns",
                      busy_ns="busy_ns")

    comm_mask, _ = work_masks(events, config)
    comm_mask = comm_mask & ~_duplicate_ops(events, comm_mask)
    comm = events[comm_mask]
    keys, lane_of = lanes_mod.lane_index(events)
    labels = lanes_mod.labels(keys, lane_names)
    collectives = {
        "name": _kinds(comm),  # the canonical kind (events.COLLECTIVE_KINDS): what matching keys on
        "start_ns": comm["start_ns"].tolist(),
        "end_ns": comm["end_ns"].tolist(),
        "lane": labels[lane_of[comm_mask]].tolist() if len(comm) else [],
        "step": comm["step"].tolist(),  # matching anchor: the k-th allreduce *of step s*
        "group": comm["group"].astype(str).tolist(),
        "nbytes": comm["nbytes"].tolist(),
        "peer": comm["peer"].tolist(),
        "launch_ns": _launch_starts(events, comm_mask).tolist(),
    }
    return RankMarkers(step_bounds, phases, collectives)


# -- skew on the aligned clock -------------------------------------------------------------

def _masked_max(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, _INT_MIN).max(axis=0)


def _masked_min(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, _INT_MAX).min(axis=0)


def _masked_median(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Median per column over the present rows (float; values are made small first so the
    float median is exact to the nanosecond)."""
    base = _masked_min(values, present)
    relative = np.where(present, (values - base).astype(np.float64), np.nan)
    with np.errstate(all="ignore"):
        return np.nanmedian(relative, axis=0) + base


def _stats(values: np.ndarray) -> dict | None:
    if values.size == 0:
        return None
    return {"median": int(round(float(np.median(values)))), "p90": int(round(float(np.percentile(values, 90)))),
            "max": int(values.max())}


def _top(score: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` largest scores, in their original order."""
    if score.size <= limit:
        return np.arange(score.size)
    return np.sort(np.argsort(-score, kind="stable")[:limit])


def collective_skew(matching: Matching, offsets, uncertainties, config: dict,
                    step_ns: int | None = None, verified=None) -> dict:
    """Per-collective arrival/end skew, waits, the sync/transfer split and the straggler.

    ``offsets``/``uncertainties`` are the final per-rank clock offsets (rows of ``matching``);
    ``step_ns`` the median step duration, when there are steps.

    Lateness of a rank in a collective = its aligned start − the median start over the ranks
    (the median, so a second straggler does not hide the first); it counts when above
    ``uncertainty(rank) + median uncertainty + skew.straggler_min_ns``. A rank's lateness in a
    step is the sum of its counted lateness over the step's collectives (without steps, each
    collective is its own unit). The straggler is late, by more than that threshold and more
    than ``skew.straggler_min_step_fraction`` of the median step time, in at least
    ``skew.straggler_min_late_share`` of the steps (so a slow first step, or the random delays
    of a busy machine, do not make a straggler); among such ranks, the one with the largest
    total lateness, if that is at least ``skew.straggler_min_lead`` times the next-latest
    rank's (when two ranks are late about as much, the imbalance is spread, not one straggler).
    None when no rank is, and when that rank's clock offset is not ``verified`` (neither
    refined nor bounded: its lateness may be its clock; a note says so).

    The sync/transfer split (transfer = shortest duration across ranks, sync = the rest of
    each rank's duration) uses durations only, so it needs no alignment; it is compared with
    the aligned waits and disagreements are counted. Matrices are (ranks, collectives): memory
    is a few times 8 bytes × ranks × matched collectives.
    """
    cfg = config["skew"]
    n_ranks, n = matching.start_ns.shape
    result = {"matched": n, "kinds": [], "collectives": [], "collectives_total": n, "ranks": [],
              "straggler": None, "notes": []}
    if n == 0 or n_ranks < 2:
        return result
    arrivals = _arrivals(matching, np.asarray(offsets, np.int64), np.asarray(uncertainties, np.int64), cfg)
    units = _late_units(matching, arrivals, cfg, step_ns)
    result["collectives"] = _collective_rows(matching, arrivals, int(cfg["max_rows"]))
    result["collectives_shown"] = len(result["collectives"])
    result["kinds"], result["notes"] = _kind_rows(matching, arrivals)
    rank_of = matching.ranks.tolist()
    # late_units: steps in which the rank was late (collectives, when the trace has no steps)
    result["ranks"] = [{"rank": rank_of[r], "last_count": int(arrivals["last_count"][r]),
                        "late_count": int(arrivals["late_last"][r]),
                        "late_collectives": int(arrivals["late"][r].sum()), "late_units": int(units["late_units"][r]),
                        "late_steps": int(units["late_units"][r]) if units["by_step"] else None,
                        "total_lateness_ns": int(arrivals["total_lateness"][r]),
                        "wait_ns": int(arrivals["wait"][r].sum()), "sync_ns": int(arrivals["sync"][r].sum()),
                        "threshold_ns": int(arrivals["threshold"][r])} for r in range(n_ranks)]
    _name_straggler(result, matching, arrivals, units, cfg, verified)
    return result


def _arrivals(matching: Matching, offsets: np.ndarray, unc: np.ndarray, cfg: dict) -> dict:
    """Per (rank, collective) on the aligned clock: waits, sync/transfer split, lateness against
    the median start and whether it counts (above the rank's threshold)."""
    n_ranks = matching.start_ns.shape[0]
    present = matching.present
    start = matching.start_ns + offsets[:, None]
    end = matching.end_ns + offsets[:, None]
    first, last = _masked_min(start, present), _masked_max(start, present)
    arrival_skew = last - first
    last_row = np.where(present, start, _INT_MIN).argmax(axis=0)
    wait = np.where(present, last[None, :] - start, 0)
    duration = np.where(present, matching.end_ns - matching.start_ns, 0)
    transfer = _masked_min(duration, present)
    sync = np.where(present, duration - transfer[None, :], 0)
    median_start = _masked_median(start, present)
    lateness = np.where(present, (start - first[None, :]) - (median_start - first)[None, :], 0.0)
    lateness = np.round(lateness).astype(np.int64)
    threshold = unc + int(np.median(unc)) + int(cfg["straggler_min_ns"])
    late = present & (lateness > threshold[:, None])
    is_last = present & (np.arange(n_ranks)[:, None] == last_row[None, :]) & (arrival_skew > 0)
    split_tolerance = SPLIT_TOLERANCE_UNCERTAINTIES * int(unc.max()) + int(cfg["straggler_min_ns"])
    split_diff = np.abs(sync - wait).max(axis=0)
    return {"unc": unc, "start": start, "arrival_skew": arrival_skew,
            "end_skew": _masked_max(end, present) - _masked_min(end, present),
            "first_row": np.where(present, start, _INT_MAX).argmin(axis=0), "last_row": last_row,
            "wait": wait, "transfer": transfer, "sync": sync, "median_start": median_start,
            "lateness": lateness, "threshold": threshold, "late": late,
            "last_count": is_last.sum(axis=1), "late_last": (is_last & late).sum(axis=1),
            "total_lateness": np.where(late, lateness, 0).sum(axis=1),
            "split_diff": split_diff, "split_agrees": split_diff <= split_tolerance}


def _late_units(matching: Matching, arrivals: dict, cfg: dict, step_ns: int | None) -> dict:
    """Lateness per rank and unit of persistence: steps (when collectives span several), else
    single collectives; and in how many units each rank was late."""
    n_ranks, n = matching.start_ns.shape
    late, lateness, threshold = arrivals["late"], arrivals["lateness"], arrivals["threshold"]
    unique_steps, unit_of = np.unique(matching.step, return_inverse=True)
    by_step = unique_steps.size >= 2
    if not by_step:
        unit_of = np.arange(n)
    n_units = int(unit_of.max()) + 1
    late_rows, late_cols = np.nonzero(late)
    per_unit = np.bincount(late_rows * n_units + unit_of[late_cols], weights=lateness[late_rows, late_cols],
                           minlength=n_ranks * n_units).reshape(n_ranks, n_units)
    unit_threshold = threshold.astype(np.float64)
    if by_step and step_ns:
        unit_threshold = np.maximum(unit_threshold, float(cfg["straggler_min_step_fraction"]) * step_ns)
    return {"by_step": by_step, "n_units": n_units, "per_unit": per_unit, "unit_threshold": unit_threshold,
            "late_units": (per_unit > unit_threshold[:, None]).sum(axis=1)}


def _collective_rows(matching: Matching, arrivals: dict, limit: int) -> list[dict]:
    """The ``limit`` collectives with the largest arrival skew, in time order."""
    a = arrivals
    present, unc, median_start = matching.present, a["unc"], a["median_start"]
    order = np.argsort(median_start, kind="stable")  # index = time order of the collectives
    index = np.empty(order.size, np.int64)
    index[order] = np.arange(order.size)
    rank_of = matching.ranks.tolist()
    first_row, last_row = a["first_row"], a["last_row"]
    return [{
        "index": int(index[j]), "name": str(matching.name[j]), "step": int(matching.step[j]),
        "ordinal": int(matching.ordinal[j]), "start_ns": int(round(float(median_start[j]))),
        "arrival_skew_ns": int(a["arrival_skew"][j]), "end_skew_ns": int(a["end_skew"][j]),
        "first_rank": rank_of[first_row[j]], "last_rank": rank_of[last_row[j]],
        "last_lateness_ns": int(a["lateness"][last_row[j], j]),
        "above_uncertainty": bool(a["arrival_skew"][j] > unc[first_row[j]] + unc[last_row[j]]),
        "transfer_ns": int(a["transfer"][j]), "max_sync_ns": int(a["sync"][present[:, j], j].max()),
        "split_agrees": bool(a["split_agrees"][j]),
        "wait_ns_by_rank": {str(rank_of[r]): int(a["wait"][r, j]) for r in np.flatnonzero(present[:, j])},
    } for j in order[_top(a["arrival_skew"][order], limit)]]


def _kind_rows(matching: Matching, arrivals: dict) -> tuple[list[dict], list[str]]:
    """Aggregates per kind of collective, and a note per kind whose split and waits disagree."""
    a = arrivals
    present, rank_of = matching.present, matching.ranks.tolist()
    kinds, notes = [], []
    for kind in np.unique(matching.name):  # one iteration per kind of collective
        cols = matching.name == kind
        rows = present[:, cols].any(axis=1)
        disagree = ~a["split_agrees"][cols]
        kinds.append({
            "name": str(kind), "matched": int(cols.sum()),
            "arrival_skew_ns": _stats(a["arrival_skew"][cols]), "end_skew_ns": _stats(a["end_skew"][cols]),
            "transfer_ns_total": int(a["transfer"][cols].sum()),
            "wait_ns_by_rank": {str(rank_of[r]): int(a["wait"][r, cols].sum()) for r in np.flatnonzero(rows)},
            "sync_ns_by_rank": {str(rank_of[r]): int(a["sync"][r, cols].sum()) for r in np.flatnonzero(rows)},
            "split_disagreements": int(disagree.sum()),
        })
        if disagree.mean() > SPLIT_DISAGREE_NOTE_SHARE:
            notes.append(
                f"{kind}: the aligned waits and the sync/transfer split disagree on {int(disagree.sum())} of "
                f"{int(cols.sum())} collectives (median gap {duration(np.median(a['split_diff'][cols][disagree]))}; "
                f"median end skew {duration(np.median(a['end_skew'][cols]))}): the ranks do not leave it together "
                "(e.g. host threads resuming late) or the clocks are off; the split needs no clock")
    return kinds, notes


def _name_straggler(result: dict, matching: Matching, arrivals: dict, units: dict, cfg: dict, verified) -> None:
    """Set ``result["straggler"]``, or add the note that says why no rank is named."""
    n_ranks, n = matching.start_ns.shape
    rank_of = matching.ranks.tolist()
    total_lateness, late, late_last = arrivals["total_lateness"], arrivals["late"], arrivals["late_last"]
    late_units, n_units, by_step = units["late_units"], units["n_units"], units["by_step"]
    # random delays make some rank late in some steps; a straggler is late in most of them
    candidates = late_units >= np.ceil(float(cfg["straggler_min_late_share"]) * n_units - 1e-9)
    verified = np.ones(n_ranks, bool) if verified is None else np.asarray(verified, bool)
    r = int(np.argmax(np.where(candidates, total_lateness, -1)))
    others = np.delete(total_lateness, r)
    runner_up = int(others.max()) if others.size else 0
    stands_out = total_lateness[r] >= float(cfg["straggler_min_lead"]) * runner_up
    what = "steps" if by_step else "collectives"
    if candidates.any() and not verified[r]:
        result["notes"].append(
            f"rank {rank_of[r]} looks late in {int(late_units[r])} of {n_units} "
            f"{what} (total {duration(total_lateness[r])}), but its clock "
            "offset is unverified (too few matched collectives to align it, no bound from its source): "
            "not named a straggler")
    elif candidates.any() and not stands_out:
        second = rank_of[int(np.flatnonzero(np.arange(n_ranks) != r)[np.argmax(others)])]
        result["notes"].append(
            f"rank {rank_of[r]} is late in {int(late_units[r])} of {n_units} {what} "
            f"(total {duration(total_lateness[r])}), but rank {second} is late nearly as much "
            f"({duration(runner_up)}): no single straggler; the delay is spread (uneven work, or a busy machine)")
    elif candidates.any():
        result["straggler"] = {
            "rank": rank_of[r], "late_count": int(late_last[r]), "total_lateness_ns": int(total_lateness[r]),
            "late_collectives": int(late[r].sum()), "matched": n,
            "late_steps": int(late_units[r]) if by_step else None, "steps": n_units if by_step else None,
            "lateness_per_step_ns": int(total_lateness[r] // n_units) if by_step else None,
            "median_lateness_per_step_ns": int(np.median(units["per_unit"][r])) if by_step else None,
            "mean_lateness_ns": int(total_lateness[r] // max(int(late[r].sum()), 1)),
            "threshold_ns": int(round(float(units["unit_threshold"][r]))),
            "most_often_last_rank": rank_of[int(np.argmax(late_last))],
        }


def _dense(keys_by_rank: list[np.ndarray], values_by_rank: list[dict[str, np.ndarray]]):
    """Unique keys over all ranks and, per value name, a (ranks, keys) matrix plus presence."""
    width = keys_by_rank[0].shape[1] if keys_by_rank else 1
    all_keys = np.concatenate(keys_by_rank) if keys_by_rank else np.zeros((0, width), np.int64)
    unique_keys, inverse, _ = unique_rows(all_keys)
    rows = np.concatenate([np.full(k.shape[0], i) for i, k in enumerate(keys_by_rank)]).astype(np.int64)
    present = np.zeros((len(keys_by_rank), unique_keys.shape[0]), dtype=bool)
    present[rows, inverse] = True
    matrices = {}
    for name in (values_by_rank[0] if values_by_rank else {}):
        matrix = np.zeros(present.shape, np.int64)
        matrix[rows, inverse] = np.concatenate([v[name] for v in values_by_rank])
        matrices[name] = matrix
    return unique_keys, present, matrices


def _phase_skew(aligned_by_rank: list[dict], rank_of: list[int]) -> dict:
    """Per (step, phase name): start/end spread and busy time across ranks; per phase name the
    aggregates of summary.json's skew.phases (``rows``)."""
    phases: list[dict] = []
    phase_names = np.unique(np.concatenate([np.asarray(a["phases"]["name"], dtype=str) for a in aligned_by_rank]
                                           + [np.empty(0, dtype=str)]))
    phase_keys = [np.stack([np.asarray(a["phases"]["step"], np.int64),
                            np.searchsorted(phase_names, np.asarray(a["phases"]["name"], dtype=str))], axis=1)
                  .reshape(-1, 2).astype(np.int64) for a in aligned_by_rank]
    pkeys, ppresent, pm = _dense(phase_keys, [{"start": np.asarray(a["phases"]["start_ns"], np.int64),
                                               "end": np.asarray(a["phases"]["end_ns"], np.int64),
                                               "busy": np.asarray(a["phases"]["busy_ns"], np.int64)}
                                              for a in aligned_by_rank])
    if pkeys.shape[0]:
        p_start_spread = _masked_max(pm["start"], ppresent) - _masked_min(pm["start"], ppresent)
        p_end_spread = _masked_max(pm["end"], ppresent) - _masked_min(pm["end"], ppresent)
        p_busy_med = _masked_median(pm["busy"], ppresent)
        p_busy_max_row = np.where(ppresent, pm["busy"], _INT_MIN).argmax(axis=0)
        for code, name in enumerate(phase_names):  # aggregates per phase name
            cols = pkeys[:, 1] == code
            totals = np.where(ppresent[:, cols], pm["busy"][:, cols], 0).sum(axis=1)
            has = ppresent[:, cols].any(axis=1)
            median_total = float(np.median(totals[has]))
            worst = int(np.argmax(np.where(has, totals, -1)))
            phases.append({
                "name": str(name), "steps": int(cols.sum()),
                "start_spread_ns": _stats(p_start_spread[cols]), "end_spread_ns": _stats(p_end_spread[cols]),
                "busy_total_median_ns": int(round(median_total)), "busy_total_max_ns": int(totals[worst]),
                "busy_total_max_rank": rank_of[worst],
                "busy_imbalance": float(totals[worst] / median_total) if median_total > 0 else None,
                "busy_ns_by_rank": {str(rank_of[r]): int(totals[r]) for r in np.flatnonzero(has)},
            })
    if not pkeys.shape[0]:
        return {"rows": phases, "keys": pkeys}
    return {"rows": phases, "keys": pkeys, "names": phase_names, "start_spread": p_start_spread,
            "end_spread": p_end_spread, "busy_median": p_busy_med, "busy_max_row": p_busy_max_row, "busy": pm["busy"]}


def step_skew(aligned_by_rank: list[dict], ranks: list[int], config: dict) -> dict:
    """Per step and phase: start/end spread across ranks (aligned clock), step-time imbalance
    (max/median of the ranks' step durations), and per phase the rank that spends the most in
    it. Steps are matched by their index; ``skew.max_rows`` steps are listed (those where the
    slowest rank loses the most against the median), the aggregates cover all."""
    limit = int(config["skew"]["max_rows"])
    rank_of = list(ranks)
    result = {"steps": [], "steps_summary": None, "phases": []}
    if not aligned_by_rank:
        return result
    step_keys = [np.asarray(a["step_bounds"]["step"], np.int64)[:, None] for a in aligned_by_rank]
    steps, present, m = _dense(step_keys, [{"start": np.asarray(a["step_bounds"]["start_ns"], np.int64),
                                            "end": np.asarray(a["step_bounds"]["end_ns"], np.int64)}
                                           for a in aligned_by_rank])
    steps = steps[:, 0] if steps.size else np.zeros(0, np.int64)

    ph = _phase_skew(aligned_by_rank, rank_of)
    result["phases"] = ph["rows"]
    pkeys = ph["keys"]
    if steps.size == 0:
        return result

    start_spread = _masked_max(m["start"], present) - _masked_min(m["start"], present)
    end_spread = _masked_max(m["end"], present) - _masked_min(m["end"], present)
    duration = m["end"] - m["start"]
    median_duration = _masked_median(duration, present)
    max_duration = _masked_max(duration, present)
    slowest = np.where(present, duration, _INT_MIN).argmax(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        imbalance = np.where(median_duration > 0, max_duration / median_duration, np.nan)
    shown = _top((max_duration - median_duration).astype(np.float64), limit)
    rows = []
    for j in shown:  # at most skew.max_rows steps
        row = {"step": int(steps[j]), "ranks": int(present[:, j].sum()),
               "start_spread_ns": int(start_spread[j]), "end_spread_ns": int(end_spread[j]),
               "duration_median_ns": int(round(float(median_duration[j]))), "duration_max_ns": int(max_duration[j]),
               "slowest_rank": rank_of[slowest[j]],
               "imbalance": None if np.isnan(imbalance[j]) else float(imbalance[j]), "phases": []}
        for k in np.flatnonzero(pkeys[:, 0] == steps[j]) if pkeys.shape[0] else []:
            row["phases"].append({"name": str(ph["names"][pkeys[k, 1]]),
                                  "start_spread_ns": int(ph["start_spread"][k]),
                                  "end_spread_ns": int(ph["end_spread"][k]),
                                  "busy_median_ns": int(round(float(ph["busy_median"][k]))),
                                  "busy_max_ns": int(ph["busy"][ph["busy_max_row"][k], k]),
                                  "busy_max_rank": rank_of[ph["busy_max_row"][k]]})
        rows.append(row)
    result["steps"] = rows
    finite = ~np.isnan(imbalance)
    worst_step = int(np.nanargmax(imbalance)) if finite.any() else None
    result["steps_summary"] = {
        "count": int(steps.size), "shown": len(rows),
        "imbalance": None if worst_step is None else {
            "median": float(np.median(imbalance[finite])), "max": float(imbalance[worst_step]),
            "max_step": int(steps[worst_step]), "max_rank": rank_of[slowest[worst_step]]},
        "start_spread_ns": _stats(start_spread), "end_spread_ns": _stats(end_spread),
        "duration_median_ns": int(round(float(np.median(median_duration)))),
    }
    return result
