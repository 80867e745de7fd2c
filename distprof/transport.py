"""Moving results between processes, nothing else: the bounded stop exchange to rank 0 (MPI
messages or torch.distributed's store), merge workers' gather,
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


def torch_group_initialized() -> bool:
    """True when the job imported torch.distributed and initialized its default process group
    (looked up in sys.modules: a job without torch never imports it here)."""
    import sys
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


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
    import contextlib
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_s
    results = {0: own_result}
    while len(results) < world_size and time.monotonic() < deadline:
        for rank in range(world_size):
            if time.monotonic() > deadline:  # a pass over many ranks must not run past the deadline
                break
            path = rank_file(rank)
            if rank in results or not path.exists():
                continue
            try:
                with contextlib.closing(sqlite3.connect(path)) as db:
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


def files_of(paths: list, worker: int, workers: int) -> list[int]:
    """The indices of the files that MPI worker ``worker`` of ``workers`` reads (assign_files by size)."""
    return assign_files([path.stat().st_size if path.exists() else 0 for path in paths], workers)[worker]


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


def read_workers_setting(environ=None) -> int | None:
    """``DISTPROF_READ_WORKERS`` as a count, None when unset; anything else is a ConfigError naming
    the variable (int()'s own ValueError named neither it nor what to set)."""
    import os

    from .config import ConfigError
    text = (os.environ if environ is None else environ).get("DISTPROF_READ_WORKERS", "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"DISTPROF_READ_WORKERS={text[:40]!r}: expected a number of processes that read the "
                          "rank files (e.g. 4; 1: one file after the other); unset it for one per free "
                          "core") from None


def local_workers(files: int, environ=None) -> int:
    """Processes for reading ``files`` rank files on this machine: one per free core (cores less
    the processes running elsewhere), at most one per file, 1 without fork.
    ``DISTPROF_READ_WORKERS=N`` sets it (1: always one after the other)."""
    import os
    environ = os.environ if environ is None else environ
    if files < 2 or not hasattr(os, "fork"):
        return 1
    chosen = read_workers_setting(environ)
    if chosen is not None:
        return max(1, min(files, chosen))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, int(cores - busy_elsewhere() + 0.5)))


# -- the stop of a live session: bounded, and a failed rank never enters a collective -------------

MISSING = object()   # what ``take`` returns when nothing came before the deadline
FAIL_GRACE_S = 3.0   # how long a failed rank waits for rank 0 to hear of it before it lets the error go on
_TAGS = {"status": 7311, "plan": 7312, "result": 7313, "done": 7314}


class MpiLink:
    """Point-to-point messages over MPI, each receive bounded by a deadline (iprobe polling): no
    collective, so a rank that failed or never comes cannot hold the others."""

    def __init__(self, comm) -> None:
        self.comm = comm
        self.pending: list = []
        self._sent: list[bytes] = []  # each buffer stays alive until its send completes (a few, small)

    def put(self, kind: str, obj, dest: int) -> None:
        from mpi4py import MPI

        from .wire import encode_stop
        data = encode_stop(kind, obj)
        self._sent.append(data)
        self.pending.append(self.comm.Isend([data, MPI.BYTE], dest=dest, tag=_TAGS[kind]))

    def take(self, kind: str, source: int, deadline: float):
        """The next message of ``kind`` from ``source`` as bytes, decoded into its type (wire.STOP_TYPES):
        a message that is not of it is dropped, as if never sent."""
        import time

        from mpi4py import MPI
        status = MPI.Status()
        while True:
            if self.comm.Iprobe(source=source, tag=_TAGS[kind], status=status):
                data = bytearray(status.Get_count(MPI.BYTE))
                self.comm.Recv([data, MPI.BYTE], source=source, tag=_TAGS[kind])
                got = _decoded(kind, bytes(data))
                if got is not MISSING:
                    return got
            if time.monotonic() >= deadline:
                return MISSING
            time.sleep(0.002)


def _decoded(kind: str, data: bytes):
    """A stop message's value, MISSING where the bytes are not of its type."""
    import msgspec

    from .wire import decode_stop
    try:
        return decode_stop(kind, data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return MISSING


class StoreLink:
    """The same messages through torch.distributed's key-value store (TCPStore under torchrun):
    bounded waits, no collective on the process group the job's own collectives use."""

    _session = 0

    def __init__(self, store, rank: int) -> None:
        StoreLink._session += 1  # every rank opens its sessions in the same order
        self.store, self.prefix = store, f"distprof/stop/{StoreLink._session}"
        self.rank = rank

    def put(self, kind: str, obj, dest: int) -> None:
        from .wire import encode_stop
        self.store.set(f"{self.prefix}/{kind}/{self.rank}-{dest}", encode_stop(kind, obj))

    def take(self, kind: str, source: int, deadline: float):
        """The message of ``kind`` from ``source``, decoded into its type (wire.STOP_TYPES), never unpickled:
        any client of the store can write its keys. Bytes not of that type are as nothing received."""
        import time
        key = f"{self.prefix}/{kind}/{source}-{self.rank}"
        while True:
            if self.store.check([key]):
                return _decoded(kind, self.store.get(key))
            if time.monotonic() >= deadline:
                return MISSING
            time.sleep(0.005)


def torch_store_link(rank: int) -> StoreLink | None:
    """A StoreLink on the job's default process group's store, or None."""
    if not torch_group_initialized():
        return None
    import torch.distributed.distributed_c10d as c10d
    try:
        return StoreLink(c10d._get_default_store(), rank)
    except (AttributeError, RuntimeError, ValueError):
        return None


def stop_exchange(link, rank: int, size: int, failure: str | None, timeout_s: float, ready, payload):
    """The stop of a live session, rank 0 collecting. Every rank first tells rank 0 whether it
    failed. A failed rank sends nothing more, waits at most ``FAIL_GRACE_S`` for rank 0's word and
    returns, so its error goes on as it would without distprof. Rank 0 waits at most ``timeout_s``
    for the others, then sends the ranks that came the list of the ones that take part; those run
    ``ready(participants)`` (the stop clock sample) and send ``payload()`` to rank 0.

    Returns, on rank 0: ({rank: payload}, {rank: failure line}, [ranks it gave up on]); else None.
    A failed rank 0 tells the others there is no summary (they keep their files). A failed rank
    that rank 0 answered waits (``timeout_s``) for ``tell_done``, so its error does not end the job
    before the summary that names it is written."""
    import time
    start = time.monotonic()
    if rank != 0:
        link.put("status", failure, 0)
        if failure is not None:  # rank 0 at the stop answers at once; then let it write its summary
            if link.take("plan", 0, start + min(FAIL_GRACE_S, timeout_s)) is not MISSING:
                link.take("done", 0, start + timeout_s)
            return None
        # rank 0 gives up on the others after timeout_s: a rank that arrived waits longer than that for
        # its answer, or both could time out at once and rank 0 then wait for it in the clock sample
        plan = link.take("plan", 0, start + 2 * timeout_s + FAIL_GRACE_S)
        if plan is MISSING or not plan:
            return None
        ready(plan)
        link.put("result", payload(), 0)
        return None
    peers = list(range(1, size))
    if failure is not None:
        for peer in peers:
            link.put("plan", [], peer)
        return None
    statuses = _statuses(link, peers, start + timeout_s)
    participants = [peer for peer, line in statuses.items() if line is None]
    for peer in peers:  # the ones it gave up on hear at once, when they come, that there is no summary
        link.put("plan", participants if peer in statuses else [], peer)
    ready(participants)
    parts = {0: payload()}
    deadline = time.monotonic() + timeout_s
    for peer in participants:  # one per rank: its compact result
        got = link.take("result", peer, deadline)
        if got is not MISSING:
            parts[peer] = got
    failed = {peer: line for peer, line in statuses.items() if line is not None}
    gave_up = [peer for peer in peers if peer not in statuses or (peer in participants and peer not in parts)]
    return parts, failed, gave_up


def tell_done(link, ranks) -> None:
    """Rank 0: the summary is written; the failed ranks waiting for it may let their errors go on."""
    for rank in ranks:
        link.put("done", True, rank)


def _statuses(link, peers: list[int], deadline: float) -> dict:
    """Rank 0: each peer's word at the stop (None: finished, else its failure line), until all have
    spoken or the deadline passes."""
    import time
    statuses: dict = {}
    while True:
        for peer in peers:  # one per rank that has not spoken yet
            if peer not in statuses:
                got = link.take("status", peer, 0.0)
                if got is not MISSING:
                    statuses[peer] = got
        if len(statuses) == len(peers) or time.monotonic() >= deadline:
            return statuses
        time.sleep(0.005)


def drain(link, seconds: float = 1.0) -> None:
    """Let this rank's sent messages leave before the process goes on (MPI requests), bounded."""
    import time
    pending = getattr(link, "pending", [])
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        pending[:] = [request for request in pending if not request.Test()]
        time.sleep(0.002)


# -- the live view across nodes: rank 0's address at the start, and signed frames ---------------

_LIVE_SESSION = [0]  # every rank makes its Profilers in the same order: the store keys of one session match


def live_rendezvous(comm, rank: int, size: int, node: str, offer, timeout_s: float) -> tuple[dict | None, bool]:
    """Once, at the start of a live session: rank 0's view offer (``{node, addresses, port, token}``,
    or ``{node}`` when it takes no other node) and whether this rank starts its node's sender.
    ``offer(remote)`` runs on rank 0 only and starts its view; ``remote`` says whether other nodes
    exist (None: not known before the offer, as with the store). Under MPI the lowest rank of each
    node other than rank 0's leads it; with the torch store the first of it to claim the node does.
    Without either (one process, or no process group): rank 0's view alone, on its own host."""
    if comm is not None and size > 1:
        nodes = comm.allgather(node)  # a few bytes per rank, once: the job's ranks are all at the start
        remote = any(other != nodes[0] for other in nodes)
        made = None
        if rank == 0:
            try:
                made = offer(remote)
            except Exception as error:  # noqa: BLE001 - the others wait in the bcast: they hear "no view"
                import sys
                sys.stderr.write(f"distprof: warning: live view not started ({error}); training goes on\n")
                made = {"node": node}
        if remote:
            made = comm.bcast(made, root=0)
        return made, remote and node != nodes[0] and nodes.index(node) == rank
    store = _default_store() if size > 1 else None
    if store is None:
        return (offer(False) if rank == 0 else None), False
    return _store_rendezvous(store, rank, node, offer, timeout_s)


def _default_store():
    """The key-value store of the job's default process group, or None."""
    if not torch_group_initialized():
        return None
    import torch.distributed.distributed_c10d as c10d
    try:
        return c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _store_rendezvous(store, rank: int, node: str, offer, timeout_s: float) -> tuple[dict | None, bool]:
    """live_rendezvous through the torch store: rank 0 publishes its offer; the others wait for it
    (bounded, polled: the store's own wait logs a warning per timeout) and claim their node
    (compare_set: one rank per node wins, whatever the order they come in)."""
    import json
    import time
    _LIVE_SESSION[0] += 1
    prefix = f"distprof/live/{_LIVE_SESSION[0]}"
    if rank == 0:
        made = offer(None)
        store.set(f"{prefix}/view", json.dumps(made))
        return made, False
    deadline = time.monotonic() + timeout_s
    while not store.check([f"{prefix}/view"]):
        if time.monotonic() >= deadline:
            return None, False
        time.sleep(0.02)
    made = json.loads(store.get(f"{prefix}/view"))
    if not made or node == made.get("node"):
        return made, False
    return made, store.compare_set(f"{prefix}/leader/{node}", "", str(rank)) == str(rank).encode()


def view_addresses(configured: str | None) -> list[str]:
    """Where the other nodes may reach rank 0's view, to be tried in turn: ``configured`` alone when
    given (config live.view_addr), else this host's non-loopback addresses (its name resolved, and the
    interface that routes to MASTER_ADDR when set), its name, then loopback (ranks on this host)."""
    import ipaddress
    import os
    import socket
    if configured:
        return [configured]
    host = socket.gethostname()
    found: list[str] = []
    try:
        found += [info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except OSError:
        pass
    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((master, 9))  # UDP: sends nothing, only picks the outgoing interface
                found.append(probe.getsockname()[0])
        except OSError:
            pass
    outward = [a for a in dict.fromkeys(found) if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    return list(dict.fromkeys([*outward, host, "127.0.0.1"]))


FRAME_LENGTH = 4          # bytes of a frame's length prefix (big endian)
FRAME_MAC = 32            # bytes of its HMAC-SHA256
MAX_FRAME_BYTES = 64 << 20  # a frame larger than this, packed or unpacked, is not a sender's: connection closed
FIRST_FRAME_BYTES = 64 << 10  # a connection's first frame (its hello) is small: no more is buffered unsigned


def pack_frame(frame, token: bytes) -> bytes:
    """One frame for rank 0's view (a wire.Frame, or a dict of its fields): length, HMAC-SHA256 of the
    payload under the job's token, payload (msgpack, zlib). The view decodes it into a Frame only: a
    reader of the store that learnt the token can at most send wrong numbers, never code."""
    import hashlib
    import hmac
    import zlib

    from .wire import Frame, encode_frame
    payload = zlib.compress(encode_frame(frame if isinstance(frame, Frame) else Frame(**frame)), 6)
    return (FRAME_MAC + len(payload)).to_bytes(FRAME_LENGTH, "big") + \
        hmac.new(token, payload, hashlib.sha256).digest() + payload


def unpack_frames(buffer: bytearray, token: bytes, first_max: int = MAX_FRAME_BYTES) -> tuple[list, bool]:
    """The complete frames at the start of ``buffer`` (removed from it), each as (wire.Frame, bytes on the
    wire); False as second item when one is too large (the first over ``first_max``), not signed with
    ``token``, or not a Frame: the caller closes the connection."""
    import hashlib
    import hmac
    import zlib

    import msgspec

    from .wire import decode_frame
    out: list = []
    while len(buffer) >= FRAME_LENGTH:
        size = int.from_bytes(buffer[:FRAME_LENGTH], "big")
        if size < FRAME_MAC or size > (MAX_FRAME_BYTES if out else first_max):
            return out, False
        if len(buffer) < FRAME_LENGTH + size:
            break
        mac = bytes(buffer[FRAME_LENGTH:FRAME_LENGTH + FRAME_MAC])
        payload = bytes(buffer[FRAME_LENGTH + FRAME_MAC:FRAME_LENGTH + size])
        del buffer[:FRAME_LENGTH + size]
        if not hmac.compare_digest(mac, hmac.new(token, payload, hashlib.sha256).digest()):
            return out, False
        try:
            inflate = zlib.decompressobj()
            data = inflate.decompress(payload, MAX_FRAME_BYTES)
            if inflate.unconsumed_tail:  # inflates past the bound
                return out, False
            out.append((decode_frame(data), FRAME_LENGTH + size))
        except (zlib.error, msgspec.DecodeError, msgspec.ValidationError):
            return out, False
    return out, True
