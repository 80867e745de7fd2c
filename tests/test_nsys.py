"""The nsys reader on synthetic exports built from the real DDL (exact figures by construction)
and on the real exports in tests/data/nsys (facts stated in its README and SCHEMA.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import nsys_fixtures as fx
import numpy as np
import pandas as pd
import pytest
from result_views import rank_figures, rank_row, summary_json  # noqa: F401

from distprof import config as config_module
from distprof import events as ev
from distprof import joins, pipeline, sources
from distprof.sources import nsys

pytestmark = pytest.mark.skipif(not fx.ddl_available(), reason=f"nsys DDL folder {fx.DDL_DIR} is absent")
ALL_SCHEMAS = list(fx.SCHEMAS)


@pytest.fixture
def config() -> dict:
    return config_module.load()


def write(export: fx.NsysExport, tmp_path: Path, name: str = "report.sqlite") -> Path:
    return export.write(tmp_path / name)


def figures(summary: dict) -> dict:
    return {key: summary[key] for key in fx.SEPARATE_STREAM_FIGURES}


def rows(events, kind: str):
    frame = events.to_frame() if isinstance(events, ev.Table) else events
    return frame[frame["kind"] == kind]


def values(frame, *columns: str) -> list[list]:
    """Rows of the given columns as plain lists (categoricals as their strings)."""
    return [[str(v) if not isinstance(v, (int, np.integer)) else int(v) for v in row]
            for row in frame[list(columns)].astype(object).values.tolist()]


@pytest.mark.parametrize("schema", ALL_SCHEMAS)
def test_fixture_tables_are_the_real_ddl(schema, tmp_path):
    path = write(fx.NsysExport(schema=schema), tmp_path)
    with sqlite3.connect(path) as connection:
        created = dict(connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    expected = {name: text.rstrip(";").rstrip() for name, text in fx.create_statements(schema).items()}
    assert created == expected


# -- Distributed Summary figures from the known timelines ----------------------------------------

@pytest.mark.parametrize("schema", ALL_SCHEMAS)
def test_nccl_on_separate_stream_gives_exact_overlap(schema, tmp_path, config):
    has_nvtx = fx.has_table(schema, "NVTX_EVENTS")   # the 2025.5 DDL (flameox) has no NVTX table
    path = write(fx.one_step_rank(fx.NsysExport(schema=schema), nvtx=has_nvtx), tmp_path)
    [trace] = nsys.read(path, config)
    summary = rank_figures(trace.events, config)
    # without ProfileStep ranges the window is the whole trace: launch calls from 3_000 on
    expected = fx.SEPARATE_STREAM_FIGURES if has_nvtx else {**fx.SEPARATE_STREAM_FIGURES, "window_ns": 37_000,
                                                            "idle_ns": 9_000}
    assert figures(summary) == expected
    assert summary["overlap_ratio"] == pytest.approx(1 / 3)
    assert summary["comm_lanes"] == ["cuda:0/stream 15"]
    assert summary["compute_lanes"] == ["cuda:0/stream 7"]


def test_nccl_on_compute_stream_is_serialized(tmp_path, config):
    path = write(fx.one_step_rank(fx.NsysExport(), nccl_on_compute_stream=True), tmp_path)
    [trace] = nsys.read(path, config)
    result = rank_row(pipeline.reduce_rank(trace, config))
    assert figures(result) == fx.SAME_STREAM_FIGURES
    assert result["comm_lanes"] == result["compute_lanes"] == ["cuda:0/stream 7"]


def test_kernel_prefixes_come_from_config(tmp_path):
    path = write(fx.one_step_rank(fx.NsysExport()), tmp_path)
    config = config_module.load(overrides={"communication": {"kernel_prefixes": ["gemm"]}})
    [trace] = nsys.read(path, config)
    kernels = rows(trace.events, ev.KERNEL)
    assert dict(zip(kernels["name"].astype(str), kernels["category"].astype(str))) == {
        "gemm": ev.COMMUNICATION, "elementwise": ev.COMPUTE, fx.NCCL_KERNEL: ev.COMPUTE}


# -- event table contents --------------------------------------------------------------------------

def test_event_columns_of_one_rank(tmp_path, config):
    path = write(fx.one_step_rank(fx.NsysExport(env={"RANK": "0"}), pid=4242, device=3), tmp_path)
    [trace] = nsys.read(path, config)
    events = trace.events.to_frame()
    assert (trace.rank, trace.rank_from, trace.pid, trace.device) == (0, "env RANK", 4242, 3)
    assert (trace.source, trace.source_file) == ("nsys", str(path))
    kernels = rows(events, ev.KERNEL)
    assert kernels["lane_kind"].astype(str).unique().tolist() == [ev.GPU_STREAM]
    assert kernels[["device", "lane", "pid"]].drop_duplicates().values.tolist() == [[3, 7, 4242], [3, 15, 4242]]
    assert kernels["correlation_id"].tolist() == [1, 2, 3]
    runtime = rows(events, ev.RUNTIME)
    assert runtime["name"].astype(str).tolist() == ["cudaLaunchKernel_v7000", "cudaLaunchKernel_v7000",
                                                    "cuLaunchKernelEx"]
    assert runtime["category"].astype(str).unique().tolist() == [ev.RUNTIME_CAT]
    assert runtime[["lane", "lane_kind"]].astype({"lane_kind": str}).drop_duplicates().values.tolist() == [
        [4242, ev.HOST_THREAD]]
    comm_ops = rows(events, ev.COMM_OP)
    assert values(comm_ops, "name", "category", "start_ns", "end_ns") == [
        ["ncclAllReduce", ev.COMMUNICATION, 20_000, 21_000]]
    phases = events[(events["kind"] == ev.RANGE) & (events["category"] == ev.PHASE)]
    assert sorted(phases[["name", "start_ns", "end_ns", "step"]].astype({"name": str}).values.tolist()) == [
        [ev.PROFILE_STEP, 10_000, 40_000, 0], ["backward", 10_000, 30_000, 0], ["forward", 2_000, 10_000, 0]]
    assert dict(zip(kernels["name"].astype(str), kernels["phase"].astype(str))) == {
        "gemm": "forward", "elementwise": "backward", fx.NCCL_KERNEL: "backward"}


def test_kernel_phase_is_the_innermost_phase_around_its_launch(tmp_path, config):
    export = fx.NsysExport()
    pid = 77
    export.range(pid, 0, 100_000, "ProfilerStep#3")                       # PyTorch's spelling
    export.range(pid, 1_000, 40_000, "forward", domain="distprof")
    export.range(pid, 5_000, 20_000, "attention", domain="distprof")
    export.range(pid, 6_000, 7_000, "my_user_range")                    # USER: not a phase
    export.range(pid, 40_000, 90_000, "backward", domain="distprof", event_type=fx.NVTX_START_END)  # start/end range
    export.range(pid, 41_000, 42_000, "allreduce_grads", domain="distprof", category=2)
    export.range(pid, 43_000, 44_000, "user_note", domain="distprof", category=3)
    launched = {
        "in_attention": (6_500, 6_600), "in_forward": (30_000, 30_100), "in_backward": (50_000, 50_100),
        "in_comm_range": (41_500, 41_600), "after_step": (120_000, 120_100),
    }
    for offset, (name, launch) in enumerate(launched.items()):
        export.kernel(pid, 0, 7, 200_000 + offset * 1_000, 200_500 + offset * 1_000, name, launch=launch)
    export.kernel(pid, 0, 7, 300_000, 300_500, "never_launched")          # no runtime row
    export.kernel(pid, 0, 7, 310_000, 310_500, "other_thread", launch=(6_500, 6_600), tid=78)
    export.mark(pid, 8_000, "checkpoint")
    [trace] = nsys.read(write(export, tmp_path), config)
    events = trace.events.to_frame()
    kernels = rows(events, ev.KERNEL)
    got = {name: (phase, step) for name, phase, step in
           zip(kernels["name"].astype(str), kernels["phase"].astype(str), kernels["step"])}
    assert got == {"in_attention": ("attention", 3), "in_forward": ("forward", 3), "in_backward": ("backward", 3),
                   "in_comm_range": ("backward", 3), "after_step": ("", -1), "never_launched": ("", -1),
                   "other_thread": ("", -1)}
    by_name = {name: (kind, category) for name, kind, category in
               zip(events["name"].astype(str), events["kind"].astype(str), events["category"].astype(str))}
    assert by_name["my_user_range"] == (ev.RANGE, ev.USER)
    assert by_name["allreduce_grads"] == (ev.COMM_OP, ev.COMMUNICATION)
    assert by_name["user_note"] == (ev.RANGE, ev.USER)
    assert by_name["backward"] == (ev.RANGE, ev.PHASE)
    mark = events[(events["kind"] == ev.MARK) & (events["name"] != nsys.ACTIVITY_MARK)]  # not the span marks
    assert values(mark, "name", "start_ns", "end_ns", "phase", "step") == [
        ["checkpoint", 8_000, 8_000, "attention", 3]]
    user_range = events[events["name"] == "my_user_range"]
    assert user_range["phase"].astype(str).tolist() == ["attention"]
    # the step's GPU span: the four kernels launched inside its CPU range
    step = events[events["name"] == ev.PROFILE_STEP]
    assert step[["start_ns", "end_ns", "step"]].values.tolist() == [[200_000, 203_500, 3]]


def test_step_without_gpu_work_keeps_cpu_bounds(tmp_path, config):
    export = fx.NsysExport()
    export.range(5, 0, 1_000, "ProfileStep#0")
    export.range(5, 1_000, 2_000, "ProfileStep#1")
    export.kernel(5, 0, 7, 1_500, 4_000, "k", launch=(1_200, 1_300))
    [trace] = nsys.read(write(export, tmp_path), config)
    frame = trace.events.to_frame()
    steps = frame[frame["name"] == ev.PROFILE_STEP]
    assert steps[["step", "start_ns", "end_ns"]].values.tolist() == [[0, 0, 1_000], [1, 1_500, 4_000]]
    assert rank_figures(trace.events, config)["window_ns"] == 1_000 + 2_500


def test_distprof_profiler_steps_are_numbered_in_order(tmp_path, config):
    """distprof.Profiler emits start/end ranges named 'ProfileStep' (no number), category PHASE."""
    export = fx.NsysExport()
    for step in range(3):
        base = step * 10_000
        export.range(6, base, base + 10_000, "ProfileStep", domain="distprof", category=1, event_type=fx.NVTX_START_END)
        export.range(6, base + 100, base + 5_000, "forward", domain="distprof", category=1)
        export.kernel(6, 0, 7, base + 2_000, base + 9_000, "gemm", launch=(base + 200, base + 300))
    export.range(7, 0, 5, "ProfileStep", domain="other")                 # same name elsewhere: a step too
    export.kernel(7, 1, 7, 0, 10, "gemm", launch=(1, 2))
    traces = nsys.read(write(export, tmp_path), config)
    events = traces[0].events.to_frame()
    steps = events[events["name"] == ev.PROFILE_STEP]
    assert values(steps, "step", "start_ns", "end_ns", "category") == [
        [0, 2_000, 9_000, ev.PHASE], [1, 12_000, 19_000, ev.PHASE], [2, 22_000, 29_000, ev.PHASE]]
    assert rows(events, ev.KERNEL)["step"].tolist() == [0, 1, 2]
    assert values(events[events["name"] == "forward"], "step", "phase") == [[0, "forward"], [1, "forward"],
                                                                            [2, "forward"]]
    other = traces[1].events.to_frame()
    assert values(other[other["kind"] == ev.RANGE], "name", "category", "step", "end_ns") == [
        [ev.PROFILE_STEP, ev.PHASE, 0, 10]]


def test_memcpy_and_memset_are_memory(tmp_path, config):
    export = fx.NsysExport()
    export.memcpy(9, 0, 7, 100, 200, launch=(10, 20))
    export.memset(9, 0, 7, 300, 350)
    [trace] = nsys.read(write(export, tmp_path), config)
    frame = trace.events.to_frame()
    gpu = frame[frame["lane_kind"] == ev.GPU_STREAM]
    assert gpu[["kind", "category", "name"]].astype(str).values.tolist() == [
        [ev.MEMCPY, ev.MEMORY, "[CUDA memcpy Host-to-Device]"], [ev.MEMSET, ev.MEMORY, "[CUDA memset]"]]
    assert rows(trace.events, ev.RUNTIME)["name"].astype(str).tolist() == ["cudaMemcpyAsync_v3020"]


def test_missing_strings_and_domains_are_tolerated(tmp_path, config):
    export = fx.NsysExport()
    export.kernel(1, 0, 7, 100, 200, "short_gone", demangled="void long_name<float>(float*)")
    export.kernel(1, 0, 7, 300, 400, "both_gone", demangled="both_gone_too")
    export.range(1, 0, 1_000, "registered_gone", registered=True)
    export.range(1, 0, 500, "orphan_domain", domain_id=9)                # no domain-create row
    path = write(export, tmp_path)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM StringIds WHERE value IN "
                           "('short_gone', 'both_gone', 'both_gone_too', 'registered_gone')")
    [trace] = nsys.read(path, config)
    frame = trace.events.to_frame()
    names = frame["name"].astype(str).tolist()
    assert "void long_name<float>(float*)" in names
    assert any(name.startswith("<unknown string ") for name in names)
    assert any("missing from StringIds" in w for w in trace.warnings)
    orphan = frame[frame["name"] == "orphan_domain"]
    assert orphan["category"].astype(str).tolist() == [ev.USER]


# -- processes and ranks ---------------------------------------------------------------------------

def two_rank_report() -> fx.NsysExport:
    """torchrun under one nsys: pid 300 on device 1, pid 400 on device 0, same stream and
    correlation ids in both; pid 500 is a helper with NVTX only. Kernel 'k' of pid 300 is launched
    in 'forward', the one of pid 400 in 'backward'."""
    export = fx.NsysExport(env={"MASTER_PORT": "29500"})
    for pid, device, phase in ((300, 1, "forward"), (400, 0, "backward")):
        export.range(pid, 0, 10_000, phase, domain="distprof")
        export.kernel(pid, device, 7, 20_000, 30_000, "k", launch=(1_000, 1_100))
        export.kernel(pid, device, 7, 30_000, 31_000, f"only_{pid}", launch=(20_000, 20_100))
    export.range(500, 0, 5, "dataloader_worker")
    return export


def test_two_ranks_in_one_report_split_by_process(tmp_path, config):
    traces = nsys.read(write(two_rank_report(), tmp_path), config)
    assert [(t.pid, t.device, t.rank, t.rank_from) for t in traces] == [
        (400, 0, None, "device order"), (300, 1, None, "device order")]
    for trace, phase in zip(traces, ("backward", "forward")):
        kernels = rows(trace.events, ev.KERNEL)
        assert set(kernels["pid"]) == {trace.pid}
        assert kernels["name"].astype(str).tolist() == ["k", f"only_{trace.pid}"]
        assert kernels["phase"].astype(str).tolist() == [phase, ""]
        assert rows(trace.events, ev.RUNTIME)["correlation_id"].tolist() == [1, 2]
        assert sorted(trace.events.to_frame()["name"].astype(str).unique()) == sorted(
            ["k", f"only_{trace.pid}", phase, "cudaLaunchKernel_v7000", nsys.ACTIVITY_MARK])  # + span marks
    assert traces[0].warnings == [f"{tmp_path / 'report.sqlite'}: process(es) 500 have NVTX ranges but no "
                                  "CUDA activity; not counted as ranks"]
    assert traces[1].warnings == []
    results = [pipeline.reduce_rank(trace, config) for trace in traces]
    summary = summary_json(pipeline.combine(results, config, source="nsys"))
    assert [(row["rank"], row["pid"], row["device"]) for row in summary["ranks"]] == [(0, 400, 0), (1, 300, 1)]


def test_launcher_rank_is_ignored_for_several_processes(tmp_path, config):
    export = two_rank_report()
    export.env = {"RANK": "0"}
    traces = nsys.read(write(export, tmp_path), config)
    assert [t.rank for t in traces] == [None, None]
    assert any("captured RANK=0 is the launcher's" in warning for warning in traces[0].warnings)


@pytest.mark.parametrize(("schema", "env", "expected"), [
    ("2026.2", {"RANK": "5", "OMPI_COMM_WORLD_RANK": "1"}, (5, "env RANK")),
    ("2026.2", {"SLURM_PROCID": "7"}, (7, "env SLURM_PROCID")),
    ("2024.5", {"PMI_RANK": "2", "SLURM_PROCID": "9"}, (2, "env PMI_RANK")),
    ("2022.2", {"PATH": "/usr/bin", "OMPI_COMM_WORLD_RANK": "3"}, (3, "env OMPI_COMM_WORLD_RANK")),
    ("2026.2", {"PATH": "/usr/bin"}, (None, "file order")),
])
def test_rank_from_captured_environment(schema, env, expected, tmp_path, config):
    [trace] = nsys.read(write(fx.one_step_rank(fx.NsysExport(schema=schema, env=env)), tmp_path), config)
    assert (trace.rank, trace.rank_from) == expected


def test_rank_from_mpi_thread_name(tmp_path, config):
    export = fx.one_step_rank(fx.NsysExport(schema="2022.2"), pid=11)
    export.thread_name(11, 0, "MPI Rank 6")
    [trace] = nsys.read(write(export, tmp_path), config)
    assert (trace.rank, trace.rank_from) == (6, "NVTX thread name 'MPI Rank N'")


def test_2022_duplicated_runtime_rows_count_once(tmp_path, config):
    path = write(fx.one_step_rank(fx.NsysExport(schema="2022.2")), tmp_path)
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone() == (6,)
    [trace] = nsys.read(path, config)
    runtime = rows(trace.events, ev.RUNTIME)
    assert runtime["correlation_id"].tolist() == [1, 2, 3]
    assert runtime["name"].astype(str).tolist() == ["cudaLaunchKernel_v7000", "cudaLaunchKernel_v7000",
                                                    "cuLaunchKernelEx"]
    assert trace.meta["nsys_version"] == "2022.2.1.31"


# -- clocks -----------------------------------------------------------------------------------------

def test_clock_offset_is_the_session_start(tmp_path, config):
    export = fx.one_step_rank(fx.NsysExport(session_start_utc_ns=1_700_000_000_123_456_789))
    [trace] = nsys.read(write(export, tmp_path), config)
    assert trace.clock_offset_ns == 1_700_000_000_123_456_789
    assert rows(trace.events, ev.KERNEL)["start_ns"].min() == 10_000    # events keep the file's clock
    assert trace.meta["time_normalized"] is False


@pytest.mark.parametrize("schema", ["2026.2", "2022.2"])  # 2022.2 has no EXPORT_PARAM rows: detected by value
def test_normalized_export_needs_no_offset(schema, tmp_path, config):
    start = 1_700_000_000_000_000_000
    export = fx.one_step_rank(fx.NsysExport(schema=schema, session_start_utc_ns=start, time_normalized=True),
                              offset=start)
    [trace] = nsys.read(write(export, tmp_path), config)
    assert trace.clock_offset_ns == 0
    assert trace.meta["time_normalized"] is True
    assert figures(rank_figures(trace.events, config)) == fx.SEPARATE_STREAM_FIGURES


def test_missing_session_start_warns(tmp_path, config):
    export = fx.one_step_rank(fx.NsysExport(session_start_utc_ns=None))
    path = write(export, tmp_path)
    [trace] = nsys.read(path, config)
    assert trace.clock_offset_ns == 0
    assert trace.warnings == [f"{path}: no TARGET_INFO_SESSION_START_TIME: timestamps are relative to the "
                              "session start and cannot be aligned with other files in absolute time"]


# -- optional tables --------------------------------------------------------------------------------

def test_only_tables_with_data_exist(tmp_path, config):
    """Newer nsys creates only tables with data: no NVTX_EVENTS, MEMSET, metadata, target info."""
    tables = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds"}
    export = fx.NsysExport(tables=tables, session_start_utc_ns=None)
    export.kernel(1, 0, 7, 100, 200, "k", launch=(10, 20))
    export.kernel(1, 0, 15, 150, 250, "ncclKernel_AllReduce_RING_LL_Sum_float")
    [trace] = nsys.read(write(export, tmp_path), config)
    summary = rank_figures(trace.events, config)
    assert (summary["communication_ns"], summary["computation_ns"], summary["overlap_ns"]) == (100, 100, 50)
    assert trace.meta["nvtx_domains"] == {} and trace.meta["nsys_version"] is None


def test_nvtx_only_report_is_one_host_rank(tmp_path, config):
    export = fx.NsysExport(schema="2022.2")
    export.range(8, 0, 1_000, "ProfileStep#0")
    export.range(8, 100, 600, "MPI_Allreduce", domain="MPI", registered=True)
    export.range(8, 0, 50, "MPI_Init", domain="MPI", registered=True)
    [trace] = nsys.read(write(export, tmp_path), config)
    assert (trace.pid, trace.device) == (8, None)
    events = trace.events.to_frame()
    assert dict(zip(events["name"].astype(str), events["category"].astype(str))) == {
        ev.PROFILE_STEP: ev.PHASE, "MPI_Allreduce": ev.COMMUNICATION, "MPI_Init": ev.USER,
        nsys.ACTIVITY_MARK: ev.RUNTIME_CAT}  # issue 12: instants at the first/last recorded activity
    assert rank_figures(trace.events, config)["communication_ns"] == 500


# -- bad input --------------------------------------------------------------------------------------

def assert_one_line_error(path: Path, config: dict, *words: str) -> None:
    """The nsys reader and the dispatch (which may catch it first) both give one line naming the
    file; the reader's own line says what is wrong."""
    for reader in (sources.read, nsys.read):
        with pytest.raises(ev.SourceError) as caught:
            reader(path, config)
        message = str(caught.value)
        assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message


def test_not_sqlite(tmp_path, config):
    path = tmp_path / "rank0.sqlite"
    path.write_text("this is not a database\n")
    assert_one_line_error(path, config, "not a SQLite file")


def test_unexported_report_gets_a_hint(tmp_path, config):
    path = tmp_path / "rank0.nsys-rep"
    path.write_bytes(b"\x00\x01binary report")
    with pytest.raises(ev.SourceError, match="nsys export --type sqlite"):
        nsys.read(path, config)


def test_sqlite_but_not_nsys(tmp_path, config):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE measurements (x INTEGER)")
    assert_one_line_error(path, config, "not an nsys export")


def test_table_without_its_columns(tmp_path, config):
    path = tmp_path / "odd.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, finish INTEGER)")
    assert_one_line_error(path, config, "CUPTI_ACTIVITY_KIND_KERNEL lacks column(s) end, deviceId, streamId, shortName")


def test_truncated_export(tmp_path, config):
    export = fx.NsysExport()
    for i in range(3_000):
        export.kernel(1, 0, 7, i * 10, i * 10 + 5, f"kernel_{i % 50}", launch=(i * 10, i * 10 + 1))
    path = write(export, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_one_line_error(path, config, "corrupt or truncated SQLite file")


def test_report_without_activity(tmp_path, config):
    export = fx.NsysExport(env={"RANK": "0"})
    export.mark(1, 10, "only a mark")
    assert_one_line_error(write(export, tmp_path), config, "no CUDA activity")


def test_unreadable_path(tmp_path, config):
    with pytest.raises(ev.SourceError, match="cannot read"):
        nsys.read(tmp_path / "missing.sqlite", config)


# -- the merge of several rank files (what `distprof merge` does) -------------------------------------

def test_merge_with_a_corrupt_and_a_missing_rank(tmp_path, config):
    fx.one_step_rank(fx.NsysExport(env={"RANK": "0"}), pid=100).write(tmp_path / "rank0.sqlite")
    (tmp_path / "rank1.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 3000)
    fx.one_step_rank(fx.NsysExport(env={"RANK": "2"}), pid=200, nccl_on_compute_stream=True).write(
        tmp_path / "rank2.sqlite")
    results, warnings = [], []
    for path in sources.expand([str(tmp_path)]):   # one file at a time, only compact results kept
        try:
            results += [pipeline.reduce_rank(trace, config) for trace in sources.read(path, config)]
        except ev.SourceError as error:
            warnings.append(str(error))
    summary = summary_json(pipeline.combine(results, config, source="nsys", warnings=warnings))
    assert [row["rank"] for row in summary["ranks"]] == [0, 2]
    assert summary["missing_ranks"] == [1]
    assert summary["world_size"] == 3
    assert any(str(tmp_path / "rank1.sqlite") in warning for warning in summary["warnings"])
    assert "partial result: no data for rank 1 of 3" in summary["warnings"]
    assert figures(summary["ranks"][0]) == fx.SEPARATE_STREAM_FIGURES
    assert figures(summary["ranks"][1]) == fx.SAME_STREAM_FIGURES
    assert summary["across_ranks"]["overlap_ns"]["max_rank"] == 0


# -- vectorized nesting -----------------------------------------------------------------------------

def test_innermost_enclosing_on_nested_ranges():
    # thread 1: [0,100] > [10,50] > [20,30]; [60,90]; thread 2: [0,100]
    thread = np.array([1, 1, 1, 1, 2])
    start = np.array([0, 10, 20, 60, 0])
    end = np.array([100, 50, 30, 90, 100])
    q_thread = np.array([1, 1, 1, 1, 1, 2, 3, 1, 1])
    q_start = np.array([25, 40, 55, 70, 0, 5, 5, 29, 200])
    q_end = np.array([26, 41, 56, 71, 100, 6, 6, 31, 201])
    found = joins.innermost_enclosing(thread, start, end, q_thread, q_start, q_end)
    assert found.tolist() == [2, 1, 0, 3, 0, 4, -1, 1, -1]


def test_innermost_enclosing_prefers_inner_range_with_the_same_start():
    found = joins.innermost_enclosing(np.array([1, 1]), np.array([0, 0]), np.array([5, 10]),
                                     np.array([1, 1]), np.array([1, 6]), np.array([2, 7]))
    assert found.tolist() == [0, 1]


def test_point_queries_in_disjoint_ranges_match_the_sweep():
    """Points (one array as start and end) in ranges that do not overlap per thread take a
    searchsorted per thread: the same rows as the general sweep, boundaries included (a point
    where one range ends and the next starts is the next's; a range's end is outside it)."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 20, 60)
    gaps = rng.integers(0, 3, 60)  # 0: the next range starts where this one ends
    start = np.cumsum(np.r_[0, (lengths + gaps)[:-1]])
    end = start + lengths
    thread = rng.integers(0, 3, 60)
    shuffled = rng.permutation(60)
    start, end, thread = start[shuffled], end[shuffled], thread[shuffled]
    points = np.r_[start, end, rng.integers(-5, int(end.max()) + 5, 400)]
    q_thread = rng.integers(0, 4, points.size)  # thread 3 has no range
    fast = joins.innermost_enclosing(thread, start, end, q_thread, points, points)
    swept = joins.innermost_enclosing(thread, start, end, q_thread, points, points.copy())
    assert fast.tolist() == swept.tolist()
    found = fast >= 0
    assert found.sum() > 100 and (q_thread[~found] != 3).any()
    assert (start[fast[found]] <= points[found]).all() and (points[found] < end[fast[found]]).all()
    overlapping = joins._disjoint_enclosing(np.array([1, 1]), np.array([0, 5]), np.array([10, 8]),
                                            np.array([1]), np.array([6]))
    assert overlapping is None  # nested ranges: the sweep decides
    assert joins.innermost_enclosing(np.array([1, 1]), np.array([0, 5]), np.array([10, 8]),
                                     np.array([1]), *(np.array([6]),) * 2).tolist() == [1]


# -- real exports ---------------------------------------------------------------------------------------

def real(name: str) -> Path:
    path = fx.real_export(name)
    if not path.is_file():
        pytest.skip(f"real export {path} is absent")
    return path


REAL_FILES = ["nvfuser_report1_nsys2025.1.1.sqlite", "nsysai_h100_2gpu_1s.sqlite",
              "pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite", "flameox_nsight-2025.5.2.sqlite",
              "quasiben_nvtx-examples_cudf-groupby.sqlite"]


@pytest.mark.parametrize("name", REAL_FILES)
def test_real_export_reads_and_reduces(name, config):
    traces = sources.read(real(name), config)
    assert traces
    for trace in traces:
        assert trace.source == "nsys" and len(rows(trace.events, ev.KERNEL)) > 0
        pipeline.reduce_rank(trace, config)


def test_real_two_ranks_in_one_report(config):
    traces = nsys.read(real("nsysai_h100_2gpu_1s.sqlite"), config)
    assert [(t.pid, t.device, t.rank_from) for t in traces] == [(111, 0, "device order"), (112, 1, "device order")]
    for trace, stream in zip(traces, (7, 15)):
        events = trace.events.to_frame()
        kernels = rows(events, ev.KERNEL)
        assert len(kernels) == 1721
        assert kernels[["device", "lane"]].drop_duplicates().values.tolist() == [[trace.device, stream]]
        assert (kernels["category"] == ev.COMMUNICATION).sum() == 0     # no NCCL kernel in this window
        # 816 kernels per process keep their launch call after the time-window cut
        assert kernels["correlation_id"].isin(rows(events, ev.RUNTIME)["correlation_id"]).sum() == 816
        assert len(events[events["kind"] == ev.RANGE]) == 8391
        assert trace.clock_offset_ns == 1779630014975716426
        assert trace.meta["nsys_version"] == "2026.2.1.210"


def test_real_flameox_has_kernels_but_no_nvtx(config):
    [trace] = nsys.read(real("flameox_nsight-2025.5.2.sqlite"), config)
    events = trace.events.to_frame()
    assert len(rows(events, ev.KERNEL)) == 3 and len(rows(events, ev.MEMCPY)) == 1
    # no NVTX rows: host rows are the runtime calls and the two span marks (issue 12)
    assert events["lane_kind"].eq(ev.HOST_THREAD).sum() == len(rows(events, ev.RUNTIME)) + 2
    assert trace.meta["nvtx_domains"] == {}


def test_real_pipit_mpi_ranges_and_deduplicated_runtime(config):
    [trace] = nsys.read(real("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite"), config)
    events = trace.events.to_frame()
    assert (trace.rank, trace.rank_from) == (0, "NVTX thread name 'MPI Rank N'")
    assert trace.meta["nvtx_domains"] == {"MPI": 17, "(default)": 5}
    assert trace.meta["schema_version"] == "2.9.1"
    assert len(rows(events, ev.COMM_OP)) == 15                           # MPI calls but MPI_Init/Finalize
    runtime = rows(events, ev.RUNTIME)
    assert len(runtime) == runtime["correlation_id"].nunique() == 20     # 5 kernels + 15 memcpy, once each
    assert rows(events, ev.KERNEL)["name"].astype(str).unique().tolist() == ["saxpy"]


def test_real_nvfuser_kernels_on_one_stream(config):
    [trace] = nsys.read(real("nvfuser_report1_nsys2025.1.1.sqlite"), config)
    kernels = rows(trace.events, ev.KERNEL)
    assert len(kernels) == 18
    assert kernels[["device", "lane"]].drop_duplicates().values.tolist() == [[0, 7]]
    assert (trace.events.to_frame()["kind"] == ev.RANGE).sum() == 13513


def test_real_2020_export_has_domains_and_no_clock(config):
    path = real("quasiben_nvtx-examples_cudf-groupby.sqlite")
    [trace] = nsys.read(path, config)
    assert trace.meta["nvtx_domains"] == {"libcudf": 580, "cudf_python": 46, "(default)": 2}
    assert trace.clock_offset_ns == 0 and "cannot be aligned" in trace.warnings[0]
    assert len(rows(trace.events, ev.KERNEL)) == 195


def test_chunked_threaded_scan_matches_a_single_chunk(tmp_path, config, monkeypatch):
    export = two_rank_report()
    for i in range(40):
        export.kernel(300, 1, 7, 40_000 + i * 100, 40_050 + i * 100, f"k{i % 3}", launch=(i, i + 1))
        export.range(300, 50_000 + i, 50_000 + i, f"zero-length {i}")
    export.range(300, 0, 10, "text with a \x1f unit separator")
    path = write(export, tmp_path)
    with sqlite3.connect(path) as connection:   # gaps in rowid: some chunks come back empty
        connection.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid BETWEEN 10 AND 20")
    whole = nsys.read(path, config)
    monkeypatch.setattr(nsys, "CHUNK_ROWS", 3)
    monkeypatch.setattr(nsys, "MAX_WORKERS", 3)
    chunked = nsys.read(path, config)
    assert len(whole) == len(chunked) == 2
    for one, other in zip(whole, chunked):
        pd.testing.assert_frame_equal(one.events.to_frame(), other.events.to_frame())
    assert "text with a \x1f unit separator" in set(whole[1].events["name"].values())
