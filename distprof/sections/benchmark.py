"""summary.json of a timer_only run (``Profiler(timer_only=True)``): the Paddle profiler's Perf Summary per
rank and the spread of the batch cost across ranks (analyses/benchmark.py), not a ``Summary``."""

from __future__ import annotations

from ..typed import Record


class CostStats(Record):
    """A per-step time over a rank's steps."""

    avg_ns: int
    max_ns: int
    min_ns: int


class Ips(Record):
    """Throughput: steps (or samples, with a batch size) per second."""

    avg: float | None
    max: float | None
    min: float | None
    unit: str                         # "samples/s" with a batch size, else "steps/s"


class RankPerf(Record):
    """One rank's Perf Summary; it travels to rank 0 as its JSON (nothing from a socket is unpickled)."""

    rank: int
    steps: int
    batch_cost: CostStats | None      # step time; None without steps
    reader_cost: CostStats | None     # time in the data loader per step
    ips: Ips
    reader_ratio: float | None        # reader_cost / batch_cost, summed over the steps


class BatchSpread(Record):
    """The ranks' average batch cost: its spread and the slowest rank."""

    min: int
    median: int
    max: int
    max_rank: int


class Spread(Record):
    batch_cost_avg_ns: BatchSpread


class Benchmark(Record):
    """Every rank's Perf Summary in rank order, and the spread across them (None: no rank has steps)."""

    ranks: list[RankPerf]
    across_ranks: Spread | None


class BenchmarkSummary(Record):
    """A timer_only run's summary.json."""

    world_size: int
    source: str
    benchmark: Benchmark
    warnings: list[str]
