"""Synthetic Nsight Systems exports with known intervals, for tests and benchmarks.

The tables are created by executing the real CREATE TABLE text that nsys wrote (copied verbatim
into ``tests/data/nsys/ddl/``), so a fixture has exactly the columns, NOT NULL constraints
and quirks of that nsys version (e.g. the extra ``name`` column of the 2022.2 file). Only the
tables a test needs are filled; a column the test does not set gets 0 / '' when it is NOT NULL
and NULL otherwise.

Ids follow nsys: ``globalTid = vm << 48 | pid << 24 | tid`` and ``globalPid`` is the same with
tid 0. Strings go through ``StringIds``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
NSYS_DATA = Path(os.environ.get("DISTPROF_NSYS_DATA", REPO_ROOT / "tests" / "data" / "nsys"))
DDL_DIR = NSYS_DATA / "ddl"

# schema label -> DDL file written by that nsys version
SCHEMAS = {
    "2020": "nsys_2020.x_nometa.sql",
    "2022.2": "nsys_2022.2.1_schema2.9.1.sql",
    "2024.5": "nsys_2024.5.1_schema3.13.2.sql",
    "2025.1": "nsys_2025.1.1_schema3.17.1.sql",
    "2025.5": "nsys_2025.5.2_schema3.24.0.sql",
    "2026.2": "nsys_2026.2.1_schema3.25.0.sql",
}
PRODUCT_VERSIONS = {"2022.2": ("2022.2.1.31", "2.9.1"), "2024.5": ("2024.5.1.113", "3.13.2"),
                    "2025.1": ("2025.1.1.110", "3.17.1"), "2025.5": ("2025.5.2.266", "3.24.0"),
                    "2026.2": ("2026.2.1.210", "3.25.0")}

VM_ID = 1  # bits 48+ of every serialized id in the real files
NVTX_MARK, NVTX_THREAD_NAME, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 34, 39, 59, 60, 75
RUNTIME_CLASS, LEGACY_RUNTIME_CLASS = 0, 67


def real_export(name: str) -> Path:
    """A real nsys export from tests/data/nsys, kept there gzip-compressed (SQLite compresses 4-8x):
    decompressed once per machine into a cache folder keyed by the archive's size and time."""
    import gzip
    import shutil
    import tempfile
    archive = NSYS_DATA / f"{name}.gz"
    if not archive.is_file():
        return NSYS_DATA / name  # an uncompressed copy (DISTPROF_NSYS_DATA pointing at a folder of .sqlite files)
    stat = archive.stat()
    cache = Path(tempfile.gettempdir()) / f"distprof-test-data-{stat.st_size}-{stat.st_mtime_ns}"
    path = cache / name
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f"{name}.{os.getpid()}.part"
        with gzip.open(archive, "rb") as source, open(partial, "wb") as target:
            shutil.copyfileobj(source, target)
        partial.replace(path)  # atomic: concurrent test processes never see half a file
    return path


def ddl_available() -> bool:
    return DDL_DIR.is_dir()


def global_tid(pid: int, tid: int) -> int:
    return (VM_ID << 48) | (pid << 24) | tid


def global_pid(pid: int) -> int:
    return global_tid(pid, 0)


@functools.cache
def create_statements(schema: str) -> dict[str, str]:
    """The CREATE TABLE statements of one nsys version, by table name, exactly as nsys wrote them."""
    text = (DDL_DIR / SCHEMAS[schema]).read_text()
    statements: dict[str, str] = {}
    pending = ""
    for line in text.splitlines(keepends=True):
        if not pending and (line.startswith("--") or not line.strip()):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            name = pending.split("(", 1)[0].split()[-1]
            statements[name] = pending.strip()
            pending = ""
    return statements


@dataclass
class NsysExport:
    """Builder of one synthetic export. Call the event methods, then ``write(path)``.

    ``tables``: which tables of the DDL to create (default: all of them, as 2022.2 did; newer
    nsys creates only tables with data, so pass a subset to mimic that).
    ``env``: captured environment (META_DATA_CAPTURE rows when the schema has that table, else
    the NUL-separated ``DeviceEnvironment`` of TARGET_INFO_SYSTEM_ENV, as 2022.2 wrote it).
    ``duplicate_runtime``: write every runtime call twice per correlationId, as 2022.2 did
    (an eventClass-67 row with the plain name around the eventClass-0 row with the versioned one).
    """

    schema: str = "2026.2"
    tables: set[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    session_start_utc_ns: int | None = 1_700_000_000_000_000_000
    time_normalized: bool = False
    duplicate_runtime: bool | None = None
    rows: dict[str, list[dict]] = field(default_factory=dict)
    strings: dict[str, int] = field(default_factory=dict)
    _next_correlation: dict[int, int] = field(default_factory=dict)
    _domains: dict[tuple[int, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.duplicate_runtime is None:
            self.duplicate_runtime = self.schema == "2022.2"

    # -- strings and raw rows ---------------------------------------------------------------
    def string_id(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
        return self.strings[value]

    def add(self, table: str, **values) -> None:
        self.rows.setdefault(table, []).append(values)

    def correlation_id(self, pid: int) -> int:
        """Correlation ids are per process and start at 1 in every process (as in nsys)."""
        self._next_correlation[pid] = self._next_correlation.get(pid, 0) + 1
        return self._next_correlation[pid]

    # -- CUDA ---------------------------------------------------------------------------------
    def runtime(self, pid: int, tid: int, start: int, end: int, name: str, correlation_id: int,
                event_class: int = RUNTIME_CLASS) -> None:
        """One CUDA API call on thread ``tid`` (twice, with the 2022.2 layout)."""
        self.add("CUPTI_ACTIVITY_KIND_RUNTIME", start=start, end=end, eventClass=event_class,
                 globalTid=global_tid(pid, tid), correlationId=correlation_id,
                 nameId=self.string_id(name))
        if self.duplicate_runtime:
            plain = name.split("_v")[0]
            self.add("CUPTI_ACTIVITY_KIND_RUNTIME", start=start - 1, end=end + 1,
                     eventClass=LEGACY_RUNTIME_CLASS, globalTid=global_tid(pid, tid),
                     correlationId=correlation_id, nameId=self.string_id(plain))

    def kernel(self, pid: int, device: int, stream: int, start: int, end: int, name: str,
               launch: tuple[int, int] | None = None, tid: int | None = None,
               demangled: str | None = None, launch_name: str = "cudaLaunchKernel_v7000") -> int:
        """A kernel; with ``launch=(start, end)`` also its launching runtime call on ``tid``
        (default: the main thread, tid == pid). Returns the correlation id."""
        correlation = self.correlation_id(pid)
        self.add("CUPTI_ACTIVITY_KIND_KERNEL", start=start, end=end, deviceId=device, contextId=1,
                 streamId=stream, correlationId=correlation, globalPid=global_pid(pid),
                 demangledName=self.string_id(demangled or f"{name}(float*, int)"),
                 shortName=self.string_id(name), launchType=1,
                 registersPerThread=32, gridX=1, gridY=1, gridZ=1, blockX=128, blockY=1, blockZ=1,
                 gridId=correlation)
        if launch is not None:
            self.runtime(pid, pid if tid is None else tid, launch[0], launch[1], launch_name, correlation)
        return correlation

    def memcpy(self, pid: int, device: int, stream: int, start: int, end: int, nbytes: int = 1024,
               launch: tuple[int, int] | None = None, tid: int | None = None) -> int:
        correlation = self.correlation_id(pid)
        self.add("CUPTI_ACTIVITY_KIND_MEMCPY", start=start, end=end, deviceId=device, contextId=1,
                 streamId=stream, correlationId=correlation, globalPid=global_pid(pid), bytes=nbytes,
                 copyKind=1, srcKind=1, dstKind=2)
        if launch is not None:
            self.runtime(pid, pid if tid is None else tid, launch[0], launch[1], "cudaMemcpyAsync_v3020",
                         correlation)
        return correlation

    def memset(self, pid: int, device: int, stream: int, start: int, end: int, nbytes: int = 1024) -> int:
        correlation = self.correlation_id(pid)
        self.add("CUPTI_ACTIVITY_KIND_MEMSET", start=start, end=end, deviceId=device, contextId=1,
                 streamId=stream, correlationId=correlation, globalPid=global_pid(pid), value=0,
                 bytes=nbytes)
        return correlation

    # -- NVTX ---------------------------------------------------------------------------------
    def domain(self, pid: int, name: str, tid: int | None = None, at: int = 0) -> int:
        """Create an NVTX domain in a process (ids are per process, from 1, in creation order)."""
        key = (pid, name)
        if key not in self._domains:
            domain_id = 1 + sum(1 for p, _ in self._domains if p == pid)
            self._domains[key] = domain_id
            self.add("NVTX_EVENTS", start=at, end=None, eventType=NVTX_DOMAIN_CREATE, text=name,
                     globalTid=global_tid(pid, pid if tid is None else tid), domainId=domain_id)
        return self._domains[key]

    def range(self, pid: int, start: int, end: int, text: str, tid: int | None = None,
              domain: str | None = None, category: int | None = None, registered: bool = False,
              event_type: int = NVTX_PUSH_POP, domain_id: int | None = None) -> None:
        """An NVTX range. ``registered`` puts the text in StringIds (``textId``) as
        nvtxDomainRegisterString does; otherwise it goes in ``text``. ``domain_id`` forces a raw
        id (e.g. one whose domain-create row is missing)."""
        if domain_id is None:
            domain_id = self.domain(pid, domain, tid) if domain else 0
        self.add("NVTX_EVENTS", start=start, end=end, eventType=event_type, category=category,
                 text=None if registered else text, textId=self.string_id(text) if registered else None,
                 globalTid=global_tid(pid, pid if tid is None else tid), domainId=domain_id)

    def mark(self, pid: int, at: int, text: str, tid: int | None = None) -> None:
        self.add("NVTX_EVENTS", start=at, end=None, eventType=NVTX_MARK, text=text,
                 globalTid=global_tid(pid, pid if tid is None else tid), domainId=0)

    def thread_name(self, pid: int, at: int, text: str, tid: int | None = None) -> None:
        """An eventType-39 row (2022.2 MPI tracing names the main thread 'MPI Rank N')."""
        self.add("NVTX_EVENTS", start=at, end=None, eventType=NVTX_THREAD_NAME, text=text,
                 globalTid=global_tid(pid, pid if tid is None else tid), domainId=0)

    # -- writing ------------------------------------------------------------------------------
    def _metadata_rows(self, statements: dict[str, str]) -> None:
        version, schema_version = PRODUCT_VERSIONS.get(self.schema, ("", ""))
        meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in statements), None)
        if meta_table:
            for name, value in (("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                                ("EXPORT_PRODUCT_VERSION", version), ("EXPORT_SCHEMA_VERSION", schema_version),
                                ("EXPORT_PARAM_TIME_NORMALIZE", "true" if self.time_normalized else "false"),
                                ("EXPORT_CONFIG_TIME_SHIFT", str(self.session_start_utc_ns or 0)
                                 if self.time_normalized else "0")):
                if meta_table == "EXPORT_META_DATA" and name.startswith("EXPORT_PARAM"):
                    continue  # 2022.2 did not record the export parameters
                self.add(meta_table, name=name, value=value)
        if self.session_start_utc_ns is not None and "TARGET_INFO_SESSION_START_TIME" in statements:
            self.add("TARGET_INFO_SESSION_START_TIME", utcEpochNs=self.session_start_utc_ns,
                     utcTime="2023-11-14T22:13:20", localTime="2023-11-14T22:13:20")
        if not self.env:
            return
        if "META_DATA_CAPTURE" in statements:
            for key, value in self.env.items():
                self.add("META_DATA_CAPTURE", name="PROCESS_0:ENVIRONMENT_VARIABLE", value=f'{key}="{value}"')
        elif "TARGET_INFO_SYSTEM_ENV" in statements:
            joined = "\0".join(f"{key}={value}" for key, value in self.env.items())
            self.add("TARGET_INFO_SYSTEM_ENV", globalVid=VM_ID << 48, devStateName="Local (CLI)",
                     name="DeviceEnvironment", nameEnum=610, value=joined)

    def write(self, path: str | Path) -> Path:
        """Create the tables with the version's own DDL and insert the rows."""
        path = Path(path)
        if path.exists():
            path.unlink()
        statements = create_statements(self.schema)
        wanted = set(statements) if self.tables is None else set(self.tables)
        self._metadata_rows(statements)
        if self.strings:
            self.rows["StringIds"] = [{"id": i, "value": s} for s, i in self.strings.items()]
        missing = sorted(t for t in self.rows if t not in statements and (self.tables is None or t in self.tables))
        if missing:  # rows that the version's DDL cannot hold: the test must not silently lose them
            raise ValueError(f"schema {self.schema} has no table(s) {missing}")
        connection = sqlite3.connect(path)
        try:
            for table in sorted(wanted & set(statements)):
                connection.execute(statements[table])
            for table, rows in self.rows.items():
                if table in wanted and table in statements:
                    insert_rows(connection, table, rows)
            connection.commit()
        finally:
            connection.close()
        return path


def _column_defaults(connection: sqlite3.Connection, table: str) -> dict[str, object]:
    """0 / '' for NOT NULL columns (so any version's DDL accepts a row), NULL otherwise."""
    defaults = {}
    for _, name, decl_type, not_null, _, _ in connection.execute(f"PRAGMA table_info({table})"):
        defaults[name] = ("" if "TEXT" in (decl_type or "").upper() else 0) if not_null else None
    return defaults


def insert_rows(connection: sqlite3.Connection, table: str, rows: list[dict]) -> None:
    defaults = _column_defaults(connection, table)
    unknown = {key for row in rows for key in row} - set(defaults)
    if unknown:
        raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
    columns = list(defaults)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    connection.executemany(sql, [tuple(row.get(c, defaults[c]) for c in columns) for row in rows])


def bulk_kernels(path: str | Path, count: int, schema: str = "2026.2", processes: int = 1,
                 streams: tuple[int, ...] = (7, 15), nccl_every: int = 8, step_every: int = 1000,
                 kernel_ns: int = 5_000, gap_ns: int = 1_000, rank: int = 0) -> Path:
    """A large export written by SQL (no Python row loop): ``count`` kernels per process, each
    launched by its own runtime call, NCCL kernels (every ``nccl_every``-th) on the second
    stream, one ProfileStep NVTX range per ``step_every`` kernels; env RANK=``rank`` when there
    is one process. For benchmarks."""
    path = Path(path)
    export = NsysExport(schema=schema, env={"RANK": str(rank)} if processes == 1 else {})
    names = ["volta_sgemm_128x64_nn", "elementwise_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    for name in names:
        export.string_id(name)
    launch_id = export.string_id("cudaLaunchKernel_v7000")
    export.write(path)
    period = kernel_ns + gap_ns
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=OFF")
    connection.execute("PRAGMA synchronous=OFF")
    series = f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {count}) "
    for process in range(processes):
        pid = 1000 + process
        gpid, gtid = global_pid(pid), global_tid(pid, pid)
        nccl = f"(i % {nccl_every} = {nccl_every - 1})"
        kernel_values = {
            "start": f"i * {period} + 100000", "end": f"i * {period} + 100000 + {kernel_ns}",
            "deviceId": str(process), "contextId": "1",
            "streamId": f"CASE WHEN {nccl} THEN {streams[1]} ELSE {streams[0]} END",
            "correlationId": "i + 1", "globalPid": str(gpid),
            "demangledName": f"CASE WHEN {nccl} THEN 3 ELSE 1 + (i % 2) END",
            "shortName": f"CASE WHEN {nccl} THEN 3 ELSE 1 + (i % 2) END",
            "launchType": "1", "registersPerThread": "32", "gridX": "1", "gridY": "1", "gridZ": "1",
            "blockX": "128", "blockY": "1", "blockZ": "1", "gridId": "i",
        }
        runtime_values = {"start": f"i * {period} + 1000", "end": f"i * {period} + 3000",
                          "eventClass": "0", "globalTid": str(gtid), "correlationId": "i + 1",
                          "nameId": str(launch_id), "returnValue": "0"}
        steps = max(1, count // step_every)
        step_values = {"start": f"i * {step_every * period}", "end": f"(i + 1) * {step_every * period}",
                       "eventType": str(NVTX_PUSH_POP), "text": "'ProfileStep#' || i",
                       "globalTid": str(gtid), "domainId": "0"}
        for table, values, rows in (("CUPTI_ACTIVITY_KIND_KERNEL", kernel_values, count),
                                    ("CUPTI_ACTIVITY_KIND_RUNTIME", runtime_values, count),
                                    ("NVTX_EVENTS", step_values, steps)):
            defaults = _column_defaults(connection, table)
            exprs = [values.get(c, repr(d) if d is not None else "NULL") for c, d in defaults.items()]
            series_n = series.replace(f"< {count})", f"< {rows})")
            connection.execute(f"INSERT INTO {table} ({', '.join(defaults)}) {series_n}"
                               f"SELECT {', '.join(exprs)} FROM n")
    connection.commit()
    connection.close()
    return path


# -- scenarios with known figures -----------------------------------------------------------------
# One step of one rank (ns, on the file's clock). CPU thread: ProfileStep#0 [1_000, 40_000], distprof
# phases forward [2_000, 10_000] and backward [10_000, 30_000], an NCCL-domain ncclAllReduce API
# range [20_000, 21_000]. GPU: gemm [10_000, 20_000] and elementwise [22_000, 30_000] on stream 7,
# the NCCL kernel [25_000, 40_000] on stream 15 (or, serialized, [30_000, 45_000] on stream 7).
COMPUTE_STREAM, NCCL_STREAM = 7, 15
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
SEPARATE_STREAM_FIGURES = {"window_ns": 30_000, "communication_ns": 15_000, "computation_ns": 18_000,
                           "overlap_ns": 5_000, "exposed_communication_ns": 10_000, "idle_ns": 2_000}
SAME_STREAM_FIGURES = {"window_ns": 35_000, "communication_ns": 15_000, "computation_ns": 18_000,
                       "overlap_ns": 0, "exposed_communication_ns": 15_000, "idle_ns": 2_000}


def has_table(schema: str, table: str) -> bool:
    return table in create_statements(schema)


def one_step_rank(export: NsysExport, pid: int = 4242, device: int = 0, nccl_on_compute_stream: bool = False,
                  offset: int = 0, nvtx: bool = True) -> NsysExport:
    """Add the one-step timeline above for process ``pid`` (all times shifted by ``offset``);
    ``nvtx=False`` leaves out the NVTX ranges (for a schema without NVTX_EVENTS)."""
    t = offset
    if nvtx:
        export.range(pid, t + 1_000, t + 40_000, "ProfileStep#0")
        export.range(pid, t + 2_000, t + 10_000, "forward", domain="distprof")
        export.range(pid, t + 10_000, t + 30_000, "backward", domain="distprof")
        export.range(pid, t + 20_000, t + 21_000, "ncclAllReduce", domain="NCCL", registered=True)
    export.kernel(pid, device, COMPUTE_STREAM, t + 10_000, t + 20_000, "gemm", launch=(t + 3_000, t + 3_500))
    export.kernel(pid, device, COMPUTE_STREAM, t + 22_000, t + 30_000, "elementwise",
                  launch=(t + 12_000, t + 12_500))
    if nccl_on_compute_stream:
        export.kernel(pid, device, COMPUTE_STREAM, t + 30_000, t + 45_000, NCCL_KERNEL,
                      launch=(t + 20_200, t + 20_700), launch_name="cuLaunchKernelEx")
    else:
        export.kernel(pid, device, NCCL_STREAM, t + 25_000, t + 40_000, NCCL_KERNEL,
                      launch=(t + 20_200, t + 20_700), launch_name="cuLaunchKernelEx")
    return export
