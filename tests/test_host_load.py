"""The host's own part (issue 59, item 3): what the OS already counts about a rank's process and its host,
recorded by the collector at every step's hand-over (collector.host_sample, on the writer thread) and read
back per step by the native reader. Real collector files throughout."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from conftest import foreign_cores, machine_clock, skip_if_busy
from msgspec.structs import replace
from result_views import straggler_of
from test_bad_input_sources import native_file

from distprof import sources
from distprof.analyses import hostload, machine


def test_the_collector_records_a_host_sample_per_step(tmp_path):
    path = native_file(tmp_path / "rank0.sqlite")
    samples = sources.read(path, {})[0].meta["host_samples"]
    assert samples["step"] == [0, 1]  # the last sample of each step the collector wrote
    assert all(b >= a for a, b in zip(samples["cpu_ns"], samples["cpu_ns"][1:]))  # cumulative counters
    assert all(b >= a for a, b in zip(samples["involuntary"], samples["involuntary"][1:]))
    assert all(isinstance(v, int) and v >= 0 for v in samples["involuntary"] + samples["voluntary"])
    assert all(b > a for a, b in zip(samples["clock_ns"], samples["clock_ns"][1:]))
    loads = [v for v in samples["load_1m"] if v is not None]
    assert all(v >= 0 for v in loads)


def test_older_files_and_damaged_samples_read_as_none(tmp_path):
    """A file written before the samples (no distprof_host table) has none; a row whose counters are not
    integers is left out, the file still read."""
    path = native_file(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_host SET involuntary = 'x' WHERE step = 0")
    assert sources.read(path, {})[0].meta["host_samples"]["step"] == [1]
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE distprof_host")
    assert sources.read(path, {})[0].meta["host_samples"] == {}


def _rank(rank: int, runqueue_ms_per_step: list[float], cpus: int = 2):
    """A rank's result with host samples by construction: steps of 100 ms, its training thread waiting
    the given ms per step for a core (the first sample is the start of step 0)."""
    from types import SimpleNamespace
    steps = len(runqueue_ms_per_step)
    queue = [0, *np.cumsum([int(v * 1e6) for v in runqueue_ms_per_step]).tolist()]
    samples = {"step": [-1, *range(steps)], "clock_ns": [i * 100_000_000 for i in range(steps + 1)],
               "cpu_ns": [0] * (steps + 1), "involuntary": [3 * i for i in range(steps + 1)],
               "voluntary": [0] * (steps + 1), "load_1m": [2.5] * (steps + 1), "steal_ticks": [0] * (steps + 1),
               "total_ticks": [0] * (steps + 1), "runqueue_ns": queue}
    return SimpleNamespace(rank=rank, host="node0", meta={"host_samples": samples, "cpus": cpus})


def test_a_straggler_whose_thread_waited_for_a_core_is_named_with_its_host():
    """Rank 1's training thread waits 40 ms a step for a core in its late steps 2-5, rank 0's 5 ms: its
    host was busy, and that is the cause the straggler's line gives (the waits it causes: 30 ms)."""
    results = [_rank(0, [5] * 6), _rank(1, [5, 5, 40, 40, 40, 40])]
    straggler = straggler_of(1, late_step_ids=[2, 3, 4, 5], waits_caused_ns=30_000_000)
    host = hostload.straggler_host(results, straggler)
    assert (host.steps, host.runqueue_ns, host.others_runqueue_ns, host.involuntary) == (4, 40_000_000, 5_000_000, 12)
    assert host.busy and host.load_1m == 2.5 and host.cpus == 2
    calm = hostload.straggler_host([_rank(0, [5] * 6), _rank(1, [8] * 6)], replace(straggler, late_step_ids=[]))
    assert not calm.busy and calm.steps == 6  # 8 ms against 5: not the cause of 30 ms of waits


def test_a_host_whose_ranks_waited_for_cores_is_busy():
    quiet = machine.facts([_rank(0, [5] * 4), _rank(1, [6] * 4)])
    assert quiet[0].runqueue_share == pytest.approx(0.055) and machine.busy_hosts(quiet) == []
    crowded = machine.facts([_rank(0, [30] * 4), _rank(1, [25] * 4)])
    assert machine.busy_hosts(crowded) == crowded and crowded[0].load_1m == 2.5
    assert hostload.straggler_host([_rank(0, [5] * 4)], None) is None


@pytest.mark.exclusive  # the job's timings are what is asserted: the machine to itself
def test_a_noisy_neighbour_is_named_as_the_cause(tmp_path):
    """`distprof demo --neighbour 1`: a CPU-bound process pinned to rank 1's core (each rank on a core of
    its own): rank 1 is the straggler, and its line says its host was busy and why."""
    start = machine_clock()
    done = subprocess.run([sys.executable, "-m", "distprof", "demo", "--ranks", "2", "--steps", "10", "--neighbour",
                           "1", "--out", str(tmp_path / "d")], capture_output=True, text=True, timeout=300)
    skip_if_busy(foreign_cores(start, machine_clock()), "the neighbour's effect")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 1 and straggler["host"]["busy"], straggler
    assert straggler["host"]["runqueue_ns"] > 3 * straggler["host"]["others_runqueue_ns"]
    words = " ".join(done.stdout.split())
    assert "rank 1's host was busy: its training thread waited" in words and "other processes took its cores" in words
