"""The typed ``whatif``, ``critical_path``, ``machine`` and ``live`` sections (distprof.sections.whatif,
distprof.sections.machine): every golden summary's sections, real merges and a live record built by
the live view's own functions decode and write back the same JSON, key order included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from result_views import live_window

from distprof import config as config_mod
from distprof import pipeline
from distprof.analyses import whatif
from distprof.analyses.live import AlertRule, window_figures
from distprof.cli import merge_files
from distprof.sections.machine import Host, Live
from distprof.sections.whatif import CriticalPath, WhatIf
from distprof.typed import ABSENT

DATA = Path(__file__).parent / "data"
GOLDEN = sorted((DATA / "golden").glob("*.json"))


def _round_trip(kind: type, section):
    """``section`` decoded as ``kind``, checked to write back the same JSON in the same key order."""
    decoded = kind.from_json(section)
    assert decoded.to_json() == section
    assert json.dumps(decoded.to_json()) == json.dumps(section)
    return decoded


def _check_sections(summary: dict) -> tuple:
    """The four sections of a summary.json, each round-tripped (None where the summary has none)."""
    what = None if summary["whatif"] is None else _round_trip(WhatIf, summary["whatif"])
    if what is not None:
        assert what.steps == summary["whatif"]["steps"]
        assert [s.name for s in what.scenarios] == [s["name"] for s in summary["whatif"]["scenarios"]]
    path = None if summary["critical_path"] is None else _round_trip(CriticalPath, summary["critical_path"])
    if path is not None:
        assert path.length_ns == summary["critical_path"]["length_ns"]
        assert {str(rank) for rank in path.share_by_rank} == set(summary["critical_path"]["share_by_rank"])
    hosts = [_round_trip(Host, row) for row in summary["machine"]]
    assert [h.ranks for h in hosts] == [row["ranks"] for row in summary["machine"]]
    live = _round_trip(Live, summary["live"]) if "live" in summary else None
    return what, path, hosts, live


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_sections_round_trip(path):
    summary = json.loads(path.read_text())
    what, critical, hosts, _ = _check_sections(summary)
    assert hosts and what is not None
    if critical is not None:
        first = critical.steps[0]
        assert first.segments[0].start_ns == summary["critical_path"]["steps"][0]["segments"][0]["start_ns"]
        assert critical.scenario_shares.balanced_ranks == summary["critical_path"]["scenario_shares"]["balanced_ranks"]
    if what.steps == 0:  # no ProfileSteps: nothing applies, and each row says why
        assert all(not s.applies and s.why for s in what.scenarios)


def test_a_straggler_since_its_onset_writes_since_step_and_the_savings_after_it(monkeypatch):
    """torch_tpdp late3 (rank 3 late): its what-if replayed as for a straggler that turned slow at
    step 1, so the scenario rows carry since_step, removed_per_step_ns and saving_after_straggler_ns."""
    replay = whatif.safe_whatif

    def from_step_1(*args, **kwargs):
        return replay(*args, **{**kwargs, "straggler_since": kwargs.get("straggler_since") or 1})

    monkeypatch.setattr(whatif, "safe_whatif", from_step_1)
    summary = merge_files(sorted((DATA / "torch_tpdp" / "late3").glob("*.json.gz")), config_mod.load(None))
    what, critical, _, _ = _check_sections(summary)
    fix = next(s for s in what.scenarios if s.name == "no_straggler")
    assert fix.applies and fix.since_step == 1 and fix.rank == summary["skew"]["straggler"]["rank"]
    assert fix.removed_per_step_ns > 0 and fix.saving_after_straggler_ns is ABSENT
    others = [s for s in what.scenarios if s.name != "no_straggler"]
    assert all(s.saving_after_straggler_ns is not ABSENT and s.since_step is ABSENT for s in others)
    assert critical.rank_reading == "straggler" and critical.scenario_shares.no_straggler is not None


def test_a_pipeline_merge_round_trips():
    summary = merge_files(sorted((DATA / "torch_pp" / "late1").glob("*.json.gz")), config_mod.load(None))
    what, critical, hosts, live = _check_sections(summary)
    assert what is not None and critical is not None and live is None
    assert critical.walked_from == {int(k): v for k, v in summary["critical_path"]["walked_from"].items()}
    assert sum(h.ranks for h in hosts) == len(summary["ranks"])


def _alerts() -> list[dict]:
    """Alerts of every code, from the live view's rule over windows of one rank: a straggler named
    twice then gone, and a step time that jumps."""
    rule, out = AlertRule(), []
    for index, (straggler, step_ms) in enumerate([(1, 100), (1, 100), (None, 100), (None, 100), (None, 100),
                                                  (None, 150), (None, 150)]):
        ns = int(step_ms * 1e6)
        row = {"rank": 0, "steps": 4, "step_ns": float(ns), "step_durations_ns": [ns, ns + 1, ns - 1, ns],
               "exposed_communication_ns": 4_000_000, "waits_for_straggler_ns": 0}
        out += [alert.to_json() for alert in rule.update(live_window(
            [4 * index, 4 * index + 3], [row], step_time_ns=float(ns),
            straggler=None if straggler is None else {"rank": straggler, "cost_ns": 20_000_000, "cost_share": 0.2}))]
    return out


def test_a_live_record_round_trips():
    """The view's record (live.View.record: every_steps, windows, alerts, skipped, nodes) with windows
    made by window_figures from a real merge with a straggler (one rank named behind), as live.json
    carries it to summary.json."""
    summary = pipeline.merge_files(sorted((DATA / "torch_tpdp" / "late3").glob("*.json.gz")), config_mod.load(None))
    steps = sorted(summary.ranks[0].markers.step_bounds.step)
    windows = [window_figures(summary, (steps[0], steps[1]), {}).to_json(),
               window_figures(summary, (steps[2], steps[3]), {3: steps[1]}).to_json()]
    for figures in windows:  # as View._report does
        for row in figures["ranks"]:
            row["sent_bytes"] = None if row["rank"] == 0 else 1000 + row["rank"]
    alerts = _alerts()
    assert {a["code"] for a in alerts} == {"straggler", "straggler_recovered", "step_time_jump"}
    record = json.loads(json.dumps({"every_steps": 2, "windows": windows, "alerts": alerts, "skipped": [[4, 5]],
                                    "nodes": {"n1": {"ranks": [1], "state": "done", "bytes": 2459}}}))
    live = _check_sections({"whatif": None, "critical_path": None, "machine": [], "live": record})[3]
    assert live.windows[0].straggler.rank == record["windows"][0]["straggler"]["rank"]
    assert live.windows[1].behind[0].committed_step == steps[1]
    assert live.windows[0].ranks[1].sent_bytes == 1001 and live.nodes["n1"].bytes == 2459
    jump = next(a for a in live.alerts if a.code == "step_time_jump")
    assert jump.value_ns == 150e6 and jump.cost_ns is ABSENT
