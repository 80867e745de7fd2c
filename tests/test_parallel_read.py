"""Rank files read in forked processes give the same summary as one after the other (the
results are put back in input order), and the number of processes follows the free cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distprof import config as config_mod
from distprof import pipeline, transport

KINETO = Path(__file__).resolve().parent / "data" / "kineto"


@pytest.mark.slow
def test_parallel_read_equals_serial(monkeypatch, tmp_path):
    paths = sorted(KINETO.glob("*/*.json.gz")) + [tmp_path / "missing.json.gz"]  # a bad file among them
    config = config_mod.load(None)
    merged = {}
    for workers in ("1", "3"):
        monkeypatch.setenv("DISTPROF_READ_WORKERS", workers)
        # four unrelated HTA jobs, each claiming rank 0: renumbered on purpose
        summary = pipeline.merge_files(paths, config, allow_duplicate_ranks=True)
        merged[workers] = json.dumps(summary.to_json(), sort_keys=True)
    assert merged["1"] == merged["3"]
    assert "missing.json.gz" in merged["3"]  # the skipped file is still reported


def test_local_workers(monkeypatch):
    assert transport.local_workers(1, {"DISTPROF_READ_WORKERS": "4"}) == 1
    assert transport.local_workers(8, {"DISTPROF_READ_WORKERS": "4"}) == 4
    assert transport.local_workers(3, {"DISTPROF_READ_WORKERS": "16"}) == 3
    monkeypatch.setattr(transport, "busy_elsewhere", lambda: 64)
    assert transport.local_workers(8, {}) == 1  # a busy machine: one after the other
    monkeypatch.setattr(transport, "busy_elsewhere", lambda: 0)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1}, raising=False)
    assert transport.local_workers(8, {}) == 2  # nothing else runs: both cores
    assert transport.busy_elsewhere() >= 0
