"""The step boundary as training pays it: CPU time of the training thread per annotated range, its share
of `prof.step()` included, versus a bare `nvtx.annotate`, at --ranges (1,000) ranges a step. Targets
(issue 41): `distprof.phase` + its share of `prof.step()` <= 1.0x a bare `nvtx.annotate("forward")`
(median of >= 20 paired rounds) and `prof.step()` <= 50 us at 1,000 ranges on the training thread.

A round runs --steps steps of every variant, back to back, the order flipping every round:

- `nvtx.annotate("forward")`: --ranges `with` blocks a step, no step boundary (a bare annotate has none);
- `phase + prof.step()`: --ranges `with distprof.phase("forward")` blocks, then `prof.step()`, which
  hands the step's rows to the collector's writer thread;
- `phase + flush here` (information): the same with the step written on the training thread, as
  `prof.step()` did before issue 41 (`collector.flush` in place of `collector.submit`).

Loops are compiled inline (no wrapper call per block) and timed with `time.thread_time_ns` (CPU time of
this thread: the writer thread's CPU and other processes on a busy machine do not count; the wait for
the writer, when a step ends before the previous one is written, costs this thread only the wake-up).
The verdict is the median over rounds of each round's own ratio (paired); `prof.step()`'s own time
is the median (and 90th percentile) of every timed call. Wall-clock ratios are printed too, as
information: they include the writer's turns at the GIL, which a loop of empty `with` blocks that never
releases the GIL leaves it only at a step's end (a real step releases the GIL in its kernels and I/O).
``--gpu-wait-ms W`` ends every step's ranges with a W ms wait that releases the GIL, as a training
thread waiting for its GPU does (a sleep: no CPU of this thread): the writer then writes during the
step, and `prof.step()` rarely waits for it. 0 (the default) is the empty loop above.

    python benchmarks/step_overhead.py [--rounds 30] [--steps 5] [--ranges 1000] [--gpu-wait-ms 0]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import nvtx

import distprof

VARIANTS = {
    'nvtx.annotate("forward")': ('nvtx.annotate("forward")', "pass"),
    "phase + prof.step()": ('distprof.phase("forward")', "step()"),
    "phase + flush here": ('distprof.phase("forward")', "step()"),
}
BASE, TARGET, SYNC = VARIANTS


def _timed_loop(expression: str, boundary: str, names: dict):
    """f(steps, ranges) -> (CPU ns, wall ns, [CPU ns of each boundary]) of ``steps`` steps of ``ranges``
    ``with <expression>: pass`` blocks, then ``gpu_wait()`` (names'), each followed by ``boundary``."""
    source = ("def loop(steps, ranges, cpu_ns=cpu_ns, wall_ns=wall_ns):\n"
              "    total = 0\n    boundaries = []\n    wall = wall_ns()\n"
              "    for _ in range(steps):\n        started = cpu_ns()\n"
              "        for _ in range(ranges):\n"
              f"            with {expression}:\n                pass\n"
              "        gpu_wait()\n"
              f"        mid = cpu_ns()\n        {boundary}\n        ended = cpu_ns()\n"
              "        total += ended - started\n        boundaries.append(ended - mid)\n"
              "    return total, wall_ns() - wall, boundaries\n")
    scope = dict(names, cpu_ns=time.thread_time_ns, wall_ns=time.perf_counter_ns)
    exec(compile(source, f"<step loop {expression}>", "exec"), scope)  # noqa: S102 - fixed source above
    return scope["loop"]


def measure(rounds: int, steps: int, ranges: int, prof: distprof.Profiler,
            gpu_wait_ms: float = 0.0) -> dict[str, dict[str, list]]:
    """Per variant: CPU and wall ns per range (one value per round) and every boundary's CPU ns."""
    seconds = gpu_wait_ms / 1000

    def gpu_wait() -> None:
        if seconds:
            time.sleep(seconds)

    names = {"nvtx": nvtx, "distprof": distprof, "step": prof.step, "gpu_wait": gpu_wait}
    loops = {label: _timed_loop(expression, boundary, names) for label, (expression, boundary) in VARIANTS.items()}
    collector = prof.collector
    out = {label: {"cpu": [], "wall": [], "step": []} for label in loops}

    def run(label: str, count: int) -> tuple[int, int, list[int]]:
        if label == SYNC:
            collector.submit = collector.flush  # the step written on this thread, as before issue 41
        try:
            return loops[label](count, ranges)
        finally:
            collector.__dict__.pop("submit", None)

    for label in loops:
        run(label, 2)  # warm up (specialised bytecode, allocator, the writer's first batch)
    for index in range(rounds):
        for label in (list(loops) if index % 2 == 0 else list(reversed(loops))):
            cpu, wall, boundaries = run(label, steps)
            out[label]["cpu"].append(cpu / (steps * ranges))
            out[label]["wall"].append(wall / (steps * ranges))
            out[label]["step"].extend(boundaries)
    return out


def _paired(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    ratios = [a / b for a, b in zip(ours, theirs)]
    return statistics.median(ratios), min(ratios), max(ratios)


def report(out: dict[str, dict[str, list]], rounds: int, steps: int, ranges: int, gpu_wait_ms: float = 0.0) -> None:
    """Print per-variant figures, the paired ratios and the verdicts."""
    tool = not type(nvtx.get_domain("distprof")).__name__.startswith("Dummy")
    print(f"NVTX: {'a tool is attached' if tool else 'no tool attached (NVTX calls are no-ops, as outside nsys)'}; "
          f"{rounds} paired rounds x {steps} steps x {ranges} ranges; CPU time of this thread (thread_time_ns)"
          + (f"; each step ends with a {gpu_wait_ms:g} ms wait that releases the GIL (a GPU's)" if gpu_wait_ms
             else "; an empty loop (no GIL release in a step)"))
    for label, figures in out.items():
        line = f"  {label:<26} {statistics.median(figures['cpu']):7.0f} ns a range (min {min(figures['cpu']):.0f})"
        if label != BASE:
            calls = sorted(figures["step"])
            line += (f"; step boundary {statistics.median(calls) / 1e3:7.1f} us median, "
                     f"{calls[int(0.9 * (len(calls) - 1))] / 1e3:.1f} us p90")
        print(line)
    for mine in (TARGET, SYNC):
        ratio, low, high = _paired(out[mine]["cpu"], out[BASE]["cpu"])
        verdict = ("met" if ratio <= 1.0 else "NOT met") if mine == TARGET else "information"
        print(f"ratio {mine} / {BASE} = {ratio:.2f} CPU, median of {rounds} paired rounds "
              f"(min {low:.2f}, max {high:.2f}; target <= 1.00: {verdict})")
    step_us = statistics.median(out[TARGET]["step"]) / 1e3
    print(f"prof.step() at {ranges} ranges on the training thread = {step_us:.1f} us CPU, median of "
          f"{len(out[TARGET]['step'])} calls (target <= 50 us: {'met' if step_us <= 50 else 'NOT met'}); "
          f"flush here: {statistics.median(out[SYNC]['step']) / 1e3:.1f} us")
    for mine in (TARGET, SYNC):
        ratio, low, high = _paired(out[mine]["wall"], out[BASE]["wall"])
        print(f"wall-clock ratio {mine} / {BASE} = {ratio:.2f} (min {low:.2f}, max {high:.2f}; information)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="paired rounds (at least 20)")
    parser.add_argument("--steps", type=int, default=5, help="steps per variant and round")
    parser.add_argument("--ranges", type=int, default=1000, help="annotated ranges a step")
    parser.add_argument("--gpu-wait-ms", type=float, default=0.0,
                        help="a wait that releases the GIL at each step's end, as for a GPU (0: none)")
    args = parser.parse_args()
    if args.rounds < 20:
        parser.error("--rounds must be at least 20 (the verdict is a median of paired rounds)")
    with tempfile.TemporaryDirectory() as tmp:
        with distprof.Profiler(out=tmp, quiet=True) as prof:
            out = measure(args.rounds, args.steps, args.ranges, prof, args.gpu_wait_ms)
    report(out, args.rounds, args.steps, args.ranges, args.gpu_wait_ms)


if __name__ == "__main__":
    main()
