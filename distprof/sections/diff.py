"""diff.json: the comparison of two runs (analyses/diff.py) as one typed value. Its fields, in their
declared order, are diff.json's keys; ``Diff.from_json(j).to_json() == j`` for every diff.json distprof
wrote, and ``reports/diff_report.py`` reads it by attribute. Why typed: the diff had grown to a dozen
dicts written in one module and read by string key in another, with keys that only some rows carry."""

from __future__ import annotations

from typing import Any

from ..typed import Record, absent


class Change(Record):
    """A figure in both runs: after - before, and that over before (None where undefined)."""

    before: float | None
    after: float | None
    delta: float | None
    relative: float | None


class StepTime(Record):
    """The job's step time of one run a side, its change and whether the change is real."""

    before_median_ns: float | None
    after_median_ns: float | None
    since_step: int | None            # the after run's change point: its steps from it on are compared
    delta_ns: float | None
    relative: float | None
    ci_low_ns: float | None           # the bootstrap interval of the change; None without one
    ci_high_ns: float | None
    significant: bool
    excludes_zero: bool
    min_change: float
    steps_before: int
    steps_after: int
    level: float
    resamples: int
    seed: int
    min_steps: int
    reason: str | None                # no_steps, too_few_steps, below_min_change, within_drift, machine
    before_steps_ns: list[int]
    after_steps_ns: list[int]
    drift_ns: float = absent()        # with an interval: what one run's level wanders by (diff.drift)
    smallest_ns: float = absent()     # the smallest change this pair can tell apart
    machine_change_ns: float | None = absent()  # what the host counters explain; None: not recorded


class RunsSide(Record):
    """One side of several runs: each run's step time, their median and spread."""

    runs_ns: list[float | None]
    steps: list[int]
    median_ns: float | None
    spread: float | None              # (max - min) / median over its runs; None with one


class RunsStepTime(Record):
    """The step time between several runs a side: a two-level bootstrap (runs, then steps)."""

    level: float
    resamples: int
    seed: int
    min_change: float
    ci_low_ns: float | None
    ci_high_ns: float | None
    significant: bool
    excludes_zero: bool
    reason: str | None                # too_few_steps, below_min_change
    before: RunsSide
    after: RunsSide
    delta_ns: float | None
    relative: float | None


class RankChange(Record):
    """One rank (matched by number): its Distributed Summary figures in both runs, by figure name."""

    rank: int
    before: dict[str, float | None] | None   # None: the rank is not in that run
    after: dict[str, float | None] | None
    delta: dict[str, float | None]
    relative: dict[str, float | None]


class StatsChange(Record):
    """A figure's across-ranks statistics in both runs (each None where no rank has the figure)."""

    min: Change
    median: Change
    max: Change
    mean: Change


class AcrossChanges(Record):
    """summary.json's ``across_ranks`` in both runs: each Distributed Summary figure's statistics."""

    window_ns: StatsChange
    communication_ns: StatsChange
    computation_ns: StatsChange
    memory_ns: StatsChange
    overlap_ns: StatsChange
    exposed_communication_ns: StatsChange
    overlap_ratio: StatsChange
    idle_ns: StatsChange
    gpu_window_ns: StatsChange
    communication_wait_ns: StatsChange
    communication_transfer_ns: StatsChange


class UnitOfWork(Record):
    """The most frequent unit present in both runs, and the figures per unit of it."""

    source: str                       # kernel, user, phase
    name: str
    applies: bool                     # figures per unit replace per-step ones (reason says why)
    reason: str | None                # no_steps, step_counts_differ
    count: Change
    window_ns: Change
    per_step: Change                  # units per rank-step
    per_second: Change                # units per second of window
    cost_per_unit_ns: Change
    window_per_unit_ns: Change
    communication_per_unit_ns: Change
    computation_per_unit_ns: Change
    exposed_communication_per_unit_ns: Change
    idle_per_unit_ns: Change


class Mover(Record):
    """A part (phase, kernel, range, memory op, collective) whose time per ``per`` changed."""

    category: str
    name: str
    metric: str
    per: str                          # step, unit, window
    before: float | None
    after: float | None
    delta: float | None
    relative: float | None


class FindingBrief(Record):
    severity: str
    cost_ns: int | None
    ranks: list[int]


class FindingChange(Record):
    """A finding code in one run or both; ``ranks`` for a finding about one rank (the straggler)."""

    code: str
    before: FindingBrief | None
    after: FindingBrief | None
    ranks: list[int] = absent()


class FindingChanges(Record):
    resolved: list[FindingChange]
    new: list[FindingChange]
    kept: list[FindingChange]


class CheckChange(Record):
    """A stream placement check whose status changed, or that one run lacks (None there)."""

    check: str
    rank: int
    device: int | None
    before: str | None
    after: str | None


class DiffWarning(Record):
    """What makes the comparison weaker: world_size_differs (before, after) or ranks_differ (only_before,
    only_after)."""

    code: str
    before: int = absent()
    after: int = absent()
    only_before: list[int] = absent()
    only_after: list[int] = absent()


class MachineDifference(Record):
    """A fact of the machines that differs between the runs (analyses.machine.differences)."""

    fact: str                         # hosts, cores, gpus (the sorted values), load_per_core (a number)
    before: Any
    after: Any


class WorldSizes(Record):
    before: int
    after: int


class Sources(Record):
    before: str
    after: str


class Diff(Record):
    """The whole diff.json."""

    world_size: WorldSizes
    source: Sources
    warnings: list[DiffWarning]
    machine: list[MachineDifference]
    runs: RunsStepTime | None         # several runs a side; None with one
    step_time: StepTime
    ranks: list[RankChange]
    across_ranks: AcrossChanges
    unit_of_work: UnitOfWork | None
    movers_per: str                   # step, unit, window
    movers: list[Mover]
    findings: FindingChanges
    checks_changed: list[CheckChange]
