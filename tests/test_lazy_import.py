"""``import distprof`` stays light: a rank that only annotates, and ``distprof --help``, must not
load the analysis stack (pandas) or the plotting library (matplotlib). A property of the import
graph, checked in a fresh interpreter (never a timing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "matplotlib")


def loaded_after(code: str) -> list[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_distprof_loads_neither_pandas_nor_matplotlib():
    assert loaded_after("import distprof") == []


def test_annotating_rank_and_profiler_session_load_neither():
    code = ("import tempfile, distprof\n"
            "with tempfile.TemporaryDirectory() as tmp:\n"
            "    prof = distprof.Profiler(out=tmp, quiet=True)\n"
            "    with distprof.phase('forward'), distprof.comm('allreduce'), distprof.range('mine'):\n"
            "        pass\n")
    assert loaded_after(code) == []


def test_cli_help_loads_neither():
    code = ("from distprof import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n")
    assert loaded_after(code) == []


def test_lazy_names_resolve():
    import distprof
    from distprof import Profiler, comm, phase
    from distprof import range as user_range
    assert distprof.config.load()["out"] and callable(phase) and callable(comm) and callable(user_range)
    assert Profiler.__name__ == "Profiler" and "Profiler" in dir(distprof)


def test_report_and_diff_of_summaries_load_no_pandas(tmp_path):
    """Reading summary.json files (``report``, ``diff`` of two runs) is formatting and a bootstrap:
    it must not pay the analysis stack's import (a diff once imported it for one constant)."""
    from pathlib import Path
    golden = Path(__file__).resolve().parent / "data" / "golden"
    runs = []
    for name in ("demo__demo_ranks.json", "kineto__hta_trace_filter_2rank.json"):
        run = tmp_path / name.split("__")[0]
        run.mkdir()
        (run / "summary.json").write_text((golden / name).read_text())
        runs.append(str(run))
    code = ("import contextlib, io\nfrom distprof import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    cli.main(['report', {runs[0]!r}])\n"
            f"    cli.main(['diff', {runs[0]!r}, {runs[1]!r}, '-o', {str(tmp_path / 'diff')!r}])\n")
    assert loaded_after(code) == []


@pytest.mark.parametrize("inputs", [["torch_ddp/late"], ["demo_ranks"],
                                    ["nsys/pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite.gz"]])
def test_merge_and_whatif_load_no_pandas(inputs, tmp_path):
    """A merge of Kineto, native or nsys files, its report.html and a what-if are numpy only: the
    event table, every analysis and rank 0's combine (pandas' import alone cost a merge 0.4 s)."""
    from pathlib import Path
    data = Path(__file__).resolve().parent / "data"
    paths = [str(data / name) for name in inputs]
    code = ("import contextlib, io\nfrom distprof import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    cli.main(['merge', *{paths!r}, '-o', {str(tmp_path)!r}])\n"
            f"    cli.main(['whatif', {str(tmp_path)!r}])\n")
    assert loaded_after(code) == []


def test_report_of_a_summary_loads_no_numpy(tmp_path):
    """``distprof report`` words a summary.json: numbers already made, no numpy to load (the
    reports read the step-time definition and the cost texts, not the analyses' arrays)."""
    from pathlib import Path
    golden = Path(__file__).parent / "data" / "golden" / "demo__demo_ranks.json"
    (tmp_path / "summary.json").write_text(golden.read_text())
    code = ("from distprof import cli\n"
            f"cli.main(['report', {str(tmp_path)!r}])\n"
            "print(json.dumps(['numpy'] if 'numpy' in sys.modules else []))\n")
    done = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_merge_never_loads_importlib_metadata(tmp_path):
    """No package-metadata scan at start-up (issue 41: tabulate 0.10 read its own version that way,
    a walk of site-packages on every report); a merge with its text report and report.html. The tables are
    distprof's own (reports.tables.simple_table): tabulate is not imported either."""
    from pathlib import Path
    ranks = Path(__file__).parent / "data" / "torch_ddp" / "late"
    code = ("import contextlib, io\nfrom distprof import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    cli.main(['merge', {str(ranks)!r}, '-o', {str(tmp_path)!r}])\n"
            "print(json.dumps([m for m in ('importlib.metadata', 'tabulate') if m in sys.modules]))\n")
    done = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "summary.json").is_file()  # it merged (the tables printed into the StringIO)
