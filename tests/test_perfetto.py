"""Merged Perfetto / Chrome trace: structure (ph/ts/pid/tid, non-negative durations, every rank
and lane, paired flows), exact aligned timestamps, filters, and the CLI on the real demo."""

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from nsys_fixtures import real_export
from test_summaries import CONFIG, gpu_rank, host_rank

from distprof import sources
from distprof.reports import perfetto


def load(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as handle:
        trace = json.load(handle)
    assert trace["displayTimeUnit"] == "ms"
    return trace["traceEvents"]


def check_structure(events: list[dict]) -> None:
    """What every loader needs: fields present, durations >= 0, flows paired start -> end."""
    for event in events:
        assert {"ph", "ts", "pid", "tid"} <= event.keys(), event
        assert event["ph"] in ("M", "X", "i", "s", "f"), event
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0, event
    flows = [e for e in events if e["ph"] in ("s", "f")]
    phases_by_id = {}
    for flow in flows:
        phases_by_id.setdefault(flow["id"], []).append(flow)
    for flow_id, pair in phases_by_id.items():
        assert sorted(f["ph"] for f in pair) == ["f", "s"], flow_id
        begin, end = sorted(pair, key=lambda f: f["ph"], reverse=True)
        assert begin["ts"] <= end["ts"] and end.get("bp") == "e"
        # a launch flow stays in its rank; the critical path's arrows go from rank to rank
        assert begin["pid"] == end["pid"] or begin["cat"] == end["cat"] == "critical_path", pair


def thread_names(events: list[dict]) -> dict[int, set[str]]:
    names: dict[int, set[str]] = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names.setdefault(e["pid"], set()).add(e["args"]["name"])
    return names


def write_synthetic(path: Path, steps=None) -> list[dict]:
    with perfetto.TraceWriter(path, origin_ns=0) as writer:
        writer.add_rank(gpu_rank(), 0, offset_ns=1000, label="gpu", steps=steps)
        writer.add_rank(host_rank(), 1, offset_ns=0, steps=steps)
    return load(path)


def test_synthetic_trace_structure_and_times(tmp_path):
    events = write_synthetic(tmp_path / "t.json.gz")
    check_structure(events)
    assert thread_names(events) == {0: {"thread 1", "thread 2", "cuda:0/stream 7", "cuda:0/stream 15"},
                                    1: {"thread 1", "thread 2"}}
    slices = [e for e in events if e["ph"] == "X"]
    assert Counter(e["pid"] for e in slices) == {0: len(gpu_rank()), 1: len(host_rank())}
    gemm = sorted((e for e in slices if e["name"] == "gemm" and e["pid"] == 0), key=lambda e: e["ts"])[0]
    assert (gemm["ts"], gemm["dur"], gemm["cat"], gemm["cname"]) == (1.015, 0.02, "COMPUTE", "thread_state_running")
    assert gemm["args"] == {"kind": "kernel", "step": 0, "phase": "forward", "correlation_id": 1}
    nccl = next(e for e in slices if e["name"].startswith("nccl"))
    assert (nccl["cat"], nccl["cname"]) == ("COMMUNICATION", perfetto.CNAME["COMMUNICATION"])
    host = next(e for e in slices if e["pid"] == 1 and e["name"] == "forward")
    assert (host["ts"], host["dur"]) == (0.01, 0.03)     # rank 1: offset 0
    # flows: runtime call (host thread track) -> kernel (stream track), one per correlation id
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert len(flows) == 8
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {tracks[(f["pid"], f["tid"])] for f in flows if f["ph"] == "s"} == {"thread 1"}
    assert {tracks[(f["pid"], f["tid"])] for f in flows if f["ph"] == "f"} == {"cuda:0/stream 7"}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "rank 0 (gpu)", 1: "rank 1"}


def test_steps_filter(tmp_path):
    events = write_synthetic(tmp_path / "t.json.gz", steps={1})
    check_structure(events)
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["args"]["step"] for e in slices} == {1}
    assert len([e for e in events if e["ph"] == "s"]) == 2        # corr 3 and 4 only


def test_parse_selection():
    chosen = perfetto.parse_selection("0,2,5-7")
    assert [v for v in range(10) if v in chosen] == [0, 2, 5, 6, 7]
    assert chosen.mask(np.arange(10)).nonzero()[0].tolist() == [0, 2, 5, 6, 7]
    huge = perfetto.parse_selection("0-999999999999")  # ranges, not a trillion-element set
    assert 999999999999 in huge and 10**12 not in huge
    assert perfetto.parse_selection(None) is None
    with pytest.raises(ValueError):
        perfetto.parse_selection("1-x")
    for bad in ("7-3", "-1", "0-" + "9" * 30, ",".join(["1"] * 5000)):
        with pytest.raises(ValueError):
            perfetto.parse_selection(bad)


def test_demo_trace_cli(demo_overlap, tmp_path):
    result = run_cli("trace", str(demo_overlap), "-o", str(tmp_path / "all.json.gz"))
    assert result.returncode == 0, result.stderr
    events = load(tmp_path / "all.json.gz")
    check_structure(events)
    summary = json.loads((demo_overlap / "summary.json").read_text())
    world = summary["world_size"]
    assert {e["pid"] for e in events} == set(range(world))
    # main and comm threads, and the critical path's track where the path visits the rank
    assert all(len(lanes - {"critical path"}) == 2 for lanes in thread_names(events).values())
    path = [e for e in events if e.get("cat") == "critical_path" and e["ph"] == "X"]
    assert len(path) == sum(len(step["segments"]) for step in summary["critical_path"]["steps"])
    steps = [e for e in events if e["name"] == "ProfileStep"]
    assert len(steps) == sum(r["steps"] for r in summary["ranks"])
    assert min(e["ts"] for e in events if e["ph"] == "X") == 0        # origin = earliest aligned event
    comm = [e for e in events if e.get("cat") == "COMMUNICATION"]
    assert comm and all(e["cname"] == perfetto.CNAME["COMMUNICATION"] for e in comm)

    result = run_cli("trace", str(demo_overlap), "-o", str(tmp_path / "some.json.gz"), "--ranks", "0,2",
                     "--steps", "1-2")
    assert result.returncode == 0, result.stderr
    some = load(tmp_path / "some.json.gz")
    check_structure(some)
    assert {e["pid"] for e in some} == {0, 2}
    assert sorted(e["args"]["step"] for e in some if e["name"] == "ProfileStep") == [1, 1, 2, 2]

    files = sorted(str(p) for p in demo_overlap.glob("rank*.sqlite"))
    from_files = run_cli("trace", *files, "-o", str(tmp_path / "files.json.gz"))
    assert from_files.returncode == 0, from_files.stderr
    assert len(load(tmp_path / "files.json.gz")) == len(events)

    bad = run_cli("trace", str(demo_overlap), "--ranks", "x")
    assert bad.returncode == 2 and "--ranks" in bad.stderr


NSYS_TWO_RANKS = real_export("nsysai_h100_2gpu_1s.sqlite")


@pytest.mark.skipif(not NSYS_TWO_RANKS.exists(), reason="real nsys export not present")
def test_real_nsys_flows(tmp_path):
    """A real two-process nsys report: launches joined to their kernels by correlation id."""
    path = tmp_path / "nsys.json.gz"
    with perfetto.TraceWriter(path, origin_ns=None) as writer:
        for rank, trace in enumerate(sources.read(NSYS_TWO_RANKS, CONFIG)):
            writer.add_rank(trace.events, rank, trace.clock_offset_ns)
    events = load(path)
    check_structure(events)
    assert {e["pid"] for e in events} == {0, 1}
    assert any(name.startswith("cuda:") for lanes in thread_names(events).values() for name in lanes)
    assert len([e for e in events if e["ph"] == "s"]) > 1000
