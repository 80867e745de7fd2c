"""Score a rule change on the same runs: every run that ``verdict_matrix.py --keep DIR --json RECORD``
kept is merged again with this checkout and, with ``--baseline DIR``, with another checkout's
``distprof/`` package (e.g. ``git archive REV distprof | tar -x -C DIR``); both are scored as the matrix
scores them, and the runs whose verdict changed are listed.

Why: on a shared machine two runs of the same job differ as much as two versions of a rule do (a
4-rank job on 2 cores: waits of 30-90 ms a step in clean runs), so a new matrix run after a change
cannot tell what the change did. The same rank files, merged by both, can.

    python benchmarks/rescore_matrix.py RECORD.json KEPT_DIR [RECORD.json KEPT_DIR ...]
                                        [--baseline DIR] [--config YAML] [--jobs tpdp,pp4] [--table]

A kept run is the folder ``NNN_job_kind_onset`` of the NNN-th run of its record: the demo's
``rank*.sqlite`` files, or a torch job's ``traces/rank*.pt.trace.json.gz``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdict_matrix import RANKS, Run, measure, read_verdict, report, scores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def kept_runs(record: Path, kept: Path, jobs: set[str] | None) -> list[tuple[Run, list[Path]]]:
    """(the run as recorded, its rank files) for every kept run of ``record`` that did not fail."""
    known = {f.name for f in fields(Run)}
    folders = {p.name.split("_", 1)[0]: p for p in kept.iterdir() if p.is_dir()}
    out = []
    recorded = json.loads(record.read_text())
    RANKS.update(recorded.get("ranks") or {})  # the world sizes the runs had (--ranks): who had a core each
    for index, raw in enumerate(recorded["runs"]):
        run, folder = Run(**{k: v for k, v in raw.items() if k in known}), folders.get(f"{index:03d}")
        if folder is None or run.error or (jobs and run.job not in jobs):
            continue
        files = sorted(folder.glob("rank*.sqlite")) or sorted((folder / "traces").glob("rank*.pt.trace.json.gz"))
        if files:
            out.append((run, files))
    return out


def verdict(run: Run, files: list[Path], tree: Path, config: str | None, out: Path) -> Run:
    """The run with the verdict of ``tree``'s distprof on its files (read as the matrix reads it: the
    straggler, and a router skew's expert_imbalance finding), its cost error measured again (against the
    effect recorded with the run: the step times and its paired clean step)."""
    command = [sys.executable, "-m", "distprof", "merge", *map(str, files), "-o", str(out), "--no-html"]
    done = subprocess.run(command + (["--config", config] if config else []), capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), env=dict(os.environ, PYTHONPATH=str(tree)))
    if done.returncode != 0:
        return replace(run, error=done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "merge failed")
    again = replace(run, cost_error=None, measured_ns=None, error=None, said=[])
    read_verdict(again, out)
    measure(again, run.clean_step_ns)
    return again


def rescore(runs: list[tuple[Run, list[Path]]], trees: dict[str, Path], config: str | None,
            scratch: Path) -> dict[str, list[Run]]:
    """Per tree label, every run with that tree's verdict; merges run a core each."""
    tasks = [(label, index, run, files) for label in trees for index, (run, files) in enumerate(runs)]

    def one(task: tuple) -> Run:
        label, index, run, files = task
        return verdict(run, files, trees[label], config, scratch / label / f"{index:03d}")

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        done = list(pool.map(one, tasks))
    return {label: done[i * len(runs):(i + 1) * len(runs)] for i, label in enumerate(trees)}


def line(label: str, runs: list[Run]) -> str:
    s = scores(runs)
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.0f}%"
    return (f"{label}: recall {s['recall'][0]}/{s['recall'][1]}, precision {s['precision'][0]}/{s['precision'][1]}, "
            f"clean runs naming a rank {s['false_per_clean'][0]}/{s['false_per_clean'][1]}, one-offs named "
            f"{s['once_named'][0]}/{s['once_named'][1]}, failed {s['failed']}; cost error median "
            f"{pct(s['cost_error_median'])} ({s['cost_errors']} verdicts; faults >= 10%: "
            f"{pct(s['cost_error_big_median'])}; within the run: {pct(s['cost_error_within_median'])}; against "
            f"the delay injected: {pct(s['cost_vs_injected_median'])}; router skews: "
            f"{pct(s['router_skew_cost_error_median'])})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", metavar="RECORD.json KEPT_DIR")
    parser.add_argument("--baseline", type=Path, default=None, help="a folder holding another distprof/ package")
    parser.add_argument("--config", default=None, help="a YAML config both merges use")
    parser.add_argument("--jobs", default=None, help="only these jobs (comma-separated)")
    parser.add_argument("--table", action="store_true", help="also print the matrix table of this checkout's verdicts")
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give RECORD.json KEPT_DIR pairs")
    jobs = set(args.jobs.split(",")) if args.jobs else None
    runs = [item for record, kept in zip(args.pairs[::2], args.pairs[1::2])
            for item in kept_runs(Path(record), Path(kept), jobs)]
    trees = {**({"baseline": args.baseline} if args.baseline else {}), "this checkout": ROOT}
    with tempfile.TemporaryDirectory(prefix="rescore_") as scratch:
        by_tree = rescore(runs, trees, args.config, Path(scratch))
    print(f"{len(runs)} kept runs, merged again by {len(trees)} version(s)")
    for label, rescored in by_tree.items():
        print(line(label, rescored))
    if args.baseline:
        for before, after in zip(by_tree["baseline"], by_tree["this checkout"]):
            if before.named != after.named:
                fault = "clean" if before.kind == "clean" else f"{before.kind} {before.spec}"
                print(f"  changed: {before.job} {fault}: expected {before.expected}, "
                      f"named {before.named} -> {after.named}")
    if args.table:
        print(report(by_tree["this checkout"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
