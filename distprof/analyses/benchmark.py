"""Benchmark (timer-only) figures, as the Paddle profiler's Perf Summary defines them:
reader_cost (time in the data loader per step), batch_cost (step time), ips (steps or samples
per second) and the Reader Ratio (reader_cost / batch_cost)."""

from __future__ import annotations

import numpy as np

from ..sections.benchmark import BatchSpread, Benchmark, CostStats, Ips, RankPerf, Spread


def _stats(values_ns: np.ndarray) -> CostStats | None:
    if not values_ns.size:
        return None
    return CostStats(avg_ns=int(values_ns.mean()), max_ns=int(values_ns.max()), min_ns=int(values_ns.min()))


def perf_summary(rank: int, batch_ns, reader_ns, batch_size: int | None = None) -> RankPerf:
    """A rank's figures from its per-step batch and reader times (ns)."""
    batch_ns = np.asarray(batch_ns, dtype=np.int64)
    reader_ns = np.asarray(reader_ns, dtype=np.int64)
    per_step = 1e9 / batch_ns[batch_ns > 0] if batch_ns.size else np.empty(0)
    scale = batch_size or 1
    ips = Ips(avg=float(batch_ns.size * 1e9 * scale / batch_ns.sum()) if batch_ns.sum() else None,
              max=float(per_step.max() * scale) if per_step.size else None,
              min=float(per_step.min() * scale) if per_step.size else None,
              unit="samples/s" if batch_size else "steps/s")
    return RankPerf(rank=rank, steps=int(batch_ns.size), batch_cost=_stats(batch_ns), reader_cost=_stats(reader_ns),
                    ips=ips, reader_ratio=float(reader_ns.sum() / batch_ns.sum()) if batch_ns.sum() else None)


def across_ranks(ranks: list[RankPerf]) -> Benchmark:
    """The ranks' rows in rank order plus the spread of the average batch cost across them."""
    batch = np.array([r.batch_cost.avg_ns if r.batch_cost else np.nan for r in ranks], dtype=float)
    valid = ~np.isnan(batch)
    numbers = np.array([r.rank for r in ranks])
    across = None
    if valid.any():
        slowest = int(numbers[valid][np.argmax(batch[valid])])
        across = Spread(batch_cost_avg_ns=BatchSpread(min=int(np.nanmin(batch)), median=int(np.nanmedian(batch)),
                                                      max=int(np.nanmax(batch)), max_rank=slowest))
    return Benchmark(ranks=sorted(ranks, key=lambda r: r.rank), across_ranks=across)
