"""The Diagnosis on real 4-rank MPI demo runs: serialized communication fails the stream
placement check, the comm thread passes it, and an injected straggler is named.

A straggler run of their own, plus the shared overlap and serial runs of conftest. The
stream placement checks do not depend on timing and are always asserted. The straggler
figures do: where other processes kept more than half of the cores busy during the run (they
starve whole ranks for tens of milliseconds, which is a real straggler in the data), those
assertions are skipped, saying so; failures print the per-rank skew rows to show why.
"""

import json

import pytest
from conftest import foreign_cores, machine_clock, run_cli, skip_if_busy

MS = 1_000_000


def read(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def skew_context(summary: dict) -> str:
    steps = summary["skew"].get("steps_summary") or {}
    return f"median step {steps.get('duration_median_ns')} ns; ranks {summary['skew'].get('ranks')}"


def _no_straggler(summary: dict) -> bool:
    return summary["skew"]["straggler"] is None and all(f["finding"] != "straggler" for f in summary["findings"])


@pytest.mark.exclusive  # a second run, below, needs the machine as the first had it
def test_overlap_run_passes_and_names_no_straggler(demo_overlap, tmp_path):
    """A healthy DDP run names no straggler. Its 4 ranks share 2 cores here, so a clean run is now and
    then one rank behind the others in every step, for real (the fault-injection matrix: 2 of 20 clean
    runs of the demo jobs): one such run is not a wrong verdict, two in a row are."""
    summary = read(demo_overlap)
    assert [(c["rank"], c["status"]) for c in summary["checks"]] == [(r, "PASS") for r in range(4)]
    assert summary["skew"]["matched"] == 6 * 4  # 4 allreduces per step, all matched
    assert all(f["finding"] != "serialized_communication" for f in summary["findings"])
    for rank in summary["ranks"]:  # ping-pong offsets, narrowed by collective ends: microseconds
        assert rank["clock_uncertainty_ns"] < 1 * MS, rank
    skip_if_busy(float((demo_overlap / "foreign_cores.txt").read_text()), "straggler timing")
    if _no_straggler(summary):
        return
    before = machine_clock()
    again = run_cli("demo", "--ranks", "4", "--steps", "6", "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-2000:]
    skip_if_busy(foreign_cores(before, machine_clock()), "straggler timing")
    second = read(tmp_path / "again")
    assert _no_straggler(second), f"first run: {skew_context(summary)}; second run: {skew_context(second)}"


@pytest.mark.slow
def test_serial_run_fails_on_every_rank(demo_serial):
    """Serial mode: the allreduce on the compute thread, so nothing overlaps and every rank fails
    the stream placement check."""
    summary, stdout = read(demo_serial), (demo_serial / "stdout.txt").read_text()
    rows = summary["checks"]
    assert [(c["rank"], c["status"]) for c in rows] == [(r, "FAIL") for r in range(4)]
    for row in rows:
        assert row["message"].startswith(f"allreduce runs on the compute thread ({row['comm_lanes'][0]})")
        assert row["shared_lanes"] == row["comm_lanes"] == row["compute_lanes"]
    first = summary["findings"][0]
    assert first["finding"] == "serialized_communication" and first["ranks"] == [0, 1, 2, 3]
    answer = stdout[:stdout.index("Per rank")]  # the answer comes first, above the per-rank tables (issue 40)
    assert "serialized communication on 4/4 ranks" in " ".join(answer.split()) and "FAIL 4" in answer
    for name in ("summary.json", "report.html"):  # says where it wrote, as merge does
        assert f"wrote {demo_serial / name}" in stdout
    for rank in summary["ranks"]:  # the main thread does both: nothing overlaps
        assert rank["overlap_ratio"] < 0.02, rank
    # the finding's durations follow the unit the reader asks for (summary.json keeps the template)
    in_us = run_cli("report", str(demo_serial), "--unit", "us")
    assert in_us.returncode == 0, in_us.stderr
    start = in_us.stdout.index("serialized communication")  # the finding's message, up to its advice, unwrapped
    finding_line = " ".join(in_us.stdout[start:in_us.stdout.index("->", start)].split())
    assert " us " in finding_line and " ms " not in finding_line, finding_line
    assert f"exposed communication {first['figure_ns'] / 1e3:.2f} us" in finding_line  # the worst rank's


@pytest.mark.exclusive
@pytest.mark.slow
def test_straggler_run_names_rank_2(tmp_path):
    before = machine_clock()
    result = run_cli("demo", "--straggler", "2:50", "--steps", "8", "--out", str(tmp_path))
    busy = foreign_cores(before, machine_clock())
    assert result.returncode == 0, result.stderr[-2000:]
    summary = read(tmp_path)
    assert [c["status"] for c in summary["checks"]] == ["PASS"] * 4
    assert "Diagnosis" in result.stdout and "Straggler:" in result.stdout
    skip_if_busy(busy, "straggler timing")
    straggler = summary["skew"]["straggler"]
    assert straggler is not None and straggler["rank"] == 2, skew_context(summary)
    # 50 ms injected; measured 48-54 ms per step in 6 runs on this 2-core machine
    assert 30 * MS <= straggler["waits_caused_ns"] <= 90 * MS, (straggler, skew_context(summary))
    assert straggler["late_steps"] >= 6
    finding = next(f for f in summary["findings"] if f["finding"] == "straggler")
    assert finding["ranks"] == [2] and finding["evidence"]["slow_phase"] == "forward"
    assert "Straggler: rank 2" in result.stdout
    # the critical path runs through the straggler's forward in most steps
    assert "Critical path" in result.stdout
    path = summary["critical_path"]
    on_path = [any(s["rank"] == 2 and s["name"] == "forward" for s in step["segments"]) for step in path["steps"]]
    assert sum(on_path) > len(on_path) / 2, on_path
    assert path["share_by_rank"]["2"] > 0.5, path["share_by_rank"]
