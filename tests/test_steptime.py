"""The one step-time definition (analyses/steptime.py): median rank per step, median over steps,
against a plain-Python median of the same rows."""

import random
import statistics

import numpy as np

from distprof.analyses import steptime


def test_per_step_is_the_median_rank_of_each_step():
    rng = random.Random(5)
    rows = [(step, rng.randrange(1, 10**9)) for step in range(40) for _ in range(rng.randrange(1, 9))]
    rng.shuffle(rows)  # any row order: (rank, step) rows arrive rank by rank
    steps, per_step = steptime.per_step(np.array([s for s, _ in rows]), np.array([d for _, d in rows]))
    by_step: dict[int, list[int]] = {}
    for step, duration in rows:
        by_step.setdefault(step, []).append(duration)
    assert steps.tolist() == sorted(by_step)
    assert per_step.tolist() == [statistics.median(by_step[s]) for s in sorted(by_step)]
    assert steptime.run_step_time(per_step) == statistics.median(statistics.median(v) for v in by_step.values())


def test_one_odd_rank_does_not_move_the_step_time():
    """999 ranks at 100 ms and one at 900 ms: the step is 100 ms (the slowest rank would say 900)."""
    steps = np.repeat(np.arange(3), 1000)
    durations = np.full(3000, 100_000_000)
    durations[::1000] = 900_000_000
    _, per_step = steptime.per_step(steps, durations)
    assert per_step.tolist() == [1e8, 1e8, 1e8] and steptime.run_step_time(per_step) == 1e8


def test_even_ranks_take_the_middle_two_and_no_steps_is_none():
    _, per_step = steptime.per_step(np.array([7, 7, 7, 7]), np.array([4, 1, 3, 10]))
    assert per_step.tolist() == [3.5]
    steps, per_step = steptime.per_step(np.array([], np.int64), np.array([], np.int64))
    assert steps.size == per_step.size == 0 and steptime.run_step_time(per_step) is None
