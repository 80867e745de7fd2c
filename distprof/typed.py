"""One JSON codec for the frozen result types, built from their type hints.

A :class:`Record` is a frozen ``msgspec.Struct`` whose fields, in their declared order, are the keys of
its JSON object: ``to_json`` writes them and ``from_json`` reads them back, so
``T.from_json(j).to_json() == j`` for every ``j`` that ``T`` wrote. Why one codec: summary.json
had grown to hundreds of key paths written by hand in a dozen places and read back as string-keyed
dicts; with the types the file is documented, checked on reading (an unknown key is an error, not a
silent None) and read by attribute.

Rules, all from the annotations:

* a field whose value is :data:`ABSENT` is not written (a key that a row carries only sometimes);
  a key missing on reading takes the field's default, and is an error when there is none;
* ``dict[int, V]`` is written with string keys (JSON's) and read back with int keys;
* ``X | None``, ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]`` and nested records are decoded
  element by element; every leaf is checked against its hint (``int`` is not a bool, a ``float`` may be
  an int) and taken as it is; bare ``dict``/``list`` are checked to be one and taken as they are. Why
  every leaf: a report trusts the types, and a text where a number belongs was a traceback in a renderer;
* ``msgspec.field(name="lane")`` names a field's JSON key when it is not the field's name;
* a text an analysis leaves to the reports is a :class:`Reason` (``str | Reason`` fields) until
  ``reports.findings.worded`` words it; encoding one unworded is an error.
"""

from __future__ import annotations

import functools
import numbers
import sys
import types
import typing
from typing import Any

import msgspec


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
    return msgspec.field(default=ABSENT)


class Reason(msgspec.Struct, frozen=True):
    """What an analysis says, as a code and the figures it rests on; never written as such:
    ``reports/`` words it (reports.findings.worded) before a report or summary.json shows it. Why:
    an analysis returns numbers and codes, and the wording of each kind of text lives in one place."""

    code: str
    figures: dict = msgspec.field(default_factory=dict)


class JsonError(ValueError):
    """summary.json content that does not fit its type: says where (the key path) and what."""

    def at(self, where: str, deeper: str) -> JsonError:
        """The same error, its path ``where`` made the deeper ``deeper`` (a key or an index below)."""
        said = str(self)
        return JsonError(deeper + said[len(where):] if said.startswith(where) else said)


@functools.cache
def fields_of(cls: type) -> tuple[msgspec.structs.FieldInfo, ...]:
    """``msgspec.structs.fields`` once per record type: msgspec resolves the type's (string) annotations
    again on every call (~0.1 ms a record). Reading summary.json asks (it needs the defaults)."""
    return msgspec.structs.fields(cls)


@functools.cache
def hints_of(cls: type) -> dict[str, Any]:
    """The type of each field of a record type, as ``msgspec.structs.fields`` resolves it, for the writers
    and ``build``: each class's (string) annotations evaluated in one ``eval`` instead of one compile per
    field (a merge's 62 records: 7 -> 3.4 ms). Reading summary.json needs the defaults too (``fields_of``)."""
    hints: dict[str, Any] = {}
    try:
        for base in reversed(cls.__mro__):
            evaluated = _annotations_at_once(base)
            if evaluated is None:
                break
            hints.update(evaluated)
        else:
            return {name: hints[name] for name in cls.__struct_fields__}
    except (NameError, AttributeError, SyntaxError, TypeError, KeyError):
        pass  # what this shortcut cannot resolve: msgspec's own resolution says it
    return {f.name: f.type for f in fields_of(cls)}


def _annotations_at_once(base: type) -> dict[str, Any] | None:
    """One class's own annotations, its string ones evaluated in one ``eval`` (in its module, with the class's
    namespace as msgspec does); None where a string holds a quoted name, which msgspec resolves recursively."""
    annotations = base.__dict__.get("__annotations__") or {}
    texts = [text for text in annotations.values() if isinstance(text, str)]
    if not texts:
        return dict(annotations)
    if any("'" in text or '"' in text for text in texts):
        return None
    values = iter(eval(f"({'), ('.join(texts)}),", sys.modules[base.__module__].__dict__,  # noqa: S307
                       dict(vars(base))))
    return {name: next(values) if isinstance(hint, str) else hint for name, hint in annotations.items()}


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, str, Any, Any], ...]:
    """Per field of ``cls``: (attribute, JSON key, type hint, default or default factory; NODEFAULT: none)."""
    plan = []
    for f in fields_of(cls):
        default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory
        plan.append((f.name, f.encode_name, f.type, default))
    return tuple(plan)


def encode(value: Any) -> Any:
    """``value`` as JSON-ready Python: records as objects, tuples as lists, int keys as strings."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, Reason):
        raise TypeError(f"reason {value.code!r} was never worded (reports.findings.worded): no JSON for it")
    if isinstance(value, dict):
        return {(str(key) if type(key) is int else key): encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    return value


# Both directions are compiled once per type hint into a converter, None where the value is taken
# as it is (a scalar): a 512-rank summary holds ~350k values, and asking the hint what it is for
# each one cost as much as the merge's own combine. Key paths are built only when a value fails:
# each level on the way up writes its key or index into the error's path (JsonError.at).
_SCALARS = (int, float, str, bool, type(None))
_UNTYPED = (Any, object, dict, list)


def _options(hint: Any) -> list:
    return [arg for arg in typing.get_args(hint) if arg is not type(None)]


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Record)


def _check_worded(value: Any) -> Any:
    if isinstance(value, Reason):
        return encode(value)  # raises: a reason has no JSON
    return value


@functools.cache
def _encoder(hint: Any) -> Any:
    """A function writing a value of ``hint`` as JSON-ready Python; None: the value as it is."""
    if hint in _SCALARS:
        return None
    if hint in _UNTYPED:
        return encode
    if _is_union(hint):
        options = _options(hint)
        if all(option in _SCALARS for option in options):
            return None
        if set(options) <= {str, Reason}:
            return _check_worded
        inner = _encoder(options[0]) if len(options) == 1 else encode
        return None if inner is None else (lambda value: None if value is None else inner(value))
    if _is_record(hint):
        return lambda value: value.to_json()
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, tuple):
        item = _encoder(args[0]) if args else encode
        return list if item is None else (lambda value: [item(x) for x in value])
    if origin is dict:
        item = _encoder(args[1])
        if args[0] is int:
            return lambda value: {str(k): v if item is None else item(v) for k, v in value.items()}
        return None if item is None else (lambda value: {k: item(v) for k, v in value.items()})
    return encode


@functools.cache
def _encoders(cls: type) -> tuple[tuple[str, str, Any], ...]:
    hints = hints_of(cls)
    return tuple((name, key, _encoder(hints[name]))
                 for name, key in zip(cls.__struct_fields__, cls.__struct_encode_fields__))


def _encode_record(record: Record) -> dict:
    out = {}
    for name, key, write in _encoders(type(record)):
        value = getattr(record, name)
        if value is not ABSENT:
            out[key] = value if write is None else write(value)
    return out


@functools.cache
def _fields(cls: type) -> tuple[tuple, frozenset]:
    """Per field (attribute, JSON key, converter or None, required), and the known keys."""
    fields = tuple((name, key, _decoder(hint), default is msgspec.NODEFAULT)
                   for name, key, hint, default in _plan(cls))
    return fields, frozenset(key for _, key, _, _ in fields)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# per scalar hint: the types taken at once, the full test (subclasses: numpy's float64 is a float), its JSON name
_LEAVES: dict[Any, tuple[tuple[type, ...], Any, str]] = {
    int: ((int,), _is_int, "int"),
    float: ((float, int), _is_float, "float"),
    str: ((str,), lambda value: isinstance(value, str), "str"),
    bool: ((bool,), lambda value: isinstance(value, bool), "bool"),
    type(None): ((type(None),), lambda value: value is None, "null"),
    Reason: ((Reason,), lambda value: isinstance(value, Reason), "a reason"),
}


def got(value: Any) -> str:
    """What a JSON value is, in an error: null, str, int, float, bool, dict, list."""
    return "null" if value is None else type(value).__name__


def _leaf_decoder(options: tuple) -> Any:
    """A check that a value is one of the scalar hints ``options`` (taken as it is), else a JsonError."""
    fast = frozenset(kind for option in options for kind in _LEAVES[option][0])
    tests = tuple(_LEAVES[option][1] for option in options)
    expected = " or ".join(_LEAVES[option][2] for option in options)

    def read(data: Any, where: str) -> Any:
        if type(data) in fast or any(test(data) for test in tests):
            return data
        raise JsonError(f"{where}: expected {expected}, got {got(data)}")
    return read


def _decode_record(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise JsonError(f"{where}: expected an object for {cls.__name__}, got {got(data)}")
    fields, known = _fields(cls)
    if not known.issuperset(data):
        raise JsonError(f"{where}: unknown key {next(k for k in data if k not in known)!r} for {cls.__name__}")
    kwargs = {}
    for name, key, read, required in fields:
        if key in data:
            value = data[key]
            if read is not None:
                try:
                    value = read(value, where)
                except JsonError as error:
                    raise error.at(where, f"{where}.{key}") from None
            kwargs[name] = value
        elif required:
            raise JsonError(f"{where}: missing key {key!r} for {cls.__name__}")
    return cls(**kwargs)


def _union_decoder(hint: Any) -> Any:
    """``X | None`` (X a record, a container or a scalar) or a union of scalars (``str | Reason | None``)."""
    options = typing.get_args(hint)
    if all(option in _LEAVES for option in options):
        return _leaf_decoder(options)
    inner = _options(hint)
    if len(inner) != 1 or type(None) not in options:
        raise TypeError(f"no JSON decoder for {hint}: a union is of scalars, or one type and None")
    read_inner = _decoder(inner[0])

    def read(data: Any, where: str) -> Any:
        return data if data is None or read_inner is None else read_inner(data, where)
    return read


def _list_decoder(origin: Any, args: tuple) -> Any:
    item = _decoder(args[0]) if args else None
    make = tuple if origin is tuple else list

    def read(data: Any, where: str) -> Any:
        if not isinstance(data, (list, tuple)):
            raise JsonError(f"{where}: expected a list, got {got(data)}")
        if item is None:
            return make(data)
        out: list = []
        try:
            for x in data:
                out.append(item(x, where))
        except JsonError as error:
            raise error.at(where, f"{where}[{len(out)}]") from None
        return make(out)
    return read


def _dict_decoder(args: tuple) -> Any:
    int_keys, value_of = args[0] is int, _decoder(args[1])

    def read(data: Any, where: str) -> Any:
        if not isinstance(data, dict):
            raise JsonError(f"{where}: expected an object, got {got(data)}")
        if value_of is None:
            return {_int_key(key, where): value for key, value in data.items()} if int_keys else dict(data)
        out: dict = {}
        try:
            for key, value in data.items():
                out[_int_key(key, where) if int_keys else key] = value_of(value, where)
        except JsonError as error:
            raise error.at(where, f"{where}.{key}") from None
        return out
    return read


def _int_key(key: Any, where: str) -> int:
    """A rank-keyed map's key as its int (JSON writes it as text)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.lstrip("-").isdigit() and key.isascii():
        return int(key)
    raise JsonError(f"{where}: expected an int key, got {key!r}")


@functools.cache
def _decoder(hint: Any) -> Any:
    """A function reading a value of ``hint`` (data, where) -> value; None: the value as it is."""
    if hint in _LEAVES:
        return _leaf_decoder((hint,))
    if hint in (dict, list):
        return _container_check(hint)
    if hint in _UNTYPED:
        return None
    if _is_union(hint):
        return _union_decoder(hint)
    if _is_record(hint):
        return lambda data, where: data if isinstance(data, hint) else hint.from_json(data, where)
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return _list_decoder(origin, typing.get_args(hint))
    if origin is dict:
        return _dict_decoder(typing.get_args(hint))
    return None


def _container_check(kind: type) -> Any:
    def read(data: Any, where: str) -> Any:
        if isinstance(data, kind):
            return data
        raise JsonError(f"{where}: expected {'an object' if kind is dict else 'a list'}, got {got(data)}")
    return read


def read_struct(cls: type, data: Any, where: str = "$") -> Any:
    """``data`` (a JSON object) as the struct ``cls`` (a Record, or a plain msgspec.Struct such as RankFigures),
    every key known and every value of its field's type."""
    return _decode_record(cls, data, where)


def decode(hint: Any, data: Any, where: str = "$") -> Any:
    """``data`` (parsed JSON, or the in-memory dicts an analysis returned) as the type ``hint``."""
    read = _decoder(hint)
    return data if read is None else read(data, where)


class Record(msgspec.Struct, frozen=True):
    """Base of the frozen result types that summary.json is made of (see the module docstring)."""

    @classmethod
    def build(cls, **values: Any) -> Any:
        """An instance from the values an analysis returned (dicts with int keys, tuples, rows),
        each read into its field's type."""
        hints = hints_of(cls)
        return cls(**{name: decode(hints[name], value, f"$.{name}") for name, value in values.items()})

    def to_json(self) -> dict:
        return _encode_record(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "$") -> Any:
        return _decode_record(cls, data, where)
