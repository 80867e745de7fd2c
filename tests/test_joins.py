"""The shared kernel<->launch join and span helper (joins.py)."""

import numpy as np

from distprof import joins


def test_launch_join_on_pid_and_correlation_prefers_lowest_rank():
    # calls: (pid 1, corr 5) twice (the second preferred by rank), (pid 2, corr 5), (pid 1, corr -1)
    found = joins.launch_join(np.array([5, 5, 7, -1]), np.array([5, 5, 5, -1]),
                              op_pid=np.array([1, 2, 1, 1]), call_pid=np.array([1, 1, 2, 1]),
                              call_rank=np.array([1, 0, 0, 0]))
    assert found.tolist() == [1, 2, -1, -1]


def test_launch_join_without_pids_takes_first_call():
    assert joins.launch_join(np.array([3, 4]), np.array([4, 3, 3])).tolist() == [1, 0]


def test_span_of_groups():
    first, last = joins.span_of_groups(3, np.array([0, 0, 2, -1]), np.array([5, 1, 7, 0]), np.array([6, 9, 8, 99]))
    assert first[[0, 2]].tolist() == [1, 7] and last[[0, 2]].tolist() == [9, 8] and last[1] < first[1]
