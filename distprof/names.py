"""Display names: events keep full names; reports shorten them (100 kB names once made a 117 MB
summary.json). Tables group an op's calls under its base name and know a step marker's name."""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable

import msgspec

from .typed import hints_of

MAX_NAME_CHARS = 256
_CONTROL = re.compile("[\x00-\x1f]")  # C0 controls: short_name makes each a space
ELLIPSIS = "…"


def short_name(name: object, limit: int = MAX_NAME_CHARS) -> str:
    """``name`` as text of at most ``limit`` characters: head and tail kept around an ellipsis, so
    templated kernel names stay recognisable at both ends. Control characters become spaces."""
    text = str(name)
    if _CONTROL.search(text):  # one regex pass, not a Python loop over a long name's characters
        text = _CONTROL.sub(" ", text)
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    head = (limit - len(ELLIPSIS) + 1) // 2
    tail = limit - len(ELLIPSIS) - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


LONG_TEXT_CHARS = 4 * MAX_NAME_CHARS  # other text (messages, paths) in reports: a looser cap


def cap_names(value: object) -> object:
    """A copy of a JSON-like summary, or of a typed record, with every dict key and ``name`` value cut by
    short_name and any other string cut at LONG_TEXT_CHARS: what reports print and store stays bounded
    however long the traces' names are. What needs no cut is returned as it is (``map_strings``)."""
    return map_strings(value, _capped_text)


def _capped_text(text: str, key: object) -> str:
    return _cap(text, MAX_NAME_CHARS if key is DICT_KEY or key == "name" else LONG_TEXT_CHARS)


DICT_KEY = object()  # the ``key`` map_strings gives a dict's own key
_LEAF_TYPES = frozenset({int, float, bool, type(None)})  # hold no string: not walked (most of a summary's values)


def map_strings(value: object, text: Callable[[str, object], str], key: object = None) -> object:
    """``value`` (JSON-like data or a typed record, msgspec structs walked field by field by their JSON keys) with
    every string ``s`` made ``text(s, key)``: ``key`` is the JSON key the string sits under (None in a list,
    DICT_KEY for a dict's own key). What ``text`` leaves as it is is returned as it is: a record, list or dict
    none of whose strings changed is the same object (no copy). Why one walk: the reports escape and cut the
    summary's names without writing its JSON and reading it back."""
    if isinstance(value, str):
        return text(value, key)
    if isinstance(value, msgspec.Struct):
        changed = {}
        for field, name in _text_fields(type(value)):
            old = getattr(value, field)
            if type(old) not in _LEAF_TYPES and (new := map_strings(old, text, name)) is not old:
                changed[field] = new
        return msgspec.structs.replace(value, **changed) if changed else value
    if isinstance(value, dict):
        items = [(text(k, DICT_KEY) if isinstance(k, str) else k,
                  v if type(v) in _LEAF_TYPES else map_strings(v, text, k)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        items = [v if type(v) in _LEAF_TYPES else map_strings(v, text) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    return value


@functools.cache
def _text_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, JSON key) of the fields of a record type whose declared type can hold text: the
    walk never visits a field declared a number (most of a summary's), nor a list or map of numbers, nor
    one the type says no report shows (its ``NOT_REPORTED``: a rank's markers, tables and metadata)."""
    hidden = getattr(cls, "NOT_REPORTED", frozenset())
    try:
        hints = hints_of(cls)
        return tuple((field, key) for field, key in zip(cls.__struct_fields__, cls.__struct_encode_fields__)
                     if field not in hidden and _may_hold_text(hints[field]))
    except (TypeError, NameError):  # a declared type msgspec cannot resolve: every field is walked
        return tuple((field, key) for field, key in zip(cls.__struct_fields__, cls.__struct_encode_fields__)
                     if field not in hidden)


_NUMBERS = (int, float, bool, type(None))


def _may_hold_text(hint: object) -> bool:
    if hint in _NUMBERS:
        return False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, dict):
        args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        return not args or any(map(_may_hold_text, args))
    return True  # text, a record, anything else


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else short_name(text, limit)


# what a terminal acts on instead of printing: C0 and C1 controls (ESC starts title, clear-screen and
# cursor sequences; CSI is also U+009B), DEL, line/paragraph separators and bidi overrides (which
# reorder what follows them on the line)
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    return _ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: control characters written as escapes (``\\x1b``,
    ``\\n``), not acted on. Names come from traces and dumps anyone can write: raw, a process
    group called "\\x1b]0;x\\x07" sets the terminal's title, "\\x1b[2J" clears the screen, and a
    newline starts a forged report line. Escaped rather than dropped, so the reader sees that the
    name holds them."""
    value = str(text)
    return _UNPRINTABLE.sub(_escape, value) if _UNPRINTABLE.search(value) else value


def printable_all(value: object) -> object:
    """A JSON-like value (a summary), or a typed record of one, with every string, keys included, made
    ``printable``: applied once where a text report starts, so no name, label, path or message reaches
    the terminal raw. What needs no escape is returned as it is (``map_strings``)."""
    return map_strings(value, _printable_text)


def _printable_text(text: str, key: object) -> str:
    return printable(text)


def printable_capped(value: object) -> object:
    """``cap_names(printable_all(value))`` in one walk: what a text report shows of a summary."""
    return map_strings(value, _printable_capped_text)


def _printable_capped_text(text: str, key: object) -> str:
    return _capped_text(printable(text), key)


# PyTorch's NVTX op ranges (emit_nvtx, nsys) append per-call numbers to the op name:
# "aten::to, seq = 12, op_id = 998", then ", sizes = [...]", ", input_op_ids = [...]"
_CALL_SUFFIX = re.compile(r", (?:seq|op_id) = -?\d+(?:,.*)?$", re.DOTALL)
_STEP_NAME = re.compile(r"^(?:ProfilerStep#\d+|ProfileStep)$")


def base_name(name: object) -> str:
    """The op name without PyTorch's per-call ``, seq = N`` / ``, op_id = N`` suffix (and what follows
    it), so one op's calls form one row instead of one row per call."""
    text = str(name)
    if ", seq = " not in text and ", op_id = " not in text:
        return text
    return _CALL_SUFFIX.sub("", text) or text


def is_step_name(name: object) -> bool:
    """A step marker (``ProfilerStep#N`` as Kineto and nsys name it, or the canonical ``ProfileStep``)."""
    return bool(_STEP_NAME.match(str(name)))
