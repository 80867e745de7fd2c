"""What-if against measured runs, not against itself: the no_straggler prediction made from a
run with a late rank, next to the measured step time of the same job run without it.

Pairs:
- the demo, 2 ranks, 12 steps: ``--straggler 1:50`` vs no straggler (both run here, one after
  the other, unless ``--demo-dirs LATE CLEAN`` gives two existing output folders);
- the torch CPU gloo pair recorded in tests/data/torch_cpu_whatif: 2 ranks, rank 1 sleeping 30 ms
  before its allreduce every step (late/) vs the same job without the sleep (clean/);
- tests/data/torch_cpu (4 ranks on this 2-core machine, rank 2 +30 ms) vs torch_cpu_nolate: more
  ranks than cores, so the ranks' speed depends on who else computes, which the replay cannot know;
- with ``--torch-live RANKS``: the 2-rank torch job run here, with and without the sleep.
Then the replay error (median over steps of |replayed − measured| / measured) on every real
trace in tests/data. Timing runs are noisy (this is why it is a benchmark and not a test): the
printed numbers are one run's.

    python benchmarks/whatif_vs_measured.py [--demo-dirs LATE CLEAN] [--no-demo] [--torch-live 2] [--repeat K]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from distprof import config as config_mod
from distprof import pipeline
from distprof.reports import findings as findings_report
from distprof.sections.whatif import WhatIf

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
REAL = ["torch_cpu/rank*.json.gz", "torch_cpu_nolate/rank*.json.gz", "kineto_h100/gloo_cuda/rank*.json.gz",
        "kineto_h100/nccl_world1/*.json.gz", "demo_ranks/rank*.sqlite", "kineto/hta_trace_filter_2rank/*.json.gz",
        "kineto/hta_nccl_parser_config_1of2/*.json.gz", "kineto/hta_negative_queue_1of16/*.json.gz",
        "kineto/hta_trace_diff_control_1of8/*.json.gz", "torch_cpu_whatif/late/rank*.json.gz",
        "torch_cpu_whatif/clean/rank*.json.gz"]
TARGET = 0.15


def whatif_of(paths: list[Path]) -> WhatIf:
    """The merge's whatif (the same path as ``distprof merge``)."""
    return pipeline.merge_files(sorted(paths), config_mod.load()).whatif


def run_demo(out: Path, straggler: str | None) -> Path:
    command = [sys.executable, "-m", "distprof", "demo", "--ranks", "2", "--steps", "12", "--out", str(out)]
    if straggler:
        command += ["--straggler", straggler]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def compare(label: str, late: list[Path], clean: list[Path]) -> str:
    """One row: predicted (no_straggler from the late run) vs measured (the clean run)."""
    late_what, clean_what = whatif_of(late), whatif_of(clean)
    row = next(r for r in late_what.scenarios if r.name == "no_straggler")
    measured = clean_what.measured_step_ns
    if not row.applies:
        why = findings_report.text(row.why)  # a Reason until worded
        return f"{label:<34} late run {late_what.measured_step_ns / 1e6:8.2f} ms   no_straggler: {why}"
    predicted = row.predicted_step_ns
    error = (predicted - measured) / measured
    verdict = "within" if abs(error) <= TARGET else "OUTSIDE"
    return (f"{label:<34} late run {late_what.measured_step_ns / 1e6:8.2f} ms   predicted without rank "
            f"{row.rank} {predicted / 1e6:8.2f} ms   measured without {measured / 1e6:8.2f} ms   "
            f"error {100 * error:+6.1f}% ({verdict} {100 * TARGET:.0f}%)")


TORCH_JOB = ["--active", "12", "--width", "256", "--depth", "6", "--batch", "256", "--micro", "4", "--bucket"]


def run_torch(out: Path, ranks: int, late_ms: float) -> Path:
    """tests/data/torch_cpu/make_traces.py under torchrun: ``ranks`` ranks, 12 profiled steps of 4
    micro-batches through a 6-layer MLP whose working set stays in each core's cache, the last
    rank sleeping ``late_ms`` before its pair's allreduce every step. One thread per rank: on this
    2-core machine, 2 ranks have a core each (more ranks contend for the cores, which the replay
    cannot know)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
               str(DATA / "torch_cpu" / "make_traces.py"), str(out), "--late-ms", str(late_ms),
               "--late-rank", str(ranks - 1), *TORCH_JOB]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-dirs", nargs=2, metavar=("LATE", "CLEAN"), default=None)
    parser.add_argument("--no-demo", action="store_true", help="skip the demo pair")
    parser.add_argument("--torch-live", type=int, default=0, metavar="RANKS",
                        help="also run the torch CPU job here (RANKS ranks, 12 steps) with and without the late rank")
    parser.add_argument("--repeat", type=int, default=1, metavar="K",
                        help="run each live pair (demo, torch) K times: one row per pair run")
    args = parser.parse_args()
    print("no_straggler prediction vs the measured run without the straggler")
    if args.demo_dirs:
        late, clean = (Path(d) for d in args.demo_dirs)
        print(compare("demo 2 ranks, --straggler 1:50", list(late.glob("rank*.sqlite")),
                      list(clean.glob("rank*.sqlite"))))
    for _ in range(0 if args.no_demo or args.demo_dirs else args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            late, clean = run_demo(Path(tmp) / "late", "1:50"), run_demo(Path(tmp) / "clean", None)
            print(compare("demo 2 ranks, --straggler 1:50", list(late.glob("rank*.sqlite")),
                          list(clean.glob("rank*.sqlite"))))
    print(compare("torch CPU gloo 2 ranks (recorded)", list(DATA.glob("torch_cpu_whatif/late/rank*.json.gz")),
                  list(DATA.glob("torch_cpu_whatif/clean/rank*.json.gz"))))
    print(compare("torch CPU gloo 4 ranks on 2 cores", list(DATA.glob("torch_cpu/rank*.json.gz")),
                  list(DATA.glob("torch_cpu_nolate/rank*.json.gz"))))
    for _ in range(args.repeat if args.torch_live else 0):
        with tempfile.TemporaryDirectory() as tmp:
            late = run_torch(Path(tmp) / "late", args.torch_live, 30)
            clean = run_torch(Path(tmp) / "clean", args.torch_live, 0)
            print(compare(f"torch CPU gloo live, {args.torch_live} ranks", list(late.glob("rank*.json.gz")),
                          list(clean.glob("rank*.json.gz"))))
    print("\nreplay error (median over steps; max) on the real traces")
    for pattern in REAL:
        what = whatif_of(list(DATA.glob(pattern)))
        print(f"  {pattern:<48} steps {what.steps:>2}  median {100 * what.replay_error:.4f}%  "
              f"max {100 * what.replay_error_max:.4f}%" + (f"  note: {findings_report.text(what.notes[0])[:90]}..."
                                                          if what.notes else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
