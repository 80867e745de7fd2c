"""Per-range CPU cost of `distprof.phase` (NVTX + recording) versus a bare `nvtx.annotate`, measured in
one run, printed as paired ratios. Targets: phase <= 1.0x the simplest `nvtx.annotate("forward")` (the
form most users write, made in the `with` line like `distprof.phase("forward")` is looked up there) and
<= 1.0x the colour+domain form `nvtx.annotate("forward", color="green", domain="distprof")`.

A round times the same number of `with` blocks for every variant, back to back, in a loop written
inline (no wrapper call per block, which would add the same cost to both sides and pull every ratio
towards 1), as CPU time of this thread (`time.thread_time_ns`: time other processes take on a busy
machine does not count). The order of the variants flips every round. The verdict is the median over
rounds of each round's own ratio (paired: a slow moment slows both sides of a ratio alike), with min
and max; per-variant figures are medians (and minima) over rounds. The same with three names in turn
(forward, backward, optimizer), as a training loop does, is a third ratio.

Without an NVTX tool (no nsys) the nvtx package hands out a DummyDomain and its push/pop do nothing;
the first line says which case was measured.

    python benchmarks/collector_overhead.py [--rounds 30] [--per-round 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import nvtx

import distprof
from distprof.collector import Collector


class _Empty:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


# Each variant is one `with` line (or one per name, in turn, as a training loop's phases), run in a loop
# of its own (compiled below, so the loop and the clock reads are identical for every variant).
THREE = ("forward", "backward", "optimizer")
VARIANTS = {
    "empty with": ("empty",),
    'nvtx.annotate("forward")': ('nvtx.annotate("forward")',),
    "annotate colour+domain": ('nvtx.annotate("forward", color="green", domain="distprof")',),
    'distprof.phase("forward")': ('distprof.phase("forward")',),
    "phase, NVTX calls made": ("with_nvtx_calls",),
    "annotate made once": ("annotate_once",),
    "phase looked up once": ("phase_once",),
    "annotate, 3 names in turn": tuple(f'nvtx.annotate("{name}")' for name in THREE),
    "phase, 3 names in turn": tuple(f'distprof.phase("{name}")' for name in THREE),
}
TARGET = 'distprof.phase("forward")'
PAIRS = [(TARGET, 'nvtx.annotate("forward")'), (TARGET, "annotate colour+domain"),
         ("phase, 3 names in turn", "annotate, 3 names in turn")]


def _timed_loop(expressions: tuple[str, ...], names: dict):
    """f(count) -> CPU ns of ``count`` rounds of ``with <expression>: pass``, one block per expression."""
    blocks = "".join(f"        with {expression}:\n            pass\n" for expression in expressions)
    source = ("def loop(count, cpu_ns=cpu_ns):\n    started = cpu_ns()\n    for _ in range(count):\n"
              f"{blocks}    return cpu_ns() - started\n")
    scope = dict(names, cpu_ns=time.thread_time_ns)
    exec(compile(source, f"<with {expressions[0]}>", "exec"), scope)  # noqa: S102 - fixed source above
    return scope["loop"]


def measure(rounds: int, per_round: int, collector: Collector) -> dict[str, list[float]]:
    """ns per `with` block of every variant, one value per round; a flush (one step) after each round."""
    names = {"nvtx": nvtx, "distprof": distprof, "empty": _Empty(), "annotate_once": nvtx.annotate("forward"),
             "phase_once": distprof.phase("forward"),
             # the path taken under nsys: the same work plus the NVTX push/pop calls (no-ops without a tool)
             "with_nvtx_calls": distprof.annotate.Range("forward", nvtx_calls=True)}
    loops = {label: _timed_loop(expressions, names) for label, expressions in VARIANTS.items()}
    for loop in loops.values():
        loop(per_round // 10)  # warm up (specialised bytecode, allocator)
    collector.flush()
    ns: dict[str, list[float]] = {label: [] for label in loops}
    for index in range(rounds):
        order = list(loops) if index % 2 == 0 else list(reversed(loops))
        for label in order:
            blocks = len(VARIANTS[label])
            ns[label].append(loops[label](per_round // blocks) / (per_round // blocks * blocks))
        collector.flush()  # one step's worth of rows to disk, as prof.step() does (not timed)
    return ns


def flush_ns_per_row(collector: Collector, rows: int = 1000) -> float:
    for _ in range(rows):
        with distprof.phase("forward"):
            pass
    started = time.perf_counter_ns()
    flushed = collector.flush()
    return (time.perf_counter_ns() - started) / max(flushed, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="paired rounds (at least 20)")
    parser.add_argument("--per-round", type=int, default=20000, help="with blocks per variant and round")
    args = parser.parse_args()
    if args.rounds < 20:
        parser.error("--rounds must be at least 20 (the verdict is a median of paired rounds)")
    with tempfile.TemporaryDirectory() as tmp:
        collector = Collector(f"{tmp}/rank0.sqlite", rank=0, world_size=1)
        collector.activate()
        ns = measure(args.rounds, args.per_round, collector)
        flush_ns = flush_ns_per_row(collector)
        collector.close()

    tool_attached = not type(nvtx.get_domain("distprof")).__name__.startswith("Dummy")
    nvtx_state = "a tool is attached" if tool_attached else "no tool attached (NVTX calls are no-ops, as outside nsys)"
    print(f"NVTX: {nvtx_state}; {args.rounds} paired rounds x {args.per_round} with blocks; "
          "CPU time (thread_time_ns) per block, median (min) over rounds")
    for label, values in ns.items():
        print(f"  {label:<27} {statistics.median(values):7.0f} ns  ({min(values):.0f})")
    print(f"  {'flush to SQLite':<27} {flush_ns:7.0f} ns per row (once per step, not per range)")
    for mine, base in PAIRS:
        ratios = [ours / theirs for ours, theirs in zip(ns[mine], ns[base])]
        ratio = statistics.median(ratios)
        verdict = "met" if ratio <= 1.0 else "NOT met"
        print(f"ratio {mine} / {base} = {ratio:.2f} median of {len(ratios)} paired rounds "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target <= 1.00: {verdict})")
    held = [ours / theirs for ours, theirs in zip(ns["phase looked up once"], ns["annotate made once"])]
    why = "both push/pop" if tool_attached else "an annotate object made once does no work per block without a tool"
    print(f"ratio phase looked up once / annotate made once = {statistics.median(held):.2f} (information: {why})")


if __name__ == "__main__":
    main()
