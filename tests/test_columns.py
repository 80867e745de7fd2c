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
