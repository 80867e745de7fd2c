"""The live view's Prometheus gauges: /metrics served on rank 0 and the node-exporter textfile."""

from __future__ import annotations

import selectors
import socket
import sys
from typing import TYPE_CHECKING

from .sockets import Acceptor, received

if TYPE_CHECKING:
    from ..sections.machine import LiveAlert, LiveWindow

# -- Prometheus gauges, /metrics and the node-exporter textfile --------------------------------

class MetricsServer(Acceptor):
    """``/metrics`` on one thread of the view process (sockets.Acceptor), HTTP/1.0
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
        listener = socket.create_server((addr, port), family=family, backlog=128,
                                        dualstack_ipv6=addr == "::" and socket.has_dualstack_ipv6())
        super().__init__(listener, self.MAX_CONNECTIONS, 0.2, "distprof-live-metrics")
        self.port = self.listener.getsockname()[1]
        self.content_type = content_type
        self.body = b""
        self.thread.start()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=2.0)
        for sock in list(self.conns):
            self.close_connection(sock)
        self.listener.close()

    def new_state(self) -> dict:
        return {**super().new_state(), "out": b""}

    def accepted(self, sock: socket.socket, state: dict) -> None:
        self.read(sock, state)  # a scraper sends its request with the connection: answer it now

    def expired(self, state: dict, now: float) -> bool:
        return now - state["since"] > self.REQUEST_TIMEOUT_S

    def evict(self) -> socket.socket | None:
        """Room: the oldest silent connection, else the oldest unanswered, else the oldest."""
        waiting = [s for s, state in self.conns.items() if not state["buffer"] and not state["out"]] or \
            [s for s, state in self.conns.items() if not state["out"]] or list(self.conns)
        return min(waiting, key=lambda s: self.conns[s]["since"])

    def read(self, sock: socket.socket, state: dict) -> None:
        if not received(sock, 4096, state, self.close_connection):
            return
        end = state["buffer"].find(b"\r\n\r\n")
        if end < 0 and len(state["buffer"]) <= self.MAX_REQUEST_BYTES:
            return
        state["out"] = self.response(bytes(state["buffer"][:end]) if end >= 0 else b"")
        self.selector.modify(sock, selectors.EVENT_WRITE, state)
        self.write(sock, state)

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

    def write(self, sock: socket.socket, state: dict) -> None:
        try:
            sent = sock.send(state["out"])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(state["out"])
        state["out"] = state["out"][sent:]
        if not state["out"]:
            self.close_connection(sock)


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

    def update(self, window: LiveWindow, alerts: list[LiveAlert]) -> None:
        if self.registry is None:
            return
        seconds = 1e-9
        for row in window.ranks:  # one per rank
            rank, steps = str(row.rank), max(row.steps, 1)
            self.gauges["step_seconds"].labels(rank).set((row.step_ns or 0) * seconds)
            for key, value in (("communication", row.communication_ns), ("computation", row.computation_ns),
                               ("exposed_communication", row.exposed_communication_ns)):
                self.gauges[f"{key}_seconds"].labels(rank).set(value / steps * seconds)
            self.gauges["overlap_ratio"].labels(rank).set(row.overlap_ratio or 0.0)
            self.gauges["behind"].labels(rank).set(0)
        for row in window.behind:
            self.gauges["behind"].labels(str(row.rank)).set(1)
        straggler = window.straggler
        self.gauges["straggler_rank"].set(-1 if straggler is None else straggler.rank)
        self.gauges["straggler_cost_seconds"].set(((straggler.cost_ns if straggler else None) or 0) * seconds)
        self.gauges["job_step_seconds"].set((window.step_time_ns or 0) * seconds)
        self.gauges["window_last_step"].set(window.steps[1])
        for alert in alerts:
            self.alerts.labels(alert.code).inc()
        import prometheus_client as prom
        if self.server is not None:
            self.server.body = prom.generate_latest(self.registry)
        if self.textfile is not None:
            try:
                prom.write_to_textfile(self.textfile, self.registry)
            except OSError as error:
                self._warn("textfile", f"live view: cannot write {self.textfile} ({error})")
