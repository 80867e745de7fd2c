"""One JSON codec for the frozen result types, built from their type hints.

A :class:`Record` is a frozen dataclass whose fields, in their declared order, are the keys of its
JSON object: ``to_json`` writes them and ``from_json`` reads them back, so
``T.from_json(j).to_json() == j`` for every ``j`` that ``T`` wrote. Why one codec: summary.json
had grown to hundreds of key paths written by hand in a dozen places and read back as string-keyed
dicts; with the types the file is documented, checked on reading (an unknown key is an error, not a
silent None) and read by attribute.

Rules, all from the annotations:

* a field whose value is :data:`ABSENT` is not written (a key that a row carries only sometimes);
  a key missing on reading takes the field's default, and is an error when there is none;
* ``dict[int, V]`` is written with string keys (JSON's) and read back with int keys;
* ``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]`` and nested records are decoded
  element by element; scalars and bare ``dict``/``list`` are taken as they are;
* ``field(metadata={"key": "lane"})`` names a field's JSON key when it is not the field's name;
* a text an analysis leaves to the reports is a :class:`Reason` (``str | Reason`` fields) until
  ``reports.words.worded`` words it; encoding one unworded is an error.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any


class _Absent:
    """The value of a field whose key a JSON object does not carry."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"   # pickles as the module-level singleton (results travel over MPI)


ABSENT: Any = _Absent()


def absent() -> Any:
    """A field default: the key is left out of the JSON object unless the field is given."""
    return dataclasses.field(default=ABSENT)


@dataclass(frozen=True)
class Reason:
    """What an analysis says, as a code and the figures it rests on; never written as such:
    ``reports/`` words it (reports.words.worded) before a report or summary.json shows it. Why:
    an analysis returns numbers and codes, and the wording of each kind of text lives in one place."""

    code: str
    figures: dict = dataclasses.field(default_factory=dict)


class JsonError(ValueError):
    """summary.json content that does not fit its type: says where (the key path) and what."""


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, str, Any, Any], ...]:
    """Per field of ``cls``: (attribute, JSON key, type hint, default or MISSING)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        else:
            default = dataclasses.MISSING
        plan.append((f.name, f.metadata.get("key", f.name), hints[f.name], default))
    return tuple(plan)


def encode(value: Any) -> Any:
    """``value`` as JSON-ready Python: records as objects, tuples as lists, int keys as strings."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, Reason):
        raise TypeError(f"reason {value.code!r} was never worded (reports.words.worded): no JSON for it")
    if isinstance(value, dict):
        return {(str(key) if type(key) is int else key): encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    return value


def _encode_record(record: Record) -> dict:
    out = {}
    for name, key, _, _ in _plan(type(record)):
        value = getattr(record, name)
        if value is not ABSENT:
            out[key] = encode(value)
    return out


def _decode_record(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise JsonError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    plan = _plan(cls)
    known = {key for _, key, _, _ in plan}
    unknown = [key for key in data if key not in known]
    if unknown:
        raise JsonError(f"{where}: unknown key {unknown[0]!r} for {cls.__name__}")
    kwargs = {}
    for name, key, hint, default in plan:
        if key in data:
            kwargs[name] = decode(hint, data[key], f"{where}.{key}")
        elif default is dataclasses.MISSING:
            raise JsonError(f"{where}: missing key {key!r} for {cls.__name__}")
    return cls(**kwargs)


_SCALARS = (int, float, str, bool, type(None), Any, object, dict, list)


def decode(hint: Any, data: Any, where: str = "$") -> Any:
    """``data`` (parsed JSON, or the in-memory dicts an analysis returned) as the type ``hint``."""
    if hint in _SCALARS:
        return data
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if data is None or isinstance(data, Reason) or (isinstance(data, str) and str in options):
            return data
        record = [arg for arg in options if isinstance(arg, type) and issubclass(arg, Record)]
        return decode((record or options)[0], data, where) if len(options) == 1 or record else data
    if isinstance(hint, type) and issubclass(hint, Record):
        return data if isinstance(data, hint) else hint.from_json(data, where)
    args = typing.get_args(hint)
    if origin is list or origin is tuple:
        if not isinstance(data, (list, tuple)):
            raise JsonError(f"{where}: expected a list, got {type(data).__name__}")
        item = args[0] if args else Any
        items = list(data) if item in _SCALARS else [decode(item, x, f"{where}[{i}]") for i, x in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(data, dict):
            raise JsonError(f"{where}: expected an object, got {type(data).__name__}")
        key_type, value_type = args
        return {(int(key) if key_type is int else key): decode(value_type, value, f"{where}.{key}")
                for key, value in data.items()}
    return data


class Record:
    """Base of the frozen result types that summary.json is made of (see the module docstring)."""

    @classmethod
    def build(cls, **values: Any) -> Any:
        """An instance from the values an analysis returned (dicts with int keys, tuples, rows),
        each read into its field's type."""
        hints = {name: hint for name, _, hint, _ in _plan(cls)}
        return cls(**{name: decode(hints[name], value, f"$.{name}") for name, value in values.items()})

    def to_json(self) -> dict:
        return _encode_record(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "$") -> Any:
        return _decode_record(cls, data, where)
