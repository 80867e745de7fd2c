"""The one accept loop of the live view's servers: the view's inbox for the nodes' senders (nodes.Inbox)
and /metrics (metrics.MetricsServer). Each is a listening socket served on one thread of the view
process, non-blocking (selectors): connections taken up to a limit (one chosen by the server makes room,
or the new one is refused), each closed when the server says it has waited too long."""

from __future__ import annotations

import selectors
import socket
import threading
import time


def received(sock: socket.socket, size: int, state: dict, close) -> bool:
    """Append what a non-blocking socket has now to ``state["buffer"]``: False when there is nothing
    new, or the peer closed or failed (then ``close(sock)``). Both servers read this way: the nodes'
    senders and /metrics scrapers."""
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


class Acceptor:
    """A listening socket's connections on a thread: ``read`` / ``write`` when one is ready, a new one
    past ``limit`` makes room by closing ``evict()`` (None: the new one is refused), and any that
    ``expired(state, now)`` is closed. ``conns`` maps each open connection to its state."""

    def __init__(self, listener: socket.socket, limit: int, poll_s: float, name: str) -> None:
        self.listener, self.limit, self.poll_s = listener, limit, poll_s
        listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.conns: dict[socket.socket, dict] = {}
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self.stopped:
            for key, mask in self.selector.select(timeout=self.poll_s):
                if key.data is None:
                    self._accept()
                elif mask & selectors.EVENT_WRITE:
                    self.write(key.fileobj, key.data)
                else:
                    self.read(key.fileobj, key.data)
            now = time.monotonic()
            for sock in [s for s, state in self.conns.items() if self.expired(state, now)]:
                self.close_connection(sock)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # BlockingIOError: none left; others (EMFILE): try again next round
                return
            if len(self.conns) >= self.limit:
                room = self.evict()
                if room is None:
                    sock.close()
                    continue
                self.close_connection(room)
            sock.setblocking(False)
            state = self.new_state()
            self.conns[sock] = state
            self.selector.register(sock, selectors.EVENT_READ, state)
            self.accepted(sock, state)

    def close_connection(self, sock: socket.socket) -> None:
        state = self.conns.pop(sock, None)
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
        self.closed(state)

    # what a server says: its connections' state, reads, writes, room and time limits
    def new_state(self) -> dict:
        return {"since": time.monotonic(), "buffer": bytearray()}

    def accepted(self, sock: socket.socket, state: dict) -> None:
        """Called once a connection is taken (nothing by default)."""

    def read(self, sock: socket.socket, state: dict) -> None:
        raise NotImplementedError

    def write(self, sock: socket.socket, state: dict) -> None:
        """Called when a connection registered for writing can take more (nothing by default)."""

    def expired(self, state: dict, now: float) -> bool:
        raise NotImplementedError

    def evict(self) -> socket.socket | None:
        raise NotImplementedError

    def closed(self, state: dict | None) -> None:
        """Called after a connection is closed, with its state (nothing by default)."""
