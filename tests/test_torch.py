"""PyTorch integration: distprof.torch.instrument in one process (a world-1 gloo group), and the
example DDP job under a real torchrun with 2 ranks (overlap visible) and in one process (overlap
defeated)."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT

import distprof
from distprof import events as ev
from distprof.sources import native

# torch (3 s of CPU to import here) is imported when this module's first test runs, not when the
# tests are collected: every xdist worker collects every module, one of them runs these.
torch = dist = nn = DistributedDataParallel = dtorch = None


@pytest.fixture(scope="module", autouse=True)
def _torch_imported():
    global torch, dist, nn, DistributedDataParallel, dtorch
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    import distprof.torch as dtorch

LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")


@pytest.fixture
def group(monkeypatch):
    """A single-process gloo group, as torchrun with one rank would give."""
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def mlp(width=64, layers=3):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def events_of(out):
    return native.read(out / "rank0.sqlite", distprof.config.load())[0].events.to_frame()


def counts(events):
    return events.groupby("name", observed=True).size().to_dict()


def test_ddp_phases_buckets_and_summary(group, tmp_path):
    model = mlp()
    ddp = DistributedDataParallel(model, bucket_cap_mb=64 * 64 * 4 / 2**20)  # one bucket per weight
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    reference = mlp()
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.randn(16, 64)
    with distprof.Profiler(out=tmp_path, quiet=True) as prof, dtorch.instrument(ddp, optimizer, profiler=prof) as inst:
        for _ in range(3):
            optimizer.zero_grad()
            ddp(x).square().mean().backward()
            optimizer.step()                       # ends the ProfileStep: no prof.step() in the loop
    for _ in range(3):                             # the hooked allreduce keeps DDP's result
        reference_optimizer.zero_grad()
        reference(x).square().mean().backward()
        reference_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs)

    events = events_of(tmp_path)
    found = counts(events)
    assert {k: found[k] for k in (ev.PROFILE_STEP, "forward", "backward", "optimizer")} == {
        ev.PROFILE_STEP: 3, "forward": 3, "backward": 3, "optimizer": 3}
    comm = events[events["category"] == ev.COMMUNICATION]
    assert found["allreduce"] == len(comm) and len(comm) >= 3 * 2   # several buckets per step
    assert set(comm["lane"]) == {inst.comm_lane.id} and set(comm["kind"]) == {ev.COMM_OP}
    main = threading.get_native_id()
    phases = events[events["name"].isin(["forward", "backward", "optimizer"])]
    assert set(phases["lane"]) == {main}
    for step in range(3):  # forward < backward < optimizer; backward ends before the last allreduce does
        in_step = events[events["step"] == step].set_index("name", drop=False)
        forward, backward, opt = (in_step.loc[n] for n in ("forward", "backward", "optimizer"))
        assert forward["end_ns"] <= backward["start_ns"] <= backward["end_ns"] <= opt["start_ns"]
        bucket = comm[comm["step"] == step]
        assert bucket["start_ns"].min() >= backward["start_ns"] and bucket["end_ns"].max() <= opt["start_ns"]
    import sqlite3
    with sqlite3.connect(tmp_path / "rank0.sqlite") as db:
        assert db.execute("SELECT name FROM distprof_threads WHERE tid = ?",
                          (inst.comm_lane.id,)).fetchone() == (dtorch.DDP_LANE,)
    assert prof.summary["ranks"][0]["steps"] == 3
    assert prof.summary["ranks"][0]["communication_ns"] > 0
    assert inst.gpu_time_ns() == {}  # CPU model: no CUDA events


def test_plain_model_user_steps_and_removal(group, tmp_path):
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters())
    inst = dtorch.instrument(model, optimizer)
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        for _ in range(2):
            out = model(torch.randn(4, 64))
            (out[:2].sum() + out[2:].sum()).backward()
            optimizer.step()
            prof.step()
        with pytest.raises(RuntimeError):         # forward raises: its range is still closed
            model(torch.randn(4, 3))
        with torch.no_grad():                     # no grad: forward only
            model(torch.randn(4, 64))
        inst.remove()
        model(torch.randn(4, 64)).sum().backward()  # not recorded any more
        prof.step()
    found = counts(events_of(tmp_path))
    assert found["forward"] == 4 and found["backward"] == 2 and found["optimizer"] == 2
    assert "allreduce" not in found
    with distprof.Profiler(out=tmp_path / "again", quiet=True) as prof:
        with distprof.phase("forward"):           # the failed forward left no open range behind
            pass
        prof.step()
    assert counts(events_of(tmp_path / "again"))["forward"] == 1


def test_user_comm_hook_is_timed(group, tmp_path):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    calls = []

    def my_hook(state, bucket):
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    ddp = DistributedDataParallel(mlp())
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        with dtorch.instrument(ddp, None, comm_hook=(None, my_hook), comm_name="my_allreduce"):
            ddp(torch.randn(8, 64)).sum().backward()
            prof.step()
    assert calls and counts(events_of(tmp_path))["my_allreduce"] == len(calls)
    with pytest.raises(RuntimeError, match="comm_hook="):  # DDP takes one hook
        dtorch.instrument(ddp, None)
    with pytest.raises(ValueError):
        dtorch.instrument(mlp(), None, comm_hook=(None, my_hook))


def test_ddp_default_hook_records_bucket_bytes_and_group(group, tmp_path):
    """DDP's default hook, timed: every step reduces every gradient's bytes once, on the world group."""
    import sqlite3
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(3)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=64 * 64 * 4 / 2**20)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with distprof.Profiler(out=tmp_path, quiet=True) as prof, dtorch.instrument(ddp, optimizer, profiler=prof):
        for _ in range(3):
            optimizer.zero_grad()
            ddp(torch.randn(16, 64)).square().mean().backward()
            optimizer.step()
    assert dist.get_process_group_ranks(dist.group.WORLD) == [0]
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    with sqlite3.connect(tmp_path / "rank0.sqlite") as db:
        per_step = db.execute("SELECT r.step, sum(n.nbytes), count(*), min(n.comm_group) FROM distprof_ranges r "
                              "JOIN distprof_names n ON n.id = r.name_id WHERE n.kind = 'comm_op' "
                              "GROUP BY r.step").fetchall()
    # every step reduces every gradient once (DDP's first step in one bucket, then one per weight here)
    assert [row[0] for row in per_step] == [0, 1, 2] and per_step[-1][2] >= 2
    assert all(total == parameter_bytes and group == "0" for _, total, _, group in per_step)
    comm = events_of(tmp_path)
    comm = comm[comm["kind"] == "comm_op"]
    assert set(comm["group"]) == {"ranks 0"} and set(comm["collective"]) == {"allreduce"}
    assert comm.groupby("step")["nbytes"].sum().to_dict() == {0: parameter_bytes, 1: parameter_bytes,
                                                             2: parameter_bytes}


def test_flops_probe_closes_without_an_optimizer_step(tmp_path, monkeypatch):
    """A probed step that never reaches optimizer.step: a second forward is a micro-batch of the
    same step (gradient accumulation: the counter stays), and remove() leaves the counter, so later
    steps do not pay and no profile is invented (giving up after many forwards:
    tests/test_flops_probe.py)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    model = nn.Sequential(nn.Linear(8, 8))
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        inst = dtorch.instrument(model, torch.optim.SGD(model.parameters(), lr=0.1), profiler=prof, flops=True)
        model(torch.randn(2, 8)).sum().backward()
        assert len(_get_current_dispatch_mode_stack()) == 1     # the counter, until the step
        model(torch.randn(2, 8))                                # no optimizer step in between
        assert len(_get_current_dispatch_mode_stack()) == 1 and inst.model_profile is None
        inst.remove()
        assert _get_current_dispatch_mode_stack() == [] and inst.model_profile is None


def test_lane_records_intervals_across_threads(tmp_path, monkeypatch):
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    lane = dtorch.Lane("my async lane")
    assert dtorch.Lane("my async lane").id == lane.id >= 1 << 30
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        token = lane.start("send")
        finisher = threading.Thread(target=lambda: (time.sleep(0.002), lane.end(token)))
        finisher.start()
        finisher.join()
        now = distprof.collector.clock_ns()
        lane.record("planned", now - 1000, now, category=ev.USER)
        prof.step()
    events = events_of(tmp_path).set_index("name")
    assert events.loc["send", "lane"] == lane.id and events.loc["send", "kind"] == ev.COMM_OP
    assert events.loc["send", "end_ns"] - events.loc["send", "start_ns"] >= 2_000_000
    assert events.loc["planned", "category"] == ev.USER and events.loc["planned", "lane"] == lane.id


def test_lane_nvtx_ranges_end_on_another_thread(monkeypatch):
    """With an NVTX tool attached the lane starts an NVTX start/end range (not push/pop): it
    may end on any thread. A stand-in domain records the calls (no tool is attached here)."""
    from distprof import annotate

    class Domain:
        def __init__(self):
            self.calls = []

        def get_event_attributes(self, **attributes):
            return attributes["message"]

        def start_range(self, attributes):
            self.calls.append(("start", attributes, threading.get_ident()))
            return len(self.calls)

        def end_range(self, handle):
            self.calls.append(("end", handle, threading.get_ident()))

    domain = Domain()
    monkeypatch.setattr(annotate, "_active_domain", domain)
    monkeypatch.setattr(annotate, "_descriptors", {})
    lane = dtorch.Lane(dtorch.DDP_LANE)
    token = lane.start("allreduce")
    finisher = threading.Thread(target=lane.end, args=(token,))
    finisher.start()
    finisher.join()
    (start, message, opener), (end, handle, closer) = domain.calls
    assert (start, message, end, handle) == ("start", "allreduce", "end", 1) and opener != closer


def test_distprof_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import distprof\n"
            "try:\n    import distprof.torch\nexcept ImportError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "distprof.torch needs PyTorch: pip install 'distprof[torch]'"


# -- the example job under a real torchrun, 2 ranks on CPU (gloo) -------------------------------

def torchrun(out, *args) -> tuple[dict, str]:
    """launch/torchrun.sh with this interpreter's torchrun first on PATH: (summary.json, stdout)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    result = subprocess.run(["bash", str(ROOT / "launch" / "torchrun.sh"), "--nproc", "2", "--",
                             str(ROOT / "examples" / "torch_ddp.py"), "--out", str(out), "--steps", "4", *args],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.count("Distributed Summary") == 1, result.stdout  # printed by rank 0 only
    return json.loads((out / "summary.json").read_text()), result.stdout


# A torchrun job costs ~16 s of CPU here (torch's import, 3 s, in torchrun and both ranks; DDP imports
# torch._dynamo, 2.7 s, in each rank): one job, checked for several things; the no-overlap mode runs
# in this process, whose torch is imported already.
WIDTH, LAYERS, BATCH = 512, 6, 256  # the example's defaults


@pytest.fixture(scope="module")
def overlap_visible(tmp_path_factory) -> tuple[dict, str]:
    """The example as shipped (1 MB buckets), with the live model FLOPs probe and the live view (a
    window every 2 steps) on."""
    out = tmp_path_factory.mktemp("ddp_overlap")
    config = out / "live.yaml"
    config.write_text((ROOT / "configs" / "torchrun.yaml").read_text() + "\nlive:\n  every_steps: 2\n")
    return torchrun(out, "--bucket-cap-mb", "1", "--flops", "--config", str(config))


@pytest.mark.slow
def test_torchrun_ddp_overlap_visible(overlap_visible):
    summary, _ = overlap_visible
    assert summary["world_size"] == 2 and summary["missing_ranks"] == []
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    for row in summary["ranks"]:
        assert row["steps"] == 4
        assert row["overlap_ratio"] > 0.1, row  # 67-81% here; the PASS threshold is 10% (loaded machines: ~20%)
        assert row["comm_lanes"] != row["compute_lanes"]
    placement = [c for c in summary["checks"] if c.get("check") == "stream_placement"]
    assert all(c["status"] == "PASS" for c in placement), placement


def test_example_without_overlap_shows_none(tmp_path, monkeypatch):
    """The example's --no-overlap mode (one allreduce on the training thread after backward), run as
    torchrun would start a world of one: its communication overlaps nothing, and the stream
    placement check flags it."""
    import runpy
    import socket
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for var, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(var, value)
    example = runpy.run_path(str(ROOT / "examples" / "torch_ddp.py"))
    assert example["main"](["--out", str(tmp_path), "--steps", "4", "--no-overlap"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    [row] = summary["ranks"]
    assert row["steps"] == 4 and row["communication_ns"] > 0
    assert row["overlap_ratio"] < 0.05, row
    assert [(c["check"], c["status"]) for c in summary["checks"]] == [("stream_placement", "FAIL")], summary["checks"]


@pytest.mark.slow
def test_live_flops_profile_under_torchrun(overlap_visible):
    """--flops: DDP over LAYERS x (Linear(WIDTH, WIDTH), ReLU) at BATCH: params and forward FLOPs known
    by construction, backward = 2 x forward minus layer 1's input grad."""
    summary, _ = overlap_visible
    gemm = 2 * BATCH * WIDTH * WIDTH
    ranks = summary["model_profile"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for row in ranks:
        assert row["params"] == LAYERS * (WIDTH * WIDTH + WIDTH)
        assert row["fwd_flops_per_step"] == LAYERS * gemm and row["bwd_flops_per_step"] == (2 * LAYERS - 1) * gemm
        assert row["samples_per_s"] == pytest.approx(BATCH / row["iter_latency_ns"] * 1e9)
        assert row["achieved_tflops"] == pytest.approx((3 * LAYERS - 1) * gemm / row["iter_latency_ns"] / 1e3)
        top = next(m for m in row["modules"] if m["name"] == "module")
        assert (top["depth"], top["params"], top["macs"]) == (1, row["params"], LAYERS * gemm // 2)
        first = next(m for m in row["modules"] if m["name"] == "module.0")
        assert (first["depth"], first["params"], first["macs"]) == (2, WIDTH * WIDTH + WIDTH, gemm // 2)
        assert first["fwd_latency_ns"] > 0 and row["fwd_latency_ns"] >= first["fwd_latency_ns"]
    from distprof.reports import html, text
    typed = distprof.Summary.from_json(summary)
    assert "Model FLOPs Profile (live, one step)" in text.render(typed)
    assert "<h2>Model FLOPs Profile</h2>" in html.render(typed)


@pytest.mark.slow
def test_torchrun_job_prints_live_windows(overlap_visible):
    """Rank 0 prints a window every 2 steps with both ranks in it, and keeps them in summary.json."""
    summary, stdout = overlap_visible
    heads = [line.split(":")[0] for line in stdout.splitlines()
             if line.startswith("[distprof live] steps") and " rank " not in line.split(":")[0]]
    assert heads == [f"[distprof live] steps {a}-{a + 1}" for a in range(0, 4, 2)], stdout[-3000:]
    record = summary["live"]
    assert record["every_steps"] == 2
    assert [sorted(r["rank"] for r in w["ranks"]) for w in record["windows"]] == [[0, 1]] * 2
