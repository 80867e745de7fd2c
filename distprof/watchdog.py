"""The hang watchdog (config ``collector.hang_dump_s``): a daemon thread per rank that notices a step running
longer than that and writes ``OUT/hang_rank<r>.json`` once per such step: the distprof ranges open on every
thread (phase, comm with its group), the step and the last one finished, the Flight Recorder dump when
torch.distributed has one, and the Python stack of every thread. ``distprof hang OUT`` reads those files.

It only reads: it never takes a lock the training thread holds for long and never raises into training (a
failure to write is kept in the next file's ``errors`` or dropped).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import annotate, outpaths
from .collector import THREAD_NAMES, clock_ns
from .sources.flight_recorder import HANG_FILE, HANG_FORMAT

MAX_FRAMES = 40  # innermost frames kept per thread


def flight_recorder_dump() -> tuple[dict | None, str]:
    """(this process's Flight Recorder dump, why not): only when torch.distributed is already imported and
    initialized (the watchdog never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None, "torch.distributed not imported"
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None, "torch.distributed not initialized"
        from torch._C._distributed_c10d import _dump_fr_trace_json
        return json.loads(_dump_fr_trace_json()), ""
    except Exception as error:  # noqa: BLE001 - the file is written without it, saying why
        return None, f"{type(error).__name__}: {error}"


def thread_stacks() -> list[dict]:
    """Each thread's Python stack, innermost frame last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    stacks = []
    own = threading.get_ident()  # the watchdog's own stack says nothing about the hang
    for ident, frame in sys._current_frames().items():  # noqa: SLF001 - the one way to see other threads
        if ident == own:
            continue
        frames = traceback.extract_stack(frame)[-MAX_FRAMES:]
        stacks.append({"thread": names.get(ident, str(ident)), "ident": ident,
                       "frames": [f"{f.filename}:{f.lineno} in {f.name}" for f in frames]})
    return stacks


def open_ranges(now_ns: int) -> list[dict]:
    """The distprof ranges open now, outermost first per thread."""
    ranges = []
    for name, category, group, tid, starts in annotate.open_ranges():
        for start in starts:
            ranges.append({"name": name, "category": category,
                           "group": [int(r) for r in group.split(",")] if group else None,
                           "thread": THREAD_NAMES.get(tid, str(tid)), "tid": tid, "elapsed_ns": now_ns - start})
    return sorted(ranges, key=lambda r: (r["tid"], -r["elapsed_ns"]))


class HangWatchdog:
    """Polls ``progress() -> (step, step start ns)``; writes one hang file per step that outlasts ``limit_s``."""

    def __init__(self, progress: Callable[[], tuple[int, int]], limit_s: float, out: Path, rank: int,
                 world_size: int) -> None:
        self.progress = progress
        self.limit_ns = int(limit_s * 1e9)
        self.path = Path(out) / HANG_FILE.format(rank=rank)
        self.rank, self.world_size = rank, world_size
        self.written = 0
        self._stop = threading.Event()
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="distprof-hang-watchdog", daemon=True)
        self._poll_s = min(0.5, max(0.01, limit_s / 4))

    def start(self) -> HangWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        dumped_step = None
        while not self._stop.wait(self._poll_s):
            step, started = self.progress()
            if step != dumped_step and clock_ns() - started > self.limit_ns:
                try:
                    self.write(step, started)
                except Exception as error:  # noqa: BLE001 - never into training
                    self._errors.append(f"{type(error).__name__}: {error}")
                dumped_step = step

    def snapshot(self, step: int, started_ns: int) -> dict:
        now = clock_ns()
        recorder, why_not = flight_recorder_dump()
        return {HANG_FORMAT: 1, "rank": self.rank, "world_size": self.world_size, "pid": os.getpid(),
                "hostname": socket.gethostname(), "time_unix_ns": time.time_ns(),
                "step": step, "last_finished_step": step - 1 if step > 0 else None,
                "step_elapsed_ns": now - started_ns, "hang_dump_s": self.limit_ns / 1e9,
                "open_ranges": open_ranges(now), "flight_recorder": recorder, "flight_recorder_missing": why_not,
                "stacks": thread_stacks(), "errors": list(self._errors)}

    def write(self, step: int, started_ns: int) -> Path:
        """The hang file, written whole or not at all (a reader never sees half of it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        outpaths.write_text(self.path, json.dumps(self.snapshot(step, started_ns), indent=1) + "\n")
        self.written += 1
        return self.path
