"""Moving results between processes, nothing else: MPI and torch.distributed gathers to rank 0,
world detection (MPI or launcher variables), polling rank files when there is no process group,
and spreading input files over merge workers.

Only compact per-rank results (results.RankResult) travel, so memory at rank 0 grows with
ranks x steps, not with events.
"""

from __future__ import annotations


def gather_workers(comm, reduced: list, warnings: list) -> tuple[list, list] | None:
    """Merge workers' (reduced, warnings) lists gathered to worker 0; None on the other workers,
    the inputs unchanged without a multi-worker ``comm``."""
    if comm is None or comm.Get_size() <= 1:
        return reduced, warnings
    parts = comm.gather((reduced, warnings), root=0)
    if comm.Get_rank() != 0:
        return None
    return [item for part in parts for item in part[0]], [item for part in parts for item in part[1]]


def gather_to_root(comm, result):
    """MPI gather of the compact per-rank results; rank 0 gets the list, others None."""
    return comm.gather(result, root=0)


def torch_group_initialized() -> bool:
    """True when the job imported torch.distributed and initialized its default process group
    (looked up in sys.modules: a job without torch never imports it here)."""
    import sys
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def gather_torch(result):
    """torch.distributed gather_object of the compact per-rank results over the job's default
    process group (gloo or NCCL; with NCCL, torch.cuda.set_device must name this rank's GPU);
    rank 0 gets the list, others None."""
    import torch.distributed as dist
    rank = dist.get_rank()
    results = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(result, results, dst=0)
    return results


_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS")
_MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def mpi_world():
    """COMM_WORLD when this process runs under an MPI launcher or MPI is already initialized,
    else None (no MPI import, so a torchrun or single process never starts MPI)."""
    import os
    import sys
    if "mpi4py.MPI" not in sys.modules and not any(v in os.environ for v in _MPI_LAUNCH_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return None
    return MPI.COMM_WORLD


def detect_world(environ=None) -> tuple[int, int, str]:
    """(rank, world size, where it came from): MPI when initialized with more than one rank, else
    launcher variables (a torchrun job that imports mpi4py gets MPI's singleton world of size 1:
    RANK/WORLD_SIZE say more), else a single process."""
    import os
    comm = mpi_world() if environ is None else None
    if comm is not None and comm.Get_size() > 1:
        return comm.Get_rank(), comm.Get_size(), "MPI"
    environ = os.environ if environ is None else environ
    for rank_var in _RANK_VARS:
        if rank_var in environ:
            rank = _env_int(environ, rank_var, 0, MAX_RANKS - 1)
            size_var = next((v for v in _SIZE_VARS if v in environ), None)
            size = _env_int(environ, size_var, rank + 1, MAX_RANKS) if size_var else rank + 1
            return rank, size, f"env {rank_var}"
    return 0, 1, "single process"


MAX_RANKS = 1 << 20  # a world above this is a corrupt variable (WORLD_SIZE=1e9 polled past merge_timeout_s)


def _env_int(environ, name: str, low: int, high: int) -> int:
    """An integer launcher variable within [low, high]; else one ConfigError line naming it."""
    from .config import ConfigError
    text = str(environ[name]).strip()
    if not (text.lstrip("-").isdigit() and len(text) < 12 and low <= int(text) <= high):
        raise ConfigError(f"environment variable {name}={text[:40]!r}: expected an integer from {low} to {high}")
    return int(text)


def results_from_files(rank_file, world_size: int, timeout_s: float, own_result, load) -> list:
    """Aggregation without MPI (e.g. torchrun without a process group), at rank 0: every rank
    closes its native file (``rank_file(rank)``); wait (bounded) until the others are complete and
    ``load(path)`` each (reduce it to a RankResult). Ranks still missing at the deadline give a
    partial result, named in the warnings by combine."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_s
    results = {0: own_result}
    while len(results) < world_size and time.monotonic() < deadline:
        for rank in range(world_size):
            path = rank_file(rank)
            if rank in results or not path.exists():
                continue
            try:
                with sqlite3.connect(path) as db:
                    complete = db.execute("SELECT value FROM distprof_meta WHERE key='complete'").fetchone()
            except sqlite3.DatabaseError:
                continue
            if complete and complete[0] == "1":
                results[rank] = load(path)
        time.sleep(0.05)
    return list(results.values())


def assign_files(sizes: list[int], workers: int) -> list[list[int]]:
    """Spread files over workers so each gets about the same bytes: largest first, each to the
    least loaded worker. Returns, per worker, its file indices in input order."""
    import heapq
    load = [(0, worker) for worker in range(workers)]
    shares: list[list[int]] = [[] for _ in range(workers)]
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, worker = heapq.heappop(load)
        shares[worker].append(index)
        heapq.heappush(load, (total + sizes[index], worker))
    return [sorted(share) for share in shares]


def busy_elsewhere() -> float:
    """Processes running on this machine right now besides this one. Linux: the running count
    of /proc/loadavg, an instant view (the 1-minute load lags: a job that just ended, such as a
    previous merge, would still count); elsewhere the 1-minute load less this process."""
    import os
    try:
        with open("/proc/loadavg") as loadavg:
            return max(0, int(loadavg.read().split()[3].split("/")[0]) - 1)
    except (OSError, IndexError, ValueError):
        return max(0.0, os.getloadavg()[0] - 1.0)


def local_workers(files: int, environ=None) -> int:
    """Processes for reading ``files`` rank files on this machine: one per free core (cores less
    the processes running elsewhere), at most one per file, 1 without fork.
    ``DISTPROF_READ_WORKERS=N`` sets it (1: always one after the other)."""
    import os
    environ = os.environ if environ is None else environ
    if files < 2 or not hasattr(os, "fork"):
        return 1
    if environ.get("DISTPROF_READ_WORKERS"):
        return max(1, min(files, int(environ["DISTPROF_READ_WORKERS"])))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, int(cores - busy_elsewhere() + 0.5)))
