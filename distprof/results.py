"""What travels between the stages (reduce_rank -> transport -> combine -> reports), as frozen
``msgspec.Struct`` types: a misspelt field is an AttributeError, not a silent None, and a stage
derives a new object (``msgspec.structs.replace``) instead of changing one it was given.

summary.json is written from :class:`Summary` in one place, :meth:`Summary.to_json`; its keys
are documented in the README and only ever added to.

Where a figure comes from: ``Summary.ranks[r].figures.overlap_ratio`` is set by
``analyses.distributed.rank_figures``; a new per-rank figure (e.g. ``memory_ns``) is a field of
:class:`RankFigures` computed there (and added to ``FIGURES`` when it should
get min/median/max across ranks).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec.structs import asdict, replace

from .sections import invariants
from .sections.alltoall import AllToAllGroup
from .sections.collectives import Collectives
from .sections.findings import Check, Finding
from .sections.machine import Host, Live
from .sections.profiles import FlopsUncounted, MemoryDevice, ModelProfile, Profiles
from .sections.sharded import ShardedFigures, ShardedRank
from .sections.skew import Skew
from .sections.tables import AcrossRanks, SentTables, Tables
from .sections.whatif import CriticalPath, WhatIf
from .typed import ABSENT, JsonError, Reason, Record, absent, got, read_struct
from .units import phrase

# per-rank figures in summary.json's rank rows, in their order there
FIGURE_FIELDS = ("window_ns", "steps", "communication_ns", "computation_ns", "memory_ns", "overlap_ns",
                 "exposed_communication_ns", "overlap_ratio", "idle_ns", "gpu_window_ns",
                 "communication_wait_ns", "communication_transfer_ns")


class RankFigures(msgspec.Struct, frozen=True):
    """The Distributed Summary of one rank over its analysed window (docs/summary.md, "The Distributed Summary")."""

    window_ns: int = 0
    steps: int = 0
    communication_ns: int = 0
    computation_ns: int = 0
    memory_ns: int = 0         # |∪ memcpy/memset| in the window
    overlap_ns: int = 0
    exposed_communication_ns: int = 0
    overlap_ratio: float | None = None  # overlap / communication; None without communication
    idle_ns: int = 0           # window − |communication ∪ computation ∪ memory|
    gpu_window_ns: int | None = None  # |∪ per-step GPU windows| (Kineto); None when not known
    # communication = wait + transfer (analyses.collectives.rank_waits, set by pipeline.combine after
    # alignment): wait = |∪ [own start, start + sync wait] over matched collectives ∩ window|;
    # None when the rank has no matched collective (its waits are not known)
    communication_wait_ns: int | None = None
    communication_transfer_ns: int | None = None


# the figures of a rank the across-ranks statistics, the CSV and the reports show, in their order
FIGURES = ("window_ns", "communication_ns", "computation_ns", "memory_ns", "overlap_ns",
           "exposed_communication_ns", "overlap_ratio", "idle_ns", "gpu_window_ns", "communication_wait_ns",
           "communication_transfer_ns")


class RankProfile(Record):
    """A rank's FLOPs and memory profile (analyses.profiles.rank_profile); None = not in the trace.
    Its fields are keys of the rank's row in summary.json."""

    flops_per_step: int | None = None      # median over ProfileSteps of the counted FLOPs
    flops_total: int | None = None         # counted FLOPs in the window
    achieved_tflops: float | None = None   # flops_total / window (= ProfileStep time)
    mfu: float | None = None               # achieved_tflops / hardware.peak_tflops
    flops_by_phase: dict[str, int] | None = None  # {"forward"|"backward"|...: median FLOPs per step}
    flops_source: str | None = None        # "args" (Kineto flops), "shapes" (Input Dims), "args+shapes"
    flops_uncounted: FlopsUncounted = msgspec.field(default_factory=FlopsUncounted)  # GEMM/conv ops, no shapes
    memory_peak_allocated_bytes: int | None = None   # of memory_device
    memory_peak_reserved_bytes: int | None = None
    memory_growth_per_step_bytes: float | None = None  # slope of the per-step peaks of memory_device
    memory_device: str | None = None       # the headline device: the GPU with the largest peak, else "CPU"
    # per device: peaks, per-step peaks, growth
    memory_devices: list[MemoryDevice] = msgspec.field(default_factory=list)

    @classmethod
    def from_json(cls, row: dict, where: str = "$") -> RankProfile:
        """The profile in a summary.json rank row (keys it lacks keep their defaults)."""
        return super().from_json({key: row[key] for key in _PROFILE_KEYS if key in row}, where)


class Lane(msgspec.Struct, frozen=True):
    """One lane (GPU stream or host thread) of a rank and the work it carried in the window."""

    label: str                 # lanes.label(key, names): how reports and checks name it
    device: int
    lane_kind: str
    communication_ns: int
    computation_ns: int
    comm_rules: tuple[str, ...] = ()   # the rules that made its rows communication (sources/comm_kernels.py)

    def to_json(self) -> dict:
        return {"lane": self.label, "device": self.device, "lane_kind": self.lane_kind,
                "communication_ns": self.communication_ns, "computation_ns": self.computation_ns,
                "comm_rules": list(self.comm_rules)}


def _column() -> Any:
    """An empty column by default: a sender that did not have the column sent none."""
    return msgspec.field(default_factory=list)


def _moved(values: list[int], offset_ns: int, unknown_stays: bool = False) -> list[int]:
    """Times moved by ``offset_ns`` (``unknown_stays``: -1, not known, stays -1). numpy is imported here,
    not with the module: ``distprof report`` reads a summary's results and needs no numpy."""
    import numpy as np
    times = np.asarray(values, dtype=np.int64)
    return (np.where(times >= 0, times + offset_ns, -1) if unknown_stays else times + offset_ns).tolist()


def _shifted(columns: Any, offset_ns: int) -> Any:
    """Marker columns on the common clock: their start and end times moved by ``offset_ns``, and their
    launch times where they have them (-1, not known, stays -1)."""
    moved = {"start_ns": _moved(columns.start_ns, offset_ns), "end_ns": _moved(columns.end_ns, offset_ns)}
    if hasattr(columns, "launch_ns"):
        moved["launch_ns"] = _moved(columns.launch_ns, offset_ns, unknown_stays=True)
    return replace(columns, **moved)


class StepBounds(msgspec.Struct, frozen=True):
    """A rank's ProfileSteps: their numbers and bounds."""

    step: list[int] = _column()
    start_ns: list[int] = _column()
    end_ns: list[int] = _column()


class PhaseBounds(msgspec.Struct, frozen=True):
    """A rank's phases per step and name: first start, last end, the time in them (``busy_ns``) and of it
    the part its thread computed, not waiting in communication (``compute_ns``; empty from a sender that
    did not split it: ``own_ns`` is then the busy time)."""

    step: list[int] = _column()
    name: list[str] = _column()
    start_ns: list[int] = _column()
    end_ns: list[int] = _column()
    busy_ns: list[int] = _column()
    compute_ns: list[int] = _column()

    @property
    def own_ns(self) -> list[int]:
        """Each phase's own work: its computing time where known, else its busy time."""
        return self.compute_ns or self.busy_ns


class CollectiveMarkers(msgspec.Struct, frozen=True):
    """A rank's communication ops as the matching reads them. ``name``: the canonical kind; ``lane``: its
    lane's label; ``step``: the step it is in (the matching's anchor: the k-th allreduce of step s);
    ``launch_ns``: when it was issued (the launching call's start for GPU work, a host range's own start,
    -1 for GPU work whose launch was not captured); ``exposed_ns``: its time no computation of the rank
    overlapped; ``blocking``: a host call on the thread that runs the steps. A column a sender did not
    have is empty (``group``: every op on the world; ``nbytes``, ``peer``: not known)."""

    name: list[str] = _column()
    start_ns: list[int] = _column()
    end_ns: list[int] = _column()
    lane: list[str] = _column()
    step: list[int] = _column()
    group: list[str] = _column()
    nbytes: list[int] = _column()
    peer: list[int] = _column()
    sent_bytes: list[int] = _column()  # all-to-all: its input and output (-1: unknown)
    recv_bytes: list[int] = _column()
    launch_ns: list[int] = _column()
    exposed_ns: list[int] = _column()
    blocking: list[bool] = _column()


class SyncCalls(msgspec.Struct, frozen=True):
    """A rank's host calls that block on the GPU (stream/event/device synchronize, a synchronous memcpy):
    where the host can be seen waiting for GPU work."""

    start_ns: list[int] = _column()
    end_ns: list[int] = _column()


class RankMarkers(msgspec.Struct, frozen=True):
    """What the cross-rank analyses need from a rank, on the rank's own clock, as plain column lists
    (picklable, and compact on the wire): its steps, phases, communication ops and sync calls."""

    step_bounds: StepBounds = msgspec.field(default_factory=StepBounds)
    phases: PhaseBounds = msgspec.field(default_factory=PhaseBounds)
    collectives: CollectiveMarkers = msgspec.field(default_factory=CollectiveMarkers)
    syncs: SyncCalls = msgspec.field(default_factory=SyncCalls)

    def shifted(self, offset_ns: int) -> RankMarkers:
        """The same markers on the common clock (own clock + offset)."""
        return RankMarkers(*(_shifted(columns, offset_ns) for columns in
                             (self.step_bounds, self.phases, self.collectives, self.syncs)))

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


class DeviceGaps(msgspec.Struct, frozen=True):
    """One device's idle gaps between its GPU work in the window (analyses.diagnose.rank_gpu_gaps)."""

    device: int
    gaps: int
    idle_ns: int
    host_bound_gaps: int          # gaps ended by work launched after the gap began: the GPU waited for the CPU
    host_bound_ns: int            # ... their time less the host's communication
    host_comm_ns: int             # idle time the host spent communicating
    busy_ns: int
    launch_known: float | None    # share of the gaps whose ending work's launch is known


class GpuGaps(msgspec.Struct, frozen=True):
    """A rank's idle GPU gaps summed over its devices, and each device's."""

    gaps: int
    idle_ns: int
    host_bound_gaps: int
    host_bound_ns: int
    host_comm_ns: int
    busy_ns: int
    window_ns: int
    devices: list[DeviceGaps]

    @property
    def host_bound_share(self) -> float | None:
        """host_bound_ns of the window; None for an empty window."""
        return self.host_bound_ns / self.window_ns if self.window_ns else None


class ClockEstimate(msgspec.Struct, frozen=True):
    """A rank's clock offset (ns to add to its own timestamps) and how it was obtained.

    From a source: ``method`` "source", the source's offset/uncertainty (uncertainty 0: the
    source states no bound). After alignment (align.align): refined values, and the source's kept
    in ``source_offset_ns``/``source_uncertainty_ns``; ``verified`` says whether anything
    (reference rank, same host, collective ends, a source bound) backs the offset; when nothing
    does, ``uncertainty_ns`` is None (unknown), never 0.
    """

    offset_ns: int = 0
    uncertainty_ns: int | None = 0   # None: unknown (nothing verified the offset)
    method: str = "source"
    samples: int = 0
    correction_ns: int | None = None
    spread_ns: int | None = None
    source_offset_ns: int | None = None
    source_uncertainty_ns: int | None = None
    verified: bool | None = None

    def to_json(self, rank: int) -> dict:
        """The entry of summary.json's skew.alignment for this rank."""
        return {"rank": rank, "source_offset_ns": self.source_offset_ns,
                "source_uncertainty_ns": self.source_uncertainty_ns, "offset_ns": self.offset_ns,
                "uncertainty_ns": self.uncertainty_ns, "method": self.method, "samples": self.samples,
                "correction_ns": self.correction_ns, "spread_ns": self.spread_ns, "verified": self.verified}


class RankResult(Record):
    """Everything rank 0 needs from one rank, made next to that rank's events (pipeline.reduce_rank).

    ``rank`` is None until align.assign_ranks numbers it when the source could not tell.
    """

    rank: int | None
    source: str
    source_file: str | None
    pid: int | None
    device: int | None
    rank_from: str
    figures: RankFigures
    lanes: tuple[Lane, ...]
    markers: RankMarkers
    gpu_gaps: GpuGaps | None    # analyses.diagnose.rank_gpu_gaps; None on host-only traces
    tables: SentTables | None   # analyses.summaries.rank_tables (None: read from a summary.json row)
    clock: ClockEstimate
    warnings: tuple[str | Reason, ...] = ()  # the reader's lines, and why the rank has no step window
    meta: dict = msgspec.field(default_factory=dict)
    frameworks: tuple[str, ...] = ()  # events.frameworks: whose advice fits this trace ("pytorch")
    profile: RankProfile = msgspec.field(default_factory=RankProfile)   # FLOPs and memory (analyses.profiles)
    sharded: ShardedFigures | None = None  # all-gathers / reduce-scatters, per phase (analyses.sharded)

    # what rank 0's analyses read and no report shows (to_json leaves them out): names.map_strings, which
    # escapes and cuts what the reports print, does not walk them (at 512 ranks they were most of its walk)
    NOT_REPORTED: ClassVar[frozenset[str]] = frozenset({"markers", "gpu_gaps", "tables", "meta", "warnings"})

    @property
    def host(self) -> str | None:
        """The rank's hostname where its source records one (``meta["hostname"]``): ranks on one
        host share a clock."""
        return str(self.meta.get("hostname") or "").strip() or None

    @property
    def comm_lanes(self) -> list[str]:
        return [lane.label for lane in self.lanes if lane.communication_ns > 0]

    @property
    def compute_lanes(self) -> list[str]:
        return [lane.label for lane in self.lanes if lane.computation_ns > 0]

    def aligned_markers(self) -> RankMarkers:
        """Markers on the common clock (own clock + this result's clock offset)."""
        return self.markers.shifted(int(self.clock.offset_ns))

    def to_json(self) -> dict:
        """The row of summary.json's ``ranks`` (``asdict`` is shallow: the figures' values shared, not copied)."""
        return {"rank": self.rank, "source_file": self.source_file, "pid": self.pid, "device": self.device,
                "rank_from": self.rank_from, **asdict(self.figures),
                "comm_lanes": self.comm_lanes, "compute_lanes": self.compute_lanes,
                "lanes": [lane.to_json() for lane in self.lanes],
                "clock_offset_ns": self.clock.offset_ns, "clock_uncertainty_ns": self.clock.uncertainty_ns,
                **self.profile.to_json()}

    @classmethod
    def from_json(cls, row: dict, where: str = "$") -> RankResult:
        """A rank as summary.json's ``ranks`` row knows it: figures, lanes, clock and profile. What the
        row does not carry (markers, tables, gaps) is empty: the job-wide figures made from them are
        in the other sections. ``comm_lanes``/``compute_lanes`` are read back from ``lanes``."""
        if not isinstance(row, dict):
            raise JsonError(f"{where}: expected a rank row, got {got(row)}")
        derived = {"comm_lanes", "compute_lanes", "lanes", "clock_offset_ns", "clock_uncertainty_ns"}
        unknown = set(row) - set(_RANK_KEYS) - _FIGURE_KEYS - _PROFILE_KEYS - derived
        if unknown:
            raise JsonError(f"{where}: unknown key {sorted(unknown)[0]!r} in a rank row")
        missing = next((key for key in (*_RANK_KEYS, *_ROW_KEYS) if key not in row), None)
        if missing:
            raise JsonError(f"{where}: a rank row without {missing!r}")
        row_of = read_struct(_RankRow, {key: value for key, value in row.items() if key in _RANK_ROW}, where)
        figures = read_struct(RankFigures, {key: row[key] for key in _FIGURE_KEYS if key in row}, where)
        clock = ClockEstimate(offset_ns=row_of.clock_offset_ns, uncertainty_ns=row_of.clock_uncertainty_ns)
        return cls(rank=row_of.rank, source="", source_file=row_of.source_file, pid=row_of.pid, device=row_of.device,
                   rank_from=row_of.rank_from, figures=figures, clock=clock, profile=RankProfile.from_json(row, where),
                   lanes=tuple(Lane(r.lane, r.device, r.lane_kind, r.communication_ns, r.computation_ns,
                                    tuple(r.comm_rules)) for r in row_of.lanes),
                   markers=RankMarkers(), gpu_gaps=None, tables=None)


class _LaneRow(Record):
    """A lane as a rank row of summary.json writes it (Lane.to_json)."""

    lane: str
    device: int
    lane_kind: str
    communication_ns: int
    computation_ns: int
    comm_rules: list[str] = msgspec.field(default_factory=list)


class _RankRow(Record):
    """The keys of a rank row that are neither figures nor profile, with their types (read, then made a RankResult)."""

    rank: int
    source_file: str | None
    pid: int | None
    device: int | None
    rank_from: str
    lanes: list[_LaneRow]
    clock_offset_ns: int
    clock_uncertainty_ns: int | None
    comm_lanes: list[str] = absent()    # derived from lanes: checked, not kept
    compute_lanes: list[str] = absent()


_RANK_ROW = frozenset(_RankRow.__struct_fields__)


_RANK_KEYS = ("rank", "source_file", "pid", "device", "rank_from")
_ROW_KEYS = ("lanes", "clock_offset_ns", "clock_uncertainty_ns")
_FIGURE_KEYS = set(RankFigures.__struct_fields__)
_PROFILE_KEYS = set(RankProfile.__struct_fields__)


class Summary(Record):
    """The job-wide result (pipeline.combine) and the content of summary.json: ranks in rank order
    plus what was computed across them, every section a frozen type (distprof.sections).

    In memory, messages (findings, checks, skew notes) are templates with duration tokens
    (units.duration); ``to_json`` writes them out in readable units and keeps the findings' and
    notes' templates beside them, so a report can phrase them in its reader's unit. ``from_json``
    reads such a file back: ``Summary.from_json(j).to_json() == j``.
    """

    world_size: int
    source: str
    ranks: tuple[RankResult, ...]
    across_ranks: AcrossRanks
    missing_ranks: list[int]
    checks: list[Check]
    skew: Skew
    findings: list[Finding]
    warnings: list[str | Reason]  # Reasons until worded (reports/findings.py)
    tables: Tables
    collectives: Collectives = msgspec.field(default_factory=Collectives)  # the Collectives table
    whatif: WhatIf | None = None  # replayed step time and scenarios (analyses.whatif)
    profiles: Profiles = msgspec.field(default_factory=Profiles)  # FLOPS spread, memory across ranks
    model_profile: ModelProfile | None = None  # the live FLOPs profile (flops=True)
    critical_path: CriticalPath | None = None  # what sets each step, across ranks
    machine: list[Host] = msgspec.field(default_factory=list)  # hosts, cores, GPUs, load (analyses.machine)
    alltoall: list[AllToAllGroup] = absent()  # per all-to-all group, each rank's bytes (analyses.alltoall)
    sharded: list[ShardedRank] = absent()  # per rank: all-gather / reduce-scatter exposure by phase (analyses.sharded)
    live: Live = absent()  # the live view's record: only a session with the live view on has one

    def rank(self, rank: int) -> RankResult:
        """The result of one rank by its number."""
        return next(result for result in self.ranks if result.rank == rank)

    def to_json(self) -> dict:
        """summary.json's content: the one place it is written from (of a worded Summary:
        reports.findings.worded words what the analyses left as codes)."""
        texts = (*self.skew.notes, *self.warnings, *(c.message for c in self.checks))
        if any(f.message is ABSENT for f in self.findings) or any(isinstance(t, Reason) for t in texts):
            raise ValueError("an unworded Summary has no summary.json: reports.findings.worded(summary) first")
        return Record.to_json(replace(
            self, findings=[replace(f, message=phrase(f.message), template=f.message) for f in self.findings],
            checks=[replace(c, message=phrase(c.message)) for c in self.checks],
            skew=_phrased_notes(self.skew)))

    @classmethod
    def from_json(cls, data: dict, where: str = "$") -> Summary:
        """A summary.json's content as the typed value (messages back to their templates)."""
        read = super().from_json(data, where)
        invariants.check(read)
        return replace(read, findings=[replace(f, message=f.message if f.template is ABSENT else f.template,
                                               template=ABSENT) for f in read.findings],
                       skew=read.skew if read.skew.note_templates is ABSENT else
                       replace(read.skew, notes=list(read.skew.note_templates), note_templates=ABSENT))


def _phrased_notes(skew: Skew) -> Skew:
    """The skew section as summary.json keeps it: notes in readable units, their templates beside."""
    return replace(skew, notes=[phrase(n) for n in skew.notes], note_templates=list(skew.notes)) if skew.notes else skew
