"""Summary tables (Device, Overview, Model, Kernel, Memory, UserDefined) on a trace whose
intervals are known by construction, merged across ranks, rendered as text; and on the demo."""

import json
import re
import sqlite3
from pathlib import Path

import kineto_fixtures as kf
import msgspec
import numpy as np
import pytest
from conftest import run_cli
from msgspec.structs import replace
from nsys_fixtures import real_export

from distprof import config as config_mod
from distprof import events as ev
from distprof import names, sources
from distprof.analyses import distributed, summaries
from distprof.reports import tables
from distprof.results import Summary
from distprof.sections.tables import DeviceRow, Dropped, OperatorTable, SentTables, StepTimes, Tables
from distprof.typed import ABSENT

CONFIG = config_mod.load()


def view(events: ev.Table):
    """A rank's view as pipeline.reduce_rank builds it: rank_tables reads its window."""
    return distributed.rank_view(events, CONFIG)
GOLDEN = Path(__file__).parent / "data" / "golden" / "demo__demo_ranks.json"
HOST, COMM, STREAM, NCCL_STREAM = 1, 2, 7, 15


def gpu_rank():
    """Two 100 ns steps on a GPU rank: main thread (lane 1), comm thread (2), streams 7 and 15.

    Step 0: Dataloader [0,10) forward [10,40) backward [40,80) optimizer [85,95);
    step 1: Dataloader [100,105) forward [105,135) backward [135,185) optimizer.step [190,198).
    Kernels (launched from the phase in ``phase``): gemm [15,35) [45,75) [110,130), relu [140,150),
    nccl [60,90) [160,180); memcpy [2,6) in Dataloader; memset [101,102) outside any phase; a gemm
    at [250,260) after the last step. USER ranges my_range [20,30) [120,125), other [150,190).
    """
    rows = [  # kind, category, name, start, end, lane, step, phase, correlation id
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, HOST, 0, "", -1),
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 100, 200, HOST, 1, "", -1),
        (ev.RANGE, ev.PHASE, "Dataloader", 0, 10, HOST, 0, "", -1),
        (ev.RANGE, ev.PHASE, "forward", 10, 40, HOST, 0, "", -1),
        (ev.RANGE, ev.PHASE, "backward", 40, 80, HOST, 0, "", -1),
        (ev.RANGE, ev.PHASE, "optimizer", 85, 95, HOST, 0, "", -1),
        (ev.RANGE, ev.PHASE, "Dataloader", 100, 105, HOST, 1, "", -1),
        (ev.RANGE, ev.PHASE, "forward", 105, 135, HOST, 1, "", -1),
        (ev.RANGE, ev.PHASE, "backward", 135, 185, HOST, 1, "", -1),
        (ev.RANGE, ev.PHASE, "optimizer.step", 190, 198, HOST, 1, "", -1),
        (ev.RANGE, ev.USER, "my_range", 20, 30, HOST, 0, "", -1),
        (ev.RANGE, ev.USER, "my_range", 120, 125, HOST, 1, "", -1),
        (ev.RANGE, ev.USER, "other", 150, 190, HOST, 1, "", -1),
        (ev.COMM_OP, ev.COMMUNICATION, "allreduce", 60, 90, COMM, 0, "", -1),
        (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 12, 14, HOST, 0, "forward", 1),
        (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 42, 44, HOST, 0, "backward", 2),
        (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 107, 108, HOST, 1, "forward", 3),
        (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", 137, 139, HOST, 1, "backward", 4),
        (ev.KERNEL, ev.COMPUTE, "gemm", 15, 35, STREAM, 0, "forward", 1),
        (ev.KERNEL, ev.COMPUTE, "gemm", 45, 75, STREAM, 0, "backward", 2),
        (ev.KERNEL, ev.COMPUTE, "gemm", 110, 130, STREAM, 1, "forward", 3),
        (ev.KERNEL, ev.COMPUTE, "relu", 140, 150, STREAM, 1, "backward", 4),
        (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce", 60, 90, NCCL_STREAM, 0, "backward", -1),
        (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce", 160, 180, NCCL_STREAM, 1, "backward", -1),
        (ev.MEMCPY, ev.MEMORY, "Memcpy HtoD", 2, 6, STREAM, 0, "Dataloader", -1),
        (ev.MEMSET, ev.MEMORY, "Memset", 101, 102, STREAM, 1, "", -1),
        (ev.KERNEL, ev.COMPUTE, "gemm", 250, 260, STREAM, -1, "", -1),
    ]
    kind, category, name, start, end, lane, step, phase, corr = (np.array(c, dtype=object) for c in zip(*rows))
    on_gpu = np.isin(kind, (ev.KERNEL, ev.MEMCPY, ev.MEMSET))
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=lane.astype(np.int64), step=step.astype(np.int64),
                          phase=phase, correlation_id=corr.astype(np.int64), pid=10,
                          lane_kind=np.where(on_gpu, ev.GPU_STREAM, ev.HOST_THREAD), device=np.where(on_gpu, 0, -1))


def host_rank():
    """The same two steps with only the host ranges (no GPU rows)."""
    events = gpu_rank()
    return events.take(events["lane_kind"].eq(ev.HOST_THREAD))


def by(rows, key, value):
    return next(r for r in rows if getattr(r, key) == value)


def rank_tables(events) -> SentTables:
    """A rank's tables as pipeline.reduce_rank makes them: with its Operator Summary, empty on these
    ranks (no framework operators; operators.operator_table's table without rows)."""
    own = summaries.rank_tables(view(events), CONFIG)
    none = Dropped(rows=0, calls=0, total_ns=0)
    return replace(own, operator=OperatorTable(rows=[], denominator_ns=own.window_ns, dropped=none))


def with_tables(merged: Tables) -> Summary:
    """The demo's golden summary with these tables (summaries.merge_tables' result) in place of its own:
    the text tables read only them."""
    return replace(Summary.from_json(json.loads(GOLDEN.read_text())), tables=merged)


def test_device_summary():
    device = summaries.rank_tables(view(gpu_rank()), CONFIG).device
    assert by(device, "device", "GPU0") == DeviceRow(device="GPU0", kind="gpu", busy_ns=115, elapsed_ns=200,
                                                     utilization=115 / 200)
    # a GPU trace: the kernels are the work, the phases only mark where; busy = the launches and USER ranges
    # [12,14) [20,30) [42,44) [107,108) [120,125) [137,139) [150,190)
    assert by(device, "device", "thread 1").busy_ns == 62
    # host-only with no COMPUTE ranges: the phases are the work [0,80) [85,95) [100,198)
    device = summaries.rank_tables(view(host_rank()), CONFIG).device
    assert by(device, "device", "thread 1").busy_ns == 188
    assert by(device, "device", "thread 2").busy_ns == 30
    assert not any(d.kind == "cpu_process" for d in device)
    meta = {"process_cpu_ns": 300, "elapsed_ns": 200}
    cpu = by(summaries.rank_tables(view(gpu_rank()), CONFIG, meta).device, "kind", "cpu_process")
    assert cpu.utilization == 1.5   # CPU time over all cores / wall time, as in Paddle


def test_overview_summary_unions_within_a_type():
    overview = {(r.side, r.type): (r.calls, r.total_ns)
                for r in summaries.rank_tables(view(gpu_rank()), CONFIG).overview}
    assert overview == {
        ("cpu", "ProfileStep"): (2, 200), ("cpu", "Phase"): (8, 183), ("cpu", "Communication"): (1, 30),
        ("cpu", "UserDefined"): (3, 55), ("cpu", "Runtime"): (4, 7),
        ("gpu", "GPU busy"): (8, 120), ("gpu", "Kernel"): (4, 80), ("gpu", "Communication kernel"): (2, 50),
        ("gpu", "Memcpy"): (1, 4), ("gpu", "Memset"): (1, 1)}


def test_model_summary_cpu_and_gpu():
    model = {r.name: r for r in summaries.rank_tables(view(gpu_rank()), CONFIG).model}
    assert list(model) == list(summaries.MODEL_ROWS)
    cpu = {n: (r.calls, r.cpu_total_ns, r.cpu_avg_ns, r.cpu_max_ns, r.cpu_min_ns)
           for n, r in model.items()}
    assert cpu == {"ProfileStep": (2, 200, 100, 100, 100), "Dataloader": (2, 15, 7.5, 10, 5),
                   "Forward": (2, 60, 30, 30, 30), "Backward": (2, 90, 45, 50, 40),
                   "Optimization": (2, 18, 9, 10, 8), "Others": (None, 17, None, None, None)}
    assert model["Backward"].cpu_ratio == 90 / 200
    # GPU: one call per step; ProfileStep = every GPU op of the steps (the gemm at 250 is outside)
    gpu = {n: (r.gpu_calls, r.gpu_total_ns, r.gpu_avg_ns, r.gpu_max_ns, r.gpu_min_ns)
           for n, r in model.items()}
    assert gpu == {"ProfileStep": (2, 135, 67.5, 84, 51), "Dataloader": (1, 4, 4, 4, 4),
                   "Forward": (2, 40, 20, 20, 20), "Backward": (2, 90, 45, 60, 30),
                   "Optimization": (0, 0, None, None, None), "Others": (1, 1, 1, 1, 1)}
    assert sum(model[n].gpu_ratio for n in summaries.MODEL_ROWS[1:]) == pytest.approx(1.0)


def test_model_summary_without_gpu_or_steps():
    model = {r.name: r for r in summaries.rank_tables(view(host_rank()), CONFIG).model}
    assert model["Forward"].gpu_total_ns is None and model["Forward"].cpu_total_ns == 60
    no_steps = host_rank()
    no_steps = no_steps.take(~no_steps["name"].eq(ev.PROFILE_STEP))
    model = {r.name: r for r in summaries.rank_tables(view(no_steps), CONFIG).model}
    assert "ProfileStep" not in model
    assert model["Others"].cpu_total_ns == 198 - (15 + 60 + 90 + 18)   # whole trace [0,198)


def test_kernel_memory_user_tables():
    result = summaries.rank_tables(view(gpu_rank()), CONFIG)
    kernel = result.kernel
    rows = [(r.name, r.calls, r.total_ns, r.max_ns, r.min_ns, r.category) for r in kernel.rows]
    assert rows == [
        ("gemm", 3, 70, 30, 20, "COMPUTE"), ("ncclDevKernel_AllReduce", 2, 50, 30, 20, "COMMUNICATION"),
        ("relu", 1, 10, 10, 10, "COMPUTE")]
    assert kernel.rows[0].avg_ns == pytest.approx(70 / 3) and kernel.rows[0].ratio == 70 / 130
    assert [(r.kind, r.name, r.total_ns, r.ratio) for r in result.memory.rows] == [
        ("memcpy", "Memcpy HtoD", 4, 0.8), ("memset", "Memset", 1, 0.2)]
    assert [(r.name, r.calls, r.total_ns, r.avg_ns, r.ratio) for r in result.user.rows] == [
        ("other", 1, 40, 40.0, 0.2), ("my_range", 2, 15, 7.5, 15 / 200)]
    assert result.steps == StepTimes(step=[0, 1], duration_ns=[100, 100])
    assert result.span_ns == [0, 260]
    cut = summaries.rank_tables(view(gpu_rank()), CONFIG, max_rows=1).kernel
    assert [r.name for r in cut.rows] == ["gemm"]
    assert cut.dropped == Dropped(rows=2, calls=3, total_ns=60)


def test_empty_rank():
    result = summaries.rank_tables(view(ev.empty_events()), CONFIG)
    assert result.kernel.rows == [] and result.device == [] and result.span_ns is None
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(result), type=SentTables) == result  # it travels


def test_merge_across_ranks():
    tables_0 = rank_tables(gpu_rank())
    tables_1 = rank_tables(host_rank())
    typed = summaries.merge_tables([tables_0, tables_1, None], [0, 1, 2])
    assert Tables.from_json(json.loads(json.dumps(typed.to_json()))) == typed  # summary.json's ``tables``
    assert typed.ranks == [0, 1]
    merged = typed.merged
    model = {r.name: r for r in merged.model}
    assert model["Backward"].cpu_total_ns == 180 and model["Backward"].calls == 4
    assert model["Backward"].cpu_avg_ns == 45 and model["Backward"].cpu_max_ns == 50
    assert model["Backward"].cpu_total_ns_by_rank == [90, 90]
    assert model["Backward"].gpu_total_ns == 90 and model["Backward"].gpu_total_ns_by_rank == [90, None]
    assert model["ProfileStep"].cpu_ratio == 1.0 and model["Others"].cpu_total_ns == 34
    gemm = next(r for r in merged.kernel.rows if r.name == "gemm")
    assert (gemm.calls, gemm.total_ns, gemm.ranks, gemm.max_rank) == (3, 70, 1, 0)
    gpu = next(r for r in merged.device if r.kind == "gpu")
    assert gpu.utilization_by_rank == [0.575, None] and gpu.mean == 0.575
    thread = next(r for r in merged.device if r.kind == "host_thread")
    assert thread.utilization_by_rank == [0.31, 0.94]
    phase = next(r for r in merged.overview if r.type == "Phase")
    assert phase.total_ns == 366 and phase.total_ns_by_rank == [183, 183] and phase.ratio == 366 / 400
    assert merged.steps.median_ns == [100, 100] and merged.steps.mean_ns_by_rank == [100.0, 100.0]
    assert typed.by_rank[0].kernel.rows[0].name == "gemm"


def test_text_tables_sorted_and_cut():
    summary = with_tables(summaries.merge_tables([rank_tables(gpu_rank())], [0]))
    text = tables.render(summary, unit="ns", sorted_by="calls", top=2)
    for title in ("Device Summary", "Overview Summary", "Model Summary", "Kernel Summary",
                  "Memory Manipulation Summary", "UserDefined Summary"):
        assert title in text
    kernel = text.split("Kernel Summary")[1].split("Memory Manipulation")[0]
    assert kernel.index("gemm") < kernel.index("ncclDevKernel_AllReduce")
    assert "relu" not in kernel and "1 more rows" in kernel
    assert "200.00 / 100.00 / 100.00 / 100.00 / 100.00" in text  # ProfileStep in ns
    by_name = tables.render(summary, sorted_by="name", top=0)
    kernel = by_name.split("Kernel Summary")[1].split("Memory Manipulation")[0]
    assert kernel.index("gemm") < kernel.index("ncclDevKernel") < kernel.index("relu")
    assert tables.render(with_tables(summaries.merge_tables([], []))) == ""   # no rank sent tables


def test_demo_tables_agree_with_distributed_summary(demo_overlap):
    summary = Summary.from_json(json.loads((demo_overlap / "summary.json").read_text()))
    merged = summary.tables.merged
    windows = [r.figures.window_ns for r in summary.ranks]
    model = {r.name: r for r in merged.model}
    assert model["ProfileStep"].cpu_total_ns_by_rank == windows   # steps are back to back
    assert model["ProfileStep"].calls == sum(r.figures.steps for r in summary.ranks)
    comm = next(r for r in merged.overview if r.type == "Communication")
    assert comm.total_ns_by_rank == [r.figures.communication_ns for r in summary.ranks]
    assert {"Dataloader", "Forward", "Backward", "Optimization"} <= {n for n, r in model.items() if r.calls}
    assert len(summary.tables.by_rank) == summary.world_size
    result = run_cli("report", str(demo_overlap), "--sorted-by", "cpu_avg", "--top", "3", "--unit", "us")
    assert result.returncode == 0, result.stderr
    assert "Model Summary (all ranks)" in result.stdout and "Forward" in result.stdout
    one = run_cli("report", str(demo_overlap), "--rank", "1")
    assert one.returncode == 0 and "Model Summary (rank 1)" in one.stdout
    bad = run_cli("report", str(demo_overlap), "--rank", "99")
    assert bad.returncode == 2 and "no such rank" in bad.stderr


def test_busiest_host_thread_is_what_runs_under_the_step_not_the_step(tmp_path):
    """A Kineto step [0, 10 ms): ``## forward ##`` [0, 6) in which the thread sleeps 5 ms (aten::mm
    [5, 6)), ``## backward ##`` [6, 10) with aten::mm [6, 8); gloo:all_reduce [7, 9) on a worker."""
    ms = 1_000_000
    trace = kf.KinetoTrace(rank=0, world_size=2, pid=100, backend="gloo", base_time_ns=None)
    trace.step(1, 0, 10 * ms)
    trace.cpu_op("## forward ##", 0, 6 * ms, cat="user_annotation")
    trace.cpu_op("aten::mm", 5 * ms, 6 * ms)
    trace.cpu_op("## backward ##", 6 * ms, 10 * ms, cat="user_annotation")
    trace.cpu_op("aten::mm", 6 * ms, 8 * ms)
    trace.cpu_op("gloo:all_reduce", 7 * ms, 9 * ms, tid=200, cat="user_annotation")
    [rank] = sources.read(trace.write(tmp_path / "rank0.json"), CONFIG)
    rows = summaries.rank_tables(view(rank.events), CONFIG).device
    device = {row.device: row.busy_ns for row in rows}
    assert device == {"thread 100": 3 * ms, "thread 200": 2 * ms}


# -- PyTorch NVTX op ranges: one row per op, not per call ----------------------------------------

NVTX_CALL = re.compile(r"^(.*?), (?:seq|op_id) = -?\d+(?:,|$)", re.S)  # independent of names.base_name


def _user_rows(rows, count):
    """One rank with a 100 ns step and these USER ranges: (name, start, end)."""
    all_rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, 0), *((ev.RANGE, ev.USER, *r, 0) for r in rows)]
    kind, category, name, start, end, step = (np.array(c, dtype=object) for c in zip(*all_rows))
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=np.full(count + 1, HOST, np.int64),
                          step=step.astype(np.int64), phase=np.full(count + 1, "", object),
                          correlation_id=np.full(count + 1, -1, np.int64), pid=10,
                          lane_kind=ev.HOST_THREAD, device=-1)


def test_user_table_groups_pytorch_nvtx_calls_under_the_op():
    ranges = [("aten::to, seq = 12, op_id = 998", 10, 20), ("aten::to, op_id = 999", 30, 35),
              ("aten::to, seq = 13, op_id = 1000, sizes = [[2, 3]]", 40, 41), ("aten::to", 50, 52),
              ("my_range", 60, 90)]
    user = summaries.rank_tables(view(_user_rows(ranges, len(ranges))), CONFIG).user
    assert [(r.name, r.calls, r.total_ns, r.max_ns, r.min_ns) for r in user.rows] == [
        ("my_range", 1, 30, 30, 30), ("aten::to", 4, 10 + 5 + 1 + 2, 10, 1)]
    own = rank_tables(_user_rows(ranges, len(ranges)))
    merged = summaries.merge_tables([own] * 2, [0, 1])
    assert [(r.name, r.calls) for r in merged.merged.user.rows] == [("my_range", 2), ("aten::to", 8)]


def test_real_nsys_pytorch_nvtx_ops_group_under_their_base_name(monkeypatch):
    """nsysai_h100_2gpu_1s: every NVTX text carries PyTorch's ``, op_id = N`` (16,582 distinct texts of
    176 ops, counted with an independent regex over the raw SQL). The UserDefined table's rows are the
    per-call table's rows summed by that regex's base name, exactly."""
    path = real_export("nsysai_h100_2gpu_1s.sqlite")
    with sqlite3.connect(path) as db:
        texts = [t for (t,) in db.execute("SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e "
                                         "LEFT JOIN StringIds s ON s.id = e.textId") if t]
    suffixed = {t for t in texts if NVTX_CALL.match(t)}
    assert len(suffixed) == 16582 and len({NVTX_CALL.match(t).group(1) for t in suffixed}) == 176
    traces = sources.read(path, CONFIG)
    grouped = [summaries.rank_tables(view(t.events), CONFIG, max_rows=10**6).user for t in traces]
    monkeypatch.setattr(names, "base_name", str)  # the table as it was: one row per distinct text
    per_call = [summaries.rank_tables(view(t.events), CONFIG, max_rows=10**6).user for t in traces]
    for table, calls in zip(grouped, per_call):
        expected: dict[str, list] = {}
        for row in calls.rows:
            match = NVTX_CALL.match(row.name)
            base = expected.setdefault(match.group(1) if match else row.name, [0, 0, 0, None])
            base[0] += row.calls
            base[1] += row.total_ns
            base[2] = max(base[2], row.max_ns)
            base[3] = row.min_ns if base[3] is None else min(base[3], row.min_ns)
        assert {r.name: [r.calls, r.total_ns, r.max_ns, r.min_ns] for r in table.rows} == expected
        assert len(calls.rows) > 1000 and len(table.rows) <= 176
        assert not any(NVTX_CALL.match(r.name) for r in table.rows)


def test_rank_tables_travel_typed_and_an_older_senders_dicts_still_decode():
    """A rank's tables cross to rank 0 inside its RankResult (wire.encode_stop, msgpack): they arrive as the
    same SentTables; a distprof before typed tables sent the same fields as dicts, and one before the Phase
    Summary sent no ``phase``: both decode, as dicts of the same keys do into a msgspec Struct."""
    own = rank_tables(gpu_rank())
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(own), type=SentTables) == own
    older = msgspec.to_builtins(own)
    assert isinstance(older["kernel"]["rows"][0], dict)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=SentTables) == own
    del older["phase"]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=SentTables) == replace(own, phase=None)
    merged = summaries.merge_tables([replace(own, phase=None)], [0])
    assert merged.merged.phase.rows == [] and merged.by_rank[0].phase is ABSENT  # as summary.json was then
