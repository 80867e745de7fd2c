"""Per-rank recorder and its native file: rows of finished ranges, flushed to SQLite at every
step boundary so a rank that crashes keeps every completed step.

The hot path (annotate.Range.__exit__) appends one ``(start_ns, end_ns, tid, name_id)``
tuple to the current row list: a single C-level call, atomic under the GIL, so threads need no
lock. Measured in benchmarks/collector_overhead.py: storing into preallocated array columns
per range costs 150-250 ns more than this, which would break the "no dearer than a bare
nvtx.annotate" budget; the rows become int64 columns when they are read back.

A flush swaps in a fresh list and writes the old one in one ``executemany`` transaction. The
swapped-out list is kept for one more flush, so a writer that fetched the old list's
``append`` just before the swap still lands on disk.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

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
"""

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


class Collector:
    """Records the ranges of one rank into ``path`` (the native file, schema above)."""

    def __init__(self, path: str | Path, rank: int, world_size: int) -> None:
        self.path = Path(path)
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
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # commits survive a process crash
        self._db.executescript(NATIVE_SCHEMA)
        self.set_meta(schema_version=SCHEMA_VERSION, rank=rank, world_size=world_size, pid=os.getpid(),
                      hostname=socket.gethostname(), cpus=usable_cpus(), affinity=affinity_cpus(),
                      clock="time.perf_counter_ns (CLOCK_MONOTONIC)",
                      wall_minus_clock_ns=time.time_ns() - clock_ns(), started_wall_ns=time.time_ns(), complete=0,
                      load_1m_start=_load_1m())
        self.active = False
        # process CPU time over wall time since the collector started: the Device Summary's
        # CPU(Process) row (up to cores x 100 %); written at every flush, so a crash keeps it
        self._cpu_start_ns, self._wall_start_ns = time.process_time_ns(), clock_ns()

    def activate(self) -> None:
        """Route every range of this process into this collector."""
        self.active = True
        ROUTE.append = self.rows.append

    def deactivate(self) -> None:
        self.active = False
        ROUTE.append = None

    def record(self, name: str, category: str, kind: str, start_ns: int, end_ns: int) -> None:
        """Add a range measured elsewhere (ProfileStep, Dataloader) on the calling thread."""
        tid = threading.get_native_id()
        THREAD_NAMES.setdefault(tid, threading.current_thread().name)
        self.rows.append((start_ns, end_ns, tid, NAMES.id_of(name, category, kind)))

    def set_meta(self, **values) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO distprof_meta VALUES (?, ?)",
                                 [(k, str(v)) for k, v in values.items()])
            self._db.execute("COMMIT")

    def record_clock(self, phase: str, offset_ns: int, rtt_ns: int) -> None:
        with self._lock:
            self._db.execute("INSERT INTO distprof_clock VALUES (?, ?, ?)", (phase, int(offset_ns), int(rtt_ns)))

    def flush(self) -> int:
        """Write the rows recorded since the last flush and commit; returns rows written."""
        with self._lock:
            rows, self.rows = self.rows, []
            if self.active:
                ROUTE.append = self.rows.append
            late = self._retired[self._retired_written:]  # appended to the old list after its flush
            self._db.execute("BEGIN")
            names = NAMES.items()
            if len(names) > self._names_written:
                self._db.executemany("INSERT OR IGNORE INTO distprof_names VALUES (?, ?, ?, ?, ?, ?, ?)", names)
                self._names_written = len(names)
            self._db.executemany("INSERT OR IGNORE INTO distprof_threads VALUES (?, ?)",
                                 list(THREAD_NAMES.items()))
            insert = f"INSERT INTO distprof_ranges VALUES (?, ?, ?, ?, {int(self.step)})"
            self._db.executemany(insert, late)
            self._db.executemany(insert, rows)
            self._db.executemany("INSERT OR REPLACE INTO distprof_meta VALUES (?, ?)",
                                 [("process_cpu_ns", str(time.process_time_ns() - self._cpu_start_ns)),
                                  ("elapsed_ns", str(clock_ns() - self._wall_start_ns))])
            self._db.execute("COMMIT")
            self._retired, self._retired_written = rows, len(rows)
            return len(rows) + len(late)

    def close(self) -> None:
        self.flush()
        self.flush()  # picks up rows that raced with the previous swap
        self.deactivate()
        self.set_meta(complete=1, load_1m_stop=_load_1m())
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()
