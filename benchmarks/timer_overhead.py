"""Overhead of timer_only mode (benchmark figures only: prof.loader + prof.step) on a loop of
1 ms steps, against the same loop without distprof, interleaved in one run.
Target: under 1% of a 1 ms step.

    python benchmarks/timer_overhead.py [--steps 400] [--rounds 7]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from contextlib import redirect_stdout

import distprof

STEP_NS = 1_000_000


def busy_step() -> None:
    """1 ms of work that holds the CPU (sleep would hide overhead in scheduler noise)."""
    end = time.perf_counter_ns() + STEP_NS
    while time.perf_counter_ns() < end:
        pass


def plain_loop(steps: int) -> int:
    started = time.perf_counter_ns()
    for _ in iter(range(steps)):
        busy_step()
    return time.perf_counter_ns() - started


def timer_only_loop(steps: int, out: str) -> int:
    started = time.perf_counter_ns()
    with redirect_stdout(io.StringIO()), distprof.Profiler(out=out, timer_only=True) as prof:
        for _ in prof.loader(range(steps)):
            busy_step()
            prof.step()
    return time.perf_counter_ns() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    best_plain = best_timed = float("inf")
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.rounds):
            best_plain = min(best_plain, plain_loop(args.steps))
            best_timed = min(best_timed, timer_only_loop(args.steps, out))
    overhead_per_step = (best_timed - best_plain) / args.steps
    share = overhead_per_step / STEP_NS
    print(f"{args.steps} steps of 1 ms, best of {args.rounds} interleaved rounds")
    print(f"  plain loop       {best_plain / args.steps / 1e3:9.2f} us per step")
    print(f"  timer_only loop  {best_timed / args.steps / 1e3:9.2f} us per step (includes session start/stop)")
    print(f"overhead per step = {overhead_per_step / 1e3:.2f} us = {100 * share:.3f}% of a 1 ms step "
          f"(target < 1%: {'met' if share < 0.01 else 'NOT met'})")


if __name__ == "__main__":
    main()
