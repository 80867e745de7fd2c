"""`distprof hang` on an expert-parallel (MoE) job's real Flight Recorder dumps (tests/data/flight_recorder, made
by make_dumps.py on gloo): the uneven all-to-all splits a router makes are no size mismatch, the injected rank
and nothing else is named, and its fault class is the one the dumps show (a2a_missing: never issued, the host;
a2a_stall: issued, never completed). Each answer is checked against a plain reading of the raw JSON. Gloo records
no start (every entry stays 'scheduled'), so 'never started' is checked on the same dumps given NCCL's states."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from distprof.analyses import hang
from distprof.dumps import Entry, RankDump
from distprof.sources import flight_recorder as fr

DATA = Path(__file__).parent / "data" / "flight_recorder"
FORMS = {"json": "rank{r}.json", "pickle": "nccl_trace_rank_{r}"}
INJECTED = {"a2a_missing": (2, "not_issued"), "a2a_stall": (1, "not_completed")}  # by construction (make_dumps.py)


def raw(scenario: str, rank: int, folder: Path = DATA) -> list[dict]:
    return json.loads((folder / scenario / f"rank{rank}.json").read_text())["entries"]


def analyse(folder: Path, form: str = "json") -> hang.HangResult:
    dumps, states = fr.read_all([str(folder / FORMS[form].format(r=r)) for r in range(4)])
    assert [s.status for s in states] == ["read"] * 4
    return hang.analyse(dumps)


def rows(sizes: list) -> int:
    return sizes[0][0]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scenario", INJECTED)
def test_names_exactly_the_injected_rank_and_its_fault_class(scenario, form):
    rank, fault_class = INJECTED[scenario]
    result = analyse(DATA / scenario, form)
    assert result.root_ranks == [rank]
    assert [(c.ranks, c.reason) for c in result.culprits] == [([rank], "missing")]
    assert [(f.ranks, f.fault_class) for f in result.culprits[0].faults] == [([rank], fault_class)]
    assert not any(g.mismatch for g in result.groups)


def test_the_splits_are_uneven_and_add_up_in_the_raw_dumps():
    for scenario in INJECTED:
        a2a: dict[int, dict[int, dict]] = {}  # seq -> rank -> entry, read as plain JSON
        for r in range(4):
            for e in raw(scenario, r):
                if e["profiling_name"] == "gloo:all_to_all":
                    a2a.setdefault(e["collective_seq_id"], {})[r] = e
        whole = {seq: by for seq, by in a2a.items() if len(by) == 4}
        assert len(whole) >= 4
        for by in whole.values():
            assert sum(rows(e["input_sizes"]) for e in by.values()) == sum(rows(e["output_sizes"]) for e in by.values())
        assert any(len({rows(e["output_sizes"]) for e in by.values()}) > 1 for by in whole.values())
        result = analyse(DATA / scenario)
        assert {c.reason for c in result.culprits} == {"missing"}


def test_a2a_missing_reads_as_the_raw_dumps_say():
    result = analyse(DATA / "a2a_missing")
    culprit = result.culprits[0]
    seqs = {r: [e["collective_seq_id"] for e in raw("a2a_missing", r) if e["process_group"][0] == culprit.group_name]
            for r in range(4)}
    assert culprit.seq == max(seqs[0]) == max(seqs[1]) == max(seqs[3]) == max(seqs[2]) + 1
    assert all(e["retired"] for e in raw("a2a_missing", 2))  # all it issued completed: the host never issued it
    assert culprit.kind == "all_to_all" and culprit.awaited_by == [0, 1, 3]


def test_a2a_stall_reads_as_the_raw_dumps_say():
    result = analyse(DATA / "a2a_stall")
    fault = result.culprits[0].faults[0]
    open_ = [e for e in raw("a2a_stall", 1) if not e["retired"]]
    assert [(e["process_group"][0], e["collective_seq_id"], e["profiling_name"]) for e in open_] == \
        [(fault.group_name, fault.seq, "gloo:all_to_all")]
    done = [r for r in range(4) for e in raw("a2a_stall", r)
            if (e["process_group"][0], e["collective_seq_id"]) == (fault.group_name, fault.seq) and e["retired"]]
    assert fault.completed_by == done == [0, 2, 3] and fault.state == "scheduled"
    # what gloo records: no start, no completion time; 'retired' is the one mark of completion
    every = [e for r in range(4) for e in raw("a2a_stall", r)]
    assert {e["state"] for e in every} == {"scheduled"}
    assert {e["time_discovered_started_ns"] for e in every} == {e["time_discovered_completed_ns"] for e in every} == {0}
    assert result.culprits[0].seq == fault.seq + 1  # the combine, which rank 1 never issued
    stuck = next(w for w in result.waiting if w.ranks == [1])
    assert stuck.waits_for == [] and stuck.completed_by == [0, 2, 3]


def test_the_text_and_html_name_the_fault_class(tmp_path):
    for scenario, words in (("a2a_missing", "fault class: never issued (the host side"),
                            ("a2a_stall", "fault class: issued, never completed (the device / backend side): its "
                                          "all_to_all #5 of group 1 never completed")):
        result = run_cli("hang", str(DATA / scenario), "-o", str(tmp_path / scenario))
        assert result.returncode == 0, result.stderr
        assert words in result.stdout and "other sizes" not in result.stdout
        page = (tmp_path / scenario / "hang.html").read_text()
        assert "Fault class" in page and INJECTED[scenario][1] in page
    assert "py-spy dump --native" in result.stdout  # the stall: look below its Python


def as_nccl(scenario: str, dest: Path, states: dict[tuple[int, int], str]) -> Path:
    """The real dumps given the states NCCL records (gloo records none): a completed entry 'completed' with its
    times, the rest as ``states`` (rank, seq of the expert-parallel group) says."""
    folder = dest / scenario
    folder.mkdir(parents=True)
    for r in range(4):
        doc = json.loads((DATA / scenario / f"rank{r}.json").read_text())
        for e in doc["entries"]:
            key = (r, e["collective_seq_id"]) if e["process_group"][1] == "expert_parallel" else None
            state = states.get(key) or ("completed" if e["retired"] else "started")
            e["state"], e["retired"] = state, state == "completed"
            e["time_discovered_started_ns"] = 0 if state == "scheduled" else e["time_created_ns"] + 1000
            e["time_discovered_completed_ns"] = e["time_created_ns"] + 2000 if state == "completed" else 0
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    return folder


def test_never_started_on_the_device_where_the_backend_records_starts(tmp_path):
    # rank 1's dispatch (#5) stayed 'scheduled' while ranks 0, 2, 3 completed it: never started on its device
    result = analyse(as_nccl("a2a_stall", tmp_path, {(1, 5): "scheduled"}))
    assert result.root_ranks == [1]
    assert [(f.ranks, f.fault_class, f.seq, f.completed_by) for f in result.culprits[0].faults] == \
        [([1], "not_started", 5, [0, 2, 3])]


def test_started_ranks_wait_for_the_one_that_never_started(tmp_path):
    # every rank issued #5; ranks 0, 1, 3 started it, rank 2 did not: without states this is no rank to name
    source = tmp_path / "src" / "a2a_missing"
    shutil.copytree(DATA / "a2a_missing", source)
    doc = json.loads((source / "rank2.json").read_text())
    doc["entries"].append(dict(raw("a2a_missing", 0)[-1], record_id=99))
    (source / "rank2.json").write_text(json.dumps(doc))
    folder = tmp_path / "nccl"
    folder.mkdir()
    for r in range(4):
        doc = json.loads((source / f"rank{r}.json").read_text())
        for e in doc["entries"]:
            e["state"] = "completed" if e["retired"] else ("scheduled" if r == 2 else "started")
            e["time_discovered_started_ns"] = 0 if e["state"] == "scheduled" else e["time_created_ns"] + 1000
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    result = analyse(folder)
    assert result.root_ranks == [2]
    assert [(c.ranks, c.reason, c.awaited_by) for c in result.culprits] == [([2], "not_started", [0, 1, 3])]
    assert [(f.fault_class, f.state) for f in result.culprits[0].faults] == [("not_started", "scheduled")]
    assert not any(g.inferred_missing for g in result.groups)


def entry(group: str, seq: int, completed: bool) -> Entry:
    return Entry(group, "", seq, "all_reduce", "[[4]]", "[[4]]", "[Float]", completed, "scheduled", False)


def test_a_terminal_cycle_is_waiting_for_a_peer():
    # rank 0 waits in #2 of group A for rank 1, which waits in #2 of group B for rank 0 (called in another order)
    dumps = [RankDump(0, "a", "read", (entry("A", 1, True), entry("B", 1, True), entry("A", 2, False)), {}),
             RankDump(1, "b", "read", (entry("A", 1, True), entry("B", 1, True), entry("B", 2, False)), {})]
    result = hang.analyse(dumps)
    assert result.root_ranks == [0, 1]
    faults = {c.ranks[0]: [(f.fault_class, f.group_name, f.seq) for f in c.faults] for c in result.culprits}
    assert faults == {0: [("waiting_for_peer", "A", 2)], 1: [("waiting_for_peer", "B", 2)]}  # where each waits


def rows_notes(result: hang.HangResult) -> list:
    return [n for n in result.notes if n.code.startswith("a2a_rows")]


def test_rows_that_do_not_add_up_are_noted_and_uneven_ones_are_not():
    # a2a_rows: rank 3's output split expects a row more from rank 0 in one dispatch; gloo completed it anyway
    sums: dict[int, list[int]] = {}
    for r in range(4):
        for e in raw("a2a_rows", r):
            if e["profiling_name"] == "gloo:all_to_all":
                sums.setdefault(e["collective_seq_id"], [0, 0])
                sums[e["collective_seq_id"]][0] += rows(e["input_sizes"])
                sums[e["collective_seq_id"]][1] += rows(e["output_sizes"])
    off = {seq: pair for seq, pair in sums.items() if pair[0] != pair[1]}
    assert len(off) == 1
    (seq, (sent, received)), = off.items()
    dumps = fr.read_all([str(DATA / "a2a_rows")])[0]
    result = hang.analyse(dumps, world_size=4)
    assert result.root_ranks == [] and result.culprits == []
    assert [n.figures for n in rows_notes(result)] == [{"group": "1", "seq": seq, "kind": "all_to_all",
                                                        "completed": True, "sent": sent, "received": received,
                                                        "ranks": 4}]
    assert rows_notes(hang.analyse(dumps)) == []  # gloo does not state the world: a member could be unseen
    for scenario in INJECTED:  # uneven splits that add up: no note
        assert rows_notes(hang.analyse(fr.read_all([str(DATA / scenario)])[0], world_size=4)) == []


def test_rows_to_each_peer_checked_pair_by_pair_where_the_dumps_record_the_split():
    def a2a(rank: int, sent: list[int], got: list[int]) -> RankDump:
        sizes = lambda rows: "[" + ", ".join(f"[{n}, 8]" for n in rows) + "]"  # noqa: E731
        return RankDump(rank, f"r{rank}", "read", (Entry("7", "ep", 1, "all_to_all", sizes(sent), sizes(got),
                                                         "[Float]", True, "scheduled", False),), {"7": (0, 1, 2)})
    even = [a2a(0, [1, 2, 3], [1, 4, 7]), a2a(1, [4, 5, 6], [2, 5, 8]), a2a(2, [7, 8, 9], [3, 6, 9])]
    assert rows_notes(hang.analyse(even)) == []
    odd = even[:2] + [a2a(2, [7, 8, 9], [3, 5, 9])]  # rank 2 receives 5 rows from rank 1, which sent it 6
    assert [n.figures for n in rows_notes(hang.analyse(odd))] == [
        {"group": "7", "seq": 1, "kind": "all_to_all", "completed": True, "sender": 1, "receiver": 2, "sent": 6,
         "received": 5}]


def test_a_rank_two_groups_wait_for_has_its_fault_class_said_once(tmp_path):
    result = run_cli("hang", str(DATA / "tp_dp"), "-o", str(tmp_path), "--no-html")
    lines = result.stdout.splitlines()
    assert sum(line.startswith("  rank 3 never issued") for line in lines) == 2  # TP and DP wait for it
    assert sum("fault class: never issued" in line for line in lines) == 1
