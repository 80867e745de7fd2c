"""The All-gather / reduce-scatter table (summary.sharded, analyses/sharded.py) for the text report: per rank
and phase, per step, the FSDP / ZeRO collectives' time and the part no computation hid. A job of many ranks
shows the ranks with the most exposed all-gather, not a page of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sections.sharded import ShardedRank

HEADERS = ["Rank", "Phase", "Steps", "All-gather", "exposed", "Reduce-scatter", "exposed"]
TOP = 8  # ranks shown: the most exposed all-gather first


def _shown(rows: list[ShardedRank]) -> list[ShardedRank]:
    ranked = sorted(rows, key=lambda r: (-(r.allgather_exposed_ns + r.reduce_scatter_exposed_ns), r.rank))
    return sorted(ranked[:TOP], key=lambda r: r.rank)


def cells(rows: list[ShardedRank], t: Callable[[int | None], str]) -> list[list[str]]:
    """Text cells per shown rank and phase, per step (over the phase's steps, else the rank's), the rank on
    its first row."""
    out = []
    for row in _shown(rows):  # at most TOP ranks
        for index, phase in enumerate(row.phases):
            steps = max(phase.steps or row.steps, 1)
            out.append([str(row.rank) if index == 0 else "", phase.phase or "(outside phases)",
                        str(phase.steps or "-"), t(phase.allgather_ns // steps), t(phase.allgather_exposed_ns // steps),
                        t(phase.reduce_scatter_ns // steps), t(phase.reduce_scatter_exposed_ns // steps)])
    return out


def note(rows: list[ShardedRank]) -> str:
    """What the columns are, and what a large job leaves out."""
    cut = len(rows) - TOP
    return ("Per step, by the phase an all-gather or reduce-scatter is issued in (FSDP / ZeRO: parameters gathered "
            "in forward and backward, gradients reduce-scattered in backward): its time, and exposed, the part no "
            "computation of the rank overlapped (waits for a late rank included; the exposed_allgather finding "
            "leaves those to the straggler)" + (f"; the {TOP} ranks with the most exposed, {cut} more not shown"
                                                 if cut > 0 else "") + ".")
