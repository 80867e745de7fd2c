"""`distprof hang` when the stuck rank left no dump (issue 38, point 1): a member the dumps do not show is
inferred from a group whose dumped members all issued a collective that never completed, and named as the root,
with the chain going through it. Ground truth by construction: the real dumps of tests/data/flight_recorder
with the stuck rank's files removed, and synthetic NCCL-style dumps (benchmarks/hang_scale.py) whose pg_config
states the members."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "flight_recorder"
FORMS = {"json": "rank{r}.json", "pickle": "nccl_trace_rank_{r}"}


def hang_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`distprof hang ...` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "distprof", "hang", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def scale_module():
    spec = importlib.util.spec_from_file_location("hang_scale", ROOT / "benchmarks" / "hang_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def without(tmp_path: Path, scenario: str, form: str, gone: set[int]) -> Path:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in set(range(4)) - gone:
        shutil.copy(DATA / scenario / FORMS[form].format(r=rank), folder)
    return folder


def raw_entries(scenario: str, rank: int) -> list[dict]:
    return json.loads((DATA / scenario / f"rank{rank}.json").read_text())["entries"]


@pytest.mark.parametrize("form", FORMS)
def test_tp_dp_without_the_stuck_rank_names_it(tmp_path, form):
    folder = without(tmp_path, "tp_dp", form, {3})
    result = hang_cli(str(folder), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    # by construction (make_dumps.py): rank 3 stopped before its TP all_reduce; rank 2 (TP group of 2 and 3) issued
    # it and waits; the group's seq is the last rank 2 issued there
    seq = max(e["collective_seq_id"] for e in raw_entries("tp_dp", 2) if e["process_group"][0] == "2")
    lines = result.stdout.splitlines()
    assert lines[1] == "Hang: root rank 3 (from flight recorder; 3 ranks dumped of a world of at least 4)"
    assert lines[2].startswith(f"  rank 3 left no dump; rank 2 waits for it in all_reduce #{seq} of group 2 (inferred")
    assert lines[3].startswith(f"  rank 3 left no dump; rank 1 waits for it in all_reduce #{seq} of group 4 (inferred")
    assert f"Chain: rank 0 -> rank 2 (all_reduce #{seq} of group 3: never issued it) -> rank 3 (all_reduce #{seq} " \
           "of group 2: left no dump, inferred)" in lines
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert doc["root_ranks"] == [3] and doc["world_size"] == 4 and doc["world_stated"] is False
    assert [(c["ranks"], c["reason"], c["group_name"], c["seq"], c["awaited_by"], c["inferred"])
            for c in doc["culprits"]] == [([3], "not_dumped", "2", seq, [2], True), ([3], "not_dumped", "4", seq, [1],
                                                                                      True)]
    chain = next(w["chain"] for w in doc["waiting"] if w["ranks"] == [0])
    assert [(h["rank"], h["group_name"], h["waits_for"], h["reason"]) for h in chain] == \
        [(0, "3", 2, "missing"), (2, "2", 3, "not_dumped")]


def test_a_stated_world_names_every_rank_that_could_be_it(tmp_path):
    folder = without(tmp_path, "tp_dp", "json", {3})
    result = hang_cli(str(folder), "-o", str(tmp_path / "out"), "--world-size", "6")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == \
        "Hang: root ranks 3-5 (from flight recorder; 3 ranks dumped of a world of 6)"
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert doc["world_stated"] is True and {tuple(c["ranks"]) for c in doc["culprits"]} == {(3, 4, 5)}


@pytest.mark.parametrize("value", ["0", "-1", "x", str(1 << 21)])
def test_world_size_option_is_checked(tmp_path, value):
    result = hang_cli(str(DATA / "tp_dp"), "-o", str(tmp_path / "out"), "--world-size", value)
    assert result.returncode == 2 and "--world-size" in result.stderr and "Traceback" not in result.stderr


def test_a_gap_among_the_dumped_ranks_is_a_member_of_the_world(tmp_path):
    # missing scenario: rank 2 never issued the world's 4th all_reduce; without its dump, ranks 0, 1 and 3 show it
    # is in the world (ranks 0..3) and left no dump: named, not inferred
    folder = without(tmp_path, "missing", "pickle", {2})
    result = hang_cli(str(folder), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    seq = max(e["collective_seq_id"] for e in raw_entries("missing", 0))
    assert result.stdout.splitlines()[2] == \
        f"  rank 2 left no dump; ranks 0-1, 3 wait for it in all_reduce #{seq} of group 0"
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert [(c["ranks"], c["inferred"]) for c in doc["culprits"]] == [([2], False)]


def test_full_sets_infer_nothing(tmp_path):
    for scenario in ("missing", "size", "tp_dp"):
        result = hang_cli(str(DATA / scenario), "-o", str(tmp_path / scenario))
        doc = json.loads((tmp_path / scenario / "hang.json").read_text())
        assert result.returncode == 0 and not any(c["inferred"] for c in doc["culprits"])
        assert not any(g["inferred_missing"] for g in doc["groups"])


def test_stated_members_name_the_stuck_rank_without_inference(tmp_path):
    truth = scale_module().write_job(tmp_path / "dumps", 16, tp=4, steps=3, stuck=6)
    (tmp_path / "dumps" / "rank6.json").unlink()
    result = hang_cli(str(tmp_path / "dumps"), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "out" / "hang.json").read_text())
    assert doc["root_ranks"] == [6] and doc["world_stated"] is True
    culprits = {(tuple(c["ranks"]), c["reason"], c["group_name"], c["seq"], tuple(c["awaited_by"]), c["inferred"])
                for c in doc["culprits"]}
    assert culprits == {((6,), "not_dumped", truth["tp_group"], 3, (4, 5, 7), False),
                        ((6,), "not_dumped", truth["dp_group"], 3, (2, 10, 14), False)}
    assert f"  rank 6 left no dump; ranks 4-5, 7 wait for them in all_reduce #3 of group {truth['tp_group']}" \
           not in result.stdout  # one rank: "it"
    assert f"  rank 6 left no dump; ranks 4-5, 7 wait for it in all_reduce #3 of group {truth['tp_group']} " \
           "(ranks 4-7)" in result.stdout.splitlines()
