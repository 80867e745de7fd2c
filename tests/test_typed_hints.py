"""``typed.hints_of`` resolves a record's field types in one ``eval`` per class; it must give exactly what
``msgspec.structs.fields`` gives, for every struct distprof declares, and fall back to msgspec where it cannot."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import msgspec
import pytest

import distprof
from distprof import typed


def _all_structs() -> list[type]:
    for module in pkgutil.walk_packages(distprof.__path__, "distprof."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    return sorted({value for name, module in list(sys.modules.items()) if name.startswith("distprof")
                   for value in vars(module).values()
                   if isinstance(value, type) and issubclass(value, msgspec.Struct) and value is not msgspec.Struct},
                  key=lambda cls: (cls.__module__, cls.__qualname__))


def test_every_struct_resolves_as_msgspec_does() -> None:
    structs = _all_structs()
    assert len(structs) > 150  # the records of summary.json, the wire and the events: all of them
    for cls in structs:
        expected = {f.name: f.type for f in msgspec.structs.fields(cls)}
        got = typed.hints_of(cls)
        assert list(got) == list(expected), cls
        assert got == expected, cls


class _Later(typed.Record, frozen=True):
    value: int = 0


class _Unresolvable(typed.Record, frozen=True):
    shown: _Later | None = None
    local: NotDefinedAnywhere | None = None  # noqa: F821 - neither this shortcut nor msgspec can resolve it


class _Base(typed.Record, frozen=True):
    first: list[_Later]


class _Derived(_Base, frozen=True):
    second: dict[int, float | None] = {}  # noqa: RUF012


class _Quoted(typed.Record, frozen=True):
    nested: "list[_Later] | None" = None  # noqa: UP037 - a string in the annotation's string


def test_inherited_fields_resolve_in_one_eval_per_class() -> None:
    assert typed._annotations_at_once(_Derived) == {"second": dict[int, float | None]}
    assert typed.hints_of(_Derived) == {"first": list[_Later], "second": dict[int, float | None]}


def test_a_quoted_name_is_resolved_by_msgspec() -> None:
    assert typed._annotations_at_once(_Quoted) is None
    assert typed.hints_of(_Quoted) == {"nested": list[_Later] | None}


def test_an_unresolvable_name_is_msgspec_s_error() -> None:
    with pytest.raises(NameError, match="NotDefinedAnywhere"):
        msgspec.structs.fields(_Unresolvable)
    with pytest.raises(NameError, match="NotDefinedAnywhere"):
        typed.hints_of(_Unresolvable)
