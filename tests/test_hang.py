"""distprof hang on real Flight Recorder dumps (tests/data/flight_recorder, made by make_dumps.py): the root
ranks and reasons each scenario was built to have, from the JSON and the pickle form; cut-short and hostile
inputs."""

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from distprof.analyses import hang
from distprof.events import SourceError
from distprof.sections.hang import HangResult, WaitTarget
from distprof.sources import flight_recorder as fr

DATA = Path(__file__).parent / "data" / "flight_recorder"
FORMS = {"json": "rank{r}.json", "pickle": "nccl_trace_rank_{r}"}
# by construction (make_dumps.py): root rank, its reason, the member ranks of the groups it holds up
EXPECTED = {"missing": (2, "missing", [[0, 1, 2, 3]]), "size": (1, "size_mismatch", [[0, 1, 2, 3]]),
            "tp_dp": (3, "missing", [[1, 3], [2, 3]])}


def files(scenario: str, form: str) -> list[str]:
    return [str(DATA / scenario / FORMS[form].format(r=r)) for r in range(4)]


def analyse(paths: list[str]) -> tuple[hang.HangResult, list[fr.InputState]]:
    dumps, states = fr.read_all(paths)
    return hang.analyse(dumps), states


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scenario", EXPECTED)
def test_scenario_root_and_reason(scenario, form):
    result, states = analyse(files(scenario, form))
    rank, reason, groups = EXPECTED[scenario]
    members = {g.name: g.ranks for g in result.groups}
    assert result.root_ranks == [rank]
    assert {(tuple(c.ranks), c.reason) for c in result.culprits} == {((rank,), reason)}
    assert sorted(members[c.group_name] for c in result.culprits) == groups
    assert [s.status for s in states] == ["read"] * 4
    assert rank not in {r for w in result.waiting for r in w.ranks} or reason != "missing"


@pytest.mark.parametrize("scenario", EXPECTED)
def test_json_and_pickle_agree(scenario):
    assert analyse(files(scenario, "json"))[0] == analyse(files(scenario, "pickle"))[0]


def raw(scenario: str, rank: int) -> list[dict]:
    return json.loads((DATA / scenario / f"rank{rank}.json").read_text())["entries"]


def test_missing_rank_last_entry_is_its_last_raw_entry():
    result, _ = analyse(files("missing", "json"))
    last = raw("missing", 2)[-1]  # plain reading of the raw JSON
    culprit = result.culprits[0]
    assert culprit.seq == max(e["collective_seq_id"] for e in raw("missing", 0))
    assert culprit.detail.ranks[0].last_entry.seq == last["collective_seq_id"] == culprit.seq - 1
    assert [(w.ranks, w.waits_for) for w in result.waiting] == \
        [([0, 1, 3], [WaitTarget(reason="missing", ranks=[2], inferred=False)])]


def test_size_mismatch_names_the_odd_sizes():
    result, _ = analyse(files("size", "pickle"))
    seq = result.culprits[0].seq
    odd = {r: e["input_sizes"] for r in range(4) for e in raw("size", r) if e["collective_seq_id"] == seq}
    assert odd[1] != odd[0] == odd[2] == odd[3]
    calls = {tuple(c.ranks): c.sizes for c in result.culprits[0].detail.calls}
    assert calls == {(1,): f"{odd[1]} -> {odd[1]}", (0, 2, 3): f"{odd[0]} -> {odd[0]}"}  # every member's sizes
    # rank 1 issued it unlike the others: it is not among those waiting for rank 1 (it said "ranks 1-2")
    [waiting] = [w for w in result.waiting if w.seq == seq]
    assert waiting.ranks == [2] and waiting.waits_for == [WaitTarget(reason="size_mismatch", ranks=[1], inferred=False)]


def test_tp_dp_wait_chain():
    result, _ = analyse(files("tp_dp", "json"))
    groups = {g.name: g for g in result.groups}
    waits = {r: sorted(groups[w.group_name].ranks) for w in result.waiting for r in w.ranks}
    assert waits == {0: [0, 2], 1: [1, 3], 2: [2, 3]}  # 0 waits on 2 (DP), 2 and 1 on 3 (TP, DP)
    assert {g.name: g.never_issued for g in groups.values() if g.first_incomplete_seq} == \
        {name: [3] if 3 in groups[name].ranks else [2] for name in groups if groups[name].first_incomplete_seq}


def test_pickle_cut_short_is_read_as_far_as_it_goes(tmp_path):
    for r in range(4):
        shutil.copy(DATA / "missing" / f"nccl_trace_rank_{r}", tmp_path)
    whole = (tmp_path / "nccl_trace_rank_0").read_bytes()
    (tmp_path / "nccl_trace_rank_0").write_bytes(whole[: len(whole) * 3 // 4])
    dump = fr.read(tmp_path / "nccl_trace_rank_0")
    full = fr.read(DATA / "missing" / "nccl_trace_rank_0")
    assert dump.status == "cut_short" and 0 < len(dump.entries) < len(full.entries)
    assert dump.entries == full.entries[: len(dump.entries)]
    result, states = analyse([str(tmp_path)])
    assert [s.status for s in states] == ["cut_short", "read", "read", "read"]
    assert 2 in result.root_ranks


def test_json_cut_short_is_named_and_its_rank_not_dumped(tmp_path):
    for r in range(1, 4):
        shutil.copy(DATA / "missing" / f"rank{r}.json", tmp_path)
    text = (DATA / "missing" / "rank0.json").read_bytes()
    (tmp_path / "rank0.json").write_bytes(text[: len(text) // 2])
    result, states = analyse([str(tmp_path)])
    cut = [s for s in states if s.status == "cut_short"]
    assert [(s.rank, Path(s.path).name) for s in cut] == [(0, "rank0.json")] and "cut short" in cut[0].detail
    assert result.root_ranks == [0, 2]
    assert {(tuple(c.ranks), c.reason) for c in result.culprits} == {((0,), "not_dumped"), ((2,), "missing")}


class Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_hostile_pickle_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    dump = {"version": "2.10", "pg_config": {}, "entries": [{"collective_seq_id": 1, "evil": Hostile(marker)}]}
    hostile = tmp_path / "dumps" / "nccl_trace_rank_0"
    hostile.parent.mkdir()
    hostile.write_bytes(pickle.dumps(dump))
    assert pickle.loads(pickle.dumps(Hostile(tmp_path / "control"))) == 0  # the payload does run when unpickled
    assert (tmp_path / "control").exists()
    with pytest.raises(SourceError, match=r"nccl_trace_rank_0: refused: the pickle names posix.system"):
        fr.read(hostile)
    result = run_cli("hang", str(hostile.parent), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr  # the only input refused: nothing to analyse
    assert result.stderr.strip().splitlines() == [
        f"distprof: error: {hostile}: refused: the pickle names posix.system (only plain builtins are read) "
        "(no input could be read)"]
    assert not (tmp_path / "out" / "hang.json").exists()
    assert not marker.exists()


def test_cli_writes_hang_json(tmp_path):
    result = run_cli("hang", str(DATA / "tp_dp"), "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "hang.json").read_text())
    assert HangResult.from_json(doc).to_json() == doc  # hang.json round-trips through its type
    assert doc["root_ranks"] == [3] and len(doc["inputs"]) == 8
    assert set(doc) >= {"root_ranks", "culprits", "waiting", "groups", "inputs"}
    assert set(doc["culprits"][0]) == {"ranks", "reason", "group_name", "seq", "kind", "awaited_by", "inferred",
                                       "detail", "faults"}
    assert doc["culprits"][0]["faults"] == [{"ranks": [3], "fault_class": "not_issued", "group_name": "", "seq": -1,
                                             "kind": "", "state": "", "completed_by": []}]
    assert set(doc["waiting"][0]) == {"ranks", "group_name", "seq", "kind", "since_ns", "waits_for", "chain",
                                      "completed_by"}
    assert "root rank 3" in result.stdout


def test_cli_no_dumps_is_one_line(tmp_path):
    result = run_cli("hang", str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_hostile_pickle_refused_in_every_protocol(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "nccl_trace_rank_1"
    path.write_bytes(pickle.dumps({"entries": [], "x": Hostile(marker)}, protocol=protocol))
    with pytest.raises(SourceError, match="refused"):
        fr.read(path)
    assert not marker.exists()


@pytest.mark.parametrize("waits, roots", [
    ([([0], [(1,)]), ([1], [(2,)])], [2]),                       # a chain ends at the rank that waits on nobody
    ([([0], [(1,)]), ([1], [(2,)]), ([2], [(1,)])], [1, 2]),     # a terminal cycle: all its ranks
    ([([0], [(1,), (2,)]), ([1], [(0,)])], [2]),                 # a cycle that waits on someone else is not the root
    ([([3], [(4,)]), ([5], [(6,)])], [4, 6]),                    # two independent hangs
    ([([0, 1], [])], []),                                        # waiting on nobody known: no root named
    ([([0, 1], [(2, 3)]), ([2], [(1,)])], [3]),                  # through a shared target tuple: 2 waits on 1, on 3
    ([([1, 2], [(1,)])], [1]),                                   # a rank in its own wait's targets: the odd one
])
def test_root_ranks_by_construction(waits, roots):
    assert hang.root_ranks(waits) == roots


def test_root_ranks_of_a_long_chain_without_recursion():
    n = 5000
    assert hang.root_ranks([([i], [(i + 1,)]) for i in range(n)]) == [n]


def _all_to_all_dumps(tmp_path, sizes_by_rank: dict[int, tuple[list, list]], scenario: str = "missing") -> list[str]:
    """The real dumps of a scenario ('missing': rank 2 never issues the pending collective; 'size': every
    rank issues it) with that collective made an expert-parallel all_to_all of the given (input, output)
    sizes on each member that issued it."""
    paths = []
    for rank in range(4):
        document = json.loads((DATA / scenario / f"rank{rank}.json").read_text())
        for entry in document["entries"]:  # seq 4: the collective each scenario holds up
            if entry["collective_seq_id"] == 4 and rank in sizes_by_rank:
                entry["profiling_name"] = "gloo:all_to_all"
                entry["input_sizes"], entry["output_sizes"] = sizes_by_rank[rank]
                entry["input_dtypes"] = entry["output_dtypes"] = ["BFloat16"]
        tmp_path.mkdir(exist_ok=True)
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(document))
    return [str(path) for path in paths]


def test_uneven_all_to_all_splits_are_not_a_size_mismatch(tmp_path):
    """An MoE router sends each rank its own number of tokens: the rows differ on every member, and that
    is what the all-to-all is. The rank that never issued it is the root, for the reason it has."""
    uneven = {0: ([[4096, 5120]], [[4107, 5120]]), 1: ([[4096, 5120]], [[4034, 5120]]),
              3: ([[4096, 5120]], [[4211, 5120]])}
    result, _ = analyse(_all_to_all_dumps(tmp_path, uneven))
    assert result.root_ranks == [2]
    assert {(tuple(c.ranks), c.reason) for c in result.culprits} == {((2,), "missing")}


def test_an_all_to_all_of_another_hidden_size_is_still_a_mismatch(tmp_path):
    """The split is free; the width of a token is not: rank 1 sends rows of 4096 where the others send 5120.
    With every width equal, the same dumps hold no size mismatch at all."""
    rows = {0: (4107, 4107), 1: (4034, 3900), 2: (4211, 4300), 3: (3990, 4041)}
    width = {0: 5120, 1: 4096, 2: 5120, 3: 5120}
    sizes = {r: ([[sent, width[r]]], [[got, width[r]]]) for r, (sent, got) in rows.items()}
    result, _ = analyse(_all_to_all_dumps(tmp_path / "odd", sizes, "size"))
    assert {(tuple(c.ranks), c.reason) for c in result.culprits} == {((1,), "size_mismatch")}
    even = {r: ([[sent, 5120]], [[got, 5120]]) for r, (sent, got) in rows.items()}
    result, _ = analyse(_all_to_all_dumps(tmp_path / "even", even, "size"))
    assert "size_mismatch" not in {c.reason for c in result.culprits}
