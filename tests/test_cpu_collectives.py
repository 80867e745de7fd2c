"""Real 4-rank torchrun gloo CPU traces (tests/data/torch_cpu): one collective is one marker (the
``gloo:*`` exchange, not also its ``c10d::*`` operator), and the one host's clock is shared."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from result_views import summary_json

from distprof import config as config_mod
from distprof import pipeline

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def cpu_summary() -> dict:
    return summary_json(pipeline.merge_files(sorted((DATA / "torch_cpu").glob("rank*.json.gz")), config_mod.load()))


def _gloo_ranges(path: Path) -> dict[str, int]:
    """Independent count: the trace's gloo:* ranges (the exchanges themselves) by name."""
    with gzip.open(path) as handle:
        events = json.load(handle)["traceEvents"]
    names = [str(e.get("name", "")) for e in events if e.get("ph") == "X"]
    return {name: names.count(name) for name in set(names) if name.startswith("gloo:")}


def test_each_collective_counted_once_in_its_group(cpu_summary):
    """Once (the gloo:* exchange, not also its c10d:: op), and within its process group: the
    allreduces of pair {0,1} ('1') and pair {2,3} ('2') are matched apart, the rest on the world."""
    kinds = {(k["name"], k["group"]): k["matched"] for k in cpu_summary["skew"]["kinds"]}
    rank0, rank2 = (_gloo_ranges(DATA / "torch_cpu" / f"rank{r}.json.gz") for r in (0, 2))
    assert kinds == {("allreduce", "1"): rank0["gloo:all_reduce"], ("allreduce", "2"): rank2["gloo:all_reduce"],
                     ("allgather", "0"): rank0["gloo:all_gather"], ("alltoall", "0"): rank0["gloo:all_to_all"],
                     ("broadcast", "0"): rank0["gloo:broadcast"]}


def test_one_host_one_clock(cpu_summary):
    with gzip.open(DATA / "torch_cpu" / "rank0.json.gz") as handle:
        host = json.load(handle)["host_name"]
    assert host
    alignment = cpu_summary["skew"]["alignment"]
    assert [(a["method"], a["uncertainty_ns"]) for a in alignment] == [("reference", 0)] + [("same host", 0)] * 3
    assert all(a["offset_ns"] == a["source_offset_ns"] for a in alignment)  # base times, not end corrections


def test_late_rank_not_misnamed(cpu_summary):
    """Rank 2 sleeps 30 ms before the allreduce each step; no other rank may be named."""
    straggler = cpu_summary["skew"]["straggler"]
    assert straggler is None or straggler["rank"] == 2
    lateness = {r["rank"]: r["total_lateness_ns"] for r in cpu_summary["skew"]["ranks"]}
    assert max(lateness, key=lateness.get) == 2
