"""`distprof hang` at thousands of ranks (issue 38, point 6): the text stays short (rank ranges such as 0-4095,
capped sections, hang.json has everything) and the run stays fast; the synthetic dumps of
benchmarks/hang_scale.py, whose root is known by construction."""

import json
import time

import pytest
from test_hang_missing_member import hang_cli, scale_module

from distprof.sections.hang import HangResult


def run(tmp_path, folder) -> tuple[list[str], dict]:
    result = hang_cli(str(folder), "-o", str(tmp_path / "out"), timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert HangResult.from_json(doc).to_json() == doc  # hang.json round-trips through its type
    return result.stdout.splitlines(), doc


def test_world_of_4096_reads_as_ranges(tmp_path):
    truth = scale_module().write_job(tmp_path / "d", 4096, tp=0, steps=3, stuck=1234)
    lines, doc = run(tmp_path, tmp_path / "d")
    seq = truth["steps"] + 1  # the barrier is #1, then one all_reduce a step: the stuck rank never issues the last
    assert lines[1:4] == [
        "Hang: root rank 1234 (from flight recorder; 4096 ranks dumped of a world of 4096)",
        f"  rank 1234 never issued all_reduce #{seq} of group 0 (ranks 0-4095); ranks 0-1233, 1235-4095 wait for it; "
        f"its last entry there: all_reduce #{seq - 1} (completed)",
        "    fault class: never issued (the host side: Python, the GIL, data loading): no entry for it, and every "
        "collective it issued completed"]
    assert lines[4] == "Waiting (who waits for whom, since when):"
    assert len(lines) <= 13 and doc["root_ranks"] == [1234]
    assert doc["waiting"][0]["ranks"] == [r for r in range(4096) if r != 1234]


def test_half_missing_tp_dp_text_is_capped_and_json_complete(tmp_path):
    truth = scale_module().write_job(tmp_path / "d", 2048, tp=64, steps=2, missing=0.5)
    lines, doc = run(tmp_path, tmp_path / "d")
    assert len(lines) <= 80 and max(map(len, lines)) <= 500
    assert lines[1] == "Hang: root ranks 1024-2047 (from flight recorder; 1024 ranks dumped of a world of 2048)"
    assert "  ranks 0, 64, ..., 960 (step 64, 16 ranks) wait in all_reduce #2 of group 33 (ranks 0, 64, ..., 1984 " \
           "(step 64, 32 ranks)) since 21:36:02.200 UTC for ranks 1024, 1088, ..., 1984 (step 64, 16 ranks) (left no " \
           "dump)" in lines
    for what in ("culprits", "waits", "groups"):
        assert f"  ... 44 more {what} (hang.json has them all)" in lines
    # every DP group (the ranks of one TP index) waits, in its all_reduce #2, for its members without a dump
    assert len(doc["waiting"]) == len(doc["culprits"]) == 64 and truth["dumped"] == 1024
    for wait in doc["waiting"]:
        lane = wait["ranks"][0]
        assert wait["ranks"] == list(range(lane, 1024, 64))
        assert wait["waits_for"] == [{"reason": "not_dumped", "ranks": list(range(1024 + lane, 2048, 64)),
                                      "inferred": False}]
    assert doc["root_ranks"] == list(range(1024, 2048))


@pytest.mark.exclusive
def test_1024_ranks_within_seconds(tmp_path):
    scale_module().write_job(tmp_path / "d", 1024, tp=8, steps=8)
    started = time.monotonic()
    lines, doc = run(tmp_path, tmp_path / "d")
    elapsed = time.monotonic() - started
    assert doc["root_ranks"] == [1019] and len(lines) < 40
    assert elapsed < 10  # 0.7 s measured on 2 free cores (benchmarks/hang_scale.py), interpreter start included
