"""The canonical event table: the one data model every source produces and every analysis reads.

One table per rank, one row per interval (or instant: ``end_ns == start_ns`` for marks).
Times are int64 nanoseconds on the rank's *own* clock; alignment adds an offset later and
never rewrites these columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads when a table is built, not when the constants are read
    import numpy as np

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

_INT_COLUMNS = ("rank", "start_ns", "end_ns", "device", "lane", "pid", "correlation_id", "step", "nbytes", "peer",
                "sent_bytes", "recv_bytes")
_CATEGORICAL = {"kind": KINDS, "category": CATEGORIES, "lane_kind": LANE_KINDS, "collective": COLLECTIVE_KINDS}
# collective / group / nbytes / peer describe communication rows (defaults elsewhere):
#   group  the process group's name as the trace gives it ("" = not known: the world is assumed);
#          its member ranks are in RankTrace.meta["process_groups"]
#   nbytes the message size in bytes (-1 = not known)
#   peer   the global rank at the other end of a send/recv (-1 = not known / not p2p)
#   comm_rule  on COMMUNICATION rows, the rule that made the row communication ("nccl* kernel", "DeepEP
#          kernel", "launched by a communication op", ...: sources/comm_kernels.py); "" elsewhere or unsaid
#   sent_bytes / recv_bytes  on all-to-all rows, the bytes this rank sends / receives in it, its own share
#          included (its input and output tensor: uneven MoE splits make them differ by rank); -1 = not known
COLUMNS = ("rank", "kind", "category", "name", "start_ns", "end_ns", "device", "lane",
           "lane_kind", "pid", "correlation_id", "step", "phase", "collective", "group", "nbytes", "peer",
           "comm_rule", "sent_bytes", "recv_bytes")
_DEFAULTS = {"rank": 0, "device": -1, "lane": 0, "pid": 0, "correlation_id": -1, "step": -1,
             "phase": "", "lane_kind": HOST_THREAD, "collective": "", "group": "", "nbytes": -1, "peer": -1,
             "comm_rule": "", "sent_bytes": -1, "recv_bytes": -1}

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


def factorize(values) -> tuple[np.ndarray, list]:
    """Codes (order of first appearance) and the distinct values: a dict in C finds each value's
    first position and dense codes follow without a sort (twice as fast as pandas.factorize).
    Unhashable values (JSON lists and objects) are compared as their text."""
    import numpy as np
    values = values if isinstance(values, list) else list(values)
    if values and _hashable(values[0]) and values[-1] == values[0] == values[len(values) // 2] \
            and values.count(values[0]) == len(values):  # one value (an arg no row has): one C pass, no dict
        return np.zeros(len(values), np.int64), values[:1]
    try:
        first: dict = {}
        position = np.fromiter(map(first.setdefault, values, count()), dtype=np.int64, count=len(values))
    except TypeError:
        return factorize([value if _hashable(value) else str(value) for value in values])
    own = np.flatnonzero(position == np.arange(len(values)))
    dense = np.empty(len(values), np.int64)
    dense[own] = np.arange(own.size)
    return dense[position], list(map(values.__getitem__, own.tolist()))


def _hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


@dataclass(frozen=True, eq=False)
class Texts:
    """A text column as integer codes into its distinct texts (what pandas calls a categorical):
    a test on the text runs once per distinct text and reaches the rows through the codes, so a
    200k-row column of long names never becomes a per-row string array."""

    codes: np.ndarray   # per row, the position of its text in ``texts`` (int32)
    texts: np.ndarray   # the distinct texts (object array of str)

    @classmethod
    def of(cls, values, texts=None) -> Texts:
        """From per-row texts; with ``texts`` (the allowed values, in order) codes index those and
        a value outside them is an error; else the distinct values, sorted."""
        import numpy as np
        if isinstance(values, Texts):
            if texts is None or list(values.texts) == list(texts):
                return values
            return cls.of(values.texts, texts).take(values.codes)
        codes, distinct = factorize(np.asarray(values, dtype=object).ravel().tolist())
        if not all(isinstance(value, str) for value in distinct):  # 1 and "1" are one text
            recoded, distinct = factorize([str(value) for value in distinct])
            codes = recoded[codes] if codes.size else codes
        if texts is None:
            order = sorted(range(len(distinct)), key=distinct.__getitem__)
            rank = np.empty(len(distinct), np.int64)
            rank[order] = np.arange(len(distinct))
            allowed = [distinct[i] for i in order]
        else:
            allowed = list(texts)
            position = {text: i for i, text in enumerate(allowed)}
            bad = sorted({text for text in distinct if text not in position})
            if bad:
                raise ValueError(f"values outside {tuple(allowed)}: {bad}")
            rank = np.array([position[text] for text in distinct], np.int64)
        return cls(rank[codes].astype(np.int32) if codes.size else np.zeros(0, np.int32),
                   _object_array(allowed))

    @classmethod
    def from_codes(cls, codes, texts) -> Texts:
        """From codes into ``texts`` (distinct, in that order), as a source builds them."""
        import numpy as np
        return cls(np.asarray(codes, np.int32).ravel(), _object_array(texts))

    def __len__(self) -> int:
        return self.codes.size

    def values(self) -> np.ndarray:
        """The text of every row (an object array: for reports and tests, not hot paths)."""
        return self.texts[self.codes] if self.codes.size else self.texts[:0]

    def where(self, test) -> np.ndarray:
        """Rows whose text passes ``test(text)``, called once per distinct text."""
        import numpy as np
        hit = np.fromiter((bool(test(text)) for text in self.texts), bool, self.texts.size)
        return hit[self.codes] if self.codes.size else np.zeros(0, bool)

    def eq(self, text: str) -> np.ndarray:
        """Rows whose text is ``text``."""
        import numpy as np
        found = np.flatnonzero(self.texts == text) if self.texts.size else ()
        return self.codes == found[0] if len(found) else np.zeros(self.codes.size, bool)

    def isin(self, texts) -> np.ndarray:
        """Rows whose text is one of ``texts``."""
        import numpy as np
        hit = np.isin(self.texts, np.asarray(list(texts), dtype=object))
        return hit[self.codes] if self.codes.size else np.zeros(0, bool)

    def mapped(self, function, dtype=object) -> np.ndarray:
        """``function(text)`` of every row, computed once per distinct text the rows hold: rows taken from a
        rank's column keep all its texts (40 collectives' rows: 800 names), and the function (a regex, a
        lookup) ran on each."""
        import numpy as np

        from .columns import used_codes
        if not self.codes.size:
            return np.array([], dtype=dtype)
        used, index = used_codes(self.codes, len(self.texts))
        return np.array([function(text) for text in self.texts[used].tolist()], dtype=dtype)[index]

    def take(self, rows) -> Texts:
        """These rows (an index or a mask), with the same distinct texts."""
        return Texts(self.codes[rows], self.texts)

    def sorted(self) -> Texts:
        """The same rows with the distinct texts sorted (ties of a by-name table break by it)."""
        import numpy as np
        order = np.argsort(self.texts, kind="stable")  # object array: Python comparisons, no fixed-width copy
        rank = np.empty(order.size, np.int32)
        rank[order] = np.arange(order.size)
        return Texts(rank[self.codes] if self.codes.size else self.codes, self.texts[order])

    def compact(self) -> Texts:
        """The same rows with only the texts they use, in the order of ``texts``."""
        import numpy as np

        from .columns import used_codes
        used, codes = used_codes(self.codes, len(self.texts))
        return Texts(codes.astype(np.int32), self.texts[used])


def _object_array(texts) -> np.ndarray:
    import numpy as np
    out = np.empty(len(texts), dtype=object)
    out[:] = list(texts)
    return out


class Table:
    """Equal-length numpy columns by name (text columns as :class:`Texts`): one rank's event table
    (:func:`make_events`) or a source's side table. Read-only by convention: a new table is made
    by :meth:`take` or :meth:`with_columns`, never by writing into one."""

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: dict, rows: int | None = None):
        sizes = {len(column) for column in columns.values()}
        if len(sizes) > 1:
            raise ValueError(f"columns of unequal length: { {k: len(v) for k, v in columns.items()} }")
        self._columns = dict(columns)
        self._rows = sizes.pop() if sizes else (rows or 0)

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, column: str):
        return self._columns[column]

    def __contains__(self, column: str) -> bool:
        return column in self._columns

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self._columns)

    def select(self, *names: str) -> Table:
        """These columns only."""
        return type(self)({name: self._columns[name] for name in names}, self._rows)

    def take(self, rows) -> Table:
        """These rows (an index array or a boolean mask), in that order."""
        return type(self)({name: column.take(rows) if isinstance(column, Texts) else column[rows]
                           for name, column in self._columns.items()})

    def with_columns(self, **columns) -> Table:
        """A new table with these columns added or replaced."""
        return type(self)({**self._columns, **columns})

    def equals(self, other: Table) -> bool:
        """Same columns, same rows (NaN equal to NaN; text columns by their texts)."""
        import numpy as np
        if not isinstance(other, Table) or self.columns != other.columns or len(self) != len(other):
            return False
        for name, column in self._columns.items():
            mine, theirs = column, other[name]
            if isinstance(mine, Texts) or isinstance(theirs, Texts):
                mine, theirs = (c.values() if isinstance(c, Texts) else c for c in (mine, theirs))
            if not np.array_equal(mine, theirs, equal_nan=np.asarray(mine).dtype.kind == "f"):
                return False
        return True

    def to_frame(self):
        """A pandas DataFrame of the same columns (text columns categorical): for tests and the
        report writers that want one; the analyses never call it."""
        import pandas as pd
        return pd.DataFrame({name: pd.Categorical.from_codes(column.codes, categories=column.texts)
                             if isinstance(column, Texts) else column for name, column in self._columns.items()})


class _Column:
    """One column of the event schema read as an attribute (``events.start_ns``)."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, table: Table | None, owner: type | None = None):
        return self if table is None else table._columns[self.name]


class Events(Table):
    """One rank's event table (:func:`make_events`): the columns of the schema (``COLUMNS``) read as
    attributes, so the columns an analysis reads are named in one place and a misspelt one fails where
    it is read. int64 arrays, and :class:`Texts` for the text columns."""

    __slots__ = ()

    rank: np.ndarray = _Column()
    kind: Texts = _Column()
    category: Texts = _Column()
    name: Texts = _Column()
    start_ns: np.ndarray = _Column()
    end_ns: np.ndarray = _Column()
    device: np.ndarray = _Column()
    lane: np.ndarray = _Column()
    lane_kind: Texts = _Column()
    pid: np.ndarray = _Column()
    correlation_id: np.ndarray = _Column()
    step: np.ndarray = _Column()
    phase: Texts = _Column()
    collective: Texts = _Column()
    group: Texts = _Column()
    nbytes: np.ndarray = _Column()
    peer: np.ndarray = _Column()
    comm_rule: Texts = _Column()
    sent_bytes: np.ndarray = _Column()
    recv_bytes: np.ndarray = _Column()


class Operators(Table):
    """A trace's framework operators (the Kineto reader's cpu_op rows, or emit_nvtx ranges): what the
    FLOPs count and the Operator Summary read. ``flops``: the op's own count (NaN: not recorded);
    ``dims``/``concrete``: codes into the distinct Input Dims / Concrete Inputs (-1: not decoded)."""

    __slots__ = ()

    start_ns: np.ndarray = _Column()
    end_ns: np.ndarray = _Column()
    pid: np.ndarray = _Column()
    lane: np.ndarray = _Column()
    name: Texts = _Column()
    flops: np.ndarray = _Column()
    dims: np.ndarray = _Column()
    concrete: np.ndarray = _Column()


class MemorySamples(Table):
    """A trace's allocator samples (profile_memory's [memory] instants): bytes allocated and reserved on a
    device at a time."""

    __slots__ = ()

    time_ns: np.ndarray = _Column()
    allocated: np.ndarray = _Column()
    reserved: np.ndarray = _Column()
    device_type: np.ndarray = _Column()
    device_id: np.ndarray = _Column()


def frameworks(events: Events, source: str = "") -> tuple[str, ...]:
    """The frameworks the trace shows (so advice can name their knobs): PyTorch when it is a
    PyTorch profiler (Kineto) trace or holds PyTorch's op/range names (``aten::``, ``c10d::``,
    ``ProfilerStep#``...), tested once per distinct name."""
    if source == "kineto":
        return (PYTORCH,)
    names = events.name.texts if len(events) else ()
    return (PYTORCH,) if any(str(name).startswith(_PYTORCH_PREFIXES) for name in names) else ()


def step_range_rows(events: Events):
    """Boolean mask of the step ranges (ProfileStep and the framework's ProfilerStep#N rows),
    tested once per distinct name."""
    return events.name.where(STEP_RANGE_NAME.match)


def checked_steps(start_ns, end_ns, number, owner, path) -> tuple[np.ndarray, list[str]]:
    """(mask of the step ranges to keep, warnings naming ``path``), the one check every reader
    runs on the step ranges as the file marks them (native ProfileStep rows, nsys ProfileStep NVTX
    ranges before their GPU projection, Kineto ProfilerStep#N), with each step's ``number`` and
    ``owner`` (its process: steps are compared within one process only).

    * A step of zero (or negative) length holds no time: the window is the union of the steps,
      so such steps made every figure 0 without a word. Dropped, with a warning.
    * Steps that overlap (one starts before an earlier one of its process ends; prof.step() ends
      a step where the next begins) are kept, since the file says that time was stepped: the
      window is their union, but an event in an overlap could belong to either step, so per-step
      counts can disagree across ranks. Named in a warning (up to three pairs)."""
    import numpy as np
    start_ns, end_ns = np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64)
    number, owner = np.asarray(number, np.int64), np.asarray(owner, np.int64)
    keep = end_ns > start_ns
    warnings = []
    if not keep.all():
        empty = np.flatnonzero(~keep)
        warnings.append(f"{path}: {empty.size} step range(s) of zero length dropped (e.g. step "
                        f"{int(number[empty[0]])} at {int(start_ns[empty[0]])} ns): a step without time "
                        "would make the window, and every figure, 0")
    later, earlier, by = _overlapping_steps(start_ns, end_ns, owner, np.flatnonzero(keep))
    if later.size:
        from .units import readable
        pairs = ", ".join(f"{int(number[a])} and {int(number[b])} by {readable(int(gap))}"
                          for a, b, gap in zip(earlier[:3].tolist(), later[:3].tolist(), by[:3].tolist()))
        warnings.append(f"{path}: {later.size} step range(s) overlap an earlier step (steps {pairs}; a step "
                        "should end where the next begins): kept, the window is their union, but an event in "
                        "an overlap may be counted in either step, so per-step figures there are unreliable")
    return keep, warnings


def _overlapping_steps(start_ns, end_ns, owner, rows) -> tuple:
    """(later step rows, the earlier step each overlaps, overlap ns) among ``rows``, per owner in
    start order: a step overlaps when it starts before the latest end of the steps before it."""
    import numpy as np
    later, earlier, by = [], [], []
    for key in np.unique(owner[rows]):  # one pass per process (a handful), not per step
        mine = rows[owner[rows] == key]
        mine = mine[np.argsort(start_ns[mine], kind="stable")]
        start, end = start_ns[mine], end_ns[mine]
        reach = np.maximum.accumulate(end)  # latest end so far
        holder = np.maximum.accumulate(np.where(end == reach, np.arange(end.size), 0))  # the step reaching it
        hit = np.flatnonzero(start[1:] < reach[:-1]) + 1
        later.append(mine[hit])
        earlier.append(mine[holder[hit - 1]])
        by.append(np.minimum(end[hit], reach[hit - 1]) - start[hit])
    empty = np.empty(0, np.int64)
    return tuple(np.concatenate(parts) if parts else empty for parts in (later, earlier, by))


def distinct_texts(values) -> tuple:
    """(sorted distinct texts, code of each row): what ``np.unique(values.astype(str),
    return_inverse=True)`` gives, but hashing Python strings: a fixed-width unicode array costs
    rows x the longest text (one 200k-character name in 2,000 rows asked for 1.6 GB)."""
    import numpy as np
    texts = values.sorted() if isinstance(values, Texts) else Texts.of(values)
    used = texts.compact()
    return used.texts, np.asarray(used.codes, np.int64)


def make_events(**columns) -> Events:
    """Build a validated event table from column arrays; missing optional columns get defaults.

    Required: kind, category, name, start_ns, end_ns (arrays of equal length; kind/category
    may be scalars). Text columns may be given as :class:`Texts` or as texts. Rows come out
    sorted by start_ns (stable) so analyses can rely on it.
    """
    import numpy as np
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
        if not isinstance(value, Texts) and np.ndim(value) == 0:
            value = np.full(n, value, dtype=object if isinstance(value, str) else np.int64)
        if col in _INT_COLUMNS:
            data[col] = np.asarray(value).astype(np.int64, copy=False)
            continue
        try:
            data[col] = Texts.of(value, _CATEGORICAL.get(col))
        except ValueError as error:
            raise ValueError(f"column {col!r} has {error}") from None
    if (data["end_ns"] < data["start_ns"]).any():
        raise ValueError("event table has rows with end_ns < start_ns")
    order = np.argsort(data["start_ns"], kind="stable")
    if order.size and (order[1:] < order[:-1]).any():
        return Events(data).take(order)
    return Events(data)


def empty_events() -> Events:
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

    events: Events
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
