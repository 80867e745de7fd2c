"""Column tools: group-bys, joins and searches on numpy columns, the few things pandas was used for,
without it (importing pandas costs a merge process 0.4 s). Nothing here knows what the columns mean.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
import numpy as np

Record = TypeVar("Record")


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of integers, the sorted distinct values, by a sort: numpy 2's default hashes them,
    5x slower where most are distinct (a thread's range boundaries: 11 ms against 2 ms on 48k)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def used_codes(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True)`` for codes in [0, size): the codes used, ascending, and each
    row's index among them, from a mask and its running count (no sort)."""
    used = np.zeros(size, bool)
    used[codes] = True
    return np.flatnonzero(used), (np.cumsum(used) - 1)[codes]


# unique_rows counts keys in an array (no sort) when the packed keys span at most this many values a row, plus
COUNTED_SPAN_PER_ROW, COUNTED_SPAN_MIN = 4, 1 << 16


def unique_rows(keys: np.ndarray):
    """``np.unique(keys, axis=0, return_inverse=True, return_counts=True)`` for int64 rows, fast:
    the columns are packed into one int64 when their ranges allow (a plain integer sort instead
    of a lexicographic one on row views, ~10x faster), else the general path."""
    if keys.shape[0] == 0:
        return keys, np.zeros(0, np.int64), np.zeros(0, np.int64)
    low = keys.min(axis=0)
    spans = keys.max(axis=0) - low + 1
    if float(np.prod(spans.astype(np.float64))) >= 2.0 ** 62:
        unique, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        return unique, inverse.reshape(-1), counts
    packed = np.zeros(keys.shape[0], np.int64)
    for column in range(keys.shape[1]):  # one iteration per key column
        packed = packed * spans[column] + (keys[:, column] - low[column])
    if float(np.prod(spans.astype(np.float64))) <= COUNTED_SPAN_PER_ROW * keys.shape[0] + COUNTED_SPAN_MIN:
        counts = np.bincount(packed)  # few possible keys (a rank's threads): counted, no sort
        unique_packed = np.flatnonzero(counts)
        inverse, counts = (np.cumsum(counts > 0) - 1)[packed], counts[unique_packed]
    else:
        unique_packed, inverse, counts = np.unique(packed, return_inverse=True, return_counts=True)
    unique = np.empty((unique_packed.size, keys.shape[1]), np.int64)
    rest = unique_packed
    for column in reversed(range(keys.shape[1])):
        rest, unique[:, column] = np.divmod(rest, spans[column])
        unique[:, column] += low[column]
    return unique, inverse.reshape(-1), counts


class Groups(msgspec.Struct, frozen=True):
    """Rows grouped by code (0..size-1, every group non-empty): one stable sort, then reductions
    per group that keep row order inside a group."""

    order: np.ndarray    # rows by group, in row order inside a group
    starts: np.ndarray   # where each group begins in ``order``
    codes: np.ndarray    # each row's group
    size: int

    @classmethod
    def of(cls, codes: np.ndarray, size: int) -> Groups:
        order = np.argsort(codes, kind="stable")
        return cls(order, np.searchsorted(codes[order], np.arange(size)), codes, size)

    def counts(self) -> np.ndarray:
        return np.diff(np.append(self.starts, self.order.size))

    def members(self) -> list[np.ndarray]:
        """The rows of each group (in row order): one split instead of a mask over all rows per group."""
        return np.split(self.order, self.starts[1:])

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[self.order], self.starts) if self.size else values[:0]

    def max(self, values: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(values[self.order], self.starts) if self.size else values[:0]

    def min(self, values: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(values[self.order], self.starts) if self.size else values[:0]

    def first_max(self, values: np.ndarray) -> np.ndarray:
        """The row of each group's largest value (the first such row on a tie)."""
        ordered_codes = self.codes[self.order]
        hits = np.flatnonzero(values[self.order] == self.max(values)[ordered_codes])
        return self.order[hits[_run_starts(ordered_codes[hits])]]

    def distinct(self, values: np.ndarray) -> np.ndarray:
        """How many distinct ``values`` (int64, such as ranks) each group holds."""
        low, span = (int(values.min()), int(values.max()) - int(values.min()) + 1) if values.size else (0, 1)
        if span * max(self.size, 1) < 2 ** 62:
            pairs = np.sort(self.codes * span + (values - low))
            return np.bincount(pairs[_run_starts(pairs)] // span, minlength=self.size)
        order = np.lexsort((values, self.codes))
        keys = np.stack([self.codes[order], values[order]])
        firsts = np.r_[True, (keys[:, 1:] != keys[:, :-1]).any(axis=0)] if order.size else np.zeros(0, bool)
        return np.bincount(self.codes[order][firsts], minlength=self.size)

    def first_known(self, values: list, known: np.ndarray) -> list:
        """Each group's first value among the rows where ``known`` (None where it has none)."""
        rows = self.order[known[self.order]]  # by group, row order inside a group
        out = [None] * self.size
        for row in rows[_run_starts(self.codes[rows])].tolist():  # one per group
            out[self.codes[row]] = values[row]
        return out


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins in a sorted array."""
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]]) if sorted_values.size else \
        np.zeros(0, np.int64)


def group_mean(values: np.ndarray, codes: np.ndarray, size: int) -> np.ndarray:
    """Mean of float ``values`` per group code 0..size-1 (summed in row order)."""
    return np.bincount(codes, weights=values, minlength=size) / np.bincount(codes, minlength=size)


def runs(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of equal-length key columns: a dense code (equal rows, equal codes; codes follow
    the rows' lexicographic order) and how many earlier rows have the same keys. One lexsort."""
    n = keys[0].size
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for key in keys:  # one per key column (a few)
        ordered = key[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    heads = np.flatnonzero(new)
    code, count = np.empty(n, np.int64), np.empty(n, np.int64)
    code[order] = np.cumsum(new) - 1
    count[order] = np.arange(n) - np.repeat(heads, np.diff(np.r_[heads, n]))
    return code, count


def search(key_group: np.ndarray, key_value: np.ndarray, group: np.ndarray, value: np.ndarray,
            side: str = "left") -> np.ndarray:
    """``np.searchsorted`` over (group, value) pairs: keys sorted by group then value; per query,
    where it would go among them. One lexsort of keys and queries together, no loop per group."""
    is_key = np.r_[np.ones(key_group.size, np.int8), np.zeros(group.size, np.int8)]
    order = np.lexsort((is_key if side == "left" else 1 - is_key, np.r_[key_value, value], np.r_[key_group, group]))
    before = np.cumsum(is_key[order]) - is_key[order]
    queries = order >= key_group.size
    out = np.empty(group.size, np.int64)
    out[order[queries] - key_group.size] = before[queries]
    return out


def group_medians(codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes ascending, the median of each code's values): as a groupby median, in float64, the
    mean of the middle two for an even count. One sort."""
    values = np.asarray(values, np.float64)
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    if not codes.size:
        return codes, values
    first = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    count = np.diff(np.r_[first, codes.size])
    return codes[first], (values[first + (count - 1) // 2] + values[first + count // 2]) / 2


def lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """The values of ``keys`` in (sorted keys, values), NaN where a key is not there."""
    known, values = table
    if not known.size:
        return np.full(keys.size, np.nan)
    at = np.minimum(np.searchsorted(known, keys), known.size - 1)
    return np.where(known[at] == keys, values[at], np.nan)


def cummax_per_key(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running max of int64 ``values`` within each run of equal (sorted) ``key``: a segmented
    scan in log2(n) vectorized passes, int64 all along (exact ns; no offsets that could overflow)."""
    reach = np.asarray(values, np.int64).copy()
    shift = 1
    while shift < reach.size:  # ~17 passes for 100k collectives
        same = key[shift:] == key[:-shift]
        reach[shift:] = np.where(same, np.maximum(reach[shift:], reach[:-shift]), reach[shift:])
        shift *= 2
    return reach


def union_per_key(key: np.ndarray, start: np.ndarray, end: np.ndarray, n_keys: int) -> np.ndarray:
    """|∪ [start, end)| per key (0..n_keys-1), vectorized: sort by (key, start), each interval
    adds what reaches past the furthest end before it in its key."""
    out = np.zeros(n_keys, np.int64)
    if not key.size:
        return out
    order = np.lexsort((start, key))
    key, start, end = key[order], np.asarray(start, np.int64)[order], np.asarray(end, np.int64)[order]
    reach = cummax_per_key(key, end)
    same = np.concatenate([[False], key[1:] == key[:-1]])
    before = np.where(same, np.concatenate([[np.iinfo(np.int64).min], reach[:-1]]), np.iinfo(np.int64).min)
    np.add.at(out, key, np.maximum(end - np.maximum(start, before), 0))
    return out


def take(record: Record, index: np.ndarray) -> Record:
    """A copy of ``record`` (a msgspec.Struct of equal-length columns) with rows ``index`` (a mask or
    positions) of every column: the rows of a table kept as a record, nothing mutated."""
    return msgspec.structs.replace(record, **{name: getattr(record, name)[index] for name in record.__struct_fields__})
