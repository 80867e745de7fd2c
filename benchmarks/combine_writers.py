"""Rank 0's combine of a many-rank job and every writer after it, measured in one run (issue 56: "a 512-rank
combine with every writer no slower than today").

The ranks are copies of the 4 real ranks in tests/data/torch_cpu (torch CPU, gloo, DDP), reduced once and
renumbered (merge_scale.copy_result) up to ``--ranks``; then, timed: pipeline.combine, summary.json with
ranks.csv and collectives.csv (export.write_summary), the text report (text.render) and report.html
(html.write_report). Each round is a fresh process. With ``--against TREE`` (another checkout of distprof,
e.g. ``git worktree add /tmp/old REV``) the two trees run in turn, round by round, and the ratio of their
medians per stage is printed (this tree / the other: below 1 is faster).

    python benchmarks/combine_writers.py [--ranks 512] [--rounds 3] [--against TREE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("combine", "summary_json", "text", "html", "total")


def child(tree: Path, ranks: int) -> None:
    """One measured run, in this process, of the distprof in ``tree``: prints the stages' seconds as JSON."""
    sys.path[:0] = [str(tree), str(tree / "benchmarks")]
    from merge_scale import copy_result

    from distprof import config as config_mod
    from distprof import pipeline, sources
    from distprof.reports import export, html, text
    config = config_mod.load(None)
    paths = sorted((tree / "tests" / "data" / "torch_cpu").glob("rank*.json.gz"))
    reduced = [pipeline.reduce_rank(trace, config) for path in paths for trace in sources.read(path, config)]
    results = [copy_result(reduced[rank % len(reduced)], rank, ranks) for rank in range(ranks)]
    out = Path(tempfile.mkdtemp(prefix="distprof-combine-"))
    marks = [time.perf_counter()]
    summary = pipeline.combine(results, config, source="kineto", world_size=ranks)
    marks.append(time.perf_counter())
    export.write_summary(summary, out)
    marks.append(time.perf_counter())
    text.render(summary, "ms")
    marks.append(time.perf_counter())
    html.write_report(summary, out, "ms")
    marks.append(time.perf_counter())
    seconds = [b - a for a, b in zip(marks, marks[1:])] + [marks[-1] - marks[0]]
    print(json.dumps(dict(zip(STAGES, seconds))))


def measured(tree: Path, ranks: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", str(tree), "--ranks", str(ranks)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None, help="another distprof checkout to compare with")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.ranks)
        return 0
    trees = [ROOT] + ([args.against.resolve()] if args.against else [])
    runs: dict[Path, list[dict]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:  # in turn, so a drift of the machine's speed falls on both
            runs[tree].append(measured(tree, args.ranks))
    medians = {tree: {stage: statistics.median(run[stage] for run in runs[tree]) for stage in STAGES}
               for tree in trees}
    print(f"{args.ranks} ranks (copies of tests/data/torch_cpu), median of {args.rounds} rounds, seconds:")
    for tree in trees:
        print(f"  {str(tree):<40} " + "  ".join(f"{stage} {medians[tree][stage]:.3f}" for stage in STAGES))
    if args.against:
        ratios = {stage: medians[ROOT][stage] / medians[trees[1]][stage] for stage in STAGES}
        print("  this tree / the other:                  " + "  ".join(f"{stage} {ratios[stage]:.2f}x"
                                                                    for stage in STAGES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
