"""A command pays only for what it uses: the modules a fresh `distprof --help` and `distprof merge` of
Kineto traces import (issue 58: every import is start-up time the user waits for)."""

import json
import subprocess
import sys

from conftest import DATA

PROBE = ("import json, sys\nfrom distprof import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")


def _imported(*args: str, env: dict | None = None) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                          env=env)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _roots(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_help_imports_no_numerics():
    modules = _imported("--help")
    assert not _roots(modules) & {"numpy", "pandas", "mpi4py", "torch", "yaml", "sqlite3"}
    assert len([m for m in modules if m.startswith("distprof")]) < 40


def test_a_kineto_merge_imports_neither_mpi_torch_pandas_nor_the_other_commands(tmp_path):
    modules = _imported("merge", str(DATA / "torch_tpdp" / "late3"), "-o", str(tmp_path), "--no-html")
    assert "distprof.analyses.skew" in modules  # it merged
    assert not _roots(modules) & {"pandas", "mpi4py", "torch", "yaml", "sqlite3", "prometheus_client", "nvtx"}
    others = ("distprof.live", "distprof.profiler", "distprof.collector", "distprof.watchdog", "distprof.demo",
              "distprof.analyses.hang", "distprof.analyses.diff", "distprof.reports.perfetto",
              "distprof.sources.nsys", "distprof.sources.native", "distprof.sources.flight_recorder")
    assert not [m for m in modules if m.startswith(others)]


def test_a_merge_read_here_imports_no_process_tools(tmp_path):
    """Read in this process (no forked readers, whose multiprocessing needs them): neither the demo's
    subprocess nor the stdlib modules a few lines replace (tempfile, statistics): ~8 ms of start-up."""
    import os
    modules = _imported("merge", str(DATA / "torch_ddp" / "late"), "-o", str(tmp_path),
                        env={**os.environ, "DISTPROF_READ_WORKERS": "1"})
    assert "distprof.analyses.skew" in modules  # it merged
    assert not modules & {"subprocess", "tempfile", "statistics", "multiprocessing"}


def test_a_merge_pauses_the_collector_only_while_it_imports(tmp_path, monkeypatch):
    """The cyclic collector is off through start-up (cli._collect_from_here), on while the files are
    read, and the caller gets it back as it was: on, nothing left frozen."""
    import gc

    from distprof import cli, pipeline
    seen = []
    reduce_rank = pipeline.reduce_rank

    def watched(trace, config):
        seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
        return reduce_rank(trace, config)

    monkeypatch.setattr(pipeline, "reduce_rank", watched)
    monkeypatch.setenv("DISTPROF_READ_WORKERS", "1")  # read here, where the watch is
    assert cli.main(["merge", str(DATA / "torch_ddp" / "late"), "-o", str(tmp_path / "out"), "--no-html"]) == 0
    assert seen and all(on and frozen for on, frozen in seen)
    assert gc.isenabled() and gc.get_freeze_count() == 0


THREADS_AFTER = ("import os, sys\nfrom distprof import cli\ncli.main(sys.argv[1:])\n"
                 "print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'], file=sys.stderr)")


def test_a_merge_starts_no_blas_threads_unless_asked(tmp_path):
    """numpy's OpenBLAS starts a thread per core at import, spinning for matrix work distprof never gives
    it: the merge runs in one thread; a count the user set is kept."""
    import os

    if not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2:
        import pytest
        pytest.skip("needs Linux's /proc and two cores to see a thread pool")
    command = [sys.executable, "-c", THREADS_AFTER, "merge", str(DATA / "torch_ddp" / "late"), "--no-html"]
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    environ["DISTPROF_READ_WORKERS"] = "1"
    done = subprocess.run([*command, "-o", str(tmp_path / "a")], capture_output=True, text=True, timeout=120,
                          env=environ)
    assert done.stderr.split()[-2:] == ["1", "1"], done.stderr[-500:]
    done = subprocess.run([*command, "-o", str(tmp_path / "b")], capture_output=True, text=True, timeout=120,
                          env={**environ, "OPENBLAS_NUM_THREADS": "2"})
    assert done.stderr.split()[-2:] == ["2", "2"], done.stderr[-500:]  # the user's pool: two threads


AT_EXIT = ("import atexit, gc, runpy, sys\n"
           "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count(), file=sys.stderr))\n"
           "runpy.run_module('distprof', run_name='__main__', alter_sys=True)\n")


def test_the_process_ends_with_its_objects_frozen(tmp_path):
    """`python -m distprof` and the `distprof` script end through cli.process_main, which freezes what
    main handed back to the collector: shutdown's last collection then walks none of the imports' objects
    (~20 ms of a one-rank merge). A caller of main keeps them unfrozen (the test above)."""
    import os
    from importlib.metadata import entry_points

    environ = {**os.environ, "DISTPROF_READ_WORKERS": "1"}
    done = subprocess.run([sys.executable, "-c", AT_EXIT, "merge", str(DATA / "torch_ddp" / "late"), "-o",
                           str(tmp_path / "out"), "--no-html"], capture_output=True, text=True, timeout=120,
                          env=environ)
    assert done.returncode == 0, done.stderr[-500:]
    frozen = int(done.stderr.split("frozen at exit:")[-1].split()[0])
    assert frozen > 10_000  # numpy's and distprof's objects, at least
    (script,) = entry_points(group="console_scripts", name="distprof")  # as installed
    assert script.value == "distprof.cli:process_main"
