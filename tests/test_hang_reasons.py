"""The hang analysis returns reason codes and figures, never sentences (issue 37, item 2): why the inputs
are not one job's and the notes are Reasons; reports/hang_report.py words them, and `distprof hang` shows
the words in its error, hang.json, the text and hang.html alike."""

import inspect
import json

import pytest
from test_hang_missing_member import DATA, hang_cli, scale_module
from test_hang_one_job import ALIGNED_NS, copy, watchdog

from distprof.analyses import hang
from distprof.reports import hang_report
from distprof.sources import flight_recorder as fr
from distprof.typed import Reason


def dumps_of(folder) -> list[fr.RankDump]:
    return fr.read_all([str(folder)])[0]


def test_one_job_is_none_and_a_clash_a_reason_worded_by_the_report(tmp_path):
    assert hang.one_job(dumps_of(DATA / "tp_dp")) is None
    copy("tp_dp", (0, 1), tmp_path / "d", shift_ns=ALIGNED_NS)
    copy("missing", (2, 3), tmp_path / "d")
    clash = hang.one_job(dumps_of(tmp_path / "d"))
    path = str(tmp_path / "d" / "rank{}.json")
    assert clash == Reason("moment_clash", {"rank": 2, "path": path.format(2), "kind": "all_reduce", "seq": 3,
                                            "group": "0", "member": 0, "member_path": path.format(0),
                                            "member_seq": 1})
    assert hang_report.text(clash) == (
        f"rank 2 ({path.format(2)}) completed all_reduce #3 of group 0, which rank 0 ({path.format(0)}), a "
        "member, had not issued when it dumped (its last there: #1): two jobs' dumps, or one job's taken at "
        "different times")


def test_every_clash_code_has_words():
    figures = {"rank": 1, "path": "a", "kind": "barrier", "seq": 2, "group": "0", "member": 3,
               "member_path": "b", "member_seq": 1, "ranks": (0, 1), "other_ranks": tuple(range(100)),
               "other_path": "b", "desc": "x", "other_desc": "y", "ranks_path": "b", "world": 4,
               "other_world": 8, "world_path": "b", "unix_path": "a", "early": 0, "early_path": "a",
               "late": 1, "late_path": "b", "apart_ns": 90 * 10**9, "timeout_ns": 60 * 10**9,
               "after_ns": 2 * 10**9, "stated": 10**5, "dumps": 2, "found": 2, "completed": True, "sent": 60,
               "received": 61, "sender": 0, "receiver": 3, "given": 2, "before_ns": 98 * 10**9}
    for code, words in hang_report.WORDS.items():  # each with the figures its words take
        assert hang_report.text(Reason(code, {name: figures[name] for name in inspect.signature(words).parameters}))
    def reason(code: str) -> Reason:
        return Reason(code, {name: figures[name] for name in inspect.signature(hang_report.WORDS[code]).parameters})
    assert "ranks 0-63, ... (100)" in hang_report.text(reason("group_ranks_clash"))
    assert "called it 1.5 min before rank 1 (b), longer than its timeout of 1.0 min" in \
        hang_report.text(reason("called_apart"))


def test_no_rank_to_name_note_is_a_reason_and_shown_in_words(tmp_path):
    # every rank issued the last all_reduce and none completed it: no rank to name
    scale_module().write_job(tmp_path / "d", 4, tp=0, steps=2, stuck=99)
    result = hang.analyse(dumps_of(tmp_path / "d"))
    assert result.notes == [Reason("no_rank_to_name", {"group": "0", "kind": "all_reduce", "seq": 3})]
    with pytest.raises(TypeError, match="never worded"):
        result.to_json()
    words = ("every dumped member of group 0 issued all_reduce #3 and it never completed: no rank to name (a "
             "fault in the collective itself, or a member the dumps do not show)")
    assert hang_report.worded(result).to_json()["notes"] == [words]
    shown = hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out"))
    assert shown.returncode == 0, shown.stderr
    assert f"Note: {words}" in shown.stdout.splitlines()
    assert json.loads((tmp_path / "out" / "hang.json").read_text())["notes"] == [words]
    assert f"<li>{words}</li>" in (tmp_path / "out" / "hang.html").read_text()


def test_a_corrupt_world_size_note_is_a_reason(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"hang_rank{rank}.json").write_text(watchdog(rank, 100000))
    world, stated, notes = hang.world_of(dumps_of(tmp_path), None)
    assert (world, stated) == (2, False)
    assert notes == [Reason("world_not_trusted", {"stated": 100000, "dumps": 2, "found": 2})]
    shown = hang_cli(str(tmp_path), "-o", str(tmp_path / "out"))
    words = "world_size 100000 stated by the dumps but only 2 rank(s) found; using 2"
    assert f"Note: {words}" in shown.stdout.splitlines()
    assert json.loads((tmp_path / "out" / "hang.json").read_text())["notes"] == [words]
