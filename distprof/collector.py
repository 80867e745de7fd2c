"""Per-rank recorder and its native file: rows of finished ranges, flushed to SQLite at every
step boundary so a rank that crashes keeps every completed step.

The hot path (annotate.Range.__exit__) appends one ``(start_ns, end_ns, tid, name_id)``
tuple to the current row list: a single C-level call, atomic under the GIL, so threads need no
lock. Measured in benchmarks/collector_overhead.py: storing into preallocated array columns
per range costs 150-250 ns more than this, which would break the "no dearer than a bare
nvtx.annotate" budget; the rows become int64 columns when they are read back.

A step boundary (``submit``, from Profiler.step) swaps in a fresh list and hands the old one to
the collector's writer thread, which commits it in one transaction, so the training thread pays for
the swap only (benchmarks/step_overhead.py). It waits only while the previous step is still being
written: a crash loses at most the step handed over last. The writer inserts up to 4,096 rows with
one ``INSERT ... FROM (VALUES ...)`` statement: the GIL is taken once to bind them and released while
SQLite inserts, where ``executemany`` would release and retake it for every row, and could wait a
switch interval (5 ms) each time behind a busy training thread. ``flush`` writes on the calling
thread and returns when the rows are committed.

The swapped-out list is kept for one more write, so a thread that fetched the old list's
``append`` just before the swap still lands on disk (with the next step's number, as before).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import resource
import socket
import sqlite3
import sys
import threading
import time
from pathlib import Path

from .sources import launcher_ids

SCHEMA_VERSION = "2"  # 2: distprof_names has comm_group / nbytes / peer (absent in "1" files: read as unknown)
NATIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS distprof_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS distprof_names(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, kind TEXT NOT NULL,
    comm_group TEXT NOT NULL DEFAULT '', nbytes INTEGER NOT NULL DEFAULT -1, peer INTEGER NOT NULL DEFAULT -1);
CREATE TABLE IF NOT EXISTS distprof_ranges(
    start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, tid INTEGER NOT NULL,
    name_id INTEGER NOT NULL, step INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS distprof_threads(tid INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS distprof_clock(
    phase TEXT NOT NULL, offset_ns INTEGER NOT NULL, rtt_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS distprof_host(
    step INTEGER NOT NULL, clock_ns INTEGER NOT NULL, cpu_ns INTEGER NOT NULL, involuntary INTEGER NOT NULL,
    voluntary INTEGER NOT NULL, load_1m REAL, steal_ticks INTEGER, total_ticks INTEGER, runqueue_ns INTEGER);
"""

ROWS_PER_STATEMENT = 4096  # the most rows bound to one INSERT (16,386 parameters)
ROW_FIELDS = 4  # start_ns, end_ns, tid, name_id
INSERT_CPU = "INSERT OR REPLACE INTO distprof_meta VALUES ('process_cpu_ns', ?), ('elapsed_ns', ?)"
WRITER_POLL_S = 1.0  # how often a wait for the writer checks that it is still alive

clock_ns = time.perf_counter_ns  # CLOCK_MONOTONIC on Linux: steady, shared by all processes of a host


NO_COMM = ("", -1, -1)  # (comm_group, nbytes, peer) of a range that says nothing about its message


def group_text(ranks) -> str:
    """The canonical text of a process group given as global ranks: sorted, distinct, comma-separated
    ("0,1"); the native reader names the group "ranks 0,1". One text per set of ranks, whatever order
    or repeats the caller used, so every member of a group writes the same name."""
    values = sorted({int(r) for r in ranks})
    if not values or values[0] < 0:
        raise ValueError(f"a process group is a non-empty list of global ranks >= 0, not {list(ranks)!r}")
    return ",".join(map(str, values))


class NameRegistry:
    """(name, category, kind, comm_group, nbytes, peer) -> small int id, process-wide, so ids stay
    valid across sessions. The message metadata of ``distprof.comm`` rides on the id, so a recorded
    row stays the same 4-tuple and the hot path the same whether or not it was given."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def id_of(self, name: str, category: str, kind: str, comm: tuple[str, int, int] = NO_COMM) -> int:
        key = (name, category, kind, *comm)
        found = self._ids.get(key)
        if found is None:
            with self._lock:
                found = self._ids.setdefault(key, len(self._ids) + 1)
        return found

    def items(self) -> list[tuple]:
        return [(i, *key) for key, i in list(self._ids.items())]


NAMES = NameRegistry()


class Route:
    """What annotate's hot path reads: where finished rows go (None: not recording) and the NVTX
    push/pop. Lives here, so the collector routes rows without importing annotate."""

    __slots__ = ("append", "push", "pop")

    def __init__(self) -> None:
        self.append = None
        self.push = None
        self.pop = None


ROUTE = Route()
THREAD_NAMES: dict[int, str] = {}  # OS thread id (or synthetic lane id) -> name, for the native file


def _load_1m() -> float | None:
    """The host's 1-minute load average (a diff says when two runs' machines were loaded unlike)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def host_sample(step: int) -> tuple:
    """What the OS already counts about this process and its host, for ``distprof_host``: the process's
    CPU time (all threads) and its involuntary / voluntary context switches (getrusage: preempted, or
    waiting), the host's 1-minute load and the CPU ticks stolen by the hypervisor (/proc/stat), and the
    time the main (training) thread was ready to run but waited for a core (/proc/self/schedstat: other
    processes on its cores); None where absent. Taken on the writer thread at each step's hand-over, so the
    training thread pays nothing for it (benchmarks/step_overhead.py)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    steal = total = runqueue = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/stat", "rb") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]  # user nice system idle iowait irq softirq steal
        steal, total = (ticks[7] if len(ticks) > 7 else 0), sum(ticks[:8])
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/schedstat", "rb") as schedstat:  # the main thread's: on CPU, waiting for a CPU
            runqueue = int(schedstat.read().split()[1])
    return (int(step), clock_ns(), time.process_time_ns(), usage.ru_nivcsw, usage.ru_nvcsw, _load_1m(), steal, total,
            runqueue)


PROC_SELF = Path("/proc/self")  # mountinfo and cgroup: where this process's cgroup folders are


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_list_size(text: str) -> int | None:
    """The cores of a cpuset list such as ``0-3,8`` (None when it is not one)."""
    count = 0
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            first, last = int(low), int(high or low)
            if last < first:
                return None
            count += last - first + 1
    except ValueError:
        return None
    return count or None


def _cgroup_mounts(proc: Path) -> dict[str, tuple[Path, str]]:
    """{controller: (mount point, the cgroup mounted there)} from mountinfo: ``""`` for cgroup v2,
    ``cpu`` and ``cpuset`` for v1 (a host may have both: v2 then holds no cpu controller)."""
    mounts: dict[str, tuple[Path, str]] = {}
    for line in (_text(proc / "mountinfo") or "").splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            mounts.setdefault("", (Path(fields[4]), fields[3]))
        elif tail[0] == "cgroup":
            for controller in ("cpu", "cpuset"):
                if controller in tail[2].split(","):
                    mounts.setdefault(controller, (Path(fields[4]), fields[3]))
    return mounts


def _cgroup_folders(proc: Path) -> dict[str, list[Path]]:
    """Per controller, this process's cgroup folder and its parents up to the mount: a limit set
    on any of them applies (a job's quota is often on the job, not on the step or task below it)."""
    paths: dict[str, str] = {}
    for line in (_text(proc / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in ([""] if parts[0] == "0" and not parts[1] else parts[1].split(",")):
                paths[controller] = parts[2]
    folders = {}
    for controller, (mount, root) in _cgroup_mounts(proc).items():
        path = paths.get(controller)
        if path is None:
            continue
        if root != "/" and (path + "/").startswith(root.rstrip("/") + "/"):
            path = path[len(root.rstrip("/")):]  # the mount shows the process's cgroup at its root
        folder = mount / path.lstrip("/")
        folders[controller] = [f for f in (folder, *folder.parents) if f == mount or mount in f.parents]
    return folders


def cgroup_cores(proc: Path = PROC_SELF) -> tuple[float | None, int | None]:
    """(CPU quota in cores, cpuset size) of this process's cgroup, None where there is none: v2
    ``cpu.max`` ("max 100000" or "150000 100000") and ``cpuset.cpus.effective``; v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none) and ``cpuset.effective_cpus``."""
    folders = _cgroup_folders(proc)
    quotas = []
    for folder in folders.get("", []):
        quota, _, period = (_text(folder / "cpu.max") or "").partition(" ")
        quotas.append(_quota_cores(quota, period.strip() or "100000"))  # the period may be left out
    for folder in folders.get("cpu", []):
        quotas.append(_quota_cores(_text(folder / "cpu.cfs_quota_us"), _text(folder / "cpu.cfs_period_us")))
    quotas = [q for q in quotas if q is not None]
    return (min(quotas) if quotas else None), _cpuset_size(folders)


def _quota_cores(quota: str | None, period: str | None) -> float | None:
    """quota / period in cores; None for no limit ("max", -1) or text that is not one."""
    if quota and period and quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return None


def _cpuset_size(folders: dict[str, list[Path]]) -> int | None:
    """The cores of this process's cpuset (its own folder's effective list already reflects its
    parents'); v2 first, then v1."""
    candidates = [(folders.get("", []), ("cpuset.cpus.effective",)),
                  (folders.get("cpuset", []), ("cpuset.effective_cpus", "cpuset.cpus"))]
    for chain, names in candidates:
        for name in names:
            size = _cpu_list_size(_text(chain[0] / name) or "") if chain else None
            if size is not None:
                return size
    return None


def usable_cpus(proc: Path = PROC_SELF) -> int:
    """The cores of this host that the job may use: the machine's, capped by the cgroup's cpuset
    and CPU quota (a container or a batch job's allocation), never by this rank's own affinity.
    Rank 0 compares it with the ranks on the host to tell when they outnumber its cores (the
    what-if replay assumes they do not); a launcher that binds each rank to one core (Open MPI
    does for 2 ranks) would otherwise make every host look like one core per rank."""
    cores = os.cpu_count() or 1
    try:
        quota, cpuset = cgroup_cores(proc)
    except (OSError, ValueError, ZeroDivisionError):  # an unreadable cgroup: the machine's cores
        return cores
    if cpuset is not None:
        cores = min(cores, cpuset)
    if quota is not None:
        cores = min(cores, max(1, int(quota)))  # 1.5 cores cannot run 2 busy ranks: it counts as 1
    return cores


def affinity_cpus() -> int:
    """The cores this rank may run on (its affinity: one when the launcher binds it to a core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.cache
def _insert_sql(size: int) -> str:
    """The INSERT of up to ``size`` rows, bound as: the step, ``size`` rows of four values, then how
    many of them are rows (the others pad: powers of two, so a few cached statements serve every
    batch). Rows keep their order, so they get the rowids executemany would give them."""
    values = ",".join(["(?,?,?,?)"] * size)
    return (f"INSERT INTO distprof_ranges SELECT column1, column2, column3, column4, ? FROM (VALUES {values}) "
            "LIMIT ?")


def _rows_per_statement(db: sqlite3.Connection) -> int:
    """The largest power of two of rows that fits this SQLite's bound-parameter limit (32,766 since
    3.32, 999 before), at most ROWS_PER_STATEMENT."""
    try:
        limit = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    except AttributeError:  # Python 3.10 has no getlimit
        limit = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
    rows = (limit - 2) // ROW_FIELDS
    return min(ROWS_PER_STATEMENT, 1 << (rows.bit_length() - 1))


def _one_file(db: sqlite3.Connection) -> None:
    """Back to a rollback journal once the WAL is folded in: the finished file is one file, and no
    reader's open (even a read-only one, which cannot clean up) makes -wal/-shm beside it. SQLite
    refuses at once while another connection has the file (a live view, rank 0 reading it): then
    that reader, read-write, removes -wal/-shm when it closes last."""
    with contextlib.suppress(sqlite3.OperationalError):
        db.execute("PRAGMA journal_mode=DELETE")


def settle(path: Path) -> None:
    """A rank file whose process was killed (``distprof demo --hang`` ends its job so) left as
    close() leaves one: its WAL folded in, no -wal/-shm beside it. Best effort, nothing if absent."""
    if not path.is_file():
        return
    with contextlib.suppress(sqlite3.Error), \
            contextlib.closing(sqlite3.connect(path.resolve().as_uri() + "?mode=rw", uri=True, timeout=1.0)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _one_file(db)


# what the disk or the file system does to a write (full, gone, an I/O error, a size limit): the rank trains
# on unrecorded; any other error (a row the schema refuses) is distprof's own bug, raised as such
UNWRITABLE = (sqlite3.OperationalError, OSError)


class Collector:
    """Records the ranges of one rank into ``path`` (the native file, schema above)."""

    def __init__(self, path: str | Path, rank: int, world_size: int) -> None:
        self.path = Path(path)
        self.failed: str | None = None  # why writing stopped (a full disk): the rank trains on unprofiled
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            stale.unlink(missing_ok=True)
        self.rank = rank
        self.world_size = world_size
        self.step = 0
        self.rows: list[tuple[int, int, int, int]] = []
        self._retired: list[tuple[int, int, int, int]] = []
        self._retired_written = 0
        self._names_written = 0
        self._threads_written = 0
        self._lock = threading.Lock()  # the connection: the writer thread, set_meta, record_clock
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # commits survive a process crash
        self._db.executescript(NATIVE_SCHEMA)
        self._chunk = _rows_per_statement(self._db)
        self._padding = (None,) * (ROW_FIELDS * self._chunk)
        self.set_meta(schema_version=SCHEMA_VERSION, rank=rank, world_size=world_size, pid=os.getpid(),
                      hostname=socket.gethostname(), cpus=usable_cpus(), affinity=affinity_cpus(),
                      clock="time.perf_counter_ns (CLOCK_MONOTONIC)",
                      wall_minus_clock_ns=time.time_ns() - clock_ns(), started_wall_ns=time.time_ns(), complete=0,
                      load_1m_start=_load_1m(), launcher_ids=json.dumps(launcher_ids(os.environ)))
        self.active = False
        # process CPU time over wall time since the collector started: the Device Summary's
        # CPU(Process) row (up to cores x 100 %); written at every flush, so a crash keeps it
        self._cpu_start_ns, self._wall_start_ns = time.process_time_ns(), clock_ns()
        # the writer thread's handshake: ``_free`` is held from a hand-over until its batch is
        # committed; ``_ready`` is released to wake the writer for the batch in ``_handed``
        self._free, self._ready = threading.Lock(), threading.Lock()
        self._ready.acquire()
        self._handed: tuple | None = None
        self._writer_error: BaseException | None = None
        self._writing = True  # False once close() stopped the writer: later writes happen on the caller
        self._writer = threading.Thread(target=self._write_loop, name=f"distprof-writer-{rank}", daemon=True)
        self._writer.start()

    def activate(self) -> None:
        """Route every range of this process into this collector."""
        self.active = True
        ROUTE.append = self.rows.append

    def deactivate(self) -> None:
        self.active = False
        ROUTE.append = None

    def record(self, name: str, category: str, kind: str, start_ns: int, end_ns: int) -> None:
        """Add a range measured elsewhere (ProfileStep, Dataloader) on the calling thread."""
        self.record_id(NAMES.id_of(name, category, kind), start_ns, end_ns)

    def record_id(self, name_id: int, start_ns: int, end_ns: int) -> None:
        """record() by the name's id (``NAMES.id_of``), for a caller that keeps it: the step
        boundary's ProfileStep, where the training thread pays every call, cold after its wait for
        the GPU. The thread's name is registered once."""
        tid = threading.get_native_id()
        if tid not in THREAD_NAMES:
            THREAD_NAMES[tid] = threading.current_thread().name
        self.rows.append((start_ns, end_ns, tid, name_id))

    def add_launcher_id(self, key: str, value: str) -> None:
        """One more id of this run beside the launcher's (``launcher_ids``, a JSON object of texts)."""
        self.set_meta(launcher_ids=json.dumps({**launcher_ids(os.environ), key: value}))

    def set_meta(self, **values) -> None:
        if self.failed:
            return
        try:
            with self._lock:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO distprof_meta VALUES (?, ?)",
                                     [(k, str(v)) for k, v in values.items()])
                self._db.execute("COMMIT")
        except UNWRITABLE as error:
            self._fail(error)

    def record_clock(self, phase: str, offset_ns: int, rtt_ns: int) -> None:
        if self.failed:
            return
        try:
            with self._lock:
                self._db.execute("INSERT INTO distprof_clock VALUES (?, ?, ?)", (phase, int(offset_ns), int(rtt_ns)))
        except UNWRITABLE as error:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        """Writing failed (a full disk, the file gone): recording stops, once said in one line naming the
        file; the steps committed before stay in it. Never raised on the training thread: the profiler is
        not the job's to break."""
        if self.failed:
            return
        self.deactivate()
        self.rows = []
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        self.failed = (f"rank {self.rank}: recording stopped at step {self.step}: cannot write {self.path} "
                       f"({reason}); the steps before it are in the file")
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        sys.stderr.write(f"distprof: warning: {self.failed}\n")
        sys.stderr.flush()

    # -- step boundaries: hand-over to the writer thread ---------------------------------------
    def submit(self) -> int:
        """End a step on the training thread: hand its rows to the writer thread and return before
        they are written. Waits only while the previous step is still being written (at most one
        step is ever in flight, so a crash loses at most that one); returns the rows handed over."""
        if self.failed:
            self.rows.clear()
            return 0
        if not self._claim():  # no writer thread (gone): write here, as flush does
            return self._guarded_write()
        if self.failed:  # the writer met it with the previous batch
            self._free.release()
            return 0
        batch = self._handed = self._take()
        self._ready.release()
        return len(batch[0])

    def flush(self) -> int:
        """Write the rows recorded since the last hand-over now, on the calling thread, and commit;
        returns the rows written."""
        writer = self._claim()
        try:
            return 0 if self.failed else self._guarded_write()
        finally:
            if writer:
                self._free.release()

    def _guarded_write(self) -> int:
        try:
            return self._write(self._take())
        except UNWRITABLE as error:
            self._fail(error)
            return 0

    def _take(self) -> tuple[list, int]:
        """Swap in a fresh row list; the batch to write: (rows, step)."""
        rows, self.rows = self.rows, []
        if self.active:
            ROUTE.append = self.rows.append
        return rows, self.step

    def _claim(self) -> bool:
        """Wait until the writer has committed what it was handed, and hold it idle (``_free``).
        False when it is gone (stopped, or a thread that died): the caller writes.
        Raises, once, the error the writer met with the previous batch, as a flush did."""
        if not self._writing:
            return False
        if not self._free.acquire(blocking=False):
            while not self._free.acquire(timeout=WRITER_POLL_S):
                if not self._writer.is_alive():
                    return False
        error, self._writer_error = self._writer_error, None
        if isinstance(error, UNWRITABLE):
            self._fail(error)
        elif error is not None:
            self._free.release()
            raise error
        return True

    def _write_loop(self) -> None:
        """The writer thread: one batch at a time; ``None`` handed over stops it (close)."""
        while True:
            self._ready.acquire()
            batch, self._handed = self._handed, None
            try:
                if batch is None:
                    return
                self._write(batch)
            except BaseException as error:  # noqa: BLE001 - raised on the training thread at its next step
                self._writer_error = error
            finally:
                self._free.release()

    def _write(self, batch: tuple[list, int]) -> int:
        """Commit one batch, with the rows that reached the previous batch's list after it was
        written, and the process's CPU time so far (all threads: measured here as well as on the
        training thread); returns the rows written."""
        rows, step = batch
        with self._lock:
            cpu_ns, elapsed_ns = time.process_time_ns() - self._cpu_start_ns, clock_ns() - self._wall_start_ns
            count = len(rows)  # rows appended from here on are the next write's late ones
            todo = self._retired[self._retired_written:] + rows[:count]
            names, threads = NAMES.items(), list(THREAD_NAMES.items())
            self._db.execute("BEGIN")
            try:
                if len(names) > self._names_written or len(threads) > self._threads_written:
                    self._db.executemany("INSERT OR IGNORE INTO distprof_names VALUES (?, ?, ?, ?, ?, ?, ?)", names)
                    self._db.executemany("INSERT OR IGNORE INTO distprof_threads VALUES (?, ?)", threads)
                self._insert_rows(todo, int(step))
                self._db.execute(INSERT_CPU, (str(cpu_ns), str(elapsed_ns)))
                self._db.execute("INSERT INTO distprof_host VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", host_sample(step))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._retired, self._retired_written = rows, count
            self._names_written, self._threads_written = len(names), len(threads)
            return len(todo)

    def _insert_rows(self, rows: list, step: int) -> None:
        """Up to ``self._chunk`` rows a statement, padded to a power of two (_insert_sql)."""
        for first in range(0, len(rows), self._chunk):
            part = rows[first:first + self._chunk]
            size = 1 << max(4, (len(part) - 1).bit_length())
            params = [step, *itertools.chain.from_iterable(part)]
            if len(params) != 1 + ROW_FIELDS * len(part):  # not all 4-tuples: executemany says which
                self._db.executemany(f"INSERT INTO distprof_ranges VALUES (?, ?, ?, ?, {step})", part)
                continue
            params.extend(self._padding[:ROW_FIELDS * (size - len(part))])
            params.append(len(part))
            self._db.execute(_insert_sql(size), params)

    def close(self) -> None:
        """Write every row, stop the writer thread, mark the file complete and close it."""
        self.flush()
        self.flush()  # picks up rows that raced with the previous swap
        self._stop_writer()
        self.deactivate()
        self.set_meta(complete=1, load_1m_stop=_load_1m())
        with self._lock:
            try:
                if not self.failed:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    _one_file(self._db)
            except UNWRITABLE as error:
                self._fail(error)
            finally:
                self._db.close()

    def _stop_writer(self) -> None:
        """Hand the writer ``None`` and join it (bounded: it is idle, holding no lock)."""
        if self._claim():
            self._writing = False
            self._handed = None
            self._ready.release()
        if self._writer is not threading.current_thread():
            self._writer.join(timeout=WRITER_POLL_S)
