"""Bad input, last round (issue 42), as a user meets it: ``python -m distprof`` in a subprocess, small
inputs made here or the real two-rank DDP traces of tests/data. Each case ends in one line naming the
file, key or variable and what to do (exit 2 where nothing usable is left), or a warning beside a
partial result; never a traceback."""

import errno
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import DATA

from distprof import cli, outpaths
from distprof.events import SourceError

HEALTHY = DATA / "torch_ddp" / "healthy"  # two Kineto rank files of a real DDP run


def distprof(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``python -m distprof ARGS`` as a user runs it; ``env``: variables set on top of this one's."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_SIZE", "DISTPROF_READ_WORKERS")}
    return subprocess.run([sys.executable, "-m", "distprof", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**environ, **(env or {})}, timeout=60)


def one_line(result: subprocess.CompletedProcess, *needles: str, prefix: str = "distprof: error:") -> str:
    """Exit 2, no traceback, one line (besides warnings) holding every needle."""
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("distprof: warning:")]
    assert len(lines) == 1 and lines[0].startswith(prefix), result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def warned(result: subprocess.CompletedProcess, *needles: str) -> str:
    """A result (exit 0, no traceback) and the one warning holding every needle."""
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if all(n in line for n in needles)]
    assert len(lines) == 1 and lines[0].startswith("distprof: warning:"), result.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """A real merge of the healthy DDP traces: its output folder (summary.json)."""
    out = tmp_path_factory.mktemp("healthy") / "out"
    result = distprof("merge", HEALTHY, "-o", out, "--no-html")
    assert result.returncode == 0, result.stderr[-2000:]
    return out


# ---------------------------------------------------------------- 1. an output that cannot be replaced
def test_output_file_that_is_a_full_directory_fails_before_the_analysis(tmp_path):
    (tmp_path / "summary.json" / "kept").mkdir(parents=True)  # fails for root too
    result = distprof("merge", HEALTHY, "-o", tmp_path, "--no-html")
    one_line(result, f"{tmp_path / 'summary.json'}: output file is an existing directory", "choose another -o")
    assert "Distributed Summary" not in result.stdout  # nothing analysed


def test_immutable_output_file_fails_before_the_analysis(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text("{}")
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(summary)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs CAP_LINUX_IMMUTABLE and ext4/xfs/btrfs)")
    try:
        result = distprof("merge", HEALTHY, "-o", tmp_path, "--no-html")
    finally:
        subprocess.run([chattr, "-i", str(summary)], check=True)
    one_line(result, f"{summary}: existing output file cannot be replaced", "chattr -i", "choose another -o")
    assert "Distributed Summary" not in result.stdout and summary.read_text() == "{}"


def test_late_write_failure_is_one_line_naming_the_file(tmp_path):
    """What no check before the analysis foresees (the flag set meanwhile, a full disk): os.replace's
    PermissionError, or mkstemp's error on the temporary name, names the output file."""
    target = tmp_path / "summary.json"
    with pytest.raises(SourceError, match=rf"^{target}: cannot write the output \(Operation not permitted\)"):
        with cli.writing(tmp_path):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(tmp_path / ".summary.json.x1.tmp"),
                                  str(target))
    with pytest.raises(SourceError, match=rf"^{target}: cannot write the output \(No space left on device\)"):
        with cli.writing(tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".summary.json.k2j_9.tmp"))


# ---------------------------------------------------------------- 2. configs that overflowed the reader
def test_config_nested_thousands_deep_is_one_line(tmp_path):
    config = tmp_path / "deep.yaml"
    nested = "".join("  " * depth + "a:\n" for depth in range(1, 3000))
    config.write_text("hardware:\n" + nested + "  " * 3000 + "b: 1\n")
    one_line(distprof("merge", HEALTHY, "-o", tmp_path / "out", "--config", config),
             f"{config}: nested too deep to read", "two levels")


def test_config_integer_too_large_for_a_float_is_one_line(tmp_path):
    config = tmp_path / "huge.yaml"
    config.write_text("hardware:\n  peak_busbw_gbps: 1" + "0" * 400 + "\n")
    one_line(distprof("merge", HEALTHY, "-o", tmp_path / "out", "--config", config),
             f"{config}: key 'hardware.peak_busbw_gbps' is too large: an integer of 401 digits", "give the real value")


# ---------------------------------------------------------------- 3. an environment variable
def test_read_workers_variable_that_is_not_a_number_is_named(tmp_path):
    result = distprof("merge", HEALTHY, "-o", tmp_path / "out", env={"DISTPROF_READ_WORKERS": "lots"})
    one_line(result, "DISTPROF_READ_WORKERS='lots': expected a number of processes", "e.g. 4", "unset it")
    assert not (tmp_path / "out" / "summary.json").exists()


# ---------------------------------------------------------------- 4. report on a JSON array
def test_report_on_a_json_array_says_what_it_is_and_what_to_pass(tmp_path):
    array = tmp_path / "events.json"
    array.write_text(' [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]')
    one_line(distprof("report", array), f"{array}: a JSON array, not a distprof summary.json",
             "pass a merge's output folder or its summary.json", f"distprof merge {array} -o OUT")


# ---------------------------------------------------------------- 5. YAML 1.1 numbers read as text
@pytest.mark.parametrize(("line", "needles"), [
    ("hardware:\n  peak_busbw_gbps: 1.0e308\n",
     ("key 'hardware.peak_busbw_gbps'", "YAML 1.1 reads 1.0e308 as text (a float needs a dot and a signed exponent)",
      "write 1.0e+308")),
    ("skew:\n  max_rows: 1e3\n", ("key 'skew.max_rows' must be int, got str ('1e3')", "an integer: write 1000")),
])
def test_exponent_read_as_text_says_why_and_how_to_write_it(tmp_path, line, needles):
    config = tmp_path / "numbers.yaml"
    config.write_text(line)
    one_line(distprof("merge", HEALTHY, "-o", tmp_path / "out", "--config", config), str(config), *needles)


# ---------------------------------------------------------------- 6. report --top -5
def test_report_refuses_a_negative_top(merged):
    result = distprof("report", merged, "--top", "-5")
    assert result.returncode == 2 and "Traceback" not in result.stderr and not result.stdout
    assert result.stderr.splitlines()[-1] == "distprof report: error: argument --top: '-5' must be 0 (all rows) or more"


# ---------------------------------------------------------------- 7. diff of a side holding NaN
def test_diff_of_nan_figures_prints_a_dash_and_writes_null(merged, tmp_path):
    """NaN where a figure may be unknown (null) reads as unknown, with a warning; where its type has no unknown
    (a step time, a FigureStats' min) the file is refused in one line naming the key (issue 57)."""
    summary = json.loads((merged / "summary.json").read_text())
    for row in summary["ranks"]:
        row["communication_wait_ns"] = float("nan")
    summary["ranks"][0]["overlap_ratio"] = float("inf")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "summary.json").write_text(json.dumps(summary))  # NaN, as a damaged file holds it
    result = distprof("diff", damaged, merged, "-o", tmp_path / "diff")
    warned(result, f"{damaged}: 3 figure(s) NaN or infinite (first: ranks[0].overlap_ratio)",
           "read as unknown")
    assert not re.search(r"\bnan\b", result.stdout, re.IGNORECASE) and "- -> 72.56" in result.stdout
    text = (tmp_path / "diff" / "diff.json").read_text()
    diff = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in diff.json"))
    assert diff["ranks"][0]["before"]["communication_wait_ns"] is None
    assert diff["ranks"][0]["delta"]["communication_wait_ns"] is None
    assert diff["step_time"]["steps_before"] == 8
    summary["tables"]["merged"]["steps"]["median_ns"][2] = float("nan")
    (damaged / "summary.json").write_text(json.dumps(summary))
    one_line(distprof("diff", damaged, merged, "-o", tmp_path / "diff"), str(damaged),
             "$.tables.merged.steps.median_ns[2]: expected int, got nan")


# ---------------------------------------------------------------- 8. a symlinked input
def test_symlinked_input_is_named_as_given(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "notes_target.json"
    target.write_text('{"not": "a trace"}')
    (tmp_path / "rank9.json").symlink_to(target)
    (tmp_path / "rank8.json").symlink_to("rank8.json")  # a loop: Path.resolve raised RuntimeError
    result = distprof("merge", HEALTHY / "rank0.json.gz", "rank9.json", "rank8.json", "-o", "out", "--no-html",
                      cwd=tmp_path)
    warned(result, f"{tmp_path / 'rank9.json'}: JSON without a 'traceEvents' list")
    warned(result, f"{tmp_path / 'rank8.json'}: cannot read")
    assert "notes_target" not in result.stderr + (tmp_path / "out" / "summary.json").read_text()


# ---------------------------------------------------------------- 9. distprof's own files in a run folder
def test_merge_of_a_run_folder_skips_distprofs_own_files_silently(tmp_path):
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(HEALTHY / name, tmp_path / name)
    for name in ("live.json", "hang_rank1.json", "hang.json", "diff.json", "summary.json"):
        (tmp_path / name).write_text('{"distprof": "own output"}')
    result = distprof("merge", tmp_path, "-o", tmp_path / "out", "--no-html")
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr[-2000:]
    ranks = json.loads((tmp_path / "out" / "summary.json").read_text())["ranks"]
    assert sorted(os.path.basename(r["source_file"]) for r in ranks) == ["rank0.json.gz", "rank1.json.gz"]


def test_own_files_list_covers_every_writer():
    """outpaths.OWN_FILES is a literal (no import of the writers); it must name what they write."""
    from distprof import live
    from distprof.reports import diff_report, export, html, perfetto
    from distprof.sources import flight_recorder
    written = {export.SUMMARY_FILE, html.REPORT_FILE, perfetto.TRACE_FILE, diff_report.DIFF_FILE,
               diff_report.DIFF_HTML, live.LIVE_FILE, cli.HANG_JSON, *cli.OUTPUT_FILES, *cli.DIFF_FILES}
    assert all(outpaths.is_own_file(name) for name in written), written - outpaths.OWN_FILES
    assert outpaths.is_own_file(flight_recorder.HANG_FILE.format(rank=12))
    assert not outpaths.is_own_file("rank0.json") and not outpaths.is_own_file("hang_rank.json")


# ---------------------------------------------------------------- 10. a directory named like a rank file
def test_directory_named_like_a_rank_file_is_said_beside_a_partial_result(tmp_path):
    folder = tmp_path / "run"
    (folder / "rank4.json").mkdir(parents=True)
    shutil.copy(HEALTHY / "rank0.json.gz", folder / "rank0.json.gz")
    needle = f"{folder / 'rank4.json'}: a directory, not a rank file"
    for given in ([folder], [folder / "rank0.json.gz", folder / "rank4.json"]):  # in a folder; named
        out = tmp_path / f"out{len(given)}"
        line = warned(distprof("merge", *given, "-o", out, "--no-html"), needle, "skipped")
        assert line.removeprefix("distprof: warning: ") in json.loads((out / "summary.json").read_text())["warnings"]


def test_directory_named_like_a_rank_file_alone_is_an_error(tmp_path):
    (tmp_path / "rank4.json").mkdir()
    one_line(distprof("merge", tmp_path / "rank4.json", "-o", tmp_path / "out"),
             f"{tmp_path / 'rank4.json'}: a directory, not a rank file", "no input files left")
