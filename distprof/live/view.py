"""The view's loop on rank 0: each ready window reduced, combined with the other nodes' and printed,
its alerts raised, its gauges set and live.json written; then ``main``, the side process's entry."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import msgspec

from .metrics import Metrics
from .nodes import LAG_S, MAX_PENDING, POLL_S, Inbox, Remote, send_node
from .process import LIVE_FILE, stop_priority, training_first
from .windows import RankCursor, node_cursors, ready_windows, window_summary

FINAL_WAIT_S = 5.0      # at the stop, how long the view waits for the senders' last windows (< STOP_WAIT_S)


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
    from ..console import terminal_width
    from ..reports.live_text import fitted
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
        from ..analyses import live as live_analysis
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
        from ..reports import live_text
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
        from ..analyses import live as live_analysis
        from ..reports import live_text
        summary, behind, sizes = window_summary(self.cursors, window, self.config, len(self.cursors), self.remote)
        lost = self.remote.newly_lost if self.remote is not None else []
        if summary is None:
            return
        figures = live_analysis.window_figures(summary, window, behind)
        figures = msgspec.structs.replace(figures, ranks=[msgspec.structs.replace(row, sent_bytes=sizes.get(row.rank))
                                                          for row in figures.ranks])
        alerts = self.rule.update(figures) if self.alerting else []
        self.record["windows"].append(figures.to_json())
        self.record["alerts"] += [alert.to_json() for alert in alerts]
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
    from .. import pipeline  # noqa: F401 - the analysis stack loads while the first window trains
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
