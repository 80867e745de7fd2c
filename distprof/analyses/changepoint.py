"""The one change-point rule: the step from which one row of a per-step series stays above a threshold
(a rank that turned slow; an expert that turned hot). The straggler (analyses/skew.py, so the live
view's windows too) and the expert load imbalance (analyses/alltoall.py) use it alike."""

from __future__ import annotations

import numpy as np


def onset(per_unit: np.ndarray, row: int, threshold: float, late_share: float, min_lead: float,
          shortest: int = 2) -> int | None:
    """The unit row ``row`` of ``per_unit`` (rows x units, e.g. ranks x steps) turned high at, as one
    change point. Of the splits of its series into a before (one unit at least) and a since
    (``shortest`` at least, reaching the last unit), those where
    - the mean steps up by at least ``threshold`` and every unit since is above every unit before, by
      at least ``threshold`` where the row was already that high before (a step up, not noise that was
      already there: a healthy DDP pair whose late rank changed once, 20.5 ms in a step before and
      8.3 ms in one after, is no onset, nor 3.9, 3.9, 12.5 ms; a rank a little late before and far later
      since, `distprof demo --straggler 1:50@12`, is one);
    - the row is at or above ``threshold`` in ``late_share`` of the units since (a burst that ended is
      no onset);
    - its median since is above what any other row reached in any unit before (the series' noise; the
      first unit, the start-up, left out where two or more follow it), each unit of a tail of two twice
      above it;
    - its sum since is ``min_lead`` x any other row's (not one of several);
    the one whose two means fit the series best (least squares; one outlying unit does not move it).
    Any unit 1..n-``shortest`` can be it. None when no split holds."""
    series, n = per_unit[row].astype(np.float64), per_unit.shape[1]
    shortest = max(int(shortest), 1)
    if n < shortest + 1:
        return None
    split = np.arange(1, n - shortest + 1)  # candidate onsets: units before = split, since = n - split
    sums, squares = np.r_[0.0, np.cumsum(series)], np.r_[0.0, np.cumsum(series * series)]
    high = np.r_[0, np.cumsum(series >= threshold)]
    before_mean, since_mean = sums[split] / split, (sums[n] - sums[split]) / (n - split)
    others = np.delete(per_unit, row, axis=0).astype(np.float64)
    other_since = (others.sum(axis=1, keepdims=True) - np.cumsum(np.c_[np.zeros((others.shape[0], 1)), others],
                                                                 axis=1)[:, split]).max(axis=0) if others.size else 0.0
    # the series' noise before each split: the others' largest unit before it, the first unit left out where
    # two or more follow it (the first step carries the start-up: a rank late 80 ms at its first collective)
    worst = others.max(axis=0) if others.size else np.full(n, -np.inf)
    noise_before = np.where(split >= 3, np.maximum.accumulate(np.r_[-np.inf, worst[1:]])[split - 1],
                            np.maximum.accumulate(worst)[split - 1])
    high_since = (high[n] - high[split]) / (n - split)
    since_min = np.minimum.accumulate(series[::-1])[::-1][split]
    before_max = np.maximum.accumulate(series)[split - 1]
    # above every unit before; by at least the threshold where the row was already high before
    stepped = np.where(high[split] > 0, since_min - before_max >= threshold, since_min > before_max)
    valid = (high_since >= late_share - 1e-9) & (since_mean - before_mean >= threshold) & stepped \
        & (sums[n] - sums[split] >= min_lead * other_since)
    candidates = [k for k in np.flatnonzero(valid).tolist() if _above_noise(series[split[k]:], noise_before[k])]
    if not candidates:  # one iteration per split that holds so far, below: a few
        return None
    sse = (squares[split] - sums[split] ** 2 / split) + \
        (squares[n] - squares[split] - (sums[n] - sums[split]) ** 2 / (n - split))
    return int(split[min(candidates, key=lambda k: sse[k])])


def _above_noise(since: np.ndarray, noise: float) -> bool:
    """The units since a split above the series' noise: their median, or, for a tail of two, each of them
    twice over (two late steps in a row at the end of a clean run: 41 then 18 ms after another rank's
    21 ms; 21.2 and 21.5 after 17.2)."""
    if since.size >= 3:
        return bool(np.median(since) > noise)
    return bool(since.min() > 2 * max(noise, 0.0))
