"""Rank 0's numpy merge of compact per-rank rows (analyses.stacked) and the combine-side sweeps
that replaced pandas group-bys: each checked against the pandas expression it replaced, on random
data, to the last bit."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from distprof import columns
from distprof import events as ev
from distprof.analyses import collectives, stacked
from distprof.analyses import intervals as iv
from distprof.matching import Matching
from distprof.results import StepBounds


def test_factorize_codes_in_order_of_appearance():
    codes, distinct = ev.factorize(["b", "a", "b", ("k", "x"), "a"])
    assert distinct == ["b", "a", ("k", "x")] and codes.tolist() == [0, 1, 0, 2, 1]


def test_factorize_one_value_as_the_dict_would():
    """A column with one value (an arg no row has: None, b"") skips the dict; same codes and value."""
    for column in ([None] * 5, [b""] * 3, [(0, 0)] * 4, [1, 1.0, True], ["x"]):
        codes, distinct = ev.factorize(column)
        assert codes.tolist() == [0] * len(column) and distinct == column[:1]
    codes, distinct = ev.factorize([None, 1, None, None, None])  # first, middle and last alike: not enough
    assert codes.tolist() == [0, 1, 0, 0, 0] and distinct == [None, 1]
    codes, distinct = ev.factorize([["x"], ["x"]])  # unhashable: compared as text, as before
    assert codes.tolist() == [0, 0] and distinct == ["['x']"]


def test_groups_reduce_like_a_pandas_groupby_without_sorting():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 7, 500)
    codes[:7] = np.arange(7)  # every group present
    values = rng.integers(0, 5, 500)  # many ties
    ranks = rng.integers(0, 4, 500)
    groups = columns.Groups.of(codes, 7)
    frame = pd.DataFrame({"g": codes, "v": values, "r": ranks})
    by = frame.groupby("g", sort=True)
    assert groups.sum(values).tolist() == by["v"].sum().tolist()
    assert groups.max(values).tolist() == by["v"].max().tolist()
    assert groups.min(values).tolist() == by["v"].min().tolist()
    assert groups.first_max(values).tolist() == by["v"].idxmax().tolist()  # first row on a tie
    assert groups.distinct(ranks).tolist() == by["r"].nunique().tolist()
    known = rng.random(500) < 0.3
    texts = [f"t{i}" for i in range(500)]
    expected = pd.Series(np.where(known, texts, None), dtype=object).groupby(codes).first()
    assert groups.first_known(texts, known) == [None if v is None else v for v in expected.tolist()]


def test_group_mean_is_the_mean_of_each_group():
    rng = np.random.default_rng(11)
    for _ in range(200):
        present, codes = np.unique(rng.integers(0, 5, int(rng.integers(1, 40))), return_inverse=True)
        values = rng.random(codes.size) * 10.0 ** float(rng.integers(-3, 3))
        expected = [math.fsum(values[codes == g]) / (codes == g).sum() for g in range(present.size)]
        assert np.allclose(columns.group_mean(values, codes, present.size), expected, rtol=1e-12, atol=0)


def test_optional_columns_keep_ints_exact_and_mark_none_and_nan():
    rows = [SimpleNamespace(x=2**62 + 1), SimpleNamespace(x=None), SimpleNamespace(),
            SimpleNamespace(x=float("nan")), SimpleNamespace(x=3)]  # rows by field, one without it
    values, known = stacked.optional(rows, "x")
    assert known.tolist() == [True, False, False, False, True] and values.tolist() == [2**62 + 1, 0, 0, 0, 3]


def test_cummax_per_key_is_a_grouped_cummax():
    rng = np.random.default_rng(5)
    key = np.sort(rng.integers(0, 20, 3000))
    values = rng.integers(1_700_000_000_000_000_000, 1_700_000_000_000_100_000, 3000)  # epoch ns: exact
    expected = pd.Series(values).groupby(key, sort=False).cummax().to_numpy(np.int64)
    assert np.array_equal(columns.cummax_per_key(key, values), expected)


def test_rank_waits_equal_interval_algebra_per_rank():
    """One sweep keyed by rank equals |∪ waits ∩ ∪ steps| computed rank by rank."""
    rng = np.random.default_rng(8)
    n_ranks, n = 5, 60
    present = rng.random((n_ranks, n)) < 0.7
    present[4] = False  # a rank with no matched collective: None
    start = rng.integers(0, 10_000, (n_ranks, n))
    wait = np.where(present, rng.integers(0, 300, (n_ranks, n)), 0)
    matching = Matching(ranks=np.arange(n_ranks), name=np.full(n, "allreduce", object),
                     step=np.zeros(n, np.int64), ordinal=np.arange(n), start_ns=start,
                     end_ns=start + 500, present=present)
    bounds = [StepBounds(step=[0, 1], start_ns=[0, 5_000], end_ns=[3_000, 9_000]), StepBounds(),
              StepBounds(step=[0], start_ns=[2_000], end_ns=[2_000]),
              StepBounds(step=[0], start_ns=[100], end_ns=[20_000])]
    got = collectives.rank_waits(matching, wait, bounds, use_steps=True)
    both = collectives.shared(matching)
    for row in range(n_ranks):
        mine = present[row] & both
        if not mine.any():
            assert got[row] is None
            continue
        waited = iv.union(start[row, mine], start[row, mine] + wait[row, mine])
        if row < len(bounds) and bounds[row].start_ns:
            waited = iv.intersect(waited, iv.union(bounds[row].start_ns, bounds[row].end_ns))
        assert got[row] == iv.total(waited)


def test_distinct_texts_are_the_sorted_texts_of_the_values():
    from distprof import events as ev
    values = np.array(["b", "a", None, "b", 1, "1", "ä", ""], dtype=object)
    texts, codes = ev.distinct_texts(values)
    assert texts.tolist() == sorted(set(map(str, values)))
    assert [texts[c] for c in codes.tolist()] == list(map(str, values))
    assert ev.distinct_texts(np.empty(0, object))[1].size == 0
