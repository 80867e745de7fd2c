"""Stacks across ranks (issue 38, point 4): distprof's watchdog files carry each thread's Python stack; `distprof
hang` groups the ranks by where their training thread is (its innermost frame of the job's own code, then the
library frame under it), next to the verdict, in the text and in hang.json (`stacks`). Files made here in the
watchdog's schema; the real demo job's are checked in test_hang_watchdog.py."""

import json

from test_hang_missing_member import DATA, hang_cli

LIB = "/usr/lib/python3.11/threading.py:327 in wait"


def watchdog(rank: int, frames: list[str], inside: bool, step: int = 5) -> str:
    ranges = [{"name": "forward", "category": "PHASE", "group": None, "thread": "MainThread", "elapsed_ns": 10**9}]
    if inside:
        ranges.append({"name": "allreduce", "category": "COMMUNICATION", "group": None, "thread": "MainThread",
                       "elapsed_ns": 9 * 10**8})
    return json.dumps({"distprof_hang": 1, "rank": rank, "world_size": 4, "pid": 100 + rank, "hostname": "node0",
                       "step": step, "open_ranges": ranges, "flight_recorder": None,
                       "stacks": [{"thread": "loader", "frames": ["/job/data.py:9 in prefetch"]},
                                  {"thread": "MainThread", "frames": frames}]})


def test_ranks_grouped_by_where_they_are(tmp_path):
    for rank in range(3):  # in the all_reduce, under a library wait
        (tmp_path / f"hang_rank{rank}.json").write_text(watchdog(
            rank, ["/job/train.py:200 in main", "/job/train.py:88 in step", LIB], inside=True))
    (tmp_path / "hang_rank3.json").write_text(watchdog(3, ["/job/train.py:200 in main", "/job/data.py:41 in load"],
                                                       inside=False))
    result = hang_cli(str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "Hang: root rank 3 (from distprof watchdog; 4 ranks dumped of a world of 4)"
    start = lines.index("Stacks (distprof's watchdog: where each rank's training thread is, in its own code):")
    assert lines[start + 1:start + 3] == [
        "  rank 3: in load at data.py:41 (step 5; root)",
        "  ranks 0-2: in step at train.py:88 -> wait (threading.py:327) (step 5; inside allreduce)"]
    assert lines[-1].startswith("Next: sed -n 31,51p /job/data.py   (rank 3 is in load there")
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert [(g["ranks"], g["function"], g["path"], g["line"], g["root"]) for g in doc["stacks"]] == \
        [([3], "load", "/job/data.py", "41", True), ([0, 1, 2], "step", "/job/train.py", "88", False)]


def test_a_stuck_rank_at_another_step_shows_it(tmp_path):
    for rank in range(2):
        (tmp_path / f"hang_rank{rank}.json").write_text(watchdog(
            rank, ["/job/train.py:88 in step"], inside=True, step=7 if rank else 5))
    result = hang_cli(str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "  ranks 0-1: in step at train.py:88 (steps 5, 7; inside allreduce)" in result.stdout.splitlines()


def test_flight_recorder_dumps_alone_have_no_stacks_section(tmp_path):
    result = hang_cli(str(DATA / "tp_dp"), "-o", str(tmp_path / "out"))
    assert result.returncode == 0 and "Stacks" not in result.stdout
    assert json.loads((tmp_path / "out" / "hang.json").read_text())["stacks"] == []
