"""summary.json ``tables``: the Paddle-style summary tables of each rank and merged across ranks
(analyses.summaries.rank_tables / merge_tables, the Operator Summary of analyses.operators), and
``across_ranks``: the spread of each Distributed Summary figure (analyses.distributed.across_ranks).

Per-rank rows (``by_rank``) and merged rows (``merged``) are different records: a merged row adds
``ranks`` / ``max_rank`` (or per-rank columns) and its producer writes the shared keys in another
order (``avg_ns`` after ``max_rank``).

``phase`` (the Phase Summary, analyses.phases) is absent from a summary.json written before it
existed; such a file still reads back as it was.
"""

from __future__ import annotations

import msgspec

from ..typed import Record, absent, hints_of


class Dropped(Record):
    """What a by-name table left out beyond its kept rows."""

    rows: int
    calls: int
    total_ns: int                  # Operator Summary: their CPU total


# -- one rank's tables (tables.by_rank[]) ------------------------------------------------------

class DeviceRow(Record):
    """Device Summary row of a rank: a GPU's utilization, a host thread's busy share, or the
    process CPU utilization (kind "gpu", "host_thread", "cpu_process")."""

    device: str                    # "GPU0", a host thread's lane label, "CPU(Process)"
    kind: str
    busy_ns: int                   # cpu_process: the process CPU time
    elapsed_ns: int                # the window (cpu_process: the process wall time)
    utilization: float | None      # busy / elapsed (cpu_process: up to 1 x cores); None: empty window


class OverviewRow(Record):
    """Overview row of a rank: time by event type, the union of its intervals in the window."""

    side: str                      # "cpu" or "gpu"
    type: str                      # "ProfileStep", "Kernel", "Memcpy", ...
    calls: int                     # events starting in the window
    total_ns: int
    ratio: float | None            # total / window


class ModelRow(Record):
    """Model Summary row of a rank (ProfileStep, Dataloader, Forward, Backward, Optimization, Others):
    CPU = the phase ranges, GPU = the GPU ops launched in the phase, one call per step."""

    name: str
    calls: int | None              # CPU calls; None for Others
    cpu_total_ns: int
    cpu_avg_ns: float | None
    cpu_max_ns: int | None
    cpu_min_ns: int | None
    cpu_ratio: float | None        # of the ProfileStep total (else the window)
    gpu_calls: int | None          # None: no GPU work in the window (all GPU columns None)
    gpu_total_ns: int | None
    gpu_avg_ns: float | None
    gpu_max_ns: int | None
    gpu_min_ns: int | None
    gpu_ratio: float | None        # of the GPU total


class KernelRow(Record):
    """Kernel Summary row of a rank: one kernel name."""

    name: str
    calls: int
    total_ns: int
    avg_ns: float
    max_ns: int
    min_ns: int
    ratio: float | None            # of the table's total; None when that is 0
    category: str                  # the first seen kernel's event category ("" when none)


class MemoryRow(Record):
    """Memory Summary row of a rank: one memcpy/memset kind and name."""

    kind: str                      # "memcpy" or "memset"
    name: str
    calls: int
    total_ns: int
    avg_ns: float
    max_ns: int
    min_ns: int
    ratio: float | None            # of the table's total; None when that is 0


class UserRow(Record):
    """UserDefined Summary row of a rank: USER ranges by base name (``aten::to, seq = 12`` counts as
    ``aten::to``)."""

    name: str
    calls: int
    total_ns: int
    avg_ns: float
    max_ns: int
    min_ns: int
    ratio: float | None            # of the window; None when that is 0


class OperatorRow(Record):
    """Operator Summary row of a rank: one framework operator by name."""

    name: str
    calls: int
    cpu_total_ns: int
    cpu_self_ns: int               # own time less its direct child operators'
    cpu_avg_ns: float
    cpu_max_ns: int
    cpu_min_ns: int
    gpu_total_ns: int | None       # GPU ops launched under it; None on traces without GPU work
    gpu_avg_ns: float | None
    ratio: float | None            # CPU total / window (nested operators add up to more than 1)


class PhaseRow(Record):
    """Phase Summary row of a rank: one phase name (distprof.phase, an nsys ``distprof`` range, a Kineto
    ``## name ##``; not the steps). Why its own table: the Model Summary's fixed rows put a phase the
    user names ("loss") under Others. Calls are its ranges starting in the window; total is the union
    of their time inside the window (nested calls of one name, or calls on several threads at once,
    count once); avg, max and min are of the single calls. A phase nested in another keeps its own
    total, so a rank's rows can add up to more than the window."""

    name: str
    calls: int
    total_ns: int                  # |∪ of its calls ∩ window|
    avg_ns: float                  # the mean call (its time inside the window)
    max_ns: int
    min_ns: int
    ratio: float | None            # total / window (the steps' union, else the trace); None when that is 0


class KernelTable(Record):
    """A rank's Kernel Summary, total down."""

    rows: list[KernelRow]
    denominator_ns: int            # Σ kernel time in the window
    dropped: Dropped


class MemoryTable(Record):
    """A rank's Memory (memcpy/memset) Summary, total down."""

    rows: list[MemoryRow]
    denominator_ns: int            # Σ memcpy/memset time in the window
    dropped: Dropped


class UserTable(Record):
    """A rank's UserDefined Summary, total down."""

    rows: list[UserRow]
    denominator_ns: int            # the window
    dropped: Dropped


class OperatorTable(Record):
    """A rank's Operator Summary, CPU total down."""

    rows: list[OperatorRow]
    denominator_ns: int            # the window
    dropped: Dropped


class PhaseTable(Record):
    """A rank's Phase Summary, total down."""

    rows: list[PhaseRow]
    denominator_ns: int            # the window
    dropped: Dropped


class RankTables(Record):
    """One rank's own tables (by-name tables cut to summaries.RANK_ROWS rows, all of them for one rank)."""

    rank: int
    window_ns: int
    span_ns: list[int] | None      # [first start, last end] of the rank's events (own clock); None: no events
    device: list[DeviceRow]
    overview: list[OverviewRow]
    model: list[ModelRow]
    kernel: KernelTable
    memory: MemoryTable
    user: UserTable
    operator: OperatorTable
    phase: PhaseTable = absent()   # absent in a summary.json older than the Phase Summary



class StepTimes(Record):
    """A rank's ProfileStep durations by step index (summaries.step_times, the first MAX_STEPS steps):
    what the merged step series is made of; it travels, summary.json keeps only the merged one."""

    step: list[int]
    duration_ns: list[int]


# One rank's own tables as it sends them to rank 0 (results.RankResult.tables): RankTables' by-name tables
# (declared once, there) of up to summaries.MAX_ROWS rows, and the step series; merge_tables makes the merged
# tables and each rank's RankTables of them. Every field has a value (None, not absent): msgspec decodes it
# off the wire from a rank's message, which a sender of an older distprof may have written without ``phase``.
SentTables = msgspec.defstruct(
    "SentTables", [(name, hint) for name, hint in hints_of(RankTables).items()
                   if name not in ("rank", "phase", "operator")]
    + [("steps", StepTimes), ("phase", PhaseTable | None, None), ("operator", OperatorTable | None, None)],
    bases=(Record,), module=__name__)


# -- merged across ranks (tables.merged) ---------------------------------------------------------

# MergedDeviceRow.device by kind: the label summary.json stores for each merged row (its data, kept as
# a name here with the type that documents it, not as text an analysis writes)
MERGED_DEVICE_LABELS = {"gpu": "GPU (mean of the rank's GPUs)", "cpu_process": "CPU(Process)",
                        "host_thread": "Busiest host thread"}


class MergedDeviceRow(Record):
    """Device Summary across ranks, per kind: GPU = each rank's mean over its GPUs, CPU(Process) =
    each rank's mean, host thread = each rank's busiest thread."""

    device: str                    # the row's label: MERGED_DEVICE_LABELS[kind]
    kind: str                      # "gpu", "cpu_process", "host_thread"
    mean: float
    min: float
    max: float
    min_rank: int
    max_rank: int
    utilization_by_rank: list[float | None]  # in tables.ranks order; None: the rank has no such row


class MergedOverviewRow(Record):
    """Overview across ranks: Σ calls and totals, ratio of Σ windows."""

    side: str
    type: str
    calls: int
    total_ns: int
    ratio: float | None
    total_ns_by_rank: list[int | None]  # in tables.ranks order; None: the rank has no such row


class MergedModelRow(Record):
    """Model Summary across ranks: Σ totals and calls, max of maxes, min of mins, ratios of Σ
    ProfileStep (or window) and of Σ GPU time; each side's columns all None when no rank has it."""

    name: str
    cpu_total_ns: int | None
    cpu_avg_ns: float | None
    cpu_max_ns: int | None
    cpu_min_ns: int | None
    cpu_ratio: float | None
    gpu_total_ns: int | None
    gpu_avg_ns: float | None
    gpu_max_ns: int | None
    gpu_min_ns: int | None
    gpu_ratio: float | None
    calls: int | None              # Σ CPU calls; None for Others
    cpu_total_ns_by_rank: list[int | None]  # in tables.ranks order
    gpu_total_ns_by_rank: list[int | None] | None  # None when gpu_total_ns is


class MergedKernelRow(Record):
    """Kernel Summary row across ranks."""

    name: str
    calls: int
    total_ns: int
    max_ns: int
    min_ns: int
    ranks: int                     # ranks that ran it
    max_rank: int                  # the rank with its largest total
    avg_ns: float                  # Σ total / Σ calls
    ratio: float | None            # of Σ the ranks' table totals
    category: str


class MergedMemoryRow(Record):
    """Memory Summary row across ranks."""

    kind: str
    name: str
    calls: int
    total_ns: int
    max_ns: int
    min_ns: int
    ranks: int
    max_rank: int
    avg_ns: float
    ratio: float | None            # of Σ the ranks' table totals


class MergedUserRow(Record):
    """UserDefined Summary row across ranks."""

    name: str
    calls: int
    total_ns: int
    max_ns: int
    min_ns: int
    ranks: int
    max_rank: int
    avg_ns: float
    ratio: float | None            # of Σ the ranks' windows


class MergedOperatorRow(Record):
    """Operator Summary row across ranks."""

    name: str
    calls: int
    cpu_total_ns: int
    cpu_self_ns: int
    cpu_avg_ns: float
    cpu_max_ns: int
    cpu_min_ns: int
    gpu_total_ns: int | None       # None when no rank has GPU work
    gpu_avg_ns: float | None
    ratio: float | None            # CPU total / Σ the ranks' windows
    ranks: int                     # ranks that ran it
    max_rank: int                  # the rank with its largest CPU total


class MergedPhaseRow(Record):
    """Phase Summary row across ranks: Σ calls and totals, and how the total spreads over the ranks
    that have the phase (each rank's total is its own union; the row's total is their sum)."""

    name: str
    calls: int
    total_ns: int
    avg_ns: float                  # Σ call time / Σ calls
    max_ns: int                    # the longest call on any rank
    min_ns: int                    # the shortest call on any rank
    ratio: float | None            # Σ total / Σ the ranks' windows
    ranks: int                     # ranks that have the phase
    rank_min_ns: int               # the least total of a rank that has it
    rank_median_ns: int            # the median of those ranks' totals (rounded to ns)
    rank_max_ns: int               # the largest total of a rank
    min_rank: int                  # the first rank holding rank_min_ns
    max_rank: int                  # the first rank holding rank_max_ns
    total_ns_by_rank: list[int | None]  # in tables.ranks order; None: the rank has no such phase


class MergedKernelTable(Record):
    """The Kernel Summary across ranks, total down (summaries.MAX_ROWS kept)."""

    rows: list[MergedKernelRow]
    denominator_ns: int
    dropped: Dropped               # the ranks' own dropped plus the merged rows cut


class MergedMemoryTable(Record):
    """The Memory Summary across ranks, total down."""

    rows: list[MergedMemoryRow]
    denominator_ns: int
    dropped: Dropped


class MergedUserTable(Record):
    """The UserDefined Summary across ranks, total down."""

    rows: list[MergedUserRow]
    denominator_ns: int            # Σ the ranks' windows
    dropped: Dropped


class MergedOperatorTable(Record):
    """The Operator Summary across ranks, CPU total down."""

    rows: list[MergedOperatorRow]
    denominator_ns: int            # Σ the ranks' windows
    dropped: Dropped


class MergedPhaseTable(Record):
    """The Phase Summary across ranks, total down (summaries.MAX_ROWS kept)."""

    rows: list[MergedPhaseRow]
    denominator_ns: int            # Σ the ranks' windows
    dropped: Dropped               # the ranks' own dropped plus the merged rows cut


class MergedSteps(Record):
    """ProfileStep durations per step across ranks (steps ascending), and per rank."""

    step: list[int]
    min_ns: list[int]
    median_ns: list[int]           # the job's step time of each step (analyses.steptime)
    max_ns: list[int]
    max_rank: list[int]            # the slowest rank of each step
    ranks: list[int]
    mean_ns_by_rank: list[float | None]  # in ``ranks`` order; None: the rank has no steps
    max_ns_by_rank: list[int | None]


class MergedTables(Record):
    """The tables summed across ranks."""

    window_ns: int                 # Σ the ranks' windows
    device: list[MergedDeviceRow]
    overview: list[MergedOverviewRow]
    model: list[MergedModelRow]
    kernel: MergedKernelTable
    memory: MergedMemoryTable
    user: MergedUserTable
    steps: MergedSteps
    operator: MergedOperatorTable
    phase: MergedPhaseTable = absent()  # absent in a summary.json older than the Phase Summary


class Tables(Record):
    """summary.json ``tables``: the ranks that sent tables, the merged tables and each rank's own."""

    ranks: list[int]
    merged: MergedTables
    by_rank: list[RankTables]


# -- across_ranks ---------------------------------------------------------------------------------

class FigureStats(Record):
    """A ns figure across the ranks that have it (values rounded to ns)."""

    min: int
    median: int
    max: int
    mean: int
    max_rank: int                  # the first rank holding the max
    min_rank: int


class RatioStats(Record):
    """A ratio figure across the ranks that have it."""

    min: float
    median: float
    max: float
    mean: float
    max_rank: int
    min_rank: int


class AcrossRanks(Record):
    """summary.json ``across_ranks``: each Distributed Summary figure (results.FIGURES) across ranks;
    None where no rank has the figure."""

    window_ns: FigureStats | None
    communication_ns: FigureStats | None
    computation_ns: FigureStats | None
    memory_ns: FigureStats | None
    overlap_ns: FigureStats | None
    exposed_communication_ns: FigureStats | None
    overlap_ratio: RatioStats | None
    idle_ns: FigureStats | None
    gpu_window_ns: FigureStats | None
    communication_wait_ns: FigureStats | None
    communication_transfer_ns: FigureStats | None
