"""What the host counters cost (issue 59: "the collector's extra counters cost <= 1 us per step"): the
collector samples, at each step's hand-over, the training thread's wait for a core, rusage, load and stolen
ticks (``collector.host_sample``) on its writer thread, so the training thread pays for them only through
the GIL. Printed, measured in one run:

- ``host_sample`` itself, on whichever thread calls it (median of --calls calls);
- the training thread's CPU time per step (``time.thread_time_ns``) around --ranges recorded ranges and the
  hand-over (``Collector.submit``), then a --gpu-wait-ms wait that releases the GIL (a thread waiting for its
  GPU), with the real sampler and with a stub that returns the same row at no cost, in paired rounds whose
  order flips: the difference is what the counters cost the training thread per step.

    python benchmarks/host_counters.py [--rounds 20] [--steps 20] [--ranges 1000] [--gpu-wait-ms 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from distprof import collector as collector_mod


def stub(step: int) -> tuple:
    """The sampler's row without reading anything."""
    return (int(step), 0, 0, 0, 0, None, None, None, None)


def training_step_ns(folder: Path, sampler, steps: int, ranges: int, wait_s: float) -> float:
    """Median CPU time of the training thread per step, with ``sampler`` as the collector's host sampler."""
    collector_mod.host_sample = sampler
    collector = collector_mod.Collector(folder / "rank0.sqlite", 0, 1)
    collector.activate()
    name_id = collector_mod.NAMES.id_of("forward", "PHASE", "range")
    per_step = []
    for step in range(steps):  # one iteration per step
        started = time.thread_time_ns()
        for k in range(ranges):
            collector.record_id(name_id, k, k + 1)
        collector.step = step
        collector.submit()
        per_step.append(time.thread_time_ns() - started)
        time.sleep(wait_s)
    collector.close()
    return statistics.median(per_step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ranges", type=int, default=1000)
    parser.add_argument("--gpu-wait-ms", type=float, default=2.0)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    real = collector_mod.host_sample
    calls = []
    for _ in range(args.calls):
        started = time.perf_counter_ns()
        real(1)
        calls.append(time.perf_counter_ns() - started)
    differences = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):  # paired rounds, the order flipping
            order = (real, stub) if round_ % 2 else (stub, real)
            times = {}
            for sampler in order:
                folder = Path(scratch) / f"{round_}_{sampler is real}"
                folder.mkdir()
                times[sampler is real] = training_step_ns(folder, sampler, args.steps, args.ranges,
                                                          args.gpu_wait_ms / 1000)
            differences.append(times[True] - times[False])
    collector_mod.host_sample = real
    print(f"host_sample: {statistics.median(calls) / 1000:.1f} us a call (median of {args.calls}), on the writer "
          "thread at each step's hand-over")
    print(f"training thread, per step ({args.ranges} ranges + submit, then a {args.gpu_wait_ms:g} ms wait): "
          f"counters on - off = {statistics.median(differences) / 1000:+.2f} us CPU, median of {args.rounds} paired "
          f"rounds (min {min(differences) / 1000:+.1f}, max {max(differences) / 1000:+.1f}; target <= 1 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
