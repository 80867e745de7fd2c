"""The text a new user reads first (issue 54, its smaller items): repeated warnings said once, the
cores warning printed whole once, live lines within the console, no negative zero, the diff's interval
caveat only under an interval, every written file named, a folder of traces given to `report` answered
with the merge to run, the answer's terms explained. Run as a user runs it: the installed `distprof`
in a subprocess, stdout a pipe, COLUMNS set."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA

from distprof.reports import diff_report, format, live_text
from distprof.reports.findings import straggler_line
from distprof.sections.diff import StepTime

DISTPROF = Path(sys.executable).with_name("distprof")  # .venv/bin/distprof beside the venv's python


def distprof(*args: str, columns: int = 100, cwd: Path | None = None, timeout: float = 180
             ) -> subprocess.CompletedProcess:
    """`distprof ARGS` as a user runs it, COLUMNS set, stdout a pipe."""
    env = {k: v for k, v in os.environ.items() if k != "OMPI_COMM_WORLD_SIZE"}
    env["COLUMNS"] = str(columns)
    return subprocess.run([str(DISTPROF), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


# ---------------------------------------------------------------- repeated warnings, written files

def test_a_warning_about_many_files_is_one_line_with_the_count_and_the_first_names():
    said = ["merged anyway: two runs"] + [f"/r/run{i}_rank{r}.json.gz: rank {r} appears twice; renumbered"
                                          for i in (2, 3) for r in (0, 1)] + ["a.json: bad", "b.json: bad"]
    assert format.grouped_warnings(said) == [
        "merged anyway: two runs",
        "4 files: rank N appears twice; renumbered (first: /r/run2_rank0.json.gz, /r/run2_rank1.json.gz, "
        "/r/run3_rank0.json.gz, ...; each one in summary.json's warnings)",
        "a.json: bad", "b.json: bad"]  # two files: each said, as before
    same = [f"/r/{n}.json: not valid JSON (line 1)" for n in "abc"]
    assert format.grouped_warnings(same) == [
        "3 files: not valid JSON (line 1) (first: /r/a.json, /r/b.json, /r/c.json; each one in summary.json's "
        "warnings)"]


def test_merge_of_four_runs_says_the_renumbering_once_and_names_every_file_it_wrote(tmp_path):
    """8 files of 4 runs (--allow-duplicate-ranks): 6 renumbered files are one warning line, not 6 before
    the answer; the closing lines name ranks.csv and collectives.csv beside summary.json."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for run in range(4):
        for rank in (0, 1):
            shutil.copy(DATA / "torch_ddp" / "healthy" / f"rank{rank}.json.gz", folder / f"run{run}_rank{rank}.json.gz")
    done = distprof("merge", "runs", "-o", "out", "--no-html", "--allow-duplicate-ranks", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if "appears twice" in line]
    assert said == ["! 6 files: rank N appears twice; renumbered (first: runs/run1_rank0.json.gz,"], done.stdout
    assert "runs/run1_rank1.json.gz, runs/run2_rank0.json.gz, ...; each one in summary.json's warnings" in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sum("appears twice; renumbered" in w for w in summary["warnings"]) == 6  # every one kept there
    assert "\nwrote out/summary.json, ranks.csv, collectives.csv\n" in done.stdout
    assert all((tmp_path / "out" / name).exists() for name in ("summary.json", "ranks.csv", "collectives.csv"))
    from distprof.reports import html
    from distprof.results import Summary
    page = html.render(Summary.from_json(summary))  # report.html's Warnings group them the same way
    assert page.count("appears twice") == 1 and "6 files: rank N appears twice; renumbered" in page


def test_the_source_column_prints_a_relative_path_as_given(tmp_path):
    """A deep relative folder: its path, not the absolute one cut in the middle, and no line past COLUMNS."""
    deep = tmp_path / "very" / "long" / "directory" / "name" / "for" / "the" / "rank" / "files" / "of" / "the" / "job"
    deep.mkdir(parents=True)
    for rank in (0, 1):
        shutil.copy(DATA / "torch_ddp" / "late" / f"rank{rank}.json.gz", deep / f"rank{rank}.json.gz")
    relative = str(deep.relative_to(tmp_path))
    for columns in (200, 100):
        done = distprof("merge", relative, "-o", "out", "--no-html", columns=columns, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        rows = [line.split()[1] for line in done.stdout.splitlines()
                if line.startswith(("0 ", "1 ")) and ".json.gz" in line]
        assert len(rows) == 2 and all(row.startswith("very/long/") for row in rows), done.stdout
        assert max(len(line) for line in done.stdout.splitlines()) <= columns
        if columns == 200:  # room for it: whole
            assert rows == [f"{relative}/rank0.json.gz", f"{relative}/rank1.json.gz"]
    assert "(first:" not in done.stdout  # nothing grouped where nothing repeats


# ---------------------------------------------------------------- the demo: live lines, the cores warning

@pytest.mark.slow
def test_demo_live_lines_fit_and_the_cores_warning_is_printed_whole_once(tmp_path):
    """A 2-rank demo with the live view at 80 columns: every line within 80 (a live line went to 165),
    the written files named; its rank files then say 1 core (ranks outnumber the cores on any machine):
    the merge prints the cores sentence once, and the unpriced finding refers to it."""
    done = distprof("demo", "--ranks", "2", "--steps", "6", "--live-every", "3", "--comm", "serial", "--out", "d",
                    columns=80, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    live = [line for line in lines if line.startswith("[distprof live] steps")]
    assert len(live) >= 3 and max(len(line) for line in lines) <= 80, done.stdout
    assert any(line.startswith(live_text.HANG) and "exposed comm" in line for line in lines)  # a continuation
    assert "wrote d/summary.json, ranks.csv, collectives.csv" in done.stdout
    for rank in (0, 1):
        with sqlite3.connect(tmp_path / "d" / f"rank{rank}.sqlite") as db:
            db.execute("UPDATE distprof_meta SET value = '1' WHERE key = 'cpus'")
    merged = distprof("merge", "d", "-o", "m", "--no-html", columns=120, cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr[-3000:]
    words = " ".join(merged.stdout.split())  # lines unwrapped
    assert words.count("frees a core for the others") == 1, merged.stdout
    assert words.index("! Ranks outnumber the cores of their host (2 ranks on") < words.index("Steps:")
    # every unpriced finding (how many depends on the run: serialized comm, an imbalance) refers to the warning
    # (the straggler line, where a rank is named on these shared cores, says it in parentheses)
    refers = sum(words.count(f"saving not predicted{sep}ranks outnumber their host's cores (see the warning on cores)")
                 for sep in (": ", " ("))
    assert refers >= 1 and refers == words.count("saving not predicted"), merged.stdout


# ---------------------------------------------------------------- numbers: no negative zero

def test_no_number_prints_a_negative_zero():
    assert [format.fixed(v, spec) for v, spec in ((-0.0001, ".1f"), (-0.0001, "+.1f"), (-0.4, "+.0f"),
                                                  (-1.4, "+.0f"), (-0.00001, ".1%"), (float("-inf"), ".1f"))] \
        == ["0.0", "+0.0", "+0", "-1", "0.0%", "-inf"]


def _summary_copy(source: Path, to: Path, edit) -> Path:
    content = json.loads((source / "summary.json").read_text())
    edit(content)
    to.mkdir()
    (to / "summary.json").write_text(json.dumps(content))
    return to


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> Path:
    """A merge of the real DDP job with a late rank (its straggler line, its collectives)."""
    out = tmp_path_factory.mktemp("late") / "out"
    done = distprof("merge", str(DATA / "torch_ddp" / "late"), "-o", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_whatif_prints_a_saving_that_rounds_to_nothing_as_0_0_percent(merged, tmp_path):
    def tiny_loss(content):
        measured = content["whatif"]["measured_step_ns"]
        for scenario in content["whatif"]["scenarios"]:
            if scenario["applies"]:
                scenario.update(saving_ns=-10_000, predicted_step_ns=measured + 10_000)
    side = _summary_copy(merged, tmp_path / "tiny", tiny_loss)
    done = distprof("whatif", str(side))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-0.0%" not in done.stdout and " 0.0% " in done.stdout and "-0.01" in done.stdout, done.stdout


def test_diff_prints_a_change_that_rounds_to_nothing_as_plus_0_percent(merged, tmp_path):
    def slightly_less(content):
        for rank in content["ranks"]:
            rank["computation_ns"] = int(rank["computation_ns"] * 0.998)
    after = _summary_copy(merged, tmp_path / "after", slightly_less)
    done = distprof("diff", str(merged), str(after), "-o", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-0%" not in done.stdout and "-0.0" not in done.stdout and " +0%" in done.stdout, done.stdout


def test_diff_says_more_than_this_interval_only_under_an_interval(merged, tmp_path):
    def three_steps(content):
        steps = content["tables"]["merged"]["steps"]
        for series in ("step", "min_ns", "median_ns", "max_ns", "max_rank"):  # each a step long (issue 57)
            steps[series] = steps[series][:3]
    few = _summary_copy(merged, tmp_path / "few", three_steps)
    done = distprof("diff", str(few), str(few), "-o", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "too few steps for an interval" in done.stdout and "interval)" not in done.stdout, done.stdout
    assert "one run a side: the run-to-run noise is not measured; for a verdict" in done.stdout.replace("\n  ", " ")
    def step(reason: str | None) -> StepTime:
        return StepTime(before_median_ns=None, after_median_ns=None, since_step=None, delta_ns=None, relative=None,
                        ci_low_ns=None, ci_high_ns=None, significant=False, excludes_zero=False, min_change=0.05,
                        steps_before=0, steps_after=0, level=0.95, resamples=0, seed=0, min_steps=5, reason=reason,
                        before_steps_ns=[], after_steps_ns=[])
    assert diff_report.BEYOND_INTERVAL in diff_report.one_run_line(step(None))
    assert diff_report.one_run_line(step("no_steps")) == diff_report.one_run_line(None)


# ---------------------------------------------------------------- report DIR of traces

def test_report_on_a_folder_of_traces_says_which_merge_to_run(tmp_path):
    shutil.copytree(DATA / "torch_ddp" / "late", tmp_path / "traces")
    done = distprof("report", "traces", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "distprof: error: traces: no summary.json here, but 2 trace file(s): a folder of rank files, not a merge's "
        "output: run `distprof merge traces -o OUT` first, then `distprof report OUT`"]
    (tmp_path / "empty").mkdir()
    assert "empty/summary.json: cannot read (No such file or directory)" in distprof("report", "empty",
                                                                                      cwd=tmp_path).stderr


# ---------------------------------------------------------------- the answer's terms, explained where printed

def test_side_threshold_offsets_and_count_are_explained_where_printed(merged):
    done = distprof("report", str(merged))
    text = " ".join(done.stdout.split())  # lines unwrapped
    assert "late in 8/8 steps (late: arriving over " in text and " ms after the median rank); side host (its " \
        "collective calls are issued late); ## forward ##" in text, text
    assert "offsets to rank 0's clock: 1 rank(s) same host (a host's ranks share one clock)" in text
    assert "Count: the collectives (one per call across the group's ranks). Wait share" in text


def test_the_straggler_line_explains_a_device_side_and_an_unknown_one(merged):
    from distprof.reports import export, findings
    straggler = findings.worded(export.read_summary(merged)).skew.straggler
    from msgspec.structs import replace

    def t(ns):
        return f"{ns / 1e6:.2f} ms"
    assert "side device (issued on time, its GPU work starts late)" in straggler_line(replace(straggler, side="device"),
                                                                                      t)
    assert "side unknown (not known: GPU work without its launches in the trace)" in straggler_line(
        replace(straggler, side=None), t)


def test_live_lines_break_between_fields_within_the_width():
    line = ("[distprof live] steps 0-3 rank 0: step 322.0 · comm 76.2 · comp 253.9 · overlap 0.0 (0%) · exposed comm "
            "76.2 ms/step")
    assert live_text.fitted([line], 80) == ["[distprof live] steps 0-3 rank 0: step 322.0 · comm 76.2 · comp 253.9",
                                            "    overlap 0.0 (0%) · exposed comm 76.2 ms/step"]
    assert live_text.fitted([line], 200) == [line]
    alert = "[distprof live] ALERT steps 16-19: straggler rank 1 (costs 5.0 ms/step (10%); named in 2 windows in a row)"
    assert [len(part) <= 60 for part in live_text.fitted([alert], 60)] == [True, True]
