"""The Kineto reader's communication columns (collective, group, nbytes, peer) and
meta["process_groups"], checked against values computed here from the raw JSON with plain
``json``/``gzip`` (never through distprof), on the real traces in tests/data and synthetic ones."""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import kineto_fixtures as kf
import pytest

from distprof import config as config_mod
from distprof import events as ev
from distprof.sources import dtype_size, kineto, kineto_decode

DATA = Path(__file__).resolve().parent / "data"
NCCL_PARSER = DATA / "kineto" / "hta_nccl_parser_config_1of2" / "nccl_data.json.gz"
TRACE_FILTER = sorted((DATA / "kineto" / "hta_trace_filter_2rank").glob("*.json.gz"))
TORCH_CPU = sorted((DATA / "torch_cpu").glob("rank*.json.gz"))
# independent of distprof: element sizes of the dtypes these traces use, and their ops' kinds
SIZE = {"Float": 4, "Long": 8, "float": 4, "long": 8, "int": 4, "unsigned char": 1, "signed char": 1}
KIND = {"allreduce": "allreduce", "broadcast": "broadcast", "nccl:all_to_all": "alltoall",
        "nccl:all_reduce": "allreduce", "nccl:_all_gather_base": "allgather", "gloo:all_reduce": "allreduce",
        "gloo:all_gather": "allgather", "gloo:all_to_all": "alltoall", "gloo:broadcast": "broadcast",
        "c10d::allreduce_": "allreduce", "c10d::allgather_": "allgather", "c10d::alltoall_base_": "alltoall",
        "c10d::broadcast_": "broadcast"}


def config() -> dict:
    return config_mod.load(overrides={"window": "all"})


def read(path: Path) -> ev.RankTrace:
    (trace,) = kineto.read(path, config())
    return trace


def raw(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        return json.load(handle, parse_float=Decimal)


def ns(value) -> int:
    return int(Decimal(str(value)) * 1000)


def comm_rows(trace: ev.RankTrace) -> list[tuple]:
    """(start_ns, name, collective, group, nbytes, peer) of the communication rows, by start."""
    e = trace.events.to_frame()
    e = e[e["category"] == ev.COMMUNICATION]
    return sorted(zip(e["start_ns"].tolist(), e["name"].astype(str), e["collective"].astype(str),
                      e["group"].astype(str), e["nbytes"].tolist(), e["peer"].tolist()))


def test_other_rows_keep_the_defaults():
    e = read(NCCL_PARSER).events.to_frame()
    other = e[e["category"] != ev.COMMUNICATION]
    assert set(other["collective"].astype(str)) == {""} and set(other["group"].astype(str)) == {""}
    assert set(other["nbytes"]) == {-1} and set(other["peer"]) == {-1}


def test_newer_nccl_trace_kinds_groups_and_bytes_from_the_kernel_args():
    document = raw(NCCL_PARSER)
    expected = sorted((ns(e["ts"]), e["name"], KIND[e["args"]["Collective name"]], e["args"]["Process Group Name"],
                       max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * SIZE[e["args"]["dtype"]], -1)
                      for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
                      and e["name"].startswith("nccl"))
    trace = read(NCCL_PARSER)
    assert comm_rows(trace) == expected
    assert len(expected) == 21 and {row[3] for row in expected} == {"0"}
    assert trace.meta["process_groups"] == {p["pg_name"]: p["ranks"]
                                            for p in document["distributedInfo"]["pg_config"]} == {"0": [0, 1]}
    assert "record_param_comms" in trace.meta["group_from"]


def _enclosing(events: list[dict], call: dict, prefix: str) -> dict | None:
    """The innermost host range named ``prefix``* on the call's thread around the call."""
    around = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e["name"].startswith(prefix)
              and e["tid"] == call["tid"] and e["ts"] <= call["ts"] and call["ts"] + call["dur"] <= e["ts"] + e["dur"]]
    return max(around, key=lambda e: e["ts"], default=None)


def _shape_bytes(op: dict, inputs_only: bool) -> int:
    sizes = [math.prod(dims) * SIZE[dtype] for dims, dtype in zip(op["args"]["Input Dims"], op["args"]["Input type"])
             if dtype in SIZE]
    return sum(sizes) if inputs_only else max(sizes)


@pytest.mark.parametrize("path", TRACE_FILTER, ids=lambda p: p.name)
def test_older_trace_sendrecv_kernels_take_the_kind_of_their_op(path):
    events = [e for e in raw(path)["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    expected = []
    for kernel in (e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_SendRecv")):
        call = calls[kernel["args"]["correlation"]]
        annotation, op = _enclosing(events, call, "nccl:"), _enclosing(events, call, "c10d::")
        typed = any(dtype in SIZE for dtype in op["args"]["Input type"])
        nbytes = _shape_bytes(op, False) if typed else _shape_bytes(annotation, True)
        expected.append((ns(kernel["ts"]), kernel["name"], KIND[annotation["name"]], "", nbytes, -1))
    trace = read(path)
    assert comm_rows(trace) == sorted(expected)
    kinds = [row[2] for row in expected]
    assert (kinds.count("alltoall"), kinds.count("allreduce"), kinds.count("allgather")) == (4, 4, 2)
    assert "sendrecv" not in kinds  # every SendRecv kernel here was launched inside a named op
    # allgather: the c10d op's output (64 x 16 MiB), not the nccl range's input
    assert {row[4] for row in expected if row[2] == "allgather"} == {1073741824}
    assert trace.meta["process_groups"] == {} and trace.meta["group_from"] == "unknown"


def _thread_clusters(tids: set[int]) -> list[list[int]]:
    clusters: list[list[int]] = []
    for tid in sorted(tids):
        if clusters and tid == clusters[-1][-1] + 1:
            clusters[-1].append(tid)
        else:
            clusters.append([tid])
    return clusters


@pytest.mark.parametrize("path", TORCH_CPU, ids=lambda p: p.name)
def test_gloo_groups_from_worker_threads_and_pg_config(path):
    document = raw(path)
    rank = document["distributedInfo"]["rank"]
    pg_config = document["distributedInfo"]["pg_config"]
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    gloo = [e for e in events if e["name"].startswith("gloo:")]
    clusters = _thread_clusters({e["tid"] for e in gloo})
    assert len(clusters) == len(pg_config) == 2
    group_of_tid = {tid: pg["pg_name"] for cluster, pg in zip(clusters, pg_config) for tid in cluster}
    pair = pg_config[1]
    assert pair["ranks"] == ([0, 1] if rank < 2 else [2, 3])  # the pair group: its allreduce
    world_size = len(pg_config[0]["ranks"])
    assert world_size == 4
    expected = []
    for e in gloo:
        nbytes = _shape_bytes(e, True) * (world_size if e["name"] == "gloo:all_gather" else 1)
        expected.append((ns(e["ts"]), e["name"], KIND[e["name"]], group_of_tid[e["tid"]], nbytes, -1))
        assert group_of_tid[e["tid"]] == (pair["pg_name"] if e["name"] == "gloo:all_reduce" else "0")
    for e in (e for e in events if e["name"].startswith("c10d::")):
        typed = any(dtype in SIZE for dtype in e["args"]["Input type"])  # TensorList ops: dtype unknown
        group = pair["pg_name"] if e["name"] == "c10d::allreduce_" else "0"
        expected.append((ns(e["ts"]), e["name"], KIND[e["name"]], group, _shape_bytes(e, False) if typed else -1, -1))
    trace = read(path)
    assert comm_rows(trace) == sorted(expected)
    assert trace.meta["process_groups"] == {pg["pg_name"]: pg["ranks"] for pg in pg_config}
    assert "gloo worker threads + pg_config" in trace.meta["group_from"] and not trace.warnings


def _gloo_trace(threads: list[int], pg: list[tuple[str, list[int]]]) -> kf.KinetoTrace:
    """A CPU-only trace: one gloo:all_reduce of 16 floats per worker thread, and its c10d op."""
    trace = kf.KinetoTrace(rank=0, world_size=4, pid=100, backend="gloo", base_time_ns=None)
    trace.distributed = {"pg_config": [{"pg_name": name, "pg_size": len(ranks), "ranks": ranks} for name, ranks in pg]}
    trace.step(1, 0, 10_000_000)
    for index, tid in enumerate(threads):
        start = 100_000 + index * 1_000_000
        trace.cpu_op("c10d::allreduce_", start - 50_000, start - 40_000, **{
            "Input Dims": [[[16]], [], [], []], "Input type": ["TensorList", "", "", "Scalar"]})
        trace.cpu_op("gloo:all_reduce", start, start + 500_000, tid=tid, cat="user_annotation",
                     **{"Input Dims": [[16]], "Input type": ["float"], "Concrete Inputs": [""]})
    return trace


@pytest.mark.parametrize("threads", [[101, 102, 103, 104], [101, 102, 201, 301]], ids=["one-cluster", "three"])
def test_gloo_groups_not_guessed_when_threads_do_not_match_pg_config(tmp_path, threads):
    pg = [("0", [0, 1, 2, 3]), ("1", [0, 1])]
    trace = read(_gloo_trace(threads, pg).write(tmp_path / "rank0.json"))
    rows = comm_rows(trace)
    assert [row[2:] for row in rows] == [("allreduce", "", -1, -1), ("allreduce", "", 64, -1)] * 4
    assert len(trace.warnings) == 1 and "could not be told apart" in trace.warnings[0]
    assert trace.meta["process_groups"] == dict(pg) and trace.meta["group_from"] == "unknown"


def test_gloo_groups_mapped_in_thread_order(tmp_path):
    pg = [("0", [0, 1, 2, 3]), ("5", [0, 1])]
    trace = read(_gloo_trace([300, 301, 417, 418], pg).write(tmp_path / "rank0.json"))
    gloo = [row for row in comm_rows(trace) if row[1].startswith("gloo:")]
    assert [row[3] for row in gloo] == ["0", "0", "5", "5"] and not trace.warnings
    # the c10d ops: their kind's gloo ranges are in two groups, so theirs is not told
    assert {row[3] for row in comm_rows(trace) if row[1].startswith("c10d::")} == {""}


def test_send_peer_is_a_global_rank(tmp_path):
    """A GPU send: the kernel's args name the group {1, 3}; c10d::send's 3rd concrete input is
    the peer within that group (1), i.e. global rank 3."""
    trace = kf.KinetoTrace(rank=1, world_size=4)
    trace.distributed = {"pg_config": [{"pg_name": "0", "ranks": [0, 1, 2, 3]}, {"pg_name": "7", "ranks": [1, 3]}]}
    args = {"Collective name": "send", "In msg nelems": 4, "Out msg nelems": 4, "Group size": 2, "dtype": "Half",
            "Process Group Name": "7", "Process Group Ranks": "[1, 3]"}
    trace.cpu_op("c10d::send", 1_000, 9_000, **{"Concrete Inputs": ["", "", "1", "0"],
                                                "Input Dims": [[[4]], [], [], []],
                                                "Input type": ["TensorList", "", "Scalar", "Scalar"]})
    trace.cpu_op("record_param_comms", 2_000, 8_000, **args)
    trace.kernel(kf.NCCL_SENDRECV, 20_000, 30_000, stream=13, launch_ns=5_000, args=args)
    rows = comm_rows(read(trace.write(tmp_path / "rank1.json")))
    assert [row[2:] for row in rows] == [("send", "7", 8, 3)]


def test_stdlib_fallback_gives_the_same_columns(monkeypatch):
    paths = [NCCL_PARSER, TRACE_FILTER[0], TORCH_CPU[0]]
    fast = [read(path) for path in paths]
    monkeypatch.setattr(kineto_decode, "msgspec", None)
    for path, expected in zip(paths, fast):
        slow = read(path)
        assert slow.events.equals(expected.events), path
        assert slow.meta == expected.meta and slow.warnings == expected.warnings


def test_dtype_sizes_in_both_spellings():
    pairs = {("Float", "float"): 4, ("Double", "double"): 8, ("Half", "c10::Half"): 2, ("BFloat16", "c10::BFloat16"): 2,
             ("Long", "long int"): 8, ("Int", "int"): 4, ("Short", "short"): 2, ("Char", "signed char"): 1,
             ("Byte", "unsigned char"): 1, ("Bool", "bool"): 1, ("Float8_e4m3fn", "c10::Float8_e5m2"): 1}
    for names, size in pairs.items():
        assert [dtype_size(name) for name in names] == [size, size]
    assert [dtype_size(name) for name in ("TensorList", "Scalar", "", None, "Float17")] == [-1] * 5


def test_collective_job_fixture_reads_back(tmp_path):
    """The 4-rank TP {0,1},{2,3} + DP {0,2},{1,3} job, rank 3 late by 50 µs: every kernel's kind,
    group, size and start as written."""
    ops = kf.tp_dp_ops(steps=2, late_rank=3, late_us=50)
    paths = kf.collective_job(tmp_path, ops)
    size = {"Float": 4, "BFloat16": 2}
    for rank, path in enumerate(paths):
        trace = read(path)
        expected = [(round(op.start_us * 1000), op.kind, op.group, max(op.in_out()) * size[op.dtype], -1)
                    for op in ops[rank]]
        assert [(row[0], *row[2:]) for row in comm_rows(trace)] == expected
        groups = trace.meta["process_groups"]
        assert groups["0"] == [0, 1, 2, 3] and len(groups) == 3
        assert groups[ops[rank][0].group] == list(ops[rank][0].ranks)
        assert groups[ops[rank][2].group] == list(ops[rank][2].ranks)
        e = trace.events.to_frame()
        steps = e[e["name"] == ev.PROFILE_STEP]
        assert len(steps) == 1 and set(e[e["name"].astype(str).str.startswith("void cutlass")]["lane"]) == {7}
    first = [comm_rows(read(path))[0][0] for path in paths]
    assert first == [100_000, 100_000, 100_000, 150_000]  # the late rank


def test_real_gloo_threads_that_are_not_adjacent_are_split_at_the_widest_gap():
    """torch_cpu_nolate rank 2: the pair group's worker threads are not adjacent (another rank's
    thread was created between them: tids are host-wide), but the tids still fall in two runs of
    two, far apart: the allreduces (make_traces.py: the pair group) land in the pair group, the
    world collectives in the world."""
    path = DATA / "torch_cpu_nolate" / "rank2.json.gz"
    document = raw(path)
    tids = {e["tid"] for e in document["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("gloo:")}
    assert len(_thread_clusters(tids)) != len(document["distributedInfo"]["pg_config"])  # not adjacent
    world, pair = document["distributedInfo"]["pg_config"]
    assert pair["ranks"] == [2, 3]
    trace = read(path)
    gloo = [row for row in comm_rows(trace) if row[1].startswith("gloo:")]
    assert {row[3] for row in gloo if row[2] == "allreduce"} == {pair["pg_name"]}
    assert {row[3] for row in gloo if row[2] != "allreduce"} == {world["pg_name"]}
    assert not trace.warnings


def test_gloo_groups_split_by_the_kinds_their_threads_ran(tmp_path):
    """A real 2-rank torchrun gave rank 0 world threads 7521, 7522 and pair threads 7524, 7527
    (rank 1 took 7525, 7526 in between): no tid split is clear, but the world's threads ran
    all_gather / broadcast and the pair's all_reduce, so the kinds tell the groups apart."""
    pg = [("0", [0, 1]), ("1", [0, 1])]
    trace = kf.KinetoTrace(rank=0, world_size=2, pid=100, backend="gloo", base_time_ns=None)
    trace.distributed = {"pg_config": [{"pg_name": name, "pg_size": len(ranks), "ranks": ranks} for name, ranks in pg]}
    trace.step(1, 0, 10_000_000)
    plan = [(7524, "gloo:all_reduce"), (7527, "gloo:all_reduce"), (7521, "gloo:all_gather"),
            (7522, "gloo:broadcast"), (7521, "gloo:broadcast"), (7522, "gloo:all_gather")]
    for index, (tid, name) in enumerate(plan):
        start = 100_000 + index * 1_000_000
        trace.cpu_op(name, start, start + 500_000, tid=tid, cat="user_annotation",
                     **{"Input Dims": [[16]], "Input type": ["float"], "Concrete Inputs": [""]})
    got = read(trace.write(tmp_path / "rank0.json"))
    assert [(row[2], row[3]) for row in comm_rows(got)] == [("allreduce", "1"), ("allreduce", "1"),
                                                            ("allgather", "0"), ("broadcast", "0"),
                                                            ("broadcast", "0"), ("allgather", "0")]
    assert not got.warnings
