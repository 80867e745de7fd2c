"""Start-up cost: ``import distprof`` and ``distprof --help`` against a bare ``import numpy``, each in
a fresh interpreter, interleaved, medians compared. Targets: ``import distprof`` loads neither
pandas nor matplotlib (every rank that only annotates would pay for the analysis stack);
``distprof --help`` <= 2x ``python -c "import numpy"``.

Whole small commands too (issue 41: half of a small merge was start-up): ``distprof report`` of a
2-rank summary and ``distprof merge`` of the 2 real DDP ranks in tests/data/torch_ddp/late (HTML
included, as by default), and which heavy packages each loads (``importlib.metadata`` is the table
library reading its own version; pandas is never on the merge path).

``--baseline DIR`` also times another checkout's ``distprof/`` package (PYTHONPATH=DIR), interleaved.
Both are compiled first (``_bytecode.fresh``): with PYTHONDONTWRITEBYTECODE set, a module edited since
its .pyc was written is compiled again on every run.

    python benchmarks/import_time.py [--rounds 15] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bytecode import fresh  # noqa: E402

HEAVY = ("pandas", "matplotlib", "tabulate", "importlib.metadata", "msgspec", "mpi4py", "yaml", "nvtx", "numpy",
         "sqlite3")
SMALL_JOB = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch_ddp" / "late"
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


def command_modules(argv: list[str]) -> list[str]:
    """The heavy packages a whole ``python -m distprof ...`` command loads (its main process)."""
    code = ("import json, runpy, sys, atexit; "
            f"atexit.register(lambda: print(json.dumps([h for h in {HEAVY!r} if h in sys.modules]), file=sys.stderr)); "
            f"sys.argv = ['distprof', *{argv!r}]; runpy.run_module('distprof', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def with_commands(folder: str) -> dict:
    """VARIANTS plus the two whole small commands, writing under ``folder``."""
    once = str(Path(folder) / "once")
    subprocess.run([sys.executable, "-m", "distprof", "merge", str(SMALL_JOB), "-o", once, "--no-html"],
                   capture_output=True, check=True)
    return {**VARIANTS, "distprof report (2 ranks)": ["-m", "distprof", "report", once],
            "distprof merge (2 ranks)": ["-m", "distprof", "merge", str(SMALL_JOB), "-o", str(Path(folder) / "out")]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", default=None, help="folder holding another checkout's distprof/ package")
    args = parser.parse_args()
    fresh(args.baseline)  # before any process is timed
    folder = tempfile.mkdtemp(prefix="distprof-import-")
    commands = with_commands(folder)
    compared = ("import distprof", "distprof --help", "annotating rank", "distprof report (2 ranks)",
                "distprof merge (2 ranks)")
    variants = {name: (argv, None) for name, argv in commands.items()}
    if args.baseline:
        base = str(Path(args.baseline).resolve())
        for name in compared:
            variants[f"{name} (baseline)"] = (commands[name], base)
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
        print(f"  {name:<38} {1000 * median[name]:7.1f} ms  ({1000 * min(values):.1f})")
    modules = loaded_modules()
    print(f"import distprof loads: {', '.join(modules['heavy']) or 'none of ' + ', '.join(HEAVY)}; "
          f"{len(modules['distprof'])} distprof modules ({', '.join(modules['distprof'])})")
    heavy = {"pandas", "matplotlib"} & set(modules["heavy"])
    print(f"pandas/matplotlib loaded by import distprof: {', '.join(sorted(heavy)) or 'no'}   (target: no)")
    ratio = median["distprof --help"] / median["import numpy"]
    print(f"ratio distprof --help / import numpy: {ratio:.2f}x   (target <= 2x)")
    print(f"ratio import distprof / import numpy: {median['import distprof'] / median['import numpy']:.2f}x")
    for name in ("distprof report (2 ranks)", "distprof merge (2 ranks)"):
        print(f"{name} loads: {', '.join(command_modules(commands[name][2:]))}")
    if args.baseline:
        for name in compared:
            print(f"baseline {name}: {median[name + ' (baseline)'] / median['import numpy']:.2f}x numpy, "
                  f"{median[name + ' (baseline)'] / median[name]:.2f}x the time now "
                  f"({1000 * (median[name + ' (baseline)'] - median[name]):+.1f} ms)")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
