import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The hundreds of distprof processes the tests start (CLI runs, mpirun ranks) reuse compiled bytecode
# instead of compiling distprof's sources each time (about 0.12 s of CPU a process), also where the
# environment sets PYTHONDONTWRITEBYTECODE.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # small real traces, in the repo (origin and licence: data/README.md)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `distprof ...` the way a user does: a separate process, real stdout/stderr."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("OMPI_COMM_WORLD_SIZE", None)
    return subprocess.run([sys.executable, "-m", "distprof", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


# Tests whose jobs' timings are asserted (a straggler's size, step times compared, a live alert's
# window): marked ``exclusive``, or using a fixture that runs such a job (listed here).
EXCLUSIVE_FIXTURES = ("demo_overlap", "demo_runs")


@contextlib.contextmanager
def machine_lock(base: Path | None, exclusive: bool):
    """Under xdist, the machine as a lock: a timing-sensitive test holds it exclusively (it runs while
    no other test does), every other test shares it. A turnstile lock first keeps a waiting exclusive
    holder from being overtaken by the next shared ones. Without xdist (``base`` None): nothing to share."""
    if base is None:
        yield
        return
    import fcntl
    with open(base / "turnstile.lock", "a") as turnstile, open(base / "machine.lock", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


def lock_dir(config) -> Path | None:
    """The folder of this run's machine lock, the same for every xdist worker; None without xdist."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    import tempfile
    path = Path(tempfile.gettempdir()) / f"distprof-tests-{workerinput['testrunuid']}"
    path.mkdir(exist_ok=True)
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test's whole run (setup, module fixtures made for it included, call, teardown) holds the
    machine lock: shared, or exclusive for the timing-sensitive ones, so no job of the other worker
    runs beside them, not even a module fixture's."""
    exclusive = item.get_closest_marker("exclusive") is not None or bool(
        set(EXCLUSIVE_FIXTURES) & set(getattr(item, "fixturenames", ())))
    with machine_lock(lock_dir(item.config), exclusive):
        yield


def shared_base(tmp_path_factory) -> Path:
    """A folder of this session that every xdist worker sees (a worker's base is popen-gwN)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def demo_overlap(tmp_path_factory) -> Path:
    """One real 4-rank MPI demo run in overlap mode, shared by the tests that read its output (and by
    the xdist workers: the first one to get here runs it, under a lock, the others read it)."""
    import fcntl
    shared = shared_base(tmp_path_factory)
    out = shared / "demo_overlap"
    with open(shared / "demo_overlap.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "load_around_run.txt").exists():  # the test asking holds the machine (EXCLUSIVE_FIXTURES)
            out.mkdir(exist_ok=True)
            load_before = os.getloadavg()[0]
            result = run_cli("demo", "--ranks", "4", "--steps", "6", "--out", str(out))
            assert result.returncode == 0, result.stderr[-2000:]
            # timing assertions look at how loaded the machine was around this run, not later
            (out / "load_around_run.txt").write_text(str(max(load_before, os.getloadavg()[0])))
    return out
