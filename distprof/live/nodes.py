"""Between the nodes: a sender ships its node's reduced windows to the view over TCP (frames signed,
msgpack decoded into wire.Frame, never unpickled); the view's inbox takes them and ``Remote`` keeps what
each node said."""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
import time

from .. import transport
from ..names import printable
from .process import stop_priority
from .sockets import Acceptor, received
from .windows import RankCursor, node_cursors, reduce_window

POLL_S = 0.1            # how often the view looks at the rank files
MAX_PENDING = 8         # windows ready at once beyond this: the view fell far behind, the older are skipped
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


class Inbox(Acceptor):
    """The view's side of the senders' connections, on a thread of the view process (sockets.Acceptor):
    verified frames go to ``messages`` for the view's loop. A frame not signed with the job's token, or
    none signed within AUTH_TIMEOUT_S, closes the connection unread; at most ``limit`` connections at
    once (the oldest unsigned one makes room)."""

    def __init__(self, listener: socket.socket, token: bytes, limit: int) -> None:
        super().__init__(listener, limit, 0.5, "distprof-live-inbox")
        self.token = token
        self.messages: queue.SimpleQueue = queue.SimpleQueue()
        self.sessions: set[bytes] = set()  # every connection's session seen: one is never accepted twice
        self.thread.start()

    def drain(self) -> list:
        out = []
        while True:
            try:
                out.append(self.messages.get_nowait())
            except queue.Empty:
                return out

    def new_state(self) -> dict:
        return {**super().new_state(), "node": None}

    def expired(self, state: dict, now: float) -> bool:
        return state["node"] is None and now - state["since"] > AUTH_TIMEOUT_S

    def evict(self) -> socket.socket | None:
        unsigned = [s for s, state in self.conns.items() if state["node"] is None]
        return min(unsigned, key=lambda s: self.conns[s]["since"]) if unsigned else None

    def read(self, sock: socket.socket, state: dict) -> None:
        signed = state["node"] is not None
        if not received(sock, 1 << 20 if signed else transport.FIRST_FRAME_BYTES, state, self.close_connection):
            return
        frames, good = transport.unpack_frames(state["buffer"], self.token,
                                               transport.MAX_FRAME_BYTES if signed else transport.FIRST_FRAME_BYTES)
        for frame, size in frames:  # a few per window
            if not self._in_order(state, frame):
                good = False
                break
            self.messages.put(("message", state["node"], frame.as_message(), size))
        if not good:
            self.close_connection(sock)

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

    def closed(self, state: dict | None) -> None:
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
        from ..wire import Frame
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
