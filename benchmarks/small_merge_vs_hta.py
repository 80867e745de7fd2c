"""The everyday job: merge 8 small real Kineto ranks (a recommendation model under DDP, made by
``benchmarks/make_real_job.py``) with ``distprof merge`` (report.html included), against HTA's ``TraceAnalysis`` load +
``get_comm_comp_overlap()`` on the same folder. Targets: distprof with HTML >= 3x faster than HTA;
the HTML report <= 20% of the merge.

Every measurement is a whole fresh process (interpreter start and imports included, as a user
sees it). The variants run interleaved, in a rotated order each round, so a busy machine slows
all alike; medians over the rounds are compared. Variants:

- ``distprof merge DIR -o OUT``            (summary.json, text, report.html)
- ``distprof merge DIR -o OUT --no-html``  (the HTML share is the difference of the two)
- HTA load + overlap, in HTA's own venv (``benchmarks/_hta.py``); skipped with a message if absent.

``--baseline DIR`` adds the same two distprof merges run from another checkout's ``distprof/``
package (e.g. ``git archive main distprof | tar -x -C DIR``), interleaved too: before/after in one run.

One more child runs the merge in-process with a timer per stage (imports, read + reduce, combine,
text, report.html), to show where a merge's time goes.

    python benchmarks/small_merge_vs_hta.py [--traces DIR] [--rounds 5] [--no-hta] [--baseline DIR]
    python benchmarks/small_merge_vs_hta.py --synthetic [--ranks 8] [--events 25000]   (synthetic ranks instead)

``--traces`` defaults to ``benchmarks/.traces/recsys8`` (``python benchmarks/make_real_job.py`` makes it); any
folder of one Kineto trace per rank works, e.g. HTA's 2-rank ``tests/data/trace_filter``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_TRACES = Path(__file__).resolve().parent / ".traces" / "recsys8"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bytecode import fresh  # noqa: E402
from _hta import hta_python  # noqa: E402
from _memory import children_peak_rss_mib, peak_rss_mib  # noqa: E402


def make_job(folder: Path, ranks: int, events: int) -> int:
    """``ranks`` Kineto traces (one per rank, distributedInfo.rank set) in ``folder``; total events."""
    sys.path.insert(0, str(ROOT / "tests"))
    import kineto_fixtures
    total = 0
    for rank in range(ranks):
        _, written = kineto_fixtures.synthetic_job(folder / f"rank{rank}.pt.trace.json.gz", events, rank=rank,
                                                   seed=rank)
        total += written
    return total


def child_hta(folder: str) -> dict:
    """HTA load + overlap, as its users call it (runs inside HTA's venv); with the peak RSS of
    this process and of its largest parsing worker (HTA forks a pool for more than one rank)."""
    import logging

    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.WARNING)  # HTA logs every parsing stage as a warning
    started = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    return {"seconds": time.perf_counter() - started, "ranks": len(overlap), "peak_rss_mib": peak_rss_mib(),
            "workers_peak_rss_mib": children_peak_rss_mib()}


def child_stages(folder: str, out: str) -> dict:
    """A whole merge in this process, timed per stage (the CLI's own steps, in its order)."""
    started = time.perf_counter()
    from distprof import config as config_mod
    from distprof import pipeline, sources
    from distprof.reports import export, html, text
    imported = time.perf_counter()
    config = config_mod.load(None)
    paths = sources.expand([folder])
    results = [pipeline.reduce_rank(trace, config) for path in paths for trace in sources.read(path, config)]
    reduced = time.perf_counter()
    summary = pipeline.combine(results, config, source="kineto")
    combined = time.perf_counter()
    export.write_summary(summary, Path(out))
    text.render(summary, "ms")
    written = time.perf_counter()
    html.write_report(summary, Path(out), "ms")
    done = time.perf_counter()
    return {"imports": imported - started, "read_reduce": reduced - imported, "combine": combined - reduced,
            "summary_text": written - combined, "html": done - written, "total": done - started}


def timed(command: list[str], cwd: str, baseline: str | None = None) -> float:
    """Wall time of a whole process; ``baseline``: that folder's distprof package instead."""
    env = dict(os.environ, PYTHONPATH=baseline) if baseline else None
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-3000:]}")
    return seconds


def child_json(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run_rounds(variants: dict[str, tuple], rounds: int, cwd: str) -> dict[str, list[float]]:
    """Whole-process wall times, interleaved, in a rotated order each round; a variant is
    (command, baseline folder or None)."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        order = names[index % len(names):] + names[:index % len(names)]
        for name in order:
            times[name].append(timed(*variants[name][:1], cwd, variants[name][1]))
    return times


def report(times: dict[str, list[float]], stages: dict, hta_note: str) -> None:
    median = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"  {name:<24} median {median[name]:6.3f} s   runs {' '.join(f'{v:.3f}' for v in values)}")
    with_html, without = median["distprof merge"], median["distprof merge --no-html"]
    share = (with_html - without) / with_html
    print(f"HTML share of the merge (whole processes, medians): {100 * share:.1f}%   (target <= 20%)")
    print("one merge in-process, per stage: " + ", ".join(f"{k} {v:.3f} s" for k, v in stages.items()))
    print(f"HTML share in-process: {100 * stages['html'] / stages['total']:.1f}% of {stages['total']:.3f} s")
    if "baseline merge" in median:
        base, base_plain = median["baseline merge"], median["baseline merge --no-html"]
        print(f"baseline: merge {base:.3f} s, --no-html {base_plain:.3f} s, HTML share "
              f"{100 * (base - base_plain) / base:.1f}%; speed-up with HTML {base / with_html:.2f}x, "
              f"--no-html {base_plain / without:.2f}x")
        if "HTA load + overlap" in median:
            print(f"baseline ratio HTA / merge (with HTML): {median['HTA load + overlap'] / base:.2f}x")
    if "HTA load + overlap" not in median:
        print(hta_note)
        return
    hta = median["HTA load + overlap"]
    print(f"ratio HTA / distprof merge (with HTML): {hta / with_html:.2f}x   (target >= 3x)")
    print(f"ratio HTA / distprof merge --no-html:   {hta / without:.2f}x")
    pairs = [h / d for h, d in zip(times["HTA load + overlap"], times["distprof merge"])]
    print(f"  per-round ratios (HTA / with HTML): {' '.join(f'{p:.2f}' for p in pairs)}; "
          f"median {statistics.median(pairs):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(REAL_TRACES), help="folder of real Kineto traces, one per rank")
    parser.add_argument("--synthetic", action="store_true", help="synthetic ranks (--ranks, --events) instead")
    parser.add_argument("--ranks", type=int, default=8, help="with --synthetic")
    parser.add_argument("--events", type=int, default=25_000, help="with --synthetic: trace events per rank (about)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-hta", action="store_true", help="skip HTA even when it is installed")
    parser.add_argument("--baseline", default=None, help="folder holding another checkout's distprof/ package")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tool, *rest = args.child
        print(json.dumps(child_hta(*rest) if tool == "hta" else child_stages(*rest)))
        return

    fresh(args.baseline)  # before any process is timed
    if not args.synthetic and not Path(args.traces).is_dir():
        sys.exit(f"no traces in {args.traces}: make them with `python benchmarks/make_real_job.py --out "
                 f"{args.traces}`, or pass --traces DIR or --synthetic")
    with tempfile.TemporaryDirectory(prefix="distprof-small-merge-") as tmp:
        folder, out = _traces(args, Path(tmp))
        distprof = [sys.executable, "-m", "distprof", "merge", str(folder), "-o", str(out)]
        variants = {"distprof merge": (distprof, None), "distprof merge --no-html": (distprof + ["--no-html"], None)}
        if args.baseline:
            baseline = str(Path(args.baseline).resolve())
            variants["baseline merge"] = (distprof, baseline)
            variants["baseline merge --no-html"] = (distprof + ["--no-html"], baseline)
        python, note = (None, "HTA skipped (--no-hta)") if args.no_hta else hta_python()
        if python is not None:
            variants["HTA load + overlap"] = ([python, __file__, "--child", "hta", str(folder)], None)
            print(f"HTA from {note}")
        times = run_rounds(variants, args.rounds, tmp)
        stages = child_json([sys.executable, __file__, "--child", "stages", str(folder), str(out)])
        print(f"whole processes (load average after: {load_average()}):")
        report(times, stages, note)


def _traces(args: argparse.Namespace, tmp: Path) -> tuple[Path, Path]:
    """(the folder of rank traces, the merge's output folder), saying what the traces are."""
    out = tmp / "out"
    if args.synthetic:
        folder = tmp / "traces"
        folder.mkdir()
        total, ranks = make_job(folder, args.ranks, args.events), args.ranks
        what = "synthetic"
    else:
        folder = Path(args.traces).resolve()
        files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
        ranks, total, what = len(files), sum(_event_count(p) for p in files), f"real ({folder})"
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    print(f"{ranks} {what} Kineto ranks, {total:,} trace events in all ({total // max(ranks, 1):,} a rank), "
          f"{size:.1f} MiB; {args.rounds} interleaved rounds, load average before: {load_average()}")
    return folder, out


def _event_count(path: Path) -> int:
    """traceEvents in one Kineto file (for the header line only)."""
    import gzip
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return len(json.load(handle).get("traceEvents", []))

if __name__ == "__main__":
    main()
