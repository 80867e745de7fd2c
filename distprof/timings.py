"""The stage timer (``--timings`` or ``DISTPROF_TIMINGS=1``): each stage's wall and CPU time on
stderr when the command ends, so a slowdown is seen by whoever made it, not found later by a
benchmark. Off, a stage costs one dict lookup. CPU counts this process and the reader workers it
forked and waited for (``os.times``), so a parallel read shows its CPU beside its wall."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

ENV = "DISTPROF_TIMINGS"
_state: dict[str, object] = {"on": False, "stages": []}


def enable() -> None:
    """Time the stages from now on (``--timings``)."""
    _state["on"] = True


def enabled() -> bool:
    return bool(_state["on"]) or os.environ.get(ENV, "") == "1"


def _cpu_s() -> float:
    children = os.times()  # clock ticks: coarse, and only what is left once a worker was waited for
    return time.process_time() + children.children_user + children.children_system


def _since_process_start_s() -> float | None:
    """Wall seconds since this process started (Linux: /proc/self/stat's start time), None elsewhere."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def start_up() -> None:
    """Record the interpreter's start and the imports until now as the stage ``start-up``."""
    if enabled() and not _state["stages"]:
        _state["stages"].append(("start-up", _since_process_start_s(), time.process_time()))


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as one stage (nested stages are listed on their own, inside their parent)."""
    if not enabled():
        yield
        return
    wall, cpu = time.perf_counter(), _cpu_s()
    try:
        yield
    finally:
        _state["stages"].append((name, time.perf_counter() - wall, _cpu_s() - cpu))


def report(stream=None) -> None:
    """Print the stages timed so far, one line each, and forget them."""
    stages = _state["stages"]
    if not enabled() or not stages:
        return
    out = stream or sys.stderr
    width = max(len(name) for name, _, _ in stages)
    for name, wall, cpu in stages:
        shown = "   -   " if wall is None else f"{wall:7.3f}"
        print(f"distprof: timing: {name:<{width}}  wall {shown} s  cpu {cpu:7.3f} s", file=out)
    _state["stages"] = []
