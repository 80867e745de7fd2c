"""The CLI as a user runs it: subprocesses, real files, exit codes, one-line errors."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli


@pytest.mark.parametrize("command", [[], ["demo"], ["merge"], ["report"]])
def test_help(command):
    result = run_cli(*command, "--help")
    assert result.returncode == 0 and "usage: distprof" in result.stdout


def test_demo_dry_run_uses_wheel_mpirun():
    result = run_cli("demo", "--ranks", "3", "--comm", "serial", "--straggler", "1:20", "--dry-run")
    assert result.returncode == 0
    command = result.stdout.split()
    assert command[0].endswith("mpirun") and "--oversubscribe" in command
    assert command[command.index("-n") + 1] == "3"
    assert "distprof.demo.job" in command and "serial" in command and "1:20" in command


@pytest.mark.parametrize("straggler", ["2", "x:50", "9:50", "1:abc"])
def test_demo_rejects_bad_straggler(straggler):
    result = run_cli("demo", "--straggler", straggler, "--dry-run")
    assert result.returncode == 2 and "--straggler" in result.stderr and "Traceback" not in result.stderr


def test_demo_straggler_without_ms_shows_the_form():
    result = run_cli("demo", "--straggler", "2", "--dry-run")
    assert result.returncode == 2 and "expected RANK:MS, e.g. 2:50" in result.stderr


@pytest.mark.parametrize("args", [["--ranks", "0"], ["--ranks", "-3"], ["--steps", "0"]])
def test_demo_refuses_non_positive_counts(args):
    result = run_cli("demo", *args, "--dry-run")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"distprof: error: {args[0]}: expected a positive integer, "
                                                  f"got {args[1]}"]


def test_demo_output_and_merge_of_its_rank_files(demo_overlap, tmp_path):
    live = json.loads((demo_overlap / "summary.json").read_text())
    assert live["world_size"] == 4 and [r["rank"] for r in live["ranks"]] == [0, 1, 2, 3]
    merged_dir = tmp_path / "merged"
    result = run_cli("merge", str(demo_overlap), "-o", str(merged_dir), fresh=True)  # a new interpreter
    assert result.returncode == 0, result.stderr
    assert "Distributed Summary" in result.stdout
    merged = json.loads((merged_dir / "summary.json").read_text())
    # the post-hoc merge of the same rank files gives the same per-rank figures as the live run
    for key in ("window_ns", "communication_ns", "computation_ns", "overlap_ns", "idle_ns"):
        assert [r[key] for r in merged["ranks"]] == [r[key] for r in live["ranks"]]
    report = run_cli("report", str(merged_dir / "summary.json"), "--unit", "us")
    assert report.returncode == 0 and "Communication (us)" in report.stdout


def test_merge_with_bad_and_missing_rank_files(demo_overlap, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for rank in (0, 2, 3):
        (inputs / f"rank{rank}.sqlite").write_bytes((demo_overlap / f"rank{rank}.sqlite").read_bytes())
    (inputs / "rank1.sqlite").write_bytes(b"not a database at all, just text" * 10)
    (inputs / "trunc.sqlite").write_bytes((demo_overlap / "rank0.sqlite").read_bytes()[:1000])
    result = run_cli("merge", str(inputs), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("distprof: warning")]
    assert any("rank1.sqlite" in w for w in warnings)
    assert any("trunc.sqlite" in w for w in warnings)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 2, 3]
    assert summary["missing_ranks"] == [1]
    assert "no data for rank 1 of 4" in result.stdout


def test_merge_errors(tmp_path):
    result = run_cli("merge", str(tmp_path / "missing*.sqlite"))
    assert result.returncode == 2 and "no input files" in result.stderr
    bad = tmp_path / "bad.sqlite"
    bad.write_text("hello")
    result = run_cli("merge", str(bad), "-o", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("distprof: error: no readable rank file")
    assert str(bad) in result.stderr
    empty_db = tmp_path / "empty.sqlite"
    sqlite3.connect(empty_db).execute("CREATE TABLE t(x)").connection.commit()
    result = run_cli("merge", str(empty_db), "-o", str(tmp_path / "o"))
    assert result.returncode == 2 and "Traceback" not in result.stderr and str(empty_db) in result.stderr


def test_report_errors(tmp_path):
    result = run_cli("report", str(tmp_path))
    assert result.returncode == 2 and "summary.json" in result.stderr
    (tmp_path / "summary.json").write_text("{broken")
    result = run_cli("report", str(tmp_path))
    assert result.returncode == 2 and "not valid JSON" in result.stderr


def test_merge_says_where_it_wrote_and_what_to_run_next(tmp_path):
    data = Path(__file__).parent / "data" / "torch_ddp" / "healthy"
    result = run_cli("merge", str(data), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert f"wrote {tmp_path / 'out' / 'summary.json'}, ranks.csv, collectives.csv" in lines  # all it wrote
    assert f"wrote {tmp_path / 'out' / 'report.html'}" in lines
    next_text = " ".join(result.stdout[result.stdout.rindex("next:"):].split())  # the last lines, unwrapped
    assert next_text.startswith(f"next: open {tmp_path / 'out'}/report.html; `distprof whatif {tmp_path / 'out'}`")
    assert next_text.endswith("(did a change help)") and all(len(line) <= 160 for line in lines)


def test_warnings_come_first_and_wrap(tmp_path):
    """A warning that changes what the tables mean (here: no ProfileStep ranges, the window is the whole
    trace) is printed above them, wrapped at 160 characters (issue 29)."""
    data = Path(__file__).parent / "data" / "nsys" / "pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite.gz"
    result = run_cli("merge", str(data), "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    first_warning = next(i for i, line in enumerate(lines) if line.startswith("! "))
    assert first_warning < next(i for i, line in enumerate(lines) if line.startswith("Rank "))
    assert "no ProfileStep" in lines[first_warning]
    table = next(i for i, line in enumerate(lines) if line.startswith("Rank "))
    assert all(len(line) <= 160 for line in lines[first_warning:table])


def test_reading_rank_files_leaves_nothing_beside_them(tmp_path):
    """SQLite keeps -wal/-shm files beside a WAL database while a connection is open: every reader
    (the merge's forked readers too) closes its connection, so a user's folder is left as it was."""
    import shutil
    inputs = tmp_path / "ranks"
    shutil.copytree(Path(__file__).parent / "data" / "demo_ranks", inputs)
    before = sorted(p.name for p in inputs.iterdir())
    result = run_cli("merge", str(inputs), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in inputs.iterdir()) == before


def test_a_reader_that_stops_early_is_no_output_error(tmp_path):
    """`distprof merge ... | head -3`: the pipe closes under the report; the files are written and
    nothing is said about them (it once said the output could not be written: Broken pipe)."""
    data = Path(__file__).parent / "data" / "torch_ddp" / "healthy"
    err = tmp_path / "stderr.txt"
    script = (f"set -o pipefail; {sys.executable} -m distprof merge {data} -o {tmp_path / 'out'} 2>{err} "
              "| head -3 > /dev/null")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COLUMNS="80"))
    assert done.returncode == 0, err.read_text()
    assert err.read_text() == "" and (tmp_path / "out" / "summary.json").exists()
