"""`distprof hang` reads one job (issue 38, point 3): dumps whose group configuration, world or time base
disagree are refused by name with exit 2, as a rank claimed by two different dumps is; when every input is
refused it is exit 2, not "No hang seen". Built from the real dumps of tests/data/flight_recorder (halves of
two scenarios; times shifted as a day-old /tmp/nccl_trace_rank_<r> would be) and synthetic NCCL-style dumps."""

import json
import shutil

import pytest
from test_hang_missing_member import DATA, hang_cli, scale_module

DAY_NS = 86400 * 10**9


def one_line_refusal(result) -> str:
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def copy(scenario: str, ranks, folder, name: str = "rank{r}.json", shift_ns: int = 0, keep=None) -> None:
    """The scenario's dumps of ``ranks`` into ``folder``, their calls moved by ``shift_ns``; ``keep``: the
    entries kept (a test that takes away what would tell the jobs apart first)."""
    folder.mkdir(exist_ok=True)
    for rank in ranks:
        doc = json.loads((DATA / scenario / f"rank{rank}.json").read_text())
        doc["entries"] = [e for e in doc["entries"] if keep is None or keep(rank, e)]
        for entry in doc["entries"]:
            entry["time_created_ns"] += shift_ns
        (folder / name.format(r=rank)).write_text(json.dumps(doc))


def no_barrier(rank: int, entry: dict) -> bool:
    return not entry["profiling_name"].endswith(":barrier")


def test_two_jobs_halves_are_refused_by_their_first_barrier(tmp_path):
    # ranks 0-1 of the TP/DP job, 2-3 of the missing-collective job, run 98 s apart: rank 2 went on past the
    # world's barrier before rank 1 entered it
    copy("tp_dp", (0, 1), tmp_path / "d")
    copy("missing", (2, 3), tmp_path / "d")
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    assert line == (f"distprof: error: not one job: rank 2 ({tmp_path / 'd' / 'rank2.json'}) went on past barrier #1 "
                    f"of group 0 1.6 min before rank 1 ({tmp_path / 'd' / 'rank1.json'}), a member, entered it: a "
                    "barrier returns once every member entered it, so these are two jobs' dumps: give the dumps of "
                    "one job")


@pytest.mark.parametrize("first, second", [("missing", "size"), ("a2a_missing", "a2a_stall"), ("size", "tp_dp")])
def test_halves_of_two_same_shaped_jobs_are_refused(tmp_path, first, second):
    """Issue 59: the same groups, kinds and sequence numbers, recorded 30-98 s apart, were read as one job
    ("root ranks 0-2"): every split of two such jobs' dumps is refused."""
    for ranks in [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0,), (1, 2, 3))]:
        folder = tmp_path / "-".join(map(str, ranks[0]))
        copy(first, ranks[0], folder)
        copy(second, ranks[1], folder)
        one_line_refusal(hang_cli(str(folder), "-o", str(folder / "out")))


def test_a_world_member_with_no_entry_of_a_world_collective_another_completed(tmp_path):
    """Every rank is a member of the world group: rank 3's dump reaches back past the world's all_reduce rank
    0 completed, yet holds no entry of the world group at all (the issue's mixes: "root rank 4 ... world
    of at least 5", a rank that does not exist). Barriers taken away, so that rule is what refuses."""
    copy("a2a_missing", (0, 1, 2), tmp_path / "d", keep=no_barrier)
    copy("a2a_missing", (3,), tmp_path / "d", keep=lambda rank, e: e["process_group"][1] != "default_pg")
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    assert "completed all_reduce #" in line and "of group 0, which rank 3" in line
    assert "it has no entry of that group" in line


ALIGNED_NS = -98_180_000_000  # moves the TP/DP job's calls onto the missing-collective job's, 98 s earlier


def test_two_jobs_halves_are_refused_by_name(tmp_path):
    # ranks 0-1 of the TP/DP job, moved onto the time of the missing-collective job's ranks 2-3 (so their
    # barriers overlap): the world's all_reduce #3 completed on rank 2, which rank 0, a member of the world,
    # had not issued when it dumped
    copy("tp_dp", (0, 1), tmp_path / "d", shift_ns=ALIGNED_NS)
    copy("missing", (2, 3), tmp_path / "d")
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    assert line == (f"distprof: error: not one job: rank 2 ({tmp_path / 'd' / 'rank2.json'}) completed all_reduce #3 "
                    f"of group 0, which rank 0 ({tmp_path / 'd' / 'rank0.json'}), a member, had not issued when it "
                    "dumped (its last there: #1): two jobs' dumps, or one job's taken at different times: give the "
                    "dumps of one job")
    assert not (tmp_path / "out" / "hang.json").exists()


def test_yesterdays_dumps_are_refused_by_their_time(tmp_path):
    # the same job's halves, one shifted by a day (stale /tmp/nccl_trace_rank_<r> of an earlier run): its barrier
    # #1 completed, yet was called a day apart, longer than its 30 min timeout
    copy("size", (0, 1), tmp_path / "d")
    copy("size", (2, 3), tmp_path / "d", shift_ns=-DAY_NS)
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    called = {r: json.loads((DATA / "size" / f"rank{r}.json").read_text())["entries"][0]["time_created_ns"]
              for r in range(4)}
    early = min((2, 3), key=called.get)
    late = max((0, 1), key=called.get)
    assert line.startswith(f"distprof: error: not one job: #1 of group 0 completed, yet rank {early} "
                           f"({tmp_path / 'd' / f'rank{early}.json'}) called it 1.0 d before rank {late} "
                           f"({tmp_path / 'd' / f'rank{late}.json'}), longer than its timeout of 30.0 min")


def test_two_clocks_are_refused(tmp_path):
    copy("missing", (0, 1), tmp_path / "d")
    copy("missing", (2, 3), tmp_path / "d", shift_ns=-1_795_000_000 * 10**9)  # a monotonic clock, not unix time
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    assert "are unix time but those of" in line and "another clock" in line


def test_group_configuration_and_world_disagreeing_are_refused(tmp_path):
    scale = scale_module()
    scale.write_job(tmp_path / "a", 8, tp=2, steps=2, stuck=7)
    scale.write_job(tmp_path / "b", 4, tp=2, steps=2, stuck=3)
    folder = tmp_path / "d"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(tmp_path / "a" / f"rank{rank}.json", folder)
    for rank in (2, 3):
        shutil.copy(tmp_path / "b" / f"rank{rank}.json", folder)
    line = one_line_refusal(hang_cli(str(folder), "-o", str(tmp_path / "out")))
    assert line == (f"distprof: error: not one job: group 0 is ranks 0-7 in {folder / 'rank0.json'} but ranks 0-3 in "
                    f"{folder / 'rank2.json'}: give the dumps of one job")


def watchdog(rank: int, world: int, pid: int = 100) -> str:
    return json.dumps({"distprof_hang": 1, "rank": rank, "world_size": world, "pid": pid, "hostname": "h",
                       "step": 5, "open_ranges": [{"name": "allreduce", "category": "COMMUNICATION", "group": None,
                                                   "thread": "MainThread", "elapsed_ns": 10**9}],
                       "flight_recorder": None, "stacks": []})


def test_watchdog_files_of_two_worlds_are_refused(tmp_path):
    (tmp_path / "hang_rank0.json").write_text(watchdog(0, 4))
    (tmp_path / "hang_rank1.json").write_text(watchdog(1, 8))
    line = one_line_refusal(hang_cli(str(tmp_path), "-o", str(tmp_path / "out")))
    assert line.endswith(f"not one job: a world of 4 ranks in {tmp_path / 'hang_rank0.json'} but of 8 in "
                         f"{tmp_path / 'hang_rank1.json'}: give the dumps of one job")


def test_a_rank_claimed_by_two_runs_is_refused(tmp_path):
    copy("tp_dp", range(4), tmp_path / "d")
    copy("missing", (2,), tmp_path / "d", name="nccl_trace_rank_{r}")
    line = one_line_refusal(hang_cli(str(tmp_path / "d"), "-o", str(tmp_path / "out")))
    assert line == (f"distprof: error: rank 2 is claimed by two inputs: {tmp_path / 'd' / 'nccl_trace_rank_2'} and "
                    f"{tmp_path / 'd' / 'rank2.json'} (barrier #1 of group 0 called at two different times; two runs "
                    "in one folder?): give one run's files")


def test_one_dump_in_both_forms_is_one_rank(tmp_path):
    result = hang_cli(str(DATA / "tp_dp"), "-o", str(tmp_path / "out"))  # rank<r>.json and nccl_trace_rank_<r>
    assert result.returncode == 0 and "Inputs: 8 read, 0 cut short, 0 refused" in result.stdout


def test_two_watchdog_processes_for_one_rank_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "hang_rank0.json").write_text(watchdog(0, 2, pid=100))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "hang_rank0.json").write_text(watchdog(0, 2, pid=200))
    line = one_line_refusal(hang_cli(str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "out")))
    assert "rank 0 is claimed by two inputs" in line and "written by 100@h and by 200@h" in line


@pytest.mark.parametrize("count", [1, 3])
def test_every_input_refused_is_exit_2_with_each_named(tmp_path, count):
    for rank in range(count):
        (tmp_path / f"rank{rank}.json").write_text("{not json")
    result = hang_cli(str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "No hang seen" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == (1 if count == 1 else count + 1)
    for rank in range(count):
        assert sum(f"rank{rank}.json: not valid JSON" in line for line in lines) == 1
    assert lines[-1].startswith("distprof: error: ")
    assert not (tmp_path / "out" / "hang.json").exists()
