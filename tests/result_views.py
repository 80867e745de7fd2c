"""Plain-dict views of the typed results, so tests can compare them with literal dicts."""

from __future__ import annotations

from dataclasses import asdict

from distprof.analyses import distributed
from distprof.results import RankResult


def rank_row(result: RankResult) -> dict:
    """A RankResult as one dict: its summary.json row, its markers, gpu_gaps, meta."""
    return {**result.to_json(), **result.markers.to_json(), "gpu_gaps": result.gpu_gaps, "meta": result.meta,
            "source": result.source, "warnings": list(result.warnings), "tables": result.tables}


def rank_figures(events, config: dict, lane_names: dict | None = None) -> dict:
    """distributed.rank_figures as one dict: the figures, lane lists and lanes."""
    figures, lanes = distributed.rank_figures(events, config, lane_names)
    return {**asdict(figures), "comm_lanes": [lane.label for lane in lanes if lane.communication_ns > 0],
            "compute_lanes": [lane.label for lane in lanes if lane.computation_ns > 0],
            "lanes": [lane.to_json() for lane in lanes]}
