"""The What-if table: measured and replayed step time, then each scenario's predicted step,
saving and the ranks that gain (or why it does not apply)."""

from __future__ import annotations

from ..analyses.steptime import STEP_TIME_DEFINITION
from . import format
from .tables import tabulate

TITLES = {"no_straggler": "no straggler", "overlap_communication": "overlap communication",
          "comm_bandwidth_x2": "comm bandwidth x2", "no_dataloader_wait": "no dataloader wait",
          "balanced_ranks": "balanced ranks"}


def parts(whatif: dict, unit: str = "ms") -> tuple[str, list[str], list[list[str]], list[str]]:
    """(headline, headers, rows, notes) of the What-if table, shared by the text and HTML reports."""
    scale = format.UNITS[unit]

    def t(ns) -> str:
        return "-" if ns is None else f"{ns / scale:.2f}"

    error = whatif.get("replay_error")
    head = (f"measured {STEP_TIME_DEFINITION} {t(whatif['measured_step_ns'])} {unit}, replayed "
            f"{t(whatif['replayed_step_ns'])} {unit} (replay error median {100 * error:.1f}% over {whatif['steps']} "
            "steps)"
            if error is not None else "no steps to replay")
    rows = []
    for row in whatif["scenarios"]:
        share = (f"{100 * row['saving_ns'] / whatif['measured_step_ns']:.1f}%"
                 if row["applies"] and whatif["measured_step_ns"] else "-")
        gaining = ", ".join(map(str, row["ranks_gaining"][:8])) + (" ..." if len(row["ranks_gaining"]) > 8 else "")
        rows.append([TITLES.get(row["name"], row["name"]), t(row["predicted_step_ns"]), t(row["saving_ns"]), share,
                     (gaining or "-") if row["applies"] else "-", "" if row["applies"] else row["why"]])
    headers = ["Scenario", f"Predicted step ({unit})", f"Saving ({unit})", "Saving", "Ranks gaining", "Why not"]
    return head, headers, rows, list(whatif.get("notes", []))


def render(whatif: dict | None, unit: str = "ms") -> str:
    """The section's text ('' without a what-if)."""
    if not whatif:
        return ""
    head, headers, rows, notes = parts(whatif, unit)
    table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    width = max(len(line) for line in table.splitlines())
    lines = [format.banner("What-if", min(width, 150)), *format.wrapped(head), table]
    lines += [line for note in notes for line in format.wrapped(f"note: {note}")]
    return "\n".join(lines)
