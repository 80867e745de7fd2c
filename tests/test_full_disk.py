"""A rank that cannot write its profile never breaks or hangs the job (issue 57): its disk full when the
file is made, or from a step on (RLIMIT_FSIZE stands in for a full disk: Python ignores SIGXFSZ, so a
write past the limit fails as on a full disk), or its folder one it may not write (a folder of /sys,
which even root cannot write: a chmod does not stop root). Real mpirun jobs."""

import json
import os
import subprocess
import time

import pytest
from conftest import ROOT

# A process under a file size limit must not write bytecode: Python writes a .pyc with one raw write and
# keeps what a partial write left (a module compiled under the limit was cut to 100 bytes, and every later
# import of it failed with "marshal data too short")
NO_BYTECODE = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")

JOB = """
import os, resource, sys, time
import distprof
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
mode = sys.argv[1]
if rank == 1 and mode == "at_start":
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
with distprof.Profiler(out="out/{rank}" if mode == "read_only" else "out") as prof:
    for step in range(8):
        if rank == 1 and mode == "mid_run" and step == 3:  # no byte more may be written
            written = max(os.path.getsize(f"out/rank1.sqlite{end}") for end in ("", "-wal"))
            resource.setrlimit(resource.RLIMIT_FSIZE, (written, resource.RLIM_INFINITY))
        with distprof.phase("forward"):
            time.sleep(0.005)
        with distprof.comm("allreduce", group=[0, 1], nbytes=8):
            MPI.COMM_WORLD.allreduce(1)
        prof.step()
print("rank", rank, "trained all its steps", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "said"), [
    ("at_start", "rank 1 is not profiled: cannot write out/rank1.sqlite"),
    ("mid_run", "rank 1: recording stopped at step"),
    ("read_only", "rank 1 is not profiled: cannot write out/1/rank1.sqlite"),
])
def test_a_rank_whose_disk_is_full_trains_on_and_the_job_ends(tmp_path, mode, said):
    (tmp_path / "train.py").write_text(JOB)
    if mode == "read_only":  # rank 1's folder: one no process here may write
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "1").symlink_to("/sys/kernel")
        probe = tmp_path / "out" / "1" / "probe"
        try:
            probe.write_text("x")
            probe.unlink()
            pytest.skip("/sys/kernel is writable here")
        except OSError:
            pass
    began = time.monotonic()
    result = subprocess.run(["bash", str(ROOT / "launch" / "mpirun.sh"), "-n", "2", "--", "python", "train.py", mode],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=NO_BYTECODE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - began < 60  # the others never waited out a timeout for it
    assert result.stdout.count("trained all its steps") == 2  # training went on, on both ranks
    lines = [line for line in result.stderr.splitlines() if said in line]
    assert len(lines) == 1 and ("out/1/rank1.sqlite" if mode == "read_only" else "out/rank1.sqlite") in lines[0], \
        result.stderr
    assert "Traceback" not in result.stderr and "sqlite3." not in result.stderr
    summary = json.loads((tmp_path / "out" / ("0" if mode == "read_only" else "") / "summary.json").read_text())
    assert any(said in warning for warning in summary["warnings"])
    assert summary["world_size"] == 2 and [r["rank"] for r in summary["ranks"]][0] == 0


def test_trace_on_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path):
    """`distprof trace` whose output cannot be written to the end (a full disk at the last flush): exit 2,
    one line naming the file, no traceback, no half-written temporary file beside it (was an OSError
    traceback and an 'Exception ignored' from the temporary file's generator)."""
    import resource
    import sys

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
    result = subprocess.run([sys.executable, "-m", "distprof", "trace", str(ROOT / "tests" / "data" / "demo_ranks"),
                             "-o", str(tmp_path / "t.json.gz")], preexec_fn=full_disk, capture_output=True,
                            text=True, timeout=120, env=NO_BYTECODE)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "Exception" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path / 't.json.gz'}: cannot write the output (File too large)" in lines[0]
    assert list(tmp_path.iterdir()) == []
