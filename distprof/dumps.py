"""What one rank's hang dump says, as the hang analysis reads it: its Flight Recorder entries (one
per collective or p2p op it saw), the distprof ranges open when its watchdog wrote, the groups it
states. ``sources/flight_recorder.py`` reads the files into these; ``analyses/hang.py`` reads only
these (an analysis does not reach back into a reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

UNIX_NS = 10**18  # a time_created_ns above this is unix time (after 2001); below, another clock


class Entry(NamedTuple):
    """One Flight Recorder record: a collective (or p2p op) of one process group, as one rank saw it. A named
    tuple: a 10,000-rank job has hundreds of thousands, and a frozen dataclass takes 6x as long to make."""

    group_name: str
    group_desc: str
    seq: int
    kind: str           # profiling_name without its backend prefix: all_reduce, broadcast, ...
    input_sizes: str    # the sizes and dtypes as bounded text, compared across members as they are
    output_sizes: str
    dtypes: str
    completed: bool
    state: str          # scheduled | started | completed, as the recorder saw it
    is_p2p: bool
    created_ns: int = 0  # time_created_ns (0: not given): when the rank called it, on the job's clock
    timeout_ms: int = 0  # the collective's timeout (0: not given)
    done_ns: int = 0     # time_discovered_completed_ns (0: not given; gloo never gives it)
    record_id: int = -1  # the recorder's own count of the process's records (0: its first; -1: not given)


@dataclass(frozen=True)
class OpenRange:
    """A distprof range open on a rank when its watchdog wrote: phase or comm, with the comm's group."""

    name: str
    category: str
    group: tuple[int, ...] | None   # comm ranges: the global ranks of the group (None: the world / not given)
    thread: str
    elapsed_ns: int


@dataclass(frozen=True)
class RankDump:
    """What one input says about one rank."""

    rank: int
    path: str
    status: str                               # read | cut_short
    entries: tuple[Entry, ...]
    group_ranks: dict[str, tuple[int, ...]]   # group name -> member ranks, where the dump states them
    world_size: int | None = None             # as stated (watchdog, or the default group's ranks); None: not said
    step: int | None = None                   # watchdog: the step that ran too long
    open_ranges: tuple[OpenRange, ...] = ()
    has_flight_recorder: bool = True
    detail: str = ""
    origin: str = ""                          # watchdog: pid@host of the process that wrote it
    stack: tuple[str, ...] = ()               # watchdog: the training thread's "file:line in name", innermost last
    unnamed_ranks: tuple[int, ...] | None = None  # pg_config's unnamed entry as stated (gloo's: [] once subgroups
    #                                             exist), the same in every dump of one job; None: none stated
