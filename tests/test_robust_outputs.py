"""Outputs (issue 14): bad output paths fail in one line before any analysis; every file is
written through a unique temporary file, so concurrent writers into one folder all succeed;
``report`` on something that is not a summary says what to run; ``trace`` selections are
ranges, and one that matches nothing leaves an existing trace untouched."""

import gzip
import json
import os
import threading
from pathlib import Path

import msgspec
import pytest
from conftest import run_cli
from kineto_fixtures import overlap_trace
from test_robust_inputs import one_line_error

from distprof import outpaths
from distprof.reports import export, html


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """A two-rank Kineto merge: (rank files, output folder)."""
    base = tmp_path_factory.mktemp("merged")
    files = [overlap_trace(rank=r).write(base / f"rank{r}.json") for r in (0, 1)]
    out = base / "out"
    result = run_cli("merge", *map(str, files), "-o", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    return files, out


# ---------------------------------------------------------------- output paths
def bad_outputs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    cases = [(a_file, "is an existing file"), (a_file / "sub", "which is a file"), ("/proc/self/distprof_out", "/proc")]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((locked / "out", "not writable"))
    return [(str(p), needle) for p, needle in cases]


def test_merge_bad_output_is_one_line_before_the_analysis(merged, tmp_path):
    files, _ = merged
    for out, needle in bad_outputs(tmp_path):
        result = run_cli("merge", str(files[0]), "-o", out)
        one_line_error(result, out, needle)
        assert "Overall Summary" not in result.stdout  # nothing analysed, nothing printed


def test_report_and_trace_bad_output_is_one_line(merged, tmp_path):
    _, out = merged
    for bad, needle in bad_outputs(tmp_path):
        one_line_error(run_cli("report", str(out), "--html", bad), bad, needle)
    one_line_error(run_cli("trace", str(out), "-o", str(tmp_path)), str(tmp_path), "is an existing directory")
    one_line_error(run_cli("trace", str(out), "-o", "/proc/self/t.json.gz"), "/proc")


def test_concurrent_writers_into_one_folder_all_succeed(merged, tmp_path):
    summary = export.read_summary(merged[1])
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            export.write_summary(msgspec.structs.replace(summary, source=f"writer {i}"), tmp_path)
            html.write_report(summary, tmp_path)
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads((tmp_path / "summary.json").read_text())["source"].startswith("writer ")
    assert (tmp_path / "ranks.csv").read_text().startswith("rank,")
    assert (tmp_path / "report.html").read_text().rstrip().endswith("</html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["collectives.csv", "ranks.csv", "report.html", "summary.json"]


def test_new_file_is_exclusive_private_and_never_follows_a_link(tmp_path, monkeypatch):
    """outpaths.new_file keeps tempfile.mkstemp's contract: a fresh name each call, created by this call
    alone (a name drawn again is skipped), mode 0600, the path absolute, a link in its place not followed."""
    monkeypatch.chdir(tmp_path)
    fd, name = outpaths.new_file(".", ".x.", ".tmp")
    os.close(fd)
    assert os.path.isabs(name) and Path(name).parent == tmp_path
    assert Path(name).name.startswith(".x.") and name.endswith(".tmp")
    assert oct(os.stat(name).st_mode & 0o777) == oct(0o600)
    draws = iter([bytes(6), bytes(6), bytes([1] * 6)])  # the first name, the same again, then another
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    first_fd, first = outpaths.new_file(tmp_path, "p.")
    again_fd, again = outpaths.new_file(tmp_path, "p.")  # "p.000000000000" exists: the next draw is used
    os.close(first_fd), os.close(again_fd)
    assert (Path(first).name, Path(again).name) == ("p.000000000000", "p.010101010101")
    target = tmp_path / "elsewhere"
    os.symlink(target, tmp_path / "q.000000000000")
    monkeypatch.setattr(os, "urandom", lambda n: bytes(n))  # only that name, over and over
    with pytest.raises(FileExistsError):
        outpaths.new_file(tmp_path, "q.")
    assert not target.exists()


def test_atomic_open_leaves_old_file_on_error(tmp_path):
    path = outpaths.write_text(tmp_path / "f.txt", "old")
    with pytest.raises(RuntimeError), outpaths.atomic_open(path) as handle:
        handle.write("half")
        raise RuntimeError
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~outpaths._UMASK)


# ---------------------------------------------------------------- report on the wrong file
def test_report_on_rank_files_says_to_merge_first(merged, tmp_path):
    files, _ = merged
    gz = tmp_path / "rank0.json.gz"
    gz.write_bytes(gzip.compress(files[0].read_bytes()))
    sqlite = tmp_path / "rank0.sqlite"
    sqlite.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    for path in (gz, sqlite, files[0]):
        one_line_error(run_cli("report", str(path)), str(path), "is a rank file", "distprof merge")


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "is a rank file"),
    ('"text"', "not an object"),
    ('{"ranks": [], "source": "x"}', "missing key 'world_size'"),
    ('{"ranks": [1], "source": "x", "world_size": 1}', "not a list of rank rows"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_report_on_malformed_summary_is_one_line(tmp_path, content, needle):
    path = tmp_path / "summary.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_error(run_cli("report", str(path)), str(path), needle)


def test_report_on_summary_missing_nested_key_is_one_line(merged, tmp_path):
    summary = json.loads((merged[1] / "summary.json").read_text())
    del summary["across_ranks"]["window_ns"]["max_rank"]  # a key of a section's record (comm_lanes, derived
    path = tmp_path / "summary.json"                      # from a rank's lanes, is no longer read)
    path.write_text(json.dumps(summary))
    one_line_error(run_cli("report", str(path)), str(path), "missing key 'max_rank'")


# ---------------------------------------------------------------- trace selections
def test_trace_huge_range_is_not_expanded(merged, tmp_path):
    _, out = merged
    result = run_cli("trace", str(out), "--ranks", "0-999999999999", "-o", str(tmp_path / "t.json.gz"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 rank(s)" in result.stdout
    one_line_error(run_cli("trace", str(out), "--ranks", "0-" + "9" * 40), "--ranks")


@pytest.mark.parametrize("option, value", [("--ranks", "9"), ("--steps", "50-60")])
def test_trace_selection_matching_nothing_keeps_existing_trace(merged, tmp_path, option, value):
    _, out = merged
    trace = tmp_path / "t.json.gz"
    assert run_cli("trace", str(out), "-o", str(trace)).returncode == 0
    before = trace.read_bytes()
    one_line_error(run_cli("trace", str(out), option, value, "-o", str(trace)), value, "not written")
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]


# ---------------------------------------------------------------- long names
def strings(value):
    """Every string (keys and values) in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def test_100kb_kernel_name_gives_a_small_summary(tmp_path):
    from distprof.names import MAX_NAME_CHARS
    long_name = "void gemm<" + "float, " * 15_000 + "128>(float*)"  # about 100 kB
    trace = overlap_trace(rank=0)
    trace.kernel(long_name, 20_000, 30_000, stream=9, launch_ns=6_500)
    trace.cpu_op("user::" + "x" * 100_000, 11_000, 12_000, cat="user_annotation")
    path = trace.write(tmp_path / "rank0.json")
    out = tmp_path / "out"
    result = run_cli("merge", str(path), "-o", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout) < 200_000
    summary_text = (out / "summary.json").read_text()
    assert len(summary_text) < 300_000, len(summary_text)
    shortened = [n for n in strings(json.loads(summary_text)) if n.startswith("void gemm<float")]
    assert shortened and all(len(n) <= MAX_NAME_CHARS and "…" in n and n.endswith("128>(float*)") for n in shortened)
    assert os.path.getsize(out / "report.html") < 1_000_000
    assert run_cli("trace", str(out), "-o", str(tmp_path / "t.json.gz")).returncode == 0
    assert os.path.getsize(tmp_path / "t.json.gz") < 200_000


# ---------------------------------------------------------------- merge warnings and world size
def test_corrupt_world_size_is_capped_by_the_ranks_found(tmp_path):
    from test_robust_inputs import cpu_event, kineto_bytes
    files = []
    for rank in (0, 1):
        files.append(tmp_path / f"rank{rank}.json")
        files[-1].write_bytes(kineto_bytes([cpu_event(1000 + rank)], {"rank": rank, "world_size": 1_000_000}))
    result = run_cli("merge", *map(str, files), "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["missing_ranks"] == []
    assert any("world_size 1000000" in w and "2 rank(s) found" in w for w in summary["warnings"]), summary["warnings"]


def test_partial_world_warning_uses_ranges(tmp_path):
    from test_robust_inputs import cpu_event, kineto_bytes
    path = tmp_path / "rank3.json"
    path.write_bytes(kineto_bytes([cpu_event(1000)], {"rank": 3, "world_size": 64}))
    result = run_cli("merge", str(path), "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["missing_ranks"] == [0, 1, 2, *range(4, 64)]
    assert "partial result: no data for ranks 0-2, 4-63 of 64" in summary["warnings"]


def test_expand_warnings_reach_the_summary(tmp_path, monkeypatch):
    from distprof import cli, sources
    good = overlap_trace(rank=0).write(tmp_path / "rank0.json")

    def expand(inputs, warn):
        warn("nsys and Kineto files mixed: ranks renumbered")
        return [good]
    monkeypatch.setattr(sources, "expand", expand)
    assert cli.main(["merge", str(good), "-o", str(tmp_path / "o"), "--no-html"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["warnings"][0] == "nsys and Kineto files mixed: ranks renumbered"


# ---------------------------------------------------------------- findings in HTML
def test_findings_evidence_is_readable_in_the_report_unit():
    from distprof.sections.findings import Finding, HostBoundEvidence, PlacementEvidence
    priced = {"severity": "high", "cost_ns": 723_650_062, "ranks": [0], "predicted_saving_ns": 723_650_062,
              "saving_share": 0.5, "priced_by": "no_straggler", "priced_after_straggler": False,
              "why_not": None, "durations_vary_share": None, "message": "m", "advice": "a",
              "figure_ns": 723_650_062}
    host = Finding(finding="host_bound_gpu", **priced, evidence=HostBoundEvidence(
        worst_rank=0, ranks_total=1, host_bound_ns_by_rank={0: 723_650_062}, host_bound_gaps=19, gaps=19,
        idle_ns=724_054_763, window_ns=800_000_000, pytorch=False))
    lanes = Finding(finding="serialized_communication", **priced, evidence=PlacementEvidence(  # a long list
        worst_rank=0, ranks_total=1, exposed_communication_ns_by_rank={0: 1_000},
        lanes=[f"stream {i}" for i in range(20)], lane_kind="gpu_stream", kinds=["nccl"], overlap_ratio=0.5,
        window_ns=800_000_000, lane_collectives=[], lane_groups=[], groups_by_kind={"allreduce": ["world"]},
        in_forward=[], on_gpu=True, pytorch=False))
    shown = html.findings_html([host, lanes], "ms")
    assert "GPU time waiting for launches by rank: rank 0 723.65 ms" in shown and "idle 724.05 ms" in shown
    assert "fix saves 723.65 ms per step (50.0% of the step time)" in shown
    assert "_ns" not in shown and "{" not in shown and "stream 7" in shown and "stream 19" not in shown
    assert "(20 in all)" in shown
    assert "idle 724054.76 us" in html.findings_html([host], "us")


def test_advice_names_no_other_framework():
    import inspect

    from distprof.analyses import diagnose, streams
    for module in (diagnose, streams):
        assert "MegEngine" not in inspect.getsource(module)


# ---------------------------------------------------------------- CSV formulas (issue 23)

def test_csv_cells_that_start_a_formula_are_quoted_numbers_stay(tmp_path):
    """A process-group name from a trace ("=HYPERLINK(...") went raw into collectives.csv."""
    import csv

    from kineto_fixtures import one_group_job
    files = one_group_job(tmp_path / "job", '=HYPERLINK("http://example.invalid","x")')
    out = tmp_path / "out"
    result = run_cli("merge", *map(str, files), "-o", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    with open(out / "collectives.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(row["group"].startswith("'=HYPERLINK(") for row in rows), rows
    assert all(float(row["count"]) == 3 for row in rows)  # numbers are written as numbers
    for text in (tmp_path / "out" / "collectives.csv", tmp_path / "out" / "ranks.csv"):
        cells = [cell for row in csv.reader(open(text, newline="")) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r") or
                    (c.startswith("-") and not c.lstrip("-").replace(".", "", 1).isdigit())]


@pytest.mark.parametrize("value, written", [
    ("=1+2", "'=1+2"), ("+cmd", "'+cmd"), ("-x", "'-x"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "\\tx"),
    ("\rx", "\\rx"), ("ok", "ok"), (-5, -5), (-0.5, -0.5), (None, ""), (3, 3),
])
def test_csv_cell(value, written):
    assert export.csv_cell(value) == written


# ---------------------------------------------------------------- output errors up front (issue 23)

@pytest.mark.parametrize("name", ["summary.json", "ranks.csv", "report.html"])
def test_output_file_that_is_a_directory_fails_before_the_analysis(merged, tmp_path, name):
    files, _ = merged
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    result = run_cli("merge", str(files[0]), "-o", str(out))
    one_line_error(result, str(out / name), "is an existing directory")
    assert "Overall Summary" not in result.stdout and "Distributed Summary" not in result.stdout


def test_demo_bad_output_is_one_line_before_mpirun(tmp_path):
    for out, needle in bad_outputs(tmp_path):
        result = run_cli("demo", "--ranks", "2", "--steps", "2", "--out", out, timeout=60)
        one_line_error(result, out, needle)
    (tmp_path / "d" / "summary.json").mkdir(parents=True)
    result = run_cli("demo", "--ranks", "2", "--steps", "2", "--out", str(tmp_path / "d"), timeout=60)
    one_line_error(result, str(tmp_path / "d" / "summary.json"), "is an existing directory")
    assert not list((tmp_path / "d").glob("rank*.sqlite"))  # the job never started


def test_profiler_bad_output_is_one_line_naming_it(tmp_path):
    from distprof import Profiler
    from distprof.events import SourceError
    for out, needle in bad_outputs(tmp_path):
        with pytest.raises(SourceError) as refused:
            Profiler(out=out)
        assert out in str(refused.value) and needle in str(refused.value) and "\n" not in str(refused.value)


def test_output_probe_catches_what_access_cannot(tmp_path, monkeypatch):
    """root passes os.access on any folder; the probe file is what fails on a read-only mount."""
    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(outpaths, "new_file", read_only)
    with pytest.raises(Exception, match=r"not writable \(Read-only file system\)") as refused:
        outpaths.check_dir(tmp_path)
    assert str(tmp_path) in str(refused.value)


@pytest.mark.parametrize("env, needle", [
    ({"RANK": "abc"}, "environment variable RANK='abc': expected an integer"),
    ({"RANK": "0", "WORLD_SIZE": "1e9"}, "environment variable WORLD_SIZE='1e9'"),
    ({"RANK": "0", "WORLD_SIZE": "1000000000"}, "WORLD_SIZE='1000000000': expected an integer from 1 to 1048576"),
    ({"RANK": "5", "WORLD_SIZE": "2"}, "WORLD_SIZE='2': expected an integer from 6"),
])
def test_launcher_variables_are_named_when_wrong(env, needle):
    from distprof import transport
    from distprof.config import ConfigError
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        transport.detect_world(env)


def test_profiler_with_rank_abc_is_one_line_naming_the_variable(tmp_path):
    """A live job with RANK=abc: the exception's one line names the variable (was int()'s ValueError)."""
    import subprocess
    import sys
    script = ("import distprof\n"
              "try:\n"
              f"    with distprof.Profiler(out={str(tmp_path / 'o')!r}, quiet=True):\n"
              "        pass\n"
              "except Exception as error:\n"
              "    print(type(error).__name__, error)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM"))}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**env, "RANK": "abc", "WORLD_SIZE": "2"})
    assert result.stdout.strip() == ("ConfigError environment variable RANK='abc': expected an integer from 0 to "
                                     "1048575"), result.stdout + result.stderr


@pytest.mark.parametrize("content", [
    {"a": [1, -0.0, 9.171257279685466e-05, 1e16, 5e-324, 2 ** 70, True, None], "b": {}, "c": [], "d": [[], {}]},
    {"name \u27e6ns:1\u27e7 \U0001F600 \x7f \x00\n\t\"\\/": "\u2028é", 3: 1.5, "nested": [{"x": [{}]}]},
    {"nan": float("nan"), "inf": [float("inf"), -float("inf")]},  # not JSON to msgspec: the stdlib's path
    "\ud800 lone surrogate", [], 0.1,
])
def test_indented_json_is_the_stdlib_indent_byte_for_byte(content):
    """summary.json's writer (the C encoder re-indented by msgspec) writes json.dumps(indent=1)'s bytes."""
    assert export.indented_json(content) == json.dumps(content, indent=1)
