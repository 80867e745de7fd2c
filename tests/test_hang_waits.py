"""Waits-for chains of `distprof hang` (issue 38, point 2): each waiting rank -> the ranks it waits for (group,
seq, kind, since when), the chain to the root, in the text and in hang.json (`waiting[].waits_for`, `.chain`);
for a mismatch every member's sizes and dtypes; the text ends with the next command. Ground truth: the real
dumps of tests/data/flight_recorder (make_dumps.py says who stops where) read as plain JSON here, and a
synthetic TP x DP job (benchmarks/hang_scale.py)."""

import json
import time

from test_hang_missing_member import DATA, hang_cli, raw_entries, scale_module

from distprof.sections.hang import HangResult


def run(tmp_path, folder) -> tuple[list[str], dict]:
    result = hang_cli(str(folder), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert HangResult.from_json(doc).to_json() == doc  # hang.json round-trips through its type
    return result.stdout.splitlines(), doc


def pending(scenario: str, rank: int, group: str) -> dict:
    """The rank's lowest call of the group that did not complete, read from the raw JSON."""
    entries = [e for e in raw_entries(scenario, rank) if e["process_group"][0] == group and not e["retired"]]
    return min(entries, key=lambda e: e["collective_seq_id"])


def utc(ns: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns // 10**6 % 1000:03d} UTC"


def test_tp_dp_each_rank_waits_for_whom_since_when(tmp_path):
    lines, doc = run(tmp_path, DATA / "tp_dp")
    # by construction: rank 3 stops before its TP all_reduce; 2 waits on it in TP (group 2), 1 in DP (group 4),
    # 0 waits on 2 in DP (group 3)
    expected = {0: ("3", 2), 1: ("4", 3), 2: ("2", 3)}
    for rank, (group, target) in expected.items():
        call = pending("tp_dp", rank, group)
        wait = next(w for w in doc["waiting"] if w["ranks"] == [rank])
        assert (wait["group_name"], wait["seq"], wait["kind"], wait["since_ns"]) == \
            (group, call["collective_seq_id"], "all_reduce", call["time_created_ns"])
        assert wait["waits_for"] == [{"reason": "missing", "ranks": [target], "inferred": False}]
        assert f"  rank {rank} waits in all_reduce #{call['collective_seq_id']} of group {group} since " \
               f"{utc(call['time_created_ns'])} for rank {target} (never issued it)" in lines
    chain = next(w["chain"] for w in doc["waiting"] if w["ranks"] == [0])
    assert [(h["rank"], h["group_name"], h["waits_for"]) for h in chain] == [(0, "3", 2), (2, "2", 3)]
    assert lines[-1].startswith("Next: py-spy dump --pid PID   (on rank 3's host")
    assert doc["next"] == lines[-1].removeprefix("Next: ")


def test_size_mismatch_shows_every_members_sizes_and_dtypes(tmp_path):
    lines, doc = run(tmp_path, DATA / "size")
    (culprit,) = doc["culprits"]
    seq = culprit["seq"]
    calls = {r: e for r in range(4) for e in raw_entries("size", r) if e["collective_seq_id"] == seq}
    by_call: dict = {}
    for rank, entry in calls.items():
        by_call.setdefault((str(entry["input_sizes"]), str(entry["input_dtypes"])), []).append(rank)
    assert {(c["sizes"].split(" -> ")[0], c["dtypes"]): c["ranks"] for c in culprit["detail"]["calls"]} == by_call
    assert (culprit["ranks"], culprit["reason"]) == ([1], "size_mismatch")
    assert lines[2] == (f"  rank 1 issued all_reduce #{seq} of group 0 with other sizes than the others; rank 2 waits "
                        "for it; calls: all_reduce sizes [[4]] -> [[4]] dtypes ['Float'] on ranks 0, 2-3; all_reduce "
                        "sizes [[5]] -> [[5]] dtypes ['Float'] on rank 1")


def test_missing_scenario_one_wait_for_three_ranks(tmp_path):
    lines, doc = run(tmp_path, DATA / "missing")
    seq = max(e["collective_seq_id"] for e in raw_entries("missing", 0))
    since = min(pending("missing", r, "0")["time_created_ns"] for r in (0, 1, 3))
    assert [(w["ranks"], w["seq"], w["since_ns"], w["waits_for"]) for w in doc["waiting"]] == \
        [([0, 1, 3], seq, since, [{"reason": "missing", "ranks": [2], "inferred": False}])]
    assert f"  ranks 0-1, 3 wait in all_reduce #{seq} of group 0 since {utc(since)} for rank 2 (never issued it)" \
        in lines


def test_synthetic_tp_dp_chain_goes_through_the_stuck_tp_group(tmp_path):
    truth = scale_module().write_job(tmp_path / "dumps", 64, tp=8, steps=4, stuck=59)
    lines, doc = run(tmp_path, tmp_path / "dumps")
    assert doc["root_ranks"] == [59]
    # rank 0 waits in its DP group (0, 8, ..., 56) for rank 56, which waits in the stuck TP group for 59
    chain = next(w["chain"] for w in doc["waiting"] if w["ranks"][0] == 0)
    assert [(h["rank"], h["waits_for"], h["reason"]) for h in chain] == [(0, 56, "missing"), (56, 59, "missing")]
    assert chain[1]["group_name"] == truth["tp_group"]
    tp_wait = next(w for w in doc["waiting"] if w["group_name"] == truth["tp_group"])
    assert tp_wait["ranks"] == [56, 57, 58, 60, 61, 62, 63] and tp_wait["seq"] == 4
    assert f"Chain: rank 0 -> rank 56 (all_reduce #4 of group 9: never issued it) -> rank 59 (all_reduce #4 of " \
           f"group {truth['tp_group']}: never issued it)" in lines


def test_no_hang_says_how_to_get_dumps_next(tmp_path):
    truth = scale_module().write_job(tmp_path / "dumps", 4, tp=2, steps=2, stuck=1)
    for rank in range(4):  # every call completed: no hang in these dumps
        path = tmp_path / "dumps" / f"rank{rank}.json"
        doc = json.loads(path.read_text())
        doc["entries"] = [dict(e, state="completed", retired=True) for e in doc["entries"]
                          if e["collective_seq_id"] < truth["steps"]]
        path.write_text(json.dumps(doc))
    lines, doc = run(tmp_path, tmp_path / "dumps")
    assert lines[1].startswith("No hang seen") and doc["root_ranks"] == [] and doc["waiting"] == []
    assert lines[-1].startswith("Next: distprof hang ") and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in lines[-1]
