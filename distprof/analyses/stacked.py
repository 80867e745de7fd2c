"""Rank tables stacked across ranks, in numpy: what rank 0's combine does with the compact rows
every rank sends (sums, max of maxes, min of mins, the rank with the largest figure).

Rank 0 holds only these rows (at most a few hundred per table and rank), so one Python pass over
them to take their columns out is cheap; everything after that is one stable sort per table and
``reduceat``. Group keys keep the order in which they are first seen (a rank's rows, then the
next rank's), and ties go to the first row seen, so a merge lists and names the same rows
whatever library computed it. No pandas: a ``distprof merge`` must not pay its import.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np
from msgspec.structs import replace

Table = TypeVar("Table")


def stack(tables_by_rank: list, ranks: list[int], key: str) -> tuple[list, np.ndarray]:
    """Every rank's rows of table ``key`` (sections.tables.SentTables: a list of rows or a by-name table)
    one after the other, and the rank of each row."""
    parts = [getattr(t, key) for t in tables_by_rank]
    parts = [part if isinstance(part, list) else part.rows for part in parts]
    rows = [row for part in parts for row in part]
    return rows, np.repeat(np.asarray(ranks, np.int64), [len(part) for part in parts])


def ints(rows: list, *keys: str) -> np.ndarray:
    """Columns of int fields every row has a value of, as an int64 (len(keys), rows) matrix."""
    return np.array([np.fromiter(map(attrgetter(key), rows), np.int64, len(rows)) for key in keys]).reshape(
        len(keys), len(rows))


def optional(rows: list, key: str, dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """(values, 0 where missing; whether each row has one): a field whose rows may hold None
    (or NaN, or lack the field), the values kept exact in ``dtype``."""
    column = np.empty(len(rows), object)
    column[:] = list(map(getattr, rows, repeat(key), repeat(None)))
    known = column != None  # noqa: E711 - elementwise
    known[known] = ~np.isnan(column[known].astype(np.float64))
    values = np.zeros(len(rows), dtype)
    values[known] = column[known].astype(dtype)
    return values, known


def cut(table: Table, rows: int, total: str = "total_ns") -> Table:
    """A rank's by-name table (rows, denominator_ns, dropped) cut to its first ``rows`` rows for
    summary.json's ``by_rank``, the rest added to its ``dropped`` (``total``: the rows' field that
    dropped.total_ns sums)."""
    rest, dropped = table.rows[rows:], table.dropped
    return replace(table, rows=table.rows[:rows], dropped=replace(
        dropped, rows=dropped.rows + len(rest), calls=dropped.calls + sum(r.calls for r in rest),
        total_ns=dropped.total_ns + sum(map(attrgetter(total), rest))))


def key_order(totals: np.ndarray, keys: list) -> np.ndarray:
    """Groups by total down, then by key up (keys: distinct texts or tuples of texts)."""
    by_key = sorted(range(len(keys)), key=keys.__getitem__)
    key_rank = np.empty(len(keys), np.int64)
    key_rank[by_key] = np.arange(len(keys))
    return np.lexsort((key_rank, -totals))


def by_rank(codes: np.ndarray, size: int, rank_of: np.ndarray, values: np.ndarray,
            ranks: list[int]) -> list[list[int | None]]:
    """Per group, the sum of its ``values`` on each of ``ranks`` (None where that rank has no row)."""
    column = {rank: k for k, rank in enumerate(ranks)}
    at = np.fromiter(map(column.get, rank_of.tolist(), repeat(-1)), np.int64, rank_of.size)
    inside = at >= 0
    sums = np.zeros((size, len(ranks)), np.int64)
    seen = np.zeros((size, len(ranks)), bool)
    np.add.at(sums, (codes[inside], at[inside]), values[inside])
    seen[codes[inside], at[inside]] = True
    return [[v if s else None for v, s in zip(row, has)] for row, has in zip(sums.tolist(), seen.tolist())]
