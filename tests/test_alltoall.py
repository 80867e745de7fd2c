"""Expert-parallel all-to-all (issue 55, item 3): the bytes each rank sends and receives per group, from
Kineto's record_param_comms (NCCL: In/Out msg nelems, In/Out split size) and from gloo's
c10d::alltoall_base_ op (its output and input tensors), and the expert_imbalance finding.

By construction (tests/kineto_fixtures.py, known split sizes) and on real torchrun + gloo traces
(tests/data/torch_moe, checked against plain Python over the raw JSON)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import kineto_fixtures as kf
import numpy as np
import pytest
from result_views import straggler_of, whatif_of

from distprof import config as config_mod
from distprof import sources
from distprof.cli import merge_files
from distprof.results import Summary
from distprof.typed import ABSENT

CONFIG = config_mod.load()
DATA = Path(__file__).parent / "data" / "torch_moe"
H = 512            # row width (hidden size): floats per token
EP = (0, 1, 2, 3)  # the expert-parallel group "1"
# rows rank r sends to each rank of the group: rank 2's expert gets 28 of every 64 tokens, the others 12
SKEWED = [(12, 12, 28, 12)] * 4
EVEN = [(16, 16, 16, 16)] * 4


def moe_job(folder: Path, splits: list[tuple[int, ...]], steps: int = 3, skewed_from: int | None = None) -> list[Path]:
    """Per step: a dispatch all-to-all at 100 µs (rank r sends splits[r][p] rows to p) and the combine
    at 400 µs (the reverse), in group "1"; a DP allreduce on the world at 700 µs. ``skewed_from``: the
    router is EVEN before that step, ``splits`` from it on."""
    ops = {}
    for r in EP:
        ops[r] = []
        for s in range(steps):
            step_splits = EVEN if skewed_from is not None and s < skewed_from else splits
            out_rows = [step_splits[q][r] for q in EP]
            at = s * 1000.0
            ops[r] += [kf.CommOp("alltoall", "1", EP, sum(step_splits[r]) * H, "Float", at + 100, 200,
                                 out_nelems=sum(out_rows) * H, in_splits=step_splits[r], out_splits=tuple(out_rows)),
                       kf.CommOp("alltoall", "1", EP, sum(out_rows) * H, "Float", at + 400, 200,
                                 out_nelems=sum(step_splits[r]) * H, in_splits=tuple(out_rows),
                                 out_splits=step_splits[r]),
                       kf.CommOp("allreduce", "0", EP, 1 << 16, "Float", at + 700, 100)]
    return kf.collective_job(folder, ops, world_size=4, step_us=1000.0)


def merged(paths: list[Path]) -> dict:
    return json.loads(json.dumps(merge_files(paths, CONFIG)))


def test_reader_takes_each_side_from_record_param_comms(tmp_path):
    """Every all-to-all kernel row carries what its rank sends (In msg nelems x 4 bytes) and receives
    (Out msg nelems x 4); other collectives carry neither."""
    paths = moe_job(tmp_path, SKEWED, steps=1)
    trace = sources.read(paths[2], CONFIG)[0]
    events = trace.events
    rows = np.flatnonzero(events["collective"].eq("alltoall") & events["kind"].eq("kernel"))
    assert events["sent_bytes"][rows].tolist() == [64 * H * 4, 112 * H * 4]
    assert events["recv_bytes"][rows].tolist() == [112 * H * 4, 64 * H * 4]
    other = events["collective"].eq("allreduce")
    assert set(events["sent_bytes"][other].tolist()) == {-1} and set(events["recv_bytes"][other].tolist()) == {-1}


def test_skewed_router_per_group_bytes_and_the_finding(tmp_path):
    """Rank 2 receives 4 x 28 = 112 of every dispatch's rows, the others 48: its load is 112/48 = 2.33x the
    others' median; an expert_imbalance finding names it, priced by balanced_ranks."""
    summary = merged(moe_job(tmp_path, SKEWED))
    [group] = summary["alltoall"]
    assert (group["group"], group["ranks"], group["ops"], group["steps"], group["recv_side_ops"]) == \
        ("1", [0, 1, 2, 3], 6, 3, 3)
    row_bytes = H * 4
    for row in group["rows"]:
        received = 112 if row["rank"] == 2 else 48
        assert row["sent_bytes"] == row["recv_bytes"] == 3 * (64 + received) * row_bytes
        assert row["load_bytes"] == 3 * 2 * received * row_bytes  # dispatch received + combine sent
    assert group["hot_ranks"] == [2] and group["load_ratio_max"] == pytest.approx(112 / 48)
    [found] = [f for f in summary["findings"] if f["finding"] == "expert_imbalance"]
    assert found["ranks"] == [2] and found["priced_by"] == "balanced_ranks"
    evidence = found["evidence"]
    assert evidence["load_ratio"] == pytest.approx(112 / 48) and evidence["limit_ratio"] == 1.5
    assert evidence["load_bytes_by_rank"] == {"0": 288 * row_bytes, "1": 288 * row_bytes, "2": 672 * row_bytes,
                                              "3": 288 * row_bytes}
    assert "rank 2 gets 2.3x the tokens of the other ranks' median" in found["message"]
    assert not [f for f in summary["findings"] if f["finding"] == "imbalance"]  # one fix, one finding


def test_a_router_skewed_from_mid_run_is_hot_since_then(tmp_path):
    """8 steps, the router even in steps 0-3 and skewed from step 4: over the window rank 2's load is
    (4 x 2 x 112 + 4 x 2 x 64) / (4 x 2 x 48 + 4 x 2 x 64) = 1.57x at most the others', a ratio diluted by
    the even steps; the one change-point rule finds step 4, and from it rank 2 is 112/48 = 2.33x."""
    summary = merged(moe_job(tmp_path, SKEWED, steps=8, skewed_from=4))
    [group] = summary["alltoall"]
    assert (group["onset_step"], group["steps_since"], group["hot_ranks"]) == (4, 4, [2])
    assert group["load_ratio_max"] == pytest.approx(112 / 48)
    row_bytes = H * 4
    assert {r["rank"]: r["load_bytes"] for r in group["rows"]} == \
        {r: 4 * 2 * (112 if r == 2 else 48) * row_bytes for r in EP}
    even = merged(moe_job(tmp_path / "even", SKEWED, steps=8, skewed_from=8))["alltoall"][0]
    assert "onset_step" not in even and even["hot_ranks"] == []


def test_even_router_no_finding(tmp_path):
    summary = merged(moe_job(tmp_path, EVEN))
    [group] = summary["alltoall"]
    assert group["hot_ranks"] == [] and group["load_ratio_max"] == pytest.approx(1.0)
    assert not [f for f in summary["findings"] if f["finding"] == "expert_imbalance"]


def test_summary_without_all_to_all_has_no_key(tmp_path):
    ops = kf.tp_dp_ops(steps=2)
    summary = merged(kf.collective_job(tmp_path, ops, step_us=1000.0))
    assert "alltoall" not in summary


def test_alltoall_section_round_trips(tmp_path):
    summary = merged(moe_job(tmp_path, SKEWED))
    assert Summary.from_json(summary).to_json() == summary


def _gloo_rank(path: Path, rank: int, out_rows: list[int], in_rows: int, drop_op: bool = False) -> Path:
    """A CPU-only gloo trace as torch 2.13 writes it: per step the c10d::alltoall_base_ op on the main
    thread lists [out rows, H] and [in rows, H] (Concrete Inputs: the split sizes), its gloo:all_to_all
    range on a worker thread lists the input only."""
    trace = kf.KinetoTrace(rank=rank, world_size=2, pid=100 + rank, backend="gloo")
    trace.distributed = {"pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]}
    for s, out in enumerate(out_rows):
        at = s * 10_000_000
        trace.step(s, at, at + 9_000_000)
        trace.cpu_op("## forward ##", at + 100_000, at + 8_000_000, cat="user_annotation")
        if not (drop_op and s == 1):
            trace.cpu_op("c10d::alltoall_base_", at + 1_000_000, at + 1_050_000,
                         **{"Input Dims": [[out, H], [in_rows, H], [], [], [], [], []],
                            "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
                            "Concrete Inputs": ["", "", "", "[]", "[]", "False", "-1"]})
        trace.cpu_op("gloo:all_to_all", at + 1_100_000, at + 2_000_000, tid=900 + rank,
                     **{"Input Dims": [[in_rows, H]], "Input type": ["float"], "Concrete Inputs": [""]})
    return trace.write(path / f"rank{rank}.json")


def test_gloo_range_takes_its_ops_output(tmp_path):
    """The k-th gloo:all_to_all pairs with the k-th c10d::alltoall_base_: what the rank receives is
    the op's output tensor."""
    paths = [_gloo_rank(tmp_path, 0, [30, 34], 64), _gloo_rank(tmp_path, 1, [98, 94], 64)]
    events = sources.read(paths[1], CONFIG)[0].events
    gloo = np.flatnonzero(events["name"].eq("gloo:all_to_all"))
    assert events["sent_bytes"][gloo].tolist() == [64 * H * 4] * 2
    assert events["recv_bytes"][gloo].tolist() == [98 * H * 4, 94 * H * 4]
    [group] = merged(paths)["alltoall"]
    assert [(r["rank"], r["recv_bytes"]) for r in group["rows"]] == [(0, 64 * H * 4), (1, 192 * H * 4)]


def test_gloo_ranges_not_paired_when_the_counts_differ(tmp_path):
    """One op fewer than ranges: no pairing is a guess, so what the rank receives stays unknown."""
    path = _gloo_rank(tmp_path, 0, [30, 34], 64, drop_op=True)
    events = sources.read(path, CONFIG)[0].events
    gloo = np.flatnonzero(events["name"].eq("gloo:all_to_all"))
    assert events["recv_bytes"][gloo].tolist() == [-1, -1]


# -- the real torchrun + gloo jobs (tests/data/torch_moe/README.md) ---------------------------------------

def _raw_bytes(path: Path) -> dict[str, int]:
    """Plain Python over one rank's raw JSON: the bytes of its c10d::alltoall_base_ ops inside a
    ProfilerStep, output (received) and input (sent), by their Input Dims and types."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    size = {"float": 4, "long int": 8}
    out = {"sent": 0, "recv": 0, "ops": 0}
    for e in events:
        if e.get("name") == "c10d::alltoall_base_" and any(a <= e["ts"] <= b for a, b in steps):
            dims, types = e["args"]["Input Dims"], e["args"]["Input type"]
            out["recv"] += int(np.prod(dims[0])) * size[types[0]]
            out["sent"] += int(np.prod(dims[1])) * size[types[1]]
            out["ops"] += 1
    return out


@pytest.mark.parametrize("run", ["skewed1", "skewed2", "even"])
def test_real_gloo_job_bytes_match_the_raw_trace(run):
    """Each rank's bytes sent and received over the group's all-to-alls are those of its raw trace, and
    its tokens received in the dispatches those its make_traces.py run recorded (splits<R>.json)."""
    paths = sorted((DATA / run).glob("rank*.json.gz"))
    summary = merged(paths)
    [group] = summary["alltoall"]
    assert group["ranks"] == [0, 1] and group["steps"] == 5 and group["ops"] == 15
    for row, path in zip(group["rows"], paths):
        raw = _raw_bytes(path)
        assert (row["sent_bytes"], row["recv_bytes"], row["ops"]) == (raw["sent"], raw["recv"], raw["ops"])
        splits = json.loads((DATA / run / f"splits{row['rank']}.json").read_text())
        dispatched = sum(sum(out_splits) for _, out_splits in splits) * 128 * 4  # --hidden 128 floats
        combined = sum(sum(in_splits) for in_splits, _ in splits) * 128 * 4
        counts = 5 * 2 * 8  # the count exchange: one int64 from each of the 2 ranks per step
        assert row["recv_bytes"] == dispatched + combined + counts


def test_real_skewed_router_named_by_the_expert_imbalance_finding():
    """skewed1: rank 1's expert gets the router's weight 2 (2.0x the other rank's tokens); the replay
    prices balancing at 19% of the step, the finding names rank 1. Rank 1 is also the straggler: its
    lateness is the tokens the router sends it, so the imbalance is its cause, priced alone by
    balancing the ranks (the delay is charged once, to its cause), and the straggler's own finding,
    whose fix would remove the work itself (no_straggler: 12.7 ms), is left out; the straggler's cost is
    the same balancing, with its load ratio, and the other findings are priced after it."""
    summary = merged(sorted((DATA / "skewed1").glob("rank*.json.gz")))
    [group] = summary["alltoall"]
    assert group["hot_ranks"] == [1] and group["load_ratio_max"] == pytest.approx(2.0, abs=0.1)
    [found] = [f for f in summary["findings"] if f["finding"] == "expert_imbalance"]
    assert found["ranks"] == [1] and found["evidence"]["straggler"] is True
    assert found["priced_by"] == "balanced_ranks" and found["priced_after_straggler"] is False
    assert found["evidence"]["phase"] == "## forward ##"
    balanced = next(s for s in summary["whatif"]["scenarios"] if s["name"] == "balanced_ranks")
    alone = next(s for s in summary["whatif"]["scenarios"] if s["name"] == "no_straggler")
    straggler = summary["skew"]["straggler"]
    assert found["cost_ns"] == straggler["cost_ns"] == balanced["saving_ns"] < alone["saving_ns"]
    assert straggler["rank"] == 1 and straggler["expert_load"] == group["load_ratio_max"]
    assert not [f for f in summary["findings"] if f["finding"] == "straggler"]
    # the other findings are priced on top of that fix, balancing (0.89 ms on top of removing the tokens)
    assert "saving_after_straggler_ns" not in balanced and "saving_after_straggler_ns" not in alone
    overlap = next(s for s in summary["whatif"]["scenarios"] if s["name"] == "overlap_communication")
    [unoverlapped] = [f for f in summary["findings"] if f["finding"] == "unoverlapped_communication"]
    assert unoverlapped["priced_after_straggler"] and unoverlapped["cost_ns"] == overlap["saving_after_straggler_ns"]
    assert unoverlapped["cost_ns"] > 5 * 1_000_000


def test_the_straggler_line_says_its_lateness_is_its_expert_load(tmp_path):
    """What the user reads first: the straggler's cost is balancing the ranks, and why."""
    from conftest import run_cli
    done = run_cli("merge", *map(str, sorted((DATA / "skewed1").glob("rank*.json.gz"))), "-o", str(tmp_path),
                   "--width", "1000")
    line = next(text for text in done.stdout.splitlines() if text.startswith("Straggler:"))
    assert "rank 1, its lateness is its expert load (2.0x the tokens of the other ranks' median): balancing " \
           "the ranks saves 10.80 ms per step" in line and "removing its lateness" not in line


def test_real_skewed_router_withheld_where_the_replay_prices_no_saving():
    """skewed2, the same command run again: the bytes are as skewed, but the replay prices balancing
    under the floor (rank 1's chain has no return point after its dispatch: the thread resumed 4.9 ms
    after gloo's range closed, so no segment pairs with rank 0's), and the finding is withheld."""
    summary = merged(sorted((DATA / "skewed2").glob("rank*.json.gz")))
    [group] = summary["alltoall"]
    assert group["hot_ranks"] == [1]
    balanced = next(s for s in summary["whatif"]["scenarios"] if s["name"] == "balanced_ranks")
    assert balanced["saving_ns"] < CONFIG["skew"]["straggler_min_step_fraction"] * summary["whatif"]["measured_step_ns"]
    assert not [f for f in summary["findings"] if f["finding"] in ("expert_imbalance", "imbalance")]


def test_real_even_router_no_finding():
    summary = merged(sorted((DATA / "even").glob("rank*.json.gz")))
    [group] = summary["alltoall"]
    assert group["hot_ranks"] == [] and group["load_ratio_max"] < 1.1
    assert not [f for f in summary["findings"] if f["finding"] == "expert_imbalance"]


@pytest.mark.parametrize(("pattern", "expected_ms"), [("since step", 8.0), ("persistent", 4.0)])
def test_a_straggler_explained_by_its_load_costs_the_balancing_per_step_since_the_load_turned(pattern, expected_ms):
    """A router uneven in half of the steps: balancing saves 4 ms a step over the window, 8 ms in each
    uneven step; a straggler named "since step" k is priced per step since then, else per step, and
    never by removing its lateness (no_straggler: 30 ms)."""
    from distprof.analyses import cost
    ms = 1_000_000
    whatif = whatif_of([
        {"name": "no_straggler", "saving_ns": 30 * ms, "applies": True},
        {"name": "balanced_ranks", "saving_ns": 4 * ms, "applies": True, "saving_after_straggler_ns": 0}], 100 * ms)
    straggler = straggler_of(2, pattern)
    priced = cost.price_straggler(straggler, whatif, expert_load=(2.3, 0.5))
    assert (priced.cost_ns, priced.expert_load) == (expected_ms * ms, 2.3)
    assert cost.price_straggler(straggler, whatif).cost_ns == 30 * ms and \
        cost.price_straggler(straggler, whatif).expert_load is ABSENT
