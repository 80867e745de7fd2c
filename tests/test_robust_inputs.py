"""Bad inputs give one line naming the file and the problem (rc 2), never a traceback; a bad
file beside a good one is skipped with a warning and the good one still merges (issue 14)."""

import gzip
import json
import os
import shutil
import sqlite3
import sys

import pytest
from conftest import run_cli
from kineto_fixtures import overlap_trace

from distprof import sources
from distprof.events import SourceError


def one_line_error(result, *needles):
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("distprof: warning:")]
    assert len(lines) == 1 and lines[0].startswith("distprof: error:"), result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def merges_beside_good(tmp_path, bad, *needles):
    """The good rank merges; the summary warns about the bad file."""
    good = overlap_trace(rank=0).write(tmp_path / "good_rank0.json")
    out = tmp_path / "out"
    result = run_cli("merge", str(good), str(bad), "-o", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0]
    warning = next(w for w in summary["warnings"] if str(bad) in w)
    for needle in needles:
        assert needle in warning, warning
    return summary


def low_limits(tmp_path, text):
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- input files

def test_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "rank1.json"
    os.mkfifo(fifo)
    one_line_error(run_cli("merge", str(fifo), "-o", str(tmp_path / "o"), timeout=60), str(fifo), "not a regular file")
    merges_beside_good(tmp_path, fifo, "not a regular file")


def test_file_above_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "rank1.json"
    with open(big, "wb") as handle:
        handle.truncate(3 << 20)  # sparse: 3 MB on paper, nothing on disk
    config = low_limits(tmp_path, "input:\n  max_file_mb: 2\n")
    result = run_cli("merge", str(big), "--config", str(config), "-o", str(tmp_path / "o"))
    one_line_error(result, str(big), "above input.max_file_mb = 2")


def test_gzip_bomb_is_refused_while_streaming(tmp_path):
    bomb = tmp_path / "rank1.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (5 << 20), compresslevel=9))
    limits = {"input": {"max_uncompressed_mb": 2}}
    with pytest.raises(SourceError, match="expands beyond input.max_uncompressed_mb = 2"):
        sources.read_bytes(bomb, limits)
    config = low_limits(tmp_path, "input:\n  max_uncompressed_mb: 2\n")
    one_line_error(run_cli("merge", str(bomb), "--config", str(config), "-o", str(tmp_path / "o")),
                   str(bomb), "gzip expands beyond")


def test_streaming_gunzip_reads_concatenated_members_and_refuses_truncation(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"a": ') + gzip.compress(b"1}"))
    assert bytes(sources.read_bytes(path, {})) == b'{"a": 1}'
    path.write_bytes(gzip.compress(b"x" * 100_000)[:-100])
    with pytest.raises(SourceError, match="truncated gzip"):
        sources.read_bytes(path, {})


def test_merge_outdir_skips_own_outputs(tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    overlap_trace(rank=0).write(out / "rank0.json")
    first = run_cli("merge", str(out), "-o", str(out))
    assert first.returncode == 0, first.stderr
    (out / "diff.json").write_text("{}")
    again = run_cli("merge", str(out), "-o", str(out))
    assert again.returncode == 0 and "skipped" not in again.stderr, again.stderr
    assert [p.name for p in sources.expand([str(out)])] == ["rank0.json"]


def test_nothing_found_says_what_was_searched(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    one_line_error(run_cli("merge", str(tmp_path)), "no input files found", "*.sqlite", "*.json.gz", "*.nsys-rep")


def test_nsys_report_says_how_to_export(tmp_path, monkeypatch):
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"\x00" * 64)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no nsys there
    one_line_error(run_cli("merge", str(tmp_path), "-o", str(tmp_path / "o")),
                   str(report), "run `nsys export --type sqlite")


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_nsys_report_is_exported_when_nsys_is_on_path(tmp_path, monkeypatch):
    from nsys_fixtures import real_export
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"\x00" * 64)
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"  # `nsys export --type sqlite --output OUT FILE`: copies a real export
    fake.write_text(f'#!/bin/sh\ncp "{real_export("flameox_nsight-2025.5.2.sqlite")}" "$5"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    traces = sources.read(report, {})
    assert traces and (tmp_path / "rank0.sqlite").exists()


def test_mixing_nsys_and_kineto_warns(tmp_path, capsys):
    from nsys_fixtures import real_export
    shutil.copy(real_export("flameox_nsight-2025.5.2.sqlite"), tmp_path / "a.sqlite")
    overlap_trace(rank=0).write(tmp_path / "b.json")
    told = []
    assert len(sources.expand([str(tmp_path)], warn=told.append)) == 2
    assert told and "rank numbers come from different sources" in told[0]


# ---------------------------------------------------------------- native rank files

def native_file(path, rank=1, world_size=2):
    """A real collector file: two steps with a compute range each, complete."""
    from distprof.collector import Collector
    collector = Collector(path, rank=rank, world_size=world_size)
    for step in range(2):
        base = 1_000_000 * (step + 1)
        collector.record("ProfileStep", "PHASE", "range", base, base + 900_000)
        collector.record("Forward", "PHASE", "range", base + 10_000, base + 500_000)
        collector.flush()
    collector.set_meta(complete=1)
    collector.close()
    return path


def test_native_range_with_missing_name_is_kept_with_placeholder(tmp_path):
    path = native_file(tmp_path / "rank1.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM distprof_names WHERE name = 'Forward'")
    trace = sources.read(path, {})[0]
    names = set(trace.events["name"].astype(str))
    assert any(name.startswith("<unknown name ") for name in names)
    assert len(trace.events) == 4
    assert any("missing from distprof_names" in w for w in trace.warnings)


@pytest.mark.parametrize("change, needle", [
    ("UPDATE distprof_ranges SET start_ns = 'soon' WHERE rowid = 1", "non-integer time"),
    ("UPDATE distprof_meta SET value = 'two' WHERE key = 'world_size'", "world_size 'two'"),
    ("UPDATE distprof_meta SET value = '2000000000' WHERE key = 'world_size'", "world_size 2000000000"),
    ("UPDATE distprof_meta SET value = '1000000000000000' WHERE key = 'rank'", "rank 1000000000000000"),
])
def test_native_bad_values_warn_and_keep_the_rest(tmp_path, change, needle):
    path = native_file(tmp_path / "rank1.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(change)
    trace = sources.read(path, {})[0]
    assert len(trace.events) >= 3
    assert any(needle in w and str(path) in w for w in trace.warnings), trace.warnings
    assert trace.rank in (1, None)


def test_native_null_start_in_lax_schema_is_skipped(tmp_path):
    path = native_file(tmp_path / "rank1.sqlite")
    with sqlite3.connect(path) as db:  # a schema without NOT NULL, as another writer could make it
        db.executescript("ALTER TABLE distprof_ranges RENAME TO old;"
                         "CREATE TABLE distprof_ranges(start_ns, end_ns, tid, name_id, step);"
                         "INSERT INTO distprof_ranges SELECT * FROM old; DROP TABLE old;"
                         "UPDATE distprof_ranges SET start_ns = NULL WHERE rowid = 2;")
    trace = sources.read(path, {})[0]
    assert len(trace.events) == 3 and any("1 range row(s)" in w for w in trace.warnings)


def test_truncated_native_file_is_skipped_beside_good(tmp_path):
    path = native_file(tmp_path / "rank1.sqlite")
    with sqlite3.connect(path) as db:  # enough pages that a cut loses table content
        db.executescript("PRAGMA journal_mode=DELETE; CREATE TABLE pad(x); "
                         "INSERT INTO pad SELECT randomblob(900) FROM (WITH RECURSIVE c(i) AS "
                         "(SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 400) SELECT i FROM c);")
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.95)])
    result = run_cli("merge", str(path), "-o", str(tmp_path / "o"))
    one_line_error(result, str(path))
    merges_beside_good(tmp_path, path)


# ---------------------------------------------------------------- Kineto traces

def cpu_event(ts, dur=10, **more):
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": dur, **more}


def kineto_bytes(events, info=None):
    document = {"traceEvents": events}
    if info:
        document["distributedInfo"] = info
    return json.dumps(document).encode()


DEEP = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "args": ' + b'{"a": ' * 100_000 + b"1" \
    + b"}" * 100_000 + b"}]}"


@pytest.mark.parametrize("data, needle", [
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "\xff\xfe", "ts": 1, "dur": 1}]}', "not valid UTF-8"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 100000000000000000000000000000, "dur": 1}]}',
     "timestamp out of range"),
    (DEEP, "nested too deep"),
    (kineto_bytes([{"ph": "X", "cat": "cpu_op", "name": "a", "dur": 1}]), "no event with a timestamp"),
    (kineto_bytes([cpu_event(9_223_372_036_854_775), cpu_event(1, 5)]), "does not fit int64"),
    (kineto_bytes([cpu_event(-5_000_000_000_000), cpu_event(1000)]), "corrupt timestamps"),
])
def test_bad_kineto_is_one_line_and_skipped_beside_good(tmp_path, data, needle):
    bad = tmp_path / "rank1.json"
    bad.write_bytes(data)
    one_line_error(run_cli("merge", str(bad), "-o", str(tmp_path / "o")), str(bad), needle)
    merges_beside_good(tmp_path, bad, needle)


@pytest.mark.parametrize("info, needle, rank", [
    ({"rank": 1, "world_size": 2_000_000_000}, "world_size 2000000000", 1),
    ({"rank": 10 ** 15, "world_size": 2}, "rank 1000000000000000 is outside a world of 2", None),
])
def test_kineto_world_and_rank_are_sanity_checked(tmp_path, info, needle, rank):
    path = tmp_path / "t.json"
    path.write_bytes(kineto_bytes([cpu_event(1000)], info))
    trace = sources.read(path, {})[0]
    assert trace.rank == rank and (trace.meta["world_size"] or 0) <= sources.MAX_WORLD_SIZE
    assert any(needle in w and str(path) in w for w in trace.warnings), trace.warnings


def test_kineto_huge_world_does_not_size_the_merge(tmp_path):
    good = overlap_trace(rank=0).write(tmp_path / "good_rank0.json")
    path = tmp_path / "rank1.json"
    path.write_bytes(kineto_bytes([cpu_event(1000)], {"rank": 1, "world_size": 2_000_000_000}))
    result = run_cli("merge", str(good), str(path), "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["world_size"] == 2 and any("world_size 2000000000" in w for w in summary["warnings"])


# ---------------------------------------------------------------- nsys exports

@pytest.mark.parametrize("change, needle", [
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5", "non-integer or NULL values in t.start"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' || start", "non-integer or NULL values in t.start"),
    ("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'yesterday'", "utcEpochNs 'yesterday'"),
    ("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 9223372036854775807", "is not a UTC time"),
])
def test_bad_nsys_is_one_line_and_skipped_beside_good(tmp_path, change, needle):
    import nsys_fixtures as fx
    bad = fx.one_step_rank(fx.NsysExport()).write(tmp_path / "rank1.sqlite")
    with sqlite3.connect(bad) as db:
        db.execute(change)
    one_line_error(run_cli("merge", str(bad), "-o", str(tmp_path / "o")), str(bad), needle)
    merges_beside_good(tmp_path, bad, needle)


def test_nsys_missing_strings_keep_events_with_placeholder(tmp_path):
    import nsys_fixtures as fx
    path = fx.one_step_rank(fx.NsysExport()).write(tmp_path / "rank0.sqlite")
    before = len(sources.read(path, {})[0].events)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM StringIds")
    trace = sources.read(path, {})[0]
    assert len(trace.events) == before
    assert any(name.startswith("<unknown string ") for name in trace.events["name"].astype(str))
    told = [w for w in trace.warnings if "missing from StringIds" in w]
    assert len(told) == 1 and str(path) in told[0]


def test_two_runs_in_one_folder_are_an_error_naming_the_files(tmp_path):
    """Two runs' Kineto files (the same ranks twice): one line naming the clashing files; renumbered on
    purpose with --allow-duplicate-ranks (issue 29)."""
    from pathlib import Path
    data = Path(__file__).parent / "data" / "torch_ddp"
    for run_name, prefix in (("healthy", "a"), ("late", "b")):
        for rank in (0, 1):
            shutil.copy(data / run_name / f"rank{rank}.json.gz", tmp_path / f"{prefix}_rank{rank}.json.gz")
    result = run_cli("merge", str(tmp_path), "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "rank 0 is claimed by two inputs" in result.stderr and "a_rank0.json.gz" in result.stderr
    assert "b_rank0.json.gz" in result.stderr and "--allow-duplicate-ranks" in result.stderr
    forced = run_cli("merge", str(tmp_path), "-o", str(tmp_path / "out"), "--no-html", "--allow-duplicate-ranks")
    assert forced.returncode == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sorted(r["rank"] for r in summary["ranks"]) == [0, 1, 2, 3]
    assert sum("appears twice; renumbered" in w for w in summary["warnings"]) == 2
