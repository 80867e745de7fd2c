"""The live path in one process: annotations, collector, native file, crash safety."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import run_cli

import distprof
from distprof import events as ev
from distprof.sources import native


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                "RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)


def read_events(path):
    return native.read(path, distprof.config.load())[0]


def test_ranges_threads_steps_and_decorators(tmp_path):
    @distprof.phase("optimizer")
    def optimizer_step():
        time.sleep(0.001)

    comm_thread_ids = []

    def communicate():
        comm_thread_ids.append(threading.get_native_id())
        with distprof.comm("allreduce"):
            time.sleep(0.002)

    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        for _ in prof.loader(range(3)):
            with distprof.phase("forward"):
                with distprof.phase("forward"):   # same name nested on one thread
                    time.sleep(0.001)
            with distprof.phase("backward"):
                worker = threading.Thread(target=communicate)
                worker.start()
                with distprof.range("my_block"):
                    time.sleep(0.001)
                worker.join()
            optimizer_step()
            prof.step()
    trace = read_events(tmp_path / "rank0.sqlite")
    events = trace.events.to_frame()
    counts = events.groupby(["name", "category"], observed=True).size().to_dict()
    assert counts[(ev.PROFILE_STEP, ev.PHASE)] == 3
    assert counts[("Dataloader", ev.PHASE)] == 3         # the 4th next() found the end: not a load
    assert counts[("forward", ev.PHASE)] == 6
    assert counts[("allreduce", ev.COMMUNICATION)] == 3
    assert counts[("my_block", ev.USER)] == 3
    assert counts[("optimizer", ev.PHASE)] == 3
    main_tid = threading.get_native_id()
    assert set(events.loc[events["name"] == "allreduce", "lane"]) == set(comm_thread_ids)
    assert set(events.loc[events["name"] == "backward", "lane"]) == {main_tid}
    assert set(events.loc[events["name"] == "allreduce", "kind"]) == {ev.COMM_OP}
    # nested same-name ranges: the outer one encloses the inner one
    forward = events[events["name"] == "forward"].sort_values(["start_ns", "end_ns"])
    outer, inner = forward.iloc[0], forward.iloc[1]
    assert outer["start_ns"] <= inner["start_ns"] and inner["end_ns"] <= outer["end_ns"]
    # every range falls in its step; steps tile the session
    steps = events[events["name"] == ev.PROFILE_STEP].sort_values("start_ns")
    assert steps["step"].tolist() == [0, 1, 2]
    assert (steps["start_ns"].to_numpy()[1:] == steps["end_ns"].to_numpy()[:-1]).all()
    assert set(events.loc[events["name"] == "backward", "step"]) == {0, 1, 2}
    assert prof.summary["ranks"][0]["steps"] == 3
    assert (tmp_path / "summary.json").exists()


def test_a_step_ended_on_another_thread_is_on_that_threads_lane_by_its_name(tmp_path):
    """prof.step() keeps the ProfileStep's name id and registers each thread's name once: a loop
    that moves to a thread of its own still gets its steps on that thread's lane, named."""
    import sqlite3
    lanes = []
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        prof.step()

        def train():
            lanes.append(threading.get_native_id())
            for _ in range(2):
                prof.step()
        worker = threading.Thread(target=train, name="trainer")
        worker.start()
        worker.join()
    events = read_events(tmp_path / "rank0.sqlite").events.to_frame()
    steps = events[events["name"] == ev.PROFILE_STEP].sort_values("start_ns")
    assert steps["lane"].tolist() == [threading.get_native_id(), *lanes * 2]
    with sqlite3.connect(tmp_path / "rank0.sqlite") as db:
        assert dict(db.execute("SELECT tid, name FROM distprof_threads"))[lanes[0]] == "trainer"


def test_concurrent_threads_lose_no_rows(tmp_path):
    per_thread, threads = 3000, 4
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        def work():
            for _ in range(per_thread):
                with distprof.range("tick"):
                    pass
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        while any(w.is_alive() for w in workers):
            prof.step()  # flushes race with the writers
        for worker in workers:
            worker.join()
    events = read_events(tmp_path / "rank0.sqlite").events.to_frame()
    assert (events["name"] == "tick").sum() == per_thread * threads
    assert events.loc[events["name"] == "tick", "lane"].nunique() == threads


def test_exception_keeps_completed_steps(tmp_path):
    with pytest.raises(RuntimeError):
        with distprof.Profiler(out=tmp_path, quiet=True) as prof:
            for step in range(5):
                with distprof.phase("forward"):
                    if step == 2:
                        raise RuntimeError("boom")
                prof.step()
    trace = read_events(tmp_path / "rank0.sqlite")
    assert (trace.events.to_frame()["name"] == ev.PROFILE_STEP).sum() == 2
    # closed cleanly (no "did not finish"); the file says why the session ended
    assert trace.warnings == [f"{tmp_path / 'rank0.sqlite'}: rank 0 left the profiler through RuntimeError: boom; "
                              "its completed steps are kept"]
    assert prof.summary is not None and trace.warnings[0] in prof.summary["warnings"]


CRASHING_JOB = textwrap.dedent("""
    import os, signal, sys, time
    import distprof
    with distprof.Profiler(out=sys.argv[1], quiet=True) as prof:
        for step in range(10):
            with distprof.phase("forward"):
                time.sleep(0.002)
            if step == 4 and sys.argv[2] == "mid-step":
                os.kill(os.getpid(), signal.SIGKILL)   # dies mid-step, no cleanup at all
            prof.step()
            if step == 4 and sys.argv[2] == "after-step":
                os.kill(os.getpid(), signal.SIGKILL)   # step 4 just handed to the writer thread
""")


@pytest.mark.parametrize("when", ["mid-step", "after-step"])
def test_killed_rank_keeps_every_completed_step_but_at_most_the_last(tmp_path, when):
    """Steps are written by the collector's writer thread; a step ends only once the one before
    it is committed, so a SIGKILL loses at most the last completed step (steps 0-4 are complete
    after step 4, 0-3 in the middle of it)."""
    script = tmp_path / "job.py"
    script.write_text(CRASHING_JOB)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI"))}
    proc = subprocess.run([sys.executable, str(script), str(out), when], env=env, capture_output=True)
    assert proc.returncode == -9
    trace = read_events(out / "rank0.sqlite")
    frame = trace.events.to_frame()
    steps = frame[frame["name"] == ev.PROFILE_STEP]
    completed = [0, 1, 2, 3, 4] if when == "after-step" else [0, 1, 2, 3]
    assert steps["step"].tolist() in (completed, completed[:-1])
    assert set(frame["step"]) == set(steps["step"])  # a step is kept whole or not at all
    assert any("did not finish" in w for w in trace.warnings)
    merged = run_cli("merge", str(out / "rank0.sqlite"), "-o", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stderr
    assert "did not finish" in " ".join(merged.stdout.split())  # a warning, wrapped at the console width
    assert "Traceback" not in merged.stdout + merged.stderr


def test_nvtx_off_still_records(tmp_path):
    with distprof.Profiler(out=tmp_path, quiet=True, collector={"nvtx": False}) as prof:
        with distprof.phase("forward"):
            pass
        prof.step()
    events = read_events(tmp_path / "rank0.sqlite").events.to_frame()
    assert (events["name"] == "forward").sum() == 1
    distprof.annotate.set_nvtx(True)


def test_world_from_launcher_variables():
    from distprof.transport import detect_world
    assert detect_world({"RANK": "3", "WORLD_SIZE": "8"}) == (3, 8, "env RANK")
    assert detect_world({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}) == (5, 6, "env SLURM_PROCID")
    assert detect_world({}) == (0, 1, "single process")


def test_file_schema_is_plain_sql(tmp_path):
    import sqlite3
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        with distprof.phase("forward"):
            pass
        prof.step()
    with sqlite3.connect(tmp_path / "rank0.sqlite") as db:
        rows = db.execute("SELECT n.name, r.end_ns - r.start_ns FROM distprof_ranges r "
                          "JOIN distprof_names n ON n.id = r.name_id").fetchall()
        meta = dict(db.execute("SELECT key, value FROM distprof_meta"))
    assert {name for name, _ in rows} == {"forward", ev.PROFILE_STEP}
    assert all(np.int64(d) >= 0 for _, d in rows)
    assert meta["complete"] == "1" and meta["rank"] == "0" and meta["world_size"] == "1"


def test_process_cpu_time_fills_the_cpu_process_row(tmp_path):
    """The collector writes process CPU time and wall time at every flush; the Device Summary's
    CPU(Process) row is their ratio (checked against the file's own meta, read with sqlite3)."""
    import sqlite3

    from distprof import pipeline
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        for _ in range(3):
            with distprof.phase("forward"):
                sum(i * i for i in range(200_000))  # CPU work, so the ratio is well above 0
            prof.step()
    with sqlite3.connect(tmp_path / "rank0.sqlite") as db:
        meta = dict(db.execute("SELECT key, value FROM distprof_meta"))
    cpu_ns, elapsed_ns = int(meta["process_cpu_ns"]), int(meta["elapsed_ns"])
    assert 0 < cpu_ns and 0 < elapsed_ns
    config = distprof.config.load()
    result = pipeline.reduce_rank(native.read(tmp_path / "rank0.sqlite", config)[0], config)
    row = next(r for r in result.tables.device if r.device == "CPU(Process)")
    assert row.busy_ns == cpu_ns and row.utilization == pytest.approx(cpu_ns / elapsed_ns)


def test_a_range_nested_in_itself_reports_and_closes_both_uses(tmp_path):
    """One start slot per range, the outer starts kept only while it nests in itself: the hang
    watchdog sees both open uses, outer first, and closing restores the outer one."""
    from distprof.annotate import open_ranges
    with distprof.Profiler(out=str(tmp_path), quiet=True):
        forward = distprof.phase("forward")
        with forward:
            with forward:
                opened = [starts for name, _, _, _, starts in open_ranges() if name == "forward"]
                assert len(opened) == 1 and len(opened[0]) == 2 and opened[0][0] <= opened[0][1]
            assert [len(s) for n, _, _, _, s in open_ranges() if n == "forward"] == [1]
        assert not [s for n, _, _, _, s in open_ranges() if n == "forward"]


def test_comm_ranges_with_varying_sizes_stay_bounded(tmp_path, monkeypatch):
    """An all-to-all whose size changes every call keeps at most MAX_COMM_RANGES cached ranges per
    thread, and every call is still recorded with its own size."""
    from distprof import annotate
    monkeypatch.setattr(annotate, "MAX_COMM_RANGES", 8)
    sizes = list(range(1, 30))
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        outer = distprof.comm("all_to_all", group=[0], nbytes=1000)
        with outer:  # open while the cache starts again: still closes and records
            for size in sizes:
                with distprof.comm("all_to_all", group=[0], nbytes=size):
                    pass
                assert len(annotate._comm_keys.__dict__) <= 8
        prof.step()
    events = read_events(tmp_path / "rank0.sqlite").events
    assert sorted(events["nbytes"][events["name"].eq("all_to_all")].tolist()) == sorted([*sizes, 1000])
