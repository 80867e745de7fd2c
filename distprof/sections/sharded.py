"""summary.json ``sharded``: each rank's all-gather and reduce-scatter time (FSDP, ZeRO) over the window and
per annotated phase, and how much of it no computation hid (analyses/sharded.py). Why per phase: a sharded
model all-gathers its parameters in forward (FSDP's prefetch) and again in backward, where it also
reduce-scatters the gradients; the phase says which of them the job waits for."""

from __future__ import annotations

from ..typed import Record


class ShardedPhase(Record):
    """One rank's all-gather / reduce-scatter time inside one phase name (summed over its steps)."""

    phase: str                        # the annotated phase; "" = outside every annotated phase
    steps: int                        # the steps the phase ran in (0: outside phases, or no steps)
    allgather_ns: int                 # |∪ all-gathers| attributed to the phase
    allgather_exposed_ns: int         # of it, what no computation of the rank overlapped
    reduce_scatter_ns: int
    reduce_scatter_exposed_ns: int


class ShardedFigures(Record):
    """One rank's all-gather / reduce-scatter time in the analysed window, made next to its events
    (pipeline.reduce_rank); rank 0 adds the rank and the straggler's share (ShardedRank)."""

    steps: int                        # ProfileSteps in the window
    allgather_ns: int
    allgather_exposed_ns: int
    reduce_scatter_ns: int
    reduce_scatter_exposed_ns: int
    phases: list[ShardedPhase]        # by time in them, largest first


class ShardedRank(Record):
    """summary.json ``sharded[]``: one rank's figures, and what of its exposed all-gather and reduce-scatter
    waited for the named straggler (that delay is the straggler's, charged once)."""

    rank: int
    steps: int
    allgather_ns: int
    allgather_exposed_ns: int
    reduce_scatter_ns: int
    reduce_scatter_exposed_ns: int
    exposed_communication_ns: int     # every kind's, as in the Distributed Summary
    waits_for_straggler_ns: int       # of it, every kind's exposed waits owed to the straggler (skew.straggler)
    allgather_waits_for_straggler_ns: int   # of allgather_exposed_ns
    reduce_scatter_waits_for_straggler_ns: int
    phases: list[ShardedPhase]
