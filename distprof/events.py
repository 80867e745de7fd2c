"""The canonical event table: the one data model every source produces and every analysis reads.

One table per rank, one row per interval (or instant: ``end_ns == start_ns`` for marks).
Times are int64 nanoseconds on the rank's *own* clock; alignment adds an offset later and
never rewrites these columns.
"""

from __future__ import annotations

import re
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
# a step range as the sources read it or as the framework wrote it (Kineto keeps ProfilerStep#N)
STEP_RANGE_NAME = re.compile(r"^(?:ProfileStep|Profiler?Step#\d+)$")

# Frameworks whose advice fits a trace, by what the trace holds (names or source); see frameworks()
PYTORCH = "pytorch"
_PYTORCH_PREFIXES = ("aten::", "c10d::", "ProfilerStep#", "autograd::", "torch::", "torch.", "Optimizer.step#",
                     "Optimizer.zero_grad#", "DistributedDataParallel", "FullyShardedDataParallel",
                     "record_param_comms", "nccl:", "gloo:", "enumerate(DataLoader)#")

# collective: the operation a communication row performs, one canonical kind whatever the source
# calls it (nccl:all_reduce, gloo:all_reduce, c10d::allreduce_, ncclKernel_AllReduce_*,
# ncclAllReduce, MPI_Allreduce, record_param_comms "allreduce" -> "allreduce"); "" on other rows.
# "sendrecv" is an NCCL SendRecv kernel whose op is not known; "other" communication that is not
# a collective (MPI_Wait, ...).
ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, REDUCE, BARRIER = (
    "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce", "barrier")
GATHER, SCATTER, SEND, RECV, SENDRECV, OTHER_COMM = "gather", "scatter", "send", "recv", "sendrecv", "other"
COLLECTIVE_KINDS = ("", ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, REDUCE, BARRIER,
                    GATHER, SCATTER, SEND, RECV, SENDRECV, OTHER_COMM)
POINT_TO_POINT = (SEND, RECV)

_INT_COLUMNS = ("rank", "start_ns", "end_ns", "device", "lane", "pid", "correlation_id", "step", "nbytes", "peer")
_CATEGORICAL = {"kind": KINDS, "category": CATEGORIES, "lane_kind": LANE_KINDS, "collective": COLLECTIVE_KINDS}
# collective / group / nbytes / peer describe communication rows (defaults elsewhere):
#   group  the process group's name as the trace gives it ("" = not known: the world is assumed);
#          its member ranks are in RankTrace.meta["process_groups"]
#   nbytes the message size in bytes (-1 = not known)
#   peer   the global rank at the other end of a send/recv (-1 = not known / not p2p)
COLUMNS = ("rank", "kind", "category", "name", "start_ns", "end_ns", "device", "lane",
           "lane_kind", "pid", "correlation_id", "step", "phase", "collective", "group", "nbytes", "peer")
_DEFAULTS = {"rank": 0, "device": -1, "lane": 0, "pid": 0, "correlation_id": -1, "step": -1,
             "phase": "", "lane_kind": HOST_THREAD, "collective": "", "group": "", "nbytes": -1, "peer": -1}

# squashed (lower-case letters only) op text -> kind, first match wins (reduce_scatter before reduce)
_KIND_RULES = (("reducescatter", REDUCE_SCATTER), ("allreduce", ALLREDUCE), ("allgather", ALLGATHER),
               ("alltoall", ALLTOALL), ("broadcast", BROADCAST), ("bcast", BROADCAST), ("barrier", BARRIER),
               ("sendrecv", SENDRECV), ("send", SEND), ("recv", RECV), ("reduce", REDUCE),
               ("gather", GATHER), ("scatter", SCATTER))
_KERNEL_PREFIX = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_OP_PREFIX = re.compile(r"^(?:nccl:|gloo:|c10d::|mpi_|nccl(?=[A-Z]))", re.IGNORECASE)


def collective_kind(text: str) -> str:
    """The canonical kind of a communication op from its name (one of COLLECTIVE_KINDS, never "").

    NCCL kernels by the word after ``ncclKernel_``/``ncclDevKernel_`` (the rest is algorithm,
    protocol and type); ranges and ops by their name without the ``nccl:``/``gloo:``/``c10d::``/
    ``MPI_``/``nccl`` prefix (``_allgather_base`` and ``all_to_all_single`` alike)."""
    text = str(text)
    kernel = _KERNEL_PREFIX.match(text)
    op = kernel.group(1) if kernel else _OP_PREFIX.sub("", text.split("(")[0])
    squashed = re.sub(r"[^a-z]", "", op.lower())
    return next((kind for word, kind in _KIND_RULES if word in squashed), OTHER_COMM)


def frameworks(events: pd.DataFrame, source: str = "") -> tuple[str, ...]:
    """The frameworks the trace shows (so advice can name their knobs): PyTorch when it is a
    PyTorch profiler (Kineto) trace or holds PyTorch's op/range names (``aten::``, ``c10d::``,
    ``ProfilerStep#``...), tested once per distinct name."""
    if source == "kineto":
        return (PYTORCH,)
    names = events["name"].astype("category").cat.categories.astype(str)
    return (PYTORCH,) if bool(names.str.startswith(_PYTORCH_PREFIXES).any()) else ()


def step_range_rows(events: pd.DataFrame):
    """Boolean mask of the step ranges (ProfileStep and the framework's ProfilerStep#N rows),
    tested once per distinct name."""
    import numpy as np
    names = events["name"].astype("category")
    hit = np.asarray(names.cat.categories.astype(str).str.match(STEP_RANGE_NAME.pattern), bool)
    codes = names.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[codes] if hit.size else False, False)


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
    for col in ("name", "phase", "group"):
        frame[col] = frame[col].astype("category")
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
    ``meta["process_groups"]`` (when the source knows them): {group name: [global ranks]}, the
    members of each group named in the ``group`` column; ``meta["group_from"]`` says from what.
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
    # side tables that only analyses.profiles reads (never shipped to rank 0): "operators" (framework
    # ops with their flops / shape args), "input_dims"/"concrete_inputs" (their distinct values),
    # "memory" (allocator samples: time_ns, allocated, reserved, device_type, device_id)
    profiles: dict = field(default_factory=dict)
