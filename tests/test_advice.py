"""Advice by what the trace shows (issue 22, point 4): PyTorch's knobs (.item(), CUDA graphs /
torch.compile, DDP/FSDP, DataLoader workers) only where the trace holds PyTorch's ops or is a
PyTorch profiler trace; otherwise advice any CUDA/MPI program can follow."""

import kineto_fixtures as kf
import numpy as np
import pytest
from nsys_fixtures import real_export
from result_views import summary_json, worded_findings

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline, sources
from distprof.analyses import diagnose, streams
from distprof.reports.findings import text

CONFIG = config_mod.load()
PYTORCH_WORDS = (".item()", "torch.compile", "DDP", "FSDP", "PyTorch", "DataLoader", "pin_memory")


def host_bound_events(host_op: str):
    """Step [0, 1000) on thread 1: kernels [0, 100) launched at 0 and [600, 700) launched at 550
    (a 500 ns host-bound gap, 50% of the window), and one host range ``host_op`` [0, 10)."""
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1, ev.HOST_THREAD, -1, -1),
            (ev.RANGE, ev.USER, host_op, 0, 10, 1, ev.HOST_THREAD, -1, -1)]
    for start, end, corr, launch in ((0, 100, 1, 0), (600, 700, 2, 550)):
        rows.append((ev.KERNEL, ev.COMPUTE, "saxpy", start, end, 7, ev.GPU_STREAM, 0, corr))
        rows.append((ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", launch, launch + 5, 1, ev.HOST_THREAD, -1, corr))
    kind, category, name, start, end, lane, lane_kind, device, corr = (np.array(c, dtype=object) for c in zip(*rows))
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=lane.astype(np.int64), lane_kind=lane_kind,
                          device=device.astype(np.int64), correlation_id=corr.astype(np.int64), pid=10, step=0)


def host_bound_advice(host_op: str, source: str = "nsys") -> str:
    trace = ev.RankTrace(events=host_bound_events(host_op), rank=0, device=0, source=source)
    [finding] = worded_findings(diagnose.findings([pipeline.reduce_rank(trace, CONFIG)], [], None, CONFIG))
    assert finding.finding == "host_bound_gpu"
    return finding.advice


def test_frameworks_by_names_or_source():
    assert ev.frameworks(host_bound_events("MPI_Send")) == ()
    assert ev.frameworks(host_bound_events("aten::mm, op_id = 7")) == (ev.PYTORCH,)
    assert ev.frameworks(host_bound_events("MPI_Send"), "kineto") == (ev.PYTORCH,)


def test_host_bound_advice_without_pytorch_is_generic():
    advice = host_bound_advice("MPI_Send")
    assert not [word for word in PYTORCH_WORDS if word in advice], advice
    assert "synchroniz" in advice and "fewer, larger kernels" in advice


@pytest.mark.parametrize("host_op, source", [("aten::mm", "nsys"), ("MPI_Send", "kineto")])
def test_host_bound_advice_with_pytorch_names_its_knobs(host_op, source):
    advice = host_bound_advice(host_op, source)
    assert ".item()" in advice and "torch.compile" in advice


def serialized_kineto(tmp_path, pytorch_names: bool):
    """A CPU-only Kineto-shaped rank or a native one: compute [1, 4) ms, an allreduce executing on
    the compute thread [4, 6) ms, compute [6, 8) ms: FAIL."""
    ms = 1_000_000
    names = ("aten::mm", "gloo:all_reduce") if pytorch_names else ("forward", "MPI_Allreduce")
    if pytorch_names:
        trace = kf.KinetoTrace(rank=0, world_size=2, pid=100, backend="gloo", base_time_ns=None)
        trace.step(1, 0, 10 * ms)
        trace.cpu_op(names[0], 1 * ms, 4 * ms)
        trace.cpu_op(names[1], 4 * ms, 6 * ms, cat="user_annotation")
        trace.cpu_op(names[0], 6 * ms, 8 * ms)
        [rank] = sources.read(trace.write(tmp_path / "rank0.json"), CONFIG)
        return pipeline.reduce_rank(rank, CONFIG)
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 10 * ms), (ev.RANGE, ev.PHASE, names[0], 1 * ms, 4 * ms),
            (ev.COMM_OP, ev.COMMUNICATION, names[1], 4 * ms, 6 * ms), (ev.RANGE, ev.PHASE, names[0], 6 * ms, 8 * ms)]
    kind, category, name, start, end = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                            end_ns=end.astype(np.int64), lane=1, step=0)
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=0, source="native"), CONFIG)


@pytest.mark.parametrize("pytorch", [True, False], ids=["kineto", "native-mpi"])
def test_serialized_advice_names_ddp_only_on_pytorch_traces(tmp_path, pytorch):
    result = serialized_kineto(tmp_path, pytorch)
    [row] = streams.rank_stream_checks(result, CONFIG)
    summary = summary_json(pipeline.combine([result], CONFIG, source="test"))
    [finding] = [f for f in summary["findings"] if f["finding"] == "serialized_communication"]
    assert row.status == "FAIL" and "separate stream or thread" in text(row.advice)
    for advice in (text(row.advice), finding["advice"]):
        assert ("DDP" in advice) == pytorch, advice


def test_real_traces_frameworks():
    """An MPI+CUDA C program (pipit saxpy) and nvFuser's own NVTX: no PyTorch op; an nsys PyTorch
    job (aten:: NVTX ranges) and a Kineto trace: PyTorch."""
    for name, expected in (("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite", ()),
                           ("nvfuser_report1_nsys2025.1.1.sqlite", ()),
                           ("nsysai_h100_2gpu_1s.sqlite", (ev.PYTORCH,))):
        traces = sources.read(real_export(name), CONFIG)
        assert {ev.frameworks(t.events, t.source) for t in traces} == {expected}, name
