"""Per-range cost of `distprof.phase` (NVTX + recording) versus a bare `nvtx.annotate` and an
empty `with` block, measured in one run, printed as ratios. Targets: phase <= 1.0x the simplest
`nvtx.annotate("forward")` (the form most users write) and <= 1.0x the colour+domain form
`nvtx.annotate("forward", color="green", domain="distprof")`.

Each variant runs in interleaved rounds (a round: every variant once, back to back). The verdict
is the median over rounds of each round's own ratio (paired: a busy moment slows both sides of a
ratio alike), with the spread of the ratios; the per-variant figures are each one's best round.

    python benchmarks/collector_overhead.py [--rounds 30] [--per-round 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit

import nvtx

import distprof
from distprof.collector import Collector


class _Empty:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=20000)
    args = parser.parse_args()

    empty = _Empty()

    def empty_with():
        with empty:
            pass

    def simple_annotate():
        with nvtx.annotate("forward"):
            pass

    def bare_annotate():
        with nvtx.annotate("forward", color="green", domain="distprof"):
            pass

    def distprof_phase():
        with distprof.phase("forward"):
            pass

    # the class used when a tool (nsys) is attached: same work plus the real NVTX push/pop calls
    with_nvtx_calls = distprof.annotate.Range("forward", "PHASE", "range")

    def distprof_phase_nvtx_calls():
        with with_nvtx_calls:
            pass

    with tempfile.TemporaryDirectory() as tmp:
        collector = Collector(f"{tmp}/rank0.sqlite", rank=0, world_size=1)
        collector.activate()
        variants = {"empty with": empty_with, "nvtx.annotate": simple_annotate, "annotate+colour": bare_annotate,
                    "distprof.phase": distprof_phase,
                    "phase+NVTX calls": distprof_phase_nvtx_calls}
        best = dict.fromkeys(variants, float("inf"))
        paired: dict[str, list[float]] = {"nvtx.annotate": [], "annotate+colour": []}
        for _ in range(args.rounds):
            this_round = {}
            for name, func in variants.items():
                this_round[name] = timeit.timeit(func, number=args.per_round) / args.per_round * 1e9
                best[name] = min(best[name], this_round[name])
            for base, ratios in paired.items():
                ratios.append(this_round["distprof.phase"] / this_round[base])
            collector.flush()  # one step's worth of rows to disk, as prof.step() does
        rows_before = len(collector.rows)
        timer = timeit.default_timer
        for _ in range(1000):
            distprof_phase()
        started = timer()
        flushed = collector.flush()
        flush_ns_per_row = (timer() - started) / max(flushed, 1) * 1e9
        collector.close()

    tool_attached = not type(nvtx.get_domain("distprof")).__name__.startswith("Dummy")
    nvtx_state = "a tool is attached" if tool_attached else "no tool attached (NVTX calls are no-ops, as outside nsys)"
    print(f"NVTX: {nvtx_state}; best of {args.rounds} rounds x {args.per_round} ranges; rows pending {rows_before}")
    for name, ns in best.items():
        print(f"  {name:<17} {ns:8.0f} ns per range")
    print(f"  flush to SQLite  {flush_ns_per_row:8.0f} ns per row (once per step, not per range)")
    for base, form in (("nvtx.annotate", 'nvtx.annotate("forward")'),
                       ("annotate+colour", 'nvtx.annotate("forward", color=, domain=)')):
        ratios = sorted(paired[base])
        ratio = statistics.median(ratios)
        quartiles = statistics.quantiles(ratios, n=4)
        verdict = "met" if ratio <= 1.0 else "NOT met"
        print(f"ratio distprof.phase / {form} = {ratio:.2f} median of {len(ratios)} paired rounds "
              f"(quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}; "
              f"target <= 1.00: {verdict})")
    print(f"ratio distprof.phase / empty with    = {best['distprof.phase'] / best['empty with']:.2f}")
    print(f"ratio phase+NVTX calls / annotate+colour = {best['phase+NVTX calls'] / best['annotate+colour']:.2f}"
          "  (the path taken under nsys, where annotate's own calls also do real work)")


if __name__ == "__main__":
    main()
