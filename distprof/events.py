"""The canonical event table: the one data model every source produces and every analysis reads.

One table per rank, one row per interval (or instant: ``end_ns == start_ns`` for marks).
Times are int64 nanoseconds on the rank's *own* clock; alignment adds an offset later and
never rewrites these columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and pandas load when a table is built, not when the constants are read
    import pandas as pd

# kind: what produced the row
RANGE, KERNEL, MEMCPY, MEMSET, RUNTIME, COMM_OP, MARK = (
    "range", "kernel", "memcpy", "memset", "runtime", "comm_op", "mark")
KINDS = (RANGE, KERNEL, MEMCPY, MEMSET, RUNTIME, COMM_OP, MARK)

# category: what the time is spent on
COMPUTE, COMMUNICATION, MEMORY, PHASE, USER, RUNTIME_CAT = (
    "COMPUTE", "COMMUNICATION", "MEMORY", "PHASE", "USER", "RUNTIME")
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY, PHASE, USER, RUNTIME_CAT)

GPU_STREAM, HOST_THREAD = "gpu_stream", "host_thread"
LANE_KINDS = (GPU_STREAM, HOST_THREAD)

# The ProfileStep range name: one range per step, category PHASE, ``step`` = its index.
PROFILE_STEP = "ProfileStep"

_INT_COLUMNS = ("rank", "start_ns", "end_ns", "device", "lane", "pid", "correlation_id", "step")
_CATEGORICAL = {"kind": KINDS, "category": CATEGORIES, "lane_kind": LANE_KINDS}
COLUMNS = ("rank", "kind", "category", "name", "start_ns", "end_ns", "device", "lane",
           "lane_kind", "pid", "correlation_id", "step", "phase")
_DEFAULTS = {"rank": 0, "device": -1, "lane": 0, "pid": 0, "correlation_id": -1, "step": -1,
             "phase": "", "lane_kind": HOST_THREAD}


def make_events(**columns) -> pd.DataFrame:
    """Build a validated event table from column arrays; missing optional columns get defaults.

    Required: kind, category, name, start_ns, end_ns (arrays of equal length; kind/category
    may be scalars). Rows come out sorted by start_ns so analyses can rely on it.
    """
    import numpy as np
    import pandas as pd
    for required in ("kind", "category", "name", "start_ns", "end_ns"):
        if required not in columns:
            raise ValueError(f"event table needs column {required!r}")
    unknown = set(columns) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown event columns: {sorted(unknown)}")
    n = len(np.asarray(columns["start_ns"]))
    data = {}
    for col in COLUMNS:
        value = columns.get(col, _DEFAULTS.get(col))
        if np.ndim(value) == 0:
            value = np.full(n, value, dtype=object if isinstance(value, str) else np.int64)
        data[col] = value
    frame = pd.DataFrame(data)
    for col in _INT_COLUMNS:
        frame[col] = frame[col].astype(np.int64)
    for col, allowed in _CATEGORICAL.items():
        frame[col] = pd.Categorical(frame[col], categories=allowed)
        if frame[col].isna().any():
            bad = sorted(set(map(str, np.asarray(columns[col]).ravel())) - set(allowed))
            raise ValueError(f"column {col!r} has values outside {allowed}: {bad}")
    frame["name"] = frame["name"].astype("category")
    frame["phase"] = frame["phase"].astype("category")
    if (frame["end_ns"].to_numpy() < frame["start_ns"].to_numpy()).any():
        raise ValueError("event table has rows with end_ns < start_ns")
    return frame.sort_values("start_ns", kind="stable", ignore_index=True)


def empty_events() -> pd.DataFrame:
    """An event table with no rows (a rank that recorded nothing)."""
    import numpy as np
    return make_events(kind=np.array([], dtype=object), category=np.array([], dtype=object),
                       name=np.array([], dtype=object), start_ns=np.array([], dtype=np.int64),
                       end_ns=np.array([], dtype=np.int64))


class SourceError(Exception):
    """A bad input file, phrased as one line that names the file and the problem."""


@dataclass
class RankTrace:
    """One rank's events from a source, with what the source knows about that rank.

    ``rank`` is None when the source cannot tell (the merge then numbers by file order).
    ``clock_offset_ns`` is added to the rank's own timestamps to put it on the common axis
    (e.g. nsys session start in UTC, or the MPI ping-pong offset to rank 0).
    """

    events: pd.DataFrame
    rank: int | None = None
    source: str = "native"
    source_file: str | None = None
    pid: int | None = None
    device: int | None = None
    clock_offset_ns: int = 0
    clock_uncertainty_ns: int = 0
    rank_from: str = "unknown"        # where the rank number came from (env, file order, ...)
    warnings: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
