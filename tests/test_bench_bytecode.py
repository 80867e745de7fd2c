"""benchmarks/_bytecode.py: a --baseline checkout's package gets its .pyc even where
PYTHONDONTWRITEBYTECODE is set (else every timed process would compile it again)."""

import os
import subprocess
import sys

from conftest import ROOT


def test_fresh_writes_bytecode_under_pythondontwritebytecode(tmp_path):
    package = tmp_path / "baseline" / "distprof"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import _bytecode; "
            f"_bytecode.fresh({str(tmp_path / 'baseline')!r})")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert [p.name.split(".")[0] for p in (package / "__pycache__").glob("*.pyc")] == ["__init__"]
