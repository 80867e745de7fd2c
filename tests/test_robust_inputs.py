"""Bad inputs give one line naming the file and the problem (rc 2), never a traceback; a bad
file beside a good one is skipped with a warning and the good one still merges (issue 14)."""

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import run_cli
from kineto_fixtures import overlap_trace
from result_views import summary_json

from distprof import sources
from distprof.events import SourceError
from distprof.reports.findings import text as words  # a reason code in words, as reports give it


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


def test_a_trace_named_like_distprofs_own_output_is_named_when_nothing_else_is_found(tmp_path):
    # a rank's Kineto trace saved as trace.json.gz (the name of distprof's own Perfetto output, which
    # a folder's listing skips) used to end in a bare "no input files found"
    (tmp_path / "trace.json.gz").write_bytes(b"\x1f\x8b")
    one_line_error(run_cli("merge", str(tmp_path)), "no input files found",
                   f"skipped {tmp_path / 'trace.json.gz'}: named as a file distprof writes", "give its path")


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
    from test_bad_input_sources import native_file as made
    return made(path, rank=rank, world_size=world_size)


def test_native_range_with_missing_name_is_kept_with_placeholder(tmp_path):
    path = native_file(tmp_path / "rank1.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM distprof_names WHERE name = 'Forward'")
    trace = sources.read(path, {})[0]
    names = set(trace.events.to_frame()["name"].astype(str))
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
    (kineto_bytes([cpu_event(9_223_372_036_854_775, 10_000)]), "overflows int64"),
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
    assert any(name.startswith("<unknown string ") for name in trace.events.to_frame()["name"].astype(str))
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


# ---------------------------------------------------------------- memory (issue 23)

def peak_rss_of_cli(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """(result, peak RSS in bytes) of `distprof ...` run in a child of a fresh Python: the
    grandchild's getrusage(RUSAGE_CHILDREN) counts that run alone."""
    probe = ("import resource, subprocess, sys; "
             "r = subprocess.run([sys.executable, '-m', 'distprof', *sys.argv[1:]], capture_output=True, text=True); "
             "sys.stderr.write(r.stderr); sys.stdout.write(r.stdout); "
             "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300)
    peak_kb = int(result.stdout.rsplit("PEAK_KB", 1)[1].split()[0])
    return result, peak_kb * 1024


def test_one_200k_character_name_merges_under_1_gb(tmp_path):
    """Name categories are tested per distinct name: a per-row fixed-width copy of 2,000 names
    with one of 200,000 characters asked for 1.6 GB (measured before the fix)."""
    trace = overlap_trace(rank=0)
    for i in range(2000):
        trace.cpu_op(f"aten::add_{i % 7}", 1000 + i, 1001 + i)
    trace.cpu_op("user::" + "x" * 200_000, 11_000, 12_000, cat="user_annotation")
    path = trace.write(tmp_path / "rank0.json")
    result, peak = peak_rss_of_cli("merge", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert peak < 1 << 30, peak


def test_default_input_limits_come_from_the_machines_memory(tmp_path, monkeypatch):
    """No limit in the config: one eighth of the machine's memory, named in the one-line refusal
    (the fixed 20 GiB default was above the RAM of the machine it ran on)."""
    from distprof import config as config_mod
    physical_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    defaults = config_mod.load()
    assert sources.input_limit_mb(defaults, "max_file_mb")[0] <= physical_mb // 8
    assert sources.input_limit_mb(defaults, "max_uncompressed_mb")[0] <= physical_mb // 8
    monkeypatch.setattr(sources, "machine_memory_mb", lambda: 16)  # a 16 MB machine: 2 MB limits
    big = tmp_path / "rank1.json"
    big.write_bytes(b" " * (3 << 20))
    with pytest.raises(SourceError) as refused:
        sources.check_file(big, defaults)
    message = str(refused.value)
    assert "\n" not in message and str(big) in message and "refused unread: 3 MB" in message
    assert "input.max_file_mb = 2 (default: 1/8 of this machine's 16 MB of memory)" in message
    packed = tmp_path / "rank1.json.gz"
    packed.write_bytes(gzip.compress(b" " * (3 << 20)))
    with pytest.raises(SourceError, match="gzip expands beyond input.max_uncompressed_mb = 2 .default"):
        sources.read_bytes(packed, defaults)


# ---------------------------------------------------------------- what inputs claim (issue 23)

DAY_NS = 86_400 * 10 ** 9


def same_host_ranks(tmp_path, second_start_shift_ns, steps=4, until_ns=0):
    """Two nsys exports naming host node0, each step one compute kernel and one allreduce at the same
    times on each rank's own clock; rank 1's session starts ``second_start_shift_ns`` later; rank 0
    records until ``until_ns`` after its start (a range), so that the two recordings overlap."""
    import nsys_fixtures as fx
    paths = []
    for rank in (0, 1):
        export = fx.NsysExport(env={"RANK": str(rank), "HOSTNAME": "node0"},
                               session_start_utc_ns=1_700_000_000_000_000_000 + rank * second_start_shift_ns)
        if rank == 0 and until_ns:
            export.range(4242, 500, until_ns, "startup")
        for step in range(steps):
            t = step * 100_000
            export.range(4242, t + 1_000, t + 90_000, f"ProfileStep#{step}")
            export.kernel(4242, 0, fx.COMPUTE_STREAM, t + 10_000, t + 20_000, "gemm", launch=(t + 3_000, t + 3_500))
            export.kernel(4242, 0, fx.NCCL_STREAM, t + 25_000, t + 40_000, fx.NCCL_KERNEL,
                          launch=(t + 20_200, t + 20_700))
        paths.append(export.write(tmp_path / f"rank{rank}.sqlite"))
    return paths


@pytest.mark.parametrize("steps", [4, 1])  # 4: collective ends contradict the host; 1: too few to refine
def test_one_day_offset_on_one_host_is_distrusted_not_a_straggler(tmp_path, steps):
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL folder is absent")
    from distprof import config as config_mod
    from distprof import pipeline
    paths = same_host_ranks(tmp_path, DAY_NS, steps)
    # files a day apart are two runs (refused: tests/test_run_identity.py); merged anyway, their clocks
    # are still not trusted
    summary = summary_json(pipeline.merge_files(paths, config_mod.load(), allow_duplicate_ranks=True))
    assert summary["skew"]["straggler"] is None
    assert not [f for f in summary["findings"] if f["finding"] == "straggler"]
    told = [w for w in summary["warnings"] if "distrusted" in w]
    assert len(told) == 1 and str(paths[1]) in told[0] and "rank 1" in told[0] and "86,400.000 s" in told[0]
    rank1 = summary["skew"]["alignment"][1]
    assert rank1["uncertainty_ns"] is None and not rank1["verified"]
    step_ns = 89_000  # ProfileStep 1 us .. 90 us on each rank's own clock
    for finding in summary["findings"]:
        assert max(finding["figure_ns"], finding["cost_ns"] or 0) <= steps * step_ns


def test_same_host_offset_of_seconds_is_still_trusted(tmp_path):
    """Files of one host starting 5 s apart, rank 0 recording on past rank 1's start (one job: the two
    recordings overlap on the host's one clock): a plain job start, the shared clock is kept."""
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL folder is absent")
    from distprof import config as config_mod
    from distprof import pipeline
    paths = same_host_ranks(tmp_path, 5 * 10 ** 9, until_ns=6 * 10 ** 9)
    summary = summary_json(pipeline.merge_files(paths, config_mod.load()))
    assert not [w for w in summary["warnings"] if "distrusted" in w]
    assert summary["skew"]["alignment"][1]["method"] == "same host"


def test_finding_longer_than_the_window_is_dropped_with_a_warning():
    from types import SimpleNamespace

    from distprof import pipeline
    ranks = [SimpleNamespace(figures=SimpleNamespace(window_ns=1_000_000, gpu_window_ns=None))]
    from result_views import whatif_of

    from distprof.analyses import cost
    from distprof.sections.findings import Evidence, Observed
    whatif = whatif_of([{"name": "no_dataloader_wait", "applies": True, "saving_ns": 300_000},
                        {"name": "no_straggler", "applies": True, "saving_ns": 0}], 1_000_000)
    observed = [Observed(finding="dataloader_bound", figure_ns=400_000, ranks=[0], evidence=Evidence()),
                Observed(finding="straggler", figure_ns=DAY_NS, ranks=[1], evidence=Evidence())]
    ok, bad = cost.price_findings(observed, whatif)
    assert (ok.finding, ok.cost_ns, bad.finding, bad.cost_ns) == ("dataloader_bound", 300_000, "straggler", 0)
    kept, warnings = pipeline._plausible_findings([ok, bad], ranks)
    assert kept == [ok]
    assert [words(w) for w in warnings] == [
        "finding straggler dropped: its figure (86,400.000000 s) exceeds the longest analysed window (0.001000 s); "
        "the inputs' times are inconsistent"]


@pytest.mark.parametrize("bad, needle", [
    ({"tid": 1e30}, "tid out of range"), ({"pid": 1e30}, "pid out of range"),
    ({"ts": 1e30}, "ts out of range"), ({"dur": 1e30}, "dur out of range"),
    ({"ts": "1e400"}, "ts out of range"), ({"tid": "1e400"}, "tid out of range"),
    ({"ts": 9_223_372_036_854_775, "dur": 10_000}, "outside the plausible span"),  # ts + dur overflows int64
    ({"ts": -5_000_000_000_000}, "outside the plausible span"),  # 58 days before the others
])
def test_kineto_number_no_int64_can_hold_drops_that_event(tmp_path, bad, needle):
    """A float 1e30 where Kineto writes an integer aborted the merge: the event is dropped, the
    file warns (naming itself), and the other events keep their figures."""
    path = tmp_path / "rank0.json"
    good = [cpu_event(1000 + 100 * k, 50, name=f"aten::op{k}") for k in range(3)]
    path.write_text(json.dumps({"traceEvents": good + [{**cpu_event(1100, 50, name="aten::bad"), **bad}]}))
    trace = sources.read(path, {})[0]
    frame = trace.events.to_frame()
    assert sorted(frame["name"].astype(str)) == ["aten::op0", "aten::op1", "aten::op2"]
    assert sorted(frame["start_ns"]) == [1_000_000, 1_100_000, 1_200_000]
    told = [w for w in trace.warnings if needle in w]
    assert len(told) == 1 and told[0].startswith(f"{path}: 1 event(s) dropped"), trace.warnings


@pytest.mark.parametrize("size", [1e30, "1e400", 2 ** 62])
def test_kineto_collective_size_out_of_range_is_unknown(tmp_path, size):
    """``"1e400"`` elements was read as 1 element (the digits before the exponent): unknown now."""
    comm = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 2000, "dur": 30,
            "args": {"In msg nelems": size, "Out msg nelems": size, "dtype": "Float",
                     "Collective name": "allreduce"}}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [cpu_event(1000, 5000, name="ProfilerStep#1"), comm]}))
    trace = sources.read(path, {})[0]
    frame = trace.events.to_frame()
    assert (frame["nbytes"] != 4).all() and (frame["nbytes"] <= 0).all()
    told = [w for w in trace.warnings if "message size" in w]
    assert len(told) == 1 and str(path) in told[0] and "unknown" in told[0]


def test_nsys_timestamp_near_2_63_is_dropped_with_a_warning(tmp_path):
    """A kernel at 2**63 ns gave a 292-year window (and passed for a normalized absolute time)."""
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL folder is absent")
    clean = fx.one_step_rank(fx.NsysExport()).write(tmp_path / "clean.sqlite")
    path = fx.one_step_rank(fx.NsysExport()).write(tmp_path / "rank0.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854000000, end = 9223372036854000100 "
                   "WHERE rowid = 1")
        (gemm_start,) = db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 2").fetchone()
    expected = sources.read(clean, {})[0]
    trace = sources.read(path, {})[0]
    assert trace.clock_offset_ns == expected.clock_offset_ns  # not taken for a normalized time
    frame = trace.events.to_frame()
    assert int(frame["end_ns"].max()) < 10 ** 9 and gemm_start in set(frame["start_ns"])
    assert len(trace.events) == len(expected.events) - 2  # the kernel and the activity mark at its end
    told = [w for w in trace.warnings if "outside the plausible span" in w]
    assert len(told) == 1 and told[0].startswith(f"{path}: 1 event(s) dropped")


@pytest.mark.parametrize("origin_ns", [-100_000, -10 ** 12, -(2 ** 62)])
@pytest.mark.parametrize("time_format", ["us3", "int"])
def test_negative_kineto_timestamps_keep_the_figures(tmp_path, origin_ns, time_format):
    """overlap_trace's figures, worked out by hand in its docstring, on an axis starting below 0
    (straddling 0, far below, near -2**62): computation 90 us, communication 60 us, window 199 us."""
    from distprof import config as config_mod
    from distprof import pipeline
    if time_format == "int" and origin_ns % 1000:
        pytest.skip("int microseconds")
    path = overlap_trace(rank=0, origin_ns=origin_ns, time_format=time_format, base_time_ns=None).write(
        tmp_path / "rank0.json")
    rank = summary_json(pipeline.merge_files([path], config_mod.load()))["ranks"][0]
    assert (rank["computation_ns"], rank["communication_ns"], rank["window_ns"]) == (90_000, 60_000, 199_000)


def test_negative_native_timestamps_keep_the_figures(tmp_path):
    """A collector file whose clock starts below 0: the Forward phases are 2 x 490 us of computation."""
    from distprof import config as config_mod
    from distprof import pipeline
    path = native_file(tmp_path / "rank0.sqlite", rank=0, world_size=1)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_ranges SET start_ns = start_ns - 10000000000000, end_ns = end_ns - 10000000000000")
    rank = summary_json(pipeline.merge_files([path], config_mod.load()))["ranks"][0]
    assert (rank["computation_ns"], rank["window_ns"], rank["steps"]) == (980_000, 1_800_000, 2)


# ---------------------------------------------------------------- diff and whatif inputs (issue 23)

@pytest.fixture(scope="module")
def merged_out(tmp_path_factory):
    """A two-rank Kineto merge's output folder."""
    base = tmp_path_factory.mktemp("merged23")
    files = [overlap_trace(rank=r).write(base / f"rank{r}.json") for r in (0, 1)]
    result = run_cli("merge", *map(str, files), "-o", str(base / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    return base / "out"


def edited_summary(merged_out, tmp_path, edit, raw=None):
    folder = tmp_path / "edited"
    folder.mkdir()
    summary = json.loads((merged_out / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(raw if raw is not None else json.dumps(summary))
    return folder


def _million_steps(summary):
    steps = summary["tables"]["merged"]["steps"]  # each series a step long, as the file is checked for (issue 57)
    steps.update(step=list(range(1_000_000)), max_rank=[0] * 1_000_000,
                 **dict.fromkeys(("min_ns", "median_ns", "max_ns"), [1000] * 1_000_000))


def _wrong_ranks(summary):
    summary["ranks"][0]["communication_ns"] = {"a": 1}
    summary["across_ranks"] = [1, 2]


def _wrong_steps(summary):
    summary["tables"]["merged"]["steps"] = {"median_ns": {"x": 1}}


def _wrong_step_values(summary):
    summary["tables"]["merged"]["steps"]["median_ns"] = ["x", 1]  # of the type's shape, not numbers


@pytest.mark.parametrize("edit, needle", [
    (_million_steps, "refused: 1,000,000 steps, above the 2,000"),
    (_wrong_ranks, "not a complete distprof summary.json ($.ranks[0].communication_ns: expected int, got dict)"),
    (_wrong_steps, "not a complete distprof summary.json ($.tables.merged.steps: missing key"),  # read, typed
    (_wrong_step_values, "summary.json ($.tables.merged.steps.median_ns[0]: expected int, got str)"),  # each leaf
])
def test_diff_hostile_summary_is_one_line_naming_it(merged_out, tmp_path, edit, needle):
    bad = edited_summary(merged_out, tmp_path, edit)
    result = run_cli("diff", str(merged_out), str(bad), "-o", str(tmp_path / "d"))
    line = one_line_error(result, needle)
    assert line.startswith(f"distprof: error: {bad}: "), line


@pytest.mark.parametrize("raw, needle", [
    ('{"ranks": [], "world_size": 1, "source": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
    ('{"ranks": [], "world_size": 1, "source": "x", "a": ' + "[" * 40 + "]" * 40 + "}",
     "nested more than 32 levels deep"),
])
def test_diff_and_whatif_deep_summary_is_one_line(merged_out, tmp_path, raw, needle):
    bad = edited_summary(merged_out, tmp_path, lambda s: None, raw)
    one_line_error(run_cli("diff", str(bad), str(merged_out), "-o", str(tmp_path / "d")), str(bad), needle)
    one_line_error(run_cli("whatif", str(bad)), str(bad), needle)


def test_whatif_wrong_types_is_one_line(merged_out, tmp_path):
    bad = edited_summary(merged_out, tmp_path, lambda s: s.update(whatif={"scenarios": 7, "steps": "x"}))
    one_line_error(run_cli("whatif", str(bad)), str(bad), "not a complete distprof summary.json")


@pytest.mark.parametrize("option, value, needle", [
    ("--min-change", "nan", "must be a percentage from 0 to 100"),
    ("--min-change", "-1", "must be a percentage from 0 to 100"),
    ("--min-change", "inf", "must be a percentage from 0 to 100"),
    ("--min-change", "x", "is not a number"),
    ("--seed", "-1", "must be from 0 to 4294967295"),
    ("--seed", "1.5", "is not an integer"),
])
def test_diff_options_are_validated_by_argparse(merged_out, tmp_path, option, value, needle):
    result = run_cli("diff", str(merged_out), str(merged_out), "-o", str(tmp_path / "d"), option, value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument {option}: {value!r} {needle}" in result.stderr, result.stderr


def test_whatif_prints_the_merges_warnings(tmp_path):
    path = overlap_trace(rank=0).write(tmp_path / "rank0.json")  # of a world of 2: a partial result
    merged = run_cli("merge", str(path), "-o", str(tmp_path / "out"))
    result = run_cli("whatif", str(path))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["warnings"] and merged.returncode == 0
    for warning in summary["warnings"]:
        assert f"distprof: warning: {warning}" in result.stderr
