"""Wording of a diff (``analyses/diff.py``): the text printed by ``distprof diff`` and an HTML
section with side-by-side bars. Everything here phrases numbers the analysis computed: the diff is
the typed :class:`~distprof.sections.diff.Diff` (diff.json's content), read by attribute, and the only
summary read here, the after run's for diff.html, is the typed :class:`~distprof.results.Summary`."""

from __future__ import annotations

import html as html_text
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from .. import names, outpaths
from ..typed import ABSENT
from . import format, svg, tables

if TYPE_CHECKING:
    from ..results import Summary
    from ..sections.diff import Change, Diff, MachineDifference, RunsStepTime, StepTime, UnitOfWork

DIFF_FILE = "diff.json"
DIFF_HTML = "diff.html"
UNITS = format.UNITS
MOVERS_SHOWN = 10
RANKS_SHOWN = 32
_UNIT_WORDS = {"kernel": "kernel", "user": "range", "phase": "phase"}
_REASONS = {"no_steps": "a run has no ProfileSteps", "step_counts_differ": "the step counts differ"}


def _known(value: float | None) -> bool:
    """A figure to print: not null, not NaN or infinite (``nan -> 667.11 +nan%`` said nothing)."""
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def _t(ns: float | None, unit: str, sign: bool = False) -> str:
    if not _known(ns):
        return "-"
    return format.fixed(ns / UNITS[unit], "+.2f" if sign else ".2f")


def _given(value: float | None) -> float | None:
    """A figure a diff carries only sometimes (typed.ABSENT where it has none) as None there."""
    return None if value is ABSENT else value


def _pct(relative: float | None) -> str:
    return format.fixed(100 * relative, "+.1f") + "%" if _known(relative) else "-"


def step_lines(step: StepTime, unit: str) -> list[str]:
    """Median step time before -> after, the change, its interval and the verdict."""
    head = f"{format.STEP_TIME_DEFINITION[0].upper()}{format.STEP_TIME_DEFINITION[1:]}: "
    if step.reason == "no_steps":
        return [head + "no ProfileSteps in " + ("either run" if not step.steps_before and not step.steps_after
                                                else "one run") + ": compare per unit of work below"]
    since = step.since_step
    line = (f"{head}{_t(step.before_median_ns, unit)} -> {_t(step.after_median_ns, unit)} {unit}"
            + (f" (after: its steps since step {since}, where it changed: its straggler turned slow)"
               if since is not None else "")
            + f", {_t(step.delta_ns, unit, True)} {unit} ({_pct(step.relative)})")
    counts = f"{step.steps_before} vs {step.steps_after} steps"
    if step.reason == "too_few_steps":
        return [line, f"  too few steps for an interval ({counts}; at least {step.min_steps} a run)"]
    if step.significant:
        verdict = "significant"
    elif step.reason == "below_min_change":
        verdict = (f"not significant: the interval excludes 0 but the change is under {100 * step.min_change:.0f}%, "
                   "within what two runs of one configuration differ by")
    elif step.reason == "machine":
        verdict = (f"not significant: the interval excludes 0 but the host counters explain "
                   f"{_t(_given(step.machine_change_ns), unit, True)} {unit} of it (the ranks' waits for a core, the "
                   "CPU the hypervisor stole): the machine, not the code, moved it")
    elif step.reason == "within_drift":
        verdict = (f"not significant: the interval excludes 0 but the change is within what one run's step time "
                   f"drifts by ({_t(_given(step.drift_ns), unit)} {unit}: the spread of its fifths' medians)")
    else:
        verdict = "not significant: the interval includes 0"
    smallest = (f"; the smallest change this pair can tell apart: {_t(step.smallest_ns, unit)} {unit}"
                if step.smallest_ns is not ABSENT else "")
    return [line, f"  {100 * step.level:.0f}% bootstrap interval of the change "
                  f"[{_t(step.ci_low_ns, unit, True)}, {_t(step.ci_high_ns, unit, True)}] {unit}: "
                  f"{verdict} ({counts}, {step.resamples} resamples, seed {step.seed}){smallest}"]


_FACTS = {"hosts": "hosts", "cores": "usable cores", "gpus": "GPUs", "load_per_core": "1-minute load per core"}
ONE_RUN = ("one run a side: the run-to-run noise is not measured{interval}; for a verdict between runs give several "
           "a side: distprof diff A1 A2 A3 --vs B1 B2 B3")
BEYOND_INTERVAL = " (two runs of one configuration on a shared machine can differ by more than this interval)"


def one_run_line(step: StepTime | None) -> str:
    """That run-to-run noise is not measured; "more than this interval" only where step_lines printed
    one (not without steps, nor with too few for an interval)."""
    shown = step is not None and step.reason not in ("no_steps", "too_few_steps")
    return ONE_RUN.format(interval=BEYOND_INTERVAL if shown else "")


def machine_lines(differences: list[MachineDifference]) -> list[str]:
    """A warning, before the verdict, when the two runs' machines differ where both record it."""
    if not differences:
        return []
    said = "; ".join(f"{_FACTS[d.fact]} {_listed(d.before)} before, {_listed(d.after)} after"
                     for d in differences)
    return [f"! the machine conditions differ ({said}): the change may be the machine, not the code"]


def _listed(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def runs_lines(runs: RunsStepTime | None, unit: str) -> list[str]:
    """Several runs a side: each side's runs and spread, the change and its two-level interval;
    one run a side: that the run-to-run noise is not measured."""
    if runs is None:
        return [one_run_line(None)]

    def side(name: str) -> str:
        s = getattr(runs, name)
        each = ", ".join(_t(x, unit) for x in s.runs_ns)
        spread = "" if s.spread is None else f", spread {100 * s.spread:.1f}%"
        return f"{name} {len(s.runs_ns)} runs, median {_t(s.median_ns, unit)} {unit} ({each}{spread})"

    line = (f"Between runs: {side('before')}; {side('after')}: change {_t(runs.delta_ns, unit, True)} {unit} "
            f"({_pct(runs.relative)})")
    if runs.reason == "too_few_steps":
        return [line + "; too few steps in a run for an interval"]
    verdict = ("significant" if runs.significant else
               f"not significant: under {100 * runs.min_change:.0f}%" if runs.reason == "below_min_change"
               else "not significant: the interval includes 0")
    return [line + f"; {100 * runs.level:.0f}% interval over runs then steps [{_t(runs.ci_low_ns, unit, True)}, "
                   f"{_t(runs.ci_high_ns, unit, True)}] {unit}: {verdict}"]


def verdict_lines(diff: Diff, unit: str) -> list[str]:
    """The step-time verdict: between runs (several a side, then the median runs' own) or of one run
    a side (and that run-to-run noise is not measured), then the unit of work."""
    own = step_lines(diff.step_time, unit)
    if diff.runs:
        own[0] = "Median runs (the detail below compares them): " + own[0]
        return runs_lines(diff.runs, unit) + own + unit_lines(diff.unit_of_work, unit)
    return own + [one_run_line(diff.step_time)] + unit_lines(diff.unit_of_work, unit)


def _cell(b: float | None, a: float | None, unit: str) -> str:
    if not _known(b) or not _known(a):
        return f"{_t(b, unit)} -> {_t(a, unit)}"
    return f"{_t(b, unit)} -> {_t(a, unit)} {'-' if not b else format.fixed(100 * (a - b) / b, '+.0f') + '%'}"


def _figures(diff: Diff) -> tuple:
    """The duration columns of the Distributed Summary, optional ones only where a side has them."""
    sides = [side for entry in diff.ranks for side in (entry.before, entry.after) if side]
    return tuple(c for c in format.summary_columns(sides) if c[0] != "overlap_ratio")


def ranks_table(diff: Diff, unit: str, width: int = format.TABLE_WIDTH) -> str:
    """One row per rank (and the across-ranks median and max): before -> after (relative)."""
    rows, figures = [], _figures(diff)
    for entry in diff.ranks[:RANKS_SHOWN]:
        b, a = entry.before or {}, entry.after or {}
        rows.append([entry.rank, f"{b.get('steps', '-')} -> {a.get('steps', '-')}",
                     *(_cell(b.get(k), a.get(k), unit) for k, _ in figures)])
    if len(diff.ranks) > 1:
        for stat in ("median", "max"):
            pairs = [getattr(getattr(diff.across_ranks, k, None), stat, None) for k, _ in figures]
            rows.append([stat, "", *(_cell(p and p.before, p and p.after, unit) for p in pairs)])
    headers = ["Rank", "Steps", *(format.column_title(k, title, unit) for k, title in figures)]
    return tables.fitted(rows, headers, keep=2, width=width)


def unit_lines(unit_of_work: UnitOfWork | None, unit: str) -> list[str]:
    """"after does 12% fewer of them per rank-step" (in all, without steps), and the time per unit
    when it applies. The count per rank-step, not per second of window: at 256 -> 256 calls over
    8 -> 8 steps the old rate read "31% fewer ... per window" because the window had grown (the
    wall time per unit says that)."""
    if unit_of_work is None:
        return ["Unit of work: none found in both runs (no repeated kernel, range or phase)"]
    u = unit_of_work
    word = _UNIT_WORDS[u.source]
    stepped = u.per_step.before is not None and u.per_step.after is not None
    rate = u.per_step.relative if stepped else u.count.relative
    more = ("the same number" if round(100 * rate) == 0 else f"{abs(100 * rate):.0f}% "
            f"{'more' if rate > 0 else 'fewer'}") if _known(rate) else "an unknown number"
    counts = f"{u.count.before} -> {u.count.after} calls"
    if stepped:
        counts += f", {u.per_step.before:.4g} -> {u.per_step.after:.4g} per rank-step"
    lines = [f"Unit of work: the most frequent {word}, {names.short_name(u.name, 60)!r} ({counts}): after does "
             f"{more} of them {'per rank-step' if stepped else 'in all (no steps to count them by)'}"]
    if u.applies:
        lines[0] += f"; figures per unit because {_REASONS[u.reason]}"
    per_unit: tuple[tuple[Change, str], ...] = (
        (u.window_per_unit_ns, "wall time"), (u.cost_per_unit_ns, f"{word} time"),
        (u.computation_per_unit_ns, "computation"), (u.communication_per_unit_ns, "communication"))
    for c, title in per_unit:
        lines.append(f"  {title} per unit: {_t(c.before, unit)} -> {_t(c.after, unit)} {unit} ({_pct(c.relative)})")
    return lines if u.applies else lines[:2]


MOVERS_PER = {"step": "per rank-step", "unit": "per unit of work", "window": "per window"}


def mover_headers(unit: str) -> list[str]:
    return ["What", "Name", "Metric", f"Before ({unit})", f"After ({unit})", "Delta", "Rel."]


def mover_rows(diff: Diff, unit: str) -> list[list[str]]:
    """The top movers' cells, the same in the text and in diff.html."""
    return [[m.category, names.short_name(m.name, 48), m.metric.removesuffix("_ns"), _t(m.before, unit),
             _t(m.after, unit), _t(m.delta, unit, True), _pct(m.relative)]
            for m in diff.movers[:MOVERS_SHOWN]]


def movers_table(diff: Diff, unit: str, width: int = format.TABLE_WIDTH) -> str:
    rows = mover_rows(diff, unit)
    if not rows:
        return "Top movers: nothing changed"
    table = tables.fitted(rows, mover_headers(unit), keep=2, width=width, shrink=(1,))
    return f"Top movers ({MOVERS_PER[diff.movers_per]}, largest absolute change first):\n{table}"


def finding_entries(diff: Diff, unit: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Findings resolved / new / kept (by code), and the checks whose verdict changed: (label, what) pairs,
    worded once for the text's lines and diff.html's lists; a label "" goes on the line alone."""
    found = []
    for group in ("resolved", "new", "kept"):
        for entry in getattr(diff.findings, group):
            side = entry.after if group != "resolved" else entry.before
            cost = f", cost {_t(side.cost_ns, unit)} {unit}" if side.cost_ns is not None else ""
            was = (f" (before: {entry.before.severity}, {_t(entry.before.cost_ns, unit)} {unit})"
                   if group == "kept" and entry.before.cost_ns is not None else "")
            rank = f" rank {', '.join(map(str, entry.ranks))}" if entry.ranks else ""
            found.append((group, f"{entry.code}{rank} ({side.severity}{cost}){was}"))
    changed = diff.checks_changed
    checks = []
    for check in changed[:RANKS_SHOWN]:
        device = "" if check.device is None else f" device {check.device}"
        checks.append(("check", f"{check.check} rank {check.rank}{device}: "
                                f"{check.before or 'absent'} -> {check.after or 'absent'}"))
    if len(changed) > RANKS_SHOWN:
        checks.append(("", f"... {len(changed) - RANKS_SHOWN} more checks changed (diff.json: checks_changed)"))
    return found, checks


def finding_lines(diff: Diff, unit: str) -> list[str]:
    """Findings resolved / new / kept (by code), and the checks whose verdict changed."""
    found, checks = finding_entries(diff, unit)
    lines = [f"  {label:<9} {what}" if label else f"  {what}" for label, what in found + checks]
    return ["Findings and checks:", *([] if found else ["  none in either run"]), *lines]


def warning_lines(diff: Diff) -> list[str]:
    out = []
    for w in diff.warnings:
        if w.code == "world_size_differs":
            out.append(f"! world sizes differ: {w.before} before, {w.after} after; ranks matched by number")
        elif w.code == "ranks_differ":
            out.append(f"! ranks only before: {w.only_before or 'none'}; only after: {w.only_after or 'none'}")
    return out


def render(diff: Diff, labels: tuple[str, str], unit: str = "ms", width: int | None = None) -> str:
    """The whole text of ``distprof diff``, in ``width`` columns (console.terminal_width: --width,
    COLUMNS or the terminal, else 100), names from the traces escaped."""
    from ..console import terminal_width, wrapped
    columns = terminal_width(width)
    diff, labels = names.printable_all(diff), tuple(names.printable(label) for label in labels)
    table = ranks_table(diff, unit, columns)
    ws, src = diff.world_size, diff.source
    prose = [f"before: {labels[0]} (world size {ws.before}, {src.before})",
             f"after:  {labels[1]} (world size {ws.after}, {src.after})",
             *warning_lines(diff), *machine_lines(diff.machine), "", *verdict_lines(diff, unit), "",
             "Distributed Summary per rank, before -> after and the relative change:"]
    parts = [format.banner("distprof diff", min(max(len(line) for line in table.splitlines()), columns)),
             *(line for text in prose for line in wrapped(text, columns)), table, "",
             movers_table(diff, unit, columns), "", *(line for text in finding_lines(diff, unit)
                                                      for line in wrapped(text, columns))]
    return "\n".join(parts) + "\n"


def write_json(diff: Diff, out: str | Path) -> Path:
    """OUT/diff.json, valid JSON: a number that is not finite is written as null (json.dumps wrote
    NaN, which JSON readers refuse)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(diff.to_json()), indent=1, allow_nan=False)
    return outpaths.write_text(out / DIFF_FILE, text + "\n")


def _json_safe(value: object) -> object:
    """``value`` with every NaN or infinite float as None (a diff nests a few levels deep)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


# -- HTML --------------------------------------------------------------------------------------

PARTS = ("computation only", "overlap", "exposed communication", "idle")
BEFORE_OPACITY = 0.45  # the before bar is the pale one of each rank's pair
STEP_COLOURS = {"before": "#999999", "after": "#0072B2"}


def _window_parts(figures: dict | None, scale: int) -> list[float]:
    """A rank's window split as report.html's bars split it (PARTS order), in ``scale`` units."""
    f = {k: (figures or {}).get(k) or 0 for k in ("computation_ns", "overlap_ns", "exposed_communication_ns",
                                                   "idle_ns")}
    return [(f["computation_ns"] - f["overlap_ns"]) / scale, f["overlap_ns"] / scale,
            f["exposed_communication_ns"] / scale, f["idle_ns"] / scale]


def rank_bars(diff: Diff, unit: str = "ms") -> str | None:
    """Per rank, the window split as in the report, before (upper, pale) and after (lower) side by side."""
    from . import html
    rows = [r for r in diff.ranks[:64] if r.before or r.after]
    if not rows:
        return None
    scale = UNITS[unit]
    split = [(_window_parts(r.before, scale), _window_parts(r.after, scale)) for r in rows]
    row_h = min(44.0, max(8.0, 880 / len(rows)))
    canvas = svg.Canvas(1100, int(row_h * len(rows) + 80))
    axes = svg.Axes(canvas, 110, 30, 970, row_h * len(rows))
    ticks = svg.nice_ticks(max(max(sum(b), sum(a)) for b, a in split))
    axes.x_range = (0.0, ticks[-1])
    axes.value_axis("x", ticks, f"time in the analysed window ({unit})")
    bar = row_h * 0.4
    for i, pair in enumerate(split):
        for k, (values, extra) in enumerate(zip(pair, (f' fill-opacity="{BEFORE_OPACITY}"', ""))):
            left, top = 0.0, axes.top + i * row_h + row_h * 0.08 + k * (bar + row_h * 0.04)
            for name, value in zip(PARTS, values):
                if value > 0:
                    canvas.rect(axes.x(left), top, axes.x(left + value) - axes.x(left), bar, html.COLOURS[name], extra)
                left += value
        centre = axes.top + (i + 0.5) * row_h
        canvas.text(axes.left - 5, centre, f"rank {rows[i].rank}", "end")
        if row_h >= 28:
            canvas.text(axes.left - 5, centre + 12, "before / after", "end", size=9)
    axes.frame()
    svg.legend(canvas, axes.left + 150, 16, [(name, html.COLOURS[name]) for name in PARTS])
    return canvas.svg()


def step_bars(step: StepTime, unit: str = "ms") -> str | None:
    """Each step's step time (median rank), before and after, with the medians over steps dashed."""
    if not step.before_steps_ns and not step.after_steps_ns:
        return None
    scale = UNITS[unit]
    series = {"before": (step.before_steps_ns, step.before_median_ns),
              "after": (step.after_steps_ns, step.after_median_ns)}
    values = {side: [v / scale for v in series[side][0]] for side in STEP_COLOURS}
    count = max(len(v) for v in values.values())
    canvas = svg.Canvas(1100, 300)
    axes = svg.Axes(canvas, 70, 30, 1010, 220)
    ticks = svg.nice_ticks(max(values["before"] + values["after"]))
    axes.x_range, axes.y_range = (-0.5, count - 0.5), (0.0, ticks[-1])
    axes.value_axis("y", ticks, f"{format.PER_STEP_DEFINITION} ({unit})")
    width = axes.width / count
    for side, shift in (("before", -0.2), ("after", 0.2)):
        colour = STEP_COLOURS[side]
        for i, v in enumerate(values[side]):
            canvas.rect(axes.x(i + shift) - 0.2 * width, axes.y(v), 0.4 * width, axes.y(0) - axes.y(v), colour)
        median = series[side][1]
        if median is not None:
            y = axes.y(median / scale)
            canvas.line(axes.left, y, axes.left + axes.width, y, colour, 1.5)
            canvas.parts[-1] = canvas.parts[-1].replace("/>", ' stroke-dasharray="6 4"/>')
    for i in svg.rank_positions(count):
        canvas.text(axes.x(i), axes.top + axes.height + 14, str(i), "middle")
    axes.title("x", "step")
    axes.frame()
    svg.legend(canvas, axes.left + 10, 16, [(f"{side} (dashed: median)", c) for side, c in STEP_COLOURS.items()])
    return canvas.svg()


def _e(value: object) -> str:
    return html_text.escape(str(value))


def _figure(drawing: str | None, caption: str) -> str:
    """A plot and its caption as report.html shows them; nothing when there is no plot."""
    return f"<figure>{drawing}<figcaption>{_e(caption)}</figcaption></figure>" if drawing else ""


def section_html(diff: Diff, labels: tuple[str, str], unit: str = "ms") -> str:
    """The diff as one HTML section (plots, then the movers table and the findings lists) for diff.html."""
    step = diff.step_time
    lines = verdict_lines(diff, unit)  # the between-runs verdict too, as the text has it
    body = [f'<h2>Diff: {_e(labels[0])} &rarr; {_e(labels[1])}</h2>',
            *(f'<p class="meta">{_e(w)}</p>' for w in warning_lines(diff)),
            "".join(f"<p>{_e(line)}</p>" for line in lines),
            _figure(step_bars(step, unit), f"The {format.PER_STEP_DEFINITION}, before (grey) and after (blue); "
                                      "dashed: the medians over steps."),
            _figure(rank_bars(diff, unit), "Each rank's window before (pale, upper bar) and after (lower bar): "
                                      "computation only, overlap, exposed communication, idle."),
            movers_html(diff, unit), findings_html(diff, unit)]
    return "".join(body)


def movers_html(diff: Diff, unit: str) -> str:
    """Top movers as a table (a preformatted block of the text's columns once)."""
    from .html import table_html
    rows = mover_rows(diff, unit)
    if not rows:
        return '<h3>Top movers</h3><p class="meta">nothing changed</p>'
    return (f'<h3>Top movers</h3><p class="meta">{MOVERS_PER[diff.movers_per]}, largest absolute change '
            f'first</p>{table_html(mover_headers(unit), rows, left=3)}')


def findings_html(diff: Diff, unit: str) -> str:
    """Findings resolved / new / kept and the checks whose verdict changed, as lists."""
    found, checks = finding_entries(diff, unit)

    def listed(entries: list[tuple[str, str]]) -> str:
        return "<ul>" + "".join(f"<li><b>{_e(label)}</b> {_e(what)}</li>" if label else f"<li>{_e(what)}</li>"
                                for label, what in entries) + "</ul>"

    return ("<h3>Findings</h3>" + (listed(found) if found else '<p class="meta">none in either run</p>')
            + (f"<h3>Checks whose verdict changed</h3>{listed(checks)}" if checks else ""))


def write_html(diff: Diff, labels: tuple[str, str], out: str | Path, unit: str = "ms",
               after: Summary | None = None) -> Path:
    """``OUT/diff.html``, styled like report.html: the diff and, with ``after``, that run's report below it,
    so one page answers both "what changed" and "where does the time go now". That report was once a second
    file, ``OUT/report.html``, beside diff.html: a report in a folder with no summary.json, said nowhere."""
    from . import html
    section = section_html(diff, labels, unit)
    if after is None:
        page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>distprof diff</title>"
                f"<style>{html.CSS}</style></head><body><main>{section}</main></body></html>\n")
    else:
        below = f'<p class="meta">Below: the report of the after run, {_e(labels[1])}.</p>'
        page = html.render(after, unit).replace("<main>", f"<main>{section}{below}", 1) \
            .replace("<title>distprof report</title>", "<title>distprof diff</title>", 1)
    path = Path(out) / DIFF_HTML
    path.parent.mkdir(parents=True, exist_ok=True)
    return outpaths.write_text(path, page)
