"""The imbalance finding (issue 55, item 4): ranks that take turns being late, priced by balanced_ranks.

Jobs by construction (event tables, as tests/test_critical_path.py builds them): each step every rank
runs forward, then a blocking allreduce on a worker thread from its arrival to T after the last arrival,
then the optimizer. The late rank of a step computes ``delay`` longer in forward.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from allreduce_jobs import CONFIG, MS, job
from result_views import whatif_of

from distprof import align, pipeline
from distprof.analyses import cost, imbalance
from distprof.reports.findings import evidence_sentences, worded
from distprof.sections.findings import Evidence, Observed
from distprof.sections.machine import CrowdedHost
from distprof.typed import Reason


def merged(results, config=CONFIG) -> dict:
    """summary.json of the results, as merge writes it."""
    summary = worded(pipeline.combine(results, config, source="test", world_size=len(results)))
    return json.loads(json.dumps(summary.to_json()))


def findings(summary: dict, code: str) -> list[dict]:
    return [f for f in summary["findings"] if f["finding"] == code]


def test_rotating_late_rank_is_an_imbalance_priced_by_balanced_ranks():
    """Ranks 1, 2, 3 take turns being 12 ms late in forward: no straggler (the late rank rotates),
    an imbalance finding naming forward, the ranks slowest in it, priced by the balanced_ranks replay."""
    delay = 12 * MS
    summary = merged(job(4, [1, 2, 3, 1, 2, 3], delay))
    assert summary["skew"]["straggler"] is None
    assert summary["skew"]["notes"][summary["skew"]["no_straggler_note"]].startswith("the late rank rotates")
    [found] = findings(summary, "imbalance")
    balanced = next(s for s in summary["whatif"]["scenarios"] if s["name"] == "balanced_ranks")
    assert found["priced_by"] == "balanced_ranks" and found["predicted_saving_ns"] == balanced["saving_ns"] > 0
    assert found["saving_share"] >= CONFIG["skew"]["straggler_min_step_fraction"]
    evidence = found["evidence"]
    assert evidence["pattern"] == "rotates" and evidence["late_ranks"] == [1, 2, 3]
    top = evidence["phases"][0]
    # per step the slowest rank computes forward `delay` longer than the others: spread = excess = delay
    assert (top["phase"], top["steps"], top["spread_ns"], top["excess_ns"]) == ("forward", 6, delay, delay)
    assert top["slowest_steps_by_rank"] == {"1": 2, "2": 2, "3": 2}
    assert found["figure_ns"] == delay and found["ranks"] == [1, 2, 3]
    assert [w["rank"] for w in evidence["worst_by_step"]] == [1, 2, 3, 1, 2, 3]
    assert "forward differs most" in found["message"] and "ranks 1-3 take turns being last" in found["message"]
    assert "give every rank the same work in forward" in found["advice"]


def test_no_imbalance_finding_beside_a_straggler():
    """One rank late in every step is the straggler: its delay is charged to it once, no imbalance finding."""
    summary = merged(job(4, [2] * 6, 12 * MS))
    assert summary["skew"]["straggler"]["rank"] == 2
    assert findings(summary, "straggler") and not findings(summary, "imbalance")


def test_no_imbalance_finding_in_a_balanced_job():
    summary = merged(job(4, [None] * 6, 0))
    assert not findings(summary, "imbalance")


def test_imbalance_withheld_where_the_replay_prices_balancing_under_the_floor():
    """The same rotation, but a floor above what balancing saves: no finding (as a straggler's rule (e))."""
    config = {**CONFIG, "skew": {**CONFIG["skew"], "straggler_min_step_fraction": 0.9}}
    summary = merged(job(4, [1, 2, 3, 1, 2, 3], 12 * MS), config)
    assert summary["skew"]["straggler"] is None
    assert not findings(summary, "imbalance")


def _whatif(saving_ns: int, step_ns: int = 100 * MS, notes: list | None = None):
    return whatif_of([{"name": "balanced_ranks", "saving_ns": saving_ns, "applies": True}], step_ns, notes)


def test_replay_veto_mirrors_the_straggler_floor():
    """Under the floor: vetoed; at it: kept; not judged where the replay cannot see GPU waits or did not run."""
    assert imbalance.replay_disagrees(_whatif(4 * MS), 0.05)
    assert not imbalance.replay_disagrees(_whatif(5 * MS), 0.05)
    assert not imbalance.replay_disagrees(_whatif(0, notes=[Reason("gpu_waits_unseen", {"collectives": 3})]), 0.05)
    assert not imbalance.replay_disagrees(None, 0.05)


def test_crowded_hosts_emit_the_finding_unpriced():
    """Ranks outnumbering their host's cores: the floor is judged on the replay's saving (an upper bound
    there), the finding is emitted, and cost gives it no price (the crowded reason)."""
    results = job(4, [1, 2, 3, 1, 2, 3], 12 * MS)
    crowded = [CrowdedHost(host="h", ranks=4, cpus=2)]
    priced = cost.price(Observed(finding="imbalance", figure_ns=1, ranks=[1], evidence=Evidence()),
                        _whatif(20 * MS), crowded)
    assert priced.predicted_saving_ns is None and priced.why_not.code == "oversubscribed"
    summary = pipeline.combine(results, CONFIG, source="test", world_size=4)
    assert [f.finding for f in summary.findings if f.finding == "imbalance"] == ["imbalance"]


def test_imbalance_evidence_in_sentences():
    summary = worded(pipeline.combine(job(4, [1, 2, 3, 1, 2, 3], 12 * MS), CONFIG, source="test", world_size=4))
    found = next(f for f in summary.findings if f.finding == "imbalance")
    said = evidence_sentences(found)
    assert "forward" in said and "slowest rank 1 in 2, rank 2 in 2, rank 3 in 2 steps" in said
    assert "step 0: rank 1" in said


@pytest.mark.parametrize("late", [[0, 1, 0, 1, 0, 1]])
def test_two_ranks_taking_turns(late):
    """Two ranks: each the slower in turn; the finding names both, forward's spread is the delay."""
    summary = merged(job(2, late, 15 * MS))
    [found] = findings(summary, "imbalance")
    assert found["ranks"] == [0, 1] and found["evidence"]["phases"][0]["spread_ns"] == 15 * MS


def test_the_note_saying_why_no_rank_is_named_is_found_after_the_alignments_notes():
    """skew.no_straggler_note indexes the notes as written, the alignment's first: a multi-host job's
    hosts_clustered note once pushed it one note off, so the report gave another note as the reason and the
    imbalance finding, which reads that note, was not made."""
    aligned = align.align(job(4, [1, 2, 3, 1, 2, 3], 12 * MS), CONFIG)
    clustered = msgspec.structs.replace(aligned, notes=[Reason("hosts_clustered", {"gap_ns": 1, "spread_ns": 1})])
    plain, shifted = (pipeline._skew_summary(a, CONFIG, world_size=4) for a in (aligned, clustered))
    assert plain.notes[plain.no_straggler_note].code == "late_rank_rotates"
    assert shifted.notes[0].code == "hosts_clustered"
    assert shifted.notes[shifted.no_straggler_note] == plain.notes[plain.no_straggler_note]
