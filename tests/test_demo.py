"""The embedded default job: a real 4-rank MPI run through `distprof demo` (serial mode and a
straggler: test_demo_diagnosis)."""

import json


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
