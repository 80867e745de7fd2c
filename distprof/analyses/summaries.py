"""The summary tables people know from the Paddle profiler, per rank and merged across ranks.

Per rank (:func:`rank_tables`, next to the events, so only these compact rows travel):

* **Device**: GPU utilization = |∪ kernels on the device ∩ W| / |W|; each host thread's busy
  share: ∪ of what runs on it under the step (its ops and calls), not of the ranges that only
  mark where it is: the step ranges (``ProfilerStep#N`` included) and the phases (a thread asleep
  or blocked inside ``## forward ##`` is not busy). Phases count only on host-only traces without
  COMPUTE ranges, where they are the work (as in the Distributed Summary). The process CPU
  utilization (CPU time / wall time, so up to 100 % × cores) when the source recorded
  ``process_cpu_ns`` and ``elapsed_ns``.
* **Overview**: time by event type, each the *union* of that type's intervals within W (parallel
  threads or streams count once), as a share of |W|.
* **Model**: ProfileStep, Dataloader, Forward, Backward, Optimization, Others. CPU time is the
  sum of the phase ranges' durations; GPU time is the sum of the GPU ops (kernels, memcpy,
  memset) whose ``phase`` (filled by the sources from the launching call) maps to the row, one
  "call" per step. Others = ProfileStep − the named rows. Ratios are of the ProfileStep total.
* **Kernel**, **Memory** (memcpy/memset) and **UserDefined** (USER ranges): by name, calls and
  total/avg/max/min, ratio of the table's total (UserDefined: of |W|). UserDefined rows are by
  base name: PyTorch's NVTX op ranges ``aten::to, seq = 12, op_id = 998`` count as ``aten::to``.

An event belongs to the window W when its start lies in W (as a range belongs to the step that
holds its start); unions are clipped to W. Everything is numpy/pandas group-bys: no Python loop
per event, only per device, lane or table.

:func:`merge_tables` sums those tables across ranks (avg = Σ total / Σ calls, max of maxes, min
of mins) and keeps per-rank columns where they show imbalance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import events as ev
from .. import lanes as lanes_mod
from .. import names
from ..columns import groups_of, unique_rows
from . import intervals as iv
from . import operators, steptime
from .distributed import analysis_window

MODEL_ROWS = ("ProfileStep", "Dataloader", "Forward", "Backward", "Optimization", "Others")
SORTABLE = ("kernel", "memory", "user")      # tables whose rows are ordered by --sorted-by
MAX_ROWS = 200          # rows kept per by-name table in the merged tables
RANK_ROWS = 20          # rows kept per by-name table in each rank's own copy in summary.json
MAX_STEPS = 2000        # steps kept in the step-time series

_STAT_COLUMNS = ("calls", "total_ns", "avg_ns", "max_ns", "min_ns")
_GPU_KINDS = (ev.KERNEL, ev.MEMCPY, ev.MEMSET)


def model_row(name: str, dataloader: str = "Dataloader") -> str | None:
    """Model Summary row of a phase name ('forward', 'optimizer.step', ...); None for ""."""
    if not name:
        return None
    if name == ev.PROFILE_STEP:
        return "ProfileStep"
    low = name.strip("# ").lower()  # '## forward ##' (record_function markers) is 'forward'
    if name == dataloader or low.startswith(("dataloader", "data_loader", "data loading", "enumerate(dataloader")):
        return "Dataloader"
    if low.startswith(("forward", "fwd")):
        return "Forward"
    if low.startswith(("backward", "bwd")):
        return "Backward"
    if low.startswith(("optim", "opt_step", "optimizer")):
        return "Optimization"
    return "Others"


def _in_window(starts: np.ndarray, window: iv.IntervalSet) -> np.ndarray:
    """Rows whose start lies in the (disjoint, sorted) window set."""
    w_start, w_end = window
    if w_start.size == 0:
        return np.zeros(starts.size, dtype=bool)
    at = np.searchsorted(w_start, starts, side="right") - 1
    clipped = np.maximum(at, 0)
    return (at >= 0) & (starts < w_end[clipped])


def _base_names(column: ev.Texts) -> tuple[np.ndarray, np.ndarray]:
    """names.base_name of each row as (codes, texts), computed once per distinct name; texts in
    the order of the names they came from (the by-name tables break ties of total by that order)."""
    base_codes, bases = ev.factorize([names.base_name(text) for text in column.texts])
    return base_codes[column.codes] if len(column) else np.zeros(0, np.int64), ev._object_array(bases)


def _by_name(keys: list[tuple[np.ndarray, np.ndarray]], durations: np.ndarray, denominator: int,
             limit: int, names_of_keys: list[str]) -> dict:
    """A by-name table sorted by total (ties by the keys' category order), ``limit`` rows kept,
    the rest counted in ``dropped``; ``keys``: (codes, texts) per key column of the rows."""
    known = np.ones(durations.size, bool)
    for codes, _ in keys:
        known &= codes >= 0
    durations = durations[known]
    if not durations.size:
        return {"rows": [], "denominator_ns": int(denominator), "dropped": {"rows": 0, "calls": 0, "total_ns": 0}}
    stacked = np.stack([codes[known] for codes, _ in keys], axis=1)
    groups, group_of, _ = unique_rows(stacked)  # rows sorted by the keys' codes
    calls, total, longest, shortest = _group_stats(group_of, durations, len(groups))
    order = np.argsort(-total, kind="stable")
    kept, rest = order[:limit], order[limit:]
    rows = []
    for g in kept.tolist():  # at most ``limit`` rows
        row = {name: str(texts[groups[g, k]]) for k, (name, (_, texts)) in enumerate(zip(names_of_keys, keys))}
        row.update(calls=int(calls[g]), total_ns=int(total[g]), avg_ns=float(total[g] / calls[g]),
                   max_ns=int(longest[g]), min_ns=int(shortest[g]),
                   ratio=float(total[g] / denominator) if denominator else None)
        rows.append(row)
    return {"rows": rows, "denominator_ns": int(denominator),
            "dropped": {"rows": int(rest.size), "calls": int(calls[rest].sum()), "total_ns": int(total[rest].sum())}}


def _group_stats(group_of: np.ndarray, values: np.ndarray, groups: int) -> tuple[np.ndarray, ...]:
    """(count, sum, max, min) of int64 ``values`` per group id in 0..groups-1 (one sort)."""
    order = np.argsort(group_of, kind="stable")
    ordered, sorted_values = group_of[order], values[order]
    starts = np.searchsorted(ordered, np.arange(groups))
    calls = np.diff(np.append(starts, ordered.size))
    total = np.add.reduceat(sorted_values, starts)
    return calls, total, np.maximum.reduceat(sorted_values, starts), np.minimum.reduceat(sorted_values, starts)


def _records(frame: pd.DataFrame, ints=("calls", "total_ns", "max_ns", "min_ns")) -> list[dict]:
    """Rows as plain JSON-able dicts; avg/ratio as floats."""
    rows = frame.to_dict("records")
    for row in rows:
        for key, value in row.items():
            if key in ints and value is not None and not (isinstance(value, float) and np.isnan(value)):
                row[key] = int(value)
            elif isinstance(value, (np.floating, float)):
                row[key] = None if np.isnan(value) else float(value)
            elif isinstance(value, np.integer):
                row[key] = int(value)
    return rows


def _durations(events: ev.Table, mask: np.ndarray) -> np.ndarray:
    return (events["end_ns"] - events["start_ns"])[mask]


def device_table(events: ev.Table, window: iv.IntervalSet, meta: dict | None = None) -> list[dict]:
    """GPU utilization per device, busy share per host thread, process CPU utilization."""
    window_ns = iv.total(window)
    kind = events["kind"]
    starts, ends = events["start_ns"], events["end_ns"]
    rows = []
    meta = meta or {}
    if meta.get("process_cpu_ns") is not None and meta.get("elapsed_ns"):
        rows.append({"device": "CPU(Process)", "kind": "cpu_process", "busy_ns": int(meta["process_cpu_ns"]),
                     "elapsed_ns": int(meta["elapsed_ns"]),
                     "utilization": float(meta["process_cpu_ns"]) / float(meta["elapsed_ns"])})
    kernel = kind.eq(ev.KERNEL)
    devices = events["device"]
    for device in np.unique(devices[kernel]):  # one iteration per GPU
        on = kernel & (devices == device)
        busy = iv.total(iv.covered_within(starts[on], ends[on], window))
        rows.append({"device": f"GPU{int(device)}", "kind": "gpu", "busy_ns": busy, "elapsed_ns": window_ns,
                     "utilization": busy / window_ns if window_ns else None})
    host = events["lane_kind"].eq(ev.HOST_THREAD) & ~kind.eq(ev.MARK) & ~ev.step_range_rows(events)
    phase = events["category"].eq(ev.PHASE)
    if kernel.any() or (kind.eq(ev.RANGE) & events["category"].eq(ev.COMPUTE)).any():
        host &= ~phase  # the ops (or kernels) are the work; a phase only marks where they are
    host = np.flatnonzero(host)
    lanes, lane_of, _ = unique_rows(np.stack([events["pid"][host], events["lane"][host]], axis=1))
    for (pid, lane), on in zip(lanes.tolist(), groups_of(lane_of, len(lanes))):  # one iteration per host thread
        busy = iv.total(iv.covered_within(starts[host[on]], ends[host[on]], window))
        key = lanes_mod.LaneKey(int(pid), -1, int(lane), ev.HOST_THREAD)
        rows.append({"device": lanes_mod.label(key), "kind": "host_thread", "busy_ns": busy,
                     "elapsed_ns": window_ns, "utilization": busy / window_ns if window_ns else None})
    return rows


# (side, event type) -> row mask; unions within a type
def _overview_types(events: ev.Table) -> list[tuple[str, str, np.ndarray]]:
    kind, category = events["kind"], events["category"]
    host = events["lane_kind"].eq(ev.HOST_THREAD)
    is_step = events["name"].eq(ev.PROFILE_STEP)
    host_range = host & kind.isin((ev.RANGE, ev.COMM_OP))
    kernel, comm = kind.eq(ev.KERNEL), category.eq(ev.COMMUNICATION)
    return [
        ("cpu", "ProfileStep", host_range & is_step),
        ("cpu", "Phase", host_range & category.eq(ev.PHASE) & ~is_step),
        ("cpu", "Communication", host_range & comm),
        ("cpu", "UserDefined", host & kind.isin((ev.RANGE, ev.MARK)) & category.eq(ev.USER)),
        ("cpu", "Runtime", kind.eq(ev.RUNTIME)),
        ("gpu", "GPU busy", kind.isin(_GPU_KINDS)),
        ("gpu", "Kernel", kernel & ~comm),
        ("gpu", "Communication kernel", kernel & comm),
        ("gpu", "Memcpy", kind.eq(ev.MEMCPY)),
        ("gpu", "Memset", kind.eq(ev.MEMSET)),
    ]


def overview_table(events: ev.Table, window: iv.IntervalSet, in_window: np.ndarray) -> list[dict]:
    """Time by event type: calls (starts in W) and |∪ of the type ∩ W| / |W|."""
    window_ns = iv.total(window)
    starts, ends = events["start_ns"], events["end_ns"]
    rows = []
    for side, name, mask in _overview_types(events):  # a fixed handful of types
        calls = int((mask & in_window).sum())
        if not mask.any():
            continue
        total = iv.total(iv.covered_within(starts[mask], ends[mask], window))
        rows.append({"side": side, "type": name, "calls": calls, "total_ns": total,
                     "ratio": total / window_ns if window_ns else None})
    return rows


def _series_stats(values: np.ndarray) -> dict:
    return {"calls": int(values.size), "total_ns": int(values.sum()),
            "avg_ns": float(values.sum(dtype=np.float64) / values.size),
            "max_ns": int(values.max()), "min_ns": int(values.min())}


def _stats_by_row(rows: np.ndarray, values: np.ndarray) -> dict:
    """_series_stats of ``values`` per distinct model row (a handful)."""
    return {str(row): _series_stats(values[rows == row]) for row in np.unique(rows)}


def _step_sums(rows: np.ndarray, steps: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, summed duration) per distinct (row, step): one GPU "call" per step and row."""
    row_texts, row_codes = np.unique(rows, return_inverse=True)
    step_values, step_codes = np.unique(steps, return_inverse=True)
    pair = np.asarray(row_codes).ravel() * max(step_values.size, 1) + np.asarray(step_codes).ravel()
    pairs, pair_of = np.unique(pair, return_inverse=True)
    sums = np.zeros(pairs.size, np.int64)
    np.add.at(sums, np.asarray(pair_of).ravel(), durations)
    return row_texts[pairs // max(step_values.size, 1)], sums


def model_table(events: ev.Table, window: iv.IntervalSet, in_window: np.ndarray, dataloader: str) -> list[dict]:
    """ProfileStep / Dataloader / Forward / Backward / Optimization / Others, CPU and GPU."""
    kind = events["kind"]
    phase_range = kind.eq(ev.RANGE) & events["category"].eq(ev.PHASE) & in_window
    cpu_rows = events["name"].mapped(lambda n: model_row(n, dataloader))[phase_range]
    cpu_durations = _durations(events, phase_range)
    named_row = np.array([row is not None and row != "Others" for row in cpu_rows.tolist()], bool)
    cpu_stats = _stats_by_row(cpu_rows[named_row].astype(str), cpu_durations[named_row])

    has_steps = "ProfileStep" in cpu_stats
    steps = events["step"]
    gpu_ops = kind.isin(_GPU_KINDS) & ((steps >= 0) if has_steps else in_window)
    gpu_rows = events["phase"].mapped(lambda n: model_row(n, dataloader))[gpu_ops]
    gpu_rows = np.array(["Others" if row is None else row for row in gpu_rows.tolist()], dtype=object)
    gpu_durations, gpu_steps = _durations(events, gpu_ops), steps[gpu_ops]
    rows_of_sums, sums = _step_sums(gpu_rows.astype(str), gpu_steps, gpu_durations)
    gpu_stats = _stats_by_row(rows_of_sums, sums)
    if has_steps and gpu_durations.size:
        gpu_stats["ProfileStep"] = _series_stats(_step_sums(np.zeros(gpu_steps.size, str), gpu_steps,
                                                            gpu_durations)[1])
    cpu_base = cpu_stats["ProfileStep"]["total_ns"] if has_steps else iv.total(window)
    return _model_rows(cpu_stats, gpu_stats, cpu_base, int(gpu_durations.sum()), has_steps)


def _model_rows(cpu_stats: dict, gpu_stats: dict, cpu_base: int, gpu_base: int, has_steps: bool) -> list[dict]:
    """The six model rows from per-row CPU and GPU stats."""
    named = ("Dataloader", "Forward", "Backward", "Optimization")
    rows = []
    for name in MODEL_ROWS:  # six fixed rows
        if name == "ProfileStep" and not has_steps:
            continue
        row = {"name": name, "calls": 0 if name != "Others" else None}
        cpu_row = cpu_stats.get(name)
        if name == "Others":
            rest = cpu_base - sum(cpu_stats[n]["total_ns"] for n in named if n in cpu_stats)
            cpu_row = {"calls": None, "total_ns": max(rest, 0), "avg_ns": None, "max_ns": None, "min_ns": None}
        elif cpu_row is None:
            cpu_row = {"calls": 0, "total_ns": 0, "avg_ns": None, "max_ns": None, "min_ns": None}
        row["calls"] = cpu_row["calls"]
        row.update({f"cpu_{k}": cpu_row[k] for k in ("total_ns", "avg_ns", "max_ns", "min_ns")})
        row["cpu_ratio"] = cpu_row["total_ns"] / cpu_base if cpu_base else None
        gpu_row = gpu_stats.get(name, {"calls": 0, "total_ns": 0, "avg_ns": None, "max_ns": None, "min_ns": None})
        if not gpu_base:  # no GPU data (or no GPU work in the window): GPU columns are empty
            gpu_row = dict.fromkeys(gpu_row)
        row["gpu_calls"] = gpu_row["calls"]
        row.update({f"gpu_{k}": gpu_row[k] for k in ("total_ns", "avg_ns", "max_ns", "min_ns")})
        row["gpu_ratio"] = gpu_row["total_ns"] / gpu_base if gpu_base else None
        rows.append(row)
    return rows


def _first_category(rows: list[dict], events: ev.Table, kernels: np.ndarray, name_codes: np.ndarray,
                    name_texts: np.ndarray) -> None:
    """Each kernel row's category: that of the name's first row (the rows of the table are new dicts)."""
    category_codes, category_texts = events["category"].codes, events["category"].texts
    codes, categories = name_codes[kernels], category_codes[kernels]
    seen = categories >= 0
    distinct, first = np.unique(codes[seen], return_index=True)
    category_of = {str(name_texts[c]): str(category_texts[categories[seen][i]]) for c, i in
                   zip(distinct.tolist(), first.tolist())}
    for row in rows:
        row["category"] = category_of.get(row["name"], "")


def step_times(events: ev.Table) -> dict:
    """ProfileStep durations by step index (the first MAX_STEPS steps)."""
    rows = np.flatnonzero(events["kind"].eq(ev.RANGE) & events["name"].eq(ev.PROFILE_STEP))
    rows = rows[np.argsort(events["step"][rows], kind="stable")][:MAX_STEPS]
    return {"step": events["step"][rows].tolist(),
            "duration_ns": (events["end_ns"] - events["start_ns"])[rows].tolist()}


def rank_tables(events: ev.Table, config: dict, meta: dict | None = None, max_rows: int = MAX_ROWS) -> dict:
    """All summary tables of one rank: compact rows that travel to rank 0 instead of events."""
    window = analysis_window(events, config["window"])
    window_ns = iv.total(window)
    starts = events["start_ns"]
    in_window = _in_window(starts, window)
    kind = events["kind"]
    name_codes, name_texts = events["name"].codes, events["name"].texts
    kernels = kind.eq(ev.KERNEL) & in_window
    kernel_durations = _durations(events, kernels)
    kernel_table = _by_name([(name_codes[kernels], name_texts)], kernel_durations, int(kernel_durations.sum()),
                            max_rows, ["name"])
    if kernel_table["rows"]:  # category rides along as the first seen per name (one per name in practice)
        _first_category(kernel_table["rows"], events, kernels, name_codes, name_texts)
    memory = kind.isin((ev.MEMCPY, ev.MEMSET)) & in_window
    memory_durations = _durations(events, memory)
    user = events["category"].eq(ev.USER) & kind.isin((ev.RANGE, ev.MARK)) & in_window
    user_codes, user_texts = _base_names(events["name"])  # one row per op, not per PyTorch NVTX call
    return {
        "window_ns": window_ns,
        "span_ns": [int(starts.min()), int(events["end_ns"].max())] if len(events) else None,
        "device": device_table(events, window, meta),
        "overview": overview_table(events, window, in_window),
        "model": model_table(events, window, in_window, config["phases"]["dataloader"]),
        "kernel": kernel_table,
        "memory": _by_name([(kind.codes[memory], kind.texts), (name_codes[memory], name_texts)], memory_durations,
                           int(memory_durations.sum()), max_rows, ["kind", "name"]),
        "user": _by_name([(user_codes[user], user_texts)], _durations(events, user), window_ns, max_rows, ["name"]),
        "steps": step_times(events),
    }


# -- across ranks (rank 0, compact tables only) ----------------------------------------------

def _frame(tables_by_rank: list[dict], ranks: list[int], key: str) -> pd.DataFrame:
    """One table of every rank stacked, with a ``rank`` column."""
    parts = []
    for rank, tables in zip(ranks, tables_by_rank):  # one iteration per rank
        rows = tables[key]["rows"] if isinstance(tables[key], dict) else tables[key]
        if rows:
            parts.append(pd.DataFrame(rows).assign(rank=rank))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _by_rank(frame: pd.DataFrame, keys: list[str], value: str, ranks: list[int]) -> pd.Series:
    """Per key, the list of ``value`` over ``ranks`` (None where a rank has no such row)."""
    wide = frame.pivot_table(index=keys, columns="rank", values=value, aggfunc="sum", observed=True)
    wide = wide.reindex(columns=ranks).astype(object)
    wide = wide.where(wide.notna(), None)
    return pd.Series([[None if v is None else (int(v) if float(v).is_integer() else float(v)) for v in row]
                      for row in wide.to_numpy().tolist()], index=wide.index)


def _merge_by_name(tables_by_rank, ranks, key: str, keys: list[str], limit: int, denominator: str) -> dict:
    frame = _frame(tables_by_rank, ranks, key)
    dropped = {k: sum(t[key]["dropped"][k] for t in tables_by_rank) for k in ("rows", "calls", "total_ns")}
    if denominator == "tables":
        denom = sum(t[key]["denominator_ns"] for t in tables_by_rank)
    else:
        denom = sum(t["window_ns"] for t in tables_by_rank)
    if not len(frame):
        return {"rows": [], "denominator_ns": int(denom), "dropped": dropped}
    grouped = frame.groupby(keys, sort=False)
    merged = grouped.agg(calls=("calls", "sum"), total_ns=("total_ns", "sum"), max_ns=("max_ns", "max"),
                         min_ns=("min_ns", "min"), ranks=("rank", "nunique")).reset_index()
    top = frame.loc[frame.groupby(keys, sort=False)["total_ns"].idxmax(), [*keys, "rank"]]
    merged = merged.merge(top.rename(columns={"rank": "max_rank"}), on=keys, how="left")
    merged["avg_ns"] = merged["total_ns"] / merged["calls"]
    merged["ratio"] = merged["total_ns"] / denom if denom else np.nan
    if "category" in frame.columns:
        merged = merged.merge(frame.groupby(keys, sort=False)["category"].first().reset_index(), on=keys)
    merged = merged.sort_values(["total_ns", *keys], ascending=[False] + [True] * len(keys), kind="stable")
    rest = merged.iloc[limit:]
    dropped = {"rows": dropped["rows"] + len(rest), "calls": dropped["calls"] + int(rest["calls"].sum()),
               "total_ns": dropped["total_ns"] + int(rest["total_ns"].sum())}
    return {"rows": _records(merged.iloc[:limit], ints=("calls", "total_ns", "max_ns", "min_ns", "ranks", "max_rank")),
            "denominator_ns": int(denom), "dropped": dropped}


def _merge_model(tables_by_rank, ranks) -> list[dict]:
    frame = _frame(tables_by_rank, ranks, "model")
    if not len(frame):
        return []
    rows = []
    cpu_base = sum(t["model"][0]["cpu_total_ns"] if t["model"] and t["model"][0]["name"] == "ProfileStep"
                   else t["window_ns"] for t in tables_by_rank)
    gpu_base = sum(next((r["gpu_total_ns"] or 0 for r in t["model"] if r["name"] == "ProfileStep"),
                        sum(r["gpu_total_ns"] or 0 for r in t["model"])) for t in tables_by_rank)
    cpu_by_rank = _by_rank(frame, ["name"], "cpu_total_ns", ranks)
    gpu_by_rank = _by_rank(frame.dropna(subset=["gpu_total_ns"]), ["name"], "gpu_total_ns", ranks) \
        if frame["gpu_total_ns"].notna().any() else pd.Series(dtype=object)
    for name in MODEL_ROWS:  # six fixed rows
        part = frame[frame["name"] == name]
        if not len(part):
            continue
        row = {"name": name}
        for side, base in (("cpu", cpu_base), ("gpu", gpu_base)):
            total = part[f"{side}_total_ns"].dropna()
            calls = part["calls" if side == "cpu" else "gpu_calls"].dropna()
            if not len(total):
                row.update({f"{side}_{s}": None for s in ("total_ns", "avg_ns", "max_ns", "min_ns", "ratio")})
                continue
            n_calls = int(calls.sum()) if len(calls) else 0
            maxes, mins = part[f"{side}_max_ns"].dropna(), part[f"{side}_min_ns"].dropna()
            row.update({f"{side}_total_ns": int(total.sum()),
                        f"{side}_avg_ns": float(total.sum() / n_calls) if n_calls and len(maxes) else None,
                        f"{side}_max_ns": int(maxes.max()) if len(maxes) else None,
                        f"{side}_min_ns": int(mins.min()) if len(mins) else None,
                        f"{side}_ratio": float(total.sum() / base) if base else None})
        calls = part["calls"].dropna()
        row["calls"] = int(calls.sum()) if len(calls) else None
        row["cpu_total_ns_by_rank"] = cpu_by_rank.get(name)
        row["gpu_total_ns_by_rank"] = gpu_by_rank.get(name) if row["gpu_total_ns"] is not None else None
        rows.append(row)
    return rows


def _merge_overview(tables_by_rank, ranks) -> list[dict]:
    frame = _frame(tables_by_rank, ranks, "overview")
    if not len(frame):
        return []
    window = sum(t["window_ns"] for t in tables_by_rank)
    merged = frame.groupby(["side", "type"], sort=False).agg(calls=("calls", "sum"),
                                                              total_ns=("total_ns", "sum")).reset_index()
    merged["ratio"] = merged["total_ns"] / window if window else np.nan
    by_rank = _by_rank(frame, ["side", "type"], "total_ns", ranks)
    merged["total_ns_by_rank"] = [by_rank.get((s, t)) for s, t in zip(merged["side"], merged["type"])]
    return _records(merged)


def _merge_device(tables_by_rank, ranks) -> list[dict]:
    """Per kind: GPU = each rank's mean over its GPUs, host thread = each rank's busiest thread."""
    frame = _frame(tables_by_rank, ranks, "device")
    if not len(frame):
        return []
    rows = []
    for kind, label, how in (("gpu", "GPU (mean of the rank's GPUs)", "mean"),
                             ("cpu_process", "CPU(Process)", "mean"),
                             ("host_thread", "Busiest host thread", "max")):
        part = frame[(frame["kind"] == kind) & frame["utilization"].notna()]
        if not len(part):
            continue
        per_rank = part.groupby("rank")["utilization"].agg(how)
        rows.append({"device": label, "kind": kind, "mean": float(per_rank.mean()),
                     "min": float(per_rank.min()), "max": float(per_rank.max()),
                     "min_rank": int(per_rank.idxmin()), "max_rank": int(per_rank.idxmax()),
                     "utilization_by_rank": [None if r not in per_rank.index else float(per_rank[r])
                                             for r in ranks]})
    return rows


def _merge_steps(tables_by_rank, ranks) -> dict:
    """Per step: min / max duration across ranks and the slowest rank, ``median_ns`` the job's step
    time per step (analyses.steptime); per rank: mean and max."""
    parts = [pd.DataFrame(t["steps"]).assign(rank=r) for t, r in zip(tables_by_rank, ranks) if t["steps"]["step"]]
    if not parts:
        return {"step": [], "min_ns": [], "median_ns": [], "max_ns": [], "max_rank": [], "ranks": ranks,
                "mean_ns_by_rank": [None] * len(ranks), "max_ns_by_rank": [None] * len(ranks)}
    frame = pd.concat(parts, ignore_index=True)
    by_step = frame.groupby("step")["duration_ns"]
    slowest = frame.loc[by_step.idxmax(), ["step", "rank"]].set_index("step")["rank"]
    stats = by_step.agg(["min", "max"])
    job_steps, job_ns = steptime.per_step(frame["step"].to_numpy(), frame["duration_ns"].to_numpy())
    stats["median"] = pd.Series(job_ns, index=job_steps).reindex(stats.index)
    per_rank = frame.groupby("rank")["duration_ns"].agg(["mean", "max"])
    return {"step": stats.index.astype(int).tolist(), "min_ns": stats["min"].astype("int64").tolist(),
            "median_ns": stats["median"].round().astype("int64").tolist(),
            "max_ns": stats["max"].astype("int64").tolist(),
            "max_rank": slowest.reindex(stats.index).astype(int).tolist(),
            "ranks": list(ranks),
            "mean_ns_by_rank": [float(per_rank.loc[r, "mean"]) if r in per_rank.index else None for r in ranks],
            "max_ns_by_rank": [int(per_rank.loc[r, "max"]) if r in per_rank.index else None for r in ranks]}


def _trimmed(tables: dict, rows: int) -> dict:
    """A rank's tables for summary.json: by-name tables cut to ``rows``, no step series."""
    out = {k: v for k, v in tables.items() if k != "steps"}
    if tables.get("operator"):
        out["operator"] = operators.trimmed(tables["operator"], rows)
    for key in SORTABLE:
        table = tables[key]
        rest = table["rows"][rows:]
        out[key] = {"rows": table["rows"][:rows], "denominator_ns": table["denominator_ns"],
                    "dropped": {"rows": table["dropped"]["rows"] + len(rest),
                                "calls": table["dropped"]["calls"] + sum(r["calls"] for r in rest),
                                "total_ns": table["dropped"]["total_ns"] + sum(r["total_ns"] for r in rest)}}
    return out


def merge_tables(tables_by_rank: list[dict | None], ranks: list[int], max_rows: int = MAX_ROWS,
                 rank_rows: int = RANK_ROWS) -> dict:
    """The tables across ranks (``merged``) plus each rank's own, trimmed (``by_rank``)."""
    pairs = [(t, r) for t, r in zip(tables_by_rank, ranks) if t]
    tables = [t for t, _ in pairs]
    ranks = [int(r) for _, r in pairs]
    merged = {
        "window_ns": int(sum(t["window_ns"] for t in tables)),
        "device": _merge_device(tables, ranks),
        "overview": _merge_overview(tables, ranks),
        "model": _merge_model(tables, ranks),
        "kernel": _merge_by_name(tables, ranks, "kernel", ["name"], max_rows, "tables"),
        "memory": _merge_by_name(tables, ranks, "memory", ["kind", "name"], max_rows, "tables"),
        "user": _merge_by_name(tables, ranks, "user", ["name"], max_rows, "window"),
        "steps": _merge_steps(tables, ranks),
        "operator": operators.merge_operator_tables(tables, ranks, max_rows),
    }
    keep = max_rows if len(pairs) == 1 else rank_rows  # one rank: its own tables are the merged ones
    return {"ranks": ranks, "merged": merged,
            "by_rank": [{"rank": r, **_trimmed(t, keep)} for t, r in pairs]}
