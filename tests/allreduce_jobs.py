"""Reduced ranks of a job built as event tables, for the tests of the critical path and of the imbalance
finding: each step every rank runs forward, then a blocking allreduce on a worker thread from its arrival
to ``T`` after the last arrival, then the optimizer from the allreduce's end. The late rank of a step
computes ``delay`` longer in forward."""

from __future__ import annotations

import numpy as np

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline

CONFIG = config_mod.load()
MS = 1_000_000
F, T, OPT = 20 * MS, 10 * MS, 5 * MS  # forward, transfer, optimizer
COMM_LANE = 7


def job(ranks: int, late_by_step: list[int | None], delay: int, config: dict = CONFIG) -> list:
    """Steps whose late rank is ``late_by_step[s]`` (None: nobody late)."""
    rows: dict[int, list] = {r: [] for r in range(ranks)}
    start = 0
    for s, late in enumerate(late_by_step):
        arrive = start + F + np.where(np.arange(ranks) == late, delay, 0)
        last = int(arrive.max())
        for r in range(ranks):
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start, last + T + OPT, 1, s, ""),
                        (ev.RANGE, ev.PHASE, "forward", start, int(arrive[r]), 1, s, ""),
                        (ev.COMM_OP, ev.COMMUNICATION, "gloo:all_reduce", int(arrive[r]), last + T, COMM_LANE, s,
                         "allreduce"),
                        (ev.RANGE, ev.PHASE, "optimizer", last + T, last + T + OPT, 1, s, "")]
        start = last + T + OPT
    return [reduced(r, rows[r], config) for r in range(ranks)]


def reduced(rank: int, rows: list, config: dict = CONFIG):
    """One rank's RankResult from (kind, category, name, start, end, lane, step, collective) rows."""
    kind, category, name, begin, end, lane, step, collective = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=kind, category=category, name=name, rank=rank, step=step.astype(np.int64),
                            start_ns=begin.astype(np.int64), end_ns=end.astype(np.int64),
                            lane=lane.astype(np.int64), collective=collective)
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=rank), config)
