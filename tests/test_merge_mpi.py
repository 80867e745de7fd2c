"""`mpirun -n K distprof merge`: files spread over MPI workers give the single-process result."""

import json
import subprocess
import sys

import pytest
from conftest import run_cli, run_mpi

from distprof.cli import find_mpirun
from distprof.transport import assign_files


def test_assign_files_balances_bytes_and_keeps_order():
    shares = assign_files([100, 10, 60, 50, 5], 2)
    assert sorted(i for share in shares for i in share) == [0, 1, 2, 3, 4]
    assert all(share == sorted(share) for share in shares)
    loads = [sum([100, 10, 60, 50, 5][i] for i in share) for share in shares]
    assert max(loads) - min(loads) <= 10
    assert assign_files([1, 2], 4)[2:] == [[], []]


@pytest.mark.slow
def test_two_workers_equal_one(demo_overlap, tmp_path):
    inputs = [str(demo_overlap / f"rank{r}.sqlite") for r in range(4)]
    bad = tmp_path / "rank9.sqlite"
    bad.write_text("garbage")
    inputs.append(str(bad))
    single = run_cli("merge", *inputs, "-o", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    command = [find_mpirun(), "-n", "2", "--oversubscribe", "--allow-run-as-root",
               sys.executable, "-m", "distprof", "merge", *inputs, "-o", str(tmp_path / "two")]
    double = run_mpi(command, capture_output=True, text=True, timeout=120)
    assert double.returncode == 0, double.stderr[-2000:]
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert one == two
    assert any("rank9.sqlite" in w for w in two["warnings"])
    assert double.stdout.count("Distributed Summary") == 1  # only rank 0 reports


def test_tasks_without_an_mpi_world_are_warned(demo_overlap, tmp_path):
    """srun without PMI gives K independent processes: each would merge everything, silently."""
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX"))}
    env["SLURM_NTASKS"] = "3"
    result = subprocess.run([sys.executable, "-m", "distprof", "merge", str(demo_overlap / "rank0.sqlite"),
                             "-o", str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "launched as 3 tasks but MPI did not start a 3-rank world" in result.stderr


@pytest.mark.slow
def test_a_worker_whose_reader_fails_does_not_hang_the_merge(tmp_path):
    """A Kineto file with a thread id of 1e30 (a float where an integer belongs) read by one of two
    MPI workers: the merge ends with the other files and a warning naming the file, the same result
    as one process, never a hang (the failing worker still reaches the gather)."""
    import gzip
    from pathlib import Path
    data = Path(__file__).parent / "data" / "torch_ddp" / "healthy"
    events = json.load(gzip.open(data / "rank1.json.gz"))
    next(e for e in events["traceEvents"] if e.get("ph") == "X")["tid"] = 1e30
    bad = tmp_path / "bad_rank1.json"
    bad.write_text(json.dumps(events))
    inputs = [str(data / "rank0.json.gz"), str(bad)]
    single = run_cli("merge", *inputs, "-o", str(tmp_path / "one"), "--no-html")
    assert single.returncode == 0 and "Traceback" not in single.stderr, single.stderr[-2000:]
    command = [find_mpirun(), "-n", "2", "--oversubscribe", "--allow-run-as-root",
               sys.executable, "-m", "distprof", "merge", *inputs, "-o", str(tmp_path / "two"), "--no-html"]
    double = run_mpi(command, capture_output=True, text=True, timeout=120)
    assert double.returncode == 0 and "Traceback" not in double.stderr, double.stderr[-2000:]
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert one == two and any("bad_rank1.json" in w for w in two["warnings"])
