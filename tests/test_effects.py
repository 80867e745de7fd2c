"""Effects charged to their cause (issue 36, point 4): a rank whose exposed communication is
waiting for the straggler has no placement problem, finding or live alert of its own for it.
Jobs whose timing is fixed by construction, and a real torch DDP trace with a late rank."""

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
from result_views import live_window, summary_json
from test_blame import _result

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline
from distprof.analyses.live import AlertRule
from distprof.reports import findings as findings_report
from distprof.results import Summary

CONFIG = config_mod.load()
MS = 1_000_000
STEP_NS = 150 * MS
STEPS = 6
DATA = Path(__file__).parent / "data" / "torch_ddp"


def ddp_job(delay_ns: int, transfer_ns: int, rank0_compute_ms: list[int] | None = None) -> dict:
    """Two ranks: compute on thread 1 (80 ms, or ``rank0_compute_ms`` per step on rank 0; rank 1's
    takes ``delay_ns`` longer), one allreduce per step on thread 2, issued 2 ms before the rank's
    compute ends and ending ``transfer_ns`` after the later rank issued it. Rank 0 waits
    ``delay_ns`` in it; 2 ms of that wait overlap its compute."""
    rows = {0: [], 1: []}
    for s in range(STEPS):
        base = s * STEP_NS
        rank0 = (rank0_compute_ms or [80] * STEPS)[s] * MS
        compute_end = {0: base + 5 * MS + rank0, 1: base + 85 * MS + delay_ns}
        issued = {r: compute_end[r] - 2 * MS for r in rows}
        done = max(issued.values()) + transfer_ns
        for r in rows:
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, base, done + 5 * MS, 1, s, "", "", -1),
                        (ev.RANGE, ev.PHASE, "forward", base + 5 * MS, compute_end[r], 1, s, "", "", -1),
                        (ev.COMM_OP, ev.COMMUNICATION, ev.ALLREDUCE, issued[r], done, 2, s, ev.ALLREDUCE, "dp", -1)]
    results = [_result(rank, r) for rank, r in sorted(rows.items())]
    return summary_json(pipeline.combine(results, CONFIG, source="test", world_size=2))


def _check(summary: dict, rank: int) -> dict:
    return next(c for c in summary["checks"] if c["rank"] == rank)


def test_a_wait_for_the_straggler_is_not_the_waiting_ranks_placement_problem():
    summary = ddp_job(delay_ns=30 * MS, transfer_ns=4 * MS)
    assert summary["skew"]["straggler"]["rank"] == 1
    # rank 0: 34 ms of communication per step, 2 ms of it overlapped (5.9% < 10%: WARN before);
    # 30 ms of it waits for rank 1, of which 28 ms are exposed: 6 ms left, 2 overlapped (33%)
    assert summary["skew"]["straggler"]["exposed_waits_ns_by_rank"] == {"0": 28 * MS * STEPS}
    row = _check(summary, 0)
    assert row["status"] == "PASS" and row["waits_for_straggler_ns"] == 28 * MS * STEPS
    assert "5.9% of it overlaps computation, 33.3% without the 168.0 ms it waited for rank 1" in row["message"]
    assert [f["finding"] for f in summary["findings"]] == ["straggler"]


def test_the_waiting_rank_keeps_a_placement_problem_of_its_own():
    """A long transfer after the compute is rank 0's own exposure: the WARN stays, and its
    finding's figure leaves out what it waited for the straggler."""
    summary = ddp_job(delay_ns=30 * MS, transfer_ns=40 * MS)
    row = _check(summary, 0)
    assert row["status"] == "WARN" and row["waits_for_straggler_ns"] == 28 * MS * STEPS
    finding = next(f for f in summary["findings"] if f["finding"] == "unoverlapped_communication")
    exposed = summary["ranks"][0]["exposed_communication_ns"]
    assert exposed == (30 + 40 - 2) * MS * STEPS  # the whole op but its first 2 ms
    assert finding["evidence"]["exposed_communication_ns_by_rank"]["0"] == exposed - 28 * MS * STEPS


def test_without_a_straggler_a_warn_stays():
    summary = ddp_job(delay_ns=0, transfer_ns=40 * MS)
    assert summary["skew"]["straggler"] is None
    assert {c["status"] for c in summary["checks"]} == {"WARN"}
    assert all("waits_for_straggler_ns" not in c for c in summary["checks"])


def _window(steps: list[int], exposed_ns: int, waits_ns: int, straggler: int | None):
    ranks = [{"rank": r, "steps": 4, "step_ns": 100 * MS, "step_durations_ns": [100 * MS] * 4,
              "exposed_communication_ns": exposed_ns if r == 0 else 4 * MS,
              "waits_for_straggler_ns": waits_ns if r == 0 else 0} for r in (0, 1)]
    named = None if straggler is None else {"rank": straggler, "cost_share": 0.3, "cost_ns": 30 * MS}
    return live_window(steps, ranks, step_time_ns=100 * MS, straggler=named)


def test_live_alert_for_waiting_rank_folds_into_the_straggler():
    """Rank 0's exposed communication jumps from 4 to 124 ms per window when rank 1 turns late:
    the straggler is alerted, rank 0's jump is not (it is the straggler's wait)."""
    rule, folded = AlertRule(), AlertRule()
    quiet = [_window([4 * k, 4 * k + 3], 4 * MS, 0, None) for k in range(3)]
    late = [_window([4 * k, 4 * k + 3], 124 * MS, 120 * MS, 1) for k in range(3, 6)]
    alerts = [a for w in quiet + late for a in folded.update(w)]
    assert [(a.code, a.rank) for a in alerts] == [("straggler", 1)]
    unfolded = [msgspec.structs.replace(w, ranks=[msgspec.structs.replace(r, waits_for_straggler_ns=0)
                                                  for r in w.ranks]) for w in quiet + late]
    codes = [(a.code, a.rank) for w in unfolded for a in rule.update(w)]
    assert ("exposed_communication_jump", 0) in codes  # the rule does see the jump when nothing explains it


def _raw_ops(path: Path) -> list[tuple[int, int]]:
    """(start, end) in ns of the gloo allreduce ranges of a raw Kineto trace, read without distprof."""
    import gzip
    trace = json.loads(gzip.open(path).read())
    return [(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in trace["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("gloo:all_reduce")]


def test_real_ddp_late_rank_the_waiting_rank_passes(tmp_path):
    """torch DDP, rank 1 late in forward, no sync: rank 0 WARNed (overlap 7.4%) and got its own
    'unoverlapped communication' finding before; now both fold into rank 1's straggler finding."""
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "distprof", "merge", str(DATA / "late_nosync"), "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skew"]["straggler"]["rank"] == 1
    row = _check(summary, 0)
    waits = row["waits_for_straggler_ns"]
    # what it owes the straggler is exposed communication of rank 0: no more than that, and no
    # more than the time rank 0's gloo allreduce ranges span (counted once where they overlap)
    starts, ends = map(np.array, zip(*_raw_ops(DATA / "late_nosync" / "rank0.json.gz")))
    order = np.argsort(starts)
    reach = np.maximum.accumulate(ends[order])
    span = int((np.minimum(ends[order], reach) - np.maximum(starts[order], np.r_[starts[order][0], reach[:-1]]))
               .clip(0).sum())
    assert 0 < waits <= summary["ranks"][0]["exposed_communication_ns"] and waits <= span
    assert row["status"] == "PASS" and "without the" in row["message"]
    assert [f["finding"] for f in summary["findings"]] == ["straggler"]
    assert "⟦" not in row["message"]


def test_a_saving_says_what_the_replay_assumes_where_durations_vary():
    """Rank 0's compute per step is 80, 100, 60, 80, 100, 60 ms: median 80, MAD 20, so it varies
    ±1.4826 × 20 / 80 = 37% step to step; the replay keeps each duration, and the saving says so.
    Steady compute: nothing said."""
    summary = ddp_job(delay_ns=30 * MS, transfer_ns=4 * MS, rank0_compute_ms=[80, 100, 60, 80, 100, 60])
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 1
    assert straggler["durations_vary_share"] == 1.4826 * 20 / 80
    finding = next(f for f in summary["findings"] if f["finding"] == "straggler")
    assert finding["durations_vary_share"] == 1.4826 * 20 / 80
    steady = ddp_job(delay_ns=30 * MS, transfer_ns=4 * MS)
    assert steady["skew"]["straggler"]["durations_vary_share"] is None
    typed = next(f for f in Summary.from_json(summary).findings if f.finding == "straggler")
    assert "replay keeps every duration as traced; here the ranks' phase time varies ±37%" in \
        findings_report.saving(typed, lambda ns: f"{ns}")
