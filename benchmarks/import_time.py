"""Start-up cost: ``import distprof`` and ``distprof --help`` against a bare ``import numpy``, each in
a fresh interpreter, interleaved, medians compared. Targets: ``import distprof`` loads neither
pandas nor matplotlib (every rank that only annotates would pay for the analysis stack);
``distprof --help`` <= 2x ``python -c "import numpy"``.

``--baseline DIR`` also times another checkout's ``distprof/`` package (PYTHONPATH=DIR), interleaved.

    python benchmarks/import_time.py [--rounds 15] [--baseline DIR]
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

HEAVY = ("pandas", "matplotlib", "tabulate", "msgspec", "mpi4py", "yaml", "nvtx", "numpy")
VARIANTS = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "import distprof": ["-c", "import distprof"],
    "distprof --help": ["-m", "distprof", "--help"],
    "annotating rank": ["-c", "import distprof; distprof.phase; distprof.Profiler"],  # what a training script loads
}


def loaded_modules() -> dict:
    """Which heavy packages ``import distprof`` brings in, and how many distprof modules."""
    code = ("import json, sys, distprof; m = sys.modules; "
            f"print(json.dumps({{'heavy': [h for h in {HEAVY!r} if h in m], "
            "'distprof': sorted(k for k in m if k.split('.')[0] == 'distprof')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", default=None, help="folder holding another checkout's distprof/ package")
    args = parser.parse_args()
    variants = {name: (argv, None) for name, argv in VARIANTS.items()}
    if args.baseline:
        base = str(Path(args.baseline).resolve())
        for name in ("import distprof", "distprof --help", "annotating rank"):
            variants[f"{name} (baseline)"] = (VARIANTS[name], base)
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    cwd = tempfile.gettempdir()  # not the repository: '' on sys.path would shadow the baseline
    for index in range(args.rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            argv, base = variants[name]
            env = dict(os.environ, PYTHONPATH=base) if base else None
            started = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=True, cwd=cwd, env=env)
            times[name].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"fresh interpreters, {args.rounds} interleaved rounds, medians (min):")
    for name, values in times.items():
        print(f"  {name:<28} {1000 * median[name]:7.1f} ms  ({1000 * min(values):.1f})")
    modules = loaded_modules()
    print(f"import distprof loads: {', '.join(modules['heavy']) or 'none of ' + ', '.join(HEAVY)}; "
          f"{len(modules['distprof'])} distprof modules ({', '.join(modules['distprof'])})")
    heavy = {"pandas", "matplotlib"} & set(modules["heavy"])
    print(f"pandas/matplotlib loaded by import distprof: {', '.join(sorted(heavy)) or 'no'}   (target: no)")
    ratio = median["distprof --help"] / median["import numpy"]
    print(f"ratio distprof --help / import numpy: {ratio:.2f}x   (target <= 2x)")
    print(f"ratio import distprof / import numpy: {median['import distprof'] / median['import numpy']:.2f}x")
    if args.baseline:
        for name in ("import distprof", "distprof --help", "annotating rank"):
            print(f"baseline {name}: {median[name + ' (baseline)'] / median['import numpy']:.2f}x numpy, "
                  f"{median[name + ' (baseline)'] / median[name]:.1f}x slower than now")


if __name__ == "__main__":
    main()
