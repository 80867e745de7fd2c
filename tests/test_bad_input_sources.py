"""Bad inputs at the readers (issue 42): each ends as one line naming the file and the problem, a
warning beside a partial result or exit 2 where nothing usable is left, never a silently wrong
figure. Figures are checked against the intact input or an independent computation."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli
from kineto_fixtures import CommOp, KinetoTrace, collective_job, overlap_trace
from result_views import summary_json

from distprof import config as config_mod
from distprof import pipeline, sources
from distprof.collector import Collector
from distprof.events import SourceError


def rank_figures(*paths: Path) -> list[dict]:
    """summary.json's rank rows of an in-process merge with the default config."""
    return summary_json(pipeline.merge_files(list(paths), config_mod.load()))["ranks"]


def told(warnings: list[str], path: Path, *needles: str) -> str:
    """The one warning naming ``path`` that holds every needle."""
    found = [w for w in warnings if w.startswith(f"{path}:") and all(needle in w for needle in needles)]
    assert len(found) == 1, warnings
    return found[0]


# ---------------------------------------------------------------- nsys: negative timestamps

def test_nsys_negative_kernel_times_are_dropped_with_a_warning(tmp_path):
    """Kernels whose start lost its sign spanned 0: computation 18,067.77 ms where the file has
    10.17 ms, without a word. nsys times count from the session start: the rows are dropped, a
    kernel whose launch call is negative keeps its own time, and the rest is exact."""
    from nsys_fixtures import real_export
    intact = real_export("nvfuser_report1_nsys2025.1.1.sqlite")
    path = shutil.copy(intact, tmp_path / "rank0.sqlite")
    with sqlite3.connect(intact) as db:  # one stream, kernels back to back: computation = sum of durations
        (total,) = db.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        (kept,) = db.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 1").fetchone()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -start WHERE rowid % 2 = 0")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -start, end = -end WHERE correlationId = "
                   "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 3)")
    (before,) = rank_figures(Path(intact))
    assert before["computation_ns"] == total == 10_167_602
    trace = sources.read(path, {})[0]
    told(trace.warnings, path, "9 GPU op(s), 1 launch call(s) with a negative timestamp dropped")
    (after,) = rank_figures(path)
    assert after["computation_ns"] == kept and after["window_ns"] == before["window_ns"]


# ---------------------------------------------------------------- native rank files

def native_file(path: Path, rank: int = 0, world_size: int = 1, clock: bool = False, **meta) -> Path:
    """A real collector file: steps 0 and 1 at [1, 1.9) and [2, 2.9) ms, a Forward phase of 490 us
    in each (the computation: no COMPUTE ranges), complete; with ``clock`` two ping-pong samples;
    ``meta``: more distprof_meta facts."""
    collector = Collector(path, rank=rank, world_size=world_size)
    if clock:
        collector.record_clock("start", 1000, 200)
        collector.record_clock("stop", 1200, 300)
    for step in range(2):
        collector.step = step
        base = 1_000_000 * (step + 1)
        collector.record("ProfileStep", "PHASE", "range", base, base + 900_000)
        collector.record("Forward", "PHASE", "range", base + 10_000, base + 500_000)
        collector.flush()
    collector.set_meta(complete=1, **meta)
    collector.close()
    return path


@pytest.mark.parametrize("samples, offset, uncertainty, needle", [
    ([("start", 3_070_000_000_000_000_000, -5000)], 0, 0, "this rank keeps its own clock"),
    ([("start", 3_070_000_000_000_000_000, -5000), ("stop", 1200, 300)], -1200, 150, "the others are used"),
    ([("start", 5, 7 * 10 ** 12), ("stop", -(2 ** 62), 300)], 0, 0, "2 distprof_clock sample(s)"),
])
def test_native_clock_out_of_range_is_dropped(tmp_path, samples, offset, uncertainty, needle):
    """An offset of -3.07e18 and a negative uncertainty reached summary.json, with only "partial
    result" said: a sample outside a boot clock's range (or with a round trip below 0 or above a
    minute) is dropped, naming the value."""
    path = native_file(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO distprof_clock VALUES (?, ?, ?)", samples)
    trace = sources.read(path, {})[0]
    assert (trace.clock_offset_ns, trace.clock_uncertainty_ns) == (offset, uncertainty)
    warning = told(trace.warnings, path, "distprof_clock sample(s) out of range dropped", needle)
    assert str(samples[0][1]) in warning and str(samples[0][2]) in warning
    (rank,) = rank_figures(path)
    assert rank["clock_offset_ns"] == offset and rank["clock_uncertainty_ns"] >= 0


def test_native_time_near_int64_limit_is_dropped(tmp_path):
    """A range at 9e18 ns (no boot clock reaches it) made a 292-year window: dropped, the rest exact."""
    path = native_file(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_ranges SET start_ns = 9000000000000000000, end_ns = 9000000000000000100 "
                   "WHERE rowid = (SELECT max(rowid) FROM distprof_ranges)")
    trace = sources.read(path, {})[0]
    told(trace.warnings, path, "1 range row(s) dropped", "9000000000000000000", "corrupt timestamps")
    (rank,) = rank_figures(path)
    assert (rank["computation_ns"], rank["window_ns"], rank["steps"]) == (490_000, 1_800_000, 2)


@pytest.mark.parametrize("rank_text, needle", [("-5", "rank -5 in distprof_meta is negative"),
                                                ("abc", "rank 'abc' in distprof_meta is not an integer")])
def test_native_rank_that_is_not_a_rank_is_refused_with_a_warning(tmp_path, rank_text, needle):
    """Rank -5 of world "lots" became rank 0 of 1 without naming why: the stated rank and world are
    refused by name, and the merge numbers the file by input order (as a rank outside the world)."""
    path = native_file(tmp_path / "rank3.sqlite", rank=3, world_size=4)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_meta SET value = ? WHERE key = 'rank'", (rank_text,))
        db.execute("UPDATE distprof_meta SET value = 'lots' WHERE key = 'world_size'")
    trace = sources.read(path, {})[0]
    assert trace.rank is None and trace.rank_from == "unknown"
    told(trace.warnings, path, needle, "numbered by input order instead")
    told(trace.warnings, path, "world_size 'lots' in distprof_meta is not an integer; ignored")
    summary = summary_json(pipeline.merge_files([path], config_mod.load()))
    assert [r["rank"] for r in summary["ranks"]] == [0] and summary["world_size"] == 1
    assert any(needle in w for w in summary["warnings"])


# ---------------------------------------------------------------- steps of zero length or overlapping

@pytest.mark.parametrize("which, figures", [
    ("1", (490_000, 900_000, 1)),           # the other step is the window
    ("0, 1", (980_000, 1_490_000, 0)),      # no step left: the whole trace, the Forwards' [1.01, 2.5) ms
])
def test_native_zero_length_steps_are_dropped(tmp_path, which, figures):
    """Zero-length steps made every figure 0, without a word."""
    path = native_file(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE distprof_ranges SET end_ns = start_ns WHERE step IN ({which}) AND name_id = "
                   "(SELECT id FROM distprof_names WHERE name = 'ProfileStep')")
    told(sources.read(path, {})[0].warnings, path, f"{len(which.split(','))} step range(s) of zero length dropped")
    (rank,) = rank_figures(path)
    assert (rank["computation_ns"], rank["window_ns"], rank["steps"]) == figures


def test_native_overlapping_steps_are_named(tmp_path):
    """Step 0 running into step 1: kept (the window is their union), the overlap named."""
    path = native_file(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_ranges SET end_ns = 2500000 WHERE step = 0 AND name_id = "
                   "(SELECT id FROM distprof_names WHERE name = 'ProfileStep')")
    told(sources.read(path, {})[0].warnings, path, "1 step range(s) overlap an earlier step",
         "steps 0 and 1 by 500.0 us", "the window is their union")
    (rank,) = rank_figures(path)
    assert (rank["computation_ns"], rank["window_ns"], rank["steps"]) == (980_000, 1_900_000, 2)


def kineto_steps(path: Path, step1_end: int = 100_000, step2_end: int = 200_000) -> Path:
    """overlap_trace with its ProfilerStep#1 / #2 ending where asked (their starts stay 1 and 100 us)."""
    trace = overlap_trace(rank=0)
    for event in trace.events:
        if event["name"] in ("ProfilerStep#1", "ProfilerStep#2"):
            start, end = (1_000, step1_end) if event["name"] == "ProfilerStep#1" else (100_000, step2_end)
            event["dur"] = trace._time(end - start)
    return trace.write(path)


@pytest.mark.parametrize("ends, figures, needle", [
    ((100_000, 100_000), (50_000, 30_000, 99_000, 1), "1 step range(s) of zero length dropped (e.g. step 2"),
    ((1_000, 100_000), (100_000, 95_000, 329_000, 0), "2 step range(s) of zero length dropped (e.g. step 1"),
    ((150_000, 200_000), (90_000, 60_000, 199_000, 2), "steps 1 and 2 by 50.0 us"),
])
def test_kineto_zero_length_and_overlapping_steps(tmp_path, ends, figures, needle):
    """overlap_trace's figures, worked out by hand in its docstring: step 1 alone, the whole trace
    (no step left), and the union of two overlapping steps (the intact window)."""
    path = kineto_steps(tmp_path / "rank0.json", *ends)
    told(sources.read(path, {})[0].warnings, path, needle)
    (rank,) = rank_figures(path)
    assert (rank["computation_ns"], rank["communication_ns"], rank["window_ns"], rank["steps"]) == figures


@pytest.mark.parametrize("extra, figures, needle", [
    ((40_000, 40_000), (18_000, 30_000, 1), "1 step range(s) of zero length dropped (e.g. step 1"),
    ((30_000, 60_000), (18_000, 50_000, 2), "steps 0 and 1 by 10.0 us"),
])
def test_nsys_zero_length_and_overlapping_steps(tmp_path, extra, figures, needle):
    """nsys_fixtures.one_step_rank (step 0: GPU window [10, 40) us, gemm 10 + elementwise 8 us of
    computation) with a second ProfileStep NVTX range: of zero length (dropped: the figures are the
    fixture's), or overlapping step 0 (kept: the window is the union, [10, 60) us)."""
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL folder is absent")
    export = fx.one_step_rank(fx.NsysExport())
    export.range(4242, *extra, "ProfileStep#1")
    path = export.write(tmp_path / "rank0.sqlite")
    told(sources.read(path, {})[0].warnings, path, needle)
    (rank,) = rank_figures(path)
    assert (rank["computation_ns"], rank["window_ns"], rank["steps"]) == figures


# ---------------------------------------------------------------- Kineto: collective args vs op names

def kinds_matched(files: list[Path]) -> dict:
    summary = summary_json(pipeline.merge_files(files, config_mod.load()))
    return {kind["name"]: kind["matched"] for kind in summary["skew"]["kinds"]}


@pytest.mark.parametrize("said, kind, needle", [
    ("lots", "allreduce", "names no known collective ('lots' on nccl:all_reduce): the op's name gives its kind"),
    ("all_gather", "allgather", "contradicts its op's name ('all_gather' on nccl:all_reduce): the args' kind "
                                "(allgather) is used"),
])
def test_kineto_collective_args_contradicting_the_op_are_named(tmp_path, said, kind, needle):
    """record_param_comms' and the kernel's "Collective name" against nccl:all_reduce: a text naming
    no collective made every op "other", 0 matched, without a word; a known kind that no op name
    agrees with is kept (the args are the most explicit source) and named."""
    ops = {rank: [CommOp("allreduce", "0", (0, 1), 1 << 20, start_us=100 + 200 * i) for i in range(3)]
           for rank in (0, 1)}
    files = collective_job(tmp_path, ops)
    assert kinds_matched(files) == {"allreduce": 3}
    for path in files:
        document = json.loads(path.read_text())
        for event in document["traceEvents"]:
            if "Collective name" in (event.get("args") or {}):
                event["args"]["Collective name"] = said
        path.write_text(json.dumps(document))
    told(sources.read(files[0], {})[0].warnings, files[0], f"3 collective(s) whose 'Collective name' arg {needle}")
    assert kinds_matched(files) == {kind: 3}


def test_kineto_cpu_c10d_op_contradicting_its_args_is_named(tmp_path):
    """A gloo CPU trace: c10d::allreduce_ holding a record_param_comms that says all_gather."""
    trace = KinetoTrace(rank=0, backend="gloo")
    trace.step(1, 0, 100_000)
    trace.cpu_op("c10d::allreduce_", 10_000, 40_000)
    trace.cpu_op("record_param_comms", 11_000, 20_000, **{"Collective name": "all_gather"})
    trace.cpu_op("gloo:all_reduce", 12_000, 39_000, tid=99, cat="user_annotation")
    path = trace.write(tmp_path / "rank0.json")
    told(sources.read(path, {})[0].warnings, path, "1 collective(s) whose 'Collective name' arg contradicts",
         "('all_gather' on c10d::allreduce_)")


@pytest.mark.parametrize("size, example", [(1e30, "(e.g. 1e+30)"), ("1e400", '(e.g. "1e400")'),
                                           (2 ** 62, "(e.g. 4611686018427387904)"),
                                           ("9" * 60, '(e.g. "' + "9" * 36 + "...)")])
def test_kineto_size_warning_names_the_value_the_file_holds(tmp_path, size, example):
    """The warning said "(e.g. 1e400)" whatever the file held."""
    comm = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 2000, "dur": 30,
            "args": {"In msg nelems": size, "Out msg nelems": 16, "dtype": "Float", "Collective name": "allreduce"}}
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000,
            "dur": 5000}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [step, comm]}))
    told(sources.read(path, {})[0].warnings, path, "1 collective message size(s)", f"out of range {example}")


# ---------------------------------------------------------------- native rank file without its -wal

def running_rank(path: Path, checkpoint_after: int | None) -> Collector:
    """A collector still writing (WAL mode): two flushed steps, all in the -wal except what a
    checkpoint after step ``checkpoint_after`` moved into the main file."""
    collector = Collector(path, rank=0, world_size=1)
    for step in range(2):
        collector.step = step
        base = 1_000_000 * (step + 1)
        collector.record("ProfileStep", "PHASE", "range", base, base + 900_000)
        collector.flush()
        if step == checkpoint_after:
            collector._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return collector


def test_rank_file_copied_without_its_wal_says_so(tmp_path):
    """Copied while the rank ran, without its -wal: "SQLite file but not an nsys export". The main
    file of a WAL-mode SQLite file has no tables then; said so, exit 2 (nothing usable)."""
    collector = running_rank(tmp_path / "rank0.sqlite", checkpoint_after=None)
    (tmp_path / "copied").mkdir()
    copy = Path(shutil.copy(tmp_path / "rank0.sqlite", tmp_path / "copied" / "rank0.sqlite"))
    collector.close()
    with pytest.raises(SourceError, match=r"distprof rank file whose -wal file is missing \(copied without it\?\)"):
        sources.read(copy, {})
    result = run_cli("merge", str(copy), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("distprof: error:")]
    assert len(errors) == 1 and str(copy) in errors[0] and "copy rank0.sqlite-wal next to it" in errors[0]


@pytest.mark.parametrize("checkpoint_after, steps", [(0, 1), (1, 2)])
def test_rank_file_with_a_partial_main_file_warns(tmp_path, checkpoint_after, steps):
    """The distprof tables are in the main file (a checkpoint ran) but later steps may be in the
    missing -wal: the steps there are kept, with a warning saying what may be missing."""
    collector = running_rank(tmp_path / "rank0.sqlite", checkpoint_after)
    (tmp_path / "copied").mkdir()
    copy = Path(shutil.copy(tmp_path / "rank0.sqlite", tmp_path / "copied" / "rank0.sqlite"))
    collector.close()
    trace = sources.read(copy, {})[0]
    assert int((trace.events.to_frame()["name"] == "ProfileStep").sum()) == steps
    told(trace.warnings, copy, "did not finish", "distprof rank file whose -wal file is missing (copied without it?)")
    assert not any("-wal" in w for w in sources.read(tmp_path / "rank0.sqlite", {})[0].warnings)
