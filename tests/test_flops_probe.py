"""The live FLOPs probe (``distprof.torch.instrument(..., flops=True)``) and the backward FLOPs of
Kineto traces (issue 40 point 5). Ground truth by construction: a plain ``nn.Sequential`` of
Linear layers whose multiply-adds are counted by hand, ``torch.utils.flop_counter`` (the counter
the probe uses) as the reference total, and a plain-Python count over the raw DLRM trace."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from kineto_fixtures import KinetoTrace
from result_views import summary_json

import distprof
from distprof import config as config_mod
from distprof import pipeline

# torch is imported when this module's first test runs (3 s of CPU), not when tests are collected
torch = nn = dtorch = None

LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")
BATCH = 4
# Sequential(Linear(8, 16), ReLU, Linear(16, 4)) at batch 4, by hand
MACS_0, MACS_2 = BATCH * 8 * 16, BATCH * 16 * 4             # 512, 256
FORWARD = 2 * (MACS_0 + MACS_2)                              # 1,536 FLOPs
BACKWARD = 2 * (MACS_0 + MACS_2) + 2 * MACS_2                # weight grads + layer 2's input grad: 2,048
DLRM = Path(__file__).parent / "data" / "kineto" / "hta_trace_diff_control_1of8"


@pytest.fixture(scope="module", autouse=True)
def _torch_imported():
    global torch, nn, dtorch
    torch = pytest.importorskip("torch")
    from torch import nn

    import distprof.torch as dtorch


@pytest.fixture(autouse=True)
def _one_process(monkeypatch):
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)


def sequential():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def train(out: Path, model, steps: int = 3, accumulate: int = 1, output=lambda y: y, **options):
    """A plain loop (``accumulate`` forwards and backwards per optimizer step) under a Profiler
    with the probe on: (the probe's profile, the warnings raised, the probe)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.Generator().manual_seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with distprof.Profiler(out=out, quiet=True) as prof, \
                dtorch.instrument(model, optimizer, profiler=prof, flops=True, **options) as inst:
            for _ in range(steps):
                for _ in range(accumulate):
                    output(model(torch.randn(BATCH, 8, generator=inputs))).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            probe = inst.flops
    return inst.model_profile, [str(w.message) for w in caught if "distprof" in str(w.message)], probe


def train_plain(model, steps: int = 3) -> None:
    """The loop of :func:`train` without distprof."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.Generator().manual_seed(1)
    for _ in range(steps):
        model(torch.randn(BATCH, 8, generator=inputs)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def stored_profile(out: Path) -> dict:
    """The profile as the rank file carries it to summary.json."""
    from distprof.sources import native
    [trace] = native.read(out / "rank0.sqlite", config_mod.load())
    return trace.meta["model_profile"]


def test_a_plain_sequential_lists_its_modules(tmp_path):
    """Not wrapped in DDP: before, modules[] was always empty (the counter's module tracker,
    entered in the top module's own pre-hook, never saw the top module and named nothing)."""
    profile, caught, _ = train(tmp_path, sequential(), batch_size=BATCH)
    assert caught == []
    assert (profile["fwd_flops_per_step"], profile["bwd_flops_per_step"], profile["forwards"]) == (FORWARD, BACKWARD, 1)
    modules = {m["name"]: m for m in profile["modules"]}
    assert [(m["name"], m["depth"], m["params"], m["macs"]) for m in profile["modules"]] == [
        ("0", 1, 8 * 16 + 16, MACS_0), ("2", 1, 16 * 4 + 4, MACS_2), ("1", 1, 0, 0)]
    assert all(m["fwd_latency_ns"] > 0 for m in modules.values())
    assert sum(m["fwd_latency_ns"] for m in modules.values()) <= profile["fwd_latency_ns"]
    assert modules["0"]["tflops"] == pytest.approx(2 * MACS_0 / modules["0"]["fwd_latency_ns"] / 1e3)
    assert profile["samples_per_s"] == pytest.approx(BATCH / profile["iter_latency_ns"] * 1e9)
    assert stored_profile(tmp_path) == profile


def test_the_totals_equal_torchs_flop_counter():
    """The reference: FlopCounterMode around one plain forward and backward of the same model."""
    from torch.utils.flop_counter import FlopCounterMode
    model = sequential()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(BATCH, 8)).sum().backward()
    assert counter.get_total_flops() == FORWARD + BACKWARD


def test_gradient_accumulation_of_4_gives_a_profile(tmp_path):
    """4 forwards and backwards per optimizer step: before, no profile and no warning (the second
    forward closed the probe). The probed step's figures are the step's: 4 micro-batches."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    model = sequential()
    profile, caught, _ = train(tmp_path, model, accumulate=4, batch_size=BATCH)
    assert caught == []
    assert (profile["fwd_flops_per_step"], profile["bwd_flops_per_step"], profile["forwards"]) == \
        (4 * FORWARD, 4 * BACKWARD, 4)
    assert [(m["name"], m["macs"]) for m in profile["modules"]] == [("0", 4 * MACS_0), ("2", 4 * MACS_2), ("1", 0)]
    assert profile["samples_per_s"] == pytest.approx(4 * BATCH / profile["iter_latency_ns"] * 1e9)
    assert profile["bwd_latency_ns"] > 0 and stored_profile(tmp_path) == profile
    # only the probed step pays: the counter and the module hooks are off after it
    assert _get_current_dispatch_mode_stack() == []
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model)


def test_no_optimizer_step_in_many_forwards_gives_up_with_a_warning(tmp_path):
    """A loop that never steps the optimizer: the probe counts up to MAX_FORWARDS_PER_STEP forwards
    (gradient accumulation), then leaves the counter, says why, and writes no profile."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    model = sequential()
    with warnings.catch_warnings(record=True) as caught, distprof.Profiler(out=tmp_path, quiet=True) as prof:
        warnings.simplefilter("always")
        inst = dtorch.instrument(model, torch.optim.SGD(model.parameters(), lr=0.1), profiler=prof, flops=True)
        for _ in range(dtorch.MAX_FORWARDS_PER_STEP):
            model(torch.randn(BATCH, 8)).sum().backward()
        assert len(_get_current_dispatch_mode_stack()) == 1 and inst.flops.state == "counting"
        model(torch.randn(BATCH, 8))
        assert _get_current_dispatch_mode_stack() == [] and inst.model_profile is None
        inst.remove()
    [message] = [str(w.message) for w in caught if "distprof" in str(w.message)]
    assert f"no optimizer.step() in {dtorch.MAX_FORWARDS_PER_STEP} forwards" in message


def test_flops_without_an_optimizer_says_so():
    model = sequential()
    with pytest.warns(RuntimeWarning, match="without an optimizer"):
        inst = dtorch.instrument(model, flops=True)
    assert inst.flops is None
    inst.remove()


def _outputs():
    """Models whose output holds itself, or is a list nested 1,500 deep (Python's recursion limit is 1,000)."""
    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            out = [self.lin(x)]
            out.append(out)
            return {"out": out, "again": out}

    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            out = self.lin(x)
            for _ in range(1500):
                out = [out]
            return out

    def first(value):
        while not isinstance(value, torch.Tensor):
            value = value["out"][0] if isinstance(value, dict) else value[0]
        return value

    return [(Loop, first), (Deep, first)]


@pytest.mark.parametrize("flops", [True, False])
def test_outputs_that_hold_themselves_or_nest_deep_do_not_stop_training(tmp_path, flops):
    """Before: RecursionError into the training loop (the backward hook's walk over the output,
    and the counter's module tracker flattening every module output)."""
    for k, (make, first) in enumerate(_outputs()):
        torch.manual_seed(0)
        model = make()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        with warnings.catch_warnings(record=True) as caught, \
                distprof.Profiler(out=tmp_path / str(k) / str(flops), quiet=True) as prof, \
                dtorch.instrument(model, optimizer, profiler=prof, flops=flops) as inst:
            warnings.simplefilter("always")
            for _ in range(2):
                first(model(torch.randn(BATCH, 8))).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
        assert not [w for w in caught if "distprof" in str(w.message)]
        macs = BATCH * 8 * 8
        if flops:
            profile = inst.model_profile
            assert (profile["fwd_flops_per_step"], profile["bwd_flops_per_step"]) == (2 * macs, 2 * macs)
            assert [(m["name"], m["macs"]) for m in profile["modules"]] == [("lin", macs)]
        events = _phase_counts(tmp_path / str(k) / str(flops))
        assert events["forward"] == events["backward"] == events["optimizer"] == 2


def _phase_counts(out: Path) -> dict:
    from distprof.sources import native
    [trace] = native.read(out / "rank0.sqlite", config_mod.load())
    names = trace.events["name"]
    return {phase: int(names.eq(phase).sum()) for phase in ("forward", "backward", "optimizer")}


@pytest.mark.parametrize("batch_size", ["16", 0, -2, 16.0, True])
def test_a_bad_batch_size_costs_samples_per_s_not_the_step(tmp_path, batch_size):
    """Before, ``batch_size="16"`` raised a TypeError from inside ``optimizer.step()``."""
    profile, caught, _ = train(tmp_path, sequential(), steps=2, batch_size=batch_size)
    assert len(caught) == 1 and "not a positive integer" in caught[0] and repr(batch_size) in caught[0]
    assert profile["samples_per_s"] is None and profile["fwd_flops_per_step"] == FORWARD


def test_a_numpy_batch_size_is_an_integer(tmp_path):
    profile, caught, _ = train(tmp_path, sequential(), steps=2, batch_size=np.int64(BATCH))
    assert caught == [] and profile["samples_per_s"] == pytest.approx(BATCH / profile["iter_latency_ns"] * 1e9)


@pytest.mark.parametrize("where", ["counting an op", "the counter's total"])
def test_an_error_inside_the_probe_never_reaches_training(tmp_path, monkeypatch, where):
    """Whatever fails in the probe (a FLOP formula on an op, the counter itself) is one warning;
    the probe turns off, its counter and hooks come off, and training goes on unchanged."""
    from torch.utils import flop_counter
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    def broken(*args, **kwargs):
        raise ValueError("broken on purpose")

    if where == "counting an op":
        monkeypatch.setitem(flop_counter.flop_registry, torch.ops.aten.addmm, broken)
    else:
        monkeypatch.setattr(flop_counter.FlopCounterMode, "get_total_flops", broken)
    model, reference = sequential(), sequential()
    profile, caught, probe = train(tmp_path, model, steps=3)
    assert profile is None and probe.state == "off" and _get_current_dispatch_mode_stack() == []
    assert len(caught) == 1 and "FLOPs probe is off" in caught[0] and "broken on purpose" in caught[0]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model)
    train_plain(reference)   # the same three steps without distprof: the same weights
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))


# -- backward FLOPs of Kineto traces: ops on autograd's threads -----------------------------------

MAIN, AUTOGRAD, OTHER = 100, 200, 300
UNIT = 2 * 64 * 128 * 256      # one [64,128] @ [128,256] GEMM


def _gemm(trace: KinetoTrace, start_ns: int, tid: int) -> None:
    trace.cpu_op("aten::mm", start_ns, start_ns + 1_000, tid=tid, **{"Input Dims": [[64, 128], [128, 256]]})


def test_gemms_on_the_autograd_thread_inside_backward_count_as_backward(tmp_path):
    """One step: a GEMM in the main thread's forward; the main thread waits in ``## backward ##``
    while autograd's thread runs two GEMMs; one GEMM on another thread after backward ended stays in
    no phase. Before: backward 0 (the autograd thread has no phase range of its own)."""
    trace = KinetoTrace(rank=0, world_size=1, pid=7, tid=MAIN)
    trace.step(1, 0, 100_000)
    trace.cpu_op("## forward ##", 1_000, 20_000, cat="user_annotation")
    _gemm(trace, 2_000, MAIN)
    trace.cpu_op("## backward ##", 30_000, 60_000, cat="user_annotation")
    _gemm(trace, 31_000, AUTOGRAD)
    _gemm(trace, 40_000, AUTOGRAD)
    _gemm(trace, 70_000, OTHER)
    summary = summary_json(pipeline.merge_files([trace.write(tmp_path / "rank0.json")], config_mod.load()))
    [row] = summary["ranks"]
    assert row["flops_per_step"] == 4 * UNIT
    assert row["flops_by_phase"] == {"forward": UNIT, "backward": 2 * UNIT}


def _raw_backward_gemm_flops(path: Path) -> list[int]:
    """Per ProfilerStep, the FLOPs of the GEMMs (mm, addmm, bmm: leaf ops there) that run on a
    thread other than the one holding ``## backward ##``, inside one of its backward ranges."""
    raw = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    main = next(e["tid"] for e in raw if e["name"] == "## backward ##")
    backward = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e["name"] == "## backward ##"]

    def flops(e) -> int:
        dims = e["args"]["Input Dims"]
        if e["name"] == "aten::bmm":
            return 2 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]
        a, b = (dims[0], dims[1]) if e["name"] == "aten::mm" else (dims[1], dims[2])
        return 2 * a[0] * a[1] * b[1]

    per_step = []
    for start, end in [(e["ts"], e["ts"] + e["dur"]) for e in raw if e["name"].startswith("ProfilerStep#")]:
        per_step.append(sum(flops(e) for e in raw if e["tid"] != main and e["name"] in ("aten::mm", "aten::addmm",
                                                                                          "aten::bmm")
                            and start <= e["ts"] < end and any(a <= e["ts"] and e["ts"] + e["dur"] <= b
                                                              for a, b in backward)))
    return per_step


def test_the_dlrm_traces_backward_flops_are_the_autograd_threads_gemms():
    """The 1-of-8-rank DLRM trace: 2/3 of the step's GEMM FLOPs run on the autograd thread inside the
    main thread's ``## backward ##`` (before: backward 0)."""
    [path] = sorted(DLRM.glob("*.json.gz"))
    per_step = _raw_backward_gemm_flops(path)
    assert len(set(per_step)) == 1 and per_step[0] == 228_714_614_784
    [row] = summary_json(pipeline.merge_files([path], config_mod.load()))["ranks"]
    assert row["flops_by_phase"]["backward"] == per_step[0]
    assert row["flops_by_phase"]["forward"] + row["flops_by_phase"]["backward"] == row["flops_per_step"]
    assert per_step[0] / row["flops_per_step"] == pytest.approx(2 / 3, abs=0.01)
