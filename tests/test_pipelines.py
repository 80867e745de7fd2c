"""Send/recv pipelines (issue 36, point 5): recognised from the matched pairs, each stage's bubble
per step, and a recv waiting for its input is a dependency, not serialized communication. Jobs
whose timing is fixed by construction (test_blame's pipeline)."""

import numpy as np
import pytest
from test_blame import MS, pipeline_job

from distprof.analyses.pipelines import chains


def _pairs(*edges):
    return np.array([a for a, _ in edges]), np.array([b for _, b in edges])


@pytest.mark.parametrize(("edges", "expected"), [
    ([(0, 1), (1, 2), (2, 3), (3, 2), (2, 1), (1, 0)], [[0, 1, 2, 3]]),  # forward and backward hand-overs
    ([(4, 5), (5, 6), (0, 1)], [[0, 1], [4, 5, 6]]),                      # two pipelines (two DP replicas)
    ([(0, 1), (1, 2), (2, 3), (3, 0)], []),                               # a ring: sequence parallelism
    ([(0, 1), (0, 2), (0, 3)], []),                                       # a star: one rank feeds three
    ([(2, 2), (-1, 3)], []),                                              # no pair of two known ranks
])
def test_chains_are_simple_paths_only(edges, expected):
    assert sorted(chains(*_pairs(*edges))) == expected


def test_bubble_per_stage_by_construction():
    """Stage r posts its recv at 5 ms; its input comes when stage r-1 sends, after r-1's 20 ms of
    compute and the 0.1 ms sends before it: it waits 20 ms x r + 0.1 ms x (r-1), +15 ms for every
    stage after the late stage 1. Eager sends wait for nobody."""
    summary = pipeline_job(15 * MS, late_stage=1)
    (pipeline,) = summary["skew"]["pipelines"]
    assert pipeline["ranks"] == [0, 1, 2, 3] and pipeline["steps"] == 6
    upstream = [s["upstream_ns"] for s in pipeline["stages"]]
    assert upstream == [0, 20 * MS, 40 * MS + MS // 10 + 15 * MS, 60 * MS + 2 * MS // 10 + 15 * MS]
    assert [s["downstream_ns"] for s in pipeline["stages"]] == [0, 0, 0, 0]
    assert [s["bubble_ns"] for s in pipeline["stages"]] == upstream
    step_ns = summary["skew"]["steps_summary"]["duration_median_ns"]
    assert pipeline["stages"][3]["share"] == pytest.approx(upstream[3] / step_ns)


def test_pipeline_recv_on_the_compute_thread_is_a_dependency_not_serialization():
    summary = pipeline_job(0, late_stage=-1)
    checks = summary["checks"]
    # every stage computes and sends/receives on one thread: a FAIL without the pipeline rule
    assert all(c["shared_lanes"] for c in checks if c["rank"])
    assert {c["status"] for c in checks} == {"PASS"}
    assert all(c["pipeline_ranks"] == [0, 1, 2, 3] for c in checks if c["rank"])
    assert "not serialized communication" in checks[1]["message"]
    assert not [f for f in summary["findings"] if f["finding"] == "serialized_communication"]
