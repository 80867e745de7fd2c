import numpy as np

from distprof.analyses import intervals as iv


def covered(interval_set, lo=0, hi=200):
    """Reference: a boolean bitmap of covered integer ns (slow, obviously right)."""
    mask = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(*interval_set):
        mask[s - lo:e - lo] = True
    return mask


def bitmap(starts, ends, hi=200):
    mask = np.zeros(hi, dtype=bool)
    for s, e in zip(starts, ends):
        mask[s:e] = True
    return mask


def test_union_disjoint_nested_touching():
    s, e = iv.union([50, 0, 10, 12, 20, 30], [60, 5, 20, 15, 25, 30])
    # [0,5) alone; [10,20) holds nested [12,15) and touches [20,25); [30,30) is empty; [50,60)
    assert s.tolist() == [0, 10, 30, 50]
    assert e.tolist() == [5, 25, 30, 60]
    assert iv.total((s, e)) == 5 + 15 + 0 + 10


def test_empty_inputs():
    assert iv.total(iv.union([], [])) == 0
    a = iv.union([0], [10])
    assert iv.total(iv.intersect(a, iv.empty())) == 0
    assert iv.total(iv.difference(a, iv.empty())) == 10
    assert iv.total(iv.difference(iv.empty(), a)) == 0


def test_multi_lane_overlap_counts_once():
    # communication on two streams overlapping each other, compute on a third
    comm = iv.union([0, 5], [10, 15])          # -> [0, 15)
    compute = iv.union([8, 12], [13, 30])      # -> [8, 30)
    assert iv.total(comm) == 15
    assert iv.total(iv.intersect(comm, compute)) == 7   # [8, 15)
    assert iv.total(iv.difference(comm, compute)) == 8  # exposed: [0, 8)
    assert iv.total(iv.union_sets(comm, compute)) == 30


def test_touching_sets_intersect_to_nothing():
    a = iv.union([0], [10])
    b = iv.union([10], [20])
    assert iv.total(iv.intersect(a, b)) == 0
    assert iv.union_sets(a, b)[0].tolist() == [0]


def test_random_against_bitmap():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, m = rng.integers(0, 12, size=2)
        sa = rng.integers(0, 180, n)
        sb = rng.integers(0, 180, m)
        a = iv.union(sa, sa + rng.integers(0, 20, n))
        b = iv.union(sb, sb + rng.integers(0, 20, m))
        ma, mb = covered(a), covered(b)
        assert iv.total(a) == ma.sum()
        assert (covered(iv.intersect(a, b)) == (ma & mb)).all()
        assert (covered(iv.difference(a, b)) == (ma & ~mb)).all()
        assert (covered(iv.union_sets(a, b)) == (ma | mb)).all()
        # canonical form: sorted, disjoint, not touching
        for result in (iv.intersect(a, b), iv.difference(a, b), a):
            s, e = result
            assert (s[1:] > e[:-1]).all() and (e >= s).all()


def test_exact_on_large_ns_values():
    base = 1_726_722_437_796_624_059  # an absolute UTC ns timestamp from a real export
    a = iv.union([base, base + 7], [base + 10, base + 20])
    b = iv.union([base + 5], [base + 8])
    assert iv.total(a) == 20
    assert iv.total(iv.intersect(a, b)) == 3
