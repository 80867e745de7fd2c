"""Step scheduler: which steps are recorded, as in the PyTorch and Paddle profilers.

A cycle is ``wait`` closed steps, ``warmup`` ready steps (profiling set up, nothing kept) and
``active`` recorded steps, after ``skip_first`` steps, repeated ``repeat`` times (0: forever).
The last active step of a cycle is RECORD_AND_RETURN: ``on_trace_ready`` fires after it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class State(enum.Enum):
    CLOSED = "closed"
    READY = "ready"
    RECORD = "record"
    RECORD_AND_RETURN = "record_and_return"


RECORDING = (State.RECORD, State.RECORD_AND_RETURN)
Scheduler = Callable[[int], State]


def make_schedule(*, wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 0,
                  skip_first: int = 0) -> Scheduler:
    """The PyTorch-style schedule (Paddle calls wait/warmup/active closed/ready/record)."""
    for name, value in (("wait", wait), ("warmup", warmup), ("repeat", repeat), ("skip_first", skip_first)):
        if value < 0:
            raise ValueError(f"schedule: {name} must be >= 0, got {value}")
    if active < 1:
        raise ValueError(f"schedule: active must be >= 1, got {active}")
    cycle = wait + warmup + active

    def state(step: int) -> State:
        if step < skip_first:
            return State.CLOSED
        step -= skip_first
        if repeat and step // cycle >= repeat:
            return State.CLOSED
        position = step % cycle
        if position < wait:
            return State.CLOSED
        if position < wait + warmup:
            return State.READY
        return State.RECORD_AND_RETURN if position == cycle - 1 else State.RECORD

    return state


def from_range(start: int, end: int) -> Scheduler:
    """The ``(start, end)`` shorthand: record steps start .. end-1, once."""
    if not 0 <= start < end:
        raise ValueError(f"schedule: (start, end) needs 0 <= start < end, got ({start}, {end})")
    return make_schedule(skip_first=start, wait=0, warmup=0, active=end - start, repeat=1)


def resolve(schedule) -> Scheduler | None:
    """None (record every step), a (start, end) pair, a dict of make_schedule keys, or a callable."""
    if schedule is None:
        return None
    if callable(schedule):
        return schedule
    if isinstance(schedule, (tuple, list)) and len(schedule) == 2:
        return from_range(int(schedule[0]), int(schedule[1]))
    if isinstance(schedule, dict):
        unknown = set(schedule) - {"wait", "warmup", "active", "repeat", "skip_first"}
        if unknown:
            raise ValueError(f"schedule: unknown key(s) {', '.join(sorted(unknown))}")
        return make_schedule(**schedule)
    raise ValueError(f"schedule: expected (start, end), a dict or a callable, got {type(schedule).__name__}")
