"""The host's own part in a run (issue 59): what the OS counted per step about each rank's process
(collector.host_sample: the training thread's wait for a core, context switches, the host's load).

A rank descheduled by other processes *is* late; what the user needs is that cause. The signal is the
time the training thread was ready to run but waited for a core (/proc/self/schedstat): measured on
this 2-core machine, a clean 2-rank demo's threads wait 5-8 ms a step (their own threads on two
cores), and 10-70 ms a step beside a CPU-bound process on one core. Only native rank files carry it;
Kineto traces record no OS counters, nsys exports none that distprof reads (``recorded`` says so)."""

from __future__ import annotations

import msgspec
import numpy as np

from ..results import RankResult
from ..sections.machine import StragglerHost
from ..sections.skew import StragglerRow

BUSY_SHARE = 0.10        # a host whose ranks' training threads waited this share of the time for a core is busy
BUSY_RATIO = 3.0         # a straggler's wait for a core per late step, over the other ranks' median, that names it
BUSY_OF_COST = 0.25      # ... and at least this share of the waits it causes per step


class StepCounters(msgspec.Struct, frozen=True):
    """A rank's OS counters per step: the change over the step (the first sampled step has none)."""

    step: np.ndarray
    wall_ns: np.ndarray
    runqueue_ns: np.ndarray    # the training thread's wait for a core
    involuntary: np.ndarray    # context switches it did not ask for
    load_1m: np.ndarray        # the host's 1-minute load at the step's end (NaN: unknown)


def per_step(result: RankResult) -> StepCounters | None:
    """The rank's counters per step (the change from the step before: the first sampled step has
    none), for steps >= 0 with a known wait for a core; None without samples."""
    samples = result.meta.get("host_samples") or {}
    queue = samples.get("runqueue_ns") or []
    if len(queue) < 2 or any(v is None for v in queue):
        return None
    step = np.asarray(samples["step"], np.int64)
    wall, queue, involuntary = (np.diff(np.asarray(samples[key], np.int64))
                                for key in ("clock_ns", "runqueue_ns", "involuntary"))
    load = np.asarray([np.nan if v is None else float(v) for v in samples["load_1m"]], np.float64)[1:]
    keep = step[1:] >= 0
    return StepCounters(step=step[1:][keep], wall_ns=wall[keep], runqueue_ns=queue[keep],
                        involuntary=involuntary[keep], load_1m=load[keep])


def runqueue_share(results: list[RankResult]) -> float | None:
    """The median over these ranks of the share of their steps' time their training thread waited for a
    core; None where none recorded it."""
    shares = []
    for result in results:  # the ranks of one host
        steps = per_step(result)
        if steps is not None and steps.wall_ns.sum() > 0:
            shares.append(float(steps.runqueue_ns.sum() / steps.wall_ns.sum()))
    return float(np.median(shares)) if shares else None


def steal_share(results: list[RankResult]) -> float | None:
    """The share of the host's CPU time the hypervisor stole over these ranks' steps (/proc/stat; the
    median over the ranks); None where not recorded. Measured here: 8% in most 2-rank demo runs, 23% in
    one that ran 44% slower with the same work."""
    shares = []
    for result in results:  # the ranks of one host
        samples = result.meta.get("host_samples") or {}
        steal, total = samples.get("steal_ticks") or [], samples.get("total_ticks") or []
        known = [(s, t) for s, t in zip(steal, total) if s is not None and t is not None]
        if len(known) >= 2 and known[-1][1] > known[0][1]:
            shares.append((known[-1][0] - known[0][0]) / (known[-1][1] - known[0][1]))
    return float(np.median(shares)) if shares else None


def max_load(results: list[RankResult]) -> float | None:
    """The highest 1-minute load any of these ranks sampled during its steps (None: none sampled)."""
    loads = [float(np.nanmax(s.load_1m)) for s in map(per_step, results)
             if s is not None and np.isfinite(s.load_1m).any()]
    return max(loads) if loads else None


def straggler_host(results: list[RankResult], straggler: StragglerRow | None) -> StragglerHost | None:
    """What the straggler's host counted in its late steps against the other ranks' in the same steps;
    ``busy`` when its training thread waited for a core ``BUSY_RATIO`` x the others' median and for at
    least ``BUSY_OF_COST`` of the waits it causes per step: other processes took its cores. None where
    its file records no counters (the reports say the inputs cannot tell)."""
    if not straggler:
        return None
    mine = next((r for r in results if r.rank == straggler.rank), None)
    counted = per_step(mine) if mine is not None else None
    if counted is None:
        return None
    late = np.asarray(straggler.late_step_ids, np.int64)
    chosen = np.isin(counted.step, late) if late.size else np.ones(counted.step.size, bool)
    if not chosen.any():
        return None
    steps = counted.step[chosen]
    queue = float(counted.runqueue_ns[chosen].mean())
    others = []
    for result in results:  # one per other rank
        theirs = per_step(result) if result.rank != straggler.rank else None
        same = np.isin(theirs.step, steps) if theirs is not None else None
        if same is not None and same.any():
            others.append(float(theirs.runqueue_ns[same].mean()))
    others_queue = float(np.median(others)) if others else 0.0
    busy = queue >= BUSY_RATIO * max(others_queue, 1e6) and queue >= BUSY_OF_COST * float(straggler.waits_caused_ns)
    loads = counted.load_1m[chosen]
    return StragglerHost(steps=int(steps.size), runqueue_ns=int(round(queue)),
                         others_runqueue_ns=int(round(others_queue)),
                         involuntary=int(counted.involuntary[chosen].sum()),
                         load_1m=float(np.nanmax(loads)) if np.isfinite(loads).any() else None,
                         cpus=mine.meta.get("cpus") if isinstance(mine.meta.get("cpus"), int) else None, busy=busy)
