"""Load + Distributed Summary of one large PyTorch profiler (Kineto) trace with distprof, versus
HTA's ``TraceAnalysis`` load + ``get_comm_comp_overlap()`` on the same file, measured in one run.
Targets (issue 26, whole processes on a real 200k+-event rank): >= 6x faster than HTA, peak RSS <= 0.6x HTA's.

The trace is real by default: HTA's own test trace tests/data/trace_diff/control (one rank of an
8-GPU job, 109k trace events; kept read-only in ../shared/data), or any file given with --trace. For
the 200k+-event target, give HTA's tests/data/df_index_resolver trace (216k events; in the
HolisticTraceAnalysis repository).
``--synthetic`` writes one instead (tests/kineto_fixtures.synthetic_job: DDP-like steps, flows,
ProfilerSteps, timestamps as PyTorch 2.x writes them or, ``--format int``, as older PyTorch did).

Each measurement runs in a fresh child process (so its peak RSS is its own): distprof
``--rounds`` times (the slowest round is used for the ratio, to stay conservative on a shared
machine), HTA once (it is slow). HTA runs in its own venv (``benchmarks/_hta.py``: a benchmark-only
dependency); without it the benchmark says so and prints distprof's own figures.

    python benchmarks/kineto_load.py [--trace PATH] [--rounds 3] [--no-hta]       # a real trace (default: HTA's)
    python benchmarks/kineto_load.py --synthetic [--events 1000000] [--format us3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import kineto_fixtures  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported (tests import merge_scale)
from _bytecode import fresh  # noqa: E402
from _hta import hta_python  # noqa: E402
from _memory import peak_rss_mib  # noqa: E402


def child_distprof(path: str) -> dict:
    from distprof import config as config_module
    from distprof import pipeline, sources
    config = config_module.load(overrides={"window": "all"})
    baseline = peak_rss_mib()
    started = time.perf_counter()
    (trace,) = sources.read(path, config)
    loaded = time.perf_counter()
    result = pipeline.reduce_rank(trace, config)
    done = time.perf_counter()
    return {"seconds": done - started, "load_seconds": loaded - started, "summary_seconds": done - loaded,
            "rows": len(trace.events), "overlap_pct": 100 * result.figures.overlap_ratio,
            "peak_rss_mb": peak_rss_mib(), "import_rss_mb": baseline}


def child_hta(path: str) -> dict:
    import logging

    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.WARNING)  # HTA logs every parsing stage as a warning
    baseline = peak_rss_mib()
    started = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=str(Path(path).parent))
    loaded = time.perf_counter()
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    done = time.perf_counter()
    return {"seconds": done - started, "load_seconds": loaded - started, "summary_seconds": done - loaded,
            "overlap_pct": float(overlap["comp_comm_overlap_pctg"].iloc[0]),
            "peak_rss_mb": peak_rss_mib(), "import_rss_mb": baseline}


def run_child(tool: str, path: Path, python: str = sys.executable) -> dict:
    """One fresh process; ``process_seconds``: its whole life (interpreter, imports, work), as a user waits."""
    command = [python, __file__, "--child", tool, str(path)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{tool} child failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_seconds": time.perf_counter() - started}


# HTA's own 109k-event test trace (tests/data/trace_diff/control in the HolisticTraceAnalysis repository)
REAL_TRACE = ROOT.parent / "shared" / "data" / "kineto" / "hta_trace_diff_control_1of8" / "control.json.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=REAL_TRACE if REAL_TRACE.exists() else None,
                        help="a real Kineto trace (default: HTA's 109k-event control trace when present)")
    parser.add_argument("--synthetic", action="store_true", help="a synthetic trace of --events instead")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("us3", "int"), default="us3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-hta", action="store_true", help="skip HTA even when it is installed")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tool, path = args.child
        print(json.dumps(child_distprof(path) if tool == "distprof" else child_hta(path)))
        return
    fresh()  # before any process is timed
    with tempfile.TemporaryDirectory(prefix="distprof-kineto-bench-") as folder:
        path = Path(folder) / "rank0.pt.trace.json.gz"
        if args.trace is not None and not args.synthetic:
            shutil.copy(args.trace, path)   # alone in its folder: HTA reads a folder
            events = len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
            print(f"real Kineto trace {args.trace}: {events:,} trace events, "
                  f"{path.stat().st_size / 2**20:.1f} MiB gzipped")
        else:
            if not args.synthetic:
                print(f"no real trace at {REAL_TRACE} (give --trace PATH): a synthetic one instead")
            started = time.perf_counter()
            path, events = kineto_fixtures.synthetic_job(path, args.events, time_format=args.format)
            print(f"synthetic Kineto trace: {events:,} trace events, ts format {args.format}, "
                  f"{path.stat().st_size / 2**20:.1f} MiB gzipped, written in {time.perf_counter() - started:.1f} s")

        rounds = [run_child("distprof", path) for _ in range(args.rounds)]
        ours = max(rounds, key=lambda r: r["seconds"])
        median = sorted(r["seconds"] for r in rounds)[len(rounds) // 2]
        print(f"distprof load + Distributed Summary, {args.rounds} fresh processes:")
        for index, r in enumerate(rounds):
            print(f"  round {index + 1}: {r['seconds']:7.2f} s (load {r['load_seconds']:.2f} s, summary "
                  f"{r['summary_seconds']:.2f} s), {events / r['seconds'] / 1e6:.2f} M events/s, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MiB")
        print(f"  {ours['rows']:,} event rows; overlap ratio {ours['overlap_pct']:.4f} %; "
              f"RSS after imports {ours['import_rss_mb']:.0f} MiB")

        python, where = (None, "HTA skipped (--no-hta)") if args.no_hta else hta_python()
        if python is None:
            print(where)
            return
        theirs = run_child("hta", path, python)
        if "error" in theirs:
            print(f"HTA failed on this trace, no comparison: {theirs['error']}")
            return
        print("HTA TraceAnalysis + get_comm_comp_overlap, 1 fresh process:")
        print(f"  {theirs['seconds']:7.2f} s (load {theirs['load_seconds']:.2f} s, overlap "
              f"{theirs['summary_seconds']:.2f} s), {events / theirs['seconds'] / 1e6:.3f} M events/s, "
              f"peak RSS {theirs['peak_rss_mb']:.0f} MiB; overlap {theirs['overlap_pct']:.2f} %; "
              f"RSS after imports {theirs['import_rss_mb']:.0f} MiB")
        print(f"speed ratio HTA time / distprof slowest round: {theirs['seconds'] / ours['seconds']:.1f}x   "
              f"(in-process); / median round: {theirs['seconds'] / median:.1f}x")
        whole = sorted(r["process_seconds"] for r in rounds)[len(rounds) // 2]
        print(f"whole processes (interpreter + imports + work): HTA {theirs['process_seconds']:.2f} s, distprof "
              f"median {whole:.2f} s: {theirs['process_seconds'] / whole:.1f}x (target >= 6x)")
        print(f"peak RSS ratio distprof / HTA: {ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}   (target <= 0.6)")
        agree = round(ours["overlap_pct"], 2) == theirs["overlap_pct"]
        print(f"overlap %: distprof {ours['overlap_pct']:.4f}, HTA {theirs['overlap_pct']:.2f} "
              f"({'equal' if agree else 'different'} at HTA's 2 decimals)")
        if not agree:
            print("  HTA rounds fractional µs (start up, end down) and leaves out the last ProfilerStep's "
                  "kernels; distprof is exact to the ns (--format int avoids the rounding)")


if __name__ == "__main__":
    main()
