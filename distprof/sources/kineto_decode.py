"""Decoding a PyTorch profiler (Kineto) trace file into rows for ``kineto``: the file's events
as small structs or dicts (:class:`Document`), the row class of each category, and numbers
read exactly.

Timestamps become integer nanoseconds *as written*: integers exactly; floats through an
integer/fraction split that is exact for three-decimal text below 2**43 µs (101 days: always
so for relative Kineto time); anything else (numbers in strings, larger fractional values)
through ``decimal`` on the text itself, re-decoding the file with numbers kept as text. Digits
below the nanosecond are rounded to nearest.

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

import codecs
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

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None

# classes of Kineto categories (lower-cased ``cat``)
KERNEL_CLASS, MEMCPY_CLASS, MEMSET_CLASS, RUNTIME_CLASS, HOST_RANGE_CLASS, GPU_RANGE_CLASS, DROP_CLASS = range(7)
CATEGORY_CLASS = {
    "kernel": KERNEL_CLASS,
    "gpu_memcpy": MEMCPY_CLASS, "memcpy": MEMCPY_CLASS,
    "gpu_memset": MEMSET_CLASS, "memset": MEMSET_CLASS,
    "cuda_runtime": RUNTIME_CLASS, "cuda_driver": RUNTIME_CLASS, "runtime": RUNTIME_CLASS,
    "cpu_op": HOST_RANGE_CLASS, "operator": HOST_RANGE_CLASS, "user_annotation": HOST_RANGE_CLASS,
    "python_function": HOST_RANGE_CLASS,
    "gpu_user_annotation": GPU_RANGE_CLASS,
}
GPU_WORK = (KERNEL_CLASS, MEMCPY_CLASS, MEMSET_CLASS)
# Below this many µs, a float parsed from text with <= 3 decimals lies within 0.49 ns of the
# text's value, so the integer/fraction split recovers the exact nanosecond (see us_to_ns).
_EXACT_FLOAT_LIMIT_US = 2.0 ** 43
INT_US_LIMIT = (2 ** 63 - 1) // 1000
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
    # The args read here; every other key is skipped by the decoder. A complete (X) event's args and an
    # instant's ([memory] samples) are two structs, each holding only its own: a struct's every field is
    # filled and freed for each event, and the instants' four are on no X event (decoding and freeing a
    # rank's events: 27.5 -> 25 ms, 24k events). An untagged decode (some event without a known "ph")
    # reads both into one.
    _OP_ARGS = [
        ("stream", Any, None), ("device", Any, None), ("correlation", Any, None),
        ("collective", Any, msgspec.field(name="Collective name", default=None)),
        ("in_nelems", Any, msgspec.field(name="In msg nelems", default=None)),
        ("out_nelems", Any, msgspec.field(name="Out msg nelems", default=None)),
        ("group_size", Any, msgspec.field(name="Group size", default=None)),
        ("dtype", Any, None),
        ("pg_name", Any, msgspec.field(name="Process Group Name", default=None)),
        ("pg_ranks", Any, msgspec.field(name="Process Group Ranks", default=None)),
        ("input_dims", msgspec.Raw, msgspec.field(name="Input Dims", default=msgspec.Raw())),
        ("input_type", msgspec.Raw, msgspec.field(name="Input type", default=msgspec.Raw())),
        ("concrete", msgspec.Raw, msgspec.field(name="Concrete Inputs", default=msgspec.Raw())),
        ("flops", Any, None),  # with_flops (older PyTorch writes it on the GEMM/conv ops)
    ]
    _MEMORY_ARGS = [  # the profile_memory instants ("[memory]")
        ("total_allocated", Any, msgspec.field(name="Total Allocated", default=None)),
        ("total_reserved", Any, msgspec.field(name="Total Reserved", default=None)),
        ("device_type", Any, msgspec.field(name="Device Type", default=None)),
        ("device_id", Any, msgspec.field(name="Device Id", default=None)),
    ]
    _Args = msgspec.defstruct("_Args", _OP_ARGS + _MEMORY_ARGS, gc=False)
    _OpArgs = msgspec.defstruct("_OpArgs", _OP_ARGS, gc=False)
    _MemoryArgs = msgspec.defstruct("_MemoryArgs", _MEMORY_ARGS, gc=False)
    _ARG_STRUCTS = (_OpArgs, _MemoryArgs, _Args)  # the usual one first: isinstance tries them in turn

    # Every phase of the Chrome trace event format except X and i: decoded as empty structs, so that
    # flows and metadata cost next to nothing; i (instants) keeps name, ts and args for the
    # profile_memory samples ("[memory]").
    _OTHER_PHASES = "BEICbnesSTpFtfPNODMVvRc()"

    def _decoder(time_type, tagged: bool):
        """A decoder of the trace into structs, ``ts``/``dur`` decoded as ``time_type``. Tagged:
        a union on ``ph`` where only X events carry fields (unknown phases fail: use untagged)."""
        fields = [("cat", Any, None), ("name", Any, ""), ("pid", Any, None), ("tid", Any, None),
                  ("ts", time_type, None), ("dur", time_type, None)]
        if tagged:
            complete = msgspec.defstruct("_Complete", [*fields, ("args", Union[_OpArgs, None], None)],  # noqa: UP007
                                         gc=False, tag_field="ph", tag="X")
            instant = msgspec.defstruct("_Instant", [("name", Any, ""), ("ts", time_type, None),
                                                     ("args", Union[_MemoryArgs, None], None)],  # noqa: UP007
                                        gc=False, tag_field="ph", tag="i")
            others = [msgspec.defstruct(f"_Phase{index}", [], gc=False, tag_field="ph", tag=phase)
                      for index, phase in enumerate(_OTHER_PHASES)]
            event = Union[tuple([complete, instant, *others])]  # noqa: UP007
        else:
            complete = instant = None
            event = msgspec.defstruct("_Event", [("ph", Any, None), *fields,
                                                 ("args", Union[_Args, None], None)], gc=False)  # noqa: UP007
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


class NeedText(Exception):
    """Parsed floats cannot be converted to ns exactly: decode again keeping the number text."""


class Document:
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
        kind = _ARG_STRUCTS if self.structs else dict
        empty = _EMPTY_ARGS if self.structs else {}
        ok = list(map(isinstance, values, repeat(kind)))
        if all(ok):
            return values
        return [value if good else empty for value, good in zip(values, ok)]


@contextmanager
def gc_paused() -> Iterator[None]:
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


def load(path: Path, exact_text: bool, config: dict | None = None) -> Document:
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
                _check_utf8(data)  # distprof's own words for bad text, whatever the library's version says
                raise ev.SourceError(f"{path}: not valid JSON ({str(error).removeprefix('JSON is malformed: ')})") \
                    from None
        del data  # the raw shape args still view it: freed with the structs, once the rows are read
        info = {"distributedInfo": trace.distributedInfo, "baseTimeNanoseconds": trace.baseTimeNanoseconds,
                "deviceProperties": trace.deviceProperties, "host_name": trace.host_name}
        return Document(trace.traceEvents, info, structs=True, complete_type=complete_type,
                         instant_type=instant_type)
    try:  # stdlib fallback
        document = json.loads(data, parse_float=Decimal) if exact_text else json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        _check_utf8(data)
        where = f" at line {error.lineno} column {error.colno}" if hasattr(error, "lineno") else ""
        raise ev.SourceError(f"{path}: not valid JSON ({getattr(error, 'msg', error)}{where})") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ev.SourceError(f"{path}: {_NO_TRACE_EVENTS}")
    events = document["traceEvents"]
    if not all(map(isinstance, events, repeat(dict))):
        raise ev.SourceError(f"{path}: 'traceEvents' holds entries that are not JSON objects")
    return Document(events, document, structs=False)


def _check_utf8(data: bytes) -> None:
    """Raise UnicodeDecodeError (``read`` phrases it) where the bytes are not UTF-8 text. Only on the error
    path: msgspec 0.18-0.22 raised it themselves, 0.23 says "Invalid UTF-8 encoded string" as a JSON error."""
    codecs.decode(data, "utf-8")


def _validation_message(message: str) -> str:
    """msgspec's schema message, phrased for a user who gave the wrong file."""
    top_level = " - at `" not in message or message.endswith("- at `$`")
    if top_level or message.endswith("- at `$.traceEvents`"):  # not an object, or no traceEvents list
        return _NO_TRACE_EVENTS
    return f"unexpected trace content: {message}"


# ---------------------------------------------------------------------------- numbers

def us_to_ns(values: list | np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Microsecond numbers as decoded (int, float, text or Decimal; or the int64/float64 array numpy
    already inferred from such a list) to int64 ns, as written, and the mask of missing (None)
    values, which come out as 0 (None when nothing is missing).

    Floats: with x = fl(v) for a text v of <= 3 decimals and |v| < 2**43, |x - v| <= 2**-11 µs,
    so trunc(x) = trunc(v), x - trunc(x) is exact, and 1000 * frac is within 0.49 ns of the
    integer, which rint recovers. Naive rint(1000 * x) is not exact there (one more rounding).
    """
    try:
        inferred = np.asarray(values)  # one C pass: int64 / float64 for plain numbers, else object or text
    except (OverflowError, ValueError):
        inferred = np.empty(0, dtype=object)
    if inferred.ndim != 1:  # nested lists (possible without msgspec's typing): the checked path
        inferred = np.empty(0, dtype=object)
    if inferred.dtype.kind == "i":
        if inferred.size and np.abs(inferred).max() > INT_US_LIMIT:
            raise ev.SourceError("timestamp out of range")
        return inferred * 1000, None
    if inferred.dtype.kind == "f":
        if not (np.abs(inferred) < _EXACT_FLOAT_LIMIT_US).all():
            raise NeedText  # e.g. epoch microseconds with fractions: the float lost the ns
        whole = np.trunc(inferred)
        return whole.astype(np.int64) * 1000 + np.rint((inferred - whole) * 1000).astype(np.int64), None
    kinds = set(map(type, values))  # the rare paths: missing values, text, Decimal, mixtures
    missing = None
    if type(None) in kinds:
        missing = np.fromiter(map(is_, values, repeat(None)), dtype=bool, count=len(values))
        values = [0 if value is None else value for value in values]
        kinds = set(map(type, values))
    if kinds <= {int, float}:
        if any(abs(value) > INT_US_LIMIT for value in values):  # beyond int64 ns: numpy gave object
            raise ev.SourceError("timestamp out of range (does not fit int64 nanoseconds)")
        return us_to_ns(values)[0], missing
    if float in kinds:
        raise NeedText  # floats next to text: keep every number as text
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


def int_column(values: list, default: int = -1, corrupt: list | None = None) -> np.ndarray:
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
    mapped = np.array([to_int(value, default) for value in uniques], dtype=np.int64)
    if corrupt is not None:
        corrupt.append(np.array([not is_missing(value) and _beyond_int64(value) for value in uniques], bool)[codes])
    return mapped[codes]  # None (and NaN) give the default


def is_missing(value) -> bool:
    """None or a float NaN: an absent value, never a corrupt one."""
    return value is None or (isinstance(value, float) and value != value)


def exact_number(value) -> Decimal | None:
    """A JSON number, or numeric text ("12", "1e400"), as a Decimal; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        return None
    try:
        return Decimal(value.strip() if isinstance(value, str) else value)
    except (InvalidOperation, ValueError):
        return None


def _beyond_int64(value) -> bool:
    """A number that no int64 id or size can be: infinite, NaN or beyond +-2**63."""
    number = exact_number(value)
    return number is not None and (not number.is_finite() or not -2 ** 63 <= number < 2 ** 63)


def to_int(value, default: int) -> int:
    """An integral number within int64 (also as numeric text) as it is; 'stream 7' its number;
    anything else, including 1e30 and "1e400", the default (a size of 1 from "1e400" was a bug)."""
    number = exact_number(value)
    if number is not None:
        if number.is_finite() and number == number.to_integral_value() and -2 ** 63 <= number < 2 ** 63:
            return int(number)
        return default
    if isinstance(value, str):
        match = re.search(r"-?\d+", value)
        if match and len(match.group()) <= 20 and -2 ** 63 <= int(match.group()) < 2 ** 63:
            return int(match.group())
    return default
