"""The column tools that stand in for numpy's own calls where those are slow (columns.py): each gives
numpy's answer, value for value and type for type."""

import numpy as np
import pytest

from distprof.columns import distinct, used_codes


@pytest.mark.parametrize("high", [3, 1000, 10**15])
def test_distinct_is_numpys_unique(high):
    rng = np.random.default_rng(high)
    for size in (0, 1, 2, 17, 5000):
        values = rng.integers(-high, high, size)
        got, want = distinct(values), np.unique(values)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_used_codes_is_numpys_unique_with_the_inverse():
    rng = np.random.default_rng(7)
    for size, texts in ((0, 4), (1, 1), (50, 3), (5000, 900)):
        codes = rng.integers(0, texts, size).astype(np.int32)
        used, inverse = used_codes(codes, texts)
        want_used, want_inverse = np.unique(codes, return_inverse=True)
        assert np.array_equal(used, want_used) and np.array_equal(inverse, want_inverse.reshape(-1))


def test_texts_mapped_asks_only_for_the_texts_its_rows_hold():
    """Texts.mapped runs the function once per distinct text of the rows, not of the column they were taken
    from (skew's collective kinds ran a regex on every name of the rank for a few collectives)."""
    from distprof.events import Texts
    column = Texts.of(np.array(["nccl:all_reduce", "aten::mm", "gloo:broadcast", "aten::add", "aten::mm"], object))
    asked = []

    def kind(text):
        asked.append(text)
        return text.split(":")[0]
    rows = column.take(np.array([2, 0, 2]))
    assert rows.mapped(kind).tolist() == ["gloo", "nccl", "gloo"]
    assert sorted(asked) == ["gloo:broadcast", "nccl:all_reduce"]
    assert column.mapped(len, np.int64).tolist() == [15, 8, 14, 9, 8]
    assert column.take(np.zeros(5, bool)).mapped(len, np.int64).dtype == np.int64  # no rows: an empty column
