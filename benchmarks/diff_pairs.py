"""How often `distprof diff` calls two runs of one configuration significantly different (issue 59: "20
pairs of runs of one config: at most 1 called significant; a real 10% change still called so"), measured
in one run of this script on real demo jobs:

- --pairs pairs of `distprof demo --ranks 2 --steps 16 --comm overlap` (the same config twice), each pair
  diffed (`distprof diff A B`): how many are called significant, and the smallest change each pair could
  tell apart (diff.json `step_time.smallest_ns`);
- --changed pairs whose after run is made slower by a real --change of the clean step (`--straggler 0:MS`:
  rank 0 sleeps that long in forward every step; both ranks wait for it): how many are called so.

    python benchmarks/diff_pairs.py [--pairs 20] [--changed 5] [--change 0.10] [--steps 16] [--demo-config YAML]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def demo(out: Path, steps: int, straggler: str | None = None, config: str | None = None) -> None:
    command = [sys.executable, "-m", "distprof", "demo", "--ranks", "2", "--steps", str(steps), "--comm", "overlap",
               "--out", str(out), *(["--straggler", straggler] if straggler else []),
               *(["--config", config] if config else [])]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)


def diffed(before: Path, after: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "distprof", "diff", str(before), str(after), "-o", str(out)], check=True,
                   capture_output=True, text=True, timeout=600)
    return json.loads((out / "diff.json").read_text())["step_time"]


def percents(steps: list[dict]) -> str:
    return ", ".join(f"{100 * (s['relative'] or 0):+.1f}%" for s in steps)


def verdicts(steps: list[dict]) -> str:
    return "; ".join(
        f"{100 * (s['relative'] or 0):+.1f}% {'significant' if s['significant'] else s['reason']}"
        + (f" {s['machine_change_ns'] / s['delta_ns']:+.2f}" if s.get("machine_change_ns") is not None
           and s.get("delta_ns") else "") for s in steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--changed", type=int, default=5)
    parser.add_argument("--change", type=float, default=0.10)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--demo-config", default=None, metavar="YAML",
                        help="the demo's config, e.g. configs/demo_device_8ms.yaml (compute as a GPU job's host "
                             "sees it: waits that use no CPU, so the 2 ranks do not take each other's cores)")
    args = parser.parse_args(argv)
    same, changed = [], []
    with tempfile.TemporaryDirectory(prefix="diff_pairs_") as scratch:
        root = Path(scratch)
        for k in range(args.pairs):  # one iteration per pair of runs of one config
            demo(root / f"a{k}", args.steps, config=args.demo_config)
            demo(root / f"b{k}", args.steps, config=args.demo_config)
            same.append(diffed(root / f"a{k}", root / f"b{k}", root / f"d{k}"))
        clean_ns = statistics.median(s["before_median_ns"] for s in same)
        sleep_ms = round(args.change * clean_ns / 1e6, 1)
        for k in range(args.changed):  # one iteration per pair with a real change
            demo(root / f"c{k}", args.steps, config=args.demo_config)
            demo(root / f"s{k}", args.steps, f"0:{sleep_ms:g}", config=args.demo_config)
            changed.append(diffed(root / f"c{k}", root / f"s{k}", root / f"e{k}"))
    called = sum(s["significant"] for s in same)
    config = f" --config {args.demo_config}" if args.demo_config else ""
    print(f"{args.pairs} pairs of one config (demo --ranks 2 --steps {args.steps} --comm overlap{config}): "
          f"{called} called significant (target <= 1); changes {percents(same)}")
    print("  each pair: change, verdict (reason), share of it the host counters explain: " + verdicts(same))
    smallest = [s["smallest_ns"] / s["before_median_ns"] for s in same if s.get("smallest_ns")]
    if smallest:
        print(f"smallest change a pair can tell apart: median {100 * statistics.median(smallest):.1f}% of the step "
              f"(min {100 * min(smallest):.1f}%, max {100 * max(smallest):.1f}%)")
    print(f"{args.changed} pairs with a real change (rank 0 sleeping {sleep_ms:g} ms a step, {100 * args.change:.0f}% "
          f"of the clean step {clean_ns / 1e6:.1f} ms): {sum(s['significant'] for s in changed)} called significant; "
          f"changes {percents(changed)}")
    print("  each pair: change, verdict (reason), share of it the host counters explain: " + verdicts(changed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
