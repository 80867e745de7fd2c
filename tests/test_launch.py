"""Launch helpers: argument handling and the commands they would run (--dry-run)."""

import subprocess
from pathlib import Path

import pytest
from conftest import ROOT


def launch(script, *args):
    """The script run with this interpreter as its Python (as from this checkout's venv)."""
    import os
    import sys
    return subprocess.run(["bash", str(ROOT / "launch" / script), *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable})


def test_mpirun_dry_run():
    result = launch("mpirun.sh", "-n", "4", "--oversubscribe", "--dry-run", "--", "python", "train.py", "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    assert words[0].endswith("mpirun") and words[1:3] == ["-n", "4"]
    # the checkout's venv Python runs the job, activated or not (its mpirun is the wheel's, beside it)
    assert "--oversubscribe" in words and words[-3:] == ["train.py", "--lr", "0.1"]
    assert Path(words[-4]).parent == Path(words[0]).parent and Path(words[-4]).name.startswith("python")


def test_mpirun_oversubscribes_when_ranks_exceed_cores():
    import os
    cores = os.cpu_count() or 1
    many = launch("mpirun.sh", "-n", str(cores + 1), "--dry-run", "--", "python", "t.py").stdout.split()
    assert "--oversubscribe" in many and "--bind-to" in many
    assert ("--allow-run-as-root" in many) == (os.geteuid() == 0)
    assert "--oversubscribe" not in launch("mpirun.sh", "-n", "1", "--dry-run", "--", "x").stdout.split()


def test_torchrun_dry_run():
    result = launch("torchrun.sh", "--nproc", "2", "--dry-run", "--", "train.py")
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    assert Path(words[0]).name == "torchrun" and words[1:] == ["--standalone", "--nproc_per_node", "2", "train.py"]


def test_scripts_find_their_venv_without_activation_or_say_what_is_missing(tmp_path):
    """From a fresh shell (PATH without the venv): the checkout's .venv is used; with a Python that
    has no mpirun beside it and none on PATH, one line says what is missing."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    plain = subprocess.run(["bash", str(ROOT / "launch" / "mpirun.sh"), "-n", "2", "--dry-run", "--", "python", "t.py"],
                           capture_output=True, text=True, env=env)
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout")
    assert plain.returncode == 0 and plain.stdout.split()[0] == str(ROOT / ".venv" / "bin" / "mpirun")
    lost = subprocess.run(["bash", str(ROOT / "launch" / "mpirun.sh"), "-n", "2", "--", "python", "t.py"],
                          capture_output=True, text=True, env={**env, "PYTHON": str(tmp_path / "python3")})
    assert lost.returncode == 2 and len(lost.stderr.strip().splitlines()) == 1
    assert "no 'mpirun' next to" in lost.stderr and "README" in lost.stderr


def test_bad_arguments_are_one_line():
    for script, args in (("mpirun.sh", ["--", "python", "x.py"]), ("mpirun.sh", ["-n", "zero", "--", "x"]),
                         ("mpirun.sh", ["-n", "2"]), ("torchrun.sh", ["--bogus"]), ("torchrun.sh", ["--nproc", "2"])):
        result = launch(script, *args)
        assert result.returncode == 2, (script, args)
        assert len(result.stderr.strip().splitlines()) == 1 and script in result.stderr


def test_help():
    for script in ("mpirun.sh", "torchrun.sh"):
        result = launch(script, "--help")
        assert result.returncode == 0 and "--dry-run" in result.stdout


BATCH_JOB = """
import time
import distprof
from mpi4py import MPI
prof = distprof.Profiler(out="out")
with prof:
    for step in range(3):
        with distprof.phase("forward"):
            time.sleep(0.005)
        with distprof.comm("allreduce", group=[0, 1], nbytes=8):
            MPI.COMM_WORLD.allreduce(1)
        prof.step()
"""


@pytest.mark.slow
def test_mpirun_job_with_stdout_in_a_file_prints_100_columns(tmp_path):
    """A batch job's log (Slurm, `> log`, `| tee`): Open MPI gives each rank a pty of 0x0 columns when
    mpirun's own stdout is not a terminal. That width is unknown, not narrow: the report is 100 wide,
    as for any redirected stdout, not the 40-column minimum with words cut mid-token."""
    import os
    (tmp_path / "train.py").write_text(BATCH_JOB)
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    with open(tmp_path / "log", "w") as log:
        result = subprocess.run(["bash", str(ROOT / "launch" / "mpirun.sh"), "-n", "2", "--", "python", "train.py"],
                                stdout=log, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env, timeout=120)
    text = (tmp_path / "log").read_text()
    assert result.returncode == 0, text + result.stderr
    lines = text.splitlines()
    assert max(map(len, lines)) == 100
    assert "-Distributed Summary-" in lines[0] and len(lines[0]) == 100
    assert "Communication (ms)" in text  # a header whole, not "Communi…n (ms)"
