"""The code base stays ruff-clean (the README promises it; CI runs this)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run([ruff, "check", "distprof", "tests", "benchmarks"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
