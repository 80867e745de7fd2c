"""Fresh bytecode before whole processes are timed. Where PYTHONDONTWRITEBYTECODE is set (CI images,
some shared machines), a module edited since its .pyc was written is compiled again by every process
that imports it, and a timing counts that as distprof's own start-up. Imported as a sibling module by
the benchmarks."""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "distprof"


def fresh(*roots: str | Path | None) -> None:
    """Write the .pyc of this checkout's distprof package and of ``distprof/`` under each given root
    (a --baseline checkout); compileall writes them whatever PYTHONDONTWRITEBYTECODE says."""
    for package in (PACKAGE, *(Path(root) / "distprof" for root in roots if root)):
        if package.is_dir():
            compileall.compile_dir(str(package), quiet=1)
