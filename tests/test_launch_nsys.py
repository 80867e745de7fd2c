"""launch/nsys_mpirun.sh and launch/nsys_torchrun.sh: argument handling, the commands a dry run
prints, and the profile -> export -> merge sequence with stand-in programs (nsys is not needed)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
MPIRUN, TORCHRUN = LAUNCH / "nsys_mpirun.sh", LAUNCH / "nsys_torchrun.sh"
ROOT_FLAG = ["--allow-run-as-root"] if os.getuid() == 0 else []


def run(script: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def printed_commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines()]


def venv_tool(name: str) -> str:
    """The tool next to the Python the scripts run with (the venv's), else its bare name."""
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    return candidate if os.path.exists(candidate) else name


def venv_mpirun() -> str:
    return venv_tool("mpirun")


@pytest.mark.parametrize("script", [MPIRUN, TORCHRUN])
def test_help(script):
    result = run(script, "--help")
    assert result.returncode == 0
    assert f"launch/{script.name}" in result.stdout and "--dry-run" in result.stdout


@pytest.mark.parametrize(("script", "args", "message"), [
    (MPIRUN, ["--", "python", "train.py"], "-n RANKS is required"),
    (MPIRUN, ["-n", "0", "--", "python", "train.py"], "-n RANKS is required"),
    (MPIRUN, ["-n", "2"], "no training command after --"),
    (MPIRUN, ["-n", "2", "--bogus", "--", "python", "train.py"], "unknown option '--bogus'"),
    (TORCHRUN, ["--", "train.py"], "--nproc N is required"),
    (TORCHRUN, ["--nproc", "two", "--", "train.py"], "--nproc N is required"),
    (TORCHRUN, ["--nproc", "2"], "no training script after --"),
    (TORCHRUN, ["--nproc", "2", "train.py"], "unknown option 'train.py'"),
])
def test_bad_arguments(script, args, message):
    result = run(script, *args)
    assert result.returncode == 2
    assert message in result.stderr and result.stdout == ""


def test_mpirun_dry_run(tmp_path):
    out = str(tmp_path / "reports")
    result = run(MPIRUN, "-n", "3", "--out", out, "--oversubscribe", "--dry-run", "--",
                 "python", "train.py", "--lr", "0.1 warm")
    assert printed_commands(result) == [
        [venv_mpirun(), "-n", "3", "--oversubscribe", "--bind-to", "none", *ROOT_FLAG,
         "nsys", "profile", "-t", "cuda,nvtx,osrt", "-o", f"{out}/rank%q{{OMPI_COMM_WORLD_RANK}}",
         "--force-overwrite", "true", "python", "train.py", "--lr", "0.1 warm"],
        *[["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", f"{out}/rank{rank}.sqlite",
           f"{out}/rank{rank}.nsys-rep"] for rank in range(3)],
        [venv_tool("distprof"), "merge", f"{out}/rank0.sqlite", f"{out}/rank1.sqlite", f"{out}/rank2.sqlite",
         "-o", f"{out}/summary"],
    ]
    assert not (tmp_path / "reports").exists()  # a dry run creates nothing


def test_torchrun_dry_run():
    result = run(TORCHRUN, "--nproc", "2", "--trace", "cuda,nvtx", "--dry-run", "--", "train.py", "--epochs", "1",
                 env={"PYTHON": "python3.11", "NSYS": "/opt/nsys/bin/nsys", "DISTPROF": "dp", "TORCHRUN": "tr"})
    assert printed_commands(result) == [  # every tool named by the environment: none depends on what PATH holds
        ["tr", "--standalone", "--nproc_per_node", "2", "--no-python", "/opt/nsys/bin/nsys", "profile",
         "-t", "cuda,nvtx", "-o", "nsys_reports/rank%q{RANK}", "--force-overwrite", "true",
         "python3.11", "train.py", "--epochs", "1"],
        ["/opt/nsys/bin/nsys", "export", "--type", "sqlite", "--force-overwrite", "true",
         "-o", "nsys_reports/rank0.sqlite", "nsys_reports/rank0.nsys-rep"],
        ["/opt/nsys/bin/nsys", "export", "--type", "sqlite", "--force-overwrite", "true",
         "-o", "nsys_reports/rank1.sqlite", "nsys_reports/rank1.nsys-rep"],
        ["dp", "merge", "nsys_reports/rank0.sqlite", "nsys_reports/rank1.sqlite", "-o", "nsys_reports/summary"],
    ]


@pytest.mark.parametrize(("script", "count_flag"), [(MPIRUN, "-n"), (TORCHRUN, "--nproc")])
def test_missing_nsys_is_one_clear_error(script, count_flag, tmp_path):
    result = run(script, count_flag, "1", "--out", str(tmp_path / "out"), "--", "train.py",
                 env={"NSYS": str(tmp_path / "no-nsys-here")})
    assert result.returncode == 127
    assert "not found" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


# stand-ins: mpirun runs the command once per rank; nsys writes a report unless the job failed,
# and "exports" it; distprof records its arguments
FAKE_MPIRUN = """#!/usr/bin/env bash
shift; ranks=$1; shift
while [[ $1 == --* ]]; do shift; done
status=0
for ((rank = 0; rank < ranks; rank++)); do OMPI_COMM_WORLD_RANK=$rank "$@" || status=$?; done
exit $status
"""
FAKE_NSYS = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [[ $1 == profile ]]; then
  shift
  while [[ $1 == -* ]]; do [[ $1 == -o ]] && pattern=$2; shift 2; done
  "$@" && echo report > "${pattern//%q\\{OMPI_COMM_WORLD_RANK\\}/$OMPI_COMM_WORLD_RANK}.nsys-rep"
else
  while [[ $1 != -o ]]; do shift; done
  cp "$3" "$2"
fi
"""
FAKE_DISTPROF = """#!/usr/bin/env bash
echo "distprof $*" >> "$FAKE_LOG"
"""


def test_failed_rank_is_still_exported_and_merged(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("mpirun", FAKE_MPIRUN), ("nsys", FAKE_NSYS), ("distprof", FAKE_DISTPROF)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)  # the script looks for mpirun next to Python
    out, log = tmp_path / "out", tmp_path / "log"
    job = "exit $((OMPI_COMM_WORLD_RANK == 1 ? 3 : 0))"   # rank 1 fails before nsys writes its report
    result = run(MPIRUN, "-n", "3", "--out", str(out), "--", "bash", "-c", job,
                 env={"PYTHON": str(bin_dir / "python"), "PATH": f"{bin_dir}:{os.environ['PATH']}",
                      "FAKE_LOG": str(log)})
    assert result.returncode == 3                                        # the job's status
    assert "no report for rank 1" in result.stderr
    calls = log.read_text().splitlines()
    assert calls[-1] == f"distprof merge {out}/rank0.sqlite {out}/rank1.sqlite {out}/rank2.sqlite -o {out}/summary"
    exports = [call for call in calls if call.startswith("export")]
    assert exports == [f"export --type sqlite --force-overwrite true -o {out}/rank{rank}.sqlite "
                       f"{out}/rank{rank}.nsys-rep" for rank in (0, 2)]
    assert sorted(path.name for path in out.iterdir()) == ["rank0.nsys-rep", "rank0.sqlite", "rank2.nsys-rep",
                                                           "rank2.sqlite"]
