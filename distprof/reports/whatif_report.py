"""The What-if table: measured and replayed step time, then each scenario's predicted step,
saving and the ranks that gain (or why it does not apply)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ..names import cap_names, printable_all
from . import format, tables

if TYPE_CHECKING:
    from ..sections.whatif import WhatIf
    from ..typed import Record

R = TypeVar("R", bound="Record")



def capped(section: R) -> R:
    """A typed section with its names cut as summary.json and the reports keep them (names.cap_names):
    the same record where nothing is long."""
    return cap_names(section)


def printed(section: R) -> R:
    """A typed section with every string escaped for a terminal (names.printable_all), as a text report
    prints it: the same record where nothing needs an escape."""
    return printable_all(section)


def parts(whatif: WhatIf, unit: str = "ms") -> tuple[str, list[str], list[list[str]], list[str]]:
    """(headline, headers, rows, notes) of the What-if table, shared by the text and HTML reports."""
    scale = format.UNITS[unit]
    whatif = capped(whatif)

    def t(ns) -> str:
        return "-" if ns is None else format.fixed(ns / scale, ".2f")

    error = whatif.replay_error
    head = (f"measured {format.STEP_TIME_DEFINITION} {t(whatif.measured_step_ns)} {unit}, replayed "
            f"{t(whatif.replayed_step_ns)} {unit} (replay error median {format.fixed(100 * error, '.1f')}% over "
            f"{whatif.steps} steps)"
            if error is not None else "no steps to replay")
    rows = []
    for row in whatif.scenarios:
        share = (format.fixed(100 * row.saving_ns / whatif.measured_step_ns, ".1f") + "%"
                 if row.applies and whatif.measured_step_ns else "-")
        gaining = ", ".join(map(str, row.ranks_gaining[:8])) + (" ..." if len(row.ranks_gaining) > 8 else "")
        rows.append([format.SCENARIO_TITLES.get(row.name, row.name), t(row.predicted_step_ns), t(row.saving_ns), share,
                     (gaining or "-") if row.applies else "-", "" if row.applies else row.why])
    headers = ["Scenario", f"Predicted step ({unit})", f"Saving ({unit})", "Saving", "Ranks gaining", "Why not"]
    return head, headers, rows, list(whatif.notes)


def render(whatif: WhatIf | None, unit: str = "ms", width: int | None = None) -> str:
    """The section's text ('' without a what-if), ``width`` columns wide (None: the console's). When
    the table with its "Why not" column is wider, each reason is listed under the table instead,
    whole: a cut reason would not say why."""
    if whatif is None:
        return ""
    from .. import console
    width = console.terminal_width(width)
    head, headers, rows, notes = parts(printed(whatif), unit)
    table = tables.fitted(rows, headers, keep=1, width=width)
    reasons = []
    if tables.widest(table) > width or "\n\n" in table:  # split or cut: the reasons go below it
        table = tables.fitted([row[:-1] for row in rows], headers[:-1], keep=1, width=width, shrink=(4,))
        reasons = [f"  {row[0]}: {row[-1]}" for row in rows if row[-1]]
        reasons = (["", "Why not:"] if reasons else []) + reasons
    lines = [format.banner("What-if", min(tables.widest(table), width)), *format.wrapped(head, width), table]
    lines += [line for text in [*reasons, *(f"note: {note}" for note in notes)] for line in format.wrapped(text, width)]
    return "\n".join(lines)
