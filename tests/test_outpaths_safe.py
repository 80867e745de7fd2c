"""Output paths from templates (issue 57, item 6): a value from the host fills one folder, never `.` or `..`; a
host name with control bytes is escaped where the paths are printed; an empty path, doubled braces and a
{rank} in a command that writes one folder are refused in one line, before any work."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA

import distprof
from distprof import outpaths
from distprof.events import SourceError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("host", "folder"), [("..", "__"), (".", "_"), ("", "_"), ("a/b", "a_b"),
                                              ("a\0b", "a_b"), ("...", "..."), ("node-1.cluster", "node-1.cluster")])
def test_a_host_value_is_one_folder_never_dot_or_dotdot(host, folder):
    assert outpaths.expand("o/{host}/r{rank}", 3, host) == Path("o") / folder / "r3"


def test_host_name_is_made_safe(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "..")
    assert outpaths.host_name() == "__"
    assert outpaths.expand("{host}", 0) == Path("__")


def test_a_host_named_dotdot_writes_under_out_not_its_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "..")
    with distprof.Profiler(out=str(tmp_path / "job" / "{host}"), quiet=True) as prof:
        prof.step()
    assert prof.out == tmp_path / "job" / "__" and (prof.out / "rank0.sqlite").exists()
    assert not (tmp_path / "rank0.sqlite").exists() and not (tmp_path / "summary.json").exists()


def test_a_host_name_with_control_bytes_is_escaped_in_the_wrote_and_next_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(socket, "gethostname", lambda: "h\x1b]0;owned\x07")
    monkeypatch.setenv("COLUMNS", "100")
    with distprof.Profiler(out=str(tmp_path / "{host}")) as prof:
        with distprof.phase("forward"):
            sum(range(1000))
        prof.step()
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown
    tail = shown[shown.index("\nwrote "):]  # the wrote lines, then next: (wrapped) with its four commands
    assert tail.count("h\\x1b]0;owned\\x07") == 6 and "\nnext:" in tail, tail
    assert (tmp_path / "h\x1b]0;owned\x07" / "summary.json").exists()  # the folder itself keeps the name


@pytest.mark.parametrize(("template", "words"), [
    ("", "output path '' is empty: name a folder"),
    ("o/{{rank}}", "o/{{rank}}: a brace outside {rank} and {host} in the output path (doubled braces are not an "
                   "escape here"),
    ("o/{rank", "o/{rank: a brace outside"),
    ("o/node{rnk}", "unknown placeholder {rnk} in the output path")])
def test_bad_templates_are_one_line_before_the_job(tmp_path, template, words):
    with pytest.raises(SourceError) as error:
        distprof.Profiler(out=template, quiet=True)
    assert words in str(error.value) and "\n" not in str(error.value)
    assert not list(Path.cwd().glob("{*")) and not list(tmp_path.iterdir())


def distprof_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distprof", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distprof: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["merge", "hang", "trace", "diff"])
def test_commands_writing_one_folder_refuse_an_empty_out_and_placeholders(tmp_path, command):
    inputs = {"merge": [str(DATA / "torch_ddp" / "healthy")], "trace": [str(DATA / "torch_ddp" / "healthy")],
              "hang": [str(DATA / "flight_recorder" / "missing")],
              "diff": [str(DATA / "torch_ddp" / "healthy"), str(DATA / "torch_ddp" / "healthy")]}[command]
    line = one_line(distprof_cli(command, *inputs, "-o", "", cwd=tmp_path))
    assert line == "distprof: error: output path '' is empty: name a folder (e.g. distprof_out, or . for this one)"
    line = one_line(distprof_cli(command, *inputs, "-o", str(tmp_path / "X" / "{rank}"), cwd=tmp_path))
    assert line == (f"distprof: error: -o {tmp_path / 'X' / '{rank}'}: {{rank}} and {{host}} name a folder per rank "
                    "of a running job (the Profiler's out, demo --out); this command writes one: name it without them")
    line = one_line(distprof_cli(command, *inputs, "-o", str(tmp_path / "{{rank}}"), cwd=tmp_path))
    assert "doubled braces are not an escape here" in line
    assert not list(tmp_path.iterdir())  # nothing written, not even a folder
