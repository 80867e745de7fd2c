"""Public annotation API: ``phase``, ``comm``, ``range`` as context managers and decorators.

Each range is a real NVTX push/pop range in the ``distprof`` domain (so ``nsys profile`` shows
it) and, while a Profiler is active, one row in the rank's collector. NVTX event attributes
and name ids are cached per (name, category) in one reusable Range object per thread, found with
one read of a thread-local's ``__dict__`` and one dict subscript; its ``__enter__``/``__exit__`` are
plain functions with that state bound (no bound method, no attribute chain): a range costs two
clock reads, an NVTX push/pop with prebuilt attributes (skipped when no tool listens) and one list
append of a 4-tuple. benchmarks/collector_overhead.py holds it to <= 1.0x a bare ``nvtx.annotate``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable

import nvtx
from nvtx._lib import DummyDomain as _DummyDomain

from . import events as ev
from .collector import NAMES, NO_COMM, ROUTE, THREAD_NAMES, clock_ns, group_text

DOMAIN_NAME = "distprof"
# NVTX categories of the distprof domain (nsys shows them; the nsys source maps them back)
NVTX_CATEGORY = {ev.PHASE: 1, ev.COMMUNICATION: 2, ev.USER: 3}
_COLORS = {"forward": "green", "backward": "blue", "optimizer": "orange", "Dataloader": "grey",
           ev.PROFILE_STEP: "yellow"}
_CATEGORY_COLORS = {ev.COMMUNICATION: "red", ev.USER: "purple", ev.PHASE: "cyan"}

_domain = nvtx.get_domain(DOMAIN_NAME)


_state = ROUTE
_state.push, _state.pop = _domain.push_range, _domain.pop_range
_active_domain = _domain
_descriptors: dict[tuple, tuple[int, object]] = {}


def set_nvtx(enabled: bool) -> None:
    """Turn NVTX emission on or off (recording into the collector is unaffected)."""
    global _active_domain, _phases, _comms, _users, _comms_with, _comm_keys
    _active_domain = _domain if enabled else _NoNvtx()
    _state.push, _state.pop = _active_domain.push_range, _active_domain.pop_range
    _descriptors.clear()
    # every thread makes its ranges again, for the new domain
    _phases, _comms, _users, _comms_with, _comm_keys = _thread_tables()


def nvtx_domain():
    """The NVTX domain ranges start/end in, or None when NVTX is off or no tool listens."""
    domain = _active_domain
    if isinstance(domain, (_DummyDomain, _NoNvtx)) or not hasattr(domain, "start_range"):
        return None
    return domain


def event_attributes(name: str, category: str):
    """NVTX event attributes of the distprof domain for a range started by hand (ProfileStep)."""
    return _domain.get_event_attributes(message=name, color=_COLORS.get(name, _CATEGORY_COLORS.get(category, "cyan")),
                                        category=NVTX_CATEGORY.get(category, 0))


class _NoNvtx:
    """Stands in for an NVTX domain when NVTX is switched off."""

    def get_event_attributes(self, **_):
        return None

    def push_range(self, _attributes):
        pass

    def pop_range(self):
        pass

    def get_category_id(self, _name):
        return 0


def descriptor(name: str, category: str, kind: str, comm: tuple[str, int, int] = NO_COMM) -> tuple[int, object]:
    """(name id in the collector, NVTX event attributes) of a range, made once per name and message
    metadata ``comm`` = (group text, nbytes, peer). A known nbytes also rides as the NVTX payload
    (an int64 in the event attributes, built here once, so it costs nothing per range)."""
    key = (name, category, kind, *comm)
    found = _descriptors.get(key)
    if found is None:
        domain = _active_domain
        color = _COLORS.get(name, _CATEGORY_COLORS.get(category, "cyan"))
        category_id = NVTX_CATEGORY.get(category, 0)
        try:  # an nvtx without int payloads (they came after 0.2.10) gets the range without it
            extra = {"payload": comm[1]} if comm[1] >= 0 and not isinstance(domain, _NoNvtx) else {}
            attributes = domain.get_event_attributes(message=name, color=color, category=category_id, **extra)
        except TypeError:
            attributes = domain.get_event_attributes(message=name, color=color, category=category_id)
        found = _descriptors[key] = (NAMES.id_of(name, category, kind, comm), attributes)
    return found


def comm_metadata(group=None, nbytes: int | None = None, peer: int | None = None) -> tuple[str, int, int]:
    """(group text, nbytes, peer) as the collector stores them ("" / -1 = not given), checked once
    per distinct call site, so a wrong value fails where it is written, not in the merge."""
    text = group_text(group) if group is not None else ""
    values = []
    for label, value in (("nbytes", nbytes), ("peer", peer)):
        if value is None:
            values.append(-1)
            continue
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise ValueError(f"distprof.comm: {label} must be an integer >= 0, not {value!r}")
        values.append(int(value))
    return text, values[0], values[1]


# Every Range made (one per thread and name, made once): the hang watchdog reads which are open from
# here, so the hot path stays as it was.
_ALL_RANGES: weakref.WeakSet = weakref.WeakSet()
_ALL_RANGES_LOCK = threading.Lock()


def open_ranges() -> list[tuple[str, str, str, int, list[int]]]:
    """(name, category, comm group text, thread id, start times) of every range open now, on any thread."""
    with _ALL_RANGES_LOCK:
        ranges = list(_ALL_RANGES)
    found = []
    for item in ranges:
        start, outer = item._start[0], list(item._outer)  # read once: the owning thread may open or close meanwhile
        starts = [*outer, start] if start is not None else []
        if starts:
            found.append((item.label[0], item.label[1], item._comm[0], item._thread, starts))
    return found


class Range:
    """A named range of one thread. ``phase("forward")`` returns the same object every time on
    a given thread, so entering it allocates nothing. ``_start[0]`` holds the start of its open use
    (None when closed); only when the same range nests in itself are the outer starts kept in ``_outer``.

    Each Range gets a class of its own whose ``__enter__``/``__exit__`` are plain functions with the
    range's state bound as default arguments (see ``_hooks``): ``with`` looks both up on the type,
    and plain functions spare it a bound-method object and the attribute reads per call, which is
    what keeps a range cheaper than a bare ``nvtx.annotate`` (benchmarks/collector_overhead.py).
    ``nvtx_calls``: push/pop NVTX ranges (default: when an NVTX tool is attached and NVTX is on)."""

    __slots__ = ("_name_id", "_attributes", "_start", "_outer", "_thread", "label", "_comm", "_nvtx_calls",
                 "__weakref__")

    def __new__(cls, name: str, *_args, **_kwargs) -> Range:
        own_class = type(f"{cls.__name__}[{name}]", (cls,), {"__slots__": (), "__module__": cls.__module__})
        return object.__new__(own_class)

    def __init__(self, name: str, category: str = ev.PHASE, kind: str = ev.RANGE,
                 comm: tuple[str, int, int] = NO_COMM, nvtx_calls: bool | None = None) -> None:
        self.label = (name, category, kind)
        self._comm = comm
        self._name_id, self._attributes = descriptor(name, category, kind, comm)
        self._start: list[int | None] = [None]  # a list, not a value in a slot: see _hooks
        self._outer: list[int] = []
        self._nvtx_calls = _nvtx_attached() if nvtx_calls is None else nvtx_calls
        self._thread = threading.get_native_id()  # the lane: OS thread id, as nsys shows it
        THREAD_NAMES[self._thread] = threading.current_thread().name
        enter, exit_ = _hooks(self)
        type(self).__enter__, type(self).__exit__ = staticmethod(enter), staticmethod(exit_)
        with _ALL_RANGES_LOCK:
            _ALL_RANGES.add(self)

    def cancel(self) -> None:
        """Close the innermost open use without recording it (e.g. a next() that ended the loader)."""
        if self._nvtx_calls:
            _state.pop()
        self._start[0] = self._outer.pop() if self._outer else None

    def __call__(self, func: Callable) -> Callable:
        """Decorator form: the calling thread's range around every call of ``func``."""
        name, category, kind = self.label
        comm_meta = self._comm

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with _get(name, category, kind, comm_meta):
                return func(*args, **kwargs)

        return wrapper


def _hooks(item: Range) -> tuple[Callable, Callable]:
    """The ``__enter__``/``__exit__`` of one Range. Everything they use is a default argument (a
    fast local); only the range's start, ``route.append`` (swapped at every flush) and, with NVTX,
    ``route.push/pop`` (swapped by set_nvtx) are read per call. A row is (start, end, thread, name id).

    The start is item 0 of a one-item list, not a slot of the Range: every Range's hooks share these
    functions' code, whose slot reads CPython would specialise to one Range class at a time, so a
    loop over several names would keep undoing that (measured: +90 ns a range with three names).
    A list index is specialised by the list type alone, and is cheaper than a list used as a stack."""
    start, outer, thread, name_id, attributes = item._start, item._outer, item._thread, item._name_id, item._attributes
    if not item._nvtx_calls:  # no tool: nvtx no-ops every push/pop for the whole process, so skip them
        def enter(item=item, start=start, outer=outer, clock=clock_ns):
            if start[0] is not None:
                outer.append(start[0])
            start[0] = clock()
            return item

        def exit_(exc_type, exc, traceback, start=start, outer=outer, clock=clock_ns, route=_state,
                  thread=thread, name_id=name_id) -> None:
            end = clock()
            began = start[0]
            start[0] = outer.pop() if outer else None
            append = route.append
            if append is not None:
                append((began, end, thread, name_id))  # atomic under the GIL
        return enter, exit_

    def enter_nvtx(item=item, start=start, outer=outer, clock=clock_ns, route=_state, attributes=attributes):
        route.push(attributes)
        if start[0] is not None:
            outer.append(start[0])
        start[0] = clock()
        return item

    def exit_nvtx(exc_type, exc, traceback, start=start, outer=outer, clock=clock_ns, route=_state,
                  thread=thread, name_id=name_id) -> None:
        end = clock()
        route.pop()
        began = start[0]
        start[0] = outer.pop() if outer else None
        append = route.append
        if append is not None:
            append((began, end, thread, name_id))
    return enter_nvtx, exit_nvtx


def _nvtx_attached() -> bool:
    """Whether ranges made now push/pop NVTX: an NVTX tool is attached and NVTX is on. Without a tool
    nvtx gives a DummyDomain for the whole process and every push/pop is a no-op."""
    return not isinstance(_active_domain, (_DummyDomain, _NoNvtx))


# Each thread's ranges by name, one thread-local per kind of range: its per-thread ``__dict__`` is the
# table, so a lookup is ``table.__dict__[name]`` (threading.local answers ``__dict__`` before any
# other lookup: the cheapest thread-local read) and a thread's ranges go away with the thread (an
# ident reused by a new thread starts empty). set_nvtx replaces them all, which empties every
# thread's tables. Ranges with message metadata are kept apart (_comms_with, by (name, *metadata));
# _comm_keys maps comm()'s arguments to them.
def _thread_tables() -> tuple[threading.local, ...]:
    return threading.local(), threading.local(), threading.local(), threading.local(), threading.local()


_phases, _comms, _users, _comms_with, _comm_keys = _thread_tables()


def _get(name: str, category: str, kind: str, comm: tuple[str, int, int] = NO_COMM) -> Range:
    """The calling thread's Range for (name, category) and message metadata, made on first use."""
    if comm == NO_COMM:
        table, key = {ev.PHASE: _phases, ev.COMMUNICATION: _comms, ev.USER: _users}[category].__dict__, name
    else:
        table, key = _comms_with.__dict__, (name, *comm)
    found = table.get(key)
    if found is None:
        found = table[key] = Range(name, category, kind, comm)
    return found


def phase(name: str) -> Range:
    """A training phase (forward, backward, optimizer, or your own): category PHASE."""
    try:  # the hot path: no call besides the subscript (try costs nothing when nothing is raised)
        return _phases.__dict__[name]
    except KeyError:
        return _get(name, ev.PHASE, ev.RANGE)


def comm(name: str, group: list[int] | None = None, nbytes: int | None = None, peer: int | None = None) -> Range:
    """A communication operation (allreduce, broadcast, ...): category COMMUNICATION. Open it
    on the thread that runs the communication: that thread is its lane.

    ``group``: the global ranks of its process group (None: the world); ``nbytes``: the message
    size as nccl-tests counts it (allgather: the whole output, reduce_scatter: the whole input,
    else the buffer); ``peer``: the global rank at the other end of a send/recv. They let the merge
    match collectives per group and compute bandwidth; without them the call costs what it did."""
    try:  # the hot path without metadata: three identity tests, then what comm(name) always did
        if group is None and nbytes is None and peer is None:
            return _comms.__dict__[name]
    except KeyError:
        return _get(name, ev.COMMUNICATION, ev.COMM_OP)
    return _comm_with(name, group, nbytes, peer)


# Ranges with message metadata kept per thread: a job whose message sizes vary (an MoE all-to-all)
# would otherwise add one Range (a class and ~4 KB) per distinct size for as long as it trains
MAX_COMM_RANGES = 1024


def _comm_with(name: str, group, nbytes, peer) -> Range:
    """comm() with message metadata: one cached Range per (name, ranks, nbytes, peer) and thread,
    at most MAX_COMM_RANGES of them (then the cache starts again; an open range stays valid)."""
    ranks = tuple(group) if group is not None else None  # once: a generator can be read only once
    key = (name, ranks, nbytes, peer)
    table = _comm_keys.__dict__
    try:
        return table[key]
    except KeyError:
        if len(table) >= MAX_COMM_RANGES:
            table.clear()
            _comms_with.__dict__.clear()
        found = table[key] = _get(name, ev.COMMUNICATION, ev.COMM_OP, comm_metadata(ranks, nbytes, peer))
        return found


def range(name: str) -> Range:  # noqa: A001 - the public name users expect
    """A user-defined range: category USER (the UserDefined summary)."""
    try:
        return _users.__dict__[name]
    except KeyError:
        return _get(name, ev.USER, ev.RANGE)
