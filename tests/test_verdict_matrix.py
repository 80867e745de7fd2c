"""benchmarks/verdict_matrix.py and _fault_jobs.py by construction: the measured effect of a mid-run fault is
compared with the cost on the same footing (per step since the onset when the verdict says "since step"); the
fsdp/moe pieces (issue 55): the router's counts, the options, the plan and a router skew's scoring."""

import importlib.util
import sys

import pytest
from conftest import ROOT

MS = 1_000_000


def _matrix():
    spec = importlib.util.spec_from_file_location("verdict_matrix", ROOT / "benchmarks" / "verdict_matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("verdict_matrix", module)
    spec.loader.exec_module(module)
    return module


def _run(vm, pattern: str, cost_ms: float):
    steps = [30 * MS] * 4 + [40 * MS] * 4  # 10 ms slower from the 5th of 8 steps
    return vm.Run("ddp", "forward", 0.25, "mid", rank=1, fault_step=4, expected=1, named=1, pattern=pattern,
                  cost_ns=cost_ms * MS, step_ns=35 * MS, step_times_ns=steps)


def test_a_straggler_named_since_its_onset_is_measured_per_late_step():
    vm = _matrix()
    run = _run(vm, "since step", 10.0)
    vm.measure(run, 30 * MS)
    assert run.measured_ns == 10 * MS
    if vm.cores_each("ddp"):
        assert run.cost_error == 0.0


def test_a_persistent_verdict_on_a_mid_run_fault_is_measured_per_profiled_step():
    vm = _matrix()
    run = _run(vm, "persistent", 5.0)
    vm.measure(run, 30 * MS)
    assert run.measured_ns == 5 * MS  # the 10 ms on half the steps, spread over all of them


def test_the_cost_is_also_scored_against_the_delay_injected():
    """A 10 ms sleep from the 5th of 8 steps: a "since step" cost of 11 ms is 10% off the sleep; a
    persistent one is per profiled step, against 10 ms x 4/8 = 5 ms; a wrong verdict is not scored."""
    vm = _matrix()
    since, persistent = _run(vm, "since step", 11.0), _run(vm, "persistent", 5.5)
    for run in (since, persistent):
        run.fault_ms = 10.0
    if not vm.cores_each("ddp"):
        assert vm.injected_error(since) is None
        return
    assert vm.injected_error(since) == pytest.approx(0.1) and vm.injected_error(persistent) == pytest.approx(0.1)
    since.named = 0  # the wrong rank
    assert vm.injected_error(since) is None


def test_demo_config_reaches_the_demo_jobs_only(tmp_path, monkeypatch):
    """--demo-config runs the demo jobs with that config (configs/demo_device.yaml: kernel waits that
    leave the cores free) and is recorded; the torch jobs take no demo config."""
    vm = _matrix()
    args = vm.parse(["--jobs", "pp4,ddp", "--demo-config", "configs/demo_device.yaml"])
    assert args.demo_config == "configs/demo_device.yaml"
    commands = []
    monkeypatch.setattr(vm, "execute", lambda command, label, run: commands.append(command) or 0.0)
    monkeypatch.setattr(vm, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(vm, "read_live", lambda run, path: None)
    vm.run_job(vm.Run("pp4", "clean"), tmp_path / "a", 8, True, args.demo_config)
    assert commands[-1][commands[-1].index("--config") + 1] == "configs/demo_device.yaml"
    vm.run_job(vm.Run("ddp", "clean"), tmp_path / "b", 8, True, args.demo_config)
    assert not any("--config" in command for command in commands[1:])


def test_a_negative_kernel_wait_is_a_one_line_error():
    import subprocess
    for script in ("verdict_matrix.py", "_fault_jobs.py"):
        extra = ["--topology", "ddp", "--out", "unused"] if script == "_fault_jobs.py" else []
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *extra, "--kernel-ms", "-1"],
                              capture_output=True, text=True)
        assert done.returncode == 2 and "--kernel-ms: a wait of at least 0 ms, not -1" in done.stderr
        assert "Traceback" not in done.stderr


def test_recall_by_effect_counts_the_faults_that_slowed_their_steps():
    """A 50% dataloader sleep that the pipeline's bubble hides (its steps as fast as the clean runs')
    counts in the recall by size only; a 5% fault that slowed its steps by a third counts in the recall
    by measured effect only; a mid-run fault's effect is on its steps from the onset on."""
    vm = _matrix()
    hidden = vm.Run("pp", "data", 0.5, "start", rank=3, expected=3, named=None, clean_step_ns=30 * MS,
                    step_times_ns=[30 * MS] * 8)
    felt = vm.Run("ddp", "forward", 0.05, "start", rank=1, expected=1, named=1, clean_step_ns=30 * MS,
                  step_times_ns=[40 * MS] * 8)
    mid = _run(vm, "since step", 10.0)
    mid.clean_step_ns = 30 * MS
    assert [vm.effect_per_step(run) for run in (hidden, felt, mid)] == [0, 10 * MS, 10 * MS]
    score = vm.scores([hidden, felt, mid])
    assert score["recall"] == [1, 2]  # hidden (missed) and mid (named) are >= 10% by size
    assert score["recall_by_effect"] == [2, 2]  # felt and mid slowed their steps by >= 10%


def _jobs():
    spec = importlib.util.spec_from_file_location("_fault_jobs", ROOT / "benchmarks" / "_fault_jobs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_fault_jobs", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_router_splits_unevenly_and_loads_experts_evenly_unless_skewed():
    """moe's router (issue 55): each rank sends every expert a different count (uneven all_to_all splits) and
    its whole batch; in sum each expert gets the same in a clean step, and under --router-skew one expert
    gets 2x the tokens of each other from the skew's step on."""
    fj = _jobs()
    for world in (2, 4):
        rows = [fj.router_counts(256, world, rank, 3) for rank in range(world)]
        assert all(sum(row) == 256 for row in rows) and all(len(set(row)) > 1 for row in rows)
        assert [sum(row[expert] for row in rows) for expert in range(world)] == [256] * world
        skew = fj.Skew(1, step=2)
        before = [fj.router_counts(256, world, rank, 1, skew) for rank in range(world)]
        assert before == [fj.router_counts(256, world, rank, 1) for rank in range(world)]
        after = [sum(fj.router_counts(256, world, rank, 2, skew)[expert] for rank in range(world))
                 for expert in range(world)]
        assert all(abs(after[1] / after[expert] - 2) < 0.02 for expert in range(world) if expert != 1)


def test_fault_job_options_are_checked_before_torch_starts():
    import subprocess
    script = str(ROOT / "benchmarks" / "_fault_jobs.py")
    for extra, message in ((["--topology", "ddp", "--router-skew", "1"], "--router-skew: moe only"),
                           (["--topology", "moe", "--router-skew", "4"], "rank 4 is not one of the 4 ranks"),
                           (["--topology", "moe", "--ranks", "2", "--fault", "2:5"], "rank 2 is not one of the 2"),
                           (["--topology", "tpdp", "--ranks", "2"], "--ranks: 2 or more, for fsdp or moe only"),
                           (["--topology", "moe", "--router-skew", "x"], "--router-skew: expected RANK[@STEP]")):
        done = subprocess.run([sys.executable, script, *extra, "--out", "unused"], capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr, (extra, done.stderr)
        assert "Traceback" not in done.stderr


def test_moe_plans_a_router_skew_per_onset_and_fsdp_the_torch_faults():
    vm = _matrix()
    args = vm.parse(["--jobs", "fsdp,moe", "--quick"])
    moe = vm.plan("moe", 100 * MS, args, cleans=1)
    skews = [run for run in moe if run.kind == "router_skew"]
    assert [(run.onset, run.size, run.fault_ms, run.spec) for run in skews] == [
        ("start", None, None, f"{skews[0].rank}@0"), ("mid", None, None, f"{skews[1].rank}@4")]
    assert all(run.expected == run.rank for run in skews) and vm.label(skews[1]).startswith("moe router_skew mid (")
    fsdp = vm.plan("fsdp", 100 * MS, args, cleans=1)
    assert {run.kind for run in fsdp} == {"forward", "data", "comm", "once", "clean"}
    only = vm.plan("moe", 100 * MS, vm.parse(["--jobs", "moe", "--kinds", "router_skew,forward", "--quick"]), 2)
    assert [run.kind for run in only].count("clean") == 2 and {run.kind for run in only} == {
        "router_skew", "forward", "clean"}
    assert [run.kind for run in vm.plan("fsdp", 100 * MS, vm.parse(["--kinds", "router_skew"]), 2)] == ["clean"] * 2


def test_new_jobs_reach_the_fault_job_with_their_ranks_and_skew(tmp_path, monkeypatch):
    vm = _matrix()
    commands = []
    monkeypatch.setattr(vm, "execute", lambda command, label, run: commands.append(command) or 0.0)
    monkeypatch.setattr(vm, "busy_cores", lambda: 0.0)
    monkeypatch.setitem(vm.RANKS, "moe", 2)
    skew = vm.Run("moe", "router_skew", None, "mid", rank=1, fault_step=4, spec="1@4")
    vm.run_job(skew, tmp_path / "a", 8, True)
    assert commands[0][commands[0].index("--router-skew") + 1] == "1@4" and "--fault" not in commands[0]
    assert commands[0][commands[0].index("--ranks") + 1] == "2"
    vm.run_job(vm.Run("fsdp", "forward", 0.25, "start", rank=1, spec="1:5@0:forward"), tmp_path / "b", 8, True)
    assert commands[2][commands[2].index("--fault") + 1] == "1:5@0:forward" and "--topology" in commands[2]
    assert vm.parse(["--ranks", "moe=2,fsdp=4"]).ranks == {"moe": 2, "fsdp": 4}


def _summary(tmp_path, findings, straggler=None):
    import json
    folder = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"skew": {"straggler": straggler}, "findings": findings}))
    return folder


def test_a_router_skew_is_right_when_the_imbalance_finding_names_its_rank(tmp_path):
    """Scored by summary.json's expert_imbalance finding (its first rank, its cost); a distprof without the
    finding misses the skew without failing; an imbalance finding in any other run makes it wrong."""
    vm = _matrix()
    finding = {"finding": "expert_imbalance", "ranks": [1, 0], "cost_ns": 12 * MS, "saving_share": 0.1,
               "message": "expert load imbalance"}
    named = vm.Run("moe", "router_skew", None, "start", rank=1, expected=1, step_times_ns=[110 * MS] * 8,
                   step_ns=110 * MS)
    vm.read_verdict(named, _summary(tmp_path, [finding], {"rank": 1, "cost_ns": 9 * MS, "pattern": "persistent"}))
    assert named.right and named.imbalance == [1, 0] and named.cost_ns == 12 * MS and named.pattern is None
    vm.measure(named, 100 * MS)
    assert named.measured_ns == 10 * MS
    if vm.cores_each("moe"):
        assert abs(named.cost_error - 0.2) < 1e-9
    missed = vm.Run("moe", "router_skew", None, "mid", rank=2, expected=2)
    vm.read_verdict(missed, _summary(tmp_path, [{"finding": "straggler", "ranks": [2], "message": "late"}]))
    assert not missed.right and missed.imbalance is None and missed.cost_ns is None
    assert missed.said[0] == "no expert_imbalance finding (findings: straggler)"
    clean = vm.Run("moe", "clean")
    vm.read_verdict(clean, _summary(tmp_path, [finding]))
    assert not clean.right and clean.said[0].startswith("expert_imbalance finding: ranks [1, 0]")
    score = vm.scores([named, missed, clean])
    assert score["router_skew"] == [1, 2] and score["imbalance_elsewhere"] == [1, 1]
    assert score["recall"] == [0, 0] and score["false_per_clean"] == [0, 1]
    text = vm.report([named, missed, clean])
    assert "the expert_imbalance finding named that rank first in 1/2 (50%)" in text
    assert "| moe | 4 | router_skew | start | 1 | 1/1 (100%) | - | 1 x1; expert_imbalance 1 x1 |" in text
    assert "- moe router_skew mid (None): expected expert_imbalance naming rank 2 first, got no expert_imbalance; " \
           "straggler named none" in text
    assert "- moe clean: expected none, named none; expert_imbalance on ranks [1, 0]" in text
