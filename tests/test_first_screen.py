"""The first screen (issue 40): the text report fits the console's width with every table row on
one line, leads with the answer (step time, straggler, findings, checks), keeps many-rank tables
short, and prints names from traces escaped. Run as a user runs it: `python -m distprof` in a
subprocess, with COLUMNS set or ``--width``, stdout a pipe (so 100 columns when nothing is said)."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT
from kineto_fixtures import CommOp, collective_job
from nsys_fixtures import ddl_available

EVIL = "\x1b]0;evil\x07tp\x1b[2J"  # sets the terminal's title, then clears the screen
SEPARATOR = re.compile(r"^-+(?:  +-+)*$")  # the dashes under a "simple" table's titles


def distprof(*args: str, columns: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m distprof ARGS` with stdout a pipe and COLUMNS set (or removed: None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "OMPI_COMM_WORLD_SIZE")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    result = subprocess.run([sys.executable, "-m", "distprof", *args], capture_output=True, text=True, cwd=cwd,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def broken_rows(text: str, width: int) -> list[str]:
    """Every table row that is not one line within ``width`` whose cells sit in the columns of its
    titles: a line past the width, a row whose gaps between columns hold text, a row with an empty
    first cell or an indented line right under a table (a row's continuation)."""
    lines, problems = text.splitlines(), []
    for at, line in enumerate(lines):
        if not SEPARATOR.match(line):
            continue
        gaps = [i for i, char in enumerate(line) if char == " "]
        first = line.index(" ") if " " in line else len(line)
        for row in lines[at + 1:]:
            if not row.strip():
                break
            if len(row) > width:
                problems.append(f"over {width}: {row!r}")
            if any(i < len(row) and row[i] != " " for i in gaps):  # not on the grid: the table has ended
                if row[0] == " ":
                    problems.append(f"continuation under a table: {row!r}")
                break
            if not row[:first].strip():
                problems.append(f"row without its first cell: {row!r}")
    return problems


def widest(text: str) -> int:
    """The longest line's length in characters."""
    return max((len(line) for line in text.splitlines()), default=0)


def line_of(lines: list[str], start: str) -> int:
    """Index of the first line starting with ``start`` (a missing one fails the test)."""
    return next(i for i, line in enumerate(lines) if line.startswith(start))


def _merge_scale() -> ModuleType:
    """benchmarks/merge_scale.py, loaded once (test_merge_scale.py loads it the same way)."""
    if "merge_scale" not in sys.modules:
        spec = importlib.util.spec_from_file_location("merge_scale", ROOT / "benchmarks" / "merge_scale.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["merge_scale"] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules["merge_scale"]


def nsys_job(folder: Path, ranks: int) -> Path:
    """A ``ranks``-rank nsys job in the real nsys DDL (benchmarks/merge_scale.py's generator): two NCCL
    allreduces a step on their own stream, rank 3/4 of the way arriving 2 ms late at each."""
    ms = _merge_scale()
    ms.write_job(folder, ms.Job(ranks=ranks, kernels=200 * 10, steps=10, collectives=2))
    return folder


def kineto_job(folder: Path, ranks: int = 32, late: int = 5) -> Path:
    """A Kineto job of ``ranks`` ranks whose process group is named EVIL: two allreduces a step over
    6 steps, rank ``late`` arriving 250 us late at each (the others wait for it)."""
    ops = {rank: [CommOp("allreduce", EVIL, tuple(range(ranks)), 1 << 20, "Float",
                         step * 1000 + at + (250 if rank == late else 0), 100 if rank == late else 350)
                  for step in range(6) for at in (100, 500)] for rank in range(ranks)}
    collective_job(folder, ops, world_size=ranks, step_us=1000)
    return folder


needs_ddl = pytest.mark.skipif(not ddl_available(), reason="nsys DDL files absent")


@pytest.fixture(scope="module")
def job8(tmp_path_factory) -> Path:
    """8 ranks of nsys exports, written once for the module's tests."""
    return nsys_job(tmp_path_factory.mktemp("job8"), 8)


@pytest.fixture(scope="module")
def job32(tmp_path_factory) -> Path:
    """32 ranks of Kineto traces with a late rank and an EVIL group name, written once."""
    return kineto_job(tmp_path_factory.mktemp("job32"))


@needs_ddl
@pytest.mark.parametrize("columns, args, width", [(100, (), 100), (80, (), 80), (None, (), 100),
                                                  (200, ("--width", "120"), 120), (None, ("--width", "60"), 60)])
def test_an_8_rank_merge_fits_the_width_and_breaks_no_row(job8, tmp_path, columns, args, width) -> None:
    """COLUMNS, else 100 when stdout is not a terminal; --width over both."""
    result = distprof("merge", str(job8), "-o", "out", *args, columns=columns, cwd=tmp_path)
    assert widest(result.stdout) <= width, [line for line in result.stdout.splitlines() if len(line) > width]
    assert broken_rows(result.stdout, width) == []
    assert result.stdout.splitlines()[0] == f"{'Distributed Summary':-^{width}}"  # the banner takes the width
    assert "Rank " in result.stdout and "\nmedian " in result.stdout


def test_a_32_rank_merge_answers_in_its_first_25_lines(job32, tmp_path) -> None:
    """The Straggler line and the findings were at line 141 of a 32-rank merge. The job's steps are
    fixed 1 ms windows, so rank 5's lateness costs no step time and the replay would not confirm
    it a straggler: a floor of 0 keeps it, as its place on the screen is what this is about."""
    (tmp_path / "floor.yaml").write_text("skew:\n  straggler_min_step_fraction: 0\n")
    result = distprof("merge", str(job32), "-o", "out", "--config", "floor.yaml", columns=100, cwd=tmp_path)
    lines = result.stdout.splitlines()
    straggler, heading, first = (line_of(lines, "Straggler: rank 5"), line_of(lines, "Findings (ordered by"),
                                 line_of(lines, "  1. "))
    assert max(straggler, heading, first) < 25, "\n".join(lines[:30])
    assert "straggler: rank 5" in " ".join(" ".join(lines[first:first + 6]).split())  # its finding, first
    assert line_of(lines, "Checks: ") < line_of(lines, "Rank ")  # the checks, then the tables
    assert widest(result.stdout) <= 100 and broken_rows(result.stdout, 100) == []
    # the last lines repeat the top finding next to where the outputs were written
    top, wrote = line_of(lines, "top finding (1 of "), line_of(lines, "wrote out/summary.json")
    assert 0 < wrote - top <= 4 and "straggler: rank 5" in lines[top]


def test_many_ranks_show_min_median_max_and_the_outliers_all_with_all_ranks(job32, tmp_path) -> None:
    """Every rank printed three times buried the answer; the CSV and --all-ranks keep them all."""
    distprof("merge", str(job32), "-o", "out", "--no-html", columns=100, cwd=tmp_path)
    short = distprof("report", "out", columns=100, cwd=tmp_path).stdout
    rows = [line.split()[0] for line in short.splitlines() if re.match(r"^\d+ ", line)]
    assert "5" in rows and len(set(rows)) < 10, rows  # the straggler's row, not every rank's
    assert all(f"\n{stat} " in short for stat in ("min", "median", "max"))
    assert "32 ranks: min/median/max" in " ".join(short.split()) and "--all-ranks" in short
    every = distprof("report", "out", "--all-ranks", columns=100, cwd=tmp_path).stdout
    per_rank = every[every.index("Per rank"):every.index("Source")]
    assert {int(line.split()[0]) for line in per_rank.splitlines() if re.match(r"^\d+ ", line)} == set(range(32))
    assert widest(every) <= 100 and broken_rows(every, 100) == []
    with open(tmp_path / "out" / "ranks.csv", newline="") as handle:  # the CSV keeps every rank
        assert len(list(csv.DictReader(handle))) == 32


def test_names_with_control_characters_are_printed_escaped(job32, tmp_path) -> None:
    """A process group named with a title-setting and a screen-clearing sequence: merge, report and
    whatif print it escaped, and nothing they print holds a raw control character."""
    outputs = [distprof("merge", str(job32), "-o", "out", columns=80, cwd=tmp_path),
               distprof("report", "out", columns=80, cwd=tmp_path),
               distprof("whatif", "out", "--width", "80", cwd=tmp_path)]
    for result in outputs:
        shown = result.stdout + result.stderr
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown), repr(shown[:300])
    merged = outputs[0].stdout
    assert "\\x1b]0;evil\\x07tp\\x1b[2J" in merged and merged.count("\\x1b") >= 2
    assert broken_rows(merged, 80) == [] and widest(merged) <= 80


def test_the_printable_helper_escapes_what_a_terminal_acts_on() -> None:
    """C0/C1 controls, DEL and bidi overrides as escapes; a summary without them is not copied."""
    from distprof.names import printable, printable_all
    assert printable(EVIL) == "\\x1b]0;evil\\x07tp\\x1b[2J"
    assert printable("a\nb\tc\r\x9b\u202e") == "a\\nb\\tc\\r\\x9b\\u202e"
    plain = {"name": "ncclDevKernel", "ranks": [1, 2]}
    assert printable_all(plain) is plain  # nothing to escape: no copy
    assert printable_all({EVIL: [EVIL]}) == {printable(EVIL): [printable(EVIL)]}


def test_a_narrow_width_is_refused_by_name(tmp_path) -> None:
    """No table fits 20 columns: said in one line, before anything is read."""
    result = subprocess.run([sys.executable, "-m", "distprof", "report", str(tmp_path), "--width", "20"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--width" in result.stderr and "at least" in result.stderr


@pytest.mark.slow
def test_the_demo_fits_80_columns(tmp_path) -> None:
    """The very first command a user runs: its Checks table broke every row at any width."""
    result = distprof("demo", "--ranks", "2", "--steps", "4", "--out", "demo", columns=80, cwd=tmp_path)
    assert widest(result.stdout) <= 80 and broken_rows(result.stdout, 80) == []
    lines = result.stdout.splitlines()
    assert line_of(lines, "Checks: ") < line_of(lines, "Rank ") and "top finding" in result.stdout


def test_diff_fits_the_width_too(tmp_path):
    """`distprof diff` of two real DDP runs at COLUMNS=80 and --width 60: no line over the width."""
    data = ROOT / "tests" / "data" / "torch_ddp"
    for name in ("healthy", "late"):
        distprof("merge", str(data / name), "-o", name, "--no-html", columns=100, cwd=tmp_path)
    for columns, extra in ((80, []), (200, ["--width", "60"])):
        done = distprof("diff", "healthy", "late", "-o", "d", *extra, columns=columns, cwd=tmp_path)
        width = 60 if extra else columns
        assert "Top movers" in done.stdout and max(map(len, done.stdout.splitlines())) <= width
