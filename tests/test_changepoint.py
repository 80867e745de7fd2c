"""The one change-point rule (analyses/changepoint.py) on per-step series taken from real runs of this
machine (the waits each rank caused, ms a step): what it must find and what it must not."""

import numpy as np

from distprof.analyses import changepoint

LATE_SHARE, LEAD = 0.75, 2.0


def onset(rows: list[list[float]], row: int, threshold: float) -> int | None:
    return changepoint.onset(np.asarray(rows, np.float64), row, threshold, LATE_SHARE, LEAD)


def test_a_late_rank_after_another_ranks_start_up_is_found():
    """The live demo's job (rank 1 sleeping 50 ms from step 8): rank 0 was 80 ms late at its first
    collective (start-up), rank 1 52.5 ms in step 1: the first step is not the job's noise."""
    rank0 = [79.7, 0, 0, 0, 1.2, 24.7, 4.4, 9.8] + [0] * 12
    rank1 = [0, 52.5, 15.6, 25.5, 11.2, 0, 1.6, 0, 60.9, 68.5, 67.6, 70.8, 58.4, 62, 73.3, 82.1, 65.1, 68.1, 62.4,
             63.2]
    assert onset([rank0, rank1], 1, 5.0) == 8


def test_two_late_steps_at_the_end_of_a_clean_run_are_no_onset():
    """Clean 2-rank demos: 41.2 then 18.1 ms after the other rank's 21.2; 21.2 and 21.5 after 17.2."""
    assert onset([[10.4, 4.2, 5.6, 3.2, 3.4, 21.2, 3.3, 9.2, 0, 0], [0, 3.3, 0, 0, 3.5, 0, 0.2, 1.9, 41.2, 18.1]],
                 1, 2.85) is None
    assert onset([[44.6, 1.7, 0.4, 2.5, 0.4, 17.2, 0, 0], [0, 5.9, 3.4, 1.8, 7.6, 0, 21.2, 21.5]], 1, 3.1) is None


def test_a_fault_in_the_last_two_steps_above_the_noise_is_found():
    assert onset([[1, 2, 1, 3, 2, 1, 0, 0], [0, 1, 0, 2, 1, 0, 20, 22]], 1, 3.0) == 6


def test_noise_that_was_already_there_is_no_onset():
    """A healthy DDP pair whose late rank changed once (20.5 ms before, 8.3 ms after); 3.9, 3.9, 12.5 ms."""
    assert onset([[0, 0, 20.5, 0, 20.8, 28.9, 20.6, 8.3], [9.4, 7.5, 0, 15.1, 0, 0, 0, 0]], 0, 3.3) is None
    assert onset([[3.9, 3.9, 12.5], [0, 0, 0]], 0, 2.7) is None
