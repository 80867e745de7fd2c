"""Plain-dict views of the typed results, so tests can compare them with literal dicts."""

from __future__ import annotations

from msgspec.structs import asdict

from distprof.analyses import distributed
from distprof.results import RankResult


def rank_row(result: RankResult) -> dict:
    """A RankResult as one dict: its summary.json row, its markers, gpu_gaps, meta."""
    return {**result.to_json(), **result.markers.to_json(), "gpu_gaps": result.gpu_gaps, "meta": result.meta,
            "source": result.source, "warnings": list(result.warnings), "tables": result.tables}


def rank_figures(events, config: dict, lane_names: dict | None = None) -> dict:
    """distributed.rank_figures (on the events' view) as one dict: the figures, lane lists and lanes."""
    figures, lanes = distributed.rank_figures(distributed.rank_view(events, config, lane_names))
    return {**asdict(figures), "comm_lanes": [lane.label for lane in lanes if lane.communication_ns > 0],
            "compute_lanes": [lane.label for lane in lanes if lane.computation_ns > 0],
            "lanes": [lane.to_json() for lane in lanes]}


def worded_findings(found: list) -> list:
    """Findings as an analysis returns them (Observed), priced without a what-if (cost.price_findings)
    and worded as a report shows them (Findings with message and advice)."""
    from distprof.analyses import cost
    from distprof.reports import findings as findings_report
    return findings_report.worded_findings(cost.price_findings(found, None))


def summary_json(summary) -> dict:
    """summary.json's content of a Summary as pipeline.combine / merge_files return it: worded
    (reports.findings.worded), as every writer does, then written."""
    from distprof.reports import findings as findings_report
    return findings_report.worded(summary).to_json()


def whatif_of(scenarios: list[dict], measured_step_ns: int | None, notes: list | None = None):
    """A what-if record with only what a test states: each scenario's name, applies, saving and what else
    it gives; the rest as a replay leaves them unknown (None, no ranks gaining)."""
    from distprof.sections.whatif import Scenario, WhatIf
    rows = [Scenario(**{"predicted_step_ns": None, "saving_ns": None, "ranks_gaining": [], "why": None, **row})
            for row in scenarios]
    return WhatIf(measured_step_ns=measured_step_ns, replayed_step_ns=None, replay_error=None, replay_error_max=None,
                  steps=0, notes=notes or [], scenarios=rows)


def straggler_of(rank: int, pattern: str = "persistent", **fields):
    """A named straggler's row with only what a test states (rank, pattern and ``fields``); the figures
    the skew analysis would give are zero or empty."""
    from distprof.sections.skew import StragglerRow
    return StragglerRow(**{
        "rank": rank, "pattern": pattern, "cost_ns": None, "cost_share": None, "waits_caused_ns": 0,
        "waits_caused_share": None, "total_waits_caused_ns": 0, "late_in": 0, "last_in": 0, "of": 0, "side": None,
        "onset_step": None, "steps_late": 0, "steps": 0, "late_step_ids": [], "phase": None, "phase_extra_ns": None,
        "largest_phase": None, "runner_up_waits_caused_ns": 0, "late_steps": 0, "threshold_ns": 0,
        "most_often_last_rank": rank, "exposed_waits_ns_by_rank": {}, **fields})


_WINDOW_ROW = {"rank": 0, "steps": 0, "step_ns": None, "step_durations_ns": [], "communication_ns": 0,
               "computation_ns": 0, "overlap_ns": 0, "exposed_communication_ns": 0, "overlap_ratio": None,
               "waits_for_straggler_ns": 0}
_WINDOW_STRAGGLER = {"rank": None, "cost_ns": None, "cost_share": None, "waits_caused_ns": None,
                     "waits_caused_share": None, "late_in": None, "of": None}


def live_window(steps: list[int], ranks: list[dict] = (), step_time_ns: float | None = None,
                straggler: dict | None = None, behind: list[dict] = (), spread: dict | None = None):
    """A live window (sections.machine.LiveWindow) from the parts a test sets, the rest zero or None,
    as analyses/live.window_figures makes it and the alert rule, the gauges and the lines read it."""
    from distprof.sections.machine import Behind, LiveWindow, WindowRank, WindowSpread, WindowStraggler
    return LiveWindow(steps=list(steps), ranks=[WindowRank(**{**_WINDOW_ROW, **row}) for row in ranks],
                      step_time_ns=step_time_ns,
                      spread=WindowSpread(**{"step_ns": None, "slowest_rank": None, "exposed_communication_ns": None,
                                             **(spread or {})}),
                      straggler=None if straggler is None else WindowStraggler(**{**_WINDOW_STRAGGLER, **straggler}),
                      behind=[Behind(**row) for row in behind])
