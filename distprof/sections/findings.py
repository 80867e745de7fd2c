"""summary.json ``findings`` and ``checks``.

A finding is found (an Observed) by analyses/diagnose.py (or analyses/profiles.py: memory), priced by
analyses/cost.py, given ``critical_path_share`` by analyses/critical_path.py, worded by
reports/findings.py; Summary.to_json phrases its message and keeps the unphrased one as ``template``.
Its ``evidence`` has keys by the finding's code: one record per code, picked by ``finding``.
A check is a stream placement row of one rank and device (analyses/streams.py).
"""

from __future__ import annotations

from typing import Any

from ..typed import JsonError, Reason, Record, absent
from .machine import StragglerHost
from .sharded import ShardedPhase

# why a fix is not priced (analyses/cost.py gives them, reports/findings.py words each code)
NO_SCENARIO, NOT_TIME, NO_REPLAY, ABOVE_STEP = (Reason("no_scenario"), Reason("not_time"), Reason("no_replay"),
                                                 Reason("above_step"))


class Evidence(Record):
    """Base of the evidence records: which one a finding carries depends on its ``finding`` code."""


class PlacementEvidence(Evidence):
    """serialized_communication / unoverlapped_communication: the worst rank's lanes and what runs on them."""

    worst_rank: int
    ranks_total: int
    exposed_communication_ns_by_rank: dict[int, int]  # net of the waits for the straggler
    lanes: list[str]                  # the worst rank's shared lanes, else its communication lanes
    lane_kind: str | None             # of lanes[0]
    kinds: list[str]                  # the check row's kinds on the shared lanes
    overlap_ratio: float | None
    window_ns: int
    lane_collectives: list[str]       # collective kinds on the lanes
    lane_groups: list[str]
    groups_by_kind: dict[str, list[str]]
    in_forward: list[str]             # kinds that start inside a forward phase
    on_gpu: bool                      # a lane is a GPU stream
    pytorch: bool                     # the trace shows PyTorch
    critical_path_share: float = absent()


class StragglerEvidence(Evidence):
    """straggler: skew.straggler without its rank and cost keys (the finding has those)."""

    slow_phase: str | None
    slow_phase_extra_ns: int | None
    waits_caused_ns: int              # per step (since the onset, with one)
    waits_caused_share: float | None  # of the step
    total_waits_caused_ns: int
    late_in: int
    last_in: int
    of: int
    side: str | None                  # "host" / "device"; None = not known
    pattern: str                      # "persistent" / "since step" / "single step"
    onset_step: int | None
    steps_late: int
    steps: int
    late_step_ids: list[int]
    phase: str | None
    phase_extra_ns: int | None
    largest_phase: str | None
    runner_up_waits_caused_ns: int
    late_steps: int
    threshold_ns: int
    most_often_last_rank: int
    exposed_waits_ns_by_rank: dict[int, int]
    durations_vary_share: float | None
    critical_path_share: float = absent()
    host: StragglerHost = absent()    # what its host counted in its late steps (skew.straggler.host)


class SlowCollectiveRow(Record):
    """A Collectives table row below the slow share of the peak, with the keys the finding keeps."""

    kind: str
    group: str
    node_span: str | None
    size_bucket: str
    count: int
    busbw_median_gbps: float
    peak_share: float
    transfer_median_ns: int | None


class SlowCollectiveEvidence(Evidence):
    """slow_collective: the table rows below ``limit_share`` of the peak busbw (the first 8) and the worst."""

    rows: list[SlowCollectiveRow]
    rows_below: int
    worst: SlowCollectiveRow          # the one whose transfer time at the peak saves most
    peak_busbw_gbps: float
    limit_share: float
    critical_path_share: float = absent()


class HostBoundEvidence(Evidence):
    """host_bound_gpu: GPU gaps waiting for kernel launches, on the worst rank."""

    worst_rank: int
    ranks_total: int
    host_bound_ns_by_rank: dict[int, int]
    host_bound_gaps: int
    gaps: int
    idle_ns: int
    window_ns: int
    pytorch: bool


class DataloaderEvidence(Evidence):
    """dataloader_bound: the dataloader phase's share of the steps, on the worst rank."""

    worst_rank: int
    ranks_total: int
    phase: str                        # config phases.dataloader
    share: float
    dataloader_ns: int
    steps: int
    limit_share: float
    share_by_rank: dict[int, float]
    steps_above: int
    pytorch: bool
    critical_path_share: float = absent()


class MemoryCreepEvidence(Evidence):
    """memory_creep: per-step peaks allocated that grow every step, on the worst rank's device."""

    ranks_total: int
    worst_rank: int
    device: str                       # memory device label
    growth_per_step_bytes: float
    first_peak_bytes: float
    last_peak_bytes: float
    steps: int


class MemoryImbalanceEvidence(Evidence):
    """memory_imbalance: a rank whose peak allocated stands out above the median of the ranks."""

    worst_rank: int
    peak_by_rank: dict[int, int]
    median_bytes: float


class PhaseSpread(Record):
    """One phase's own time (less the communication on its lane) across ranks, per step."""

    phase: str
    steps: int                        # steps in which two or more ranks have it
    spread_ns: int                    # median over steps of slowest - fastest rank
    excess_ns: int                    # median over steps of slowest - median rank (what balancing removes)
    spread_share: float | None        # spread_ns / the measured step
    slowest_steps_by_rank: dict[int, int]  # rank -> steps it was the slowest in this phase


class LateStep(Record):
    """A step of a rotating late rank: the rank the others waited for most, and how long."""

    step: int
    rank: int
    waits_caused_ns: int


class ImbalanceEvidence(Evidence):
    """imbalance: no single straggler, the ranks take turns being late; the phases that differ most."""

    ranks_total: int
    pattern: str                      # "rotates" (skew note late_rank_rotates) / "spread" (delay_spread)
    late_ranks: list[int]             # the ranks the others waited for
    worst_by_step: list[LateStep]     # rotates: per step (up to 8)
    phases: list[PhaseSpread]         # largest spread first (up to 4)
    phases_compared: int
    step_ns: int | None               # the measured step (what-if)
    floor_share: float                # skew.straggler_min_step_fraction: the share of the step the fix must save
    critical_path_share: float = absent()


class ExpertImbalanceEvidence(Evidence):
    """expert_imbalance: an all-to-all group whose ranks' loads (bytes on the experts' side) are uneven."""

    group: str
    group_ranks: list[int]
    hot_ranks: list[int]              # load >= limit_ratio x the others' median, largest first
    load_ratio: float                 # the hottest rank's load / the median of the other members'
    limit_ratio: float                # config diagnosis.expert_imbalance_ratio
    load_bytes_by_rank: dict[int, int]
    others_median_bytes: float
    ops: int                          # all-to-alls per rank counted
    recv_side_ops: int                # of them, the ones whose received bytes differ most (dispatch-like)
    phase: str | None                 # the hottest rank's phase with the most own time over the others' median
    phase_extra_ns: int | None        # per step (median over steps)
    straggler: bool                   # the hottest rank is the named straggler (its lateness: this load)
    floor_share: float
    critical_path_share: float = absent()
    onset_step: int = absent()        # the load turned uneven from this step on (load_ratio: since then)


class ExposedAllgatherEvidence(Evidence):
    """exposed_allgather: all-gathers (FSDP / ZeRO parameters) no computation hides, on the worst rank, per
    step and net of its waits for the named straggler (analyses/sharded.py)."""

    worst_rank: int
    ranks_total: int
    steps: int
    allgather_exposed_ns: int         # per step (the finding's figure)
    allgather_ns: int                 # per step, exposed or not
    reduce_scatter_exposed_ns: int    # per step
    exposed_communication_ns: int     # per step, every kind's
    share_of_exposed: float | None    # (all-gather + reduce-scatter) / exposed communication
    window_share: float               # exposed all-gather / the window
    waits_for_straggler_ns: int       # per step: of its exposed all-gathers / reduce-scatters, left to the straggler
    allgather_exposed_ns_by_rank: dict[int, int]  # per step, the ranks over limit_share
    phases: list[ShardedPhase]        # the worst rank's phases with exposed time (sums over their steps)
    limit_share: float                # config diagnosis.exposed_allgather_share
    replaces: str | None              # the placement finding it stands for ("unoverlapped_communication")
    pytorch: bool
    critical_path_share: float = absent()

EVIDENCE: dict[str, type[Evidence]] = {
    "serialized_communication": PlacementEvidence, "unoverlapped_communication": PlacementEvidence,
    "straggler": StragglerEvidence, "slow_collective": SlowCollectiveEvidence,
    "host_bound_gpu": HostBoundEvidence, "dataloader_bound": DataloaderEvidence,
    "memory_creep": MemoryCreepEvidence, "memory_imbalance": MemoryImbalanceEvidence,
    "imbalance": ImbalanceEvidence, "expert_imbalance": ExpertImbalanceEvidence,
    "exposed_allgather": ExposedAllgatherEvidence,
}


class Observed(Record):
    """A finding as an analysis observes it, before the one cost model (analyses/cost.py) prices it into
    a Finding: its code, the figure it describes, its ranks and its evidence."""

    finding: str                      # the code: a key of EVIDENCE
    figure_ns: int
    ranks: list[int]
    evidence: Evidence                # the record EVIDENCE[finding]

    @classmethod
    def of(cls, code: str, figure_ns: int, ranks: list[int], **evidence: Any) -> Observed:
        """The finding ``code`` with its evidence record made from ``evidence`` (EVIDENCE[code].build: rows
        given as mappings are read into their records)."""
        return cls(finding=code, figure_ns=int(figure_ns), ranks=list(ranks), evidence=EVIDENCE[code].build(**evidence))


class Finding(Record):
    """What is wrong, the figure it describes, what fixing it saves per step (the what-if replay) and
    what to change."""

    finding: str                      # the code: a key of EVIDENCE
    figure_ns: int                    # per step where the trace has steps; 0 for memory
    ranks: list[int]
    evidence: Evidence                # the record EVIDENCE[finding]
    severity: str                     # "high" / "medium" / "low" / "unpriced"
    cost_ns: int | None               # = predicted_saving_ns
    predicted_saving_ns: int | None   # per step; None = unpriced (why_not)
    saving_share: float | None        # of the measured step
    priced_by: str | None             # the what-if scenario
    priced_after_straggler: bool
    why_not: str | Reason | None      # why unpriced: a Reason until worded (reports/findings.py)
    durations_vary_share: float | None
    message: str = absent()           # summary.json: in readable units; worded in memory: the template
    advice: str = absent()            # both absent until worded (reports/findings.py worded)
    template: str = absent()          # the message with its duration tokens (units.phrase): summary.json only

    @classmethod
    def from_json(cls, data: Any, where: str = "$") -> Any:
        """The evidence decoded as the record of the finding's code, then the rest as usual."""
        if isinstance(data, dict) and isinstance(data.get("evidence"), dict):
            code = data.get("finding")
            kind = EVIDENCE.get(code) if isinstance(code, str) else None
            if kind is None:
                raise JsonError(f"{where}.finding: unknown finding {code!r}")
            data = {**data, "evidence": kind.from_json(data["evidence"], f"{where}.evidence")}
        return super().from_json(data, where)


class Check(Record):
    """The stream placement check of one rank and device: is communication on its own lane?"""

    check: str                        # "stream_placement"
    rank: int
    device: int | None                # None: host only
    status: str                       # "PASS" / "WARN" / "FAIL" / "N/A"
    comm_lanes: list[str]
    compute_lanes: list[str]
    shared_lanes: list[str]           # lanes carrying both
    shared_communication_ns: int
    communication_ns: int
    exposed_communication_ns: int
    overlap_ratio: float | None
    kinds: list[str]                  # collective kinds on the shared lanes (FAIL)
    message: str | Reason             # summary.json: in readable units; in memory a Reason until worded
    advice: str | Reason
    pipeline_ranks: list[int] = absent()       # a send/recv pipeline stage's chain: its FAIL is a PASS
    waits_for_straggler_ns: int = absent()     # what a WARN/FAIL rank's exposed time waited for the straggler
