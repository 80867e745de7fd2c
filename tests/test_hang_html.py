"""`distprof hang` writes OUT/hang.html next to hang.json, as merge writes report.html: the verdict, the waits and
the chain, the stacks across ranks (from distprof's watchdog files), the groups, the inputs and the next command,
all from hang.json's fields. Names from dumps reach neither the page nor the terminal raw: a group named
"<script>...\\x1b]0;x\\x07" is text in the page and escapes in the text. Run as a user runs it; the dumps are the
real ones of tests/data/flight_recorder (rank 3's files removed, as test_hang_missing_member does) and watchdog
files made as test_hang_stacks makes them."""

import html
import json
import shutil
import subprocess
import sys
from pathlib import Path

from test_hang_missing_member import DATA, ROOT, hang_cli, raw_entries, without
from test_hang_stacks import LIB, watchdog

HOSTILE = "<script>alert(1)</script>\x1b]0;x\x07"
HOSTILE_TEXT = "<script>alert(1)</script>\\x1b]0;x\\x07"  # as names.printable writes it
HOSTILE_HTML = "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b]0;x\\x07"  # and then HTML-escaped


def run(inputs: Path, out: Path, *extra: str) -> tuple[list[str], str]:
    """The text lines and hang.html of a run that must succeed."""
    result = hang_cli(str(inputs), "-o", str(out), *extra)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    page = out / "hang.html"
    return result.stdout.splitlines(), page.read_text(encoding="utf-8") if page.exists() else ""


def test_tp_dp_without_rank_3_has_verdict_waits_chain_groups_inputs_next(tmp_path: Path) -> None:
    """The scenario docs/hang.md shows: every section the text has is on the page, with the text's words, and the
    text's last lines say where the page is (then the next command, still last)."""
    folder = without(tmp_path, "tp_dp", "json", {3})
    out = tmp_path / "out"
    lines, page = run(folder, out)
    seq = max(e["collective_seq_id"] for e in raw_entries("tp_dp", 2) if e["process_group"][0] == "2")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<script" not in page
    assert "Hang: root rank 3 (from flight recorder; 3 ranks dumped of a world of at least 4)" in page
    assert f"rank 3 left no dump; rank 2 waits for it in all_reduce #{seq} of group 2 (inferred" in page
    verdict = page[page.index("<h2>Verdict</h2>"):page.index("<h2>Waiting</h2>")]
    assert '<tr><td class="l">rank 3</td><td class="l">not_dumped: left no dump</td><td class="l">2</td>' in verdict
    assert f"Chain: rank 0 -&gt; rank 2 (all_reduce #{seq} of group 3: never issued it) -&gt; rank 3" in page
    assert "0 → 2 → 3" in page  # rank 0's wait, its chain to the root
    for section in ("Verdict", "Waiting", "Chain", "Groups", "Inputs", "Next"):
        assert f"<h2>{section}</h2>" in page
    assert "<h2>Stacks</h2>" not in page  # Flight Recorder dumps carry no Python stacks
    assert "3 read, 0 cut short, 0 refused" in page and str(folder / "rank0.json") in page
    doc = json.loads((out / "hang.json").read_text())
    assert f'<pre class="next">{html.escape(doc["next"])}</pre>' in page
    assert lines[-2].startswith(f"wrote {out / 'hang.html'}") and lines[-1].startswith("Next: distprof hang ")
    assert lines[0] == f"wrote {out / 'hang.json'}"


def test_watchdog_files_give_the_stacks_section(tmp_path: Path) -> None:
    """Watchdog files carry stacks: the Stacks table holds each group of ranks, where, the library frame, root."""
    for rank in range(3):
        (tmp_path / f"hang_rank{rank}.json").write_text(watchdog(
            rank, ["/job/train.py:200 in main", "/job/train.py:88 in step", LIB], inside=True))
    (tmp_path / "hang_rank3.json").write_text(watchdog(3, ["/job/train.py:200 in main", "/job/data.py:41 in load"],
                                                       inside=False))
    _, page = run(tmp_path, tmp_path / "out")
    assert "Hang: root rank 3 (from distprof watchdog; 4 ranks dumped of a world of 4)" in page
    stacks = page[page.index("<h2>Stacks</h2>"):page.index("<h2>Inputs</h2>")]
    rows = stacks.split("<tr>")[2:]
    assert len(rows) == 2 and all(x in rows[0] for x in ("rank 3", "load", "data.py:41", "/job/data.py", "yes"))
    assert all(x in rows[1] for x in ("ranks 0-2", "step", "train.py:88", "wait (threading.py:327)", "allreduce"))
    assert '<pre class="next">sed -n 31,51p /job/data.py' in page


def hostile_dumps(tmp_path: Path) -> Path:
    """tp_dp without rank 3, its TP group "2" (the one rank 2 waits in) renamed to HOSTILE in every dump."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in range(3):
        doc = json.loads((DATA / "tp_dp" / f"rank{rank}.json").read_text())
        for entry in doc["entries"]:
            if entry["process_group"][0] == "2":
                entry["process_group"][0] = HOSTILE
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder


def test_a_hostile_group_name_is_escaped_in_the_text_and_the_page(tmp_path: Path) -> None:
    """A dump anyone can write names a group with markup and a terminal title sequence: text and page show it inert."""
    out = tmp_path / "out"
    lines, page = run(hostile_dumps(tmp_path), out)
    text = "\n".join(lines)
    assert not any(ch in text for ch in "\x1b\x07")
    assert f"of group {HOSTILE_TEXT} (inferred" in text
    assert f"Chain: rank 0 -> rank 2 (all_reduce #3 of group 3: never issued it) -> rank 3 (all_reduce #3 of group " \
           f"{HOSTILE_TEXT}: left no dump, inferred)" in lines
    assert not any(ch in page for ch in "\x1b\x07") and "<script" not in page
    assert page.count(HOSTILE_HTML) >= 5  # verdict sentence and row, the wait, the chain, the group
    assert f"<td class=\"l\">{HOSTILE_HTML}</td>" in page
    assert HOSTILE in {g["name"] for g in json.loads((out / "hang.json").read_text())["groups"]}  # the data as read


def test_hostile_stack_names_and_paths_are_escaped(tmp_path: Path) -> None:
    """A stack's function names and paths reach the terminal and the page escaped, the next command too."""
    for rank in range(3):
        (tmp_path / f"hang_rank{rank}.json").write_text(watchdog(rank, ["/job/train.py:88 in step"], inside=True))
    (tmp_path / "hang_rank3.json").write_text(watchdog(3, ["/job/<b>x\x1b[2J.py:41 in lo\x1b]0;t\x07ad"],
                                                       inside=False))
    lines, page = run(tmp_path, tmp_path / "out")
    assert "  rank 3: in lo\\x1b]0;t\\x07ad at <b>x\\x1b[2J.py:41 (step 5; root)" in lines
    assert lines[-1] == "Next: sed -n 31,51p '/job/<b>x\\x1b[2J.py'   (rank 3 is in lo\\x1b]0;t\\x07ad there; " \
                        "every thread's stack is in the hang_rank<r>.json files)"
    assert not any(ch in page for ch in "\x1b\x07") and "<b>x" not in page
    assert "lo\\x1b]0;t\\x07ad" in page and "&lt;b&gt;x\\x1b[2J.py:41" in page


def test_no_html_writes_none_and_says_none(tmp_path: Path) -> None:
    """--no-html, as merge's: only hang.json, and the text does not point at a page that is not there."""
    out = tmp_path / "out"
    lines, _ = run(without(tmp_path, "tp_dp", "pickle", {3}), out, "--no-html")
    assert sorted(p.name for p in out.iterdir()) == ["hang.json"]
    assert not any("hang.html" in line for line in lines) and lines[-1].startswith("Next: ")


def test_hang_html_that_is_a_folder_fails_first_in_one_line(tmp_path: Path) -> None:
    """hang.html is checked before the analysis, as hang.json is: one line, nothing written."""
    (tmp_path / "out" / "hang.html").mkdir(parents=True)
    result = hang_cli(str(DATA / "tp_dp"), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"distprof: error: {tmp_path / 'out' / 'hang.html'}: output file is an existing directory (remove it or choose "
        "another -o)"]
    assert not (tmp_path / "out" / "hang.json").exists()


def test_the_error_line_escapes_a_name_from_the_input(tmp_path: Path) -> None:
    """The error line quotes the input's name: its control characters are escapes, not acted on."""
    folder = tmp_path / "e\x1b]0;x\x07"
    folder.mkdir()  # no dump in it: the error quotes the name
    result = subprocess.run([sys.executable, "-m", "distprof", "hang", str(folder), "-o", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and result.stderr == \
        f"distprof: error: {tmp_path}/e\\x1b]0;x\\x07: no dump files (names ending in a rank number)\n"


def test_a_copy_of_the_real_dumps_needs_nothing_else(tmp_path: Path) -> None:
    """The page opens offline: no script, no fetched font, image or style."""
    folder = tmp_path / "d"
    shutil.copytree(DATA / "size", folder)
    _, page = run(folder, tmp_path / "out")
    assert "Hang: root rank 1" in page and "size_mismatch" in page
    assert not any(x in page for x in ("<script", "src=", "href=", "@import", "url("))
