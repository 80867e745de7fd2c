"""The rolling view while the job trains (config ``live:``): every K committed steps rank 0 prints
a Distributed Summary of the last K steps, alerts when a rank becomes (or stops being) the
straggler or a figure jumps, and exports Prometheus gauges.

Where it runs: side processes (``python -m distprof.live``), at the lowest priority
(training_first), that read the ranks' native files, which every rank commits at each step in WAL
mode (readable while written). Rank 0 starts
the view; on every other node (config ``live.node``: by default one per host) one rank starts a
sender. Each reduces its own node's ranks, window by window, from their local files
(pipeline.reduce_rank, as the final summary does); a sender ships the compact per-rank results
(not events) to the view over TCP, and the view combines them with its own (pipeline.combine).
The view's address and port go out once at the start, through MPI or the torch store, with a
token that signs every frame (frames are msgpack decoded into wire.Frame, never unpickled).

Not threads: the analysis of one window takes 0.2-0.7 s of Python, and a thread would take that
from the training thread through the GIL, making the rank that runs it the straggler it reports.
The training thread sends nothing and waits for nothing after the start; the side processes take
only CPU time no other process wants (SCHED_IDLE). Their stdin is a pipe from their rank: closed
(the stop, or the rank dying) they finish the complete windows and exit; their failures cost a
warning, never the job, and a rank's crash stays that crash. A rank whose results do not reach a
window (its file behind, or its node's sender gone or too slow) is named as behind once another
rank is a whole window past it (a sent rank: after LAG_S at most); it never holds the view longer.

Limits: windows are whole multiples of K from step 0; without MPI or a torch process group the
view sees only rank 0's host.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from . import outpaths, transport
from .names import printable

LIVE_FILE = "live.json"
POLL_S = 0.1            # how often the view looks at the rank files
PROBE_S = 1.0           # how often a rank file not (yet) found, or another node's, is looked for again
STOP_WAIT_S = 10.0      # at the stop, how long rank 0 waits for the view's last windows
SENDER_STOP_WAIT_S = 5.0  # at the stop, how long a node's leading rank waits for its sender's last windows
FINAL_WAIT_S = 5.0      # at the stop, how long the view waits for the senders' last windows (< STOP_WAIT_S)
START_WAIT_S = 60.0     # at the start (torch store), how long a rank waits for rank 0's view address
MAX_PENDING = 8         # windows ready at once beyond this: the view fell far behind, the older are skipped
STALE_SLACK_NS = 60 * 10**9  # a rank file that started this long before its reader is a previous run's
CONNECT_TIMEOUT_S = 2.0  # a sender's connection attempt to one of the view's addresses
RETRY_S = 2.0           # a sender without a connection tries again at most this often (and reduces nothing)
SEND_TIMEOUT_S = 10.0   # a send the view does not take within this: the connection is dropped
AUTH_TIMEOUT_S = 10.0   # a connection to the view that sent no signed frame by then is closed
HEARTBEAT_S = 1.0       # a sender says its ranks' committed steps this often: the view knows it alive
STALL_S = 15.0          # a node heard nothing from for this long is lost, as if its connection ended
SILENT_S = 3 * HEARTBEAT_S  # a node heard nothing from (no result, no heartbeat) this long: nothing is on its way
AWAKE_S = 1.0           # the view's own polls this close together: it is not starved, and reads what comes
LAG_S = 10.0            # the longest the view waits for a window's results on their way from a node (and,
                        # at its start, for a rank not heard of: the senders start after the view)


# -- every rank's side: start and stop its side process ----------------------------------------


def _received(sock: socket.socket, size: int, state: dict, close) -> bool:
    """Append what a non-blocking socket has now to ``state["buffer"]``: False when there is nothing
    new, or the peer closed or failed (then ``close(sock)``). Both ends of the view read this way:
    the nodes' senders and /metrics scrapers."""
    try:
        data = sock.recv(size)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        data = b""
    if not data:
        close(sock)
        return False
    state["buffer"] += data
    return True

class LiveProcess:
    """A running side process: the view (rank 0) or its node's sender."""

    def __init__(self, process: subprocess.Popen, out: Path, role: str = "view") -> None:
        self.process, self.out, self.role = process, out, role


def _env() -> dict:
    package_parent = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])),
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _spawn(setup: dict, listener: socket.socket | None = None) -> LiveProcess | None:
    """Start ``python -m distprof.live`` with ``setup`` on its stdin (and ``listener``, the view's
    socket for the senders, passed open); None, with one line on stderr, when it cannot start."""
    role = setup.get("role", "view")
    fds = () if listener is None else (listener.fileno(),)
    if listener is not None:
        setup = {**setup, "listen_fd": listener.fileno()}
    try:
        process = subprocess.Popen([sys.executable, "-m", "distprof.live"], stdin=subprocess.PIPE, env=_env(),
                                   close_fds=True, pass_fds=fds,
                                   stdout=subprocess.DEVNULL if role == "sender" else None)
        process.stdin.write((json.dumps(setup) + "\n").encode())
        process.stdin.flush()
    except (OSError, ValueError) as error:
        sys.stderr.write(f"distprof: live {role} not started ({error}); training goes on without it\n")
        return None
    finally:
        if listener is not None:
            listener.close()  # the view holds its own copy
    return LiveProcess(process, Path(setup["out"]), role)


def _listen() -> socket.socket | None:
    """The view's socket for the other nodes' senders: every interface, a port the system picks
    (frames are signed; anything else is closed unread)."""
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=64)
        return socket.create_server(("", 0), backlog=64)
    except OSError:
        return None


def start_rank(rank: int, world_size: int, node: str, template: str, out: Path, config: dict, comm=None,
               quiet: bool = False) -> LiveProcess | None:
    """Every rank at the start of a live session: rank 0 starts the view, the leading rank of each
    other node its sender, the rest nothing. The one exchange (transport.live_rendezvous) happens
    here, at the start; nothing after it runs on the training thread."""
    import secrets
    base = {"out": str(out), "template": str(template), "host": outpaths.host_name(), "node": node,
            "world_size": world_size, "config": config, "started_wall_ns": time.time_ns(), "quiet": quiet}
    views: list[LiveProcess | None] = []

    def offer(remote: bool | None) -> dict:
        listener = _listen() if remote is not False else None
        token = secrets.token_hex(32)
        port = listener.getsockname()[1] if listener is not None else None
        views.append(_spawn({**base, "role": "view", "token": token}, listener))  # closes the listener here
        if views[0] is None or port is None:
            return {"node": node}
        return {"node": node, "addresses": transport.view_addresses(config["live"]["view_addr"]), "port": port,
                "token": token}
    timeout = min(START_WAIT_S, float(config["collector"]["merge_timeout_s"]))
    try:
        view, leads = transport.live_rendezvous(comm, rank, world_size, node, offer, timeout)
    except (OSError, RuntimeError, ValueError) as error:  # the store failing: no live view across nodes
        sys.stderr.write(f"distprof: warning: live view: no address exchange ({error}); this node is not sent\n")
        view, leads = None, False
    if rank == 0:
        return views[0] if views else None
    if leads and view and view.get("port"):
        return _spawn({**base, "role": "sender", "view": view})
    return None


def stop(live: LiveProcess | None, wait_s: float | None = None) -> dict | None:
    """Close the side process's pipe, let it finish its complete windows (bounded), return the
    view's record (summary.json's ``live``) or None (a sender, or no record). A view that ended
    before the stop (killed, failed) or had to be ended is said in one warning line and its record
    says how (``ended``): its last live.json showed its nodes still open, as if nothing had happened."""
    if live is None:
        return None
    if wait_s is None:
        wait_s = STOP_WAIT_S if live.role == "view" else SENDER_STOP_WAIT_S
    before = live.process.poll()  # not None: it ended before its stop
    try:
        live.process.stdin.close()
    except OSError:
        pass
    cut = False
    try:
        live.process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        cut = True
        live.process.terminate()
        try:
            live.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            live.process.kill()
    if live.role != "view":
        return None
    try:
        record = json.loads((live.out / LIVE_FILE).read_text())
    except (OSError, ValueError):
        record = None
    ended = None if cut else ended_early(live.process.returncode, before is not None)  # cut: ended here, bounded
    if ended is not None:
        last = (record or {}).get("windows") or [{}]
        seen = f"its last window steps {last[-1]['steps'][0]}-{last[-1]['steps'][1]}" if last[-1] else "no window"
        sys.stderr.write(f"distprof: warning: the live view ended early ({ended}): {seen} in summary.json's "
                         "live, which says so (live.ended); training was not affected\n")
        if isinstance(record, dict):
            record = {**record, "ended": ended}
    return record


def ended_early(returncode: int | None, before_stop: bool) -> str | None:
    """How the view ended where it did not end by its stop (None where it did): killed by a signal
    (before the stop, or while finishing its last windows), or failed."""
    import signal
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}" + ("" if before_stop else " at the stop")
    if returncode:
        return f"failed, exit status {returncode}"
    return None


# -- rank files, windows -----------------------------------------------------------------------

class RankCursor:
    """One rank's file as a side process follows it: its last committed step, and the rowid below
    which every row belongs to an earlier step (so a window's rows are found without reading the
    file). With ``node``, a file whose ``live_node`` meta names another node is not this reader's:
    it is looked at again only when replaced."""

    def __init__(self, path: Path, not_before_ns: int, node: str | None = None) -> None:
        self.path, self.not_before_ns, self.node = path, not_before_ns, node
        self.db = None
        self.inode = None
        self.foreign = None  # inode of a file of another node's rank
        self.next_probe = 0.0
        self.committed: int | None = None
        self.floors: list[tuple[int, int]] = [(-1, 0)]  # (committed step, last rowid) seen

    def _open(self) -> None:
        import sqlite3
        now = time.monotonic()
        if now < self.next_probe:
            return
        self.next_probe = now + PROBE_S
        inode = os.stat(self.path).st_ino
        if inode == self.foreign:
            return
        # read-write, not read-only: the job is writing it, and if this reader closes last it folds the WAL in and
        # removes -wal/-shm (a read-only one would leave them); the URI is quoted (``?``, ``#``, ``%`` in a path)
        db = sqlite3.connect(Path(self.path).resolve().as_uri() + "?mode=rw", uri=True, timeout=0.5)
        meta = dict(db.execute("SELECT key, value FROM distprof_meta WHERE key IN ('started_wall_ns', 'live_node')"))
        if "started_wall_ns" not in meta or int(meta["started_wall_ns"]) < self.not_before_ns or \
                (self.node is not None and meta.get("live_node") != self.node):
            db.close()  # a previous run's file, one not yet set up, or another node's rank
            if self.node is not None and meta.get("live_node") not in (None, self.node):
                self.foreign = inode
            return
        self.db, self.inode, self.committed, self.floors = db, inode, None, [(-1, 0)]

    def poll(self) -> int | None:
        """The last committed step (None: no file of this run yet, or none committed)."""
        import sqlite3
        try:
            if self.db is not None and os.stat(self.path).st_ino != self.inode:
                self.db.close()
                self.db = None
            if self.db is None:
                self._open()
            if self.db is None:
                return None
            row = self.db.execute("SELECT rowid, step FROM distprof_ranges ORDER BY rowid DESC LIMIT 1").fetchone()
        except (OSError, sqlite3.Error, ValueError):
            return self.committed
        if row is not None and (self.committed is None or row[1] > self.committed):
            self.committed = int(row[1])
            self.floors.append((self.committed, int(row[0])))
        return self.committed

    def floor(self, first_step: int) -> int:
        """A rowid below which all rows are of steps before ``first_step``."""
        return max(rowid for step, rowid in self.floors if step < first_step)


def node_cursors(setup: dict) -> list[RankCursor]:
    """A cursor per rank of the job at the place its file has on this host (the out template with
    its rank and this host), taking only the files of this node's ranks."""
    not_before = int(setup["started_wall_ns"]) - STALE_SLACK_NS
    return [RankCursor(outpaths.expand(setup["template"], rank, setup["host"]) / f"rank{rank}.sqlite", not_before,
                       setup.get("node")) for rank in range(int(setup["world_size"]))]


def ready_windows(progress: list[int | None], next_first: int, every: int, final: bool) -> list[tuple[int, int]]:
    """The windows [A, B] that can be reported now: every rank has committed B, or one rank is a
    whole window past B (the others are behind), or the job stopped and some rank reached B."""
    known = [p for p in progress if p is not None]
    out, first = [], next_first
    while known:
        last = first + every - 1
        if not (min(p if p is not None else -1 for p in progress) >= last or max(known) >= last + every
                or (final and max(known) >= last)):
            break
        out.append((first, last))
        first += every
    return out


def reduce_window(cursor: RankCursor, window: tuple[int, int], config: dict):
    """One rank's RankResult over the window's steps (pipeline.reduce_rank on them, as the final
    summary reduces the whole file); None when its file has not reached the window or cannot be read."""
    from . import events as ev
    from . import pipeline
    from .sources import native
    first, last = window
    if cursor.db is None or cursor.committed is None or cursor.committed < last:
        return None
    try:
        trace = native.read(cursor.path, config, (cursor.floor(first), first, last + 1))[0]
    except ev.SourceError:
        return None
    steps = trace.events["step"]
    trace = replace(trace, events=trace.events.take((steps >= first) & (steps <= last)), warnings=[])
    return pipeline.reduce_rank(trace, config)


def window_summary(cursors: list[RankCursor], window: tuple[int, int], config: dict, world_size: int,
                   remote: Remote | None = None):
    """The window's Summary by the one path (this node's ranks reduced here, the other nodes' as
    their senders reduced them; combine), the ranks left out as behind {rank: last committed step
    or None}, and the bytes each sent rank's result took on the wire {rank: bytes}."""
    from . import pipeline
    results, behind, sizes = [], {}, {}
    for rank, cursor in enumerate(cursors):  # one per rank
        sent = remote.pop(window[0], rank) if remote is not None else None
        result = sent[0] if sent is not None else reduce_window(cursor, window, config)
        if result is None:
            behind[rank] = cursor.committed if cursor.db is not None or remote is None else remote.behind_step(rank)
            continue
        results.append(result)
        if sent is not None:
            sizes[rank] = sent[1]
    if not results:
        return None, behind, sizes
    summary = pipeline.combine(results, config, source="distprof (live)", world_size=world_size)
    return summary, behind, sizes


# -- the nodes' senders and the view's inbox ---------------------------------------------------

class Remote:
    """At the view: what the other nodes' senders said, per rank: results by window (with their
    size on the wire), the last window delivered, the last step committed (its sender says it every
    HEARTBEAT_S); and the nodes: open, done (said so at their stop) or lost (their connection ended
    without it, or nothing came for STALL_S).

    A window waits (``holding``) for the results of every rank of a node the view hears from: what
    a sender last said of its steps cannot tell whether a rank is behind (with fast steps it is a
    window old when it arrives), so a rank is not called behind for its sender's latency. The wait
    is LAG_S at most; those ranks are then ``slow``, counted by their deliveries (``progress``) until
    these catch up, as the ranks of a lost node are. So a node that stops sending, or cannot keep
    up, holds the view at most LAG_S."""

    def __init__(self) -> None:
        self.results: dict[tuple[int, int], tuple[object, int]] = {}
        self.delivered: dict[int, int] = {}
        self.committed: dict[int, int | None] = {}
        self.node_of: dict[int, str] = {}
        self.nodes: dict[str, dict] = {}  # node -> {"ranks", "state": open|done|lost, "bytes", "seen"}
        self.newly_lost: list[str] = []
        self.slow: set[int] = set()
        self.waiting: tuple[int, float] | None = None  # (window start, since when) the view waits for results
        self.looked, self.awake = 0.0, False  # when take() last ran; whether the view ran just before (unstarved)

    def take(self, messages: list, next_first: int) -> None:
        """Fold the inbox's messages in; results of windows already reported are dropped."""
        now = time.monotonic()
        self.awake, self.looked = now - self.looked < AWAKE_S, now
        for kind, node, message, size in messages:  # a few per window and node
            state = self.nodes.setdefault(node, {"ranks": set(), "state": "open", "bytes": 0, "seen": now})
            if kind == "closed":
                self._lose(node)
                continue
            state["bytes"] += size
            state["seen"] = now
            kind = message.get("kind")
            state["state"] = "done" if kind == "done" else "open"  # heard from: a stalled node is back
            if kind in ("progress", "done"):
                self._committed(node, message.get("committed") or {})
            elif kind == "window":
                rank, (first, last) = int(message["rank"]), message["steps"]
                self._committed(node, {rank: message.get("committed")})
                self.delivered[rank] = max(self.delivered.get(rank, -1), int(last))
                if first >= next_first:
                    self.results[(int(first), rank)] = (message["result"], size)
        for node, state in self.nodes.items():  # a handful
            if state["state"] == "open" and now - state["seen"] > STALL_S:
                self._lose(node)

    def _committed(self, node: str, committed: dict) -> None:
        for rank, step in committed.items():  # the node's ranks
            self.committed[int(rank)] = step
            self.node_of[int(rank)] = node
            self.nodes[node]["ranks"].add(int(rank))

    def _lose(self, node: str) -> None:
        if self.nodes[node]["state"] == "open":
            self.nodes[node]["state"] = "lost"
            self.newly_lost.append(node)

    def progress(self, rank: int, every: int, final: bool) -> int | None:
        """The step the view counts ``rank`` as having reached (see the class), None: not heard of."""
        delivered = self.delivered.get(rank)
        node = self.nodes.get(self.node_of.get(rank, ""), {})
        if rank in self.slow and delivered is not None and delivered >= (self.committed.get(rank) or 0) - every:
            self.slow.discard(rank)  # caught up
        if final or node.get("state") == "lost" or rank in self.slow:
            return delivered
        committed = self.committed.get(rank)
        return committed if committed is not None else delivered

    def holding(self, window: tuple[int, int]) -> bool:
        """Whether the view should wait for results of ``window`` from a node it hears from: a rank
        of it whose results for the window did not come. What its sender last said of its steps
        cannot tell: with fast steps it is a window old by the time it arrives. After LAG_S of
        waiting on one window, those ranks are ``slow`` (named behind in it) and the view goes on. A node
        silent for SILENT_S (no result, not even the heartbeat a sender sends every second: stopped, or its
        host frozen) has nothing on its way: its ranks are slow at once. Waiting LAG_S for it held every
        rank's windows, which then came at once and beyond MAX_PENDING were skipped (12 of 20)."""
        first, last = window
        now = time.monotonic()
        late = [rank for rank, node in self.node_of.items() if rank not in self.slow
                and self.delivered.get(rank, -1) < last and self.nodes[node]["state"] == "open"]
        # judged only while the view runs at its pace: starved itself (live.priority idle), it read nothing
        silent = [rank for rank in late if now - self.nodes[self.node_of[rank]]["seen"] > SILENT_S] \
            if self.awake else []
        if silent:
            self.slow.update(silent)
            late = [rank for rank in late if rank not in self.slow]
        if not late:
            self.waiting = None
            return False
        if self.waiting is None or self.waiting[0] != first:
            self.waiting = (first, now)
        if now - self.waiting[1] < LAG_S:
            return True
        self.slow.update(late)
        self.waiting = None
        return False

    def behind_step(self, rank: int) -> int | None:
        """What a sent rank named behind is shown at: the end of its last delivered window."""
        return self.delivered.get(rank, self.committed.get(rank))

    def pop(self, first: int, rank: int):
        return self.results.pop((first, rank), None)

    def forget_before(self, first: int) -> None:
        for key in [key for key in self.results if key[0] < first]:  # windows skipped or reported
            del self.results[key]

    def settled(self) -> bool:
        """Whether every node that connected has said it is done or was lost."""
        return all(state["state"] != "open" for state in self.nodes.values())

    def record(self) -> dict:
        return {node: {"ranks": sorted(state["ranks"]), "state": state["state"], "bytes": state["bytes"]}
                for node, state in sorted(self.nodes.items())}


class Inbox:
    """The view's side of the senders' connections, on a thread of the view process (selectors,
    non-blocking): verified frames go to ``messages`` for the view's loop. A frame not signed with
    the job's token, or none signed within AUTH_TIMEOUT_S, closes the connection unread; at most
    ``limit`` connections at once (the oldest unsigned one makes room)."""

    def __init__(self, listener: socket.socket, token: bytes, limit: int) -> None:
        self.listener, self.token, self.limit = listener, token, limit
        self.messages: queue.SimpleQueue = queue.SimpleQueue()
        self.selector = selectors.DefaultSelector()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.conns: dict[socket.socket, dict] = {}
        self.sessions: set[bytes] = set()  # every connection's session seen: one is never accepted twice
        self.stopped = False
        threading.Thread(target=self._run, name="distprof-live-inbox", daemon=True).start()

    def drain(self) -> list:
        out = []
        while True:
            try:
                out.append(self.messages.get_nowait())
            except queue.Empty:
                return out

    def _run(self) -> None:
        while not self.stopped:
            for key, _ in self.selector.select(timeout=0.5):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.fileobj, key.data)
            now = time.monotonic()
            for sock, state in list(self.conns.items()):
                if state["node"] is None and now - state["since"] > AUTH_TIMEOUT_S:
                    self._close(sock)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self.conns) >= self.limit:
                unsigned = [s for s, state in self.conns.items() if state["node"] is None]
                if not unsigned:
                    sock.close()
                    continue
                self._close(min(unsigned, key=lambda s: self.conns[s]["since"]))
            sock.setblocking(False)
            state = {"node": None, "since": time.monotonic(), "buffer": bytearray()}
            self.conns[sock] = state
            self.selector.register(sock, selectors.EVENT_READ, state)

    def _read(self, sock: socket.socket, state: dict) -> None:
        signed = state["node"] is not None
        if not _received(sock, 1 << 20 if signed else transport.FIRST_FRAME_BYTES, state, self._close):
            return
        frames, good = transport.unpack_frames(state["buffer"], self.token,
                                               transport.MAX_FRAME_BYTES if signed else transport.FIRST_FRAME_BYTES)
        for frame, size in frames:  # a few per window
            if not self._in_order(state, frame):
                good = False
                break
            self.messages.put(("message", state["node"], frame.as_message(), size))
        if not good:
            self._close(sock)

    def _in_order(self, state: dict, frame) -> bool:
        """A connection speaks for a node from its first frame, in a session never seen before, and then
        in sequence: a frame captured and sent again (on this connection or a new one) is refused."""
        if state["node"] is None:
            if frame.seq != 0 or not frame.session or frame.session in self.sessions:
                sys.stderr.write("distprof: warning: live view: refused a connection whose first frame was "
                                 "replayed or out of order\n")
                return False
            self.sessions.add(frame.session)
            state.update(node=str(frame.node), session=frame.session, seq=0)
            return True
        if frame.session != state["session"] or frame.seq != state["seq"] + 1:
            sys.stderr.write(f"distprof: warning: live view: node {printable(state['node'])}'s connection sent "
                             "a frame out of order (replayed?): closed\n")
            return False
        state["seq"] = frame.seq
        return True

    def _close(self, sock: socket.socket) -> None:
        state = self.conns.pop(sock, None)
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
        if state is not None and state["node"] is not None:
            self.messages.put(("closed", state["node"], None, 0))


class NodeLink:
    """A sender's connection to the view: blocking sends bounded by SEND_TIMEOUT_S; without a
    connection, an attempt at most every RETRY_S over the view's addresses in turn. A send that
    fails drops the connection and that frame: its rank is named behind at the view, never waited for."""

    def __init__(self, view: dict, node: str) -> None:
        self.addresses, self.port = list(view["addresses"]), int(view["port"])
        self.token, self.node = bytes.fromhex(view["token"]), node
        self.sock: socket.socket | None = None
        self.next_try = 0.0
        self.session, self.seq = b"", 0

    def ready(self) -> bool:
        """Connected, or connected now (and said hello); False until the next attempt is due."""
        if self.sock is None and time.monotonic() >= self.next_try:
            self.next_try = time.monotonic() + RETRY_S
            for address in self.addresses:  # a handful
                try:
                    sock = socket.create_connection((address, self.port), timeout=CONNECT_TIMEOUT_S)
                except OSError:
                    continue
                sock.settimeout(SEND_TIMEOUT_S)
                self.sock, self.session, self.seq = sock, os.urandom(16), 0
                self.send({"kind": "hello", "node": self.node})
                break
        return self.sock is not None

    def send(self, message: dict) -> int:
        """Bytes sent (0: not connected, or the send failed)."""
        if self.sock is None:
            return 0
        from .wire import Frame
        frame = transport.pack_frame(Frame(**message, session=self.session, seq=self.seq), self.token)
        self.seq += 1
        try:
            self.sock.sendall(frame)
        except OSError:
            self.close()
            return 0
        return len(frame)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _due(cursors: list[RankCursor], next_first: list[int], every: int) -> list[tuple[int, int]]:
    """The (window start, rank) pairs whose rank committed the window's last step, oldest first;
    a rank more than MAX_PENDING windows ahead of its sender skips the older ones."""
    due = []
    for rank, cursor in enumerate(cursors):  # one per rank of the job; most are other nodes' (no file here)
        committed = cursor.poll()
        if committed is None:
            continue
        starts = list(range(next_first[rank], (committed + 1) // every * every, every))
        if len(starts) > MAX_PENDING:
            next_first[rank] = starts[-MAX_PENDING]
            starts = starts[-MAX_PENDING:]
        due += [(first, rank) for first in starts]
    return sorted(due)


def send_node(setup: dict, stopped: threading.Event) -> int:
    """A node's sender: follow its ranks' files; say their committed steps every HEARTBEAT_S
    (first of all before the analysis stack loads: the view knows the node is alive and waits for
    its results); reduce each rank's window once it committed its last step and
    send the result; at the stop, the windows complete by then and "done". Without a connection it
    reduces nothing (those ranks are named behind at the view). Returns the bytes sent."""
    import importlib
    threading.Thread(target=importlib.import_module, args=("distprof.pipeline",), daemon=True).start()
    every = int(setup["config"]["live"]["every_steps"])  # the stack loads beside the first heartbeats
    cursors = node_cursors(setup)
    link = NodeLink(setup["view"], setup["node"])
    next_first = [0] * len(cursors)
    sent, said, said_at = 0, None, 0.0
    while True:
        final = stopped.is_set()
        if final:
            stop_priority()
        due = _due(cursors, next_first, every)
        committed = {rank: c.committed for rank, c in enumerate(cursors) if c.committed is not None}
        if link.ready() and (said is None or time.monotonic() - said_at > HEARTBEAT_S):
            sent += link.send({"kind": "progress", "node": setup["node"], "committed": committed})
            said, said_at = committed, time.monotonic()
        for first, rank in due:  # oldest first
            next_first[rank] = first + every
            if not link.ready():
                continue
            result = reduce_window(cursors[rank], (first, first + every - 1), setup["config"])
            if result is not None:
                sent += link.send({"kind": "window", "node": setup["node"], "rank": rank,
                                   "steps": [first, first + every - 1], "committed": cursors[rank].committed,
                                   "result": result})
        if final:
            if link.sock is not None:
                sent += link.send({"kind": "done", "node": setup["node"], "committed": committed})
            link.close()
            return sent
        stopped.wait(POLL_S)


# -- Prometheus gauges, /metrics and the node-exporter textfile --------------------------------

class MetricsServer:
    """``/metrics`` on one thread of the view process: non-blocking sockets (selectors), HTTP/1.0
    style (one request per connection). Made for a shared cluster: it binds one address (config
    ``live.prometheus_addr``, loopback by default), answers 404 on any other path, holds at most
    MAX_CONNECTIONS connections (a new one closes the oldest that has not sent a whole request) and
    closes any that has not sent one within REQUEST_TIMEOUT_S: idle or slow clients cannot hold it.
    The body is made once per window (``body``), not per request."""

    MAX_CONNECTIONS = 64
    REQUEST_TIMEOUT_S = 5.0
    MAX_REQUEST_BYTES = 8192

    def __init__(self, addr: str, port: int, content_type: str) -> None:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.listener = socket.create_server((addr, port), family=family, backlog=128,
                                             dualstack_ipv6=addr == "::" and socket.has_dualstack_ipv6())
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.content_type = content_type
        self.body = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.conns: dict[socket.socket, dict] = {}
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="distprof-live-metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=2.0)
        for sock in list(self.conns):
            self._close(sock)
        self.listener.close()

    def _run(self) -> None:
        while not self.stopped:
            for key, mask in self.selector.select(timeout=0.2):
                if key.data is None:
                    self._accept()
                elif mask & selectors.EVENT_WRITE:
                    self._write(key.fileobj, key.data)
                else:
                    self._read(key.fileobj, key.data)
            now = time.monotonic()
            for sock in [s for s, state in self.conns.items() if now - state["since"] > self.REQUEST_TIMEOUT_S]:
                self._close(sock)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # BlockingIOError: none left; others (EMFILE): try again next round
                return
            if len(self.conns) >= self.MAX_CONNECTIONS:  # room: the oldest silent, else the oldest unanswered
                waiting = [s for s, state in self.conns.items() if not state["buffer"] and not state["out"]] or \
                    [s for s, state in self.conns.items() if not state["out"]] or list(self.conns)
                self._close(min(waiting, key=lambda s: self.conns[s]["since"]))
            sock.setblocking(False)
            state = {"since": time.monotonic(), "buffer": bytearray(), "out": b""}
            self.conns[sock] = state
            self.selector.register(sock, selectors.EVENT_READ, state)
            self._read(sock, state)  # a scraper sends its request with the connection: answer it now

    def _read(self, sock: socket.socket, state: dict) -> None:
        if not _received(sock, 4096, state, self._close):
            return
        end = state["buffer"].find(b"\r\n\r\n")
        if end < 0 and len(state["buffer"]) <= self.MAX_REQUEST_BYTES:
            return
        state["out"] = self.response(bytes(state["buffer"][:end]) if end >= 0 else b"")
        self.selector.modify(sock, selectors.EVENT_WRITE, state)
        self._write(sock, state)

    def response(self, head: bytes) -> bytes:
        """The whole response to a request head: 200 with the metrics on GET/HEAD /metrics, 404 on
        any other path, 405 for other methods, 400 when it is not HTTP."""
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return self._reply(400, "Bad Request", b"bad request\n", "text/plain")
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target != b"/metrics":
            return self._reply(404, "Not Found", b"not found: distprof serves /metrics only\n", "text/plain")
        if method not in (b"GET", b"HEAD"):
            return self._reply(405, "Method Not Allowed", b"GET or HEAD only\n", "text/plain", b"Allow: GET, HEAD\r\n")
        return self._reply(200, "OK", self.body, self.content_type, head_only=method == b"HEAD")

    @staticmethod
    def _reply(code: int, reason: str, body: bytes, content_type: str, extra: bytes = b"",
               head_only: bool = False) -> bytes:
        return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n").encode() + extra + b"\r\n" + (b"" if head_only else body)

    def _write(self, sock: socket.socket, state: dict) -> None:
        try:
            sent = sock.send(state["out"])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(state["out"])
        state["out"] = state["out"][sent:]
        if not state["out"]:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self.conns.pop(sock, None)
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


class Metrics:
    """Gauges updated each window, served on ``live.prometheus_port`` (bound to
    ``live.prometheus_addr``: MetricsServer) and/or written to ``live.textfile`` (prometheus_client's
    write_to_textfile: a temporary file renamed over the target, so node-exporter never reads half
    a file). A port in use or a full disk costs the export, said once on stderr, never the view or
    the job. The alert counter exports ``distprof_alerts_total`` only: its ``_created`` series (the
    counter's creation time, prometheus_client's default) is turned off, it only looked like a duplicate."""

    def __init__(self, live_config: dict) -> None:
        self.textfile = live_config.get("textfile")
        self.port = live_config.get("prometheus_port")
        self.addr = live_config.get("prometheus_addr") or "127.0.0.1"
        self.registry = None
        self.server: MetricsServer | None = None
        self._warned: set = set()
        if self.port is None and self.textfile is None:
            return
        try:
            import prometheus_client as prom
        except ImportError:
            self._warn("import", "live view: prometheus_client is not installed (pip install prometheus_client): "
                                 "no /metrics, no textfile")
            return
        prom.disable_created_metrics()  # this process's only exporter is this one
        self.registry = prom.CollectorRegistry()
        per_rank = {
            "step_seconds": "the rank's step time over the last window (median of its steps)",
            "communication_seconds": "communication per step over the last window",
            "computation_seconds": "computation per step over the last window",
            "exposed_communication_seconds": "communication not overlapped with computation, per step",
            "overlap_ratio": "overlap / communication over the last window",
            "behind": "1 when the rank was left out of the last window (its results did not reach it)"}
        self.gauges = {name: prom.Gauge(f"distprof_{name}", text, ["rank"], registry=self.registry)
                       for name, text in per_rank.items()}
        for name, text in {"straggler_rank": "the straggler of the last window, -1 when none",
                           "straggler_cost_seconds": "the straggler's cost per step (what-if no_straggler saving)",
                           "job_step_seconds": "the job's step time over the last window",
                           "window_last_step": "the last step of the last window"}.items():
            self.gauges[name] = prom.Gauge(f"distprof_{name}", text, registry=self.registry)
        self.alerts = prom.Counter("distprof_alerts", "live alerts raised", ["code"], registry=self.registry)
        if self.port is not None:
            try:
                self.server = MetricsServer(self.addr, int(self.port), prom.CONTENT_TYPE_LATEST)
                self.server.body = prom.generate_latest(self.registry)
            except OSError as error:
                self._warn("port", f"live view: cannot serve /metrics on {self.addr} port {self.port} ({error})")

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            sys.stderr.write(f"distprof: warning: {text}\n")
            sys.stderr.flush()

    def update(self, window: dict, alerts: list[dict]) -> None:
        if self.registry is None:
            return
        seconds = 1e-9
        for row in window["ranks"]:  # one per rank
            rank, steps = str(row["rank"]), max(row["steps"], 1)
            self.gauges["step_seconds"].labels(rank).set((row["step_ns"] or 0) * seconds)
            for key in ("communication", "computation", "exposed_communication"):
                self.gauges[f"{key}_seconds"].labels(rank).set(row[f"{key}_ns"] / steps * seconds)
            self.gauges["overlap_ratio"].labels(rank).set(row["overlap_ratio"] or 0.0)
            self.gauges["behind"].labels(rank).set(0)
        for row in window["behind"]:
            self.gauges["behind"].labels(str(row["rank"])).set(1)
        straggler = window["straggler"] or {}
        self.gauges["straggler_rank"].set(straggler.get("rank", -1))
        self.gauges["straggler_cost_seconds"].set((straggler.get("cost_ns") or 0) * seconds)
        self.gauges["job_step_seconds"].set((window["step_time_ns"] or 0) * seconds)
        self.gauges["window_last_step"].set(window["steps"][1])
        for alert in alerts:
            self.alerts.labels(alert["code"]).inc()
        import prometheus_client as prom
        if self.server is not None:
            self.server.body = prom.generate_latest(self.registry)
        if self.textfile is not None:
            try:
                prom.write_to_textfile(self.textfile, self.registry)
            except OSError as error:
                self._warn("textfile", f"live view: cannot write {self.textfile} ({error})")


# -- the view's loop ---------------------------------------------------------------------------

def _write_record(out: Path, record: dict) -> bool:
    """live.json, replaced atomically after each window (rank 0 reads it at the stop)."""
    path = out / LIVE_FILE
    temporary = out / f".{LIVE_FILE}.{os.getpid()}"
    try:
        temporary.write_text(json.dumps(record))
        os.replace(temporary, path)
        return True
    except OSError:
        temporary.unlink(missing_ok=True)
        return False


def _emit(lines: list[str]) -> None:
    """The view's lines on stdout, fitted to the console's width (COLUMNS, which ``distprof demo --width``
    sets, or the terminal's; 100 in a log)."""
    from .console import terminal_width
    from .reports.live_text import fitted
    try:
        sys.stdout.write("\n".join(fitted(lines, terminal_width())) + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def _progress(cursors: list[RankCursor], remote: Remote | None, every: int, final: bool) -> list[int | None]:
    """Per rank, the step the view counts it as having reached: committed in a file it reads, or
    as its node's sender says (Remote.progress)."""
    return [cursor.poll() if cursor.db is not None or remote is None or rank not in remote.node_of
            else remote.progress(rank, every, final) for rank, cursor in enumerate(cursors)]


def _inbox(setup: dict) -> Inbox | None:
    """The view's inbox for the other nodes' senders (when rank 0 handed it a socket)."""
    if setup.get("listen_fd") is None:
        return None
    listener = socket.socket(fileno=int(setup["listen_fd"]))
    return Inbox(listener, bytes.fromhex(setup["token"]), int(setup["world_size"]) + 8)


class View:
    """The view's state across windows: the rank files it reads, what the senders delivered, the
    alert rule, the exports and the record (summary.json's ``live``)."""

    def __init__(self, setup: dict, quiet: bool) -> None:
        from .analyses import live as live_analysis
        self.setup, self.quiet, self.config = setup, quiet, setup["config"]
        self.every = int(self.config["live"]["every_steps"])
        self.cursors = node_cursors(setup)
        self.inbox = _inbox(setup)
        self.remote = Remote() if self.inbox is not None else None
        alerts = self.config["live"]["alerts"]
        self.alerting = alerts["enabled"] if isinstance(alerts, dict) else bool(alerts)
        self.rule = live_analysis.AlertRule.from_config(alerts if isinstance(alerts, dict) else {})
        self.metrics = Metrics(self.config["live"])
        self.record = {"every_steps": self.every, "windows": [], "alerts": [], "skipped": []}
        self.next_first, self.disk_ok = 0, True
        self.started = time.monotonic()

    def step(self, final: bool) -> None:
        """Take what arrived, report every window ready now."""
        from .reports import live_text
        if self.remote is not None:
            self.remote.take(self.inbox.drain(), self.next_first)
        progress = _progress(self.cursors, self.remote, self.every, final)
        windows = ready_windows(progress, self.next_first, self.every, final)
        if self.remote is not None and not final:  # up to the first window whose results are on their way
            held = next((i for i, w in enumerate(windows) if self.remote.holding(w)), len(windows))
            starting = None in progress and time.monotonic() - self.started < LAG_S
            windows = [] if starting else windows[:held]
        if windows:
            self.next_first = windows[-1][1] + 1
        if not final and len(windows) > MAX_PENDING:
            self.record["skipped"] += [list(w) for w in windows[:-MAX_PENDING]]
            if not self.quiet:
                _emit([live_text.skipped_line(w) for w in windows[:-MAX_PENDING]])
            windows = windows[-MAX_PENDING:]
        for window in windows:  # at most MAX_PENDING
            self._report(window)
        if self.remote is not None:
            self.remote.forget_before(self.next_first)

    def _report(self, window: tuple[int, int]) -> None:
        from .analyses import live as live_analysis
        from .reports import live_text
        summary, behind, sizes = window_summary(self.cursors, window, self.config, len(self.cursors), self.remote)
        lost = self.remote.newly_lost if self.remote is not None else []
        if summary is None:
            return
        figures = live_analysis.window_figures(summary, window, behind)
        for row in figures["ranks"]:  # one per rank
            row["sent_bytes"] = sizes.get(row["rank"])
        alerts = self.rule.update(figures) if self.alerting else []
        self.record["windows"].append(figures)
        self.record["alerts"] += alerts
        if self.remote is not None:
            self.record["nodes"] = self.remote.record()
        if not self.quiet:
            lines = live_text.window_lines(figures)
            lines += [live_text.lost_node_line(window, node, sorted(self.remote.nodes[node]["ranks"]))
                      for node in lost]
            _emit(lines + [live_text.alert_line(a) for a in alerts])
        lost.clear()
        self.metrics.update(figures, alerts)
        out = Path(self.setup["out"])
        if not _write_record(out, self.record) and self.disk_ok:
            self.disk_ok = False
            sys.stderr.write(f"distprof: warning: live view: cannot write {out / LIVE_FILE}\n")


def watch(setup: dict, stopped: threading.Event, quiet: bool = False) -> dict:
    """Follow this node's rank files and the senders until ``stopped`` is set; then wait (at most
    FINAL_WAIT_S) for the senders' last windows, and report the windows complete by then."""
    view = View(setup, quiet)  # first: its inbox takes the senders' first words while the stack loads
    from . import pipeline  # noqa: F401 - the analysis stack loads while the first window trains
    final_by = None
    while True:
        if stopped.is_set() and final_by is None:
            final_by = time.monotonic() + FINAL_WAIT_S
            stop_priority()
        final = final_by is not None and (view.remote is None or view.remote.settled()
                                          or time.monotonic() >= final_by)
        view.step(final)
        if final:
            if view.inbox is not None:
                view.inbox.stopped = True
                view.record["nodes"] = view.remote.record()  # as the senders ended: done or lost
                _write_record(Path(setup["out"]), view.record)
            if view.metrics.server is not None:
                view.metrics.server.close()
            return view.record
        stopped.wait(POLL_S)


def training_first(priority: str = "idle") -> None:
    """Where the side processes run (config ``live.priority``): ``idle``, SCHED_IDLE (Linux; else
    nice 19), they take only CPU time no other process wants; ``nice``, nice 5, they compete for a
    core at a lower priority. Measured (benchmarks/live_overhead.py, 2 ranks busy on 2 cores, a
    window every 4 steps of 50 ms): nice 5 cost training +3.4%, nice 19 +1.0%, SCHED_IDLE +0.15%.
    Where training keeps every core busy, ``idle`` makes the view lag (windows late or skipped, a
    starved node's ranks named behind) instead of slowing training; on GPU nodes the cores it needs
    are idle anyway."""
    try:
        os.nice(5)  # the nice value the stop goes back to (stop_priority)
        if priority == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(14)
        except OSError:
            pass


def stop_priority() -> None:
    """At the stop its rank's training is over: every thread of the side process back to the
    normal scheduler (still niced), where the system allows it, so the last windows do not wait
    for idle time."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:  # a handful
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass


def main() -> int:
    """``python -m distprof.live`` (started by a rank's Profiler): the setup line on stdin, then
    the view or the node's sender until stdin closes."""
    setup = json.loads(sys.stdin.readline() or "null")
    if not setup:
        return 0
    training_first(setup["config"]["live"].get("priority", "idle"))
    stopped = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.read()  # returns at EOF: the rank stopped, or died
        stopped.set()
    threading.Thread(target=wait_for_stop, name="distprof-live-stop", daemon=True).start()
    role = setup.get("role", "view")
    try:
        if role == "sender":
            send_node(setup, stopped)
        else:
            watch(setup, stopped, bool(setup.get("quiet")))
    except Exception as error:  # noqa: BLE001 - the side process dies alone, with one line; training goes on
        sys.stderr.write(f"distprof: warning: live {role} stopped ({type(error).__name__}: {error})\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
