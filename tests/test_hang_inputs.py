"""`distprof hang` inputs (issue 57, item 7): two jobs' dumps told apart by what they state about their groups;
--world-size used, or refused in one line when the dumps contradict it; one file named twice read once; the Groups
line when every member issued. Real gloo dumps of tests/data/flight_recorder, mixed in a tmp folder."""

import json
import shutil

import pytest
from test_hang_missing_member import DATA, hang_cli
from test_hang_one_job import copy, one_line_refusal


def first_call_ns(scenario: str) -> int:
    return min(e["time_created_ns"] for r in range(4)
               for e in json.loads((DATA / scenario / f"rank{r}.json").read_text())["entries"])


@pytest.mark.parametrize(("first", "second"), [("a2a_stall", "missing"), ("a2a_missing", "missing"),
                                               ("missing", "a2a_missing")])
def test_two_jobs_stating_other_members_are_exit_2_naming_one_file_of_each(tmp_path, first, second):
    # ranks 0-1 of one job, 2-3 of another, moved onto the first one's clock: only what they state tells them
    # apart (gloo's unnamed pg_config group: the world's ranks in a job without subgroups, none once there are);
    # each was rc 0: a2a_stall + missing "root ranks 1-2", a2a_missing + missing "root ranks 2, 4"
    folder = tmp_path / "d"
    copy(first, (0, 1), folder)
    copy(second, (2, 3), folder, shift_ns=first_call_ns(first) - first_call_ns(second))
    line = one_line_refusal(hang_cli(str(folder), "-o", str(tmp_path / "out")))
    stated = {"missing": "ranks 0-3"}
    one, other = (stated.get(scenario, "stated with no ranks") for scenario in (first, second))
    assert line == (f"distprof: error: not one job: pg_config's unnamed group is {one} in {folder / 'rank0.json'} "
                    f"but {other} in {folder / 'rank2.json'}: give the dumps of one job")
    assert not (tmp_path / "out").exists()


def test_each_real_job_alone_is_still_one_job(tmp_path):
    for scenario in ("a2a_missing", "a2a_rows", "a2a_stall", "missing", "size", "tp_dp"):
        result = hang_cli(str(DATA / scenario), "-o", str(tmp_path / scenario), "--no-html")
        assert result.returncode == 0 and "Inputs: 8 read" in result.stdout, (scenario, result.stderr)


@pytest.mark.parametrize(("world", "words"), [
    (2, "--world-size 2: rank 2 left a dump ({p}), outside a world of 2 ranks: give the job's world size, or leave "
        "it out"),
    (3, "--world-size 3: rank 3 left a dump ({p}), outside a world of 3 ranks")])
def test_world_size_the_dumps_contradict_is_refused_in_one_line(tmp_path, world, words):
    copy("missing", range(4), tmp_path / "d")
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "--world-size", str(world), "-o", str(tmp_path / "out")))
    rank = int(words.split("rank ")[1].split()[0])
    assert line.startswith("distprof: error: " + words.format(p=tmp_path / "d" / f"rank{rank}.json")), line


def test_world_size_against_a_stated_world_is_refused(tmp_path):
    doc = json.loads((DATA / "missing" / "rank0.json").read_text())
    doc["pg_config"] = {"0": {"desc": "default_pg", "name": "0", "ranks": "[0, 1, 2, 3]"}}
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    line = one_line_refusal(hang_cli(str(tmp_path / "rank0.json"), "--world-size", "8", "-o", str(tmp_path / "out")))
    assert line == (f"distprof: error: --world-size 8: {tmp_path / 'rank0.json'} states a world of 4 ranks: give "
                    "--world-size 4, or leave it out")


def test_world_size_that_fits_is_used(tmp_path):
    copy("missing", range(4), tmp_path / "d")
    result = hang_cli(str(tmp_path / "d"), "--world-size", "6", "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 0, result.stderr
    assert "4 ranks dumped of a world of 6)" in result.stdout and "root ranks 2, 4-5" in result.stdout
    assert json.loads((tmp_path / "out" / "hang.json").read_text())["world_size"] == 6


def doubled_dump(path, scenario="missing", rank=0):
    """A real dump with its first entry recorded again a moment later (one (group, seq) twice in one dump)."""
    doc = json.loads((DATA / scenario / f"rank{rank}.json").read_text())
    again = dict(doc["entries"][0], time_created_ns=doc["entries"][0]["time_created_ns"] + 1000)
    doc["entries"].append(again)
    path.write_text(json.dumps(doc))


def test_one_file_named_twice_is_read_once(tmp_path):
    folder = tmp_path / "D"
    folder.mkdir()
    doubled_dump(folder / "rank0.json")  # was "rank 0 is claimed by two inputs: D/rank0.json and D/rank0.json"
    for given in ([str(folder / "rank0.json")] * 2, [str(folder), str(folder / "rank0.json")],
                  [str(folder / "rank0.json"), str(tmp_path / "D" / ".." / "D" / "rank0.json")]):
        result = hang_cli(*given, "-o", str(tmp_path / "out"), "--no-html")
        assert result.returncode == 0, result.stderr
        assert "Inputs: 1 read, 0 cut short, 0 refused" in result.stdout


def test_one_dump_copied_under_two_names_is_one_rank(tmp_path):
    doubled_dump(tmp_path / "rank0.json")
    shutil.copy(tmp_path / "rank0.json", tmp_path / "nccl_trace_rank_0.json")
    result = hang_cli(str(tmp_path), "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 0 and "Inputs: 2 read, 0 cut short, 0 refused" in result.stdout, result.stderr


def test_groups_line_when_every_member_issued(tmp_path):
    copy("missing", (0, 1), tmp_path / "d")  # the world of 2 given: both issued all_reduce #4, none completed it
    result = hang_cli(str(tmp_path / "d"), "--world-size", "2", "-o", str(tmp_path / "out"), "--no-html")
    assert "  group 0 (ranks 0-1): all completed #3; #4 all_reduce issued by ranks 0-1 (scheduled); every member " \
           "issued it\n" in result.stdout
    assert "never by none" not in result.stdout


def test_groups_line_when_every_dumped_member_issued(tmp_path):
    copy("tp_dp", (0, 1, 2), tmp_path / "d")  # rank 3 left no dump: inferred
    result = hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out"), "--no-html")
    assert ("  group 2 (rank 2 as the dumps show): all completed #2; #3 all_reduce issued by rank 2 (scheduled); "
            "every dumped member issued it; a member without a dump inferred: rank 3") in result.stdout
    assert "never by none" not in result.stdout
