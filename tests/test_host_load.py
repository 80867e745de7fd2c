"""The host's own part (issue 59, item 3): what the OS already counts about a rank's process and its host,
recorded by the collector at every step's hand-over (collector.host_sample, on the writer thread) and read
back per step by the native reader. Real collector files throughout."""

from __future__ import annotations

import sqlite3

from test_bad_input_sources import native_file

from distprof import sources


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
