"""The live view's wording: the block printed per window, the ALERT lines, and the Live section
of the text report. Every printed line starts with ``[distprof live] steps A-B``; one wider than the
console goes on in indented lines (:func:`fitted`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..typed import ABSENT

if TYPE_CHECKING:
    from ..sections.machine import Live, LiveAlert, LiveWindow, WindowRank

PREFIX = "[distprof live]"


def _ms(value) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def _per_step(row: WindowRank, value: int) -> float:
    return value / max(row.steps, 1)


def _straggler(window: LiveWindow) -> str:
    straggler = window.straggler
    if not straggler:
        return "no straggler"
    cost, share = straggler.cost_ns, straggler.cost_share
    priced = (f"costs {_ms(cost)} ms/step" + (f" ({100 * share:.0f}% of the step)" if share is not None else "")
              if cost is not None else "cost not known")
    last = f"last in {straggler.late_in} of {straggler.of} collectives"
    return f"straggler rank {straggler.rank} ({priced}; {last})"


def window_lines(window: LiveWindow) -> list[str]:
    """One compact block: the job line, then one line per rank (per step, in ms)."""
    first, last = window.steps
    head = f"{PREFIX} steps {first}-{last}"
    spread = window.spread
    lines = [f"{head}: step {_ms(window.step_time_ns)} ms · spread {_ms(spread.step_ns)} ms "
             f"(slowest rank {spread.slowest_rank}) · {_straggler(window)}"]
    for row in window.ranks:  # one per rank
        ratio = "-" if row.overlap_ratio is None else f"{100 * row.overlap_ratio:.0f}%"
        lines.append(f"{head} rank {row.rank}: step {_ms(row.step_ns)} · comm "
                     f"{_ms(_per_step(row, row.communication_ns))} · comp {_ms(_per_step(row, row.computation_ns))}"
                     f" · overlap {_ms(_per_step(row, row.overlap_ns))} ({ratio}) · exposed comm "
                     f"{_ms(_per_step(row, row.exposed_communication_ns))} ms/step")
    for row in window.behind:
        at = "no step committed" if row.committed_step is None else f"at step {row.committed_step}"
        lines.append(f"{head} rank {row.rank}: behind ({at}), left out of this window")
    return lines


SEPARATOR = " · "
HANG = "    "  # a continuation line's indent: under its line's prefix, never mistaken for a new line


def fitted(lines: list[str], width: int) -> list[str]:
    """The lines within ``width`` columns: a longer one broken between its `` · `` fields (a field is
    not cut in two; one longer than a line is wrapped), each continuation indented. The view's lines
    ran to 165 characters whatever the terminal, and a terminal broke them anywhere."""
    import textwrap
    out = []
    for line in lines:  # a few per rank and window
        fields = line.split(SEPARATOR) if len(line) > width else [line]
        pieces = [fields[0]]
        for field in fields[1:]:
            if len(pieces[-1]) + len(SEPARATOR) + len(field) <= width:
                pieces[-1] += SEPARATOR + field
            else:
                pieces.append(HANG + field)
        out += [part for piece in pieces for part in
                textwrap.wrap(piece, width, subsequent_indent=HANG, break_on_hyphens=False) or [piece]]
    return out


def lost_node_line(window: tuple[int, int] | list[int], node: str, ranks: list[int]) -> str:
    """A node whose sender's connection ended without its stop: its ranks are named behind from here."""
    shown = ", ".join(map(str, ranks)) or "none delivered yet"
    return (f"{PREFIX} steps {window[0]}-{window[1]}: node {node} stopped sending (ranks {shown}); "
            "its ranks are named behind, the view goes on")


def skipped_line(window: tuple[int, int]) -> str:
    return f"{PREFIX} steps {window[0]}-{window[1]}: skipped (the live view fell behind the job)"


def alert_line(alert: LiveAlert) -> str:
    """The ALERT line of an alert (of the view, or as summary.json's ``live`` keeps it)."""
    def known(value):  # a field the alert does not carry reads as None
        return None if value is ABSENT else value
    return _alert_words(alert.steps, alert.code, alert.rank, cost_ns=known(alert.cost_ns),
                        cost_share=known(alert.cost_share), windows=alert.windows, value_ns=alert.value_ns,
                        baseline_ns=alert.baseline_ns, noise_ns=alert.noise_ns)


def _alert_words(steps, code: str, rank: int, cost_ns=None, cost_share=None, windows=None, value_ns=None,
                 baseline_ns=None, noise_ns=None) -> str:
    """The ALERT line from an alert's parts (the fields of summary.json's ``live.alerts`` rows)."""
    first, last = steps
    head = f"{PREFIX} ALERT steps {first}-{last}:"
    if code == "straggler":
        cost = "cost not known" if cost_ns is None else \
            f"costs {_ms(cost_ns)} ms/step" + ("" if cost_share is None else f" ({100 * cost_share:.0f}%)")
        return f"{head} straggler rank {rank} ({cost}; named in {windows} windows in a row)"
    if code == "straggler_recovered":
        return f"{head} straggler rank {rank} recovered (no longer named)"
    what = {"step_time_jump": "step time", "exposed_communication_jump": "exposed communication"}[code]
    return (f"{head} rank {rank} {what} jumped to {_ms(value_ns)} ms/step from {_ms(baseline_ns)} "
            f"(noise {_ms(noise_ns)})")


def section(live: Live | None, width: int | None = None) -> list[str]:
    """The text report's Live section: windows seen, the straggler over time, the alerts; lines
    wrapped at ``width`` (None: as they are; dozens of windows make lines of any length). ``live``:
    summary.json's ``live``, None or ABSENT (no live view)."""
    if not live or not live.windows:
        return []
    windows = live.windows
    named = [f"{w.steps[0]}-{w.steps[1]}: " + (f"rank {w.straggler.rank}" if w.straggler else "-")
             for w in windows]
    lines = ["-------Live view-------",
             f"{len(windows)} window(s) of {live.every_steps} steps; step time (ms) per window: "
             + " ".join(_ms(w.step_time_ns) for w in windows),
             "straggler per window: " + ", ".join(named)]
    lines += ["  " + alert_line(alert).removeprefix(PREFIX + " ")
              for alert in live.alerts] or ["no alerts"]
    if live.ended:  # the view died before the stop: what it did not see is not in these windows
        lines.append(f"the live view ended early ({live.ended}): no window after steps {windows[-1].steps[0]}-"
                     f"{windows[-1].steps[1]}")
    if width:
        from ..console import wrapped
        lines = [part for line in lines for part in wrapped(line, width)]
    return ["\n".join(lines)]


def html_section(live: Live | None, unit: str = "ms") -> str:
    """The live windows over time in report.html: each rank's step time per window (lines), the
    job's step time (bold) and the windows an alert fired in (marks on top); '' without windows
    (``live`` None or ABSENT: no live view)."""
    from . import format, svg
    windows = live.windows if live else []
    if not windows:
        return ""
    scale = format.UNITS[unit]
    ends = [w.steps[1] for w in windows]
    series: dict = {}
    for window in windows:  # one per window: dozens
        for row in window.ranks:
            series.setdefault(row.rank, []).append((window.steps[1], row.step_ns))
    values = [ns for points in series.values() for _, ns in points if ns is not None]
    values += [w.step_time_ns for w in windows if w.step_time_ns is not None]
    canvas = svg.Canvas(1100, 300)
    axes = svg.Axes(canvas, 70, 30, 1000, 220)
    ticks = svg.nice_ticks(max(values, default=0) / scale or 1)
    axes.x_range, axes.y_range = (min(ends) - 0.5, max(ends) + 0.5), (0.0, ticks[-1])
    axes.value_axis("y", ticks, f"step time ({unit})")
    for i, points in enumerate(series[rank] for rank in sorted(series)):  # one line per rank
        shown = [(axes.x(s), axes.y(ns / scale)) for s, ns in points if ns is not None]
        red, green, blue = svg.colour_of(0.2 + 0.6 * i / max(len(series) - 1, 1))
        canvas.polyline(shown, f"#{red:02x}{green:02x}{blue:02x}", width=1)
    job = [(axes.x(w.steps[1]), axes.y(w.step_time_ns / scale)) for w in windows if w.step_time_ns]
    canvas.polyline(job, "#0072B2", width=2.5)
    for alert in live.alerts:  # a handful
        x = axes.x(alert.steps[1])
        canvas.line(x, axes.top, x, axes.top + axes.height, "#D55E00", 1.5)
        canvas.text(x + 3, axes.top + 10, f"{alert.code} {alert.rank}".strip(), size=10)
    for step in ends[:: max(1, len(ends) // 12)]:
        canvas.text(axes.x(step), axes.top + axes.height + 14, str(step), "middle")
    axes.title("x", "last step of the window")
    axes.frame()
    svg.legend(canvas, axes.left + 10, 16, [("job step time", "#0072B2"), ("each rank", "#999999"),
                                            ("alert", "#D55E00")])
    return (f"<h2>Live view</h2><p class=\"meta\">every {live.every_steps} steps, {len(windows)} windows, "
            f"{len(live.alerts)} alerts</p>{canvas.svg()}")
