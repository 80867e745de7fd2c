"""FSDP / ZeRO (issue 55, item 5): the straggler's phase counts host time inside the phase net of the
communication its thread waited through, so a late rank sleeping in a forward that holds FSDP's
all-gathers is named with its forward.

Real job: tests/data/torch_fsdp/late (make_traces.py there: torch FSDP2 ``fully_shard``, gloo, 2 ranks,
torch 2.13 CPU, rank 1 sleeping 20 ms inside ``## forward ##`` every step). The figure is computed
here from the raw JSON with plain ``json``/``gzip`` and Python lists, never through distprof."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import kineto_fixtures as kf

from distprof import config as config_mod
from distprof.analyses import skew as skew_mod
from distprof.cli import merge_files

LATE = sorted((Path(__file__).resolve().parent / "data" / "torch_fsdp" / "late").glob("rank*.json.gz"))
MS = 1_000_000
RESUME_NS, RESUME_SHARE = 1_000_000, 0.25  # the rule's constants (analyses/skew.py), said in docs/diagnosis.md


# -- plain Python over the raw JSON ----------------------------------------------------------

def _raw(path: Path) -> tuple[int, list[dict]]:
    with gzip.open(path, "rb") as handle:
        document = json.load(handle)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]
    for e in events:
        e["s"], e["e"] = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
    return document["distributedInfo"]["rank"], events


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _minus(spans: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for start, end in _union(spans):
        cursor = start
        for a, b in _union(holes):
            if b <= cursor or a >= end:
                continue
            if a > cursor:
                out.append((cursor, a))
            cursor = max(cursor, b)
        if cursor < end:
            out.append((cursor, end))
    return out


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> int:
    return sum(max(0, min(b, end) - max(a, start)) for a, b in _union(spans))


def _forward_net(events: list[dict]) -> tuple[int, int]:
    """(sum over the profiled steps of the forward's wall time less the communication its thread
    waited through, steps): c10d calls on the main thread, and each gloo worker range whose end the
    main thread resumes at (its first boundary from 1 ms before the end on, within 1 ms or a quarter
    of the wait), from the range's start or the thread's previous boundary, less the main thread's aten ops."""
    main = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
    mine = [e for e in events if e["tid"] == main]
    bounds = sorted({e["s"] for e in mine} | {e["e"] for e in mine})
    waits = []
    for op in (e for e in events if e["name"].startswith("gloo:") and e["tid"] != main):
        after = next((i for i, b in enumerate(bounds) if b > max(op["e"] - RESUME_NS, op["s"])), None)
        if not after:
            continue
        lo = max(bounds[after - 1], op["s"])
        if lo < bounds[after] and bounds[after] - op["e"] <= max(RESUME_NS, RESUME_SHARE * (op["e"] - lo)):
            waits.append((lo, bounds[after]))
    aten = [(e["s"], e["e"]) for e in mine if e["name"].startswith("aten::")]
    blocked = _union([(e["s"], e["e"]) for e in mine if e["name"].startswith("c10d::")] + _minus(waits, aten))
    forwards = [e for e in mine if e["name"] == "## forward ##"]
    return sum(f["e"] - f["s"] - _inside(blocked, f["s"], f["e"]) for f in forwards), len(forwards)


def test_real_fsdp_straggler_is_named_with_its_forward():
    """The merge names rank 1 and its forward, by its excess per step over rank 0's forward net of the
    communication each waited through: the same figure as plain Python over the raw JSON, and about
    the 20 ms it sleeps there (before, 'outside any annotated phase': the forward's own ops only)."""
    summary = merge_files(LATE, config_mod.load(None))
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "## forward ##"
    net = dict(_raw_net(path) for path in LATE)
    steps = net[1][1]
    expected = (net[1][0] - net[0][0]) / steps
    assert abs(straggler["phase_extra_ns"] - expected) <= 0.01 * expected
    assert 18 * MS <= straggler["phase_extra_ns"] <= 30 * MS
    [finding] = [f for f in summary["findings"] if f["finding"] == "straggler"]
    assert finding["evidence"]["slow_phase"] == "## forward ##"


def _raw_net(path: Path) -> tuple[int, tuple[int, int]]:
    rank, events = _raw(path)
    return rank, _forward_net(events)


# -- by construction ---------------------------------------------------------------------------

STEP = 40 * MS


def _rank_trace(rank: int, late: bool) -> kf.KinetoTrace:
    """3 steps of a forward (0-24 ms) holding two all-gathers on a gloo worker thread (tid 9): the first
    prefetched (2.1-3 ms on both ranks), the second issued at 3 ms by rank 0, which waits in an unrecorded
    wait() until 22.5 ms, and at 22 ms by rank 1, which sleeps from 2 to 22 ms (no op on its thread); then
    both compute 22.7-23.9 ms. Backward 26-36 ms of compute."""
    trace = kf.KinetoTrace(rank=rank, world_size=2, pid=100 + rank, tid=7, backend="gloo")  # one clock
    trace.distributed = {"pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
    shapes = {"Input Dims": [[64]], "Input type": ["float"], "Concrete Inputs": [""]}
    for step in range(3):
        t = step * STEP
        trace.step(step + 1, t, t + STEP - MS)
        trace.cpu_op("## forward ##", t, t + 24 * MS, cat="user_annotation")
        trace.cpu_op("aten::addmm", t + MS // 10, t + 2 * MS)
        trace.cpu_op("c10d::_allgather_base_", t + 2 * MS, t + 2 * MS + MS // 10)
        trace.cpu_op("gloo:all_gather", t + 2 * MS + MS // 10, t + 3 * MS, tid=9, cat="user_annotation", **shapes)
        issue = 22 * MS if late else 3 * MS
        trace.cpu_op("c10d::_allgather_base_", t + issue, t + issue + MS // 10)
        trace.cpu_op("gloo:all_gather", t + issue + MS // 10, t + 22 * MS + MS // 2, tid=9, cat="user_annotation",
                     **shapes)
        trace.cpu_op("aten::addmm", t + 22 * MS + 7 * MS // 10, t + 24 * MS - MS // 10)
        trace.cpu_op("## backward ##", t + 26 * MS, t + 36 * MS, cat="user_annotation")
        trace.cpu_op("aten::mm", t + 26 * MS + MS // 10, t + 36 * MS - MS // 10)
    return trace


def test_a_sleep_in_forward_counts_and_the_wait_for_it_does_not(tmp_path):
    """Rank 0's forward is as long as rank 1's, but 19.6 ms of it is waiting for rank 1's all-gather on
    the gloo thread; rank 1's sleep has a prefetched all-gather under it that ended 19 ms before it
    resumed (no wait). So rank 1's forward is 19.9 ms more per step, and is named."""
    paths = [_rank_trace(rank, late=rank == 1).write(tmp_path / f"rank{rank}.json") for rank in (0, 1)]
    skew = merge_files(paths, config_mod.load(None))["skew"]
    forward = next(p for p in skew["phases"] if p["name"] == "## forward ##")
    # rank 0: 24 ms less its c10d calls (0.2) and its waits 2.1-3 (idle to the prefetch's end) and
    # 3.1-22.7 ms (19.6) = 3.3 ms a step; rank 1: 24 ms less its c10d calls and its wait 22.1-22.7 = 23.2 ms
    assert forward["compute_ns_by_rank"] == {"0": 3 * 33 * MS // 10, "1": 3 * 232 * MS // 10}
    assert skew_mod.straggler_phase(skew["phases"], 1) == ("## forward ##", 199 * MS // 10)
    # named, then left unconfirmed: the synthetic steps are 39 ms on both ranks whatever waits, so no fix saves
    straggler = skew["straggler"] or skew["unconfirmed_straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "## forward ##"
    assert straggler["phase_extra_ns"] == 199 * MS // 10
