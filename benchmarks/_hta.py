"""Where HTA (the peer benchmarked against) lives: its own virtual environment, so that its
pinned dependencies never enter distprof's. Imported as a sibling module by the benchmarks.

Set up once:  python3 -m venv benchmarks/.venv-hta && benchmarks/.venv-hta/bin/pip install holistictraceanalysis
Or point ``DISTPROF_HTA_PYTHON`` at any Python that can ``import hta``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HTA_VENV = Path(__file__).resolve().parent / ".venv-hta"
SETUP = ("python3 -m venv benchmarks/.venv-hta && "
         "benchmarks/.venv-hta/bin/pip install holistictraceanalysis")


def hta_python() -> tuple[str | None, str]:
    """(interpreter that imports hta, how it was found) or (None, why not and how to fix it)."""
    candidates = []
    if os.environ.get("DISTPROF_HTA_PYTHON"):
        candidates.append((os.environ["DISTPROF_HTA_PYTHON"], "DISTPROF_HTA_PYTHON"))
    candidates.append((str(HTA_VENV / "bin" / "python"), "benchmarks/.venv-hta"))
    if importlib.util.find_spec("hta") is not None:
        candidates.append((sys.executable, "this interpreter"))
    for python, where in candidates:
        if not Path(python).exists():
            continue
        probe = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True, text=True)
        if probe.returncode == 0:
            return python, where
    return None, ("HTA (holistictraceanalysis) not found or not importable: no comparison. "
                  f"Install it in its own venv to compare: {SETUP}")
