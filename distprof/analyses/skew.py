"""Cross-rank skew: what each rank contributes (step and phase boundaries, collectives) and,
at rank 0, the comparison on the aligned clock.

Per-rank extraction runs where the events are (each rank or merge worker); only these compact
columns travel to rank 0.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import events as ev
from .distributed import lane_label, work_masks

_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def collective_kind(name: str) -> str:
    """Kind of a collective for matching across ranks: the NCCL kernel name without its
    algorithm/protocol/type suffix ('ncclKernel_AllReduce_RING_LL_Sum_float' -> 'AllReduce'),
    else the range name itself."""
    match = _NCCL_KERNEL.match(name)
    return match.group(1) if match else name


def _columns(frame: pd.DataFrame, **columns) -> dict:
    """Named plain-Python lists (picklable, JSON-able) from frame columns."""
    return {key: frame[col].astype(str).tolist() if col == "name" else frame[col].astype("int64").tolist()
            for key, col in columns.items()}


def rank_markers(events: pd.DataFrame, config: dict) -> dict:
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
    comm = events[comm_mask]
    # name and lane labels are computed once per distinct value, then spread by code
    name_codes = comm["name"].cat.codes.to_numpy()
    kinds = np.array([collective_kind(str(c)) for c in comm["name"].cat.categories] or [""], dtype=object)
    lane_rows = comm[["lane_kind", "device", "lane"]].astype({"lane_kind": str})
    unique_lanes, lane_codes = np.unique(lane_rows.to_numpy().astype(str), axis=0, return_inverse=True)
    labels = np.array([lane_label(k, int(d), int(lane)) for k, d, lane in unique_lanes] or [""], dtype=object)
    collectives = {
        "name": kinds[name_codes].tolist(),
        "start_ns": comm["start_ns"].tolist(),
        "end_ns": comm["end_ns"].tolist(),
        "lane": labels[lane_codes.ravel()].tolist() if len(comm) else [],
    }
    return {"step_bounds": step_bounds, "phases": phases, "collectives": collectives}
