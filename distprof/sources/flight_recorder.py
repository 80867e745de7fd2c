"""Reader of hang evidence: PyTorch Flight Recorder dumps (JSON from ``_dump_fr_trace_json``, pickle from
``_dump_fr_trace`` or the NCCL watchdog's ``nccl_trace_rank_<r>`` files) and distprof's own watchdog files
(``hang_rank<r>.json``, which may carry a Flight Recorder dump inside).

A pickle is read by an unpickler that builds plain builtins only: a dump that names any class or function is
refused and nothing of it runs. A dump cut short (a dying process) is read as far as it goes. Sources never
compute metrics: this turns files into ``RankDump`` records; ``analyses.hang`` does the rest.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

from ..events import SourceError

READ, CUT_SHORT, REFUSED = "read", "cut_short", "refused"
HANG_FILE = "hang_rank{rank}.json"  # distprof's watchdog file, one per rank
HANG_FORMAT = "distprof_hang"  # the key that marks a watchdog file
WORLD_DESC = "default_pg"
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
_ENTRY_KEYS = ("collective_seq_id", "profiling_name", "process_group")
MAX_DUMP_BYTES = 512 << 20


@dataclass(frozen=True)
class Entry:
    """One Flight Recorder record: a collective (or p2p op) of one process group, as one rank saw it."""

    group_name: str
    group_desc: str
    seq: int
    kind: str           # profiling_name without its backend prefix: all_reduce, broadcast, ...
    input_sizes: str    # the sizes and dtypes as text, compared across members as they are
    output_sizes: str
    dtypes: str
    completed: bool
    state: str          # scheduled | started | completed, as the recorder saw it
    is_p2p: bool


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
    world_size: int | None = None
    step: int | None = None                   # watchdog: the step that ran too long
    open_ranges: tuple[OpenRange, ...] = ()
    has_flight_recorder: bool = True
    detail: str = ""


@dataclass(frozen=True)
class InputState:
    """One input file and what became of it."""

    path: str
    status: str     # read | cut_short | refused
    rank: int | None = None
    detail: str = ""

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "rank": self.rank, "detail": self.detail}


# -- pickle, builtins only ------------------------------------------------------------------------------
class _BuiltinsOnly(pickle._Unpickler):  # noqa: SLF001 - the pure-Python unpickler keeps its stack on failure
    """Builds dicts, lists, tuples, str, bytes, numbers, bool and None; anything that needs a class or a
    function (find_class, persistent ids) stops the load before it is called."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        raise pickle.UnpicklingError(f"names {module}.{name}")

    def persistent_load(self, pid):  # noqa: ANN001, ANN201
        raise pickle.UnpicklingError("uses persistent ids")

    def salvage(self) -> list:
        """Every object built so far (memo, stacks): what a load cut short still holds."""
        objects = list(self.memo.values()) + list(getattr(self, "stack", []))
        for frame in getattr(self, "metastack", []):
            objects += frame
        return objects


def _entry_dicts(objects: list) -> list[dict]:
    """The Flight Recorder entries among built objects (nested lists/dicts searched), each once."""
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
    return sorted(found.values(), key=lambda entry: _int(entry.get("record_id"), 0))


def _pg_config_among(objects: list) -> dict:
    """A partly read dump's pg_config: the dict of dicts with 'ranks'."""
    for item in objects:
        if isinstance(item, dict) and item and all(isinstance(v, dict) and "ranks" in v for v in item.values()):
            return item
    return {}


def load_pickle(data: bytes, path: Path) -> tuple[dict, str]:
    """(dump, status): the whole dump, or what a dump cut short holds. Refuses (SourceError) a pickle that
    asks for anything but builtins."""
    import io
    unpickler = _BuiltinsOnly(io.BytesIO(data))
    try:
        dump = unpickler.load()
    except pickle.UnpicklingError as error:
        if str(error).startswith(("names ", "uses persistent")):
            raise SourceError(f"{path}: refused: the pickle {error} (only plain builtins are read)") from None
        return _salvaged(unpickler, path, f"not a readable pickle ({error})")
    except (EOFError, IndexError, ValueError, KeyError, TypeError, AttributeError, struct_error()) as error:
        return _salvaged(unpickler, path, type(error).__name__)
    if not isinstance(dump, dict):
        raise SourceError(f"{path}: not a Flight Recorder dump (a pickled {type(dump).__name__})")
    return dump, READ


def struct_error() -> type:
    import struct
    return struct.error


def _salvaged(unpickler: _BuiltinsOnly, path: Path, why: str) -> tuple[dict, str]:
    objects = unpickler.salvage()
    entries = _entry_dicts(objects)
    if not entries:
        raise SourceError(f"{path}: a pickle cut short before its first entry ({why})")
    return {"entries": entries, "pg_config": _pg_config_among(objects)}, CUT_SHORT


# -- one dump -> records ---------------------------------------------------------------------------------
def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ranks_of(text) -> tuple[int, ...]:
    """pg_config 'ranks': a list, or its text "[0, 1]"; () when it says nothing."""
    if isinstance(text, str):
        try:
            text = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return ()
    if isinstance(text, (list, tuple)) and all(isinstance(r, int) and not isinstance(r, bool) for r in text):
        return tuple(sorted(set(text)))
    return ()


def _completed_by_status(dump: dict) -> dict[str, int]:
    """Local pg id -> last completed seq from pg_status (gloo never marks entries 'completed')."""
    status = dump.get("pg_status")
    if not isinstance(status, dict):
        return {}
    return {str(pg): _int(values.get("last_completed_collective"), -1)
            for pg, values in status.items() if isinstance(values, dict)}


def _entry(raw: dict, done_by_pg: dict[str, int]) -> Entry | None:
    group = raw.get("process_group")
    if not isinstance(group, (list, tuple)) or not group:
        return None
    name = str(group[0])
    desc = str(group[1]) if len(group) > 1 else ""
    seq = _int(raw.get("collective_seq_id"), -1)
    state = str(raw.get("state", ""))
    kind = str(raw.get("profiling_name", "")).split(":", 1)[-1]
    completed = state == "completed" or raw.get("retired") is True \
        or seq <= done_by_pg.get(str(raw.get("pg_id")), -1)
    return Entry(name, desc, seq, kind, repr(raw.get("input_sizes")), repr(raw.get("output_sizes")),
                 repr(raw.get("input_dtypes")), bool(completed), state, bool(raw.get("is_p2p", False)))


def from_dump(dump: dict, rank: int, path: Path, status: str) -> RankDump:
    """A Flight Recorder dump (JSON or pickle form, whole or salvaged) of one rank."""
    done = _completed_by_status(dump)
    raw_entries = dump.get("entries") or []
    entries = tuple(e for e in (_entry(raw, done) for raw in raw_entries if isinstance(raw, dict)) if e is not None)
    groups: dict[str, tuple[int, ...]] = {}
    config = dump.get("pg_config")
    largest = 0  # the world: the largest group stated (gloo in torch 2.13 states it under the name '')
    for name, values in (config.items() if isinstance(config, dict) else ()):
        ranks = _ranks_of(values.get("ranks")) if isinstance(values, dict) else ()
        largest = max(largest, max(ranks, default=-1) + 1)
        if name and ranks:
            groups[str(name)] = ranks
    world = largest or None
    return RankDump(rank, str(path), status, entries, groups, world_size=world)


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


# -- files ---------------------------------------------------------------------------------------------
def _watchdog(doc: dict, path: Path) -> RankDump:
    """distprof's hang_rank<r>.json: its open ranges and step, plus the Flight Recorder dump inside."""
    rank = _int(doc.get("rank"), -1)
    if rank < 0:
        raise SourceError(f"{path}: a distprof hang file without a rank")
    ranges = tuple(OpenRange(str(r.get("name", "")), str(r.get("category", "")),
                             tuple(r["group"]) if isinstance(r.get("group"), list) else None,
                             str(r.get("thread", "")), _int(r.get("elapsed_ns"), 0))
                   for r in doc.get("open_ranges") or [] if isinstance(r, dict))
    recorder = doc.get("flight_recorder")
    base = from_dump(recorder, rank, path, READ) if isinstance(recorder, dict) \
        else RankDump(rank, str(path), READ, (), {}, has_flight_recorder=False)
    return RankDump(rank, str(path), READ, base.entries, base.group_ranks,
                    world_size=_int(doc.get("world_size"), 0) or base.world_size,
                    step=_int(doc.get("step"), -1), open_ranges=ranges,
                    has_flight_recorder=base.has_flight_recorder)


def read(path: Path) -> RankDump:
    """One input file as a RankDump; SourceError (one line naming the file) when it cannot be used."""
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise SourceError(f"{path}: {size >> 20} MiB, larger than a dump can be ({MAX_DUMP_BYTES >> 20} MiB)")
        data = path.read_bytes()
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if not data:
        raise SourceError(f"{path}: empty file")
    if data[:1] == b"\x80":
        dump, status = load_pickle(data, path)
    else:
        try:
            dump, status = json.loads(data.decode("utf-8")), READ
        except UnicodeDecodeError:
            raise SourceError(f"{path}: neither JSON nor a pickle") from None
        except json.JSONDecodeError as error:
            if error.pos >= len(data.rstrip()) - 1 or "Unterminated" in error.msg:
                raise SourceError(f"{path}: JSON cut short at byte {error.pos} of {len(data)}: "
                                  "nothing of it is used") from None
            raise SourceError(f"{path}: not valid JSON ({error.msg} at byte {error.pos})") from None
        if not isinstance(dump, dict):
            raise SourceError(f"{path}: not a Flight Recorder dump (JSON {type(dump).__name__})")
    if HANG_FORMAT in dump:
        return _watchdog(dump, path)
    if not isinstance(dump.get("entries"), list):
        raise SourceError(f"{path}: not a Flight Recorder dump (no 'entries' list)")
    rank = dump.get("rank") if isinstance(dump.get("rank"), int) else rank_from_name(path)
    if rank is None:
        raise SourceError(f"{path}: the dump does not say its rank and the file name ends in no number")
    return from_dump(dump, rank, path, status)


def expand(inputs: list[str]) -> list[Path]:
    """Files as given; folders: the files in them whose names end in a rank number (rank3.json,
    nccl_trace_rank_3, hang_rank3.json), sorted."""
    paths: list[Path] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            paths += sorted(p for p in path.iterdir() if p.is_file() and rank_from_name(p) is not None)
        elif path.exists():
            paths.append(path)
        else:
            raise SourceError(f"{path}: no such file or folder")
    return paths


def read_all(inputs: list[str]) -> tuple[list[RankDump], list[InputState]]:
    """Every input read (one dump per rank; a watchdog file and a dump of the same rank are merged: the
    Flight Recorder entries of either, the open ranges of the watchdog), and what became of each file."""
    dumps: dict[int, RankDump] = {}
    states: list[InputState] = []
    for path in expand(inputs):
        try:
            dump = read(path)
        except SourceError as error:
            status = CUT_SHORT if "cut short" in str(error) else REFUSED
            states.append(InputState(str(path), status, rank_from_name(path), str(error)))
            continue
        states.append(InputState(str(path), dump.status, dump.rank))
        dumps[dump.rank] = _combine(dumps.get(dump.rank), dump)
    return [dumps[r] for r in sorted(dumps)], states


def _combine(old: RankDump | None, new: RankDump) -> RankDump:
    if old is None:
        return new
    recorder = max((old, new), key=lambda d: (d.has_flight_recorder, len(d.entries), d.status == READ))
    watch = old if old.open_ranges or old.step is not None else new
    return RankDump(new.rank, recorder.path, recorder.status, recorder.entries,
                    {**old.group_ranks, **new.group_ranks}, world_size=old.world_size or new.world_size,
                    step=watch.step, open_ranges=watch.open_ranges,
                    has_flight_recorder=old.has_flight_recorder or new.has_flight_recorder)


__all__ = ["Entry", "OpenRange", "RankDump", "InputState", "read", "read_all", "expand", "load_pickle",
           "HANG_FILE", "HANG_FORMAT", "READ", "CUT_SHORT", "REFUSED"]
