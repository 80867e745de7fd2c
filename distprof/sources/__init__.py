"""Readers that turn files into per-rank event tables (``RankTrace``). Sources never compute
metrics. Every reader has the signature ``read(path, config) -> list[RankTrace]`` and raises
``SourceError`` with one line naming the file and the problem."""

from __future__ import annotations

import contextlib
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from .. import console, outpaths
from ..events import RankTrace, SourceError

if TYPE_CHECKING:  # numpy loads when a file is read, not when the package is imported
    import numpy as np

SQLITE_MAGIC = b"SQLite format 3\x00"
TRACE_SUFFIXES, REPORT_SUFFIXES = outpaths.TRACE_SUFFIXES, outpaths.REPORT_SUFFIXES
# distprof's own outputs, skipped when a directory or glob is merged (merge OUTDIR): outpaths.is_own_file
OWN_OUTPUTS = outpaths.OWN_FILES
MB = 1 << 20
DEFAULT_MEMORY_MB = 16 * 1024  # when the machine's memory cannot be read
MAX_WORLD_SIZE = 1 << 20  # a world_size above this in a file is a corrupt value, not a job


def sane_rank(rank: int | None, world_size: int | None, path: Path) -> tuple[int | None, int | None, list[str]]:
    """Rank and world size as a file states them, made safe to trust: a world size above
    MAX_WORLD_SIZE (or below 1) is dropped, and a rank outside the world is left to the merge to
    number (None). Each change comes with a warning naming the file. A summary sized by a
    corrupt world_size once took 23.8 GiB."""
    warnings = []
    if world_size is not None and not 1 <= world_size <= MAX_WORLD_SIZE:
        warnings.append(f"{path}: world_size {world_size} is not between 1 and {MAX_WORLD_SIZE}; ignored")
        world_size = None
    limit = world_size if world_size is not None else MAX_WORLD_SIZE
    if rank is not None and not 0 <= rank < limit:
        warnings.append(f"{path}: rank {rank} is outside a world of {limit}; numbered by input order instead")
        rank = None
    return rank, world_size, warnings


# -- which run a file belongs to (docs/inputs.md, "One run per merge") ------------------------------
# The ranks of one run are alive together (they rendezvous, then wait for each other in every
# collective), so what they recorded overlaps in wall-clock time; two runs' files do not. Clocks of
# hosts differ (NTP: milliseconds; ranks of one host starting seconds apart), hence the tolerance:
# a minute, the gap beyond which align already calls collective ends on one host a wrong clock.
SAME_RUN_GAP_NS = 60 * 10**9
# On one host the ranks read one clock: a rank whose recording ended before another's began on the same
# host shared no collective with it. The tolerance covers only how a span is bounded (a reader's first
# and last event, not the process's life), never a clock difference.
SAME_HOST_GAP_NS = 10**9
WALL_MIN_NS = 946_684_800 * 10**9  # 2000-01-01: an earlier "wall" time is a relative clock (ns since start)
WALL_MAX_NS = 2**62                # year 2116: a later one is corrupt
# Ids a launcher gives every process of one job (and no other job), as a source may record its
# environment (nsys captures it). A counter that tells attempts or steps of one id apart is joined to it:
# two srun steps of one allocation, or two restarts of one elastic job, are two runs.
LAUNCHER_IDS = {"TORCHELASTIC_RUN_ID": "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID": "SLURM_STEP_ID",
                "PMIX_NAMESPACE": "", "OMPI_MCA_ess_base_jobid": "", "OMPI_MCA_orte_ess_jobid": "",
                "LSB_JOBID": "", "PBS_JOBID": "", "FLUX_JOB_ID": ""}


def launcher_ids(env: dict[str, str]) -> dict[str, str]:
    """The launcher-given job ids in a recorded environment: {variable: value[.step]}. torchrun's
    default rendezvous id "none" is shared by unrelated jobs, so it is not an id."""
    ids = {}
    for key, counter in LAUNCHER_IDS.items():
        value = str(env.get(key, "")).strip()
        if value and value.lower() != "none":
            step = str(env.get(counter, "")).strip() if counter else ""
            ids[key] = f"{value}.{step}" if step else value
    return ids


def run_identity(start_ns: np.ndarray, end_ns: np.ndarray, to_wall_ns: int | None, since_wall_ns: int | None = None,
                 launcher: dict[str, str] | None = None) -> dict:
    """What tells this rank's run from another's (RankTrace.meta["run"]): ``span_ns``, the first and
    last recorded instants on the wall clock (events + ``to_wall_ns``, from ``since_wall_ns`` when the
    source knows when recording began), None when the file has no wall clock (relative times: such a
    file is never said to be another run); ``launcher``, the launcher's job ids where recorded."""
    import numpy as np
    span = None
    if to_wall_ns is not None and len(start_ns):
        first = int(np.min(start_ns)) + int(to_wall_ns)
        last = int(np.max(end_ns)) + int(to_wall_ns)
        if since_wall_ns is not None and WALL_MIN_NS <= since_wall_ns < first:
            first = int(since_wall_ns)
        if WALL_MIN_NS <= first <= last < WALL_MAX_NS:
            span = (first, last)
    return {"span_ns": span, "launcher": dict(launcher or {})}


def _utc(ns: int) -> str:
    import datetime
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _gap(ns: int) -> str:
    seconds = ns / 1e9
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:,.1f} s"


def _named(files: list[str]) -> str:
    return files[0] + (f" (and {len(files) - 1} more)" if len(files) > 1 else "")


def _launcher_clash(inputs: list[tuple[str, dict]]) -> str | None:
    """Two inputs whose launcher gave them different ids of one kind: two jobs, whatever the clocks say."""
    first: dict[str, tuple[str, str]] = {}
    for path, identity in inputs:
        for key, value in (identity.get("launcher") or {}).items():
            seen, where = first.setdefault(key, (value, path))
            if seen != value:
                return (f"inputs of two runs: {where} ({key}={seen}) and {path} ({key}={value}): give one run's "
                        "files, or --allow-duplicate-ranks to merge them anyway")
    return None


def _world_clash(inputs: list[tuple[str, dict]]) -> str | None:
    """Two inputs that state different world sizes: two runs (a 4-rank run's rank 2 and 3 files left
    in a folder a 2-rank run wrote its rank 0 and 1 into)."""
    stated = [(identity["world_size"], path) for path, identity in inputs if identity.get("world_size")]
    other = next(((size, path) for size, path in stated if size != stated[0][0]), None)
    if other is None:
        return None
    return (f"inputs of two runs: {stated[0][1]} states a world of {stated[0][0]} ranks, {other[1]} of "
            f"{other[0]}: give one run's files, or --allow-duplicate-ranks to merge them anyway")


def _time_runs(inputs: list[tuple[str, dict]], gap_ns: int = SAME_RUN_GAP_NS) -> list[dict]:
    """The inputs with a wall-clock span, in runs: spans closer than ``gap_ns`` chain into one run,
    and inputs sharing a launcher id are one run whatever their clocks say. Runs in time order."""
    timed = sorted((identity["span_ns"], path, identity.get("launcher") or {}) for path, identity in inputs
                   if identity.get("span_ns"))
    runs: list[dict] = []
    for (first, last), path, launcher in timed:  # one pass per input file
        if not runs or first > runs[-1]["last"] + gap_ns:
            runs.append({"first": first, "last": last, "files": [], "ids": set()})
        run = runs[-1]
        run["last"] = max(run["last"], last)
        run["files"].append(path)
        run["ids"] |= set(launcher.items())
    joined: list[dict] = []
    for run in runs:  # a handful of runs
        into = next((other for other in joined if other["ids"] & run["ids"]), None)
        if into is None:
            joined.append(run)
        else:
            into.update(last=max(into["last"], run["last"]), files=into["files"] + run["files"],
                        ids=into["ids"] | run["ids"])
    return joined


def one_run(inputs: list[tuple[str, dict]]) -> str | None:
    """None when the inputs (file, run identity: see run_identity, with the ``world_size`` the file
    states and its ``host`` where known; one per file) can be one run, else one line naming files of
    two runs. Launcher ids decide where two files both carry one, then the stated world sizes, then
    the wall-clock spans (on one host: spans that do not overlap). A file without any of them
    (relative times, no ids) is taken to be of any run."""
    clash = _launcher_clash(inputs) or _world_clash(inputs)
    if clash:
        return clash
    runs = _time_runs(inputs)
    hosts = sorted({identity.get("host") or "" for _, identity in inputs} - {""})
    for host in hosts if len(runs) < 2 else []:  # a few hosts: ranks of one host share its clock
        on_host = _time_runs([(p, i) for p, i in inputs if i.get("host") == host], SAME_HOST_GAP_NS)
        runs = on_host if len(on_host) > 1 else runs
    if len(runs) < 2:
        return None
    one, two = runs[0], runs[1]
    gap = two["first"] - one["last"]
    after = f", {_gap(gap)} after the first ended" if gap > 0 else ""
    more = f"; {len(runs) - 2} more run(s)" if len(runs) > 2 else ""
    return (f"inputs of {len(runs)} runs: {_named(one['files'])} recorded {_utc(one['first'])} to "
            f"{_utc(one['last'])} UTC, {_named(two['files'])} from {_utc(two['first'])} UTC{after}{more} (the "
            f"ranks of one run overlap in time, within {SAME_RUN_GAP_NS // 10**9} s): give one run's files, or "
            "--allow-duplicate-ranks to merge them anyway")


# Bytes per element of a tensor's dtype, by PyTorch's names in both spellings: the ScalarType
# names that record_param_comms writes ("Float", "BFloat16", "Float8_e4m3fn") and the C++ type
# names of record_shapes' "Input type" ("float", "c10::BFloat16", "long int", "signed char"),
# plus torch.* dtype names. Keys are lower case without "c10::"/"at::"/"torch." (see dtype_size).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    **dict.fromkeys(("long", "long int", "int64", "int64_t", "long long", "long long int"), 8),
    **dict.fromkeys(("int", "int32", "int32_t"), 4),
    **dict.fromkeys(("short", "short int", "int16", "int16_t"), 2),
    **dict.fromkeys(("char", "signed char", "int8", "int8_t"), 1),
    **dict.fromkeys(("byte", "unsigned char", "uint8", "uint8_t", "bool", "bits8", "qint8", "quint8",
                     "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "float4_e2m1fn_x2"), 1),
    **dict.fromkeys(("uint16", "unsigned short", "unsigned short int", "uint16_t", "bits16"), 2),
    **dict.fromkeys(("uint32", "unsigned int", "uint32_t", "qint32"), 4),
    **dict.fromkeys(("uint64", "unsigned long", "unsigned long int", "uint64_t", "unsigned long long"), 8),
    **dict.fromkeys(("float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu"), 1),
    **dict.fromkeys(("complexhalf", "complex32", "complex<half>"), 4),
    **dict.fromkeys(("complexfloat", "complex64", "complex<float>", "cfloat"), 8),
    **dict.fromkeys(("complexdouble", "complex128", "complex<double>", "cdouble"), 16),
}
_DTYPE_PREFIXES = ("c10::", "at::", "torch.", "std::")


def dtype_size(name: object) -> int:
    """Bytes per element of a dtype as a trace names it (any spelling in DTYPE_BYTES), -1 when
    unknown: a message size is only ever computed from a dtype we are sure of."""
    if not isinstance(name, str):
        return -1
    key = name.strip().lower()
    for prefix in _DTYPE_PREFIXES:
        key = key.replace(prefix, "")
    return DTYPE_BYTES.get(key, -1)


def _has_bytes(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


@contextlib.contextmanager
def read_only_uri(path: str | Path) -> Iterator[str]:
    """The URI (``sqlite3.connect(uri, uri=True)``) that reads an input SQLite file without creating
    anything beside it: even a mode=ro open of a WAL-mode file (an nsys export, a rank file) leaves
    -wal/-shm next to it. A settled file (no -wal with frames, no -journal) opens immutable: no lock,
    no -wal/-shm. One with a -wal that holds frames (a rank that crashed: its last steps are only
    there) opens mode=ro to read them; a -shm that open made (a -wal copied without its -shm) is
    removed once the caller has closed its connections. Any path (``?``, ``#``, ``%``, spaces)."""
    resolved = Path(path).resolve()  # SQLite's -wal/-shm sit beside the file a link points to
    shm = Path(f"{resolved}-shm")
    pending = _has_bytes(Path(f"{resolved}-wal")) or Path(f"{resolved}-journal").exists()
    made_shm = pending and not shm.exists()
    try:
        yield resolved.as_uri() + ("?mode=ro" if pending else "?mode=ro&immutable=1")
    finally:
        if made_shm:
            shm.unlink(missing_ok=True)


def detect(path: Path) -> str:
    """'native', 'nsys' or 'kineto', from the file's content (not only its name)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if head.startswith(b"\x1f\x8b") or path.suffix == ".json" or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if head != SQLITE_MAGIC:
        raise SourceError(f"{path}: not a SQLite file, nsys export or Kineto JSON trace")
    import sqlite3  # here, not at import: a merge of Kineto traces never opens SQLite
    try:
        with read_only_uri(path) as uri, contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as error:
        raise SourceError(f"{path}: corrupt SQLite file ({error})") from None
    if "distprof_meta" in tables:
        return "native"
    return "nsys"


def communication_prefixes(config: dict) -> tuple[str, ...]:
    """Kernel-name prefixes of communication kernels: ``communication.kernel_prefixes`` of the
    config, else the shipped default; the one place every reader takes them from."""
    from ..config import DEFAULTS
    default = DEFAULTS["communication"]["kernel_prefixes"]
    return tuple((config.get("communication") or {}).get("kernel_prefixes", default))


def machine_memory_mb() -> int:
    """This machine's memory in MB: physical RAM, or the cgroup's limit when that is lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = DEFAULT_MEMORY_MB * MB
    try:
        cgroup = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        total = min(total, int(cgroup)) if cgroup.isdigit() else total
    except (OSError, ValueError):
        pass
    return max(1, total // MB)


def input_limit_mb(config: dict, key: str) -> tuple[int, str]:
    """(limit in MB, how a refusal names it) for ``input.<key>``: the config's value, else one
    eighth of this machine's memory (a 20 GiB default once let a 3.6 MB .json.gz of 12.8M events
    take 4.6 GiB on a machine that could not hold it)."""
    value = (config.get("input") or {}).get(key)
    if value is not None:
        return int(value), f"input.{key} = {int(value)}"
    memory = machine_memory_mb()
    limit = max(1, memory // 8)
    return limit, f"input.{key} = {limit} (default: 1/8 of this machine's {memory} MB of memory)"


MAX_SPAN_NS = 7 * 86_400 * 10 ** 9  # a trace longer than a week is a corrupt timestamp, not a job


def plausible_span(start_ns, end_ns, path) -> tuple:
    """(mask of the rows to keep or None when all are, warnings): rows that overflowed (end before
    start) or lie outside the week holding the most row starts are corrupt timestamps (one near
    2**63 made a 292-year window), dropped with a warning naming the file and the span."""
    import numpy as np
    start_ns, end_ns = np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64)
    if not start_ns.size:
        return None, []
    order = np.sort(start_ns)
    top = np.iinfo(np.int64).max
    with np.errstate(over="ignore"):
        reach = np.searchsorted(order, np.where(order > top - MAX_SPAN_NS, top, order + MAX_SPAN_NS), side="right")
    low = int(order[int(np.argmax(reach - np.arange(order.size)))])
    keep = (end_ns >= start_ns) & (start_ns >= low) & (end_ns - low <= MAX_SPAN_NS)
    if keep.all():
        return None, []
    if not keep.any():
        raise SourceError(f"{path}: every event overflows int64 nanoseconds (ts + dur): corrupt timestamps")
    first, last = int(start_ns.min()), int(end_ns.max())
    return keep, [f"{path}: {int((~keep).sum())} event(s) dropped outside the plausible span (the busiest "
                  f"{MAX_SPAN_NS // 86_400_000_000_000} days; all events span ts {first} to {last} ns): "
                  "corrupt timestamps"]


def check_file(path: Path, config: dict) -> None:
    """Refuse what would hang or exhaust memory before opening it: a FIFO blocks a reader forever,
    a huge file is read whole by the Kineto reader."""
    try:
        info = path.stat()
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if not stat.S_ISREG(info.st_mode):
        raise SourceError(f"{path}: not a regular file (a pipe, device or directory); give trace files")
    limit, named = input_limit_mb(config, "max_file_mb")
    if info.st_size > limit * MB:
        raise SourceError(f"{path}: refused unread: {info.st_size / MB:.0f} MB, above {named}; "
                          "raise it in the config to read this file")


def read_bytes(path: Path, config: dict) -> bytes | bytearray:
    """The file's bytes (``read_file_bytes``), from the read-ahead when it read them (sources.readahead)."""
    from .readahead import taken
    data = taken(path)
    return read_file_bytes(path, config) if data is None else data


def read_file_bytes(path: Path, config: dict) -> bytes | bytearray:
    """The file's bytes, gunzipped while streaming into one buffer (the expanded bytes are held once,
    never a second joined copy): a gzip expanding beyond ``input.max_uncompressed_mb`` is refused
    holding at most that limit, and one whose trailer already says so is refused holding nothing."""
    limit_mb, named = input_limit_mb(config, "max_uncompressed_mb")
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
            if head != b"\x1f\x8b":
                handle.seek(0)
                return handle.read()  # one read into one buffer (not head + rest: a second copy)
            hint = _gzip_size_hint(handle)
            if hint > limit_mb * MB and _expands_beyond(handle, limit_mb * MB, path):
                raise _refused(path, named)
            handle.seek(0)
            return _gunzip(handle, path, limit_mb * MB, named, hint)
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None


def expanded_size_hint(path: Path) -> int:
    """About how many bytes the file holds once gunzipped: a gzip's trailer size (0 where it cannot be
    true), else the file's own size."""
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return handle.seek(0, os.SEEK_END)
        return _gzip_size_hint(handle)


GZIP_READ = 1 << 20      # compressed bytes read at a time
GZIP_PIECE = 1 << 20     # expanded bytes inflated at a time, copied into the one buffer
DEFLATE_MAX_RATIO = 1032  # deflate expands one byte to at most ~1032: a larger trailer size is a lie


def _refused(path: Path, named: str) -> SourceError:
    return SourceError(f"{path}: refused while decompressing: gzip expands beyond {named}; "
                       "raise it in the config to read this file")


def _gzip_size_hint(handle: BinaryIO) -> int:
    """The expanded size the last gzip member's trailer states (ISIZE, modulo 2**32), 0 where it
    cannot be true. zlib checks it against the data at the member's end, so in a valid file the
    expanded size is at least this: a hint to size the buffer, never trusted alone to refuse."""
    size = handle.seek(0, os.SEEK_END)
    if size < 18:  # a gzip header and trailer alone take 18 bytes
        return 0
    handle.seek(size - 4)
    hint = int.from_bytes(handle.read(4), "little")
    handle.seek(2)
    return hint if hint <= DEFLATE_MAX_RATIO * size else 0


def _expands_beyond(handle: BinaryIO, limit: int, path: Path) -> bool:
    """Whether the gzip from the file's start expands beyond ``limit`` bytes, inflated and counted
    without keeping the output (a file whose trailer states more is checked before it is held)."""
    handle.seek(0)
    total = 0
    for piece in _inflated(handle, path):
        total += len(piece)
        if total > limit:
            return True
    return False


def _gunzip(handle: BinaryIO, path: Path, limit: int, named: str, hint: int) -> bytes | bytearray:
    """Every gzip member of the file inflated into one buffer. With a trailer ``hint`` within
    ``limit``, the first piece is inflated at that size in one call: a file of one member (the
    usual trace) is then that piece, with no copy. Otherwise, or when more follows, the pieces go
    into one bytearray grown in place: the peak is the expanded size plus one piece."""
    pieces = _inflated(handle, path, hint if GZIP_PIECE < hint <= limit else GZIP_PIECE)
    first = next(pieces, b"")
    if len(first) > limit:
        raise _refused(path, named)
    piece = next(pieces, None)
    if piece is None:
        return first
    buffer = bytearray(first)
    del first  # one piece in flight at a time, as below
    while piece is not None:
        if len(buffer) + len(piece) > limit:
            raise _refused(path, named)
        buffer += piece  # grows by realloc (mremap for large buffers): no second copy
        piece = next(pieces, None)
    return buffer


def _inflated(handle: BinaryIO, path: Path, first_piece: int = GZIP_PIECE) -> Iterator[bytes]:
    """The expanded bytes of the gzip members from the handle's position, GZIP_PIECE at most at a
    time (the first: ``first_piece``; larger than GZIP_PIECE, the whole compressed file is read for
    it), reading GZIP_READ compressed bytes at a time; members one after another (zero padding
    between them skipped) like ``gzip.decompress``; trailing bytes that start no member ignored."""
    inflater, errors = _inflater()
    pending, at_end = handle.read(GZIP_READ if first_piece <= GZIP_PIECE else -1), False
    size = first_piece
    try:
        while pending[:2] == b"\x1f\x8b":
            inflate = inflater.decompressobj(zlib.MAX_WBITS | 16)
            while not inflate.eof:
                if not pending and not at_end:
                    pending = handle.read(GZIP_READ)
                    at_end = not pending
                piece = inflate.decompress(pending, size)  # at the end, b"": what zlib still holds
                pending, size = inflate.unconsumed_tail, GZIP_PIECE
                if piece:
                    yield piece
                elif at_end and not inflate.eof:
                    raise SourceError(f"{path}: corrupt or truncated gzip (compressed data ended early)")
            pending = _next_member(inflate.unused_data, handle)
    except errors as error:
        raise SourceError(f"{path}: corrupt or truncated gzip ({error})") from None


def _next_member(rest: bytes, handle: BinaryIO) -> bytes:
    """The compressed bytes after a gzip member, zero padding skipped, with at least the two bytes
    that say whether another member starts (fewer only at the end of the file)."""
    while True:
        rest = rest.lstrip(b"\x00")
        if len(rest) >= 2:
            return rest
        more = handle.read(GZIP_READ)
        if not more:
            return rest
        rest += more


def _inflater():
    """(module with zlib's decompressobj, its errors): ISA-L's (isal wheel) inflates gzip ~1.7x faster
    than zlib (the 216k-event HTA trace: 44 vs 76 ms); zlib where isal is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib, (zlib.error,)
    return isal_zlib, (isal_zlib.error, zlib.error)


def _nsys_report(path: Path) -> Path:
    """The SQLite export of an Nsight Systems report: exported next to it when ``nsys`` is on PATH."""
    target = path.with_suffix(".sqlite")
    if target.exists():
        return target
    hint = f"run `nsys export --type sqlite {path}` and merge the .sqlite file"
    import shutil
    import subprocess
    nsys = shutil.which("nsys")
    if nsys is None:
        raise SourceError(f"{path}: an Nsight Systems report, not its SQLite export: {hint}")
    done = subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(target), str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0 or not target.exists():
        raise SourceError(f"{path}: `nsys export` failed (exit {done.returncode}): {hint}")
    return target


def _compressed_sqlite(path: Path) -> str | None:
    """'gzip' or 'zstd' when the file is a compressed SQLite file (an nsys export or a rank file kept
    as .sqlite.gz / .sqlite.zst), else None."""
    import gzip
    import zlib
    with open(path, "rb") as handle:
        head = handle.read(4)
        handle.seek(0)
        if head.startswith(b"\x1f\x8b"):
            try:
                return "gzip" if gzip.GzipFile(fileobj=handle).read(16) == SQLITE_MAGIC else None
            except (OSError, EOFError, zlib.error):
                return None
    return "zstd" if head == b"\x28\xb5\x2f\xfd" and path.name.endswith(".sqlite.zst") else None


def _decompressed(path: Path, codec: str, config: dict, folder: str) -> Path:
    """The SQLite file inside ``path``, written to ``folder`` (bounded by input.max_uncompressed_mb)."""
    import shutil
    target = Path(folder) / (path.name.rsplit(".", 1)[0] or "trace.sqlite")
    limit_mb, named = input_limit_mb(config, "max_uncompressed_mb")
    limit = limit_mb * MB
    if codec == "gzip":
        import gzip
        opened = gzip.open(path, "rb")
    else:
        try:
            import zstandard
        except ImportError:
            raise SourceError(f"{path}: a zstd-compressed file: `pip install zstandard`, or decompress it "
                              "(`zstd -d`)") from None
        opened = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
    with opened as source, open(target, "wb") as out:
        while chunk := source.read(1 << 20):
            out.write(chunk)
            if out.tell() > limit:
                raise SourceError(f"{path}: expands beyond {named} MB")
    shutil.copystat(path, target)
    return target


def read(path: str | Path, config: dict) -> list[RankTrace]:
    """Read one file of any supported format; a compressed SQLite file (.sqlite.gz, .sqlite.zst)
    is decompressed to a temporary file first and read like the plain one."""
    path = Path(path)
    check_file(path, config)
    if path.name.endswith(REPORT_SUFFIXES):
        path = _nsys_report(path)
        check_file(path, config)
    codec = _compressed_sqlite(path)
    if codec is not None:
        import dataclasses
        import tempfile
        with tempfile.TemporaryDirectory(prefix="distprof-") as folder:
            traces = read(_decompressed(path, codec, config, folder), config)
        return [dataclasses.replace(trace, source_file=str(path)) for trace in traces]
    kind = detect(path)
    if kind == "native":
        from . import native
        return native.read(path, config)
    if kind == "nsys":
        from . import nsys
        return nsys.read(path, config)
    from . import kineto
    return kineto.read(path, config)


def _wanted(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES + REPORT_SUFFIXES) and not outpaths.is_own_file(path.name)


def _stderr(message: str) -> None:
    console.warn(message)


def _not_a_rank_file(path: Path) -> str:
    """What to say of a directory named like a rank file (rank4.json/): it was taken as an empty
    folder without a word, and the merge went on without that rank."""
    return f"{path}: a directory, not a rank file (named like one; distprof reads trace files, not folders)"


def _own_named(path: Path) -> bool:
    """A trace-like file named as one distprof writes (its Perfetto ``trace.json.gz``)."""
    return path.name.endswith(TRACE_SUFFIXES) and outpaths.is_own_file(path.name)


def _in_folder(folder: Path, notes: list[str], own: list[Path]) -> list[Path]:
    """The trace files directly in ``folder`` (not distprof's own outputs, which go to ``own``); a
    sub-folder named like a rank file is noted, others are passed over as before. A folder named
    like a rank file that holds no trace file is noted too."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and _own_named(path):
            own.append(path)
        elif path.is_file() and _wanted(path):
            found.append(path)
        elif path.is_dir() and _wanted(path):
            notes.append(_not_a_rank_file(path))
    if not found and folder.name.endswith(TRACE_SUFFIXES):
        notes.append(_not_a_rank_file(folder))
    return found


def expand(inputs: list[str], warn: Callable[[str], None] = _stderr) -> list[Path]:
    """Files, directories (their trace files) and globs, sorted by name, without duplicates (one
    file under two names counts once). distprof's own outputs in a directory or glob are skipped;
    a .nsys-rep is dropped when its .sqlite export is there too. Paths stay as the user named them
    (made absolute, links not resolved): a warning about a symlinked input names the link given, not
    its target. Nothing found: a SourceError saying what was looked for."""
    import glob
    found: list[Path] = []
    notes: list[str] = []
    own: list[Path] = []  # skipped: named as distprof's own outputs
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found += _in_folder(path, notes, own)
        elif any(ch in item for ch in "*?["):
            for match in map(Path, sorted(glob.glob(item))):
                if match.is_dir() and _wanted(match):
                    notes.append(_not_a_rank_file(match))
                elif not outpaths.is_own_file(match.name):
                    found.append(match)
                elif _own_named(match):
                    own.append(match)
        else:
            found.append(path)
    by_file: dict[str, Path] = {}
    for path in found:
        by_file.setdefault(os.path.realpath(path), Path(os.path.abspath(path)))  # realpath: no raise on a loop
    unique = list(by_file.values())
    names = set(unique)
    unique = [p for p in unique if not (p.name.endswith(REPORT_SUFFIXES) and p.with_suffix(".sqlite") in names)]
    if not unique:
        looked = f"looked for {', '.join('*' + s for s in TRACE_SUFFIXES + REPORT_SUFFIXES)}"
        skipped = (f"; skipped {own[0]}{f' and {len(own) - 1} more' if len(own) > 1 else ''}: named as a file "
                   "distprof writes (its Perfetto trace), give its path to read it as a rank's trace") if own else ""
        raise SourceError(f"{notes[0]}; no input files left" if notes else
                          f"{' '.join(inputs)}: no input files found ({looked}){skipped}")
    for note in notes:
        warn(f"{note}; skipped")
    mixed = _mix_warning(unique)
    if mixed:
        warn(mixed)
    return sorted(unique, key=lambda p: (p.name, str(p)))


__all__ = ["read", "detect", "expand", "communication_prefixes"]


def _mix_warning(paths: list[Path]) -> str | None:
    """nsys and Kineto files together: their rank numbers come from different places."""
    def head(path: Path) -> bytes:
        try:
            if not path.is_file() or not os.access(path, os.R_OK):
                return b""
            with open(path, "rb") as handle:
                return handle.read(16)
        except OSError:
            return b""
    heads = {path: head(path) for path in paths}
    kineto = [p for p, h in heads.items() if h[:2] == b"\x1f\x8b" or h.lstrip()[:1] in (b"{", b"[")]
    sqlite_files = [p for p, h in heads.items() if h == SQLITE_MAGIC]
    if not kineto or not sqlite_files:
        return None
    for path in sqlite_files:
        try:
            if detect(path) == "nsys":
                return (f"mixing nsys exports ({path.name}, ...) and Kineto traces ({kineto[0].name}, ...): "
                        "their rank numbers come from different sources (environment vs distributedInfo); "
                        "a rank both claim is refused as two runs' files")
        except SourceError:
            continue
    return None


__all__ = ["read", "detect", "expand", "check_file", "read_bytes", "sane_rank", "MAX_WORLD_SIZE", "DTYPE_BYTES",
           "dtype_size", "run_identity", "launcher_ids", "one_run", "SAME_RUN_GAP_NS"]
