"""Console output fits a terminal (issue 29): prose wraps at 160 characters, tables fit 200, on the
repo's real inputs and on a wide job, and nothing a user acts on (rank numbers, figures) is cut."""

import gzip
import json

import pytest
from conftest import DATA, run_cli

from distprof.console import TABLE_WIDTH, WRAP, wrapped
from distprof.reports import tables


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


@pytest.mark.parametrize("inputs", ["torch_cpu", "torch_ddp/manual_sync", "demo_ranks", "nsys", "torch_flops"])
def test_merge_fits_on_real_inputs(inputs, tmp_path):
    """merge prints every section (summary, diagnosis, what-if, critical path, tables)."""
    unrelated = ["--allow-duplicate-ranks"] if inputs == "nsys" else []  # five exports: five runs, merged anyway
    merged = run_cli("merge", str(DATA / inputs), "-o", str(tmp_path / "out"), *unrelated)
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert widest(merged.stdout) <= TABLE_WIDTH  # stderr: one warning a line, greppable (the report wraps them)
    assert "Distributed Summary" in merged.stdout and "Rank" in merged.stdout


def test_the_other_commands_fit_on_the_widest_real_input(tmp_path):
    out = tmp_path / "out"
    assert run_cli("merge", str(DATA / "torch_cpu"), "-o", str(out)).returncode == 0
    texts = [run_cli("whatif", str(out)).stdout,
             run_cli("diff", str(out), str(DATA / "torch_ddp/healthy"), cwd=tmp_path).stdout]
    assert all(texts) and widest("\n".join(texts)) <= TABLE_WIDTH


def test_a_wide_table_is_split_with_its_row_labels_repeated():
    headers = ["Rank", "Steps", *(f"Figure {i}\n(ms)" for i in range(30))]
    rows = [[rank, 3, *(f"{1000 * rank + i:.2f}" for i in range(30))] for rank in range(20)]
    text = tables.fitted(rows, headers, keep=2)
    assert widest(text) <= TABLE_WIDTH
    parts = text.split("\n\n")
    assert len(parts) >= 2
    for part in parts:  # each part names its rows: every rank is on every part
        assert [line.split()[0] for line in part.splitlines()[3:]] == [str(rank) for rank in range(20)]
    cells = [cell for part in parts for line in part.splitlines()[3:] for cell in line.split()[2:]]
    assert sorted(cells) == sorted(f"{1000 * rank + i:.2f}" for rank in range(20) for i in range(30))


def test_prose_wraps_under_its_marker_and_keeps_every_word():
    line = "     -> " + " ".join(f"word{i}" for i in range(80))
    lines = wrapped(line)
    assert len(lines) > 1 and all(len(text) <= WRAP for text in lines)
    assert lines[0].startswith("     -> word0") and all(text.startswith(" " * 8 + "word") for text in lines[1:])
    assert " ".join(" ".join(lines).split()) == " ".join(line.split())


def test_sixteen_ranks_with_long_kernel_names_fit(tmp_path):
    """A wide job: 16 ranks whose kernels have 300-character template names."""
    folder = tmp_path / "job"
    folder.mkdir()
    long_name = "void at::native::elementwise_kernel<" + "float, " * 40 + "128, 4>(int, Functor)"
    for rank in range(16):
        events = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
                  {"ph": "X", "cat": "kernel", "name": long_name, "pid": 0, "tid": 7, "ts": 100 + rank, "dur": 500,
                   "args": {"device": 0, "stream": 7, "correlation": 1}},
                  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                   "pid": 0, "tid": 13, "ts": 650, "dur": 200 + 10 * rank,
                   "args": {"device": 0, "stream": 13, "correlation": 2}}]
        document = {"distributedInfo": {"rank": rank, "world_size": 16, "backend": "nccl"}, "traceEvents": events}
        with gzip.open(folder / f"rank{rank}.pt.trace.json.gz", "wt") as handle:
            json.dump(document, handle)
    result = run_cli("merge", str(folder), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert widest(result.stdout) <= TABLE_WIDTH
    assert "elementwise_kernel" in result.stdout                 # the name, cut, still says which kernel
    # above 8 ranks the per-rank tables show min/median/max and the outlying ranks (issue 40);
    # --all-ranks gives every rank its row
    assert "\nmedian " in result.stdout and "--all-ranks" in result.stdout
    every = run_cli("report", str(tmp_path / "out"), "--all-ranks")
    assert every.returncode == 0 and widest(every.stdout) <= TABLE_WIDTH, every.stderr[-2000:]
    assert all(f"\n{rank} " in every.stdout for rank in range(16))  # every rank has its row


def test_next_steps_wrap_between_commands_never_inside_one():
    from distprof.reports.text import next_steps
    out = "/a/very/long/output/folder/" + "x" * 60
    lines = next_steps(out).splitlines()
    assert len(lines) > 1 and all(len(line) <= WRAP for line in lines)
    assert all(line.count("`") % 2 == 0 for line in lines)        # every command whole on its line
    assert " ".join(" ".join(lines).split()).endswith(f"`distprof diff {out} OTHER_OUT` (did a change help)")


@pytest.mark.parametrize(("columns", "width"), [("0", 100), ("", 100), ("1000000000", 1000), ("9" * 20, 1000),
                                                ("²", 100), ("30", 40), ("132", 132)])
def test_width_from_columns_is_bounded_and_zero_is_unknown(monkeypatch, columns, width):
    """COLUMNS=0 (and a 0x0 pty, as Open MPI gives each rank when mpirun writes to a file) says nothing:
    100 columns. A width past any screen is capped (10**9 columns built rows until memory ran out), and
    a number of 20 digits is as wide as that; what is not a number is ignored (stdout is a pipe under pytest)."""
    from distprof.console import terminal_width
    monkeypatch.setenv("COLUMNS", columns)
    assert terminal_width() == width
    assert terminal_width(10**12) == 1000


def test_width_option_refuses_past_the_cap():
    import argparse

    from distprof.console import width_option
    assert width_option("1000") == 1000
    with pytest.raises(argparse.ArgumentTypeError, match="at most 1000 columns"):
        width_option("1000000000000")


def test_a_warning_is_one_write_with_its_line_end(monkeypatch):
    """Forked readers share stderr: a warning written in two pieces (print's text, then its line end) let
    another reader's warning land inside the line."""
    import sys

    from distprof import console

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    recorder = Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    console.warn("skipped a.json: not a trace")
    console.warn("line\nbreak")
    assert recorder.writes == ["distprof: warning: skipped a.json: not a trace\n",
                               "distprof: warning: line\\nbreak\n"]
