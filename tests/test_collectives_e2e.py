"""End to end, from files: a 4-rank NCCL job written as real-schema Kineto traces (tensor parallel
{0,1} "1" and {2,3} "2", data parallel {0,2} "3" and {1,3} "4"), rank 2 late by a known amount
in every op, read by the Kineto reader and merged like a user does. Every expected figure is
computed here from the op list (ground truth by construction), not by distprof."""

from __future__ import annotations

import json
import subprocess
import sys

import kineto_fixtures as kf
import pytest

STEPS, STEP_US, LATE_US, NELEMS = 3, 1000.0, 150.0, 1 << 20
TP = {0: ("1", (0, 1)), 1: ("1", (0, 1)), 2: ("2", (2, 3)), 3: ("2", (2, 3))}
DP = {0: ("3", (0, 2)), 2: ("3", (0, 2)), 1: ("4", (1, 3)), 3: ("4", (1, 3))}
# per step: (kind, which group, offset µs, dtype, nelems in, nccl-tests size in bytes, busbw factor for n=2)
OPS = (("allreduce", TP, 100.0, "Float", NELEMS, NELEMS * 4, 1.0),
       ("allgather", TP, 350.0, "BFloat16", NELEMS // 4, NELEMS // 4 * 2 * 2, 0.5),
       ("reduce_scatter", DP, 600.0, "Float", NELEMS, NELEMS * 4, 0.5))
LATE = 2


def _ops() -> dict[int, list[kf.CommOp]]:
    """Rank 2 starts every op LATE_US late and runs it 100 µs; its partners start on time and wait
    for it (their kernel lasts LATE_US + 100 µs); ops without rank 2 last 100 µs."""
    ops: dict[int, list[kf.CommOp]] = {}
    for rank in range(4):
        ops[rank] = []
        for step in range(STEPS):
            for kind, groups, offset, dtype, nelems, _, _ in OPS:
                name, members = groups[rank]
                late = rank == LATE
                waits = LATE in members and not late
                ops[rank].append(kf.CommOp(kind, name, members, nelems, dtype,
                                           step * STEP_US + offset + (LATE_US if late else 0.0),
                                           100.0 + (LATE_US if waits else 0.0)))
    return ops


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("tpdp")
    paths = kf.collective_job(folder / "in", _ops(), world_size=4, step_us=STEP_US)
    out = folder / "out"
    result = subprocess.run([sys.executable, "-m", "distprof", "merge", *map(str, paths), "-o", str(out),
                             "--no-html"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Collectives" in result.stdout
    return json.loads((out / "summary.json").read_text())


def test_each_group_is_matched_alone(summary):
    kinds = {(k["name"], k["group"]): (k["ranks"], k["matched"]) for k in summary["skew"]["kinds"]}
    expected = {}
    for kind, groups, *_ in OPS:
        for name, members in set(groups.values()):
            expected[(kind, name)] = (len(members), STEPS)
    assert kinds == expected
    for row in summary["skew"]["collectives"]:
        members = dict(TP.values()) if row["kind"] != "reduce_scatter" else dict(DP.values())
        assert tuple(row["group_ranks"]) == members[row["group_name"]]
        assert sorted(map(int, row["wait_ns_by_rank"])) == list(row["group_ranks"])


def test_instances_bytes_waits_and_bus_bandwidth(summary):
    rows = summary["skew"]["collectives"]
    assert len(rows) == len(OPS) * 4 // 2 * STEPS  # 2 groups per kind, each once per step
    for row in rows:
        kind, _, _, _, _, nbytes, factor = next(op for op in OPS if op[0] == row["kind"])
        with_late = LATE in row["group_ranks"]
        assert row["bytes"] == nbytes
        assert row["transfer_ns"] == 100_000  # the last arrival's own kernel
        assert row["algbw_gbps"] == pytest.approx(nbytes / 100_000)
        assert row["busbw_gbps"] == pytest.approx(nbytes / 100_000 * factor)
        assert row["arrival_skew_ns"] == (150_000 if with_late else 0)
        if with_late:
            assert row["last_rank"] == LATE
            partner = next(r for r in row["group_ranks"] if r != LATE)
            assert row["wait_ns_by_rank"] == {str(LATE): 0, str(partner): 150_000}


def test_wait_and_transfer_per_rank(summary):
    """Rank 3 waits for rank 2 in two TP ops a step, rank 0 in one DP op, ranks 1 and 2 never."""
    per_step_waits = {0: 1, 1: 0, 2: 0, 3: 2}
    for row in summary["ranks"]:
        rank = row["rank"]
        assert row["communication_wait_ns"] == per_step_waits[rank] * STEPS * int(LATE_US * 1000)
        assert row["communication_wait_ns"] + row["communication_transfer_ns"] == row["communication_ns"]


def test_the_late_rank_is_the_straggler_on_the_host(summary):
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == LATE
    assert (straggler["late_in"], straggler["of"]) == (len(OPS) * STEPS, len(OPS) * STEPS)
    # per step: the TP allreduce and allgather, each waited for alone; at the DP reduce_scatter it is
    # late by what it carried in from the allgather (it left that 150 µs after its DP partner left
    # its own, and both took as long since): that delay was charged at the allgather already. From
    # the second step on, the same holds at the TP allreduce: it left the step before's
    # reduce_scatter 150 µs after its TP partner left its own, and the matched ops do not show the
    # idle time both had since (a delay passed on at a step's end reaches the next step's first op:
    # test_blame). So 2 x 150 µs in the first step, 150 µs in each of the 2 others.
    assert straggler["waits_caused_ns"] == (2 + 1 + 1) * int(LATE_US * 1000) // STEPS
    assert straggler["total_waits_caused_ns"] == STEPS * straggler["waits_caused_ns"]
    assert straggler["waits_caused_share"] == pytest.approx(straggler["waits_caused_ns"] / (STEP_US * 1000))
    [fix] = [r for r in summary["whatif"]["scenarios"] if r["name"] == "no_straggler"]
    assert straggler["cost_ns"] == fix["saving_ns"]  # its cost: what removing its lateness saves
    assert straggler["side"] == "host"  # its launches are late as well (the fixture launches 10 µs before)
    assert (straggler["pattern"], straggler["steps_late"], straggler["steps"]) == ("persistent", STEPS, STEPS)


def test_table_rows_by_kind_and_group(summary):
    rows = {(r["kind"], r["group"]): r for r in summary["collectives"]["rows"]}
    assert set(rows) == {(kind, name) for kind, groups, *_ in OPS for name, _ in groups.values()}
    for (kind, name), row in rows.items():
        nbytes, factor = next((op[5], op[6]) for op in OPS if op[0] == kind)
        assert row["count"] == row["matched"] == STEPS
        assert row["busbw_median_gbps"] == pytest.approx(nbytes / 100_000 * factor)
        members = (dict(TP.values()) if kind != "reduce_scatter" else dict(DP.values()))[name]
        waited = LATE in members
        # wait share = Σ waits / Σ durations over the members
        expected = (150 / (250 + 100)) if waited else 0.0
        assert row["wait_share"] == pytest.approx(expected)
