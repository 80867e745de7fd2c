"""Rank files read in forked processes give the same summary as one after the other (the
results are put back in input order), and the number of processes follows the free cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distprof import config as config_mod
from distprof import pipeline, transport

KINETO = Path(__file__).resolve().parent / "data" / "kineto"


MERGE = """
import json, sys
from pathlib import Path
from distprof import config, pipeline
from distprof.reports import findings
paths = [Path(p) for p in sys.argv[1:]]
summary = findings.worded(pipeline.merge_files(paths, config.load(None), allow_duplicate_ranks=True))
print(json.dumps(summary.to_json(), sort_keys=True))
"""


@pytest.mark.slow
def test_parallel_read_equals_serial(tmp_path):
    """In a process of one thread (a merge's own, not this test runner's), so that it forks."""
    # the smaller real ranks (the two of 100k+ events add nothing here but seconds), a bad file among them
    paths = sorted(KINETO.glob("hta_trace_filter_2rank/*.json.gz")) + [
        KINETO / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz", tmp_path / "missing.json.gz"]
    merged = {}
    for workers in ("1", "3"):  # two unrelated HTA jobs, ranks claimed twice: renumbered on purpose
        done = subprocess.run([sys.executable, "-c", MERGE, *map(str, paths)], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, DISTPROF_READ_WORKERS=workers))
        assert done.returncode == 0, done.stderr[-2000:]
        merged[workers] = done.stdout
    assert merged["1"] == merged["3"]
    assert "missing.json.gz" in merged["3"]  # the skipped file is still reported


def test_no_fork_while_other_threads_run(monkeypatch):
    """A thread alive besides this one (a live job's, a test runner's): the files are read one after
    the other, never in forked children that could inherit a held lock."""
    import concurrent.futures
    import threading

    def refuse(*args, **kwargs):
        raise AssertionError("forked a reader while another thread runs")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    monkeypatch.setenv("DISTPROF_READ_WORKERS", "3")
    paths = sorted(KINETO.glob("hta_trace_filter_2rank/*.json.gz"))
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        reduced, warnings = pipeline._reduce_here(paths, [0, 1], config_mod.load(None))
    finally:
        release.set()
        other.join()
    assert [index for index, _, _ in reduced] == [0, 1] and warnings == []


def test_local_workers(monkeypatch):
    assert transport.local_workers(1, {"DISTPROF_READ_WORKERS": "4"}) == 1
    assert transport.local_workers(8, {"DISTPROF_READ_WORKERS": "4"}) == 4
    assert transport.local_workers(3, {"DISTPROF_READ_WORKERS": "16"}) == 3
    monkeypatch.setattr(transport, "busy_elsewhere", lambda: 64)
    assert transport.local_workers(8, {}) == 1  # a busy machine: one after the other
    monkeypatch.setattr(transport, "busy_elsewhere", lambda: 0)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1}, raising=False)
    assert transport.local_workers(8, {}) == 2  # nothing else runs: both cores
