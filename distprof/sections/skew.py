"""summary.json's ``skew``: clock alignment, per-collective, per-kind, per-rank, per-phase and
per-step skew across ranks on the common clock, the straggler and the pipelines' bubbles.

Written by pipeline._skew_summary (analyses.skew.collective_skew and step_skew), pipeline.combine
(pipelines, the straggler priced by analyses.cost) and Summary.to_json (phrased notes)."""

from __future__ import annotations

import msgspec

from ..typed import Reason, Record, absent
from .machine import StragglerHost


class Spread(Record):
    """Median, 90th percentile and max of a spread or skew across collectives or steps (ns)."""

    median: int
    p90: int
    max: int


class ClockRow(Record):
    """skew.alignment[]: one rank's clock offset on the common clock and how it was obtained
    (results.ClockEstimate)."""

    rank: int
    source_offset_ns: int | None  # the offset the source stated, before alignment
    source_uncertainty_ns: int | None
    offset_ns: int  # added to the rank's own timestamps
    uncertainty_ns: int | None  # None: unknown (nothing verified the offset)
    method: str
    samples: int
    correction_ns: int | None
    spread_ns: int | None
    verified: bool | None


class KindRow(Record):
    """skew.kinds[]: aggregates per (collective kind, process group); the matching's counts last."""

    name: str
    group: str
    matched: int
    arrival_skew_ns: Spread
    end_skew_ns: Spread
    transfer_ns_total: int
    wait_ns_by_rank: dict[int, int]
    sync_ns_by_rank: dict[int, int]
    split_disagreements: int  # collectives whose sync/transfer split and aligned waits disagree
    ranks: int = absent()  # from align's matching report (absent when it has no such kind/group)
    steps: int = absent()
    unmatched_steps: int = absent()


class CollectiveRow(Record):
    """skew.collectives[]: one matched collective (those with the largest arrival skew, time order)."""

    index: int  # time order among all matched collectives
    name: str
    kind: str
    group_name: str
    group_ranks: list[int]
    step: int
    ordinal: int  # the k-th of its kind in its group and step
    start_ns: int  # median start across ranks, common clock
    bytes: int | None
    arrival_skew_ns: int
    end_skew_ns: int
    first_rank: int
    last_rank: int
    last_lateness_ns: int  # the last rank's start against the median start
    attributable_wait_ns: int  # last start - second-latest start
    above_uncertainty: bool
    transfer_ns: int
    algbw_gbps: float | None
    busbw_gbps: float | None
    node_span: str | None
    max_sync_ns: int
    split_agrees: bool
    wait_ns_by_rank: dict[int, int]


class RankRow(Record):
    """skew.ranks[]: one rank's lateness and the waits it caused the others."""

    rank: int
    last_count: int  # collectives it arrived last in
    late_count: int  # ... and late beyond its threshold
    late_collectives: int
    late_units: int  # steps (or collectives, without steps) it was late in
    late_steps: int | None  # late_units when collectives span steps, else None
    total_lateness_ns: int
    wait_ns: int
    sync_ns: int
    threshold_ns: int
    late_in: int
    of: int
    waits_caused_ns: int  # per step
    total_waits_caused_ns: int
    steps_late: int


class StragglerRow(Record):
    """skew.straggler (priced: cost_why_not and durations_vary_share present) and
    skew.unconfirmed_straggler (unpriced: saving_ns, share and floor present instead)."""

    rank: int
    cost_ns: int | None  # the no_straggler replay's saving per step
    cost_share: float | None
    waits_caused_ns: int  # per step (per step since the onset with one)
    waits_caused_share: float | None
    total_waits_caused_ns: int
    late_in: int
    last_in: int
    of: int
    side: str | None  # "host", "device" or None (unknown)
    pattern: str  # "single step", "persistent" or "since step"
    onset_step: int | None
    steps_late: int
    steps: int
    late_step_ids: list[int]
    phase: str | None
    phase_extra_ns: int | None  # per step above the other ranks' median in largest_phase
    largest_phase: str | None
    runner_up_waits_caused_ns: int
    late_steps: int
    threshold_ns: int
    most_often_last_rank: int
    exposed_waits_ns_by_rank: dict[int, int]
    cost_why_not: str | Reason | None = absent()  # a Reason until worded (reports/findings.py)
    durations_vary_share: float | None = absent()
    saving_ns: int = absent()
    share: float = absent()  # saving_ns / the measured step
    floor: float = absent()  # skew.straggler_min_step_fraction
    saving_upper_bound: bool = absent()  # ranks outnumber their host's cores: the replay over-prices
    host: StragglerHost = absent()  # what its host counted in its late steps (native rank files only)
    expert_load: float = absent()  # the hottest rank of an uneven all-to-all: its load ratio; cost_ns balances


class StepPhase(Record):
    """skew.steps[].phases[]: one phase of one step across ranks."""

    name: str
    start_spread_ns: int
    end_spread_ns: int
    busy_median_ns: int
    busy_max_ns: int
    busy_max_rank: int


class StepRow(Record):
    """skew.steps[]: one step across ranks (the steps where the slowest rank loses the most)."""

    step: int
    ranks: int
    start_spread_ns: int
    end_spread_ns: int
    duration_median_ns: int
    duration_max_ns: int
    slowest_rank: int
    imbalance: float | None  # max / median duration
    phases: list[StepPhase]


class Imbalance(Record):
    """skew.steps_summary.imbalance: step-time max/median across ranks, over the steps."""

    median: float
    max: float
    max_step: int
    max_rank: int


class StepsSummary(Record):
    """skew.steps_summary: spreads over all steps."""

    count: int
    shown: int
    imbalance: Imbalance | None
    start_spread_ns: Spread
    end_spread_ns: Spread
    duration_median_ns: int  # the job's step time
    clock_verified: bool


class PhaseRow(Record):
    """skew.phases[]: one phase name's spreads and busy time across ranks, over its steps."""

    name: str
    steps: int
    start_spread_ns: Spread
    end_spread_ns: Spread
    busy_total_median_ns: int
    busy_total_max_ns: int
    busy_total_max_rank: int
    busy_imbalance: float | None  # max / median total
    busy_ns_by_rank: dict[int, int]
    compute_ns_by_rank: dict[int, int]  # busy less the communication its thread waited through (skew._nested_comm)


class StepSkew(Record):
    """The steps' and phases' part of skew (analyses.skew.step_skew), as the skew section holds it."""

    steps: list[StepRow]
    steps_summary: StepsSummary | None
    phases: list[PhaseRow]


class Stage(Record):
    """skew.pipelines[].stages[]: one stage's send/recv waits per step."""

    stage: int
    rank: int
    bubble_ns: int  # upstream and downstream waits, as a union
    upstream_ns: int
    downstream_ns: int
    share: float | None  # bubble_ns / step


class Pipeline(Record):
    """skew.pipelines[]: one send/recv pipeline, its ranks in stage order."""

    ranks: list[int]
    steps: int
    stages: list[Stage]


class Skew(Record, kw_only=True):  # keyword-only: required keys follow collectives_shown
    """summary.json's ``skew``."""

    aligned: bool
    reference_rank: int | None
    alignment: list[ClockRow]
    max_clock_uncertainty_ns: int | None  # None when a rank's clock is unverified
    clock_unverified_ranks: list[int]
    excluded_kinds: list[str]
    matched: int
    kinds: list[KindRow]
    collectives: list[CollectiveRow]
    collectives_total: int
    ranks: list[RankRow]
    straggler: StragglerRow | None
    notes: list[str | Reason]  # Reasons until worded (reports/findings.py); summary.json: phrased
    no_straggler_note: int | None  # index into notes of why no straggler was named
    collectives_shown: int = absent()  # absent when nothing was matched or one rank
    steps: list[StepRow]
    steps_summary: StepsSummary | None  # None without steps
    phases: list[PhaseRow]
    pipelines: list[Pipeline]
    unconfirmed_straggler: StragglerRow = absent()  # named, but the replay prices its fix under the floor
    note_templates: list[str] = absent()  # notes with duration tokens; present when notes are


# The collectives' part of skew (analyses.skew.collective_skew): per kind and collective, per rank, the
# straggler it names or the notes that say why none: Skew's own fields, declared once (there).
COLLECTIVE_FIELDS = ("matched", "kinds", "collectives", "collectives_total", "ranks", "straggler", "notes",
                     "no_straggler_note", "collectives_shown")
CollectiveSkew = msgspec.defstruct(
    "CollectiveSkew", [(f.name, f.type) if f.default is msgspec.NODEFAULT else (f.name, f.type, f.default)
                       for f in msgspec.structs.fields(Skew) if f.name in COLLECTIVE_FIELDS],
    bases=(Record,), kw_only=True, module=__name__)
