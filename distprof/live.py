"""The rolling view while the job trains (config ``live:``): every K committed steps rank 0 prints
a Distributed Summary of the last K steps, alerts when a rank becomes (or stops being) the
straggler or a figure jumps, and exports Prometheus gauges.

Where it runs: a separate process started by rank 0's Profiler (``python -m distprof.live``),
niced, reading the other ranks' native files, which every rank commits at each step in WAL mode
(readable while written). Not a thread: the analysis of one window (pipeline.reduce_rank per
rank, then pipeline.combine) takes 0.2-0.7 s of Python, and a thread would take that from rank 0's
training thread through the GIL, making rank 0 the straggler it reports. Not MPI messages: the same
code serves mpirun, torchrun and jobs with no process group, and the training thread sends
nothing. The cost to training is therefore nothing on the training thread; the child process only
competes for a core, at a lower priority. Its stdin is a pipe from rank 0: closed (the stop, or rank
0 dying) it finishes the windows that are complete and exits. A rank whose file does not advance
is named as behind once another rank is a whole window past it; it never holds the view.

Limits: rank 0's host must see the rank files (one node, or a shared file system where SQLite's
WAL works; NFS does not); windows are whole multiples of K from step 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

LIVE_FILE = "live.json"
POLL_S = 0.1            # how often the view looks at the rank files
STOP_WAIT_S = 10.0      # at the stop, how long rank 0 waits for the view's last windows
MAX_PENDING = 8         # windows ready at once beyond this: the view fell far behind, the older are skipped
STALE_SLACK_NS = 60 * 10**9  # a rank file that started this long before rank 0's is a previous run's


# -- rank 0's side: start and stop the view ----------------------------------------------------

class LiveProcess:
    """The running view: its process and where it writes."""

    def __init__(self, process: subprocess.Popen, out: Path) -> None:
        self.process, self.out = process, out


def start(out: Path, world_size: int, config: dict, started_wall_ns: int, quiet: bool = False) -> LiveProcess | None:
    """Start the view (rank 0); None, with one line on stderr, when it cannot start: training goes on."""
    package_parent = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    setup = {"out": str(out), "world_size": world_size, "config": config, "started_wall_ns": started_wall_ns,
             "quiet": quiet}
    try:
        process = subprocess.Popen([sys.executable, "-m", "distprof.live"], stdin=subprocess.PIPE, env=env,
                                   close_fds=True)
        process.stdin.write((json.dumps(setup) + "\n").encode())
        process.stdin.flush()
    except (OSError, ValueError) as error:
        sys.stderr.write(f"distprof: live view not started ({error}); training goes on without it\n")
        return None
    return LiveProcess(process, out)


def stop(live: LiveProcess | None, wait_s: float = STOP_WAIT_S) -> dict | None:
    """Close the view's pipe, let it finish the complete windows (bounded), return its record
    (summary.json's ``live``) or None."""
    if live is None:
        return None
    try:
        live.process.stdin.close()
    except OSError:
        pass
    try:
        live.process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        live.process.terminate()
        try:
            live.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            live.process.kill()
    try:
        return json.loads((live.out / LIVE_FILE).read_text())
    except (OSError, ValueError):
        return None


# -- the view's side: rank files, windows ------------------------------------------------------

class RankCursor:
    """One rank's file as the view follows it: its last committed step, and the rowid below which
    every row belongs to an earlier step (so a window's rows are found without reading the file)."""

    def __init__(self, path: Path, not_before_ns: int) -> None:
        self.path, self.not_before_ns = path, not_before_ns
        self.db = None
        self.inode = None
        self.committed: int | None = None
        self.floors: list[tuple[int, int]] = [(-1, 0)]  # (committed step, last rowid) seen

    def _open(self) -> None:
        import sqlite3
        inode = os.stat(self.path).st_ino
        db = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=0.5)
        started = db.execute("SELECT value FROM distprof_meta WHERE key='started_wall_ns'").fetchone()
        if started is None or int(started[0]) < self.not_before_ns:
            db.close()  # a previous run's file, or one not yet set up: looked at again next time
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


def window_summary(cursors: list[RankCursor], window: tuple[int, int], config: dict, world_size: int):
    """The window's Summary by the one path (reduce_rank per rank on the window's steps, combine),
    and the ranks left out as behind {rank: last committed step or None}."""
    from . import events as ev
    from . import pipeline
    from .sources import native
    first, last = window
    results, behind = [], {}
    for rank, cursor in enumerate(cursors):  # one per rank
        if cursor.committed is None or cursor.committed < last:
            behind[rank] = cursor.committed
            continue
        try:
            trace = native.read(cursor.path, config, (cursor.floor(first), first, last + 1))[0]
        except ev.SourceError:
            behind[rank] = cursor.committed
            continue
        steps = trace.events["step"]
        trace = replace(trace, events=trace.events.take((steps >= first) & (steps <= last)), warnings=[])
        results.append(pipeline.reduce_rank(trace, config))
    if not results:
        return None, behind
    return pipeline.combine(results, config, source="distprof (live)", world_size=world_size), behind


# -- Prometheus gauges and the node-exporter textfile -----------------------------------------

class Metrics:
    """Gauges updated each window, served on ``live.prometheus_port`` and/or written to
    ``live.textfile`` (prometheus_client's write_to_textfile: a temporary file renamed over the
    target, so node-exporter never reads half a file). A port in use or a full disk costs the
    export, said once on stderr, never the view or the job."""

    def __init__(self, live_config: dict) -> None:
        self.textfile = live_config.get("textfile")
        self.port = live_config.get("prometheus_port")
        self.registry = None
        self._warned: set = set()
        if self.port is None and self.textfile is None:
            return
        try:
            import prometheus_client as prom
        except ImportError:
            self._warn("import", "live view: prometheus_client is not installed (pip install prometheus_client): "
                                 "no /metrics, no textfile")
            return
        self.registry = prom.CollectorRegistry()
        per_rank = {
            "step_seconds": "the rank's step time over the last window (median of its steps)",
            "communication_seconds": "communication per step over the last window",
            "computation_seconds": "computation per step over the last window",
            "exposed_communication_seconds": "communication not overlapped with computation, per step",
            "overlap_ratio": "overlap / communication over the last window",
            "behind": "1 when the rank was left out of the last window (its file did not reach it)"}
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
                prom.start_http_server(self.port, registry=self.registry)
            except OSError as error:
                self._warn("port", f"live view: cannot serve /metrics on port {self.port} ({error})")

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
        if self.textfile is not None:
            import prometheus_client as prom
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
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def watch(out: Path, world_size: int, config: dict, started_wall_ns: int, stopped: threading.Event,
          quiet: bool = False) -> dict:
    """Follow the rank files until ``stopped`` is set, then report the windows complete by then."""
    from . import pipeline  # noqa: F401 - the analysis stack loads while the first window trains
    from .analyses import live as live_analysis
    from .reports import live_text
    every = int(config["live"]["every_steps"])
    cursors = [RankCursor(out / f"rank{rank}.sqlite", started_wall_ns - STALE_SLACK_NS)
               for rank in range(world_size)]
    rule = live_analysis.AlertRule()
    metrics = Metrics(config["live"])
    record = {"every_steps": every, "windows": [], "alerts": [], "skipped": []}
    next_first, disk_ok = 0, True
    while True:
        final = stopped.is_set()
        progress = [cursor.poll() for cursor in cursors]
        windows = ready_windows(progress, next_first, every, final)
        if windows:
            next_first = windows[-1][1] + 1
        if not final and len(windows) > MAX_PENDING:
            record["skipped"] += [list(w) for w in windows[:-MAX_PENDING]]
            if not quiet:
                _emit([live_text.skipped_line(w) for w in windows[:-MAX_PENDING]])
            windows = windows[-MAX_PENDING:]
        for window in windows:
            summary, behind = window_summary(cursors, window, config, world_size)
            if summary is None:
                continue
            figures = live_analysis.window_figures(summary, window, behind)
            alerts = rule.update(figures) if config["live"]["alerts"] else []
            record["windows"].append(figures)
            record["alerts"] += alerts
            if not quiet:
                _emit(live_text.window_lines(figures) + [live_text.alert_line(a) for a in alerts])
            metrics.update(figures, alerts)
            if not _write_record(out, record) and disk_ok:
                disk_ok = False
                sys.stderr.write(f"distprof: warning: live view: cannot write {out / LIVE_FILE}\n")
        if final:
            return record
        stopped.wait(POLL_S)


def main() -> int:
    """``python -m distprof.live`` (started by rank 0's Profiler): the setup line on stdin, then
    the view until stdin closes."""
    try:
        os.nice(5)  # training first
    except OSError:
        pass
    setup = json.loads(sys.stdin.readline() or "null")
    if not setup:
        return 0
    stopped = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.read()  # returns at EOF: rank 0 stopped, or died
        stopped.set()
    threading.Thread(target=wait_for_stop, name="distprof-live-stop", daemon=True).start()
    try:
        watch(Path(setup["out"]), int(setup["world_size"]), setup["config"], int(setup["started_wall_ns"]), stopped,
              bool(setup.get("quiet")))
    except Exception as error:  # noqa: BLE001 - the view dies alone, with one line; training goes on
        sys.stderr.write(f"distprof: warning: live view stopped ({type(error).__name__}: {error})\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
