"""Point-to-point matching on gloo (issue 36, point 1): the Kineto reader carries the peer of
``c10d::send`` / ``c10d::recv_`` (their 3rd concrete input, recorded with record_shapes) to the
``gloo:send`` / ``gloo:recv`` range that is the exchange itself, so the ranges that are kept
(skew._duplicate_ops drops the ops) are matched across ranks by group, peer and order.

Real job: tests/data/torch_pp/late1 (benchmarks/_fault_jobs.py --topology pp --steps 4 --fault
1:20: 4 pipeline stages, torchrun, gloo, torch 2.13 CPU, stage 1 pauses 20 ms in forward). Every
expected figure is computed here from the raw JSON with plain ``json``/``gzip``, never through
distprof: peers by the k-th op <-> k-th range of each direction (the reader links them by time
enclosure, an independent rule), send counts per (sender, receiver) pair."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import kineto_fixtures as kf
import numpy as np
import pytest

from distprof import align
from distprof import config as config_mod
from distprof import events as ev
from distprof.analyses import distributed, skew
from distprof.cli import merge_files
from distprof.sources import kineto

LATE1 = sorted((Path(__file__).resolve().parent / "data" / "torch_pp" / "late1").glob("rank*.json.gz"))
OP = {"send": "c10d::send", "recv": "c10d::recv_"}
RANGE = {"send": "gloo:send", "recv": "gloo:recv"}


def raw_events(path: Path) -> tuple[int, list[dict]]:
    """(rank, complete events) of one trace, read with the standard library only."""
    with gzip.open(path, "rb") as handle:
        document = json.load(handle, parse_float=Decimal)
    return document["distributedInfo"]["rank"], [e for e in document["traceEvents"] if e.get("ph") == "X"]


def raw_p2p(events: list[dict], direction: str) -> tuple[list[dict], list[dict]]:
    """The c10d ops and the gloo ranges of one direction, each in start order."""
    def named(name: str) -> list[dict]:
        return sorted((e for e in events if e["name"] == name), key=lambda e: e["ts"])
    return named(OP[direction]), named(RANGE[direction])


def peer_of(op: dict) -> int:
    return int(op["args"]["Concrete Inputs"][2])  # c10d::send(tensors, group, dstRank, tag); world group here


def read(path: Path, window: str | None = None) -> ev.RankTrace:
    overrides = {"window": window} if window else None
    (trace,) = kineto.read(path, config_mod.load(overrides=overrides))
    return trace


def comm_frame(trace: ev.RankTrace):
    e = trace.events.to_frame()
    return e[e["category"] == ev.COMMUNICATION].sort_values("start_ns", kind="stable")


@pytest.mark.parametrize("path", LATE1, ids=lambda p: p.name.split(".")[0])
def test_real_trace_supports_the_rule(path):
    """The evidence the reader's rule rests on, in the raw JSON: as many ranges as ops per
    direction; the k-th range starts inside the k-th op on its thread and ends after it (they
    cross, never nest); no "Src Rank"/"Dst Rank" anywhere; the peer is a concrete input."""
    _, events = raw_events(path)
    assert not any(key in e.get("args", {}) for e in events for key in ("Src Rank", "Dst Rank"))
    for direction in OP:
        ops, ranges = raw_p2p(events, direction)
        assert len(ops) == len(ranges) > 0
        for op, exchange in zip(ops, ranges):
            assert (op["pid"], op["tid"]) == (exchange["pid"], exchange["tid"])
            assert op["ts"] <= exchange["ts"] <= op["ts"] + op["dur"] < exchange["ts"] + exchange["dur"]
            assert exchange["args"]["External id"] == op["args"]["External id"] + 1


@pytest.mark.parametrize("path", LATE1, ids=lambda p: p.name.split(".")[0])
def test_gloo_ranges_carry_the_peer_of_their_op(path):
    """Each gloo:send / gloo:recv row has the peer of the k-th c10d op of its direction (k-th by
    start); the c10d rows keep theirs."""
    _, events = raw_events(path)
    frame = comm_frame(read(path, window="all"))
    for direction in OP:
        ops, ranges = raw_p2p(events, direction)
        rows = frame[frame["name"].astype(str) == RANGE[direction]]
        assert rows["start_ns"].tolist() == [int(e["ts"] * 1000) for e in ranges]
        assert rows["peer"].tolist() == [peer_of(op) for op in ops]
        assert set(rows["collective"].astype(str)) == {direction}
        assert frame[frame["name"].astype(str) == OP[direction]]["peer"].tolist() == [peer_of(op) for op in ops]


def _raw_pairs(direction: str) -> Counter:
    """(sender, receiver) -> how many ops of this direction the raw traces show."""
    pairs: Counter = Counter()
    for path in LATE1:
        rank, events = raw_events(path)
        for op in raw_p2p(events, direction)[0]:
            pairs[(rank, peer_of(op)) if direction == "send" else (peer_of(op), rank)] += 1
    return pairs


def test_every_send_is_matched_with_its_receive():
    """Matching the rank markers (the rows kept after _duplicate_ops): every raw send is one
    matched p2p of its (sender, receiver) pair, on both ranks, and the receives agree."""
    config = config_mod.load(None)
    traces = [read(path) for path in LATE1]
    markers = [skew.rank_markers(distributed.rank_view(trace.events, config)) for trace in traces]
    for marker in markers:
        kept = [name for name in marker.collectives.name if name in OP]
        assert kept and -1 not in [p for n, p in zip(marker.collectives.name, marker.collectives.peer) if n in OP]
    matching = align.match_collectives([m.collectives for m in markers], [t.rank for t in traces],
                                       traces[0].meta["process_groups"])
    sends = _raw_pairs("send")
    assert sends == _raw_pairs("recv") and sum(sends.values()) == 48
    assert not matching.warnings and matching.size == sum(sends.values())
    matched = Counter(zip(matching.sender.tolist(), matching.receiver.tolist()))
    assert matched == sends
    both = np.array([matching.present[[s, r], j].all() for j, (s, r) in
                     enumerate(zip(matching.sender.tolist(), matching.receiver.tolist()))])
    assert both.all() and matching.present.sum(axis=0).tolist() == [2] * matching.size


def test_merge_matches_send_recv_and_names_the_late_stage():
    """summary.json: the Collectives row and the skew count every send once; stage 1 is named."""
    summary = merge_files(LATE1, config_mod.load(None))
    total = sum(_raw_pairs("send").values())
    [row] = [r for r in summary["collectives"]["rows"] if r["kind"] == "p2p"]
    assert row["matched"] == row["count"] == total == summary["skew"]["matched"]
    assert summary["skew"]["straggler"]["rank"] == 1


def _p2p_trace(tid_of_range: int = 7, second_range: bool = False, recv_op: bool = False) -> kf.KinetoTrace:
    """One c10d op to peer 1 (100-200 µs, thread 7) and its gloo:send range (150-900 µs)."""
    trace = kf.KinetoTrace(rank=0, world_size=2, pid=100, tid=7, backend="gloo", base_time_ns=None)
    trace.distributed = {"pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
    trace.step(1, 0, 2_000_000)
    shapes = {"Input Dims": [[[4]], [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"],
              "Concrete Inputs": ["", "", "1", "0"]}
    trace.cpu_op("c10d::recv_" if recv_op else "c10d::send", 100_000, 200_000, **shapes)
    for start in (150_000, 160_000)[:1 + second_range]:
        trace.cpu_op("gloo:send", start, 900_000, tid=tid_of_range, cat="user_annotation",
                     **{"Input Dims": [[4]], "Input type": ["float"], "Concrete Inputs": [""]})
    return trace


@pytest.mark.parametrize(("kwargs", "peer"), [({}, 1), ({"tid_of_range": 8}, -1), ({"recv_op": True}, -1),
                                              ({"second_range": True}, -1)],
                         ids=["linked", "other-thread", "other-direction", "two-ranges-one-op"])
def test_peer_only_where_the_link_is_unambiguous(tmp_path, kwargs, peer):
    """The range takes the op's peer only when it starts inside an op of its direction on the
    same thread, and no other range claims that op."""
    frame = comm_frame(read(_p2p_trace(**kwargs).write(tmp_path / "rank0.json"), window="all"))
    ranges = frame[frame["name"].astype(str) == "gloo:send"]
    assert ranges["peer"].tolist() == [peer] * len(ranges)
