"""Live view on vs off: what it costs a training step (issues 27 and 39).

Default: one process; the view reads rank 0's own file, reduces every window and prints it, as it
would for a job. Steps are a busy loop of a fixed length (50 ms, and a small step), run
alternately with ``live.every_steps`` 0 and K; the figure is the median step duration difference.

``--ranks N``: a real mpirun job of N ranks with a folder per rank (``out: .../node{rank}``) and,
by default, every rank its own node (``live.node: n{rank}``): rank 0's view plus a sender per
other rank, reducing windows and sending them over TCP, the configuration with the most side
processes. Each step is a busy loop of the step length, then an allreduce (polled, as the demo
does); the job's step time is the slowest rank's per step, averaged (the throughput). Runs are
paired (off, on; the order alternating between pairs so a drift of the machine hits both), and the
figure is the median of the pairs' differences, with every pair shown. Budget (issue 39): <= 0.5% at 50 ms steps.

    PYTHONPATH=$PWD python benchmarks/live_overhead.py [--rounds 3]
    PYTHONPATH=$PWD python benchmarks/live_overhead.py --ranks 2 --pairs 8 [--node "{host}"] [--priority nice]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def single(rounds: int) -> None:
    for step_s, steps, every in ((0.050, 60, 4), (0.0005, 2000, 50)):
        off, on = [], []
        for _ in range(rounds):  # alternate, so drifts of the machine hit both
            with tempfile.TemporaryDirectory() as out:
                off.append(median_step(step_s, steps, 0, out))
            with tempfile.TemporaryDirectory() as out:
                on.append(median_step(step_s, steps, every, out))
        base, live = statistics.median(off), statistics.median(on)
        print(f"step {step_s * 1e3:g} ms, live every {every}: off {base * 1e3:.3f} ms, on {live * 1e3:.3f} ms, "
              f"overhead {(live - base) * 1e3:+.3f} ms/step ({100 * (live - base) / base:+.2f}%)")


# -- --ranks N: a real mpirun job, a folder per rank, paired runs -------------------------------

def job(out: str, step_s: float, steps: int, every: int, node: str, warmup: int, priority: str) -> None:
    """One rank of the benchmark job (under mpirun): rank 0 prints the job's mean step time (the
    slowest rank's per step: the job's throughput, which a window's work every K steps slows in one
    step of K, where a median would not see it) after ``warmup`` steps: the side processes' start-up (importing the
    analysis stack, about 1 s of CPU each, once per job) is not a step's cost in a long job."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    grad = np.ones(1024)
    durations = []
    live = {"every_steps": every, "node": node, "priority": priority}
    with distprof.Profiler(out=out, quiet=True, live=live) as prof:
        for _ in range(steps):
            started = time.perf_counter()
            with distprof.phase("forward"):
                busy(step_s)
            with distprof.comm("allreduce"):
                request = comm.Iallreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
                while not request.Test():
                    time.sleep(0.0002)
            prof.step()
            durations.append(time.perf_counter() - started)
    gathered = comm.gather(durations, root=0)  # every rank: a collective
    if comm.Get_rank() == 0:
        slowest = np.max(np.asarray(gathered), axis=0)
        print(json.dumps({"mean_step_s": float(np.mean(slowest[warmup:]))}), flush=True)


def _machine() -> tuple[float, float, float]:
    """(wall s, CPU s the whole machine was busy, CPU s of this process's finished children)."""
    import resource
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / os.sysconf("SC_CLK_TCK")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), busy, children.ru_utime + children.ru_stime


def run_job(ranks: int, step_s: float, steps: int, every: int, node: str, warmup: int,
            priority: str = "idle") -> tuple[float, float]:
    """(the job's mean step time in s, cores other processes kept busy meanwhile) of one mpirun run,
    live every ``every`` steps (0: off). The job's own processes, side processes included, are
    this process's descendants: their CPU is not the others'."""
    from distprof.cli import find_mpirun
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    before = _machine()
    with tempfile.TemporaryDirectory() as out:
        command = [find_mpirun(), "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,sm",
                   *(["--allow-run-as-root"] if os.geteuid() == 0 else []), sys.executable, __file__, "--job",
                   f"{out}/node{{rank}}", str(step_s), str(steps), str(every), node, str(warmup), priority]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    wall, busy, ours = (after - first for first, after in zip(before, _machine()))
    if result.returncode != 0:
        raise SystemExit(f"benchmark job failed ({result.returncode}): {result.stderr[-2000:]}")
    line = next(line for line in result.stdout.splitlines() if line.startswith("{"))
    return json.loads(line)["mean_step_s"], max(0.0, (busy - ours) / wall)


QUIET_CORES = 0.25  # a pair whose runs had other processes keep more cores busy than this is not quiet


def paired(ranks: int, pairs: int, step_s: float, steps: int, every: int, node: str, warmup: int,
           priority: str) -> None:
    """Paired runs off/on (order alternating), each pair's difference and their median: over all
    pairs, and over the quiet ones (other processes kept at most QUIET_CORES cores busy)."""
    diffs, quiet = [], []
    for index in range(pairs):  # a handful of jobs
        order = (0, every) if index % 2 == 0 else (every, 0)
        runs = {live_every: run_job(ranks, step_s, steps, live_every, node, warmup, priority) for live_every in order}
        (off, other_off), (on, other_on) = runs[0], runs[every]
        diffs.append((on - off) / off)
        if max(other_off, other_on) <= QUIET_CORES:
            quiet.append(diffs[-1])
        print(f"pair {index + 1}: off {off * 1e3:.3f} ms, on {on * 1e3:.3f} ms, {100 * diffs[-1]:+.2f}% "
              f"(other processes: {other_off:.2f} / {other_on:.2f} cores)", flush=True)
    shown = f"{100 * statistics.median(quiet):+.2f}% over {len(quiet)} quiet pairs" if quiet else "no quiet pair"
    print(f"{ranks} ranks, a folder per rank, live.node {node!r}, live.priority {priority}, "
          f"step {step_s * 1e3:g} ms, live every {every}, "
          f"{steps} steps ({warmup} not counted): overhead median {100 * statistics.median(diffs):+.2f}% over "
          f"{pairs} pairs (min {100 * min(diffs):+.2f}%, max {100 * max(diffs):+.2f}%); {shown}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        out, step_s, steps, every, node, warmup, priority = sys.argv[2:9]
        job(out, float(step_s), int(steps), int(every), node, int(warmup), priority)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="one process: rounds of off and on")
    parser.add_argument("--ranks", type=int, default=0, help="N > 0: an mpirun job of N ranks, a folder per rank")
    parser.add_argument("--pairs", type=int, default=5, help="--ranks: paired runs (off, on)")
    parser.add_argument("--steps", type=int, default=120, help="--ranks: steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="--ranks: first steps not counted (start-up)")
    parser.add_argument("--step-ms", type=float, default=50.0, help="--ranks: busy work per step")
    parser.add_argument("--every", type=int, default=4, help="--ranks: a live window every this many steps")
    parser.add_argument("--node", default="n{rank}", help="--ranks: config live.node ({host}: one view, no sender)")
    parser.add_argument("--priority", choices=("idle", "nice"), default="idle", help="--ranks: config live.priority")
    args = parser.parse_args()
    if args.ranks > 0:
        paired(args.ranks, args.pairs, args.step_ms / 1e3, args.steps, args.every, args.node, args.warmup,
               args.priority)
    else:
        single(args.rounds)


if __name__ == "__main__":
    main()
