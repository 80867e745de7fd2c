"""The What-if table: measured and replayed step time, then each scenario's predicted step,
saving and the ranks that gain (or why it does not apply)."""

from __future__ import annotations

from ..analyses.steptime import STEP_TIME_DEFINITION
from . import format, tables

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


def render(whatif: dict | None, unit: str = "ms", width: int | None = None) -> str:
    """The section's text ('' without a what-if), ``width`` columns wide (None: the console's). When
    the table with its "Why not" column is wider, each reason is listed under the table instead,
    whole: a cut reason would not say why."""
    if not whatif:
        return ""
    from .. import console
    from ..names import printable_all
    width = console.terminal_width(width)
    head, headers, rows, notes = parts(printable_all(whatif), unit)
    table = tables.fitted(rows, headers, keep=1, width=width)
    reasons = []
    if tables.widest(table) > width or "\n\n" in table:  # split or cut: the reasons go below it
        table = tables.fitted([row[:-1] for row in rows], headers[:-1], keep=1, width=width, shrink=(4,))
        reasons = [f"  {row[0]}: {row[-1]}" for row in rows if row[-1]]
        reasons = (["", "Why not:"] if reasons else []) + reasons
    lines = [format.banner("What-if", min(tables.widest(table), width)), *format.wrapped(head, width), table]
    lines += [line for text in [*reasons, *(f"note: {note}" for note in notes)] for line in format.wrapped(text, width)]
    return "\n".join(lines)
