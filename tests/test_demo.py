"""The embedded default job: a real 4-rank MPI run through `distprof demo`."""

import json

from conftest import run_cli


def test_overlap_mode_hides_communication(demo_overlap):
    summary = json.loads((demo_overlap / "summary.json").read_text())
    assert summary["source"] == "distprof (live)"
    for rank in summary["ranks"]:
        assert rank["steps"] == 6
        assert rank["communication_ns"] > 0 and rank["computation_ns"] > 0
        assert rank["overlap_ratio"] > 0.3, rank
        assert len(rank["comm_lanes"]) == 1 and rank["comm_lanes"] != rank["compute_lanes"]
        total = rank["computation_ns"] + rank["exposed_communication_ns"] + rank["idle_ns"]
        assert total == rank["window_ns"]  # the figures partition the window
    assert (demo_overlap / "rank3.sqlite").exists() and (demo_overlap / "ranks.csv").exists()
    tables = summary["tables"]["merged"]
    assert [row["name"] for row in tables["user"]["rows"]] == ["loss"]  # distprof.range in the demo
    assert tables["overview"] and tables["model"]


def test_serial_mode_overlaps_nothing(tmp_path):
    result = run_cli("demo", "--comm", "serial", "--steps", "4", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Distributed Summary" in result.stdout
    for name in ("summary.json", "report.html"):  # says where it wrote, as merge does
        assert f"wrote {tmp_path / name}" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    for rank in summary["ranks"]:
        assert rank["overlap_ratio"] < 0.02, rank
        assert rank["comm_lanes"] == rank["compute_lanes"]  # the main thread does both
