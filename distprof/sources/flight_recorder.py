"""Reader of hang evidence: PyTorch Flight Recorder dumps (JSON from ``_dump_fr_trace_json``, pickle from
``_dump_fr_trace`` or the NCCL watchdog's ``nccl_trace_rank_<r>`` files) and distprof's own watchdog files
(``hang_rank<r>.json``, which may carry a Flight Recorder dump inside).

Every input is untrusted: the stuck job wrote it while dying, or it is something else given by mistake. So a
file is opened without blocking and refused unless it is a regular file (a FIFO blocks a reader, /dev/zero
fills memory); its size, the memory its decoding takes, its nesting and every number in it are bounded; nothing
read is ever ``repr``-ed whole (a 2 kB pickle of shared lists prints as 2^64 leaves). A pickle is read by an
unpickler that builds plain builtins only: a dump that names any class or function is refused and nothing of it
runs. A dump cut short (a dying process) is read as far as it goes. A bad file is one line naming it, and skipped.
Sources never compute metrics: this turns files into ``RankDump`` records; ``analyses.hang`` does the rest.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..dumps import Entry, OpenRange, RankDump
from ..events import SourceError

READ, CUT_SHORT, REFUSED = "read", "cut_short", "refused"
HANG_FILE = "hang_rank{rank}.json"  # distprof's watchdog file, one per rank
HANG_FORMAT = "distprof_hang"  # the key that marks a watchdog file
WORLD_DESC = "default_pg"
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_ENTRY_KEYS = ("collective_seq_id", "profiling_name", "process_group")
MAX_WORLD_SIZE = 1 << 20  # as merge (sources.MAX_WORLD_SIZE): a rank or world beyond is a corrupt value, not a job
MAX_DUMP_BYTES = 64 << 20  # a dump of 2,000 entries with their stacks is a few MiB
MAX_DECODED_BYTES = 256 << 20  # the memory one dump may take once decoded (an 8-byte opcode can build 64 bytes)
MAX_PICKLE_RATIO = 24  # memory built per pickle byte read: a real dump builds under 10, '[]' opcodes 36
MAX_SALVAGE_BYTES = 8 << 20  # a pickle cut short is re-read by the pure-Python unpickler (~1 us an opcode)
MAX_TEXT = 256  # a group name, kind or state longer than this is not one
MAX_THREADS, MAX_FRAMES, MAX_FRAME_TEXT = 1024, 256, 4096  # watchdog stacks: threads, frames each, characters
MAX_SHAPE_ITEMS = 256  # items of a sizes / dtypes value shown; the rest reads as "..."
MAX_INT = (1 << 63) - 1  # seq ids, times and counts are int64 in the recorder


class Bad(ValueError):
    """A field of a dump that no real dump has: the file is refused in one line naming the field."""


@dataclass(frozen=True)
class InputState:
    """One input file and what became of it."""

    path: str
    status: str     # read | cut_short | refused
    rank: int | None = None
    detail: str = ""

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "rank": self.rank, "detail": self.detail}


# -- bounded values ---------------------------------------------------------------------------------------
def show(value: object) -> str:
    """A value of a file, short: never str() of a 5,000-digit int (ValueError) or repr of an object graph."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value) if -10**20 < value < 10**20 else f"a {value.bit_length()}-bit integer"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    return f"a {type(value).__name__}"


def count(value: object, what: str, low: int = 0, high: int = MAX_INT) -> int:
    """An integer field as dumps write it (an int, or its decimal text as in pg_status), within [low, high]."""
    if isinstance(value, str) and 0 < len(value) <= 20 and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise Bad(f"{what} is {show(value)}, not an integer from {low} to {high}")


def text(value: object, what: str, default: str = "") -> str:
    if value is None:
        return default
    if isinstance(value, str) and len(value) <= MAX_TEXT:
        return value
    raise Bad(f"{what} is {show(value)}, not a short text")


def shape(value: object) -> str:
    """input_sizes / dtypes as text, visiting at most MAX_SHAPE_ITEMS items and 8 levels: a list whose items
    share references (2^64 leaves when printed) or nest 100,000 deep still ends at once."""
    key = _shape_key(value)
    found = _SHAPES.get(key) if key is not None else None
    if found is not None:
        return found
    plain = _plain_shape(value)
    if plain is not None:
        if len(_SHAPES) > 4096:
            _SHAPES.clear()
        _SHAPES[key] = plain
        return plain
    out: list[str] = []
    todo: list[tuple[bool, object, int]] = [(False, value, 0)]  # (literal text?, item, depth)
    budget = MAX_SHAPE_ITEMS
    while todo:
        literal, item, depth = todo.pop()
        budget -= 1
        if budget < 0:
            out.append("...")
            break
        if literal:
            out.append(str(item))
        elif isinstance(item, (list, tuple)):
            if depth >= 8:
                out.append("[...]")
                continue
            out.append("[")
            todo.append((True, "]", depth))
            for index in range(min(len(item), MAX_SHAPE_ITEMS) - 1, -1, -1):
                todo.append((False, item[index], depth + 1))
                if index:
                    todo.append((True, ", ", depth))
        else:
            out.append(repr(item[:64]) if isinstance(item, str) else show(item))
    return "".join(out)


_SHAPES: dict[tuple, str] = {}  # the few distinct shapes of a job, each made into text once


def _shape_key(value: object) -> tuple | None:
    """A hashable twin of a short list of lists / of names (None: anything else); only texts _plain_shape made
    are stored under it."""
    if type(value) is not list or len(value) > 16:
        return None
    try:
        key = tuple(map(tuple, value)) if value and type(value[0]) is list else tuple(value)
        hash(key)
    except TypeError:
        return None
    return key


def _plain_shape(value: object) -> str | None:
    """The text of the shapes every dump has (a few dtype names; a few tensors' sizes), in one pass; None for
    anything else, which shape() walks within its bounds."""
    if type(value) is not list or len(value) > 16:
        return None
    if all(type(item) is str and len(item) <= 64 for item in value):
        return repr(value)
    if all(type(item) is list and len(item) <= 8 and all(type(n) is int and -MAX_INT <= n <= MAX_INT for n in item)
           for item in value):
        return repr(value)
    return None


class _RanksCache:
    """pg_config 'ranks' text ("[0, 1, 2]") -> ranks, parsed once per distinct text: 10,000 dumps of a
    10,000-rank world repeat one text (evaluating it as a Python literal per file took 68% of the time and
    grew as N^2).
    Bounded by the text it keeps; one tuple shared by every dump that states the same group."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.items: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self.size, self.budget = 0, budget

    def get(self, value: object, what: str) -> tuple[int, ...]:
        if not isinstance(value, str):
            return ranks_of(value, what)
        found = self.items.get(value)
        if found is None:
            if len(value) > 12 * MAX_WORLD_SIZE:
                raise Bad(f"{what} is {len(value)} characters, more than a world of {MAX_WORLD_SIZE} ranks")
            try:
                parsed = json.loads(value, parse_constant=_no_constant) if value.strip() else []
            except (ValueError, RecursionError):
                raise Bad(f"{what} is {show(value)}, not a list of ranks") from None
            found = ranks_of(parsed, what)
            self.items[value] = found
            self.size += len(value)
            while self.size > self.budget and len(self.items) > 1:
                self.size -= len(self.items.popitem(last=False)[0])
        self.items.move_to_end(value)
        return found


RANKS = _RanksCache()


def ranks_of(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or len(value) > MAX_WORLD_SIZE:
        raise Bad(f"{what} is {show(value)}, not a list of at most {MAX_WORLD_SIZE} ranks")
    for rank in value:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_WORLD_SIZE:
            raise Bad(f"{what} holds {show(rank)}, not a rank below {MAX_WORLD_SIZE}")
    return tuple(sorted(set(value)))


# -- reading a file, bounded ------------------------------------------------------------------------------
def read_regular(path: Path, limit: int = MAX_DUMP_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. Opened without blocking and checked on the open
    descriptor, before any read: a FIFO blocks a plain open, /dev/zero reads until memory runs out."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(f"{path}: refused unread: not a regular file (a FIFO, device or socket); "
                              "give dump files")
        if info.st_size > limit:
            raise SourceError(f"{path}: refused unread: {info.st_size >> 20} MiB, larger than a dump can be "
                              f"({limit >> 20} MiB)")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SourceError(f"{path}: refused: grew past {limit >> 20} MiB while read")
    return data


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _OverBudget(Exception):
    pass


class _Metered:
    """A pickle's bytes as a file for the C unpickler, which asks for them 128 KiB at a time (peek, then read):
    each ask checks how much memory the process has grown by, so a pickle that builds more than
    MAX_DECODED_BYTES stops part-way (40 MB of one-byte 'empty list' opcodes built 2.8 GiB), and one that builds
    more than MAX_PICKLE_RATIO times the bytes read so far stops early (a dump builds under 10 times its size)."""

    def __init__(self, data: bytes, budget: int = MAX_DECODED_BYTES) -> None:
        self.view, self.pos = memoryview(data), 0
        self.start = _resident_bytes()
        self.budget = budget

    def _check(self) -> None:
        grown = _resident_bytes() - self.start
        if grown > self.budget or (grown > 32 << 20 and grown > MAX_PICKLE_RATIO * self.pos):
            raise _OverBudget

    def read(self, n: int = -1) -> bytes:
        self._check()
        end = len(self.view) if n is None or n < 0 else self.pos + n
        chunk = bytes(self.view[self.pos:end])
        self.pos += len(chunk)
        return chunk

    def readinto(self, buffer) -> int:  # noqa: ANN001 - a writable buffer
        chunk = self.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)

    def peek(self, n: int = 0) -> bytes:
        self._check()
        return bytes(self.view[self.pos:self.pos + max(n, 1)])

    def readline(self) -> bytes:
        self._check()
        end = bytes(self.view[self.pos:self.pos + MAX_TEXT * 4]).find(b"\n")
        return self.read(MAX_TEXT * 4 if end < 0 else end + 1)


def _refuse_names(module: str, name: str):  # noqa: ANN202
    raise pickle.UnpicklingError(f"names {show(module)[1:-1]}.{show(name)[1:-1]}")


def _refuse_ids(pid):  # noqa: ANN001, ANN202
    raise pickle.UnpicklingError("uses persistent ids")


class _BuiltinsOnlyFast(pickle.Unpickler):
    """The C unpickler, building dicts, lists, tuples, str, bytes, numbers, bool and None only: anything that
    needs a class or a function (find_class, persistent ids) stops the load before it is called."""

    find_class = staticmethod(_refuse_names)
    persistent_load = staticmethod(_refuse_ids)


class _BuiltinsOnly(pickle._Unpickler):  # noqa: SLF001 - the pure-Python unpickler keeps its stack on failure
    """The same in pure Python, for a dump cut short: what it built before the end is still on its stacks."""

    find_class = staticmethod(_refuse_names)
    persistent_load = staticmethod(_refuse_ids)

    def salvage(self) -> list:
        """Every object built so far (memo, stacks): what a load cut short still holds."""
        objects = list(self.memo.values()) + list(getattr(self, "stack", []))
        for frame in getattr(self, "metastack", []):
            objects += frame
        return objects


def _entry_dicts(objects: list) -> list[dict]:
    """The Flight Recorder entries among built objects (nested lists/dicts searched, each object once)."""
    found: dict[int, dict] = {}
    todo = list(objects)
    seen: set[int] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            if all(key in item for key in _ENTRY_KEYS):
                found[id(item)] = item
            else:
                todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    records = list(found.values())
    order = [r.get("record_id") if isinstance(r.get("record_id"), int) else 0 for r in records]
    return [records[i] for i in sorted(range(len(records)), key=order.__getitem__)]


def _pg_config_among(objects: list) -> dict:
    """A partly read dump's pg_config: the dict of dicts with 'ranks'."""
    for item in objects:
        if isinstance(item, dict) and item and all(isinstance(v, dict) and "ranks" in v for v in item.values()):
            return item
    return {}


def load_pickle(data: bytes, path: Path) -> tuple[dict, str]:
    """(dump, status): the whole dump, or what a dump cut short holds. Refuses (SourceError) a pickle that asks
    for anything but builtins, or that builds more than MAX_DECODED_BYTES."""
    try:
        dump = _BuiltinsOnlyFast(_Metered(data)).load()
    except _OverBudget:
        raise SourceError(f"{path}: refused: decoding it took more than {MAX_DECODED_BYTES >> 20} MiB "
                          f"({len(data) >> 10} KiB of pickle; a Flight Recorder dump takes a few times its size)") \
            from None
    except pickle.UnpicklingError as error:
        if str(error).startswith(("names ", "uses persistent")):
            raise SourceError(f"{path}: refused: the pickle {error} (only plain builtins are read)") from None
        return _salvaged(data, path, "not a readable pickle")
    except MemoryError:
        raise SourceError(f"{path}: refused: out of memory decoding it") from None
    except Exception as error:  # noqa: BLE001 - a torn pickle fails in many ways; what it holds is salvaged
        return _salvaged(data, path, type(error).__name__)
    if not isinstance(dump, dict):
        raise SourceError(f"{path}: not a Flight Recorder dump (a pickled {type(dump).__name__})")
    return dump, READ


def _salvaged(data: bytes, path: Path, why: str) -> tuple[dict, str]:
    if len(data) > MAX_SALVAGE_BYTES:
        raise SourceError(f"{path}: a pickle cut short ({why}); one above {MAX_SALVAGE_BYTES >> 20} MiB is not "
                          "salvaged")
    unpickler = _BuiltinsOnly(io.BytesIO(data))
    try:
        unpickler.load()
    except pickle.UnpicklingError as error:
        if str(error).startswith(("names ", "uses persistent")):
            raise SourceError(f"{path}: refused: the pickle {error} (only plain builtins are read)") from None
    except Exception:  # noqa: BLE001, S110 - it fails where the fast one did; its stacks hold the rest
        pass
    objects = unpickler.salvage()
    entries = _entry_dicts(objects)
    if not entries:
        raise SourceError(f"{path}: a pickle cut short before its first entry ({why})")
    return {"entries": entries, "pg_config": _pg_config_among(objects)}, CUT_SHORT


class _Constant(ValueError):
    pass


def _no_constant(name: str) -> float:
    raise _Constant(name)


def load_json(data: bytes, path: Path) -> dict:
    """A JSON dump, refused when its decoding would take more than MAX_DECODED_BYTES (counted from its brackets
    and commas before decoding: 40 MB of '[],' is 13 million lists), nests too deep, or states Infinity / NaN or a
    number of thousands of digits."""
    estimate = len(data) * 21  # what '[],' repeated takes, the most a byte of JSON builds
    if estimate > MAX_DECODED_BYTES:
        estimate = len(data) + 80 * (data.count(b"[") + data.count(b"{")) + 40 * data.count(b",")
    if estimate > MAX_DECODED_BYTES:
        raise SourceError(f"{path}: refused unread: decoding it would take about {estimate >> 20} MiB, more than "
                          f"a dump takes ({MAX_DECODED_BYTES >> 20} MiB)")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise SourceError(f"{path}: neither JSON nor a pickle") from None
    except _Constant as error:
        raise SourceError(f"{path}: refused: states {error} (no dump has it)") from None
    except RecursionError:
        raise SourceError(f"{path}: refused: nested deeper than a dump is") from None
    except json.JSONDecodeError as error:
        if error.pos >= len(data.rstrip()) - 1 or "Unterminated" in error.msg:
            raise SourceError(f"{path}: JSON cut short at byte {error.pos} of {len(data)}: "
                              "nothing of it is used") from None
        raise SourceError(f"{path}: not valid JSON ({error.msg} at byte {error.pos})") from None
    except ValueError as error:  # an integer of more than 4,300 digits
        raise SourceError(f"{path}: refused: {str(error).split(':')[0].lower()} (no dump has such a number)") \
            from None
    if not isinstance(doc, dict):
        raise SourceError(f"{path}: not a Flight Recorder dump (JSON {type(doc).__name__})")
    return doc


# -- one dump -> records ---------------------------------------------------------------------------------
def _completed_by_status(dump: dict) -> dict[str, int]:
    """Local pg id -> last completed seq from pg_status (gloo never marks entries 'completed')."""
    status = dump.get("pg_status")
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise Bad(f"pg_status is {show(status)}, not a table")
    return {pg if isinstance(pg, str) else show(pg): count(values.get("last_completed_collective", -1),
                                                           "pg_status last_completed_collective", low=-1)
            for pg, values in status.items() if isinstance(values, dict)}


def _name(value: object, what: str) -> str:
    return value if type(value) is str and len(value) <= MAX_TEXT else text(value, what)


def _time(value: object, what: str) -> int:
    """A time or count field: 0 when absent. The common case first: 85,000 entries of a 5,000-rank job."""
    if type(value) is int and 0 <= value <= MAX_INT:
        return value
    return 0 if value is None else count(value, what)


def _entry(raw: dict, done_by_pg: dict[str, int]) -> Entry | None:
    """One entry, every field checked (Bad names the first one no real dump has); None: not a collective."""
    group = raw.get("process_group")
    if type(group) not in (list, tuple) or not group:
        return None
    name = _name(group[0], "process_group name")
    desc = _name(group[1], "process_group desc") if len(group) > 1 else ""
    seq = raw.get("collective_seq_id")
    if type(seq) is not int or not -1 <= seq <= MAX_INT:
        seq = count(seq, "collective_seq_id", low=-1)
    state = _name(raw.get("state", ""), "state")
    kind = _name(raw.get("profiling_name", ""), "profiling_name").split(":", 1)[-1]
    pg_id = raw.get("pg_id")
    if done_by_pg:
        key = str(pg_id) if type(pg_id) is int and -MAX_INT <= pg_id <= MAX_INT else pg_id
        done = done_by_pg.get(key if type(key) is str else show(key), -1)
    else:
        done = -1
    completed = state == "completed" or raw.get("retired") is True or seq <= done
    return Entry(name, desc, seq, kind, shape(raw.get("input_sizes")), shape(raw.get("output_sizes")),
                 shape(raw.get("input_dtypes")), completed, state, raw.get("is_p2p") is True,
                 _time(raw.get("time_created_ns"), "time_created_ns"), _time(raw.get("timeout_ms"), "timeout_ms"),
                 _time(raw.get("time_discovered_completed_ns"), "time_discovered_completed_ns"),
                 raw["record_id"] if type(raw.get("record_id")) is int and 0 <= raw["record_id"] <= MAX_INT else -1)


def from_dump(dump: dict, rank: int, path: Path, status: str) -> RankDump:
    """A Flight Recorder dump (JSON or pickle form, whole or salvaged) of one rank."""
    done = _completed_by_status(dump)
    raw_entries = dump.get("entries") or []
    if not isinstance(raw_entries, list):
        raise Bad(f"entries is {show(raw_entries)}, not a list")
    entries = tuple(e for e in (_entry(raw, done) for raw in raw_entries if isinstance(raw, dict)) if e is not None)
    groups: dict[str, tuple[int, ...]] = {}
    world = unnamed = None
    config = dump.get("pg_config")
    for name, values in (config.items() if isinstance(config, dict) else ()):
        if not isinstance(values, dict):
            continue
        ranks = RANKS.get(values.get("ranks", []), f"pg_config {show(name)} ranks")
        if name == "":
            unnamed = ranks  # no entry names it, but one job's dumps all state it alike (two jobs' may not)
        if name and ranks:
            groups[text(name, "pg_config name")] = ranks
            if values.get("desc") == WORLD_DESC:
                world = len(ranks)
    return RankDump(rank, str(path), status, entries, groups, world_size=world, unnamed_ranks=unnamed)


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


# -- files ---------------------------------------------------------------------------------------------
def _open_range(raw: object) -> OpenRange:
    if not isinstance(raw, dict):
        raise Bad(f"an open_ranges item is {show(raw)}, not a table")
    group = raw.get("group")
    return OpenRange(text(raw.get("name"), "open_ranges name"), text(raw.get("category"), "open_ranges category"),
                     None if group is None else ranks_of(group, "open_ranges group"),
                     show(raw["thread"]) if isinstance(raw.get("thread"), int) else text(raw.get("thread"),
                                                                                          "open_ranges thread"),
                     count(raw.get("elapsed_ns", 0), "open_ranges elapsed_ns"))


def _main_stack(stacks: object) -> tuple[str, ...]:
    """The training thread's frames from the watchdog's 'stacks': MainThread's, else the first thread's (the
    watchdog leaves its own out); at most MAX_THREADS threads of MAX_FRAMES frames of MAX_FRAME_TEXT characters."""
    if stacks is None:
        return ()
    if not isinstance(stacks, list) or len(stacks) > MAX_THREADS:
        raise Bad(f"stacks is {show(stacks)}, not a list of at most {MAX_THREADS} threads")
    chosen: list = []
    for index, item in enumerate(stacks):
        frames = item.get("frames", []) if isinstance(item, dict) else None
        if not isinstance(frames, list) or len(frames) > MAX_FRAMES:
            raise Bad(f"stacks item {index} is {show(item)}, not a thread with at most {MAX_FRAMES} frames")
        if not index or item.get("thread") == "MainThread":
            chosen = frames
    for frame in chosen:
        if not isinstance(frame, str) or len(frame) > MAX_FRAME_TEXT:
            raise Bad(f"a stacks frame is {show(frame)}, not a short text")
    return tuple(chosen)


def _watchdog(doc: dict, path: Path) -> RankDump:
    """distprof's hang_rank<r>.json: its open ranges and step, plus the Flight Recorder dump inside. Every field
    is checked: a wrong type or a world of 10^12 ranks is one line naming the field."""
    rank = count(doc.get("rank"), "rank", high=MAX_WORLD_SIZE - 1)
    world = doc.get("world_size")
    world = None if world is None else count(world, "world_size", low=1, high=MAX_WORLD_SIZE)
    if world is not None and rank >= world:
        raise Bad(f"rank {rank} is outside its world of {world}")
    step = doc.get("step")
    step = None if step is None else count(step, "step")
    ranges = doc.get("open_ranges") or []
    if not isinstance(ranges, list):
        raise Bad(f"open_ranges is {show(ranges)}, not a list")
    recorder = doc.get("flight_recorder")
    if recorder is not None and not isinstance(recorder, dict):
        raise Bad(f"flight_recorder is {show(recorder)}, not a dump")
    base = from_dump(recorder, rank, path, READ) if recorder is not None \
        else RankDump(rank, str(path), READ, (), {}, has_flight_recorder=False)
    pid, host = doc.get("pid"), doc.get("hostname")
    origin = f"{count(pid, 'pid')}@{text(host, 'hostname')}" if pid is not None else ""
    return RankDump(rank, str(path), READ, base.entries, base.group_ranks, world_size=world or base.world_size,
                    step=step, open_ranges=tuple(_open_range(r) for r in ranges),
                    has_flight_recorder=base.has_flight_recorder, origin=origin, stack=_main_stack(doc.get("stacks")),
                    unnamed_ranks=base.unnamed_ranks)


def _decode(path: Path) -> tuple[dict, str]:
    data = read_regular(path)
    if not data:
        raise SourceError(f"{path}: empty file")
    if data[:1] == b"\x80":
        return load_pickle(data, path)
    return load_json(data, path), READ


def read(path: Path) -> RankDump:
    """One input file as a RankDump; SourceError (one line naming the file) when it cannot be used."""
    dump, status = _decode(path)
    try:
        if HANG_FORMAT in dump:
            return _watchdog(dump, path)
        if not isinstance(dump.get("entries"), list):
            raise SourceError(f"{path}: not a Flight Recorder dump (no 'entries' list)")
        rank = dump.get("rank")
        rank = rank_from_name(path) if rank is None else rank
        if rank is None:
            raise SourceError(f"{path}: the dump does not say its rank and the file name ends in no number")
        return from_dump(dump, count(rank, "its rank", high=MAX_WORLD_SIZE - 1), path, status)
    except Bad as error:
        raise SourceError(f"{path}: refused: {error}") from None
    except RecursionError:
        raise SourceError(f"{path}: refused: nested deeper than a dump is") from None


def expand(inputs: list[str]) -> list[Path]:
    """Files as given; folders: the entries in them whose names end in a rank number (rank3.json,
    nccl_trace_rank_3, hang_rank3.json), by rank. Anything but a folder is kept, to be refused by name if it is
    not a regular file. One file named twice (twice on the command line, or as itself and in its folder) is
    read once: read twice, it claimed its rank against itself."""
    paths: list[Path] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            found = [(rank_from_name(p), p.name, p) for p in path.iterdir() if not p.is_dir()]
            paths += [p for rank, _, p in sorted(f for f in found if f[0] is not None)]
        elif path.exists() or path.is_symlink():
            paths.append(path)
        else:
            raise SourceError(f"{path}: no such file or folder")
    by_file: dict[str, Path] = {}
    for path in paths:
        by_file.setdefault(os.path.realpath(path), path)  # realpath: a link loop does not raise
    return list(by_file.values())


def read_all(inputs: list[str]) -> tuple[list[RankDump], list[InputState]]:
    """Every input read (one dump per rank; a watchdog file and a dump of the same rank, or one dump in both
    forms, are combined), and what became of each file. Two inputs claiming one rank with different records (two
    runs' files in one folder) are refused (SourceError)."""
    dumps: dict[int, RankDump] = {}
    states: list[InputState] = []
    for path in expand(inputs):
        try:
            dump = read(path)
        except SourceError as error:
            status = CUT_SHORT if "cut short" in str(error) else REFUSED
            rank = rank_from_name(path)
            states.append(InputState(str(path), status, rank if rank is not None and rank < MAX_WORLD_SIZE
                                     else None, str(error)))
            continue
        states.append(InputState(str(path), dump.status, dump.rank))
        old = dumps.get(dump.rank)
        if old is not None:
            clash = _not_one_process(old, dump)
            if clash:
                raise SourceError(f"rank {dump.rank} is claimed by two inputs: {old.path} and {dump.path} ({clash}; "
                                  "two runs in one folder?): give one run's files")
        dumps[dump.rank] = _combine(old, dump)
    return [dumps[r] for r in sorted(dumps)], states


def _not_one_process(old: RankDump, new: RankDump) -> str:
    """Why two records of one rank cannot come from one process ('' when they can): different writers, worlds,
    or one collective (group, seq) called at two times."""
    if old.origin and new.origin and old.origin != new.origin:
        return f"written by {old.origin} and by {new.origin}"
    if old.world_size and new.world_size and old.world_size != new.world_size:
        return f"a world of {old.world_size} and of {new.world_size} ranks"
    called: dict[tuple[str, int], set[int]] = {}  # a set: one dump may hold a (group, seq) twice
    for e in old.entries:
        if e.created_ns and not e.is_p2p:
            called.setdefault((e.group_name, e.seq), set()).add(e.created_ns)
    for entry in new.entries:
        before = called.get((entry.group_name, entry.seq))
        if before is not None and entry.created_ns and not entry.is_p2p and entry.created_ns not in before:
            return f"{entry.kind} #{entry.seq} of group {entry.group_name} called at two different times"
    if old.entries and new.entries and not called.keys() & {(e.group_name, e.seq) for e in new.entries}:
        return "no collective in common"
    return ""


def _combine(old: RankDump | None, new: RankDump) -> RankDump:
    if old is None:
        return new
    recorder = max((old, new), key=lambda d: (d.has_flight_recorder, len(d.entries), d.status == READ))
    watch = old if old.open_ranges or old.step is not None else new
    return RankDump(new.rank, recorder.path, recorder.status, recorder.entries,
                    {**old.group_ranks, **new.group_ranks}, world_size=old.world_size or new.world_size,
                    step=watch.step, open_ranges=watch.open_ranges,
                    has_flight_recorder=old.has_flight_recorder or new.has_flight_recorder,
                    origin=old.origin or new.origin, stack=watch.stack or old.stack or new.stack,
                    unnamed_ranks=next((d.unnamed_ranks for d in (recorder, old, new) if d.unnamed_ranks is not None),
                                       None))


__all__ = ["Entry", "OpenRange", "RankDump", "InputState", "read", "read_all", "expand", "load_pickle", "load_json",
           "read_regular", "HANG_FILE", "HANG_FORMAT", "READ", "CUT_SHORT", "REFUSED", "MAX_WORLD_SIZE"]
