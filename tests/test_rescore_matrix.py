"""benchmarks/rescore_matrix.py as a user runs it: kept runs (real rank files) merged again by two
checkouts and scored; here both are this checkout, so nothing may change and the scores agree."""

import json
import shutil
import subprocess
import sys

from conftest import ROOT

DATA = ROOT / "tests" / "data"


def _kept(tmp_path):
    """A record of two runs kept as verdict_matrix.py keeps them: a demo run (rank*.sqlite) with no
    fault, and a torch run (traces/rank*.pt.trace.json.gz) with rank 1 late by construction."""
    kept = tmp_path / "kept"
    demo = kept / "000_dp_clean"
    demo.mkdir(parents=True)
    for path in (DATA / "demo_ranks").glob("rank*.sqlite"):
        shutil.copy(path, demo / path.name)
    traces = kept / "001_ddp_forward_start" / "traces"
    traces.mkdir(parents=True)
    for rank in (0, 1):
        shutil.copy(DATA / "torch_ddp" / "late" / f"rank{rank}.json.gz", traces / f"rank{rank}.pt.trace.json.gz")
    runs = [{"job": "dp", "kind": "clean", "expected": None, "named": None},
            {"job": "ddp", "kind": "forward", "size": 0.5, "onset": "start", "rank": 1, "spec": "1:20@0:forward",
             "expected": 1, "named": 1}]
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"runs": runs}))
    return record, kept


def test_the_same_checkout_twice_changes_no_verdict(tmp_path):
    record, kept = _kept(tmp_path)
    baseline = tmp_path / "baseline"
    shutil.copytree(ROOT / "distprof", baseline / "distprof", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rescore_matrix.py"), str(record), str(kept),
                           "--baseline", str(baseline)], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "2 kept runs, merged again by 2 version(s)"
    baseline_line, ours = lines[1], lines[2]
    assert baseline_line.removeprefix("baseline: ") == ours.removeprefix("this checkout: ")
    assert "recall 1/1" in ours and "clean runs naming a rank 0/1" in ours and "failed 0" in ours
    assert not [line for line in lines if "changed:" in line]


def test_a_rescored_verdict_is_measured_again(tmp_path):
    """The cost of the verdict merged again is set against the effect recorded with the run (its
    step times less its paired clean step), as the matrix measured it when it ran."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from rescore_matrix import kept_runs, verdict
    record, kept = _kept(tmp_path)
    raw = json.loads(record.read_text())
    raw["runs"][1] |= {"step_times_ns": [100_000_000] * 4, "step_ns": 100_000_000, "clean_step_ns": 80_000_000}
    record.write_text(json.dumps(raw))
    (run, files), = [(r, f) for r, f in kept_runs(record, kept, None) if r.job == "ddp"]
    again = verdict(run, files, ROOT, None, tmp_path / "out")
    assert again.named == 1 and again.measured_ns == 20_000_000
    if again.cost_error is not None:  # only where the 2 ranks had a core each
        assert again.cost_error == abs(again.cost_ns - 20_000_000) / 20_000_000
