"""Reader of Nsight Systems exports (``nsys export --type sqlite``): one ``RankTrace`` per profiled
process that ran CUDA work (or, in a report without any, per process with NVTX ranges).

What this reader decides, and why (see ``data/nsys/SCHEMA.md`` for the schema facts):

* **Tables are optional.** Newer nsys creates only tables that have data, so a missing kernel,
  memcpy, memset, runtime or NVTX table means "no such events". The metadata table is
  ``META_DATA_EXPORT`` (>= 2024.5), ``EXPORT_META_DATA`` (2022.2) or absent (2020). Only the
  columns read here must exist; extra columns (newer versions, user ``ALTER TABLE``) are ignored.
* **Processes are ranks.** One report may hold several ranks (torchrun under one nsys), so rows
  are split by process: ``pid = (globalTid >> 24) & 0xFFFFFF``. Stream and correlation ids repeat
  across processes, so a lane is (pid, device, stream) and a kernel joins its launching runtime
  call on (pid, correlationId). Processes without CUDA work in a report that has some (data
  loader workers, the torchrun agent) are not ranks; they are named in a warning.
* **Rank numbers.** A report with one rank process takes its rank from the captured environment
  (``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``SLURM_PROCID``, in that order; from
  ``META_DATA_CAPTURE`` rows ``KEY="value"``, else the ``DeviceEnvironment`` of
  ``TARGET_INFO_SYSTEM_ENV``), else from an NVTX thread name ``MPI Rank N`` (2022.2 MPI tracing),
  else it is left ``None`` so the merge numbers it by sorted file name. In a report with several
  rank processes the captured environment is the launcher's (``PROCESS_0`` is torchrun) and is
  not used: ranks are left ``None`` and the traces are returned ordered by (device, pid), so the
  merge numbers them in device order (node-major across several such reports, as torchrun does).
* **Names and categories.** Kernel name = ``StringIds[shortName]`` (else ``demangledName``);
  COMMUNICATION when it starts with one of ``communication.kernel_prefixes``, else COMPUTE.
  memcpy/memset are MEMORY. NVTX push/pop and start/end ranges (event types 59, 60 and their
  NVTXT twins 70, 71) are named ``COALESCE(text, StringIds[textId])``; their domain comes from the
  event-type-75 row with the same ``domainId`` in the same process (missing rows = unnamed domain).
  Domain ``NCCL`` and ``MPI`` ranges are host-side communication calls (kind ``comm_op``,
  COMMUNICATION; ``MPI_Init``/``MPI_Finalize`` are USER). Domain ``distprof`` ranges are PHASEs,
  except NVTX category 2 = COMMUNICATION and 3 = USER. Ranges named ``ProfileStep#N`` or
  ``ProfilerStep#N`` (any domain) are the steps: name ``ProfileStep``, PHASE, ``step`` = N. All
  other ranges are USER. distprof's own profiler marks steps with ranges named plain
  ``ProfileStep`` (in its domain), from step 0: such ranges are numbered in start order within
  their process. Marks (type 34) are instants (``end_ns == start_ns``).
* **Step and phase of GPU work.** A GPU op belongs to the innermost phase range (and the step
  range) on the thread of its launching runtime call that contains that call, as the
  ``nvtx_gpu_proj`` recipes do; NVTX rows and launch calls get the innermost phase and step
  around them on their own thread (a phase range is its own phase). On the GPU, a step is the
  span of the GPU ops launched inside its CPU range (as the PyTorch profiler and HTA show it),
  so ProfileStep rows carry those GPU-projected bounds; a step that launched nothing keeps its
  CPU bounds. Only runtime calls
  that launched a GPU op are kept (kind ``runtime``), to keep memory near the GPU op count.
  Host rows (runtime calls, NVTX) have ``device`` -1 and ``lane`` = thread id. The events'
  ``rank`` column is the trace's rank, or -1 while it is unknown.
* **Collective, bytes, group, peer.** Communication rows get ``collective`` (events.COLLECTIVE_KINDS):
  NVTX comm ranges from their name (``MPI_Allreduce`` -> allreduce); an NCCL kernel from the op
  that launched it when a range around its launch call names one (the innermost PyTorch
  ``nccl:*`` range, else the innermost NCCL API range ``ncclAllReduce``/..., else the ops of the
  ``ncclGroupStart``..``ncclGroupEnd`` group it was launched from when they are all of one kind), else
  from its own name: a SendRecv kernel under ``nccl:all_to_all`` is an alltoall. ``nbytes``: the
  int64 NVTX payload of distprof's own comm ranges (``distprof.comm(..., nbytes=)``). Unknown and
  left "" / -1: NCCL's extended payloads (message size, communicator) sit in ``binaryData`` only
  with ``--include-blobs``, in an encoding no export here shows; MPI byte counts and peers, which
  nsys writes in MPI tables no real export here has. ``meta["hostname"]`` is the profiled host.
* **Clocks.** Events stay on the file's clock (ns since session start, or UTC when the export
  was normalized: ``EXPORT_PARAM_TIME_NORMALIZE='true'`` or values above 1e18).
  ``clock_offset_ns`` = ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` puts them on UTC; 0 when
  already normalized, or when the table is absent (with a warning: such a file cannot be
  aligned with others in absolute time). A negative time is therefore corrupt: such GPU ops,
  launch calls and NVTX rows are dropped with a warning naming the file and the counts (a kernel
  whose start lost its sign spanned 0 and counted 18 s of computation where the file has 10 ms).
* **Run.** ``meta["run"]`` (sources.run_identity): the process's span on that UTC clock from the
  session start, and the launcher's job ids in the captured environment (``TORCHELASTIC_RUN_ID``,
  ``SLURM_JOB_ID``.``SLURM_STEP_ID``, ...): the merge refuses files of two runs.
* **Steps.** Step ranges as the file marks them (before their GPU projection) go through
  ``events.checked_steps``, as every reader's do: a step of zero length is dropped, steps that
  overlap are named in a warning.
* **Speed.** Integer columns are packed by SQLite (one ``group_concat`` per column and chunk of
  rows) and parsed by numpy, in a few threads (sqlite3 releases the GIL while it steps), which
  avoids one Python tuple per row. Nothing loops in Python per event.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import events as ev
from ..columns import unique_rows
from ..events import RankTrace, SourceError
from ..joins import innermost_enclosing, launch_join, span_of_groups
from . import comm_kernels, launcher_ids, plausible_span, read_only_uri, run_identity

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MODE = b"\x02\x02"                 # header bytes 18-19 of a WAL-mode file (nsys exports: 1, 1)
DISTPROF_TABLES = frozenset({"distprof_meta", "distprof_names", "distprof_ranges", "distprof_threads",
                             "distprof_clock"})
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
SESSION_START_TABLE = "TARGET_INFO_SESSION_START_TIME"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # >= 2024.5, 2022.2
NSYS_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE, NVTX_TABLE, STRINGS_TABLE,
               SESSION_START_TABLE, *META_TABLES)

RANK_ENV_KEYS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
NVTX_MARK, NVTX_THREAD_NAME, NVTX_DOMAIN_CREATE = 34, 39, 75
NVTX_RANGE_TYPES = (59, 60, 70, 71)   # push/pop, start/end, and their NVTXT variants
LEGACY_RUNTIME_CLASS = 67             # 2022.2 writes each CUDA call twice; this is the extra copy
DISTPROF_DOMAIN = "distprof"
DISTPROF_CATEGORY = {2: ev.COMMUNICATION, 3: ev.USER}   # NVTX category -> category; else PHASE
COMMUNICATION_DOMAINS = ("NCCL", "MPI")
NON_COMMUNICATION_CALLS = ("MPI_Init", "MPI_Init_thread", "MPI_Finalize")
STEP_NAME = re.compile(r"^Profiler?Step#(\d+)$")
MPI_RANK_THREAD = re.compile(r"^MPI Rank (\d+)$")
NCCL_DOMAIN = "NCCL"
TORCH_OP_PREFIX = "nccl:"             # PyTorch's record_function range around a ProcessGroupNCCL op
NCCL_GROUP_START, NCCL_GROUP_END = "ncclGroupStart", "ncclGroupEnd"
NORMALIZED_NS = 10**18                # timestamps above this are already UTC epoch ns
MEMCPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device",
                12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
MEMSET_NAME = "[CUDA memset]"
UNNAMED = "(unnamed)"
ACTIVITY_MARK = "[recorded activity]"  # instants at the first and last recorded event of a process
MPI_TABLES = ("MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS")
# (table, id column) of everything a process records: the span of these is the rank's span
ACTIVITY_TABLES = ((KERNEL_TABLE, "globalPid"), (MEMCPY_TABLE, "globalPid"), (MEMSET_TABLE, "globalPid"),
                   (RUNTIME_TABLE, "globalTid"), (NVTX_TABLE, "globalTid"), ("OSRT_API", "globalTid"),
                   *((table, "globalTid") for table in MPI_TABLES))

NVTX_ACTIVITY_TYPES = (34, 59, 60)     # mark, push/pop range, start/end range
CHUNK_ROWS = 1 << 16                  # rows packed per query: bounds the size of one packed string
MAX_WORKERS = 4
MMAP_BYTES = 1 << 31                  # SQLite caps this at its compile-time maximum (2 GB by default)
MAX_UTC_NS = 2 ** 62                  # year 2116: a session start beyond is corrupt (and would overflow)
TEXT_SEPARATOR = "\x1f"               # NVTX and StringIds texts are C strings: no control chars expected
_PID_MASK = 0xFFFFFF

_KIND_CODE = {kind: code for code, kind in enumerate(ev.KINDS)}
_CATEGORY_CODE = {category: code for code, category in enumerate(ev.CATEGORIES)}
_LANE_KIND_CODE = {lane_kind: code for code, lane_kind in enumerate(ev.LANE_KINDS)}
_COLLECTIVE_CODE = {kind: code for code, kind in enumerate(ev.COLLECTIVE_KINDS)}  # 0 = ""


def read(path: str | Path, config: dict) -> list[RankTrace]:
    """Read one nsys SQLite export; one RankTrace per rank process, ordered by (device, pid).

    Raises SourceError (one line naming the file) for anything that is not a readable export
    with CUDA activity or NVTX ranges.
    """
    path = Path(path)
    _check_header(path)
    try:
        with _Export(path) as export:
            return _read_export(export, config)
    except sqlite3.Error as error:
        raise _database_error(path, error) from None


def read_kernel_table(path: str | Path, config: dict) -> dict:
    """Only the kernel table, as columns (start, end, device, lane, pid, correlation_id, name
    codes into ``names``, category codes): the ingest path that benchmarks/nsys_ingest.py times."""
    path = Path(path)
    _check_header(path)
    try:
        with _Export(path) as export:
            return _read_kernels(export, config)
    except sqlite3.Error as error:
        raise _database_error(path, error) from None


# -- file access ------------------------------------------------------------------------------

def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _database_error(path: Path, error: sqlite3.Error) -> SourceError:
    text = _one_line(error)
    if isinstance(error, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
        return SourceError(f"{path}: corrupt or truncated SQLite file ({text})")
    return SourceError(f"{path}: cannot read this nsys export ({text})")


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if head != SQLITE_MAGIC:
        hint = (" (export the report first: nsys export --type sqlite)"
                if path.suffix in (".nsys-rep", ".qdrep") else "")
        raise SourceError(f"{path}: not a SQLite file, so not an nsys SQLite export{hint}")


class _Export:
    """An open export: which tables and columns it has, and fast columnar reads of them."""

    def __init__(self, path: Path):
        self.path = path
        self.comm_rules: list[str] = [RULE_NVTX]  # comm_rule texts of the kernels (_read_kernels sets them)
        self._opened = contextlib.ExitStack()  # read_only_uri: nothing is made beside the export
        self._uri = self._opened.enter_context(read_only_uri(path))
        try:
            self.connection = self._opened.enter_context(contextlib.closing(self._connect()))
            self.tables = {row[0] for row in self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except BaseException:
            self._opened.close()  # a corrupt file: its connection closed here, no __exit__ follows
            raise
        self._local = threading.local()
        self._worker_connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._columns: dict[str, set[str]] = {}
        self.missing_strings: set[int] = set()  # StringIds ids named by a placeholder (warned once)

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        connection.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")  # pages read in place, not copied
        return connection

    def __enter__(self) -> _Export:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        for connection in self._worker_connections:
            connection.close()
        self._opened.close()  # the main connection, then read_only_uri's clean-up

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = ({row[1] for row in self.connection.execute(f"PRAGMA table_info({table})")}
                                    if table in self.tables else set())
        return self._columns[table]

    def require(self, table: str, *names: str) -> None:
        """A table that exists must have the columns every nsys version gave it."""
        missing = [name for name in names if name not in self.columns(table)]
        if table in self.tables and missing:
            raise SourceError(f"{self.path}: {table} lacks column(s) {', '.join(missing)}; not an nsys export layout")

    def column(self, table: str, name: str, default: str, alias: str = "t") -> str:
        """SQL for a column that may be absent or NULL in some versions."""
        return f"IFNULL({alias}.{name}, {default})" if name in self.columns(table) else default

    def _thread_connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
            with self._lock:
                self._worker_connections.append(connection)
        return connection

    def scan(self, table: str, int_exprs: list[str], text_expr: str | None = None, join: str = "",
             where: str = "") -> tuple[list[np.ndarray], np.ndarray | None, np.ndarray | None]:
        """Integer columns (SQL expressions over alias ``t``) of every row, in rowid order, and
        optionally one text column as (codes, distinct values).

        Rows are read in rowid chunks; per chunk SQLite returns one comma-joined string per
        column, which numpy parses in C. Every expression must be non-NULL (wrap with IFNULL).
        """
        empty = [np.empty(0, np.int64) for _ in int_exprs]
        no_text = (np.empty(0, np.int64), np.empty(0, object)) if text_expr else (None, None)
        if table not in self.tables:
            return empty, *no_text
        low, high = self.connection.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
        if low is None:
            return empty, *no_text
        aggregates = [f"group_concat({expr})" for expr in int_exprs]
        if text_expr:
            aggregates.append(f"group_concat({text_expr}, char({ord(TEXT_SEPARATOR)}))")
        condition = f" AND ({where})" if where else ""
        base = f"FROM {table} AS t {join} WHERE t.rowid > ? AND t.rowid <= ?{condition}"
        sql = f"SELECT {', '.join(aggregates)}, count(*) {base}"
        text_sql = f"SELECT {text_expr} {base} ORDER BY t.rowid" if text_expr else ""
        bounds = [(start, min(start + CHUNK_ROWS, high)) for start in range(low - 1, high, CHUNK_ROWS)]

        def run(bound: tuple[int, int], connection: sqlite3.Connection | None = None):
            connection = connection or self._thread_connection()
            row = connection.execute(sql, bound).fetchone()
            return self._parse_chunk(table, int_exprs, row, text_sql, bound, connection)

        workers = min(MAX_WORKERS, os.cpu_count() or 1)
        if workers > 1 and len(bounds) > 1:  # sqlite3 releases the GIL while SQLite runs a query
            if self._pool is None:
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="distprof-nsys")
            chunks = [chunk for chunk in self._pool.map(run, bounds) if chunk is not None]
        else:
            chunks = [chunk for bound in bounds if (chunk := run(bound, self.connection)) is not None]
        if not chunks:
            return empty, *no_text
        ints = [np.concatenate([chunk[0][i] for chunk in chunks]) for i in range(len(int_exprs))]
        if not text_expr:
            return ints, None, None
        # distinct texts of all chunks, then one factorize of those: codes stay vectorized
        offsets = np.cumsum([0] + [len(chunk[2]) for chunk in chunks[:-1]])
        all_uniques = np.concatenate([chunk[2] for chunk in chunks])
        remap, uniques = ev.factorize(all_uniques)
        codes = np.concatenate([remap[offset + chunk[1]] for offset, chunk in zip(offsets, chunks)])
        return ints, codes.astype(np.int64), np.asarray(uniques, dtype=object)

    def _parse_chunk(self, table, int_exprs, row, text_sql, bound, connection):
        count = row[-1]
        if not count:
            return None
        ints = []
        for expr, packed in zip(int_exprs, row):
            try:  # REAL or TEXT in an integer column stops the parse: a ValueError
                values = np.fromstring(packed or "", dtype=np.int64, sep=",")
            except ValueError:
                values = np.empty(0, np.int64)
            if values.size != count:
                raise SourceError(f"{self.path}: {table} has non-integer or NULL values in {expr}")
            ints.append(values)
        if not text_sql:
            return ints, None, None
        texts = row[len(int_exprs)].split(TEXT_SEPARATOR)
        if len(texts) != count:  # a text containing the separator: fetch this chunk's texts as rows
            texts = [text for (text,) in connection.execute(text_sql, bound)]
        codes, uniques = ev.factorize(texts)
        return ints, codes, np.asarray(uniques, dtype=object)

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values of the given ids (ids without a row are left out)."""
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        found: dict[int, str] = {}
        if STRINGS_TABLE not in self.tables or not ids.size:
            return found
        for start in range(0, ids.size, 10_000):  # one query per batch of ids
            batch = ",".join(str(int(i)) for i in ids[start:start + 10_000])
            found.update(self.connection.execute(f"SELECT id, value FROM {STRINGS_TABLE} WHERE id IN ({batch})"))
        return found

    def rows(self, sql: str) -> list[tuple]:
        return self.connection.execute(sql).fetchall()


# -- reading the parts of an export -------------------------------------------------------------

def _metadata(export: _Export) -> dict[str, str]:
    table = next((t for t in META_TABLES if t in export.tables), None)
    return dict(export.rows(f"SELECT name, value FROM {table}")) if table else {}


def _captured_env(export: _Export) -> dict[str, str]:
    """Environment of the profiled launch: META_DATA_CAPTURE rows ``KEY="value"`` (>= 2024.5),
    over the ``DeviceEnvironment`` of TARGET_INFO_SYSTEM_ENV (NUL-separated in 2022.2, ';' later)."""
    env: dict[str, str] = {}
    if {"name", "value"} <= export.columns("TARGET_INFO_SYSTEM_ENV"):
        for (value,) in export.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"):
            text = str(value or "")
            for item in text.split("\0") if "\0" in text else text.split(";"):
                key, sep, val = item.partition("=")
                if sep:
                    env[key.strip()] = val
    if {"name", "value"} <= export.columns("META_DATA_CAPTURE"):
        for (item,) in export.rows("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%:ENVIRONMENT_VARIABLE'"):
            key, sep, val = str(item or "").partition("=")
            if sep:
                env[key.strip()] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
    return env


def _hostname(export: _Export, env: dict[str, str]) -> str | None:
    """The profiled host's name (TARGET_INFO_SYSTEM_ENV ``Hostname``, else the captured HOSTNAME):
    ranks on one host share its clock (align.align)."""
    if {"name", "value"} <= export.columns("TARGET_INFO_SYSTEM_ENV"):
        for (value,) in export.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"):
            if isinstance(value, bytes):  # some exports store it as a BLOB
                value = value.decode("utf-8", "replace")
            if str(value or "").strip():
                return str(value).strip()
    return env.get("HOSTNAME", "").strip() or None


def _env_rank(env: dict[str, str]) -> tuple[str, int] | None:
    for key in RANK_ENV_KEYS:
        value = env.get(key, "").strip()
        if value.lstrip("-").isdigit():
            return key, int(value)
    return None


def _session_start(export: _Export) -> int | None:
    if "utcEpochNs" not in export.columns(SESSION_START_TABLE):
        return None
    row = export.connection.execute(f"SELECT utcEpochNs FROM {SESSION_START_TABLE} "
                                    "WHERE utcEpochNs IS NOT NULL LIMIT 1").fetchone()
    if not row:
        return None
    if not isinstance(row[0], int) or not 0 <= row[0] < MAX_UTC_NS:
        raise SourceError(f"{export.path}: {SESSION_START_TABLE}.utcEpochNs {str(row[0])[:40]!r} is not "
                          "a UTC time in ns")
    return row[0]


def unknown_string(export: _Export, string_id: int) -> str:
    """Placeholder name of a StringIds id without a row: the event stays, its name says why."""
    export.missing_strings.add(int(string_id))
    return f"<unknown string {int(string_id)}>"


def _gpu_columns(export: _Export, table: str, extra: str) -> list[np.ndarray]:
    """start, end, device, stream, correlation id, pid and one table-specific column."""
    export.require(table, "start", "end", "deviceId", "streamId")
    start, end, device, stream, correlation, global_pid, last = export.scan(table, [
        "t.start", "t.end", "t.deviceId", "t.streamId", export.column(table, "correlationId", "-1"),
        export.column(table, "globalPid", "0"), extra])[0]
    return [start, end, device, stream, correlation, (global_pid >> 24) & _PID_MASK, last]


def _read_kernels(export: _Export, config: dict) -> dict:
    """The kernel table as columns: names resolved (shortName, else demangledName) and
    classified once per distinct name (comm_kernels: NCCL prefixes, the known families, the user's
    patterns), then spread to rows by code; ``comm_rule`` codes into ``export.comm_rules``."""
    export.require(KERNEL_TABLE, "start", "end", "deviceId", "streamId", "shortName")
    start, end, device, stream, correlation, pid, short_ids = _gpu_columns(export, KERNEL_TABLE, "t.shortName")
    name_codes, distinct_ids = ev.factorize(short_ids.tolist())
    found = export.strings(distinct_ids)
    missing = [int(i) for i in distinct_ids if int(i) not in found]
    if missing and "demangledName" in export.columns(KERNEL_TABLE):
        pairs = dict(export.rows(f"SELECT shortName, min(demangledName) FROM {KERNEL_TABLE} "
                                 f"WHERE shortName IN ({','.join(map(str, missing))}) GROUP BY shortName"))
        demangled = export.strings(np.array(list(pairs.values()), dtype=np.int64))
        found.update({short: demangled[long] for short, long in pairs.items() if long in demangled})
    names = np.array([found.get(int(i)) or unknown_string(export, i) for i in distinct_ids], dtype=object)
    known = comm_kernels.classify(_full_names(export, distinct_ids, names), config)
    is_comm = known.is_comm
    category = np.where(is_comm, _CATEGORY_CODE[ev.COMMUNICATION], _CATEGORY_CODE[ev.COMPUTE]).astype(np.int8)
    collective = np.where(known.kind_code > 0, known.kind_code, _collective_codes(names, is_comm)).astype(np.int8)
    export.comm_rules = [RULE_NVTX, *sorted(set(known.rule[is_comm].tolist()))]
    position = {text: code for code, text in enumerate(export.comm_rules)}
    rule_of_name = np.array([position[rule] if comm else -1 for rule, comm in zip(known.rule, is_comm)], np.int64)
    return {"kind": np.full(start.size, _KIND_CODE[ev.KERNEL], np.int8), "category": category[name_codes],
            "collective": collective[name_codes], "comm_rule": rule_of_name[name_codes].astype(np.int16),
            "name": name_codes.astype(np.int64), "names": names, "start": start, "end": end, "device": device,
            "lane": stream, "pid": pid, "correlation_id": correlation}


def _full_names(export: _Export, short_ids: np.ndarray, names: np.ndarray) -> list[str]:
    """Per distinct shortName, the name to classify: its demangled name where it has one alone (a
    shortName is the bare function, "dispatch" for DeepEP's deep_ep::internode::dispatch<...>); the
    shortName where it has none or several (two libraries' "dispatch": no family decides for both)."""
    if "demangledName" not in export.columns(KERNEL_TABLE) or not len(short_ids):
        return names.tolist()
    pairs = export.rows(f"SELECT shortName, min(demangledName), count(DISTINCT demangledName) FROM {KERNEL_TABLE} "
                        "GROUP BY shortName")
    alone = {short: long for short, long, count in pairs if count == 1 and long is not None}
    text = export.strings(np.array(sorted(set(alone.values())), dtype=np.int64))
    return [text.get(alone.get(int(short), -1)) or name for short, name in zip(list(short_ids), names.tolist())]


def _read_memory_ops(export: _Export) -> list[dict]:
    parts = []
    if MEMCPY_TABLE in export.tables:
        copy_kind = export.column(MEMCPY_TABLE, "copyKind", "0")
        start, end, device, stream, correlation, pid, kinds = _gpu_columns(export, MEMCPY_TABLE, copy_kind)
        codes, distinct = ev.factorize(kinds.tolist())
        labels = [MEMCPY_KINDS.get(int(k), f"kind {int(k)}") for k in distinct]
        names = np.array([f"[CUDA memcpy {label}]" for label in labels], dtype=object)
        parts.append({"kind": np.full(start.size, _KIND_CODE[ev.MEMCPY], np.int8), "name": codes.astype(np.int64),
                      "names": names, "start": start, "end": end, "device": device, "lane": stream, "pid": pid,
                      "correlation_id": correlation})
    if MEMSET_TABLE in export.tables:
        start, end, device, stream, correlation, pid, _ = _gpu_columns(export, MEMSET_TABLE, "0")
        parts.append({"kind": np.full(start.size, _KIND_CODE[ev.MEMSET], np.int8),
                      "name": np.zeros(start.size, np.int64), "names": np.array([MEMSET_NAME], dtype=object),
                      "start": start, "end": end, "device": device, "lane": stream, "pid": pid,
                      "correlation_id": correlation})
    for part in parts:
        part["category"] = np.full(part["start"].size, _CATEGORY_CODE[ev.MEMORY], np.int8)
    return parts


_OPTIONAL = {"collective": (0, np.int8), "nbytes": (-1, np.int64), "comm_rule": (-1, np.int16)}  # only some parts
RULE_NVTX = "NCCL/MPI NVTX range"  # comm_rule of the NVTX ranges that are communication


def _column_of(part: dict, key: str) -> np.ndarray:
    if key in part or key not in _OPTIONAL:
        return part[key]
    fill, dtype = _OPTIONAL[key]
    return np.full(part["start"].size, fill, dtype)


def _concat_parts(parts: list[dict]) -> dict:
    """Concatenate column dicts whose ``name`` codes index their own ``names``: one name table."""
    offsets = np.cumsum([0] + [len(p["names"]) for p in parts[:-1]])
    all_names = np.concatenate([p["names"] for p in parts]) if parts else np.empty(0, object)
    remap, names = ev.factorize(all_names)
    merged = {"names": np.asarray(names, dtype=object)}
    keys = list(parts[0]) + [key for key in _OPTIONAL if key not in parts[0] and any(key in p for p in parts)]
    for key in keys if parts else ():
        if key == "names":
            continue
        values = [remap[offset + p[key]] if key == "name" else _column_of(p, key) for offset, p in zip(offsets, parts)]
        merged[key] = np.concatenate(values)
    return merged


def _collective_codes(names: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Per distinct name: the code of its collective kind where ``chosen``, else 0 ("")."""
    return np.array([_COLLECTIVE_CODE[ev.collective_kind(name)] if pick else 0
                     for name, pick in zip(names, chosen)], dtype=np.int8)


def _launch_calls(export: _Export, gpu: dict) -> tuple[dict, np.ndarray]:
    """The runtime calls that launched GPU ops (one per process and correlation id; 2022.2's
    duplicate eventClass-67 copy is dropped), and for each GPU op the index of its call or -1."""
    export.require(RUNTIME_TABLE, "start", "end")
    start, end, global_tid, correlation, event_class, name_ids = export.scan(RUNTIME_TABLE, [
        "t.start", "t.end", export.column(RUNTIME_TABLE, "globalTid", "0"),
        export.column(RUNTIME_TABLE, "correlationId", "-1"), export.column(RUNTIME_TABLE, "eventClass", "0"),
        export.column(RUNTIME_TABLE, "nameId", "0")])[0]
    # per (pid, correlation id) one call: the preferred (non-legacy) copy of a duplicated one
    launch_row = launch_join(gpu["correlation_id"], correlation, gpu["pid"], (global_tid >> 24) & _PID_MASK,
                             call_rank=(event_class == LEGACY_RUNTIME_CLASS).astype(np.int64))
    used = np.zeros(start.size, dtype=bool)
    used[launch_row[launch_row >= 0]] = True
    used_rows = np.flatnonzero(used)
    call_index = np.cumsum(used) - 1                      # runtime row -> index among used rows
    op_launch = np.where(launch_row >= 0, call_index[np.maximum(launch_row, 0)], -1) if start.size else launch_row

    name_codes, distinct_ids = ev.factorize(name_ids[used_rows].tolist())
    found = export.strings(distinct_ids)
    names = np.array([found.get(int(i)) or unknown_string(export, i) for i in distinct_ids], dtype=object)
    calls = {"kind": np.full(used_rows.size, _KIND_CODE[ev.RUNTIME], np.int8),
             "category": np.full(used_rows.size, _CATEGORY_CODE[ev.RUNTIME_CAT], np.int8),
             "name": name_codes.astype(np.int64), "names": names, "start": start[used_rows], "end": end[used_rows],
             "device": np.full(used_rows.size, -1, np.int64), "thread": global_tid[used_rows],
             "pid": (global_tid[used_rows] >> 24) & _PID_MASK, "correlation_id": correlation[used_rows]}
    return calls, op_launch


def _read_nvtx(export: _Export) -> dict:
    """NVTX ranges and marks with their domain name, classified into kind/category/name/step."""
    table = NVTX_TABLE
    export.require(table, "start", "eventType")
    has_strings = STRINGS_TABLE in export.tables and "textId" in export.columns(table)
    text = export.column(table, "text", "NULL")
    text_expr = (f"COALESCE({text}, s.value, '<unknown string ' || t.textId || '>', '')" if has_strings
                 else f"COALESCE({text}, '')")
    join = f"LEFT JOIN {STRINGS_TABLE} AS s ON s.id = t.textId" if has_strings else ""
    types = ",".join(map(str, (NVTX_MARK, *NVTX_RANGE_TYPES)))
    (start, end, event_type, global_tid, domain_id, nvtx_category, payload), name_codes, names = export.scan(
        table, ["t.start", "IFNULL(t.end, t.start)", "t.eventType", export.column(table, "globalTid", "0"),
                export.column(table, "domainId", "0"), export.column(table, "category", "-1"),
                export.column(table, "int64Value", "-1")],
        text_expr=text_expr, join=join, where=f"t.eventType IN ({types})")
    names = np.where(names == "", UNNAMED, names) if names.size else names
    export.missing_strings.update(int(n[16:-1]) for n in names if n.startswith("<unknown string "))
    pid = (global_tid >> 24) & _PID_MASK
    is_mark = event_type == NVTX_MARK
    end = np.where(is_mark, start, end)

    # domain of each row: the type-75 row with the same domainId in the same process
    domain_rows = export.rows(f"SELECT IFNULL(globalTid, 0), IFNULL(domainId, 0), text FROM {table} "
                              f"WHERE eventType = {NVTX_DOMAIN_CREATE}") if table in export.tables else []
    domain_names = np.array([""] + [str(name or "") for *_, name in domain_rows], dtype=object)
    domain_keys = np.array([(((gtid >> 24) & _PID_MASK) << 32) | (did & 0xFFFFFFFF) for gtid, did, _ in domain_rows],
                           dtype=np.int64)
    key_order = np.argsort(domain_keys, kind="stable")
    sorted_keys = domain_keys[key_order]
    row_key = (pid << 32) | (domain_id & 0xFFFFFFFF)
    position = np.minimum(np.searchsorted(sorted_keys, row_key), max(sorted_keys.size - 1, 0))
    known = (sorted_keys.size > 0) & (domain_id != 0)
    if sorted_keys.size:
        known &= sorted_keys[position] == row_key
    domain_code = np.where(known, 1 + key_order[position] if sorted_keys.size else 0, 0)
    domain = domain_names[domain_code] if start.size else np.empty(0, object)

    # per distinct name, then spread to rows
    step_of_name = np.array([int(found.group(1)) if (found := STEP_NAME.search(name)) else -1 for name in names],
                            np.int64)
    setup_call = np.isin(names, NON_COMMUNICATION_CALLS)
    category = np.full(start.size, _CATEGORY_CODE[ev.USER], np.int8)
    in_comm_domain = np.isin(domain, COMMUNICATION_DOMAINS) & ~setup_call[name_codes]
    category[in_comm_domain] = _CATEGORY_CODE[ev.COMMUNICATION]
    in_distprof = domain == DISTPROF_DOMAIN
    category[in_distprof] = _CATEGORY_CODE[ev.PHASE]
    for nvtx_value, mapped in DISTPROF_CATEGORY.items():
        category[in_distprof & (nvtx_category == nvtx_value)] = _CATEGORY_CODE[mapped]
    step = step_of_name[name_codes] if start.size else np.empty(0, np.int64)
    # distprof's profiler names its step ranges plain "ProfileStep", one per step from step 0:
    # number them in start order within their process (in any domain: the analyses take every
    # range of that name as a step)
    own_step = np.isin(names, [ev.PROFILE_STEP])[name_codes] if start.size else is_mark
    own_rows = np.flatnonzero(own_step & ~is_mark)
    own_rows = own_rows[np.lexsort((start[own_rows], pid[own_rows]))]
    step[own_rows] = np.arange(own_rows.size) - np.searchsorted(pid[own_rows], pid[own_rows], side="left")
    step = np.where(is_mark, -1, step)
    is_step = step >= 0
    category[is_step] = _CATEGORY_CODE[ev.PHASE]
    names = np.append(names, ev.PROFILE_STEP)
    name_codes = np.where(is_step, names.size - 1, name_codes)
    kind = np.where(is_mark, _KIND_CODE[ev.MARK],
                    np.where(category == _CATEGORY_CODE[ev.COMMUNICATION], _KIND_CODE[ev.COMM_OP],
                             _KIND_CODE[ev.RANGE])).astype(np.int8)
    domain_counts = _domain_counts(pid, np.where(domain == "", "(default)", domain))
    return {"kind": kind, "category": category, "name": name_codes, "names": names, "start": start, "end": end,
            "device": np.full(start.size, -1, np.int64), "thread": global_tid, "pid": pid,
            "correlation_id": np.full(start.size, -1, np.int64), "step": step, "is_step": is_step,
            "domain_counts": domain_counts,
            **_nvtx_comm_columns(names, name_codes, domain == NCCL_DOMAIN, kind, in_distprof, payload)}


def _nvtx_comm_columns(names: np.ndarray, name_codes: np.ndarray, in_nccl: np.ndarray, kind: np.ndarray,
                       in_distprof: np.ndarray, payload: np.ndarray) -> dict:
    """Per NVTX row: ``collective`` (comm_op rows, by name), ``nbytes`` (distprof comm ranges: their
    int64 payload), and for the kernel attribution the op a range names (``op_kind``: a code, 0 =
    none; ``op_source`` 2 = PyTorch ``nccl:*``, 1 = NCCL API op) and NCCL group starts/ends."""
    is_comm = kind == _KIND_CODE[ev.COMM_OP]
    by_name = _collective_codes(names, np.ones(names.size, bool))  # per distinct name, then spread
    row_kind = by_name[name_codes]
    torch_op = np.array([str(n).startswith(TORCH_OP_PREFIX) for n in names], bool)[name_codes]
    is_range = kind != _KIND_CODE[ev.MARK]
    op_source = np.where(is_range & torch_op, 2,
                         np.where(is_range & in_nccl & (row_kind != _COLLECTIVE_CODE[ev.OTHER_COMM]), 1, 0))
    in_group_call = in_nccl & is_range
    return {"collective": np.where(is_comm, row_kind, 0).astype(np.int8),
            "nbytes": np.where(in_distprof & is_comm & (payload >= 0), payload, -1).astype(np.int64),
            "op_kind": np.where(op_source > 0, row_kind, 0).astype(np.int8), "op_source": op_source.astype(np.int8),
            "group_start": in_group_call & np.isin(names, [NCCL_GROUP_START])[name_codes],
            "group_end": in_group_call & np.isin(names, [NCCL_GROUP_END])[name_codes]}


def _mpi_thread_ranks(export: _Export) -> dict[int, int]:
    """pid -> N from NVTX thread names 'MPI Rank N' (2022.2 MPI tracing names the main thread)."""
    if NVTX_TABLE not in export.tables:
        return {}
    has_strings = STRINGS_TABLE in export.tables and "textId" in export.columns(NVTX_TABLE)
    text = (f"COALESCE(t.text, (SELECT value FROM {STRINGS_TABLE} WHERE id = t.textId))"
            if has_strings else "t.text")
    ranks = {}
    for global_tid, name in export.rows(f"SELECT IFNULL(t.globalTid, 0), {text} FROM {NVTX_TABLE} AS t "
                                        f"WHERE t.eventType = {NVTX_THREAD_NAME}"):
        match = MPI_RANK_THREAD.match(str(name or ""))
        if match:
            ranks[(global_tid >> 24) & _PID_MASK] = int(match.group(1))
    return ranks


def _activity_marks(export: _Export, pids: np.ndarray) -> dict:
    """Two instants per rank process, at the first start and the last end of everything it
    recorded (every activity table, runtime calls not kept as rows included), so that the
    events span the recorded activity: the window of a trace without steps. One aggregate
    query per table."""
    bounds: dict[int, list[int]] = {}
    for table, id_column in ACTIVITY_TABLES:
        if not {"start", id_column} <= export.columns(table):
            continue
        end = "IFNULL(t.end, t.start)" if "end" in export.columns(table) else "t.start"
        # NVTX: marks and ranges only; domain-create and thread-name rows are registrations, not activity.
        # A negative start is corrupt (_drop_negative) and NULL is not >= 0: neither is activity
        only = f" AND t.eventType IN {NVTX_ACTIVITY_TYPES}" if table == NVTX_TABLE else ""
        for pid, low, high in export.rows(f"SELECT (IFNULL(t.{id_column}, 0) >> 24) & {_PID_MASK} AS p, "
                                          f"min(t.start), max({end}) FROM {table} AS t "
                                          f"WHERE t.start >= 0{only} GROUP BY p"):
            if int(pid) in pids and low is not None:
                old = bounds.setdefault(int(pid), [low, high])
                old[0], old[1] = min(old[0], low), max(old[1], high)
    pid = np.repeat(np.array(sorted(bounds), np.int64), 2)
    time = np.array([value for key in sorted(bounds) for value in bounds[key]], np.int64)
    n = time.size
    return {"kind": np.full(n, _KIND_CODE[ev.MARK], np.int8), "category": np.full(n, _CATEGORY_CODE[ev.RUNTIME_CAT],
                                                                                   np.int8),
            "name": np.zeros(n, np.int64), "names": np.array([ACTIVITY_MARK], dtype=object), "start": time,
            "end": time, "device": np.full(n, -1, np.int64), "pid": pid, "thread": pid << 24,
            "correlation_id": np.full(n, -1, np.int64), "step": np.full(n, -1, np.int64),
            "phase": np.zeros(n, np.int64)}


# -- assembling rank traces ---------------------------------------------------------------------------

def _read_export(export: _Export, config: dict) -> list[RankTrace]:
    path = export.path
    if not export.tables & set(NSYS_TABLES):
        raise _not_an_export(export)
    warnings: list[str] = []

    gpu = _concat_parts([_read_kernels(export, config), *_read_memory_ops(export)])
    calls, op_launch = _launch_calls(export, gpu)
    nvtx = _read_nvtx(export)
    gpu, op_launch, calls, nvtx = _drop_negative(gpu, op_launch, calls, nvtx, warnings, path)
    gpu, op_launch = _drop_reversed(gpu, op_launch, warnings, path, "GPU ops")
    nvtx, _ = _drop_reversed(nvtx, None, warnings, path, "NVTX ranges")
    gpu, op_launch, nvtx = _drop_implausible(gpu, op_launch, nvtx, warnings, path)
    nvtx = _checked_steps(nvtx, warnings, path)
    phase_names = _assign_phases_and_steps(gpu, calls, op_launch, nvtx)
    _launched_by_comm_op(export, gpu, calls, op_launch, nvtx)
    gpu["collective"] = _kernel_collectives(gpu, calls, op_launch, nvtx)
    del op_launch

    if export.missing_strings:
        example = min(export.missing_strings)
        warnings.append(f"{path}: {len(export.missing_strings)} string id(s) missing from {STRINGS_TABLE} "
                        f"(e.g. {example}); their events are named '<unknown string ID>'")
    metadata = _metadata(export)
    normalized = metadata.get("EXPORT_PARAM_TIME_NORMALIZE", "").lower() == "true" or any(
        part["start"].size and part["start"].max() > NORMALIZED_NS for part in (gpu, nvtx))
    session_start = _session_start(export)
    clock_offset = 0 if normalized or session_start is None else session_start
    if session_start is None and not normalized:
        warnings.append(f"{path}: no {SESSION_START_TABLE}: timestamps are relative to the session start "
                        "and cannot be aligned with other files in absolute time")

    # which processes are ranks, and their main device
    gpu_pids = np.unique(gpu["pid"])
    nvtx_range_pids = np.unique(nvtx["pid"][nvtx["kind"] != _KIND_CODE[ev.MARK]])
    rank_pids = gpu_pids if gpu_pids.size else nvtx_range_pids
    if not rank_pids.size:
        raise SourceError(f"{path}: no CUDA activity (kernels, memcpy, memset) and no NVTX ranges in this report")
    others = np.setdiff1d(nvtx_range_pids, rank_pids)
    if others.size:
        warnings.append(f"{path}: process(es) {', '.join(map(str, others))} have NVTX ranges but no CUDA "
                        "activity; not counted as ranks")
    devices: dict[int, int | None] = {}
    for pid in rank_pids:  # one pass per process (a handful), not per event
        on_gpu = gpu["device"][gpu["pid"] == pid]
        on_gpu = on_gpu[on_gpu >= 0]
        devices[int(pid)] = int(np.bincount(on_gpu).argmax()) if on_gpu.size else None
    domain_counts = nvtx["domain_counts"]

    lane_kind_gpu, lane_kind_host = _LANE_KIND_CODE[ev.GPU_STREAM], _LANE_KIND_CODE[ev.HOST_THREAD]
    marks = _activity_marks(export, set(devices))
    rows = _concat_parts([_event_columns(gpu, gpu["lane"], lane_kind_gpu),
                          _event_columns(calls, calls["thread"] & _PID_MASK, lane_kind_host),
                          _event_columns(nvtx, nvtx["thread"] & _PID_MASK, lane_kind_host),
                          _event_columns(marks, marks["thread"] & _PID_MASK, lane_kind_host)])
    del gpu, calls, nvtx  # only the event rows are needed from here on
    keep, _ = plausible_span(rows["start"], rows["end"], path)  # marks/launches of dropped rows (told above)
    rows = rows if keep is None else _kept(rows, None, keep)[0]
    file_facts = {"nsys_version": metadata.get("EXPORT_PRODUCT_VERSION"),
                  "schema_version": metadata.get("EXPORT_SCHEMA_VERSION"),
                  "time_normalized": bool(normalized), "session_start_utc_ns": session_start,
                  "processes_in_report": len(devices)}
    return _rank_traces(export, rows, phase_names, devices, domain_counts, clock_offset, warnings, file_facts)


def _assign_phases_and_steps(gpu: dict, calls: dict, op_launch: np.ndarray, nvtx: dict) -> np.ndarray:
    """Set ``phase`` (codes into the returned names; 0 = none) and ``step`` of every GPU op,
    launch call and NVTX row, and move ProfileStep rows to their GPU-projected bounds."""
    is_range = (nvtx["kind"] != _KIND_CODE[ev.MARK]) & (nvtx["end"] > nvtx["start"])
    phase_rows = np.flatnonzero(is_range & (nvtx["category"] == _CATEGORY_CODE[ev.PHASE]) & ~nvtx["is_step"])
    step_rows = np.flatnonzero(is_range & nvtx["is_step"])
    # queries: the launch calls, then the NVTX rows themselves (a phase range is its own phase)
    query = [np.concatenate([calls[key], nvtx[key]]) for key in ("thread", "start", "end")]
    n_calls = calls["start"].size

    def enclosing(rows: np.ndarray) -> np.ndarray:
        """Row of the innermost enclosing range among ``rows``, or -1."""
        found = innermost_enclosing(nvtx["thread"][rows], nvtx["start"][rows], nvtx["end"][rows], *query)
        return np.where(found >= 0, rows[np.maximum(found, 0)], -1) if rows.size else found

    phase_row, step_row = enclosing(phase_rows), enclosing(step_rows)
    # phase codes index the distinct phase names; code 0 is "" (no enclosing phase)
    phase_of_row = np.zeros(nvtx["start"].size + 1, np.int64)      # last slot: row -1
    codes, phase_names = ev.factorize(np.concatenate([[""], nvtx["names"][nvtx["name"][phase_rows]]]))
    phase_names = np.asarray(phase_names, dtype=object)
    phase_of_row[phase_rows] = codes[1:]
    step_of_row = np.append(nvtx["step"], -1)
    query_phase, query_step = phase_of_row[phase_row], step_of_row[step_row]
    calls["phase"], nvtx["phase"] = query_phase[:n_calls], query_phase[n_calls:]
    calls["step"], nvtx["step"] = query_step[:n_calls], query_step[n_calls:]

    launched = op_launch >= 0
    launch_at = np.maximum(op_launch, 0)
    none = np.full(op_launch.size, -1, np.int64)
    gpu["phase"] = np.where(launched, calls["phase"][launch_at], 0) if n_calls else none + 1
    gpu["step"] = np.where(launched, calls["step"][launch_at], -1) if n_calls else none
    op_step_row = np.where(launched, step_row[:n_calls][launch_at], -1) if n_calls else none

    # on the GPU a step spans the GPU ops launched inside its CPU range
    has_step = op_step_row >= 0
    if has_step.any():
        first, last = span_of_groups(nvtx["start"].size, op_step_row, gpu["start"], gpu["end"])
        projected = last >= first
        nvtx["start"] = np.where(projected, first, nvtx["start"])
        nvtx["end"] = np.where(projected, last, nvtx["end"])
    return np.asarray(phase_names, dtype=object)


def _launched_by_comm_op(export: _Export, gpu: dict, calls: dict, op_launch: np.ndarray, nvtx: dict) -> None:
    """A kernel no name rule knows is communication when the innermost NVTX range around its launch call
    is a communication op (``nccl:*``, ``c10d::*``, ``record_param_comms``, ``symm_mem::*``: PyTorch's ops
    as emit_nvtx / record_function ranges), as the Kineto reader does with its host ops."""
    kernel = (gpu["kind"] == _KIND_CODE[ev.KERNEL]) & (gpu["category"] == _CATEGORY_CODE[ev.COMPUTE]) & \
        (op_launch >= 0)
    is_range = (nvtx["kind"] != _KIND_CODE[ev.MARK]) & (nvtx["end"] >= nvtx["start"]) & ~nvtx["is_step"]
    rows = np.flatnonzero(is_range)
    if not kernel.any() or not rows.size:
        return
    comm_name = np.array([comm_kernels.is_comm_op_name(str(name)) for name in nvtx["names"]], bool)
    if not comm_name[nvtx["name"][rows]].any():
        return
    found = innermost_enclosing(nvtx["thread"][rows], nvtx["start"][rows], nvtx["end"][rows],
                                calls["thread"], calls["start"], calls["end"])
    call_in_comm = np.where(found >= 0, comm_name[nvtx["name"][rows[np.maximum(found, 0)]]], False)
    launched = kernel & call_in_comm[np.maximum(op_launch, 0)]
    if launched.any():
        export.comm_rules.append(comm_kernels.RULE_LAUNCHED)
        gpu["category"] = np.where(launched, _CATEGORY_CODE[ev.COMMUNICATION], gpu["category"]).astype(np.int8)
        gpu["comm_rule"] = np.where(launched, len(export.comm_rules) - 1, gpu["comm_rule"])


def _kernel_collectives(gpu: dict, calls: dict, op_launch: np.ndarray, nvtx: dict) -> np.ndarray:
    """Collective code of every GPU op: a communication kernel takes the op named by a range around
    its launch call (PyTorch ``nccl:*`` first: it names what the user called, e.g. all_to_all
    over NCCL send/recv; else the NCCL API op or group), and keeps its own name's kind otherwise."""
    collective = gpu["collective"]
    is_range = (nvtx["kind"] != _KIND_CODE[ev.MARK]) & (nvtx["end"] >= nvtx["start"])
    group_kind = _group_kinds(nvtx)
    launched = op_launch >= 0
    comm = launched & (gpu["category"] == _CATEGORY_CODE[ev.COMMUNICATION])
    if not comm.any():
        return collective
    query = [calls[key] for key in ("thread", "start", "end")]
    found = np.zeros(calls["start"].size, np.int8)
    # lower priority first: a later source overwrites where it has an op
    for rows, kinds in ((np.flatnonzero(is_range & ((nvtx["op_source"] == 1) | (group_kind > 0))),
                         np.maximum(nvtx["op_kind"], group_kind)),
                        (np.flatnonzero(is_range & (nvtx["op_source"] == 2)), nvtx["op_kind"])):
        row = innermost_enclosing(nvtx["thread"][rows], nvtx["start"][rows], nvtx["end"][rows], *query)
        hit = row >= 0
        found[hit] = kinds[rows[row[hit]]]
    call_kind = found[np.maximum(op_launch, 0)]
    return np.where(comm & (call_kind > 0), call_kind, collective).astype(np.int8)


def _group_kinds(nvtx: dict) -> np.ndarray:
    """Per NVTX row: for an outermost ``ncclGroupEnd`` (where NCCL launches the group's kernels),
    the kind of the NCCL ops called on its thread since the group began, when they are all of one
    kind; 0 elsewhere and for mixed groups (their kernel's own name then says what it is)."""
    result = np.zeros(nvtx["start"].size, np.int8)
    rows = np.flatnonzero(nvtx["group_start"] | nvtx["group_end"] | (nvtx["op_source"] == 1))
    if not nvtx["group_end"][rows].any():
        return result
    rows = rows[np.lexsort((nvtx["start"][rows], nvtx["thread"][rows]))]
    thread = nvtx["thread"][rows]
    delta = nvtx["group_start"][rows].astype(np.int64) - nvtx["group_end"][rows].astype(np.int64)
    first = np.searchsorted(thread, thread, side="left")          # each thread's first row
    depth = np.cumsum(delta)
    depth -= (depth - delta)[first]                                # per-thread running depth after the row
    closing = nvtx["group_end"][rows] & (depth <= 0)
    # a group: the rows after a closing end (or from a thread's first row) up to the next closing end
    new_thread = np.r_[True, thread[1:] != thread[:-1]]
    segment = np.cumsum(new_thread | np.r_[False, closing[:-1]])
    is_op = nvtx["op_source"][rows] == 1
    op_kind = nvtx["op_kind"][rows][is_op].astype(np.int64)
    low = np.full(int(segment.max(initial=0)) + 1, np.iinfo(np.int64).max)
    high = np.full(low.size, np.iinfo(np.int64).min)
    np.minimum.at(low, segment[is_op], op_kind)
    np.maximum.at(high, segment[is_op], op_kind)
    single = np.where(low == high, low, 0)  # the segment's ops are all of one kind, else unknown (0)
    end_rows = np.flatnonzero(closing)
    kinds = single[segment[end_rows]].astype(np.int8)
    result[rows[end_rows]] = kinds
    return result


def _not_an_export(export: _Export) -> SourceError:
    """Why a SQLite file without nsys tables was refused. A rank file that distprof's collector
    (WAL mode) was still writing, copied without its ``-wal``, has no tables at all in its main
    file (they are all in the WAL): said so, with what to copy, not "not an nsys export"."""
    path = export.path
    wal = Path(f"{path}-wal")
    try:
        with open(path, "rb") as handle:
            wal_mode = handle.read(20)[18:20] == WAL_MODE
        wal_empty = not wal.exists() or wal.stat().st_size == 0  # a read-only open leaves an empty one
    except OSError:
        wal_mode = wal_empty = False
    if wal_mode and wal_empty and not export.tables - DISTPROF_TABLES:
        return SourceError(f"{path}: distprof rank file whose -wal file is missing (copied without it?): a "
                           f"WAL-mode SQLite file with no tables of its own (an nsys export is never in WAL "
                           f"mode); copy {path.name}-wal next to it")
    return SourceError(f"{path}: SQLite file but not an nsys export (none of the tables "
                       f"{KERNEL_TABLE}, {NVTX_TABLE}, {STRINGS_TABLE}, META_DATA_EXPORT)")


def _drop_negative(gpu: dict, op_launch: np.ndarray, calls: dict, nvtx: dict, warnings: list[str], path: Path):
    """nsys times count from the session start (or are UTC ns): a negative one is corrupt. Such GPU
    ops, launch calls and NVTX rows are dropped with one warning naming the counts; a GPU op whose
    launch call is dropped keeps its own times and loses only its launch."""
    bad = {name: (part["start"] < 0) | (part["end"] < 0)
           for name, part in (("GPU op", gpu), ("launch call", calls), ("NVTX row", nvtx))}
    if not any(mask.any() for mask in bad.values()):
        return gpu, op_launch, calls, nvtx
    counts = ", ".join(f"{int(mask.sum())} {name}(s)" for name, mask in bad.items() if mask.any())
    warnings.append(f"{path}: {counts} with a negative timestamp dropped (nsys times count from the session "
                    "start, so none is below 0): corrupt rows")
    if bad["launch call"].any():
        keep = ~bad["launch call"]
        safe = np.maximum(op_launch, 0)
        op_launch = np.where((op_launch >= 0) & keep[safe], (np.cumsum(keep) - 1)[safe], -1)
        calls = _kept(calls, None, keep)[0]
    gpu, op_launch = _kept(gpu, op_launch, ~bad["GPU op"])
    return gpu, op_launch, calls, _kept(nvtx, None, ~bad["NVTX row"])[0]


def _checked_steps(nvtx: dict, warnings: list[str], path: Path) -> dict:
    """The NVTX rows without the step ranges of zero length (events.checked_steps, which also
    names overlapping steps), checked per process on the CPU ranges as marked: their GPU
    projections may overlap legitimately (a step's last allreduce runs on while the next starts)."""
    rows = np.flatnonzero(nvtx["is_step"])
    keep, told = ev.checked_steps(nvtx["start"][rows], nvtx["end"][rows], nvtx["step"][rows], nvtx["pid"][rows],
                                  path)
    warnings += told
    if keep.all():
        return nvtx
    mask = np.ones(nvtx["start"].size, bool)
    mask[rows[~keep]] = False
    return _kept(nvtx, None, mask)[0]


def _drop_reversed(columns: dict, op_launch: np.ndarray | None, warnings: list[str], path: Path, what: str):
    """Rows ending before they start (seen in cut or damaged files) cannot be intervals: drop them."""
    bad = columns["end"] < columns["start"]
    if not bad.any():
        return columns, op_launch
    warnings.append(f"{path}: ignored {int(bad.sum())} {what} that end before they start")
    return _kept(columns, op_launch, ~bad)


def _drop_implausible(gpu: dict, op_launch: np.ndarray, nvtx: dict, warnings: list[str], path: Path):
    """GPU ops and NVTX ranges outside the plausible span (sources.plausible_span: a timestamp near
    2**63 made a 292-year window, and would pass for a normalized absolute time) are dropped."""
    keep, told = plausible_span(np.concatenate([gpu["start"], nvtx["start"]]),
                                np.concatenate([gpu["end"], nvtx["end"]]), path)
    if keep is None:
        return gpu, op_launch, nvtx
    warnings += told
    n_gpu = gpu["start"].size
    gpu, op_launch = _kept(gpu, op_launch, keep[:n_gpu])
    return gpu, op_launch, _kept(nvtx, None, keep[n_gpu:])[0]


def _kept(columns: dict, op_launch: np.ndarray | None, keep: np.ndarray):
    """The rows of ``keep`` of every per-row column (and of the launch index)."""
    bad = ~keep
    cleaned = {key: (value[keep] if isinstance(value, np.ndarray) and value.shape == bad.shape and key != "names"
                     else value) for key, value in columns.items()}
    return cleaned, (op_launch[keep] if op_launch is not None else None)


def _event_columns(part: dict, lane: np.ndarray, lane_kind: int) -> dict:
    columns = {key: part[key] for key in ("kind", "category", "name", "names", "start", "end", "device", "pid",
                                          "correlation_id", "step", "phase")}
    columns.update({key: _column_of(part, key) for key in _OPTIONAL})
    return {**columns, "lane": lane, "lane_kind": np.full(lane.size, lane_kind, np.int8)}


def _comm_rule(column: dict, export: _Export) -> ev.Texts:
    """Per row, the rule that made it communication: its kernel's (codes into ``export.comm_rules``), the
    NVTX domain's for communication ranges, "" for the rest."""
    texts = [*export.comm_rules, ""]
    codes = np.where(column["comm_rule"] >= 0, column["comm_rule"], len(texts) - 1)
    nvtx_comm = (column["comm_rule"] < 0) & (column["category"] == _CATEGORY_CODE[ev.COMMUNICATION])
    return ev.Texts.from_codes(np.where(nvtx_comm, texts.index(RULE_NVTX), codes), texts)


def _domain_counts(pid: np.ndarray, domain: np.ndarray) -> dict[int, dict[str, int]]:
    """NVTX rows per domain of each process, most first: {pid: {domain: rows}}."""
    codes, domains = ev.factorize(domain.tolist())
    pairs, _, counts = unique_rows(np.stack([pid, codes], axis=1)) if codes.size else (np.empty((0, 2)), [], [])
    out: dict[int, dict[str, int]] = {}
    for (process, code), count in sorted(zip(pairs.tolist(), np.asarray(counts).tolist()), key=lambda item: -item[1]):
        out.setdefault(int(process), {})[str(domains[code])] = int(count)  # one per (process, domain)
    return out


def _rank_traces(export: _Export, rows: dict, phase_names: np.ndarray, devices: dict[int, int | None],
                 domain_counts: dict, clock_offset: int, warnings: list[str], file_facts: dict) -> list[RankTrace]:
    """One RankTrace per rank process, ordered by (device, pid); rank numbers as the module says."""
    path = export.path
    ordered = sorted(devices, key=lambda p: (devices[p] is None, devices[p] or 0, p))
    env = _captured_env(export)
    env_rank = _env_rank(env)
    hostname = _hostname(export, env)
    mpi_ranks = _mpi_thread_ranks(export)
    several = len(ordered) > 1
    if several and env_rank:
        warnings.append(f"{path}: report holds {len(ordered)} rank processes; the captured {env_rank[0]}="
                        f"{env_rank[1]} is the launcher's and is not used (ranks follow device order)")
    names = rows.pop("names")
    traces = []
    for index, pid in enumerate(ordered):  # one pass per process
        if not several and env_rank:
            rank, rank_from = env_rank[1], f"env {env_rank[0]}"
        elif pid in mpi_ranks:
            rank, rank_from = mpi_ranks[pid], "NVTX thread name 'MPI Rank N'"
        elif several:
            rank, rank_from = None, "device order" if devices[pid] is not None else "pid order"
        else:
            rank, rank_from = None, "file order"
        mine = rows["pid"] == pid if several else slice(None)
        column = {key: values[mine] for key, values in rows.items()}
        name = ev.Texts.from_codes(column["name"], names)
        phase = ev.Texts.from_codes(column["phase"], phase_names)
        if several:
            name, phase = name.compact(), phase.compact()
        events = ev.make_events(
            kind=ev.Texts.from_codes(column["kind"], ev.KINDS),
            category=ev.Texts.from_codes(column["category"], ev.CATEGORIES),
            lane_kind=ev.Texts.from_codes(column["lane_kind"], ev.LANE_KINDS),
            name=name, phase=phase, start_ns=column["start"], end_ns=column["end"], device=column["device"],
            lane=column["lane"], pid=column["pid"], correlation_id=column["correlation_id"], step=column["step"],
            rank=-1 if rank is None else rank, nbytes=column["nbytes"],
            collective=ev.Texts.from_codes(column["collective"], ev.COLLECTIVE_KINDS),
            comm_rule=_comm_rule(column, export))
        del column, name, phase
        meta = {**file_facts, "nvtx_domains": domain_counts.get(int(pid), {}),
                "run": run_identity(events.start_ns, events.end_ns, clock_offset, clock_offset or None,
                                    launcher_ids(env))}
        if hostname:
            meta["hostname"] = hostname
        traces.append(RankTrace(events=events, rank=rank, source="nsys", source_file=str(path), pid=int(pid),
                                device=devices[pid], clock_offset_ns=int(clock_offset), rank_from=rank_from,
                                warnings=list(warnings) if index == 0 else [], meta=meta))
    return traces
