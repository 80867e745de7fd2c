"""Issue 12, reader side: figures on real traces equal an independent computation over the raw
files (plain Python over the JSON, sqlite3 over the nsys export), never distprof code."""

from __future__ import annotations

import functools
import gc
import gzip
import json
import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from nsys_fixtures import real_export

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline, sources
from distprof.analyses import distributed, summaries
from distprof.results import RankFigures

DATA = Path(__file__).parent / "data"
HTA = sorted((DATA / "kineto").glob("*/*.json.gz"))
TORCH_CPU = sorted((DATA / "torch_cpu").glob("rank*.json.gz"))
TORCH_DDP = sorted((DATA / "torch_ddp" / "healthy").glob("rank*.json.gz"))
HTA_FILTER = DATA / "kineto" / "hta_trace_filter_2rank" / "sampled_rank-0.json.gz"


def ns(value) -> int:
    """µs as written -> integer ns (the text's exact value, as the reader promises)."""
    return int((Decimal(str(value)) * 1000).to_integral_value())


@functools.cache
def raw_events(path: Path) -> tuple[dict, ...]:
    """The complete events of a trace file as the stdlib reads them, once per module (read-only);
    without the collector running through the 100k dicts as they are made (1.2 -> 0.7 s a file)."""
    gc.disable()
    try:
        with gzip.open(path, "rt") as handle:
            return tuple(e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X" and "ts" in e)
    finally:
        gc.enable()


def interval(event: dict) -> tuple[int, int]:
    start = ns(event["ts"])
    return start, start + max(ns(event.get("dur", 0)), 0)


def union(intervals) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def covered(intervals, window) -> int:
    total = 0
    for a, b in union(intervals):
        for c, d in window:
            total += max(0, min(b, d) - max(a, c))
    return total


def cpu_steps(events: list[dict]) -> list[tuple[int, int]]:
    return sorted(interval(e) for e in events if e["name"].startswith("ProfilerStep#"))


@functools.cache
def read(path: Path) -> ev.RankTrace:
    """A file as distprof reads it, once per module (tests only read it; the big HTA rank takes ~0.5 s)."""
    return sources.read(path, config_mod.load())[0]


@functools.cache
def figures(path: Path, window: str = "steps") -> RankFigures:
    """The Distributed Summary figures of a file's rank, as its summary.json row carries them."""
    return pipeline.reduce_rank(read(path), config_mod.load(overrides={"window": window})).figures


@pytest.fixture(autouse=True, scope="module")
def _caches_end_with_the_module():
    """The caches above hold millions of objects: kept to the worker's exit, they slowed every
    later garbage collection of that worker and its shutdown (seconds)."""
    yield
    for cached in (raw_events, read, figures):
        cached.cache_clear()


# -- item 2: ProfileStep is the CPU ProfilerStep#N span ---------------------------------------

@pytest.mark.parametrize("path", HTA + TORCH_CPU, ids=lambda p: p.parent.name + "/" + p.name)
def test_profile_step_is_the_cpu_profiler_step(path):
    raw = raw_events(path)
    table = read(path).events.to_frame()
    steps = table[(table["kind"] == ev.RANGE) & (table["name"] == ev.PROFILE_STEP)].sort_values("start_ns")
    assert list(zip(steps["start_ns"], steps["end_ns"])) == cpu_steps(raw)
    assert figures(path).window_ns == sum(b - a for a, b in union(cpu_steps(raw)))


# -- item 1: every GPU kernel in the window counts, launch captured or not ---------------------

@pytest.mark.parametrize("path", HTA, ids=lambda p: p.parent.name + "/" + p.name)
def test_computation_is_the_union_of_all_compute_kernels_in_the_window(path):
    raw = raw_events(path)
    kernels = [e for e in raw if e.get("cat") == "kernel"]
    compute = [interval(e) for e in kernels if not e["name"].startswith("nccl")]
    comm = [interval(e) for e in kernels if e["name"].startswith("nccl")]
    window = union(cpu_steps(raw))
    result = figures(path)
    assert result.computation_ns == covered(compute, window)
    assert result.communication_ns == covered(comm, window)
    table = read(path).events.to_frame()
    assert int((table["kind"] == ev.KERNEL).sum()) == len(kernels)


def test_kernels_whose_launch_was_not_captured_still_count(tmp_path):
    """The real case: a trace where some kernels have no cuda_runtime launch record. Made here
    from a real trace by deleting every third launch; computation must not drop those kernels
    (the union of all compute kernels in the CPU step window, computed from the raw JSON)."""
    source = DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz"
    with gzip.open(source, "rt") as handle:
        document = json.load(handle)
    launches = sorted({e["args"]["correlation"] for e in document["traceEvents"]
                       if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})})
    dropped = set(launches[::3])
    document["traceEvents"] = [e for e in document["traceEvents"] if not (
        e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in dropped)]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode(), compresslevel=1))  # json.dump: 1.7M writes
    raw = raw_events(path)
    kernels = [e for e in raw if e.get("cat") == "kernel"]
    orphans = [e for e in kernels if e["args"].get("correlation") in dropped]
    assert orphans  # the case is really exercised
    window = union(cpu_steps(raw))
    compute = [interval(e) for e in kernels if not e["name"].startswith("nccl")]
    assert figures(path).computation_ns == covered(compute, window) > 0
    table = read(path).events.to_frame()
    unlaunched = table[(table["kind"] == ev.KERNEL) & table["correlation_id"].isin(dropped)]
    assert len(unlaunched) == len(orphans) and (unlaunched["phase"].astype(str) == "").all()


def test_kernels_without_launch_get_a_step_but_no_phase():
    path = DATA / "kineto" / "hta_trace_diff_control_1of8" / "control.json.gz"
    raw = raw_events(path)
    launches = {e["args"]["correlation"] for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    orphans = [e for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") not in launches]
    table = read(path).events.to_frame()
    kernels = table[table["kind"] == ev.KERNEL]
    unlaunched = kernels[~kernels["correlation_id"].isin(launches)]
    assert len(unlaunched) == len(orphans)
    assert (unlaunched["phase"].astype(str) == "").all()


# -- item 3: CPU-only (gloo) traces -----------------------------------------------------------

def executed_comm(raw: list[dict]) -> list[dict]:
    """The communication rows by the rule "where it executes": gloo:* ranges, and c10d::* ops only
    on a thread when no gloo:* range lies on some other thread (else the op only issues)."""
    gloo = [e for e in raw if e["name"].startswith("gloo:")]
    gloo_threads = {(e.get("pid"), e.get("tid")) for e in gloo}
    ops = [e for e in raw if e["name"].startswith("c10d::")
           and not gloo_threads - {(e.get("pid"), e.get("tid"))}]
    return gloo + ops


@pytest.mark.parametrize("path", TORCH_CPU + TORCH_DDP, ids=lambda p: p.parent.name + "/" + p.name)
def test_cpu_trace_communication_is_the_union_of_the_executing_ranges(path):
    raw = raw_events(path)
    window = union(cpu_steps(raw))
    comm = [interval(e) for e in executed_comm(raw)]
    issued = [e for e in raw if e["name"].startswith("c10d::")]
    assert issued and not any(e["name"].startswith("c10d::") for e in executed_comm(raw))  # gloo runs them all
    result = figures(path)
    assert result.communication_ns == covered(comm, window) > 0
    table = read(path).events.to_frame()
    category = table["category"].astype(str)
    name = table["name"].astype(str)
    assert (category[name.str.startswith("aten::")] == ev.COMPUTE).all()
    assert (category[name.str.startswith("gloo:")] == ev.COMMUNICATION).all()
    optimizer = "## optimizer ##" if path.parent.name == "healthy" else "Optimizer.step#SGD.step"
    assert set(name[category == ev.PHASE]) == {"## forward ##", "## backward ##", optimizer, ev.PROFILE_STEP}
    gloo_lanes = set(table["lane"][name.str.startswith("gloo:")])
    main_lane = set(table["lane"][name.str.startswith("ProfilerStep#")])
    assert gloo_lanes and not gloo_lanes & main_lane  # the gloo worker threads are lanes of their own


def test_cpu_trace_phase_column_is_the_innermost_phase_on_the_thread():
    table = read(TORCH_CPU[0]).events.to_frame()
    addmm = table[table["name"].astype(str) == "aten::addmm"]
    assert set(addmm["phase"].astype(str)) == {"## forward ##"}
    accumulate = table[table["name"].astype(str) == "torch::autograd::AccumulateGrad"]
    assert set(accumulate["phase"].astype(str)) == {"## backward ##"}


def test_gpu_trace_has_model_phases():
    path = DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz"
    table = read(path).events.to_frame()
    phases = table[table["category"] == ev.PHASE]
    assert {"## forward ##", "## backward ##", "## optimizer ##"} <= set(phases["name"].astype(str))
    # Optimizer.step#SGD.step sits inside ## optimizer ##: one phase per moment, so it stays USER
    kernels = table[table["kind"] == ev.KERNEL]
    assert (kernels["phase"].astype(str) != "").any()


# -- nsys items 5 and 7 -------------------------------------------------------------------------

NSYS_SINGLE = ["pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite", "nvfuser_report1_nsys2025.1.1.sqlite",
               "flameox_nsight-2025.5.2.sqlite", "quasiben_nvtx-examples_cudf-groupby.sqlite"]


def _sql_span(path: Path, pid: int) -> tuple[int, int]:
    """min start / max end of the process over every activity table it records in."""
    tables = {"CUPTI_ACTIVITY_KIND_KERNEL": "globalPid", "CUPTI_ACTIVITY_KIND_MEMCPY": "globalPid",
              "CUPTI_ACTIVITY_KIND_MEMSET": "globalPid", "CUPTI_ACTIVITY_KIND_RUNTIME": "globalTid",
              "NVTX_EVENTS": "globalTid", "OSRT_API": "globalTid"}
    lows, highs = [], []
    with sqlite3.connect(path) as db:
        present = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table, column in tables.items():
            if table not in present:
                continue
            # NVTX marks and ranges (34, 59, 60) are activity; domain/thread-name rows are registrations
            only = " WHERE eventType IN (34, 59, 60)" if table == "NVTX_EVENTS" else ""
            for start, end, key in db.execute(f"SELECT start, end, {column} FROM {table}{only}"):
                if key is not None and (key >> 24) & 0xFFFFFF == pid and start is not None:
                    lows.append(start)
                    highs.append(start if end is None else end)
    return min(lows), max(highs)


@pytest.mark.parametrize("name", NSYS_SINGLE)
def test_nsys_events_span_all_recorded_activity(name):
    path = real_export(name)
    for trace in sources.read(path, config_mod.load()):
        table = trace.events.to_frame()
        assert (int(table["start_ns"].min()), int(table["end_ns"].max())) == _sql_span(path, trace.pid)


def _sql_mpi_calls(path: Path) -> list[tuple[int, int]]:
    """The MPI calls nsys traced (NVTX ranges of the "MPI" domain), init/finalize left out."""
    with sqlite3.connect(path) as db:
        domain = {row[0] for row in db.execute(
            "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'MPI'")}
        return [(start, end) for start, end, text, domain_id in db.execute(
            "SELECT e.start, e.end, COALESCE(e.text, s.value), e.domainId FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60)")
            if domain_id in domain and text not in ("MPI_Init", "MPI_Init_thread", "MPI_Finalize")]


def test_nsys_mpi_calls_are_host_communication():
    path = real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite")
    calls = _sql_mpi_calls(path)
    table = read(path).events.to_frame()
    comm = table[(table["category"] == ev.COMMUNICATION) & (table["lane_kind"] == ev.HOST_THREAD)]
    assert set(comm["kind"].astype(str)) == {ev.COMM_OP}
    mine = union(zip(comm["start_ns"].tolist(), comm["end_ns"].tolist()))
    assert mine == union(calls) and sum(b - a for a, b in mine) > 200_000_000  # 244 ms of MPI


# -- issue 12, analysis side: the figures on real traces ----------------------------------------

H100_GLOO = sorted((DATA / "kineto_h100" / "gloo_cuda").glob("rank*.json.gz"))
H100_NCCL = DATA / "kineto_h100" / "nccl_world1" / "rank0.json.gz"


def minus(a, b) -> list[tuple[int, int]]:
    """Plain interval difference of two unions."""
    out = []
    for start, end in union(a):
        cursor = start
        for c, d in union(b):
            if d <= cursor or c >= end:
                continue
            if c > cursor:
                out.append((cursor, c))
            cursor = max(cursor, d)
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(intervals, window) -> list[tuple[int, int]]:
    return [(max(a, c), min(b, d)) for a, b in intervals for c, d in window if min(b, d) > max(a, c)]


@pytest.mark.parametrize("path", TORCH_CPU + TORCH_DDP, ids=lambda p: p.parent.name + "/" + p.name)
def test_cpu_trace_computation_is_aten_ops_minus_communication_per_thread(path):
    raw = raw_events(path)
    window = union(cpu_steps(raw))
    executed = executed_comm(raw)
    busy = []
    for thread in {(e.get("pid"), e.get("tid")) for e in raw}:
        on = [e for e in raw if (e.get("pid"), e.get("tid")) == thread]
        aten = clip([interval(e) for e in on if e["name"].startswith("aten::")], window)
        comm = clip([interval(e) for e in executed if (e.get("pid"), e.get("tid")) == thread], window)
        busy += minus(aten, comm)
    assert figures(path).computation_ns == sum(b - a for a, b in union(busy)) > 0


def test_nsys_mpi_calls_count_as_communication_in_the_summary():
    path = real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite")
    calls = _sql_mpi_calls(path)
    trace = read(path)
    window = [_sql_span(path, trace.pid)]  # no steps: the whole recorded span
    result = pipeline.reduce_rank(trace, config_mod.load()).figures
    assert result.window_ns == window[0][1] - window[0][0]
    assert result.communication_ns == covered(calls, window) > 200_000_000  # 244 ms of MPI


def test_nsys_idle_excludes_memory_copies():
    path = real_export("nsysai_h100_2gpu_1s.sqlite")
    for trace in sources.read(path, config_mod.load()):
        window = [_sql_span(path, trace.pid)]
        work, memory = [], []
        with sqlite3.connect(path) as db:
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
                rows = [(s, e) for s, e, key in db.execute(f"SELECT start, end, globalPid FROM {table}")
                        if (key >> 24) & 0xFFFFFF == trace.pid]
                work += rows
                memory += rows if table != "CUPTI_ACTIVITY_KIND_KERNEL" else []
        result = pipeline.reduce_rank(trace, config_mod.load()).figures
        assert result.window_ns == window[0][1] - window[0][0]
        assert result.memory_ns == covered(memory, window)
        assert result.idle_ns == result.window_ns - covered(work, window)
        assert result.idle_ns < 0.05 * result.window_ns  # the GPU is 99% busy, 97% of it memcpy


@pytest.mark.parametrize("path", H100_GLOO, ids=lambda p: p.name)
def test_gpu_trace_gloo_ranges_are_communication(path):
    raw = raw_events(path)
    window = union(cpu_steps(raw))
    # host ranges only: gpu_user_annotation copies span the GPU work inside the annotation
    gloo = [interval(e) for e in raw if e["name"].startswith("gloo:") and e.get("cat") != "gpu_user_annotation"]
    result = figures(path)
    assert result.communication_ns == covered(gloo, window) > 0
    assert result.gpu_window_ns is not None and result.gpu_window_ns <= result.window_ns


def test_gpu_trace_nccl_host_calls_are_not_communication():
    raw = raw_events(H100_NCCL)
    window = union(cpu_steps(raw))
    nccl = [interval(e) for e in raw if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    assert figures(H100_NCCL).communication_ns == covered(nccl, window)


def _model_rows(path: Path) -> dict:
    result = pipeline.reduce_rank(read(path), config_mod.load())
    return {row.name: row for row in result.tables.model}


@pytest.mark.parametrize("path", TORCH_CPU[:2] + H100_GLOO[:1], ids=lambda p: p.parent.name + "/" + p.name)
def test_model_summary_rows_are_the_marked_ranges(path):
    raw = raw_events(path)
    window = union(cpu_steps(raw))

    def cpu_total(*names) -> int:
        spans = [interval(e) for e in raw if e["name"] in names and e.get("cat") != "gpu_user_annotation"]
        return sum(b - a for a, b in spans if any(c <= a < d for c, d in window))

    rows = _model_rows(path)
    assert rows["Forward"].cpu_total_ns == cpu_total("## forward ##") > 0
    assert rows["Backward"].cpu_total_ns == cpu_total("## backward ##") > 0
    optimizer = "## optimizer ##" if any(e["name"] == "## optimizer ##" for e in raw) else "Optimizer.step#SGD.step"
    assert rows["Optimization"].cpu_total_ns == cpu_total(optimizer) > 0


def test_gpu_window_only_where_the_source_knows_it():
    assert figures(TORCH_CPU[0]).gpu_window_ns is None
    path = real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite")
    assert pipeline.reduce_rank(read(path), config_mod.load()).figures.gpu_window_ns is None


@pytest.mark.parametrize("path", H100_GLOO[:1], ids=lambda p: p.name)
def test_host_bound_gaps_leave_out_host_communication(path):
    raw = raw_events(path)
    window = union(cpu_steps(raw))
    gloo = union(interval(e) for e in raw
                 if e["name"].startswith("gloo:") and e.get("cat") != "gpu_user_annotation")
    gaps = pipeline.reduce_rank(read(path), config_mod.load()).gpu_gaps
    assert gaps.host_comm_ns > 0.5 * covered(gloo, window)  # the GPU mostly idles while gloo runs
    assert gaps.host_bound_ns + gaps.host_comm_ns <= gaps.idle_ns
    assert gaps.host_bound_ns < 0.1 * gaps.window_ns  # was 520 ms of 561: the CPU was blamed for gloo


_PHASE = re.compile(r"^(## *(forward|backward|optimi[sz]er|optimi[sz]er[._ ]step|data_?load(er|ing)?) *##"
                    r"|Optimizer\.step#.*|enumerate\(DataLoader\)#.*)$", re.IGNORECASE)


@pytest.mark.parametrize("path", [HTA_FILTER, TORCH_DDP[0]], ids=lambda p: p.parent.name + "/" + p.name)
def test_host_thread_busy_is_what_runs_under_the_step(path):
    """Busy share of the thread of the steps: its host ranges and runtime calls but not the
    ProfilerStep#N ranges nor the outermost phase ranges (they mark where, not what runs)."""
    raw = raw_events(path)
    steps = [e for e in raw if e["name"].startswith("ProfilerStep#")]
    thread = (steps[0]["pid"], steps[0]["tid"])
    window = union(cpu_steps(raw))
    on = [e for e in raw if (e["pid"], e["tid"]) == thread
          and e.get("cat") in ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")]
    phases = [interval(e) for e in on if _PHASE.match(e["name"])]
    outer = {p for p in phases if not any(q != p and q[0] <= p[0] and p[1] <= q[1] for q in phases)}
    work = [interval(e) for e in on if not e["name"].startswith("ProfilerStep#")
            and not (_PHASE.match(e["name"]) and interval(e) in outer)]
    config = config_mod.load()
    device = summaries.rank_tables(distributed.rank_view(read(path).events, config), config).device
    [row] = [r for r in device if r.device == f"thread {thread[1]}"]
    assert row.busy_ns == covered(work, window) < sum(b - a for a, b in window)
