"""Collectives (issue 13): per-instance waits, transfer, bytes and nccl-tests bandwidth, per-rank
wait vs transfer, the Collectives table and the straggler over all collectives, on jobs whose
timing is known by construction, plus real traces and the CLI as a user runs it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from result_views import summary_json

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline, sources
from distprof.analyses import collectives as coll
from distprof.reports import findings as findings_report
from distprof.results import Summary

CONFIG = config_mod.load()
US, MS = 1_000, 1_000_000
DATA = Path(__file__).resolve().parent / "data"
GROUPS = {"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2], "dp1": [1, 3], "world": [0, 1, 2, 3]}
HOSTS = {0: "nodeA", 1: "nodeA", 2: "nodeB", 3: "nodeB"}
TP_BYTES, DP_BYTES, WORLD_BYTES = 4 << 20, 64 << 20, 1 << 20
STEP = 10 * MS
LATE = 1 * MS  # rank 2 arrives this late at its TP allreduce in every step


def _trace(rank: int, rows: list[tuple], hostname: str, groups=GROUPS, **meta) -> ev.RankTrace:
    """A rank's event table from (kind, category, name, start, end, lane, step, collective, group,
    nbytes[, lane_kind, device, correlation]) rows."""
    full = [r + (ev.HOST_THREAD, -1, -1)[len(r) - 10:] for r in rows]  # host rows: no device, no correlation
    columns = list(zip(*full))
    events = ev.make_events(
        kind=np.array(columns[0], object), category=np.array(columns[1], object), name=np.array(columns[2], object),
        start_ns=np.array(columns[3], np.int64), end_ns=np.array(columns[4], np.int64),
        lane=np.array(columns[5], np.int64), step=np.array(columns[6], np.int64),
        collective=np.array(columns[7], object), group=np.array(columns[8], object),
        nbytes=np.array(columns[9], np.int64), lane_kind=np.array(columns[10], object),
        device=np.array(columns[11], np.int64), correlation_id=np.array(columns[12], np.int64), rank=rank)
    return ev.RankTrace(events=events, rank=rank, source="native",
                        meta={"process_groups": groups, "hostname": hostname, **meta})


def _phase(name: str, start: int, end: int, step: int) -> tuple:
    return (ev.RANGE, ev.PHASE, name, start, end, 1, step, "", "", -1)


def _comm(kind: str, group: str, start: int, end: int, step: int, nbytes: int) -> tuple:
    return (ev.COMM_OP, ev.COMMUNICATION, kind, start, end, 2, step, kind, group, nbytes)


def tp_dp_job(steps: int = 3) -> list[ev.RankTrace]:
    """4 ranks, TP {0,1},{2,3} (one node each) and DP {0,2},{1,3} (across nodes), plus a world
    allreduce. Per 10 ms step (times from the step's start, ms): forward 0-3 (rank 2: 0-4);
    TP allreduce from 3 (rank 2 from 4), all end 4.5; DP allreduce from 6 (rank 3 from 6.3),
    dp0 ends 7, dp1 ends 7.3; world allreduce 8-8.5; optimizer 8.5-9.5."""
    traces = []
    for rank in range(4):
        rows = []
        for s in range(steps):
            base = s * STEP
            late = LATE if rank == 2 else 0
            tp, dp = {0: ("tp0", "dp0"), 1: ("tp0", "dp1"), 2: ("tp1", "dp0"), 3: ("tp1", "dp1")}[rank]
            dp_start = 6_300 * US if rank == 3 else 6 * MS
            dp_end = 7_300 * US if dp == "dp1" else 7 * MS
            tp_end = 4_500 * US if tp == "tp1" else 3_500 * US
            rows += [_phase(ev.PROFILE_STEP, base, base + STEP, s), _phase("forward", base, base + 3 * MS + late, s),
                     _phase("optimizer", base + 8_500 * US, base + 9_500 * US, s),
                     _comm(ev.ALLREDUCE, tp, base + 3 * MS + late, base + tp_end, s, TP_BYTES),
                     _comm(ev.ALLREDUCE, dp, base + dp_start, base + dp_end, s, DP_BYTES),
                     _comm(ev.ALLREDUCE, "world", base + 8 * MS, base + 8_500 * US, s, WORLD_BYTES)]
        traces.append(_trace(rank, rows, HOSTS[rank]))
    return traces


def merged(traces: list[ev.RankTrace], config: dict = CONFIG):
    """The worded Summary of these ranks, as the CLI hands it to its reports."""
    return findings_report.worded(pipeline.combine([pipeline.reduce_rank(t, config) for t in traces], config,
                                                   source="test", world_size=len(traces)))


@pytest.fixture(scope="module")
def tp_dp():
    summary = merged(tp_dp_job())
    return summary, summary.to_json()


def test_nothing_matched_across_groups_and_clocks_verified(tp_dp):
    summary, data = tp_dp
    skew = data["skew"]
    assert skew["matched"] == 15 and skew["clock_unverified_ranks"] == [] and skew["max_clock_uncertainty_ns"] == 0
    for row in skew["collectives"]:
        assert row["group_ranks"] == GROUPS[row["group_name"]], row
        assert set(row["wait_ns_by_rank"]) == {str(r) for r in GROUPS[row["group_name"]]}


def test_instances_exact(tp_dp):
    _, data = tp_dp
    rows = {(c["group_name"], c["step"]): c for c in data["skew"]["collectives"]}
    tp1 = rows[("tp1", 1)]
    assert tp1["kind"] == "allreduce" and tp1["ordinal"] == 0 and tp1["last_rank"] == 2
    assert tp1["arrival_skew_ns"] == LATE and tp1["attributable_wait_ns"] == LATE
    assert tp1["wait_ns_by_rank"] == {"2": 0, "3": LATE}
    assert tp1["transfer_ns"] == 500 * US and tp1["bytes"] == TP_BYTES
    assert tp1["algbw_gbps"] == pytest.approx(TP_BYTES / (500 * US))
    assert tp1["busbw_gbps"] == pytest.approx(TP_BYTES / (500 * US) * 2 * (2 - 1) / 2)
    assert tp1["node_span"] == "intra-node"
    dp1 = rows[("dp1", 0)]
    assert dp1["last_rank"] == 3 and dp1["wait_ns_by_rank"] == {"1": 300 * US, "3": 0}
    assert dp1["transfer_ns"] == 1 * MS and dp1["node_span"] == "inter-node"
    assert dp1["busbw_gbps"] == pytest.approx(DP_BYTES / MS)
    world = rows[("world", 2)]
    assert world["busbw_gbps"] == pytest.approx(WORLD_BYTES / (500 * US) * 2 * 3 / 4)
    assert world["node_span"] == "inter-node" and world["arrival_skew_ns"] == 0


def test_wait_plus_transfer_is_communication(tp_dp):
    summary, data = tp_dp
    waits = {r["rank"]: r["communication_wait_ns"] for r in data["ranks"]}
    assert waits == {0: 0, 1: 3 * 300 * US, 2: 0, 3: 3 * LATE}
    for row in data["ranks"]:
        assert row["communication_wait_ns"] + row["communication_transfer_ns"] == row["communication_ns"]
    assert row["communication_ns"] == 3 * (1_500 + 1_000 + 500) * US  # rank 3
    assert data["across_ranks"]["communication_wait_ns"]["max_rank"] == 3


def test_table_rows(tp_dp):
    _, data = tp_dp
    rows = data["collectives"]["rows"]
    keys = [(r["group"], r["node_span"], r["size_bucket"]) for r in rows]
    assert keys == [("dp1", "inter-node", "16-256 MiB"), ("dp0", "inter-node", "16-256 MiB"),
                    ("tp1", "intra-node", "1-16 MiB"), ("world", "inter-node", "64 KiB-1 MiB"),
                    ("tp0", "intra-node", "1-16 MiB")]
    dp1, dp0, tp1, world, tp0 = rows
    assert all(r["kind"] == "allreduce" and r["count"] == r["matched"] == 3 for r in rows)
    assert dp1["total_ns"] == 3 * 2_300 * US and dp1["wait_ns"] == 900 * US
    assert dp1["wait_share"] == pytest.approx(900 / 6_900)
    assert tp1["wait_share"] == pytest.approx(0.5) and tp1["transfer_median_ns"] == 500 * US
    assert tp0["total_ns"] == 3 * MS and tp0["wait_share"] == 0
    assert world["busbw_median_gbps"] == pytest.approx(WORLD_BYTES / (500 * US) * 1.5)
    assert dp0["algbw_median_gbps"] == pytest.approx(DP_BYTES / MS) and dp0["peak_share"] is None


def pointed(data: dict) -> dict | None:
    """The rank the waits point at: the straggler, or the one whose fix the replay prices under
    the floor (the fixed-length steps of these jobs absorb a late rank's delay)."""
    return data["skew"]["straggler"] or data["skew"].get("unconfirmed_straggler")


def test_straggler_exact(tp_dp):
    # the steps are fixed 10 ms windows: rank 2's lateness costs no step time, so the replay does
    # not confirm it (under the 5% floor) and none is named; with a floor of 0 it is, as before
    assert tp_dp[1]["skew"]["straggler"] is None
    assert tp_dp[1]["skew"]["unconfirmed_straggler"]["rank"] == 2
    data = merged(tp_dp_job(), config_mod.load(None, {"skew": {"straggler_min_step_fraction": 0}})).to_json()
    straggler = data["skew"]["straggler"]
    assert straggler["rank"] == 2 and straggler["waits_caused_ns"] == LATE
    assert straggler["total_waits_caused_ns"] == 3 * LATE
    assert (straggler["late_in"], straggler["of"]) == (3, 9)
    assert straggler["pattern"] == "persistent" and straggler["steps_late"] == straggler["steps"] == 3
    assert straggler["side"] == "host" and straggler["phase"] == "forward"
    assert straggler["waits_caused_share"] == pytest.approx(LATE / STEP)
    # its cost is the replay's saving of removing its lateness, the finding's the same number
    [fix] = [r for r in data["whatif"]["scenarios"] if r["name"] == "no_straggler"]
    assert straggler["cost_ns"] == fix["saving_ns"] is not None
    ranks = {r["rank"]: r for r in data["skew"]["ranks"]}
    # rank 3 is last at dp1 by 0.3 ms, but it had waited 1 ms for rank 2 in tp1 since it last met
    # rank 1 (and computed 0.7 ms less in between): a delay passed on, not its own
    assert ranks[3]["total_waits_caused_ns"] == 0 and ranks[3]["late_in"] == 3
    [finding] = [f for f in data["findings"] if f["finding"] == "straggler"]
    assert "rank 2" in finding["message"] and "persistent: late in 3/3 steps" in finding["message"]
    assert "forward" in finding["message"] and "host" in finding["advice"] and "DDP" not in finding["advice"]


def test_one_step_dlrm_last_in_5_of_8_alltoalls_is_named():
    """8 ranks, one 14.4 ms step, 8 alltoalls: rank 5 last in the first five by 260 us each
    (1.3 ms, ~9% of the step); in the other three rank 0 is last by 10 us (below late_min_ns)."""
    traces = []
    for rank in range(8):
        rows = [_phase(ev.PROFILE_STEP, 0, 14_400 * US, 0)]
        for k in range(8):
            start = (1 + k) * 1_500 * US + (260 * US if rank == 5 and k < 5 else 10 * US if rank == 0 and k >= 5
                                            else 0)
            end = (1 + k) * 1_500 * US + 260 * US + 700 * US
            rows.append(_comm(ev.ALLTOALL, "world", start, end, 0, 8 << 20))
        traces.append(_trace(rank, rows, "host0", groups={"world": list(range(8))}))
    data = merged(traces).to_json()
    straggler = data["skew"]["straggler"]
    assert straggler["rank"] == 5 and straggler["pattern"] == "single step"
    assert (straggler["late_in"], straggler["of"]) == (5, 8) and straggler["waits_caused_ns"] == 5 * 260 * US
    assert straggler["waits_caused_share"] == pytest.approx(1.3 / 14.4)
    [finding] = [f for f in data["findings"] if f["finding"] == "straggler"]
    assert "one profiled step: cannot tell persistent from one-off" in finding["message"]
    assert finding["predicted_saving_ns"] == straggler["cost_ns"]


def test_one_step_small_lead_after_a_late_run_still_counts():
    """One step, 8 alltoalls: rank 7 last in the first four by 260 us, in the fifth by 9 us (under
    late_min_ns, but still last: the others had just waited for it); rank 0 last in the other three
    by 10 us. Last in 5 of 8: named, with the one-step caveat."""
    traces = []
    for rank in range(8):
        rows = [_phase(ev.PROFILE_STEP, 0, 14_400 * US, 0)]
        for k in range(8):
            lead = (260 * US if k < 4 else 9 * US if k == 4 else 0) if rank == 7 else \
                (10 * US if rank == 0 and k >= 5 else 0)
            start = (1 + k) * 1_500 * US + lead
            rows.append(_comm(ev.ALLTOALL, "world", start, (1 + k) * 1_500 * US + 960 * US, 0, 8 << 20))
        traces.append(_trace(rank, rows, "host0", groups={"world": list(range(8))}))
    data = merged(traces).to_json()
    straggler = data["skew"]["straggler"]
    assert straggler is not None and straggler["rank"] == 7 and straggler["pattern"] == "single step"
    assert (straggler["late_in"], straggler["last_in"], straggler["of"]) == (4, 5, 8)
    assert not any("transient" in n for n in data["skew"]["notes"])


def _single_allreduce_job(late: dict[tuple[int, int], int], steps: int, step_ns: int = STEP,
                          outside: dict[int, int] | None = None, phase_extra: dict[int, int] | None = None):
    """4 ranks, one world allreduce per step at 5 ms (+ ``late[(rank, step)]``); forward 0-4 ms
    (+ ``phase_extra[rank]``); ``outside[rank]``: that rank sleeps before the allreduce outside any phase."""
    traces = []
    for rank in range(4):
        rows = []
        for s in range(steps):
            base = s * step_ns
            delay = late.get((rank, s), 0) + (outside or {}).get(rank, 0)
            rows += [_phase(ev.PROFILE_STEP, base, base + step_ns, s),
                     _phase("forward", base, base + 4 * MS + (phase_extra or {}).get(rank, 0), s),
                     _comm(ev.ALLREDUCE, "world", base + 5 * MS + delay, base + 5 * MS + max(
                         [late.get((r, s), 0) + (outside or {}).get(r, 0) for r in range(4)]) + MS, s, 1 << 20)]
        traces.append(_trace(rank, rows, "host0", groups={"world": [0, 1, 2, 3]}))
    return merged(traces).to_json()


def test_rotating_culprit_is_no_straggler():
    data = _single_allreduce_job({(s, s): 2 * MS for s in range(4)}, steps=4)
    assert data["skew"]["straggler"] is None
    [note] = [n for n in data["skew"]["notes"] if "rotates" in n]
    assert "the late rank rotates (ranks 0, 1, 2, 3): not one straggler" in note
    assert all(f"step {s}: rank {s}" in note for s in range(4))


def test_transient_late_rank_is_a_note():
    data = _single_allreduce_job({(1, 2): 3 * MS}, steps=4)
    assert data["skew"]["straggler"] is None
    assert any("transient" in n and "step(s) 2" in n for n in data["skew"]["notes"])


def test_sleep_outside_any_phase_is_not_blamed_on_a_phase():
    """Rank 1 sleeps 40 ms before the allreduce outside every phase; its forward is 225.7 us longer."""
    data = _single_allreduce_job({}, steps=3, step_ns=100 * MS, outside={1: 40 * MS}, phase_extra={1: 225_700})
    straggler = pointed(data)
    assert straggler["rank"] == 1 and straggler["waits_caused_ns"] == 40 * MS
    assert straggler["phase"] is None and straggler["largest_phase"] == "forward"
    from distprof.reports.findings import straggler_line
    skew = Summary.from_json(data).skew
    line = straggler_line(skew.straggler or skew.unconfirmed_straggler,  # how its row reads, named or not
                          lambda ns: f"{ns / MS:.4f} ms")
    assert "outside any annotated phase" in line and "225.7" not in line and "0.2257" not in line


def _gpu_job(kernel_late: int, launch_late: int):
    """2 ranks on one GPU host, 3 steps: an NCCL allreduce kernel launched at 1 ms and run at
    2 ms; rank 1 launches ``launch_late`` and runs ``kernel_late`` later."""
    traces = []
    for rank in range(2):
        rows = []
        for s in range(3):
            base = s * STEP
            launch = base + MS + (launch_late if rank else 0)
            start = base + 2 * MS + (kernel_late if rank else 0)
            correlation = 100 + s
            rows += [_phase(ev.PROFILE_STEP, base, base + STEP, s),
                     (ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", launch, launch + 5 * US, 1, s, "", "", -1,
                      ev.HOST_THREAD, -1, correlation),
                     (ev.KERNEL, ev.COMMUNICATION, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", start,
                      base + 2 * MS + kernel_late + MS, 7, s, ev.ALLREDUCE, "0", 64 << 20, ev.GPU_STREAM, 0,
                      correlation)]
        traces.append(_trace(rank, rows, "gpuhost", groups={"0": [0, 1]}))
    return merged(traces).to_json()


def test_gpu_launch_on_time_but_kernel_late_is_device_side():
    straggler = pointed(_gpu_job(kernel_late=2 * MS, launch_late=0))
    assert straggler["rank"] == 1 and straggler["side"] == "device" and straggler["waits_caused_ns"] == 2 * MS
    straggler = _gpu_job(kernel_late=2 * MS, launch_late=2 * MS)["skew"]["straggler"]
    assert straggler["rank"] == 1 and straggler["side"] == "host"


@pytest.mark.parametrize("key, value", [("peak_busbw_gbps", 0), ("peak_busbw_gbps", -5.0),
                                        ("peak_busbw_gbps", "fast"), ("peak_busbw_gbps", True),
                                        ("peak_busbw_gbps", float("inf")), ("gpus_per_node", 2.5),
                                        ("gpus_per_node", 0), ("slow_collective_share", 2)])
def test_hardware_keys_are_validated(key, value):
    with pytest.raises(config_mod.ConfigError, match=f"hardware.{key}"):
        config_mod.load(None, {"hardware": {key: value}})


def test_hardware_keys_accept_null_and_numbers(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("hardware:\n  peak_busbw_gbps: 180\n  gpus_per_node: 8\n")
    config = config_mod.load(path)
    assert config["hardware"] == {"peak_busbw_gbps": 180.0, "gpus_per_node": 8, "slow_collective_share": 0.5,
                                  "peak_tflops": None}
    path.write_text("hardware:\n  peak_busbw_gbps: null\n")
    assert config_mod.load(path)["hardware"]["peak_busbw_gbps"] is None


def test_slow_collective_finding_only_with_a_peak(tp_dp):
    _, data = tp_dp
    assert not [f for f in data["findings"] if f["finding"] == "slow_collective"]
    config = config_mod.load(None, {"hardware": {"peak_busbw_gbps": 100}})
    data = merged(tp_dp_job(), config).to_json()
    [finding] = [f for f in data["findings"] if f["finding"] == "slow_collective"]
    slow = {(r["group"], r["size_bucket"]) for r in finding["evidence"]["rows"]}
    # busbw: dp 67.1 GB/s (67% of peak, fine); tp 8.4 and world 3.1 GB/s: below half the peak
    assert slow == {("tp0", "1-16 MiB"), ("tp1", "1-16 MiB"), ("world", "64 KiB-1 MiB")}
    shares = {r["group"]: r["peak_share"] for r in data["collectives"]["rows"]}
    assert shares["dp0"] == pytest.approx(DP_BYTES / MS / 100)


def test_bus_factors_follow_nccl_tests():
    kinds = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce", "p2p", "barrier"]
    factors = coll.bus_factors(np.array(kinds), np.full(len(kinds), 8))
    assert factors[:7].tolist() == [2 * 7 / 8, 7 / 8, 7 / 8, 7 / 8, 1, 1, 1] and np.isnan(factors[7])
    assert coll.size_bucket(np.array([64 << 10, (64 << 10) + 1, 1 << 20, 300 << 20, np.nan])).tolist() == \
        ["<=64 KiB", "64 KiB-1 MiB", "64 KiB-1 MiB", ">256 MiB", "unknown"]


def test_torch_cpu_late_rank_2():
    """4-rank gloo, rank 2 sleeps 30 ms before the allreduce of group {2,3} every step. Holds with
    or without the Kineto reader's group inference: when groups are known the allreduce of {2,3}
    is matched within its group; either way the others wait for rank 2 alone."""
    results = [pipeline.reduce_rank(t, CONFIG) for p in sorted((DATA / "torch_cpu").glob("rank*.json.gz"))
               for t in sources.read(p, CONFIG)]
    data = summary_json(pipeline.combine(results, CONFIG, source="kineto", world_size=4))
    costs = {r["rank"]: r["total_waits_caused_ns"] for r in data["skew"]["ranks"]}
    assert max(costs, key=costs.get) == 2
    straggler = data["skew"]["straggler"]
    assert straggler is None or straggler["rank"] == 2
    if straggler is not None:
        assert straggler["side"] == "host" and straggler["waits_caused_ns"] >= 20 * MS


def _raw_nccl_busbw() -> dict[str, float]:
    """Median busbw per size bucket of the allreduce kernels, from the raw JSON: In msg nelems x 4
    bytes (Float) / dur x 2(n−1)/n with n = 2."""
    raw = json.load(gzip.open(DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz"))
    kernels = [e for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ncclKernel_AllReduce")]
    nbytes = np.array([e["args"]["In msg nelems"] * 4 for e in kernels], np.float64)
    busbw = nbytes / (np.array([e["dur"] for e in kernels]) * 1_000) * 2 * (2 - 1) / 2
    buckets = coll.size_bucket(nbytes)
    return {b: float(np.median(busbw[buckets == b])) for b in set(buckets.tolist())}


def test_hta_nccl_bytes_and_busbw_from_kernel_args():
    (trace,) = sources.read(DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz", CONFIG)
    data = summary_json(pipeline.combine([pipeline.reduce_rank(trace, CONFIG)], CONFIG, source="kineto", world_size=2))
    rows = {r["size_bucket"]: r for r in data["collectives"]["rows"] if r["kind"] == "allreduce"}
    expected = _raw_nccl_busbw()
    assert set(rows) == set(expected)
    for bucket, busbw in expected.items():
        assert rows[bucket]["matched"] == 0 and rows[bucket]["busbw_median_gbps"] == pytest.approx(busbw, rel=1e-3)


def test_hta_one_of_two_counts_unmatched_collectives():
    """A 1-of-2-ranks trace: nothing matches, every collective is a single-rank instance whose
    transfer is its whole duration; the rank's communication is not split (a note says why)."""
    (trace,) = sources.read(DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz", CONFIG)
    data = summary_json(pipeline.combine([pipeline.reduce_rank(trace, CONFIG)], CONFIG, source="kineto", world_size=2))
    rows = data["collectives"]["rows"]
    assert sum(r["count"] for r in rows) == data["collectives"]["single_rank"] == 21
    assert all(r["matched"] == 0 and r["wait_share"] is None for r in rows)
    assert {r["kind"] for r in rows} == {"allreduce", "broadcast"}
    assert data["ranks"][0]["communication_wait_ns"] is None
    assert any("not split into wait and transfer" in n for n in data["skew"]["notes"])


def test_cli_merge_prints_the_collectives_table(tmp_path):
    inputs = sorted(str(p) for p in (DATA / "torch_cpu").glob("rank*.json.gz"))
    result = subprocess.run([sys.executable, "-m", "distprof", "merge", *inputs, "-o", str(tmp_path), "--no-html",
                             "--gpus-per-node", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Collectives" in result.stdout and "busbw GB/s" in result.stdout and "Comm wait" in result.stdout
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["collectives"]["gpus_per_node"] == 2 and data["collectives"]["rows"]
    assert {r["node_span"] for r in data["collectives"]["rows"]} <= {"intra-node", "inter-node"}
    assert (tmp_path / "collectives.csv").read_text().startswith("kind,group,node_span,size_bucket")
    bad = subprocess.run([sys.executable, "-m", "distprof", "merge", *inputs, "-o", str(tmp_path / "x"),
                          "--gpus-per-node", "0"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "gpus_per_node" in bad.stderr and "Traceback" not in bad.stderr


def _serialized_job(kind: str, source: str) -> dict:
    """2 ranks on one host, 3 steps: computation and ``kind`` on one thread (serialized)."""
    traces = []
    for rank in range(2):
        rows, peers = [], []
        for s in range(3):
            base = s * STEP
            rows += [_phase(ev.PROFILE_STEP, base, base + STEP, s), _phase("forward", base, base + 4 * MS, s),
                     (ev.COMM_OP, ev.COMMUNICATION, kind, base + 4 * MS, base + 6 * MS, 1, s, kind, "", 1 << 20)]
            peers += [-1, -1, 1 - rank]
        trace = _trace(rank, rows, "host0", groups={})
        trace.events = trace.events.with_columns(peer=np.asarray(peers, np.int64))  # rows are in start order
        trace.source = source
        traces.append(trace)
    return merged(traces).to_json()


@pytest.mark.parametrize("kind, source", [(ev.SEND, "native"), (ev.ALLREDUCE, "native"), (ev.ALLREDUCE, "kineto")])
def test_serialized_advice_fits_the_kind_and_names_no_framework_the_trace_does_not_show(kind, source):
    data = _serialized_job(kind if kind != ev.SEND else ev.SEND, source)
    [finding] = [f for f in data["findings"] if f["finding"] == "serialized_communication"]
    advice = finding["advice"]
    if kind == ev.SEND:
        assert "point-to-point" in advice and "no bucketing" in advice and "DDP" not in advice
    else:
        assert "allreduce" in advice and ("DDP" in advice) == (source == "kineto")


def test_reports_show_the_table_and_the_split(tp_dp):
    from distprof.reports import html, text
    summary, data = tp_dp
    shown = text.render(summary)
    assert "Collectives" in shown and "Comm wait (ms)" in shown and "Comm transfer (ms)" in shown
    assert "tp1      intra-node  1-16 MiB" in shown and "50.0%" in shown
    page = html.render(summary)
    assert "<h2>Collectives</h2>" in page and "16-256 MiB" in page and "Comm wait" in page
    old = Summary.from_json({k: v for k, v in data.items() if k != "collectives"})  # from before issue 13
    assert "busbw" not in text.render(old) and "<h2>Collectives</h2>" not in html.render(old)


def test_ops_of_an_unnamed_group_are_on_the_world_for_bus_bandwidth():
    """hta_trace_diff_control_1of8 names no process group: its ops are taken to be on the world
    of 8 (distributedInfo.world_size), so busbw = algbw x 7/8 (alltoall) and x 2*7/8 (allreduce)."""
    (trace,) = sources.read(DATA / "kineto" / "hta_trace_diff_control_1of8" / "control.json.gz", CONFIG)
    data = summary_json(pipeline.combine([pipeline.reduce_rank(trace, CONFIG)], CONFIG, source="kineto", world_size=8))
    rows = [r for r in data["collectives"]["rows"] if r["algbw_median_gbps"]]
    assert {r["kind"] for r in rows} == {"alltoall", "allreduce"}
    for row in rows:
        factor = 2 * 7 / 8 if row["kind"] == "allreduce" else 7 / 8
        assert row["busbw_median_gbps"] == pytest.approx(row["algbw_median_gbps"] * factor)


def test_late_host_side_collective_on_a_gpu_trace_is_host_side():
    """kineto_h100/gloo_cuda: gloo collectives are host ranges on a GPU trace; rank 1 sleeps 20 ms
    on the host every step, so the straggler is rank 1 and its delay is on the host."""
    paths = sorted((DATA / "kineto_h100" / "gloo_cuda").glob("rank*.json.gz"))
    data = summary_json(pipeline.merge_files(paths, CONFIG))
    assert data["skew"]["straggler"]["rank"] == 1 and data["skew"]["straggler"]["side"] == "host"


def test_buckets_queued_together_count_one_delay_once():
    """DDP-like: each rank enqueues 4 allreduce buckets 1 ms apart on its comm thread (the range
    opens at the enqueue); rank 1 starts all of them 20 ms late. The others waited 20 ms + 3 ms
    (the union of [on-time enqueue, late enqueue] over the 4 buckets), not 4 x 20 ms."""
    late, steps, step = 20 * MS, 3, 60 * MS
    traces = []
    for rank in range(2):
        rows = []
        for s in range(steps):
            base = s * step
            shift = late if rank == 1 else 0
            rows.append(_phase(ev.PROFILE_STEP, base, base + step, s))
            rows += [_comm(ev.ALLREDUCE, "world", base + k * MS + shift, base + late + 10 * MS + k * MS, s, 1 << 20)
                     for k in range(4)]
        traces.append(_trace(rank, rows, "host0", groups={"world": [0, 1]}))
    straggler = merged(traces).to_json()["skew"]["straggler"]
    assert straggler["rank"] == 1 and straggler["late_in"] == 4 * steps
    # per step: [0, 20) ∪ [1, 21) ∪ [2, 22) ∪ [3, 23) ms = 23 ms (the sum would be 80 ms)
    assert straggler["waits_caused_ns"] == late + 3 * MS
    assert straggler["total_waits_caused_ns"] == steps * (late + 3 * MS)
