"""summary.json's ``whatif`` (analyses/whatif.py ``whatif``) and ``critical_path``
(analyses/critical_path.py ``critical_path``): the replay of the merged timeline, its scenarios
and the path that sets each replayed step."""

from __future__ import annotations

from ..typed import Reason, Record, absent


class Scenario(Record):
    """One what-if scenario: its predicted median step, or why it does not apply.

    After ``why`` come the keys of what the scenario changed (or, where it does not apply, of why
    not), each written by one scenario only: no_straggler ``rank``, ``removed_per_step_ns`` and
    ``since_step``; no_dataloader_wait ``phase`` (not applying) or ``removed_ns``;
    comm_bandwidth_x2 ``transfer_ns``; overlap_communication ``waits_removed`` and
    ``issued_earlier``. ``saving_after_straggler_ns``: every scenario but no_straggler, where
    no_straggler applies."""

    name: str
    predicted_step_ns: int | None
    saving_ns: int | None          # measured median step less the predicted one (per step since since_step)
    ranks_gaining: list[int]       # ranks whose own median step drops by more than 1%
    applies: bool
    why: str | Reason | None       # why it does not apply (None where it does); a Reason until worded
    rank: int = absent()           # no_straggler: the straggler the skew analysis named
    removed_per_step_ns: int = absent()  # no_straggler: its lateness removed, per step
    phase: str = absent()          # no_dataloader_wait: the dataloader phase it found no time in
    removed_ns: int = absent()     # no_dataloader_wait: the dataloader time removed, all steps
    transfer_ns: int = absent()    # comm_bandwidth_x2: the transfer time halved, all steps
    waits_removed: int = absent()  # overlap_communication: the chain's waits on collectives dropped
    issued_earlier: int = absent()  # overlap_communication: collectives moved to their inputs' phase
    since_step: int = absent()     # no_straggler: the straggler's onset; savings are per step since then
    saving_after_straggler_ns: int | None = absent()  # replayed on top of no_straggler (None: not applying)


class WhatIf(Record):
    """summary.json's ``whatif``: measured and replayed median step (all None, steps 0, without
    ProfileSteps), the replay error and each scenario's prediction."""

    measured_step_ns: int | None
    replayed_step_ns: int | None
    replay_error: float | None      # median over steps of |replayed - measured| / measured
    replay_error_max: float | None
    steps: int
    notes: list[str | Reason]      # Reasons until worded (reports/findings.py)
    scenarios: list[Scenario]


class PathSegment(Record):
    """One piece of a step's critical path, on the common clock."""

    rank: int
    lane: str                       # "thread" (the issuing thread) or a collective's lane
    name: str                       # the phase, the collective's name, "(no phase)" or "(trace starts)"
    kind: str                       # compute, communication, host, wait or idle
    start_ns: int
    end_ns: int
    phase: str                      # the innermost phase holding it ("" for none)


class PathStep(Record):
    """One step's critical path, walked back from the end of the rank nearest the median."""

    step: int
    rank: int                       # the rank the walk starts on
    job_step_ns: int
    rank_step_ns: int               # that rank's replayed step
    rank_rule: str                  # "median" or "closest_to_median"
    length_ns: int
    segments: list[PathSegment]


class PathTop(Record):
    """A (name, kind) pair among the longest on the path, all steps."""

    name: str
    kind: str
    ns: int
    share: float                    # of the path's total length
    ranks: list[int]                # ranks where it lies on the path


class Dominant(Record):
    """The phase or name holding more than half of the path."""

    by: str                         # "phase" or "name"
    name: str
    share: float


class ScenarioShares(Record):
    """Per what-if scenario, the share of the path it acts on."""

    no_straggler: float | None      # None: no straggler named
    overlap_communication: float
    comm_bandwidth_x2: float
    no_dataloader_wait: float
    balanced_ranks: float


class CriticalPath(Record):
    """summary.json's ``critical_path``: every step's path and the shares of its total length
    (maps largest share first)."""

    steps: list[PathStep]
    length_ns: int
    share_by_rank: dict[int, float]
    rank_reading: str               # "straggler", "no_straggler" or "one_rank": how to read by-rank shares
    walked_from: dict[int, int]     # steps walked from each rank
    share_walked_rank: float        # the path on the rank its step is walked from
    share_by_rank_waited_for: dict[int, float]  # the rest, by rank
    share_by_kind: dict[str, float]
    share_by_phase: dict[str, float]  # "" for time outside every phase
    top: list[PathTop]
    dominant: Dominant | None
    scenario_shares: ScenarioShares
