"""`distprof merge` of one Kineto rank against the floor its dependencies set, measured in one run (issue 58).

The floor is a whole process that does only what the overlap figure needs, with what distprof already
installs: gunzip with isal, decode each event into the minimal msgspec struct issue 58 names (cat, name,
pid, tid, ts, dur, and an args struct of one field, correlation: what places a kernel on its rank, lane
and launch; every other field skipped), and the union of the GPU kernels, of the communication kernels
(NCCL's) and their intersection with numpy (one sort and a cumulative max each). Its overlap figure is
printed beside distprof's, so both did the same job. distprof runs as a user runs it: ``python -m
distprof merge TRACE -o OUT`` (report.html included).

The two commands run in turn (floor, distprof, floor, distprof, ...) for ``--rounds`` pairs, each a fresh
process; wall and CPU time of each (the CPU of its waited-for children: getrusage). The ratio
distprof / floor is taken pair by pair, so a drift of the machine's speed cancels, and its median
printed. Target (issue 58): <= 1.6x the floor on a 216k-event rank.

    python benchmarks/merge_floor.py [TRACE.json.gz | FOLDER] [--rounds 5]
    # a FOLDER: its Kineto traces, one a rank, read in turn by the floor and merged by distprof
    # default: tests/data/kineto/hta_trace_diff_control_1of8/control.json.gz (HTA's, 109k events)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "kineto" / "hta_trace_diff_control_1of8" / "control.json.gz"


class Args(msgspec.Struct, gc=False):
    """The one arg the floor reads: a GPU event's link to its launch."""

    correlation: int | None = None


class Event(msgspec.Struct, gc=False):
    """The fields of a trace event issue 58's floor decodes; the others are skipped undecoded."""

    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]  # noqa: N815 - the Kineto field's name


def floor(path: str) -> None:
    """The floor's own process: for each trace (one, or a folder's), read, decode the fields issue 58 names,
    overlap of communication and computation; one JSON line of the figures."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as distprof does: no BLAS thread pool, neither uses BLAS
    import numpy as np
    from isal import igzip

    def union(lo: np.ndarray, hi: np.ndarray) -> float:
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], np.maximum.accumulate(hi[order])
        gaps = np.maximum(lo[1:] - hi[:-1], 0.0)
        return float(hi[-1] - lo[0] - gaps.sum()) if lo.size else 0.0

    figures = {"events": 0, "kernels": 0, "overlap_ratios": []}
    for trace in traces_of(path):
        with open(trace, "rb") as handle:
            raw = handle.read()
        events = msgspec.json.decode(igzip.decompress(raw) if trace.endswith(".gz") else raw, type=Trace).traceEvents
        kernels = [e for e in events if e.cat == "kernel"]
        start = np.fromiter((e.ts for e in kernels), np.float64, len(kernels))
        end = start + np.fromiter((e.dur for e in kernels), np.float64, len(kernels))
        comm = np.fromiter((e.name.startswith("nccl") for e in kernels), bool, len(kernels))
        comm_us = union(start[comm], end[comm])
        overlap_us = comm_us + union(start[~comm], end[~comm]) - union(start, end)
        figures["events"] += len(events)
        figures["kernels"] += len(kernels)
        figures["overlap_ratios"].append(overlap_us / comm_us if comm_us else None)
    print(json.dumps(figures))


def traces_of(path: str) -> list[str]:
    """The trace itself, or a folder's Kineto traces (one a rank), by name."""
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith((".json", ".json.gz")))


def timed(command: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the finished process and its children, stdout) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)  # the floor's own process
    args = parser.parse_args(argv)
    if args.floor:
        floor(args.trace)
        return 0
    pairs = []
    with tempfile.TemporaryDirectory(prefix="merge_floor_") as scratch:
        out = Path(scratch) / "out"
        merge = [sys.executable, "-m", "distprof", "merge", args.trace, "-o", str(out)]
        low = [sys.executable, __file__, "--floor", args.trace]
        timed(low), timed(merge)  # warm-up: the page cache and the bytecode
        for _ in range(args.rounds):  # one pair a round, in turn
            pairs.append((timed(low), timed(merge)))
        figures = json.loads(pairs[-1][0][2])
        summary = json.loads((out / "summary.json").read_text())
    def percent(ratios: list) -> str:  # the ranks' overlap figures, in order
        return " ".join(f"{100 * (ratio or 0):.1f}%" for ratio in sorted(ratio or 0 for ratio in ratios))

    print(f"{args.trace}: {len(traces_of(args.trace))} trace(s), {figures['events']:,} events, "
          f"{figures['kernels']:,} kernels; overlap of communication with computation: floor "
          f"{percent(figures['overlap_ratios'])}, distprof "
          f"{percent([rank.get('overlap_ratio') for rank in summary['ranks']])}")
    for index, what in ((0, "wall"), (1, "CPU")):
        lows = [pair[0][index] for pair in pairs]
        highs = [pair[1][index] for pair in pairs]
        ratios = [high / low for (high, low) in zip(highs, lows)]
        print(f"  {what}: floor {statistics.median(lows):.3f} s, distprof merge {statistics.median(highs):.3f} s "
              f"(median of {len(pairs)}); distprof / floor {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target <= 1.6x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
