"""The All-to-all table (summary.alltoall, analyses/alltoall.py) for the text and HTML reports: per
process group, the bytes each rank sends and receives and its load on the experts' side, next to the
Collectives table. A group of many ranks shows its most and least loaded ranks, not a page of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .findings import byte_size

if TYPE_CHECKING:
    from ..sections.alltoall import AllToAllGroup

HEADERS = ["Group", "Rank", "All-to-alls", "Sent", "Received", "Load", "Load / others"]
TOP, BOTTOM = 6, 2  # rows kept of a group with more ranks than TOP + BOTTOM


def _shown(group: AllToAllGroup) -> list:
    """The group's rows, most loaded first; of a large group the TOP most and BOTTOM least loaded."""
    rows = sorted(group.rows, key=lambda r: (-r.load_bytes, r.rank))
    return rows if len(rows) <= TOP + BOTTOM else rows[:TOP] + rows[-BOTTOM:]


def cells(groups: list[AllToAllGroup]) -> list[list[str]]:
    """Text cells of every shown row, the group's name on its first row."""
    out = []
    for group in groups:  # one per all-to-all group: a handful
        for index, row in enumerate(_shown(group)):
            hot = "  <-" if row.rank in group.hot_ranks else ""
            out.append([(group.group or "-") if index == 0 else "", str(row.rank), str(row.ops),
                        byte_size(row.sent_bytes), byte_size(row.recv_bytes), byte_size(row.load_bytes),
                        ("-" if row.load_ratio is None else f"{row.load_ratio:.2f}x") + hot])
    return out


def note(groups: list[AllToAllGroup]) -> str:
    """What the columns are, the threshold, and what a large group leaves out."""
    cut = [f"group {g.group or '-'}: {len(g.rows) - TOP - BOTTOM} ranks between" for g in groups
           if len(g.rows) > TOP + BOTTOM]
    limit = groups[0].limit_ratio if groups else 0.0
    return ("Per all-to-all group, each rank's bytes over the all-to-alls every member has (its own share "
            "included). Load: its bytes on the experts' side of each all-to-all (received where the received "
            "bytes differ more across ranks, as in a dispatch; sent where the sent do, as in a combine). "
            f"Load / others: over the median of the group's other ranks; <- at or above {limit:g}x "
            "(diagnosis.expert_imbalance_ratio)" + (f" ({'; '.join(cut)} not shown)" if cut else "") + ".")
