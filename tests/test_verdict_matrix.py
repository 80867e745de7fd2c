"""benchmarks/verdict_matrix.py's measured effect, by construction: a mid-run fault is compared with
the cost on the same footing (per step since the onset when the verdict says "since step")."""

import importlib.util
import sys

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
