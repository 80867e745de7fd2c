"""Live view on vs off: what it costs a training step (issue 27).

One process, 2 ranks' worth of files is not needed: the view reads rank 0's own file, reduces
every window and prints it, as it would for a job. Steps are a busy loop of a fixed length (50 ms,
and a small step), run alternately with ``live.every_steps`` 0 and K; the figure is the median
step duration difference. Prints the figures; budget: <= 1% at 50 ms steps, <= 0.1 ms at small steps.

    PYTHONPATH=$PWD python benchmarks/live_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time

import distprof


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_step(step_s: float, steps: int, every: int, out: str) -> float:
    """Median duration of a step (busy work + prof.step()) with the live view every ``every`` steps."""
    durations = []
    with contextlib.redirect_stdout(io.StringIO()), \
            distprof.Profiler(out=out, quiet=True, live={"every_steps": every}) as prof:
        for _ in range(steps):
            started = time.perf_counter()
            with distprof.phase("forward"):
                busy(step_s)
            prof.step()
            durations.append(time.perf_counter() - started)
    return statistics.median(durations[every:])  # the view's start-up is not a step's cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for step_s, steps, every in ((0.050, 60, 4), (0.0005, 2000, 50)):
        off, on = [], []
        for _ in range(args.rounds):  # alternate, so drifts of the machine hit both
            with tempfile.TemporaryDirectory() as out:
                off.append(median_step(step_s, steps, 0, out))
            with tempfile.TemporaryDirectory() as out:
                on.append(median_step(step_s, steps, every, out))
        base, live = statistics.median(off), statistics.median(on)
        print(f"step {step_s * 1e3:g} ms, live every {every}: off {base * 1e3:.3f} ms, on {live * 1e3:.3f} ms, "
              f"overhead {(live - base) * 1e3:+.3f} ms/step ({100 * (live - base) / base:+.2f}%)")


if __name__ == "__main__":
    main()
