"""The benchmarks that call the pipeline in process run to their end, in their smallest form: two of them
indexed the typed Summary as a dict after a refactor and failed unseen (whatif_vs_measured, nsys_ingest).
What they print is measured elsewhere; here only that they finish and print their figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "arguments", "printed"), [
    ("whatif_vs_measured.py", ["--no-demo"], "replay error (median over steps; max) on the real traces"),
    ("nsys_ingest.py", ["--kernels", "5000", "--rounds", "1", "--files", "2", "--merge-kernels", "5000"],
     "ratio 2 files / 1 file"),
    ("kineto_load.py", ["--synthetic", "--events", "5000", "--rounds", "1", "--no-hta"], "event rows; overlap ratio"),
    ("combine_writers.py", ["--ranks", "8", "--rounds", "1"], "median of 1 rounds"),
])
def test_an_in_process_benchmark_runs_to_its_end(script: str, arguments: list[str], printed: str) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *arguments], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed in done.stdout
