import atexit
import contextlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_cli import WarmCli

# The hundreds of distprof processes the tests start (CLI runs, mpirun ranks) reuse compiled bytecode
# instead of compiling distprof's sources each time (about 0.12 s of CPU a process), also where the
# environment sets PYTHONDONTWRITEBYTECODE.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _end_worker_without_teardown() -> None:
    """An xdist worker's last exit handler (registered first, run last): its results are sent by
    then, and the interpreter's teardown of what its tests imported would only delay the end of the
    run (torch's alone takes 1.7 s here)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_end_worker_without_teardown)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # small real traces, in the repo (origin and licence: data/README.md)


WARM_CLI = WarmCli()
atexit.register(WARM_CLI.close)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120, fresh: bool = False
            ) -> subprocess.CompletedProcess:
    """Run `distprof ...` the way a user does: a separate process, real stdout/stderr and exit status.
    By default forked from a warm server that has made the imports every command makes (warm_cli);
    ``fresh``: ``python -m distprof`` in a new interpreter."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("OMPI_COMM_WORLD_SIZE", None)
    for _ in range(2):  # a demo whose mpirun failed to start (no rank ran) runs again once
        if fresh:
            result = subprocess.run([sys.executable, "-m", "distprof", *args], capture_output=True, text=True,
                                    cwd=cwd, timeout=timeout, env=env)
        else:
            result = WARM_CLI.run(list(args), cwd, env, timeout)
        if not mpi_start_failed(result):
            break
    return result


# Open MPI's launcher, rarely, with two mpiruns starting at once on a loaded machine (xdist): before
# any rank runs. Seen here about once in 300 launches; also in other projects' CI.
MPI_START_FAILURE = "PMIx server's listener thread failed to start"


def mpi_start_failed(result: subprocess.CompletedProcess) -> bool:
    return result.returncode != 0 and MPI_START_FAILURE in f"{result.stdout or ''}{result.stderr or ''}"


def run_mpi(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run of an mpirun job (output captured), run again once where mpirun failed to start."""
    result = subprocess.run(command, **kwargs)
    return subprocess.run(command, **kwargs) if mpi_start_failed(result) else result


def own_cpu_s() -> float:
    """CPU seconds of this test process's finished commands: its reaped children and warm CLI runs."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime + WARM_CLI.cpu_s


def machine_clock() -> tuple[float, float, float]:
    """(wall s, CPU s the whole machine was busy, CPU s of this test's own finished commands)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # all but idle and iowait
    return time.monotonic(), busy / os.sysconf("SC_CLK_TCK"), own_cpu_s()


def foreign_cores(start: tuple, end: tuple) -> float:
    """Cores that other processes (other tests, other jobs) kept busy on average between two
    machine_clock() readings: unlike the load average, it neither lags nor counts the job itself."""
    wall, busy, ours = (e - s for s, e in zip(start, end))
    return max(0.0, (busy - ours) / wall) if wall > 0 else 0.0


def skip_if_busy(cores_taken: float, what: str) -> None:
    """Timing assertions need the machine mostly to the job: skip them, saying so, where other
    processes kept more than half of its cores busy during the run."""
    if cores_taken > (os.cpu_count() or 1) / 2:
        pytest.skip(f"other processes kept {cores_taken:.1f} cores busy during the run: {what} not asserted")


# Tests whose jobs' timings are asserted (a straggler's size, step times compared, a live alert's
# window): marked ``exclusive``, or a test that uses a fixture running such a job before any worker
# has made it (listed here; the fixture calls ``mark_made`` when its jobs are done).
EXCLUSIVE_FIXTURES = ("demo_overlap", "demo_runs", "pp4_device", "pp4_device_clean")


def mark_made(config, name: str) -> None:
    """The jobs of fixture ``name`` are done: no later test needs the machine alone for them, in this
    worker or another (a session fixture shared through files is made by one worker only; a module
    fixture's tests all run on one worker under loadscope)."""
    base = lock_dir(config)
    if base is not None:
        (base / f"made-{name}").touch()


def made(config, name: str) -> bool:
    """Whether any worker has made fixture ``name`` (always, without xdist: there is no lock)."""
    base = lock_dir(config)
    return base is None or (base / f"made-{name}").exists()


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


def pytest_collection_modifyitems(session, config, items):
    """Modules with the most ``slow`` jobs first: xdist hands out whole modules (loadscope) in this
    order, so the long ones start early instead of leaving one worker busy at the end."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.module.__name__] = slow.get(item.module.__name__, 0) + bool(item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.module.__name__])  # stable: a module's tests keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test's whole run (setup, module fixtures made for it included, call, teardown) holds the
    machine lock: shared, or exclusive for the timing-sensitive ones, so no job of the other worker
    runs beside them, not even a module fixture's."""
    fixtures = set(getattr(item, "fixturenames", ()))
    exclusive = item.get_closest_marker("exclusive") is not None or any(
        name in fixtures and not made(item.config, name) for name in EXCLUSIVE_FIXTURES)
    with machine_lock(lock_dir(item.config), exclusive):
        yield


def shared_base(tmp_path_factory) -> Path:
    """A folder of this session that every xdist worker sees (a worker's base is popen-gwN)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_demo(request, tmp_path_factory, name: str, *args: str) -> Path:
    """One real 4-rank MPI demo run of 6 steps, shared by the tests that read its output and by the
    xdist workers: the first one to get here runs it, under a lock, the others read it. Its stdout
    is kept in ``stdout.txt``, and what other jobs took of the machine during the run (for timing
    assertions, measured then, not later) in ``foreign_cores.txt``."""
    import fcntl
    shared = shared_base(tmp_path_factory)
    out = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "foreign_cores.txt").exists():
            out.mkdir(exist_ok=True)
            before = machine_clock()
            result = run_cli("demo", "--ranks", "4", "--steps", "6", *args, "--out", str(out))
            assert result.returncode == 0, result.stderr[-2000:]
            (out / "stdout.txt").write_text(result.stdout)
            (out / "foreign_cores.txt").write_text(str(foreign_cores(before, machine_clock())))
    mark_made(request.config, name)
    return out


@pytest.fixture(scope="session")
def demo_overlap(request, tmp_path_factory) -> Path:
    """The demo in overlap mode (timings asserted: the test asking holds the machine, EXCLUSIVE_FIXTURES)."""
    return shared_demo(request, tmp_path_factory, "demo_overlap")


@pytest.fixture(scope="session")
def demo_serial(request, tmp_path_factory) -> Path:
    """The demo in serial mode: the allreduce on the compute thread (no timing asserted on it)."""
    return shared_demo(request, tmp_path_factory, "demo_serial", "--comm", "serial")
