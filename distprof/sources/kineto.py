"""Reader for PyTorch profiler (Kineto) Chrome traces: ``.json`` or ``.json.gz``, one rank per file.

What the format holds (Kineto ``output_json.cpp`` and the real traces in ``data/kineto``):
``traceEvents`` of complete events (``ph`` "X") with ``ts``/``dur`` in microseconds. Newer
PyTorch writes ``ts`` relative to ``baseTimeNanoseconds`` with exactly three decimals (whole
nanoseconds); older PyTorch writes integer microseconds since the epoch. GPU events sit in a
pseudo-process whose pid is the device index and whose tid is the stream; their ``args`` carry
``device``, ``stream`` and ``correlation``, which equals the ``correlation`` of the
``cuda_runtime``/``cuda_driver`` call that launched them.

Mapping to the event table (``distprof.events``):

==========================================  ======================================================
``cat``                                     row
==========================================  ======================================================
kernel                                      kernel; COMMUNICATION if the name starts with one of
                                            ``communication.kernel_prefixes``, else COMPUTE
gpu_memcpy / gpu_memset                     memcpy / memset, MEMORY
cuda_runtime / cuda_driver                  runtime, RUNTIME (kept: they join kernels to the CPU)
cpu_op / user_annotation / python_function  range, USER, on the host thread
gpu_user_annotation                         range, USER, on the GPU stream
``ProfilerStep#N``                          range ``ProfileStep``, PHASE, ``step`` = N, bounded by
                                            the GPU work launched inside it (see below); the
                                            original CPU range stays as a USER row
anything else (Trace spans, flows, ...)     skipped (counted in ``meta["skipped_categories"]``)
==========================================  ======================================================

GPU rows get the *host* process pid (not Kineto's device pseudo-pid) so that all lanes of a rank
share one process key. A GPU row's ``step`` is the ProfilerStep whose CPU range holds its
launching call (any thread of the process). A step's GPU window is the span of the kernels,
memcpys and memsets launched in it; a step that launched nothing keeps its CPU bounds. Steps of
zero length are dropped and overlapping ones named (``events.checked_steps``, as in every reader).

Timestamps become integer nanoseconds *as written*: integers exactly; floats through an
integer/fraction split that is exact for three-decimal text below 2**43 µs (101 days: always
so for relative Kineto time); anything else (numbers in strings, larger fractional values)
through ``decimal`` on the text itself, re-decoding the file with numbers kept as text. Digits
below the nanosecond are rounded to nearest.

Communication columns (``collective``, ``group``, ``nbytes``, ``peer``) on the COMMUNICATION rows
(NCCL kernels; gloo:* ranges, and c10d::* ops on CPU-only traces), each from the most explicit
source that says it:

* an NCCL kernel: its own args (newer PyTorch: "Collective name", "In/Out msg nelems", "dtype",
  "Group size", "Process Group Name"/"Ranks"), else the innermost ``record_param_comms`` around
  its launching call (the ``cudaLaunchKernel`` with the same ``correlation``, on that call's
  thread), then the innermost ``nccl:*`` and ``c10d::*`` ranges there: a SendRecv kernel launched
  inside ``nccl:all_to_all`` is an alltoall; the kernel's own name only when nothing encloses it;
* a c10d::* op: its name and the record_param_comms inside it; a gloo:* range: its name.

An arg "Collective name" that names no known collective says nothing (the names decide: such a
text once made every op "other", 0 matched); one naming a kind that no op name around agrees with
(all_gather on c10d::allreduce_) is kept, as the most explicit source. Both are counted in a
warning with an example.

``nbytes`` is the nccl-tests message size S: max(In, Out msg nelems) x dtype size (allgather's
total output, reduce_scatter's total input), else record_shapes' "Input Dims" x "Input type" (a
c10d::* op lists output and input: the larger; nccl:*/gloo:* ranges list the input: allgather's
is multiplied by the group size when that is known), else -1 (a TensorList has no dtype).
``group``: the args' "Process Group Name"; the one group of pg_config when the rank has one; for
gloo (which names no group) the worker threads: each gloo group owns its threads, created with
it and taking turns at its ops: threads split by the kinds they ran, else at the largest tid
gaps, into equal sets mapped in order to pg_config's entries, or, when their count cannot fill
every group's pool and pg_config starts with the world, to the entries after it (the default
group ran nothing: TP x DP on CPU) (else "" and a warning); a c10d::* op then takes the one
group of the gloo ranges of its kind.
``peer``: c10d::send / recv_'s third concrete input (a rank in the group) as a global rank; a
gloo:send / gloo:recv range (the exchange, with its wait) takes the peer of the c10d op of its
direction whose span holds the range's start on the same thread (gloo creates the Work, and
opens the range, inside the op; the range ends at wait(), after the op returned).
``meta["process_groups"]`` = {name: ranks} from pg_config and the args, ``meta["group_from"]``.

Clock: ``clock_offset_ns`` = ``baseTimeNanoseconds`` when present (Kineto's definition:
absolute = base + ts), else 0, since older traces already write microseconds since the epoch.
Run: ``meta["run"]`` (sources.run_identity) is the recorded span on that absolute clock. Nothing else
in a trace names its run: ``trace_id`` is per process (each rank's differs), ``baseTimeNanoseconds``
is a coarse base shared by unrelated runs (1790857026000000000 in every torch 2.11-2.13 trace of
tests/data, on two machines), and ``distributedInfo`` describes the job's shape.

Speed: ``msgspec`` decodes straight into small typed structs holding only the fields read here
(the rest of each event, mostly ``args``, is skipped without creating Python objects), as a union
tagged by ``ph`` so that flows and metadata become empty structs; columns are then pulled out
with C-level ``map``/``attrgetter`` and everything after is numpy. record_shapes' bulky args
("Input Dims", "Input type", "Concrete Inputs", on every cpu_op) stay raw JSON text and are decoded
only for communication rows and the GEMM/convolution ops whose FLOPs need them, once per distinct
text; since raw text keeps the file's bytes alive, the structs are dropped as soon as the rows are read.
Without ``msgspec`` the stdlib ``json`` gives the same result, slower. The cyclic GC is paused while reading.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from functools import cache
from itertools import compress, repeat
from operator import attrgetter, eq, is_, is_not, methodcaller
from pathlib import Path
from typing import Any, Union

import numpy as np

from .. import events as ev
from . import communication_prefixes, dtype_size, plausible_span, run_identity, sane_rank
from .joins import innermost_enclosing, launch_join, span_of_groups

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None

# classes of Kineto categories (lower-cased ``cat``)
_KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _HOST_RANGE, _GPU_RANGE, _DROP = range(7)
_CATEGORY_CLASS = {
    "kernel": _KERNEL,
    "gpu_memcpy": _MEMCPY, "memcpy": _MEMCPY,
    "gpu_memset": _MEMSET, "memset": _MEMSET,
    "cuda_runtime": _RUNTIME, "cuda_driver": _RUNTIME, "runtime": _RUNTIME,
    "cpu_op": _HOST_RANGE, "operator": _HOST_RANGE, "user_annotation": _HOST_RANGE,
    "python_function": _HOST_RANGE,
    "gpu_user_annotation": _GPU_RANGE,
}
_GPU_WORK = (_KERNEL, _MEMCPY, _MEMSET)
_OP_CATEGORIES = ("cpu_op", "operator")  # framework operators: the rows of the profile side tables
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# record_function ranges that are the Model Summary's phases (others are USER ranges)
_PHASE_NAME = re.compile(r"^(## *(forward|backward|optimi[sz]er|optimi[sz]er[._ ]step|data_?load(er|ing)?) *##"
                         r"|Optimizer\.step#.*|enumerate\(DataLoader\)#.*)$", re.IGNORECASE)
_HOST_COMM_ALWAYS = ("gloo:",)          # gloo worker-thread ranges: the real exchange, waiting included
_HOST_COMM_CPU_ONLY = ("c10d::",)       # on GPU traces these only enqueue NCCL kernels
_HOST_COMPUTE = ("aten::",)
_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
# Below this many µs, a float parsed from text with <= 3 decimals lies within 0.49 ns of the
# text's value, so the integer/fraction split recovers the exact nanosecond (see _us_to_ns).
_EXACT_FLOAT_LIMIT_US = 2.0 ** 43
_INT_US_LIMIT = (2 ** 63 - 1) // 1000
_MAX_ELEMENTS = 2 ** 59  # a message size in elements above this (x 8 bytes) is corrupt
_NO_TRACE_EVENTS = "JSON without a 'traceEvents' list, not a PyTorch profiler trace"

# field -> JSON key, for the stdlib fallback (msgspec structs carry the same names as attributes)
_ARG_KEYS = {"stream": "stream", "device": "device", "correlation": "correlation",
             "collective": "Collective name", "in_nelems": "In msg nelems",
             "out_nelems": "Out msg nelems", "group_size": "Group size", "dtype": "dtype",
             "pg_name": "Process Group Name", "pg_ranks": "Process Group Ranks",
             "input_dims": "Input Dims", "input_type": "Input type", "concrete": "Concrete Inputs",
             "flops": "flops", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
             "device_type": "Device Type", "device_id": "Device Id"}
# args that can be bulky on every cpu_op of a record_shapes trace: kept as raw JSON text by msgspec
# and decoded only for the communication rows and the ops whose FLOPs formula reads them
_RAW_ARGS = ("input_dims", "input_type", "concrete")

if msgspec is not None:
    class _Args(msgspec.Struct, gc=False):
        """The args read here; every other key is skipped by the decoder."""
        stream: Any = None
        device: Any = None
        correlation: Any = None
        collective: Any = msgspec.field(name="Collective name", default=None)
        in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
        out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
        group_size: Any = msgspec.field(name="Group size", default=None)
        dtype: Any = None
        pg_name: Any = msgspec.field(name="Process Group Name", default=None)
        pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
        input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw())
        input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw())
        concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw())
        flops: Any = None      # with_flops (older PyTorch writes it on the GEMM/conv ops)
        total_allocated: Any = msgspec.field(name="Total Allocated", default=None)  # [memory] instants
        total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
        device_type: Any = msgspec.field(name="Device Type", default=None)
        device_id: Any = msgspec.field(name="Device Id", default=None)

    # Every phase of the Chrome trace event format except X and i: decoded as empty structs, so that
    # flows and metadata cost next to nothing; i (instants) keeps name, ts and args for the
    # profile_memory samples ("[memory]").
    _OTHER_PHASES = "BEICbnesSTpFtfPNODMVvRc()"

    def _decoder(time_type, tagged: bool):
        """A decoder of the trace into structs, ``ts``/``dur`` decoded as ``time_type``. Tagged:
        a union on ``ph`` where only X events carry fields (unknown phases fail: use untagged)."""
        fields = [("cat", Any, None), ("name", Any, ""), ("pid", Any, None), ("tid", Any, None),
                  ("ts", time_type, None), ("dur", time_type, None),
                  ("args", Union[_Args, None], None)]  # noqa: UP007 - msgspec needs a runtime type
        if tagged:
            complete = msgspec.defstruct("_Complete", fields, gc=False, tag_field="ph", tag="X")
            instant = msgspec.defstruct("_Instant", [("name", Any, ""), ("ts", time_type, None),
                                                     ("args", Union[_Args, None], None)],  # noqa: UP007
                                        gc=False, tag_field="ph", tag="i")
            others = [msgspec.defstruct(f"_Phase{index}", [], gc=False, tag_field="ph", tag=phase)
                      for index, phase in enumerate(_OTHER_PHASES)]
            event = Union[tuple([complete, instant, *others])]  # noqa: UP007
        else:
            complete = instant = None
            event = msgspec.defstruct("_Event", [("ph", Any, None), *fields], gc=False)
        trace = msgspec.defstruct("_Trace", [
            ("traceEvents", list[event]), ("distributedInfo", Any, None), ("baseTimeNanoseconds", Any, None),
            ("deviceProperties", Any, None), ("host_name", Any, None),
        ], gc=False)
        return msgspec.json.Decoder(trace), complete, instant

    @cache
    def _decoders(exact: bool, tagged: bool) -> tuple:
        """(decoder, complete struct type, instant struct type), built on first use: building all
        four at import cost every command that imports this module (a decoder is ~3 ms of structs)
        and a merge of ordinary traces only ever uses the (inexact, tagged) one."""
        time_type = Union[int, Decimal, None] if exact else Union[int, float, str, None]  # noqa: UP007
        return _decoder(time_type, tagged)
    _EMPTY_ARGS = _Args()


class _NeedText(Exception):
    """Parsed floats cannot be converted to ns exactly: decode again keeping the number text."""


class _Document:
    """The parts of a trace file that the reader uses, however it was decoded."""

    def __init__(self, events: list, info: dict, structs: bool, complete_type=None, instant_type=None) -> None:
        self.events = events
        self.info = info          # distributedInfo, baseTimeNanoseconds, deviceProperties
        self.structs = structs    # events are msgspec structs (attributes) or dicts (keys)
        self.complete_type = complete_type  # the struct of X events when decoded as a tagged union
        self.instant_type = instant_type    # the struct of i events, likewise

    def complete_events(self) -> list:
        """The complete ("X") events."""
        if self.complete_type is not None:
            return self._of_type(self.complete_type)
        return list(compress(self.events, map(eq, self.field(self.events, "ph"), repeat("X"))))

    def _of_type(self, struct: type) -> list:
        """The events decoded as this struct of the tagged union: an exact type test, since
        ``isinstance`` is slow on a mismatch (it then looks up ``__class__``): 30 ms for the
        instants of a 109k-event trace, 3 ms this way."""
        return list(compress(self.events, map(is_, map(type, self.events), repeat(struct))))

    def field(self, items, name: str) -> list:
        """One field of many events, iterated in C (map + attrgetter/methodcaller)."""
        get = attrgetter(name) if self.structs else methodcaller("get", name)
        return list(map(get, items))

    def arg(self, args: list, name: str) -> list:
        get = attrgetter(name) if self.structs else methodcaller("get", _ARG_KEYS[name])
        return list(map(get, args))

    def json_arg(self, args: list, name: str) -> tuple[np.ndarray, list]:
        """A bulky arg (one of _RAW_ARGS) as codes and distinct Python values (None: absent),
        decoded once per distinct JSON text, alike from msgspec's raw text and stdlib values."""
        values = self.arg(args, name)
        if self.structs:
            texts = list(map(bytes, values))  # an absent arg is an empty Raw: b""
        else:
            texts = [b"" if value is None else json.dumps(value, default=str) for value in values]
        codes, uniques = ev.factorize(texts)
        return codes, [json.loads(text) if text else None for text in uniques]

    def memory_samples(self) -> list:
        """The profile_memory instants ("i" events named "[memory]") that carry a time."""
        if self.instant_type is not None:
            instants = self._of_type(self.instant_type)
        else:
            instants = list(compress(self.events, map(eq, self.field(self.events, "ph"), repeat("i"))))
        named = list(compress(instants, map(eq, self.field(instants, "name"), repeat("[memory]"))))
        return list(compress(named, map(is_not, self.field(named, "ts"), repeat(None))))

    def args(self, items) -> list:
        """The args of many events; an empty one where absent or not an object."""
        values = self.field(items, "args")
        kind = _Args if self.structs else dict
        empty = _EMPTY_ARGS if self.structs else {}
        ok = list(map(isinstance, values, repeat(kind)))
        if all(ok):
            return values
        return [value if good else empty for value, good in zip(values, ok)]


def read(path: Path, config: dict) -> list[ev.RankTrace]:
    """Read one Kineto trace file as one rank. Raises SourceError with one line on bad input."""
    path = Path(path)
    try:
        with _gc_paused():
            try:
                return [_convert(path, _load(path, exact_text=False, config=config), config)]
            except _NeedText:
                pass  # decode again outside the handler, once the first document is released
            return [_convert(path, _load(path, exact_text=True, config=config), config)]
    except RecursionError:
        raise ev.SourceError(f"{path}: JSON nested too deep to be a Kineto trace") from None
    except UnicodeDecodeError as error:
        raise ev.SourceError(f"{path}: not valid UTF-8 text (byte 0x{error.object[error.start]:02x} "
                             "in a string)") from None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding creates millions of acyclic objects; the cyclic collector would rescan them
    over and over as they are created. Restored on exit."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------------------- loading

def _read_bytes(path: Path, config: dict) -> bytes:
    from . import read_bytes  # streaming gunzip with the input.max_uncompressed_mb limit
    data = read_bytes(path, config)
    if not data or data.isspace():
        raise ev.SourceError(f"{path}: empty file, not a Kineto trace")
    return data


def _load(path: Path, exact_text: bool, config: dict | None = None) -> _Document:
    """Decode the file; with ``exact_text`` non-integer numbers come back as Decimal."""
    data = _read_bytes(path, config or {})
    if msgspec is not None:
        for tagged in (True, False):  # untagged only when some event has no or an unknown "ph"
            decoder, complete_type, instant_type = _decoders(exact_text, tagged)
            try:
                trace = decoder.decode(data)
                break
            except msgspec.ValidationError as error:
                if not tagged:
                    raise ev.SourceError(f"{path}: {_validation_message(str(error))}") from None
            except msgspec.DecodeError as error:
                raise ev.SourceError(f"{path}: not valid JSON ({str(error).removeprefix('JSON is malformed: ')})") \
                    from None
        del data  # the raw shape args still view it: freed with the structs, once the rows are read
        info = {"distributedInfo": trace.distributedInfo, "baseTimeNanoseconds": trace.baseTimeNanoseconds,
                "deviceProperties": trace.deviceProperties, "host_name": trace.host_name}
        return _Document(trace.traceEvents, info, structs=True, complete_type=complete_type,
                         instant_type=instant_type)
    try:  # stdlib fallback
        document = json.loads(data, parse_float=Decimal) if exact_text else json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        where = f" at line {error.lineno} column {error.colno}" if hasattr(error, "lineno") else ""
        raise ev.SourceError(f"{path}: not valid JSON ({getattr(error, 'msg', error)}{where})") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ev.SourceError(f"{path}: {_NO_TRACE_EVENTS}")
    events = document["traceEvents"]
    if not all(map(isinstance, events, repeat(dict))):
        raise ev.SourceError(f"{path}: 'traceEvents' holds entries that are not JSON objects")
    return _Document(events, document, structs=False)


def _validation_message(message: str) -> str:
    """msgspec's schema message, phrased for a user who gave the wrong file."""
    top_level = " - at `" not in message or message.endswith("- at `$`")
    if top_level or message.endswith("- at `$.traceEvents`"):  # not an object, or no traceEvents list
        return _NO_TRACE_EVENTS
    return f"unexpected trace content: {message}"


# ---------------------------------------------------------------------------- numbers

def _us_to_ns(values: list) -> tuple[np.ndarray, np.ndarray | None]:
    """Microsecond numbers as decoded (int, float, text or Decimal) to int64 ns, as written, and
    the mask of missing (None) values, which come out as 0 (None when nothing is missing).

    Floats: with x = fl(v) for a text v of <= 3 decimals and |v| < 2**43, |x - v| <= 2**-11 µs,
    so trunc(x) = trunc(v), x - trunc(x) is exact, and 1000 * frac is within 0.49 ns of the
    integer, which rint recovers. Naive rint(1000 * x) is not exact there (one more rounding).
    """
    try:
        inferred = np.array(values)  # one C pass: int64 / float64 for plain numbers, else object or text
    except (OverflowError, ValueError):
        inferred = np.empty(0, dtype=object)
    if inferred.ndim != 1:  # nested lists (possible without msgspec's typing): the checked path
        inferred = np.empty(0, dtype=object)
    if inferred.dtype.kind == "i":
        if inferred.size and np.abs(inferred).max() > _INT_US_LIMIT:
            raise ev.SourceError("timestamp out of range")
        return inferred * 1000, None
    if inferred.dtype.kind == "f":
        if not (np.abs(inferred) < _EXACT_FLOAT_LIMIT_US).all():
            raise _NeedText  # e.g. epoch microseconds with fractions: the float lost the ns
        whole = np.trunc(inferred)
        return whole.astype(np.int64) * 1000 + np.rint((inferred - whole) * 1000).astype(np.int64), None
    kinds = set(map(type, values))  # the rare paths: missing values, text, Decimal, mixtures
    missing = None
    if type(None) in kinds:
        missing = np.fromiter(map(is_, values, repeat(None)), dtype=bool, count=len(values))
        values = [0 if value is None else value for value in values]
        kinds = set(map(type, values))
    if kinds <= {int, float}:
        if any(abs(value) > _INT_US_LIMIT for value in values):  # beyond int64 ns: numpy gave object
            raise ev.SourceError("timestamp out of range (does not fit int64 nanoseconds)")
        return _us_to_ns(values)[0], missing
    if float in kinds:
        raise _NeedText  # floats next to text: keep every number as text
    try:
        nanos = list(map(round, map(Decimal.scaleb, map(Decimal, values), repeat(3))))
        return np.array(nanos, dtype=np.int64), missing
    except (InvalidOperation, ValueError, TypeError):
        bad = next(value for value in values if not _is_number(value))
        raise ev.SourceError(f"timestamp {bad!r} is not a number") from None
    except OverflowError:
        raise ev.SourceError("timestamp out of range") from None


def _is_number(value) -> bool:
    try:
        return not isinstance(value, bool) and Decimal(value).is_finite()
    except (InvalidOperation, ValueError, TypeError):
        return False


def _int_column(values: list, default: int = -1, corrupt: list | None = None) -> np.ndarray:
    """Integer ids (pid, tid, stream, device, correlation) from JSON values; text such as
    'stream 7' gives its number, anything else the default. Loops only over distinct values.
    With ``corrupt`` (a list), appends the mask of rows holding a number no int64 can be (1e30,
    "1e400", inf): the caller drops or distrusts them, and says so."""
    if not values:
        if corrupt is not None:
            corrupt.append(np.zeros(0, bool))
        return np.empty(0, np.int64)
    try:
        inferred = np.array(values)
        if inferred.dtype.kind == "i" and inferred.ndim == 1:
            if corrupt is not None:
                corrupt.append(np.zeros(inferred.size, bool))
            return inferred.astype(np.int64, copy=False)
    except (OverflowError, ValueError):
        pass
    codes, uniques = ev.factorize(values)
    mapped = np.array([_to_int(value, default) for value in uniques], dtype=np.int64)
    if corrupt is not None:
        corrupt.append(np.array([not _missing(value) and _beyond_int64(value) for value in uniques], bool)[codes])
    return mapped[codes]  # None (and NaN) give the default


def _missing(value) -> bool:
    """None or a float NaN: an absent value, never a corrupt one."""
    return value is None or (isinstance(value, float) and value != value)


def _exact_number(value) -> Decimal | None:
    """A JSON number, or numeric text ("12", "1e400"), as a Decimal; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        return None
    try:
        return Decimal(value.strip() if isinstance(value, str) else value)
    except (InvalidOperation, ValueError):
        return None


def _beyond_int64(value) -> bool:
    """A number that no int64 id or size can be: infinite, NaN or beyond +-2**63."""
    number = _exact_number(value)
    return number is not None and (not number.is_finite() or not -2 ** 63 <= number < 2 ** 63)


def _to_int(value, default: int) -> int:
    """An integral number within int64 (also as numeric text) as it is; 'stream 7' its number;
    anything else, including 1e30 and "1e400", the default (a size of 1 from "1e400" was a bug)."""
    number = _exact_number(value)
    if number is not None:
        if number.is_finite() and number == number.to_integral_value() and -2 ** 63 <= number < 2 ** 63:
            return int(number)
        return default
    if isinstance(value, str):
        match = re.search(r"-?\d+", value)
        if match and len(match.group()) <= 20 and -2 ** 63 <= int(match.group()) < 2 ** 63:
            return int(match.group())
    return default


# ---------------------------------------------------------------------------- conversion

def _convert(path: Path, document: _Document, config: dict) -> ev.RankTrace:
    try:
        return _build(path, document, config)
    except ev.SourceError as error:
        message = str(error)
        raise ev.SourceError(message if message.startswith(f"{path}:") else f"{path}: {message}") from None


def _build(path: Path, doc: _Document, config: dict) -> ev.RankTrace:
    """The rank's event table: rows of known categories, their times and ids, the steps, then
    the categorical columns."""
    rows, classes, skipped, is_op = _known_rows(doc)
    read = {field: doc.field(rows, field) for field in ("pid", "tid", "ts", "dur")}  # each read once
    read["is_op"] = is_op  # filtered with the rows: the side tables need not read "cat" again
    rows, classes, read, corrupt_warnings = _without_corrupt_numbers(rows, classes, read, path)
    rows, classes, read, start_ns, end_ns, negative = _times(rows, classes, read, skipped)
    keep, span_warnings = plausible_span(start_ns, end_ns, path)
    if keep is not None:
        rows, classes, read = _filtered(keep, rows, classes, read)
        start_ns, end_ns = start_ns[keep], end_ns[keep]
    time_warnings = _check_times(start_ns, end_ns, _to_int(doc.info.get("baseTimeNanoseconds"), 0), path)
    name_codes, name_uniques = _factorize_names(doc.field(rows, "name"))
    ids = _ids(doc, rows, classes, read["pid"], read["tid"])
    facts = _comm_facts(doc, rows, _comm_sources(classes, name_codes, name_uniques, config), name_codes, name_uniques)
    profiles = _profile_tables(doc, rows, read["is_op"], name_codes, name_uniques, start_ns, end_ns, ids)
    del rows
    doc.events = []  # everything is read: free the structs now (their raw args hold the whole file's text)
    steps = _steps(classes, name_codes, name_uniques, start_ns, end_ns, ids, path)
    columns, name_uniques = _columns(classes, name_codes, name_uniques, start_ns, end_ns, ids, steps, config)
    comm, comm_meta, comm_warnings = _comm_columns(doc, facts, ids, steps, classes, start_ns, end_ns,
                                                   columns["category"].codes[:len(classes)], path)
    columns.update(comm)
    rank, rank_from, world_size, rank_warnings = _checked_rank(doc, path)
    table = ev.make_events(rank=-1 if rank is None else rank, **columns)

    device, gpu = ids["device"], ids["gpu"]
    used = device[gpu & (device >= 0)]
    main_device = int(np.bincount(used).argmax()) if used.size else None
    warnings = [f"{path}: {negative} event(s) with negative duration, clamped to 0"] if negative else []
    if facts["corrupt_sizes"]:
        warnings.append(f"{path}: {facts['corrupt_sizes']} collective message size(s) (in/out msg nelems) out of "
                        f"range (e.g. {facts['size_example']}): taken as unknown")
    warnings += corrupt_warnings + span_warnings + time_warnings + steps["warnings"] + rank_warnings + comm_warnings
    meta = _meta(doc, main_device, int(steps["work"].size - (steps["launch"] >= 0).sum()), skipped)
    meta.update(comm_meta)
    meta["world_size"] = world_size
    meta["run"] = run_identity(table["start_ns"], table["end_ns"], _to_int(doc.info.get("baseTimeNanoseconds"), 0))
    # the GPU window of each step (span of the GPU work launched in it), next to the CPU step rows
    meta["gpu_step_windows"] = {"step": steps["numbers"].tolist(), "start_ns": steps["gpu_start"].tolist(),
                                "end_ns": steps["gpu_end"].tolist()}
    return ev.RankTrace(events=table, rank=rank, source="kineto", source_file=str(path), pid=steps["host_pid"],
                        device=main_device, clock_offset_ns=_to_int(doc.info.get("baseTimeNanoseconds"), 0),
                        rank_from=rank_from, warnings=warnings, meta=meta, profiles=profiles)


def _known_rows(doc: _Document) -> tuple[list, np.ndarray, dict, np.ndarray]:
    """The complete events of known categories, their class, the count of skipped ones by category,
    and which rows are framework operators (cpu_op: the side tables' rows; "cat" is read once)."""
    complete = doc.complete_events()
    cat_codes, cat_uniques = ev.factorize(doc.field(complete, "cat"))
    class_of = np.array([_CATEGORY_CLASS.get(str(cat).lower(), _DROP) for cat in cat_uniques], dtype=np.int8)
    op_of = np.array([str(cat).lower() in _OP_CATEGORIES for cat in cat_uniques], bool)
    classes = class_of[cat_codes] if cat_codes.size else np.empty(0, np.int8)
    keep = classes != _DROP
    dropped = np.bincount(cat_codes[~keep], minlength=len(cat_uniques))
    skipped = {str(cat): int(n) for cat, n in zip(cat_uniques, dropped) if n}
    rows = list(compress(complete, keep.tolist()))
    if not rows:
        raise ev.SourceError("no CPU or GPU events in the trace (only metadata or unknown categories)")
    return rows, classes[keep], skipped, op_of[cat_codes[keep]]


def _beyond_time_range(values: list) -> np.ndarray:
    """Mask of ts/dur values (µs) that no int64 nanosecond can hold: 1e30, inf, "1e400"."""
    try:
        inferred = np.array(values)
        if inferred.ndim == 1 and inferred.dtype.kind in "if":
            with np.errstate(invalid="ignore"):
                return ~(np.abs(inferred.astype(np.float64)) <= _INT_US_LIMIT)
    except (OverflowError, ValueError):
        pass
    codes, uniques = ev.factorize(values)
    number = [None if _missing(value) else _exact_number(value) for value in uniques]
    bad = [n is not None and (not n.is_finite() or abs(n) > _INT_US_LIMIT) for n in number]
    return np.array(bad, bool)[codes]


def _filtered(keep: np.ndarray, rows: list, classes: np.ndarray, read: dict) -> tuple[list, np.ndarray, dict]:
    """The kept rows, their classes and their fields read so far (arrays or lists)."""
    listed = keep.tolist()
    return list(compress(rows, listed)), classes[keep], {
        name: values[keep] if isinstance(values, np.ndarray) else list(compress(values, listed))
        for name, values in read.items()}


def _without_corrupt_numbers(rows: list, classes: np.ndarray, read: dict, path: Path):
    """pid and tid as int64 (``read``'s lists replaced); rows whose pid, tid, ts or dur is a number no
    int64 can hold (a float 1e30 where Kineto writes an integer) are dropped with one warning, not
    the whole file."""
    masks: list[np.ndarray] = []
    read = {**read, "pid": _int_column(read["pid"], corrupt=masks), "tid": _int_column(read["tid"], corrupt=masks)}
    masks += [_beyond_time_range(read[field]) for field in ("ts", "dur")]
    bad = np.logical_or.reduce(masks)
    if not bad.any():
        return rows, classes, read, []
    fields = [name for name, mask in zip(("pid", "tid", "ts", "dur"), masks) if mask.any()]
    if bad.all():
        raise ev.SourceError(f"every CPU/GPU event ({bad.size}) has a {'/'.join(fields)} out of range "
                             "(timestamp out of range or id beyond int64)")
    warning = f"{path}: {int(bad.sum())} event(s) dropped: {'/'.join(fields)} out of range (beyond int64)"
    return (*_filtered(~bad, rows, classes, read), [warning])


def _times(rows: list, classes: np.ndarray, read: dict, skipped: dict):
    """Start and end in ns; rows without a time are dropped (counted in ``skipped``), negative
    durations clamped to 0 (counted)."""
    start_ns, no_ts = _us_to_ns(read["ts"])
    if no_ts is not None:  # malformed rows without a time: skip them
        rows, classes, read = _filtered(~no_ts, rows, classes, read)
        start_ns = start_ns[~no_ts]
        skipped["(no ts)"] = int(no_ts.sum())
        if not rows:
            raise ev.SourceError(f"no event with a timestamp ('ts') among {no_ts.size} CPU/GPU event(s)")
    dur_ns, _ = _us_to_ns(read["dur"])  # a missing dur is 0
    negative = int((dur_ns < 0).sum())
    return rows, classes, read, start_ns, start_ns + np.maximum(dur_ns, 0), negative


def _ids(doc: _Document, rows: list, classes: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> dict:
    """pid, tid, lane (stream on the GPU, else tid), device and correlation id of every row."""
    pid, tid = pid.copy(), tid.copy()  # _steps rewrites GPU rows' pid
    gpu = np.isin(classes, (*_GPU_WORK, _GPU_RANGE))
    linked = np.isin(classes, (*_GPU_WORK, _RUNTIME))
    lane = tid.copy()
    device = np.full(len(rows), -1, np.int64)
    correlation = np.full(len(rows), -1, np.int64)
    if linked.any() or gpu.any():
        needs_args = gpu | linked
        args = doc.args(compress(rows, needs_args.tolist()))
        where = np.flatnonzero(needs_args)
        correlation[where] = np.where(linked[where], _int_column(doc.arg(args, "correlation")), -1)
        gpu_args = list(compress(args, gpu[where].tolist()))
        stream = _int_column(doc.arg(gpu_args, "stream"))
        lane[gpu] = np.where(stream >= 0, stream, tid[gpu])
        dev = _int_column(doc.arg(gpu_args, "device"))
        device[gpu] = np.where(dev >= 0, dev, pid[gpu])
    return {"pid": pid, "tid": tid, "gpu": gpu, "lane": lane, "device": device, "correlation": correlation}


def _steps(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict, path: Path) -> dict:
    """The ProfilerStep#N ranges (CPU bounds: the step as the framework marks it; those of zero
    length dropped and overlapping ones named by events.checked_steps, in ``warnings``), the step
    of every row (host rows: the step holding their start on the step's process; GPU work: the
    step of its launching call, else the step holding its start), the launch join, the training
    process, each step's GPU window, and the host categories. Sets GPU rows' pid to the host pid."""
    pid, gpu = ids["pid"], ids["gpu"]
    step_of_name = np.array([_step_number(name) for name in name_uniques], dtype=np.int64)
    step_rows = np.flatnonzero((classes == _HOST_RANGE) & (step_of_name[name_codes] >= 0))
    keep, step_warnings = ev.checked_steps(start_ns[step_rows], end_ns[step_rows],
                                           step_of_name[name_codes[step_rows]], pid[step_rows], path)
    step_rows = step_rows[keep]
    step_rows = step_rows[np.argsort(start_ns[step_rows], kind="stable")]
    step_numbers = step_of_name[name_codes[step_rows]]
    step_start, step_end, step_pid = start_ns[step_rows], end_ns[step_rows], pid[step_rows]
    host_pid = _main_pid(pid, classes, step_pid)

    def step_at(rows: np.ndarray, process: np.ndarray) -> np.ndarray:
        if not step_rows.size:
            return np.full(rows.size, -1, np.int64)
        found = innermost_enclosing(step_pid, step_start, step_end, process, start_ns[rows], start_ns[rows])
        return np.where(found >= 0, step_numbers[np.maximum(found, 0)], -1)

    step = np.full(len(classes), -1, np.int64)
    host = np.flatnonzero(~gpu)
    step[host] = step_at(host, pid[host])
    step[step_rows] = step_numbers
    work = np.flatnonzero(np.isin(classes, _GPU_WORK))
    runtime = np.flatnonzero(classes == _RUNTIME)
    launch = launch_join(ids["correlation"][work], ids["correlation"][runtime])
    by_time = step_at(work, np.full(work.size, step_pid[0] if step_pid.size else 0, np.int64))
    step[work] = np.where(launch >= 0, step[runtime[np.maximum(launch, 0)]] if runtime.size else -1, by_time)
    if host_pid is not None:
        pid[gpu] = host_pid
    launched = launch >= 0
    gpu_start, gpu_end = _step_gpu_bounds(step_numbers, np.where(launched, step[work], -1), start_ns[work],
                                          end_ns[work], step_start, step_end)
    host_category = _host_categories(classes, name_codes, name_uniques, bool((classes == _KERNEL).any()))
    _demote_nested_phases(host_category, ids, start_ns, end_ns)
    phase_row = _phases(host_category, start_ns, end_ns, ids, work, runtime, launch)
    return {"rows": step_rows, "numbers": step_numbers, "pid": step_pid, "step": step, "work": work,
            "launch": launch, "host_pid": host_pid, "start": step_start, "end": step_end,
            "gpu_start": gpu_start, "gpu_end": gpu_end, "host_category": host_category,
            "phase_row": phase_row, "warnings": step_warnings}


def _phases(host_category, start_ns, end_ns, ids: dict, work, runtime, launch) -> np.ndarray:
    """Phase of every row as the row of its phase range (-1: none): host rows the innermost
    PHASE range around them on their thread (a phase range is its own phase), GPU work the
    phase of its launching call; GPU work whose launch is unknown has none."""
    phase_rows = np.flatnonzero(host_category == ev.CATEGORIES.index(ev.PHASE))
    host = np.flatnonzero(~ids["gpu"])
    tid = ids["tid"]
    found = innermost_enclosing(tid[phase_rows], start_ns[phase_rows], end_ns[phase_rows],
                                tid[host], start_ns[host], end_ns[host])
    phase_row = np.full(len(host_category), -1, np.int64)
    phase_row[host] = np.where(found >= 0, phase_rows[np.maximum(found, 0)], -1) if phase_rows.size else -1
    if runtime.size:
        phase_row[work] = np.where(launch >= 0, phase_row[runtime[np.maximum(launch, 0)]], -1)
    return phase_row


def _host_categories(classes, name_codes, name_uniques, gpu_trace: bool) -> np.ndarray:
    """Category codes of host ranges by name: gloo:* (and c10d::* on CPU-only traces)
    COMMUNICATION, aten::* COMPUTE, the phase names PHASE, the rest USER; -1 for other rows."""
    comm_prefixes = _HOST_COMM_ALWAYS + (() if gpu_trace else _HOST_COMM_CPU_ONLY)
    by_name = np.full(len(name_uniques), ev.CATEGORIES.index(ev.USER), np.int64)
    for index, name in enumerate(name_uniques):  # per distinct name, not per event
        if name.startswith(comm_prefixes):
            by_name[index] = ev.CATEGORIES.index(ev.COMMUNICATION)
        elif name.startswith(_HOST_COMPUTE):
            by_name[index] = ev.CATEGORIES.index(ev.COMPUTE)
        elif _PHASE_NAME.match(name):
            by_name[index] = ev.CATEGORIES.index(ev.PHASE)
    return np.where(classes == _HOST_RANGE, by_name[name_codes] if name_codes.size else -1, -1)


def _demote_nested_phases(category, ids, start_ns, end_ns) -> None:
    """A phase range inside another phase range on the same thread is a USER range (one phase
    per moment: ``Optimizer.step#`` inside ``## optimizer ##`` is not counted twice)."""
    rows = np.flatnonzero(category == ev.CATEGORIES.index(ev.PHASE))
    if rows.size < 2:
        return
    lane, start, end = ids["lane"][rows], start_ns[rows], end_ns[rows]
    order = np.lexsort((-end, start, lane))
    lane, start, end = lane[order], start[order], end[order]
    # running max of ends, restarting per lane: later lanes are lifted above every earlier end
    level = np.cumsum(np.concatenate([[0], (lane[1:] != lane[:-1]).astype(np.int64)]))
    lift = level * (int(end.max()) - int(end.min()) + 1)
    reach = np.maximum.accumulate(end - end.min() + lift) - lift + end.min()
    inside = np.zeros(order.size, bool)
    inside[1:] = (level[1:] == level[:-1]) & (reach[:-1] >= end[1:]) & (start[1:] < reach[:-1])
    category[rows[order[inside]]] = ev.CATEGORIES.index(ev.USER)


def _columns(classes, name_codes, name_uniques, start_ns, end_ns, ids: dict, steps: dict, config: dict):
    """The event-table columns as categoricals, one ProfileStep row appended per step (the CPU
    ProfilerStep#N rows stay as USER ranges)."""
    kind = np.full(len(classes), ev.KINDS.index(ev.RANGE), np.int64)
    for cls, value in ((_KERNEL, ev.KERNEL), (_MEMCPY, ev.MEMCPY), (_MEMSET, ev.MEMSET), (_RUNTIME, ev.RUNTIME)):
        kind[classes == cls] = ev.KINDS.index(value)
    category = steps["host_category"].copy()
    category[category < 0] = ev.CATEGORIES.index(ev.USER)
    kind[category == ev.CATEGORIES.index(ev.COMMUNICATION)] = ev.KINDS.index(ev.COMM_OP)
    category[np.isin(classes, (_MEMCPY, _MEMSET))] = ev.CATEGORIES.index(ev.MEMORY)
    category[classes == _RUNTIME] = ev.CATEGORIES.index(ev.RUNTIME_CAT)
    prefixes = communication_prefixes(config)
    comm_name = np.array([name.startswith(prefixes) for name in name_uniques], dtype=bool)
    is_kernel = classes == _KERNEL
    category[is_kernel] = np.where(comm_name[name_codes[is_kernel]], ev.CATEGORIES.index(ev.COMMUNICATION),
                                   ev.CATEGORIES.index(ev.COMPUTE))
    lane_kind = np.where(ids["gpu"], ev.LANE_KINDS.index(ev.GPU_STREAM), ev.LANE_KINDS.index(ev.HOST_THREAD))

    n_steps = steps["rows"].size
    if ev.PROFILE_STEP not in name_uniques:
        name_uniques = [*name_uniques, ev.PROFILE_STEP]
    profile_step_code = name_uniques.index(ev.PROFILE_STEP)
    columns = {
        "kind": np.concatenate([kind, np.full(n_steps, ev.KINDS.index(ev.RANGE))]),
        "category": np.concatenate([category, np.full(n_steps, ev.CATEGORIES.index(ev.PHASE))]),
        "name": np.concatenate([name_codes, np.full(n_steps, profile_step_code)]),
        "start_ns": np.concatenate([start_ns, steps["start"]]),
        "end_ns": np.concatenate([end_ns, steps["end"]]),
        "device": np.concatenate([ids["device"], np.full(n_steps, -1, np.int64)]),
        "lane": np.concatenate([ids["lane"], ids["tid"][steps["rows"]]]),
        "lane_kind": np.concatenate([lane_kind, np.full(n_steps, ev.LANE_KINDS.index(ev.HOST_THREAD))]),
        "pid": np.concatenate([ids["pid"], steps["pid"]]),
        "correlation_id": np.concatenate([ids["correlation"], np.full(n_steps, -1, np.int64)]),
        "step": np.concatenate([steps["step"], steps["numbers"]]),
    }
    for column, allowed in (("kind", ev.KINDS), ("category", ev.CATEGORIES), ("lane_kind", ev.LANE_KINDS),
                            ("name", name_uniques)):
        columns[column] = ev.Texts.from_codes(columns[column], allowed)
    phase_row = np.concatenate([steps["phase_row"], np.full(n_steps, -1, np.int64)])
    phase_name = np.where(phase_row >= 0, columns["name"].codes[np.maximum(phase_row, 0)], -1)
    used, phase_code = np.unique(phase_name, return_inverse=True)
    names = ["" if code < 0 else name_uniques[code] for code in used]
    columns["phase"] = ev.Texts.from_codes(phase_code.ravel(), names) if "" in names or not names else \
        ev.Texts.from_codes(phase_code.ravel() + 1, ["", *names])
    return columns, name_uniques


# ---------------------------------------------------------------------------- profiles


def _number_column(values: list) -> np.ndarray:
    """float64 numbers from JSON values, numeric text included (NaN where absent or not a number);
    converted once per distinct value."""
    codes, uniques = ev.factorize(values)
    return np.array([_as_float(value) for value in uniques], np.float64)[codes] if codes.size \
        else np.empty(0, np.float64)


def _as_float(value) -> float:
    """A JSON number or numeric text as a float (a bool as 0/1), anything else NaN."""
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and value.strip()):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return float("nan")
    return float("nan")


def _profile_tables(doc: _Document, rows: list, is_op: np.ndarray, name_codes, name_uniques, start_ns, end_ns,
                    ids: dict) -> dict:
    """The side tables of analyses.profiles, read before the raw rows are released: the framework
    operators (cpu_op rows) with their ``flops`` arg and record_shapes' Input Dims / Concrete
    Inputs (codes into distinct decoded values; -1 on the ops whose FLOPs formula reads none), and
    the profile_memory samples. Facts only."""
    where = np.flatnonzero(is_op)
    args = doc.args(compress(rows, is_op.tolist()))
    op_names = name_codes[where]
    (dims_codes, dims), (concrete_codes, concrete) = _shape_args(doc, args, op_names, name_uniques)
    operators = ev.Table({
        "start_ns": start_ns[where], "end_ns": end_ns[where], "pid": ids["pid"][where], "lane": ids["tid"][where],
        "name": ev.Texts.from_codes(op_names, name_uniques), "flops": _number_column(doc.arg(args, "flops")),
        "dims": dims_codes, "concrete": concrete_codes})
    samples = doc.memory_samples()
    sample_args = doc.args(samples)
    time_ns, _ = _us_to_ns(doc.field(samples, "ts")) if samples else (np.empty(0, np.int64), None)
    memory = ev.Table({"time_ns": time_ns,
                           "allocated": _int_column(doc.arg(sample_args, "total_allocated")),
                           "reserved": _int_column(doc.arg(sample_args, "total_reserved")),
                           "device_type": _int_column(doc.arg(sample_args, "device_type")),
                           "device_id": _int_column(doc.arg(sample_args, "device_id"))})
    return {"operators": operators, "input_dims": dims, "concrete_inputs": concrete, "memory": memory}


def _shape_args(doc: _Document, args: list, op_names: np.ndarray, name_uniques: list) -> tuple:
    """record_shapes' Input Dims and Concrete Inputs of the operators as ((codes, distinct values),
    (codes, distinct values)), decoded only for the ops whose FLOPs formula reads them (GEMMs and
    convolutions; the code is -1 elsewhere): on every other op they feed no figure, and decoding
    them for every op was a tenth of a 128-rank merge's CPU."""
    from ..analyses.profiles import shape_args_needed  # the formulas' own list; imported once the reader runs
    needs_dims, needs_concrete = shape_args_needed(name_uniques)
    out = []
    for needed, arg in ((needs_dims, "input_dims"), (needs_concrete, "concrete")):  # two args
        on = needed[op_names] if op_names.size else np.zeros(0, bool)
        codes = np.full(op_names.size, -1, np.int64)
        codes[on], values = doc.json_arg(list(compress(args, on.tolist())), arg)
        out.append((codes, values))
    return tuple(out)


# ---------------------------------------------------------------------------- communication
# Rows that can tell about a communication op: the NCCL kernel (newer PyTorch copies the
# collective's args onto it), record_param_comms (the same args on the host), the nccl:*/gloo:*
# ranges and the c10d::* ops (their names; "Input Dims"/"Input type" when shapes were recorded).
_SRC_KERNEL, _SRC_PARAM, _SRC_NCCL, _SRC_C10D, _SRC_GLOO = range(5)
_PARAM_COMMS = "record_param_comms"
_ALLGATHER_CODE = ev.COLLECTIVE_KINDS.index(ev.ALLGATHER)
_P2P_CODES = (ev.COLLECTIVE_KINDS.index(ev.SEND), ev.COLLECTIVE_KINDS.index(ev.RECV))
_OTHER_CODE = ev.COLLECTIVE_KINDS.index(ev.OTHER_COMM)
_COMM_ROW = ev.CATEGORIES.index(ev.COMMUNICATION)
_PEER_ARG = 2  # c10d::send(tensors, group, dstRank, tag) / c10d::recv_(tensors, group, srcRank, tag)


def _comm_sources(classes, name_codes, name_uniques, config: dict) -> np.ndarray:
    """Per row, the kind of row (_SRC_*) that can describe a communication op, -1 for the rest."""
    prefixes = communication_prefixes(config)
    host_source = np.full(len(name_uniques), -1, np.int8)
    comm_kernel = np.zeros(len(name_uniques), bool)
    for index, name in enumerate(name_uniques):  # per distinct name
        comm_kernel[index] = name.startswith(prefixes)
        for source, match in ((_SRC_PARAM, name == _PARAM_COMMS), (_SRC_NCCL, name.startswith("nccl:")),
                              (_SRC_GLOO, name.startswith("gloo:")), (_SRC_C10D, name.startswith("c10d::"))):
            if match:
                host_source[index] = source
    if not name_codes.size:
        return np.empty(0, np.int8)
    source = np.where(classes == _HOST_RANGE, host_source[name_codes], -1).astype(np.int8)
    source[(classes == _KERNEL) & comm_kernel[name_codes]] = _SRC_KERNEL
    return source


def _kind_codes(values: list) -> np.ndarray:
    """COLLECTIVE_KINDS index of each op text (0 where absent or not text)."""
    codes, uniques = ev.factorize(values)
    kinds = [ev.COLLECTIVE_KINDS.index(ev.collective_kind(u)) if isinstance(u, str) and u else 0 for u in uniques]
    return np.array(kinds, np.int64)[codes] if codes.size else np.empty(0, np.int64)


def _text_column(values: list) -> np.ndarray:
    """Object array of text ("" where absent; numbers as their text)."""
    codes, uniques = ev.factorize(values)
    texts = np.array(["" if u is None or isinstance(u, (list, dict, bool)) else str(u) for u in uniques],
                     dtype=object)
    return texts[codes] if codes.size else np.empty(0, object)


def _comm_facts(doc: _Document, rows: list, source: np.ndarray, name_codes, name_uniques) -> dict:
    """What the rows that can describe a communication op say on their own, read from their args
    before the raw rows are released (arrays over those rows; -1 / 0 / "" = not said)."""
    keep = source >= 0
    where = np.flatnonzero(keep)
    src = source[where]
    args = doc.args(compress(rows, keep.tolist()))
    used, used_codes = np.unique(name_codes[where], return_inverse=True)  # kinds per distinct name
    name_kind = _kind_codes([name_uniques[code] for code in used.tolist()])[used_codes.ravel()] if where.size \
        else np.empty(0, np.int64)
    name_kind[src == _SRC_PARAM] = 0  # the name record_param_comms says nothing
    corrupt: list[np.ndarray] = []
    sizes = (doc.arg(args, "in_nelems"), doc.arg(args, "out_nelems"))
    nelems = np.maximum(_int_column(sizes[0], corrupt=corrupt), _int_column(sizes[1], corrupt=corrupt))
    huge = nelems > _MAX_ELEMENTS  # times 8 bytes would overflow int64: not a real message
    size_example = _size_example(sizes, corrupt, huge)
    nelems = np.where(huge, -1, nelems)
    dtype_codes, dtypes = ev.factorize(doc.arg(args, "dtype"))
    element = np.array([dtype_size(d) for d in dtypes], np.int64)[dtype_codes] if where.size else nelems
    tensor_bytes, input_only = _shape_bytes(doc, args, src)
    group = _text_column(doc.arg(args, "pg_name"))
    concrete_codes, concrete = doc.json_arg(args, "concrete")
    peer = np.array([_peer_in_group(value) for value in concrete], np.int64)[concrete_codes] if where.size \
        else nelems
    collective = doc.arg(args, "collective")
    return {"rows": where, "source": src, "arg_kind": _kind_codes(collective), "arg_text": _text_column(collective),
            "name": np.asarray(name_uniques, dtype=object)[name_codes[where]] if where.size else np.empty(0, object),
            "name_kind": name_kind, "nelems_bytes": np.where((nelems >= 0) & (element > 0), nelems * element, -1),
            "tensor_bytes": tensor_bytes, "input_only": input_only, "group": group,
            "group_size": _int_column(doc.arg(args, "group_size")),
            "peer": np.where(np.isin(name_kind, _P2P_CODES) & (src == _SRC_C10D), peer, -1),
            "named_groups": _named_groups(group, doc.arg(args, "pg_ranks")),
            "corrupt_sizes": int((corrupt[0] | corrupt[1] | huge).sum()), "size_example": size_example}


def _size_example(sizes: tuple[list, list], corrupt: list[np.ndarray], huge: np.ndarray) -> str:
    """The first out-of-range message size as the file wrote it (as JSON, cut to 40 characters), for
    the warning: it once said "(e.g. 1e400)" whatever the file held."""
    bad = np.flatnonzero(corrupt[0] | corrupt[1] | huge)
    if not bad.size:
        return ""
    row = int(bad[0])
    values = [sizes[0][row], sizes[1][row]]
    if corrupt[0][row] or corrupt[1][row]:
        value = values[0] if corrupt[0][row] else values[1]
    else:  # a whole number too large to be a message: the larger one
        value = max((v for v in values if isinstance(v, int)), default=values[0])
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _shape_bytes(doc: _Document, args: list, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of the tensor arguments from record_shapes' "Input Dims" x "Input type" (once per
    distinct pair) and whether they are the input only. nccl:*/gloo:* ranges list their inputs
    (bytes = their sum); c10d::* ops list output and input (bytes = the larger: allgather's total
    output, reduce_scatter's total input), input only when one tensor is listed. -1: unknown."""
    dim_codes, dims = doc.json_arg(args, "input_dims")
    type_codes, types = doc.json_arg(args, "input_type")
    if not src.size:
        return np.empty(0, np.int64), np.empty(0, bool)
    pair_codes, pairs = ev.factorize(list(zip(dim_codes.tolist(), type_codes.tolist())))
    sizes = [_tensor_sizes(dims[d], types[t]) for d, t in pairs]
    total = np.array([sum(s) if s else -1 for s in sizes], np.int64)[pair_codes]
    largest = np.array([max(s) if s else -1 for s in sizes], np.int64)[pair_codes]
    count = np.array([len(s) if s else 0 for s in sizes], np.int64)[pair_codes]
    from_op = src == _SRC_C10D
    tensor_bytes = np.where(from_op, largest, total)
    return np.where(np.isin(src, (_SRC_C10D, _SRC_NCCL, _SRC_GLOO)), tensor_bytes, -1), ~from_op | (count == 1)


def _tensor_sizes(dims, types) -> list[int] | None:
    """Byte size of each tensor argument whose element type is known; None when shapes are absent
    or a tensor argument has no element type (a TensorList): a partial size would be wrong."""
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    sizes = []
    for shape, dtype in zip(dims, types):
        element = dtype_size(dtype)
        flat = isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
        if element > 0 and flat:
            sizes.append(int(np.prod(shape, dtype=object)) * element if shape else element)
        elif shape:
            return None
    return sizes or None


def _peer_in_group(concrete) -> int:
    """The peer's rank within the group from c10d::send/recv_ "Concrete Inputs" (its 3rd entry)."""
    if isinstance(concrete, list) and len(concrete) > _PEER_ARG:
        value = concrete[_PEER_ARG]
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if type(value) is int and value >= 0:
            return value
    return -1


def _named_groups(group: np.ndarray, ranks_text: list) -> dict[str, list[int]]:
    """{group name: ranks} from the "Process Group Ranks" text ("[0, 1]") next to the group names."""
    named: dict[str, list[int]] = {}
    for name, text in dict(zip(group.tolist(), ranks_text)).items():  # one per distinct name
        ranks = _rank_list(json.loads(text) if isinstance(text, str) and _looks_like_list(text) else text)
        if name and ranks is not None:
            named.setdefault(name, ranks)
    return named


def _looks_like_list(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False


def _rank_list(value) -> list[int] | None:
    if isinstance(value, list) and all(type(rank) is int and rank >= 0 for rank in value):
        return list(value)
    return None


def _take(values: np.ndarray, index: np.ndarray, missing):
    """values[index] where index >= 0, else ``missing``."""
    if not values.size:
        return np.full(index.size, missing, dtype=values.dtype)
    return np.where(index >= 0, values[np.maximum(index, 0)], missing)


def _first_known(missing, *candidates: np.ndarray) -> np.ndarray:
    """Per element, the first candidate that is not ``missing`` (candidates in order of trust)."""
    out = candidates[0].copy()
    for candidate in candidates[1:]:
        hole = out == missing
        out[hole] = candidate[hole]
    return out


def _related_ops(facts: dict, ids: dict, start_ns, end_ns, launch_row: np.ndarray) -> dict[int, np.ndarray]:
    """Per fact row, the fact row of the op around it, by source (-1: none). A kernel: the
    innermost record_param_comms / nccl:* / c10d::* range around its launching call on the
    launching thread (a SendRecv kernel inside nccl:all_to_all is an alltoall). A c10d::* op:
    the record_param_comms inside it (on CPU traces the op is the communication row). A gloo:send
    / gloo:recv range: the c10d op it started in, for the peer (_gloo_p2p_ops)."""
    rows, src, tid = facts["rows"], facts["source"], ids["tid"]
    related = {source: np.full(rows.size, -1, np.int64) for source in (_SRC_PARAM, _SRC_NCCL, _SRC_C10D)}
    kernels = np.flatnonzero(src == _SRC_KERNEL)
    calls = launch_row[rows[kernels]]
    launched = kernels[calls >= 0]
    calls = calls[calls >= 0]
    for source, found in related.items():
        ranges = np.flatnonzero(src == source)
        if not ranges.size or not calls.size:
            continue
        r = rows[ranges]
        inner = innermost_enclosing(tid[r], start_ns[r], end_ns[r], tid[calls], start_ns[calls], end_ns[calls])
        found[launched] = np.where(inner >= 0, ranges[np.maximum(inner, 0)], -1)
    ops, params = np.flatnonzero(src == _SRC_C10D), np.flatnonzero(src == _SRC_PARAM)
    if ops.size and params.size:
        o, p = rows[ops], rows[params]
        outer = innermost_enclosing(tid[o], start_ns[o], end_ns[o], tid[p], start_ns[p], end_ns[p])
        related[_SRC_PARAM][ops[outer[outer >= 0]]] = params[outer >= 0]
    gloo_op = _gloo_p2p_ops(facts, tid, start_ns, end_ns)
    related[_SRC_C10D] = np.where(gloo_op >= 0, gloo_op, related[_SRC_C10D])
    return related


def _gloo_p2p_ops(facts: dict, tid: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Per fact row: for a gloo:send / gloo:recv range, the fact row of its c10d::send / recv_ op
    (-1: none, and for every other row). Why: on gloo only the op's concrete inputs name the peer
    (and tag), while the range is the exchange itself, where the wait is, and the row that is kept.
    Traces show the link unambiguously: gloo creates the Work, which opens the range, inside the
    op on the op's thread, and the range ends at wait(), after the op returned; so ranges and ops
    cross, never nest. The op is the one of the same direction whose span holds the range's
    start on the same thread; an op that two ranges would claim is left to neither (a guess)."""
    rows, src, kind = facts["rows"], facts["source"], facts["name_kind"]
    found = np.full(rows.size, -1, np.int64)
    p2p = np.isin(kind, _P2P_CODES)
    gloo, ops = np.flatnonzero((src == _SRC_GLOO) & p2p), np.flatnonzero((src == _SRC_C10D) & p2p)
    if not gloo.size or not ops.size:
        return found
    o, g = rows[ops], rows[gloo]
    inner = innermost_enclosing(tid[o], start_ns[o], end_ns[o], tid[g], start_ns[g], start_ns[g])  # the start
    op = np.where(inner >= 0, ops[np.maximum(inner, 0)], -1)
    op[kind[np.maximum(op, 0)] != kind[gloo]] = -1
    claims = np.bincount(np.maximum(op, 0), weights=op >= 0, minlength=rows.size)
    found[gloo] = np.where(claims[np.maximum(op, 0)] == 1, op, -1)
    return found


def _merged_facts(facts: dict, related: dict[int, np.ndarray]) -> dict:
    """Each fact row's own facts completed by the ops around it, most explicit first: the args of
    the collective (kernel, record_param_comms), then the op names, then the kernel name; bytes
    from msg nelems x dtype, else the c10d::* op's shapes, else the nccl:* range's. An arg that
    names no known collective ("Collective name": "lots") says nothing: the names decide (it once
    made every op "other", 0 matched). ``said_by`` / ``named_by``: the fact row whose args / name
    gave the kind, for the warnings of _kind_warnings."""
    param, nccl, op = related[_SRC_PARAM], related[_SRC_NCCL], related[_SRC_C10D]
    arg_kind, name_kind = facts["arg_kind"], facts["name_kind"]
    own_name = np.where(facts["source"] == _SRC_KERNEL, 0, name_kind)
    kernel_name = np.where(facts["source"] == _SRC_KERNEL, name_kind, 0)
    names = (own_name, _take(name_kind, nccl, 0), _take(name_kind, op, 0))
    said = _first_known(0, arg_kind, _take(arg_kind, param, 0))
    by_name = _first_known(0, *names, kernel_name)
    kind = np.where((said == _OTHER_CODE) & (by_name > 0), by_name, _first_known(0, said, by_name))
    here = np.arange(said.size)
    known = [(name > 0) & (name != _OTHER_CODE) for name in names]
    tensor_bytes, input_only = facts["tensor_bytes"], facts["input_only"]
    around = np.where(_take(tensor_bytes, op, -1) >= 0, op, nccl)
    return {"kind": kind, "said": said, "said_by": np.where(arg_kind > 0, here, param),
            "named": np.logical_or.reduce(known),
            "agree": np.logical_or.reduce([k & (name == said) for k, name in zip(known, names)]),
            "named_by": np.where(known[0], here, np.where(known[1], nccl, op)),
            "nelems_bytes": _first_known(-1, facts["nelems_bytes"], _take(facts["nelems_bytes"], param, -1)),
            "tensor_bytes": _first_known(-1, tensor_bytes, _take(tensor_bytes, around, -1)),
            "input_only": np.where(tensor_bytes >= 0, input_only, _take(input_only, around, False)),
            "group": _first_known("", facts["group"], _take(facts["group"], param, "")),
            "group_size": _first_known(-1, facts["group_size"], _take(facts["group_size"], param, -1)),
            "peer": _first_known(-1, facts["peer"], _take(facts["peer"], op, -1))}


def _pg_config(doc: _Document) -> list[tuple[str, list[int] | None]]:
    """The rank's process groups in creation order from distributedInfo.pg_config."""
    info = doc.info.get("distributedInfo")
    config = info.get("pg_config") if isinstance(info, dict) else None
    if not isinstance(config, list):
        return []
    return [(str(entry.get("pg_name")), _rank_list(entry.get("ranks"))) for entry in config
            if isinstance(entry, dict) and entry.get("pg_name") is not None]


def _clusters_by_kinds(threads: np.ndarray, row_tid: np.ndarray, row_kind: np.ndarray,
                       groups: int) -> np.ndarray | None:
    """Cluster index of each sorted gloo worker tid by the kinds of collective it ran, or None.
    A group's threads take turns at its ops, so they run the same kinds; when that splits the
    threads into as many equal sets as there are groups, the sets are the groups, ordered by
    their first tid (groups are created one after the other, each with its threads)."""
    signature = {int(t): "|".join(sorted(set(map(str, row_kind[row_tid == t])))) for t in threads}  # per thread
    sets = sorted({s for s in signature.values()}, key=lambda s: min(t for t, v in signature.items() if v == s))
    if len(sets) != groups:
        return None
    cluster = np.array([sets.index(signature[int(t)]) for t in threads], np.int64)
    return cluster if (np.bincount(cluster) == threads.size // groups).all() and threads.size % groups == 0 else None


def _thread_clusters(threads: np.ndarray, groups: int) -> np.ndarray | None:
    """Cluster index (in tid order) of each sorted gloo worker tid, or None when the split is not
    clear. A group's threads are created together, so its tids are close; other processes on the
    host (the other ranks, started at the same moment) can take tids in between, so the groups
    are split at the ``groups - 1`` largest tid gaps, and only accepted when every group gets
    the same number of threads (gloo gives each group the same pool) and those gaps are wider
    than every gap inside a group."""
    if threads.size < groups or threads.size % groups:
        return None
    gaps = np.diff(threads)
    if groups == 1:
        return np.zeros(threads.size, np.int64)
    cut = np.sort(np.argsort(-gaps, kind="stable")[:groups - 1])
    inside = np.delete(gaps, cut)
    if inside.size and gaps[cut].min() <= inside.max():
        return None
    cluster = np.zeros(threads.size, np.int64)
    cluster[cut + 1] = 1
    cluster = np.cumsum(cluster)
    return cluster if (np.bincount(cluster) == threads.size // groups).all() else None


def _thread_groups(threads: np.ndarray, row_tid: np.ndarray, row_kind: np.ndarray, pg_names: list[str],
                   default_first: bool) -> tuple[np.ndarray | None, list[str], bool]:
    """The gloo worker threads' groups: (cluster per thread, the pg names they index, whether the
    default group was taken to be idle). The split by kinds, else by tid gaps, into the groups of
    pg_config; failing that, when pg_config starts with the default (world) group, into the
    others: the default group is created first, with init_process_group, and a job whose
    collectives all run in subgroups leaves its threads without a single gloo range (TP x DP on
    CPU). Only when the threads cannot all be there (every group has the same pool, and their
    count is no multiple of the groups'); counts that then disagree across ranks are still caught
    by the matching."""
    idle_default = default_first and threads.size % len(pg_names) != 0
    for names, idle in ((pg_names, False), (pg_names[1:] if idle_default else [], True)):
        if not names:
            continue
        cluster = _clusters_by_kinds(threads, row_tid, row_kind, len(names))
        cluster = _thread_clusters(threads, len(names)) if cluster is None else cluster
        if cluster is not None:
            return cluster, names, idle
    return None, pg_names, False


def _infer_groups(merged: dict, facts: dict, tid: np.ndarray, pg_names: list[str],
                  default_first: bool = False) -> tuple[list[str], list[str]]:
    """Fill the group of rows whose args do not name it, in ``merged["group"]``; returns how
    (phrases for meta["group_from"]) and warnings. One group in pg_config: every op is in it.
    Gloo: each process group owns its worker threads, created with the group: the threads split
    by the kinds they ran (_clusters_by_kinds), else into runs of close tids (_thread_clusters),
    map to pg_config entries in order (never a guess when neither split is clear). A c10d::* op
    (CPU trace): the one group of the gloo ranges of its kind, when its kind has as many gloo
    ranges as ops."""
    group, src, kind = merged["group"], facts["source"], merged["kind"]
    methods = ["record_param_comms"] if (group != "").any() else []
    unknown = (group == "") & (src != _SRC_PARAM)  # record_param_comms already lent its group
    if len(pg_names) == 1 and unknown.any():
        group[unknown] = pg_names[0]
        return methods + ["pg_config (the rank's only group)"], []
    gloo = np.flatnonzero((src == _SRC_GLOO) & unknown)
    if not gloo.size or not pg_names:
        return methods, []
    threads = np.unique(tid[facts["rows"][gloo]])
    cluster, pg_names, idle_default = _thread_groups(threads, tid[facts["rows"][gloo]], kind[gloo], pg_names,
                                                     default_first)
    methods += ["the default group ran no collective in the trace"] if idle_default else []
    if cluster is None:
        return methods, [f"gloo process groups could not be told apart: {threads.size} worker thread(s) do not "
                         f"split into {len(pg_names)} equal runs of tids for the group(s) in pg_config; their "
                         "collectives have no group (matched on the world)"]
    group[gloo] = np.array(pg_names, dtype=object)[cluster[np.searchsorted(threads, tid[facts["rows"][gloo]])]]
    methods.append("gloo worker threads + pg_config")
    ops = np.flatnonzero((src == _SRC_C10D) & (group == ""))
    gloo_all = np.flatnonzero(src == _SRC_GLOO)
    told = False
    for code in np.unique(kind[ops]):  # per distinct kind
        mine, theirs = ops[kind[ops] == code], gloo_all[kind[gloo_all] == code]
        names = set(group[theirs].tolist())
        if mine.size == theirs.size and len(names) == 1 and "" not in names:
            group[mine], told = names.pop(), True
    return methods + (["c10d ops: the group of the gloo ranges of their kind"] if told else []), []


def _comm_columns(doc: _Document, facts: dict, ids: dict, steps: dict, classes, start_ns, end_ns,
                  category: np.ndarray, path: Path) -> tuple[dict, dict, list[str]]:
    """The collective / group / nbytes / peer columns of the communication rows (defaults on
    the others and on the ProfileStep rows), meta["process_groups"] / meta["group_from"], and
    warnings."""
    n, n_steps = len(classes), steps["rows"].size
    launch_row = np.full(n, -1, np.int64)
    runtime = np.flatnonzero(classes == _RUNTIME)
    if runtime.size:
        launch_row[steps["work"]] = np.where(steps["launch"] >= 0, runtime[np.maximum(steps["launch"], 0)], -1)
    merged = _merged_facts(facts, _related_ops(facts, ids, start_ns, end_ns, launch_row))
    pg = _pg_config(doc)
    groups = {name: ranks for name, ranks in pg if ranks is not None}
    for name, ranks in facts["named_groups"].items():
        groups.setdefault(name, ranks)
    info = doc.info.get("distributedInfo")
    world = _to_int(info.get("world_size"), 0) if isinstance(info, dict) else 0
    default_first = len(pg) > 1 and pg[0][1] is not None and 0 < world == len(pg[0][1]) and \
        sorted(pg[0][1]) == list(range(world))
    methods, warnings = _infer_groups(merged, facts, ids["tid"], [name for name, _ in pg], default_first)
    group = merged["group"]
    size_of = {name: len(ranks) for name, ranks in groups.items()}
    group_codes, group_names = ev.factorize(group.tolist())
    known_size = np.array([size_of.get(name, -1) for name in group_names], np.int64)[group_codes] \
        if group.size else np.empty(0, np.int64)
    group_size = _first_known(-1, merged["group_size"], known_size)
    per_member = (merged["kind"] == _ALLGATHER_CODE) & merged["input_only"]
    shaped = np.where(per_member, np.where(group_size > 0, merged["tensor_bytes"] * group_size, -1),
                      merged["tensor_bytes"])
    nbytes = _first_known(-1, merged["nelems_bytes"], np.where(merged["tensor_bytes"] >= 0, shaped, -1))
    ranks_of = [groups.get(name) for name in group_names]
    peer = np.array([_global_rank(ranks_of[g], p) for g, p in zip(group_codes.tolist(), merged["peer"].tolist())],
                    np.int64) if (merged["peer"] >= 0).any() else merged["peer"]
    comm = np.flatnonzero(category[facts["rows"]] == _COMM_ROW)
    rows = facts["rows"][comm]
    warnings += _kind_warnings(facts, merged, comm)
    names = ["", *(name for name in group_names if name)]  # group column: codes into these
    code_of = np.array([names.index(name) for name in group_names], np.int32)
    size = n + n_steps  # the ProfileStep rows appended after the trace's rows keep the defaults
    columns = {"collective": np.zeros(size, np.int8), "group": np.zeros(size, np.int32),
               "nbytes": np.full(size, -1, np.int64), "peer": np.full(size, -1, np.int64)}
    for column, values in (("collective", merged["kind"]), ("group", code_of[group_codes] if group.size else group),
                           ("nbytes", nbytes), ("peer", peer)):
        columns[column][rows] = values[comm]
    columns["collective"] = ev.Texts.from_codes(columns["collective"], ev.COLLECTIVE_KINDS)
    columns["group"] = ev.Texts.from_codes(columns["group"], names)
    meta = {"process_groups": groups, "group_from": "; ".join(methods) or "unknown"}
    return columns, meta, [f"{path}: {warning}" for warning in warnings]


def _kind_warnings(facts: dict, merged: dict, comm: np.ndarray) -> list[str]:
    """Where the collective's args and its op names disagree, on the communication rows: args that
    name a known kind no op name around agrees with (the args' kind is kept: the most explicit
    source), and args naming no known collective (the op names' kind is used). Count and example."""
    said, named, agree = merged["said"][comm], merged["named"][comm], merged["agree"][comm]
    contradicted = comm[(said > 0) & (said != _OTHER_CODE) & named & ~agree]
    unknown = comm[(said == _OTHER_CODE) & named]
    warnings = []
    for rows, what in ((contradicted, "contradicts its op's name ({arg} on {name}): the args' kind ({kind}) is "
                                      "used, as the most explicit source"),
                       (unknown, "names no known collective ({arg} on {name}): the op's name gives its kind "
                                 "({kind})")):
        if rows.size:
            row = int(rows[0])
            arg = str(facts["arg_text"][merged["said_by"][row]])[:40]
            name = str(facts["name"][merged["named_by"][row]])[:60]
            kind = ev.COLLECTIVE_KINDS[int(merged["kind"][row])]
            warnings.append(f"{rows.size} collective(s) whose 'Collective name' arg "
                            + what.format(arg=repr(arg), name=name, kind=kind))
    return warnings


def _global_rank(ranks: list[int] | None, rank_in_group: int) -> int:
    """A group rank as a global rank (-1 when the group's ranks are not known)."""
    if rank_in_group < 0 or ranks is None or rank_in_group >= len(ranks):
        return -1
    return ranks[rank_in_group]


def _factorize_names(names: list) -> tuple[np.ndarray, list[str]]:
    """Codes and distinct names as text (a missing or non-text name becomes its text or '')."""
    codes, uniques = ev.factorize(names)
    if all(map(isinstance, uniques, repeat(str))):
        return codes, uniques
    recoded, texts = ev.factorize(["" if value is None else str(value) for value in uniques])
    return recoded[codes] if codes.size else codes, texts


def _step_number(name: str) -> int:
    match = _STEP_NAME.match(name)
    return int(match.group(1)) if match else -1


def _main_pid(pid: np.ndarray, classes: np.ndarray, step_pid: np.ndarray) -> int | None:
    """The training process: owner of the ProfilerSteps, else of most launches, else of most
    host events; None for a GPU-only trace."""
    for values in (step_pid, pid[classes == _RUNTIME], pid[np.isin(classes, (_HOST_RANGE, _RUNTIME))]):
        if values.size:
            unique, counts = np.unique(values, return_counts=True)
            return int(unique[counts.argmax()])
    return None


def _step_gpu_bounds(step_numbers, work_step, work_start, work_end, step_start, step_end):
    """Per step: [min start, max end] of the GPU work launched in it, else its CPU bounds."""
    gpu_start, gpu_end = step_start.copy(), step_end.copy()
    if not step_numbers.size or not work_step.size:
        return gpu_start, gpu_end
    order = np.argsort(step_numbers, kind="stable")
    slot = np.minimum(np.searchsorted(step_numbers[order], work_step), order.size - 1)
    valid = (work_step >= 0) & (step_numbers[order][slot] == work_step)
    target = np.where(valid, order[slot], -1)
    lowest, highest = span_of_groups(step_numbers.size, target, work_start, work_end)
    has_work = highest >= lowest
    gpu_start[has_work], gpu_end[has_work] = lowest[has_work], highest[has_work]
    return gpu_start, gpu_end


def _check_times(start_ns: np.ndarray, end_ns: np.ndarray, base_ns: int, path: Path) -> list[str]:
    """Refuse times that overflowed int64 once converted (rows beyond a plausible span are already
    dropped by plausible_span: a
    corrupt ts near 2**63 or far below 0 would make a 292-year window); warn on negative times."""
    if not start_ns.size:
        return []
    if (end_ns < start_ns).any():
        raise ev.SourceError("ts + dur does not fit int64 nanoseconds")
    first, last = int(start_ns.min()), int(end_ns.max())
    if not (-2 ** 63 <= first + base_ns and last + base_ns < 2 ** 63):
        raise ev.SourceError("ts + baseTimeNanoseconds does not fit int64 nanoseconds")
    negative = int((start_ns < 0).sum())
    return [f"{path}: {negative} event(s) with a negative timestamp"] if negative and first + base_ns < 0 else []


def _checked_rank(doc: _Document, path: Path) -> tuple[int | None, str, int | None, list[str]]:
    """Rank and world size, a corrupt world_size or a rank outside the world dropped with a warning."""
    rank, rank_from = _rank(doc.info.get("distributedInfo"), path)
    info = doc.info.get("distributedInfo") if isinstance(doc.info.get("distributedInfo"), dict) else {}
    rank, world_size, warnings = sane_rank(rank, _to_int(info.get("world_size"), 0) or None, path)
    return rank, rank_from if rank is not None else "unknown", world_size, warnings


def _rank(info, path: Path) -> tuple[int | None, str]:
    """Rank from distributedInfo, else from the file name (rank-3, rank3, rank_3...), else None."""
    if isinstance(info, dict) and info.get("rank") is not None:
        rank = _to_int(info["rank"], -1)
        if rank >= 0:
            return rank, "distributedInfo"
    for name in (path.name, path.parent.name):
        matches = _RANK_IN_NAME.findall(name)
        if matches:
            return int(matches[-1]), "file name"
    return None, "unknown"


def _meta(doc: _Document, device: int | None, unlaunched: int, skipped: dict) -> dict:
    """Compact facts about the file (they travel to rank 0 with the summary)."""
    info = doc.info.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    meta = {"world_size": _to_int(info.get("world_size"), 0) or None, "backend": info.get("backend"),
            "base_time_ns": _to_int(doc.info.get("baseTimeNanoseconds"), 0) or None,
            "gpu_events_without_launch": unlaunched, "skipped_categories": skipped}
    if isinstance(doc.info.get("host_name"), str) and doc.info["host_name"]:
        meta["hostname"] = doc.info["host_name"]  # PyTorch's top-level "host_name": ranks on one host share a clock
    properties = doc.info.get("deviceProperties")
    if device is not None and isinstance(properties, list):
        meta["gpu_name"] = next((p.get("name") for p in properties if isinstance(p, dict) and p.get("id") == device),
                                None)
    return meta


__all__ = ["read"]
