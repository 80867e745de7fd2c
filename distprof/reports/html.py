"""One self-contained ``report.html``: findings first, then the plots and the tables.

Plots are written as inline SVG by ``svg.py`` (text kept as text, the heat map a PNG data URI;
no script, no font or image fetched), so the file opens offline, in a mail attachment or a CI artifact, and stays small
(tens to a few hundred kB) where an interactive plotting library would add megabytes of
JavaScript to every file. Only the summary (``summary.json``) is read: the report can be rebuilt
at any time with ``distprof report OUT --html``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .. import outpaths
from ..names import cap_names
from ..ranges import rank_ranges
from ..results import Summary
from ..units import duration, phrase
from . import critical_path_report, format, live_text, svg
from . import findings as findings_report
from . import tables as text_tables
from .text import model_profile_section, profile_section
from .whatif_report import parts as whatif_parts

if TYPE_CHECKING:
    from ..sections.findings import Check, Finding
    from ..sections.skew import CollectiveRow, Skew
    from ..sections.tables import MergedModelRow, MergedOperatorTable, MergedSteps, ModelRow, OperatorTable
    from .tables import ByNameTable

REPORT_FILE = "report.html"
UNITS = format.UNITS
# colours of the stacked Distributed Summary bars (colour-blind safe, Okabe-Ito)
COLOURS = {"computation only": "#009E73", "overlap": "#56B4E9", "exposed communication": "#D55E00",
           "idle": "#BBBBBB"}
KERNEL_ROWS = 50

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde3;
padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.meta{color:#5b6570;font-size:13px}
.card{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:10px 14px;margin:8px 0}
.finding{border-left:5px solid #888}.sev-high,.sev-critical{border-left-color:#c0392b}
.sev-medium,.sev-warn,.sev-warning{border-left-color:#e67e22}.sev-low,.sev-info{border-left-color:#2e86c1}
.badge{display:inline-block;font-size:11px;font-weight:600;text-transform:uppercase;padding:1px 6px;
border-radius:3px;background:#eef1f4;margin-right:6px}
.finding p{margin:4px 0}.advice{color:#1e5631}.evidence{font-size:12px;color:#5b6570}
figure{margin:8px 0;background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:6px}
figure svg{width:100%;height:auto;display:block}figcaption{font-size:12px;color:#5b6570;padding:2px 6px}
.scroll{overflow-x:auto}.scroll.tall{max-height:560px;overflow-y:auto}
table{border-collapse:collapse;font-size:12.5px;background:#fff;margin:4px 0}
th,td{border:1px solid #e1e5ea;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f4;position:sticky;top:0;white-space:normal;vertical-align:bottom}td.l,th.l{text-align:left}
td.wrap{white-space:normal;min-width:14em;max-width:40em}
td.name{max-width:520px;overflow:hidden;text-overflow:ellipsis}
tr.stat td{background:#fafbfc;font-style:italic}
.PASS{color:#1e7d32;font-weight:600}.WARN{color:#c26a00;font-weight:600}.FAIL{color:#b71c1c;font-weight:600}
ul.warn{font-size:13px;color:#7a4b00}
"""
CSS = _CSS  # the page style, for other pages styled like report.html (diff.html)


# -- plots -------------------------------------------------------------------------------------

def _rank_labels(axes: svg.Axes, ranks: list[int], centre, axis: str = "y") -> None:
    """At most ~32 rank labels along the left (axis 'y', ``centre(i)`` = y) or bottom ('x') of a plot;
    along the bottom also no more than fit side by side (32 ranks in a 380-wide panel overlapped)."""
    chosen = svg.rank_positions(len(ranks))
    if axis == "x":
        kept = svg.thinned([centre(i) for i in chosen], [str(ranks[i]) for i in chosen])
        for i in (chosen[k] for k in kept):
            axes.canvas.text(centre(i), axes.top + axes.height + 14, str(ranks[i]), "middle")
        return
    for i in chosen:
        axes.canvas.text(axes.left - 5, centre(i) + 4, str(ranks[i]), "end")


def distributed_bars(summary: Summary, unit: str = "ms") -> str | None:
    """Per rank, the window split into computation only, overlap, exposed communication and idle."""
    rows = [r for r in summary.ranks if r.figures.window_ns]
    if not rows:
        return None
    scale = UNITS[unit]
    figures = [r.figures for r in rows]
    parts = {
        "computation only": [(f.computation_ns - f.overlap_ns) / scale for f in figures],
        "overlap": [f.overlap_ns / scale for f in figures],
        "exposed communication": [f.exposed_communication_ns / scale for f in figures],
        "idle": [f.idle_ns / scale for f in figures],
    }
    row_h = min(22.0, max(1.0, 880 / len(rows)))
    canvas = svg.Canvas(1100, int(row_h * len(rows) + 80))
    axes = svg.Axes(canvas, 70, 30, 1010, row_h * len(rows))
    ticks = svg.nice_ticks(max(sum(values) for values in zip(*parts.values())))
    axes.x_range = (0.0, ticks[-1])
    axes.value_axis("x", ticks, f"time in the analysed window ({unit})")
    bar = row_h * (0.75 if len(rows) < 200 else 1.0)
    for i in range(len(rows)):
        left, top = 0.0, axes.top + i * row_h + (row_h - bar) / 2
        for label, values in parts.items():
            if values[i] > 0:
                canvas.rect(axes.x(left), top, axes.x(left + values[i]) - axes.x(left), bar, COLOURS[label])
            left += values[i]
    _rank_labels(axes, [r.rank for r in rows], lambda i: axes.top + (i + 0.5) * row_h)
    axes.title("y", "rank")
    axes.frame()
    svg.legend(canvas, axes.left + 200, 16, list(COLOURS.items()))
    return canvas.svg()


def _collectives(skew: Skew) -> list[CollectiveRow]:
    return [c for c in skew.collectives if c.wait_ns_by_rank]


def _wait_grid(collectives: list[CollectiveRow], ranks: list[int], scale: int):
    """ranks x collectives waits in the unit (NaN where a rank has no entry)."""
    import numpy as np
    row_of = {r: i for i, r in enumerate(ranks)}
    grid = np.full((len(ranks), len(collectives)), np.nan)
    for j, collective in enumerate(collectives):  # at most skew.max_rows collectives are stored
        for rank, wait in collective.wait_ns_by_rank.items():
            grid[row_of[rank], j] = wait / scale
    return grid


def _heat_image(grid) -> str:
    """The grid as a PNG data URI, one pixel per cell (magma_r; transparent where NaN)."""
    import numpy as np
    top = np.nanmax(grid) if np.isfinite(grid).any() else 0.0
    fraction = np.nan_to_num(grid / top if top > 0 else grid * 0, nan=0.0)
    lut = np.array([(*svg.colour_of(i / 255), 255) for i in range(256)], dtype=np.uint8)
    pixels = lut[np.clip((fraction * 255).round().astype(int), 0, 255)]
    pixels[np.isnan(grid)] = 0
    return svg.png_data_uri([row.tobytes() for row in pixels], grid.shape[1])


def skew_heatmap(summary: Summary, unit: str = "ms") -> str | None:
    """Each rank's wait for the last arrival, per matched collective (columns in time order)."""
    collectives = sorted(_collectives(summary.skew), key=lambda c: c.index)
    ranks = sorted({r for c in collectives for r in c.wait_ns_by_rank})
    if not collectives or len(ranks) < 2:
        return None
    import numpy as np
    grid = _wait_grid(collectives, ranks, UNITS[unit])
    height = min(40 + 22 * len(ranks), 800)
    canvas = svg.Canvas(1100, height + 60)
    axes = svg.Axes(canvas, 70, 12, 900, height)
    axes.x_range, axes.y_range = (-0.5, len(collectives) - 0.5), (len(ranks) - 0.5, -0.5)
    canvas.parts.append(f'<image x="{axes.left}" y="{axes.top}" width="{axes.width}" height="{axes.height}" '
                        f'preserveAspectRatio="none" style="image-rendering:pixelated" '
                        f'href="{_heat_image(grid)}"/>')
    row_h = axes.height / len(ranks)
    _rank_labels(axes, ranks, lambda i: axes.top + (i + 0.5) * row_h)
    axes.title("y", "rank")
    step_of = [c.step for c in collectives]  # one tick where each step's collectives begin
    starts = [j for j in range(len(collectives)) if j == 0 or step_of[j] != step_of[j - 1]]
    texts = [f"step {step_of[j]}" if step_of[j] >= 0 else "-" for j in starts]
    for k in svg.thinned([axes.x(j) for j in starts], texts):
        canvas.text(axes.x(starts[k]), axes.top + axes.height + 14, texts[k], "middle")
    names = sorted({c.name for c in collectives})
    axes.title("x", "collective, in time order" + (f" ({', '.join(names[:4])})" if names else ""))
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 0.0
    _colour_bar(canvas, axes.left + axes.width + 20, axes.top, min(axes.height, 300), top,
                f"wait for the last rank ({unit})")
    return canvas.svg()


def _colour_bar(canvas: svg.Canvas, x: float, y: float, height: float, top: float, title: str) -> None:
    """A vertical magma_r scale from 0 (top) to ``top`` (bottom) with its ticks and title."""
    stops = "".join(f'<stop offset="{k / 10:.1f}" stop-color="rgb{svg.colour_of(k / 10)}"/>' for k in range(11))
    canvas.parts.append(f'<defs><linearGradient id="magma" x1="0" y1="0" x2="0" y2="1">{stops}'
                        f'</linearGradient></defs>')
    canvas.rect(x, y, 14, height, "url(#magma)")
    ticks = [t for t in (svg.nice_ticks(top, 5) if top > 0 else [0.0]) if t <= top or top == 0]
    for tick in ticks:
        ty = y + (tick / top if top > 0 else 0) * height
        canvas.line(x + 14, ty, x + 18, ty)
        canvas.text(x + 21, ty + 4, svg.label(tick))
    # the title, rotated, right of the widest tick label, in as many lines as the canvas's height needs
    # (a 2-rank heat map is 144 tall; "wait for the last rank (ms)" ran off its top)
    lines = svg.wrapped(title, canvas.height - 8)
    cx = x + 21 + max(svg.text_width(svg.label(t)) for t in ticks) + 14
    half = max(map(svg.text_width, lines)) / 2
    cy = min(max(y + height / 2, 4 + half), canvas.height - 4 - half)
    for k, line in enumerate(lines):
        canvas.text(cx + 13 * k, cy, line, "middle", extra=f' transform="rotate(-90 {cx + 13 * k:.1f} {cy:.1f})"')


def _step_band(canvas: svg.Canvas, steps: MergedSteps, scale: int, unit: str) -> None:
    """Left panel: per step, the fastest-to-slowest band and the median rank's line."""
    x = steps.step
    low, mid, high = ([v / scale for v in values] for values in (steps.min_ns, steps.median_ns, steps.max_ns))
    axes = svg.Axes(canvas, 60, 30, 560, 230)
    ticks = svg.nice_ticks(max(high))
    axes.x_range = (min(x) - 0.5, max(x) + 0.5)
    axes.y_range = (0.0, ticks[-1])
    axes.value_axis("y", ticks, f"step time ({unit})")
    band = [(axes.x(s), axes.y(v)) for s, v in zip(x, high)] + [(axes.x(s), axes.y(v)) for s, v in
                                                                 zip(reversed(x), reversed(low))]
    canvas.polyline(band, "none", fill="#56B4E9", width=0, close=True)
    canvas.parts[-1] = canvas.parts[-1].replace("/>", ' fill-opacity="0.35"/>')
    points = [(axes.x(s), axes.y(v)) for s, v in zip(x, mid)]
    canvas.polyline(points, "#0072B2")
    if len(points) <= 200:
        canvas.parts.append("".join(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="#0072B2"/>'
                                    for px, py in points))
    for s in svg.nice_ticks(max(x), 8) if max(x) > 0 else [0]:
        if min(x) <= s <= max(x) and float(s).is_integer():
            canvas.text(axes.x(s), axes.top + axes.height + 14, str(int(s)), "middle")
    axes.title("x", "step")
    axes.frame()
    svg.legend(canvas, axes.left + 10, 16, [("fastest to slowest rank", "#a9d8f3"),
                                            ("median rank (the step time)", "#0072B2")])


def _step_ranks(canvas: svg.Canvas, steps: MergedSteps, scale: int, unit: str) -> None:
    """Right panel: each rank's mean step time (bar) and slowest step (mark)."""
    ranks = steps.ranks
    mean = [0 if v is None else v / scale for v in steps.mean_ns_by_rank]
    worst = [0 if v is None else v / scale for v in steps.max_ns_by_rank]
    axes = svg.Axes(canvas, 700, 30, 380, 230)
    ticks = svg.nice_ticks(max(worst + mean))
    axes.x_range, axes.y_range = (-0.5, len(ranks) - 0.5), (0.0, ticks[-1])
    axes.value_axis("y", ticks, f"step time ({unit})")
    width = axes.width / len(ranks)
    for i, (m, w) in enumerate(zip(mean, worst)):
        canvas.rect(axes.x(i) - 0.4 * width, axes.y(m), 0.8 * width, axes.y(0) - axes.y(m), "#009E73")
        canvas.line(axes.x(i) - 0.4 * width, axes.y(w), axes.x(i) + 0.4 * width, axes.y(w), "#D55E00", 2)
    _rank_labels(axes, ranks, axes.x, "x")
    axes.title("x", "rank")
    axes.frame()
    svg.legend(canvas, axes.left + 80, 16, [("mean", "#009E73"), ("max", "#D55E00")])


def step_plot(summary: Summary, unit: str = "ms") -> str | None:
    """Step time across steps (min-max band and median over ranks) and per rank (mean, max)."""
    steps = summary.tables.merged.steps
    if not steps.step:
        return None
    canvas = svg.Canvas(1100, 310)
    _step_band(canvas, steps, UNITS[unit], unit)
    _step_ranks(canvas, steps, UNITS[unit], unit)
    return canvas.svg()


_RANK_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
MEMORY_PLOT_RANKS = 16


def memory_plot(summary: Summary) -> str | None:
    """Peak allocated memory per step, one line per rank (its headline device; the first
    MEMORY_PLOT_RANKS ranks): creep is a line that keeps rising, an outlier a line above the rest."""
    lines = []
    for rank in summary.ranks[:MEMORY_PLOT_RANKS]:
        profile = rank.profile
        device = next((d for d in profile.memory_devices if d.device == profile.memory_device), None)
        if device and device.steps:
            lines.append((rank.rank, device.steps, [v / 2 ** 20 for v in device.step_peak_allocated_bytes]))
    if not lines:
        return None
    canvas = svg.Canvas(1100, 310)
    axes = svg.Axes(canvas, 80, 30, 900, 230)
    steps = [s for _, xs, _ in lines for s in xs]
    ticks = svg.nice_ticks(max(v for _, _, ys in lines for v in ys))
    axes.x_range, axes.y_range = (min(steps) - 0.5, max(steps) + 0.5), (0.0, ticks[-1])
    axes.value_axis("y", ticks, "peak allocated (MiB)")
    colours = [_RANK_COLOURS[index % len(_RANK_COLOURS)] for index in range(len(lines))]
    for colour, (_, xs, ys) in zip(colours, lines):
        canvas.polyline([(axes.x(x), axes.y(y)) for x, y in zip(xs, ys)], colour)
    # each line's name in its colour, right of the plot, moved apart where lines end at one height
    # (ranks of one data-parallel job usually do: "rank 0" and "rank 1" were drawn over each other)
    ends = svg.spread([axes.y(ys[-1]) + 4 for _, _, ys in lines], axes.top + 4, axes.top + axes.height + 4)
    for colour, (rank, _, _), y in zip(colours, lines, ends):
        canvas.text(axes.left + axes.width + 6, y, f"rank {rank}", extra=f' fill="{colour}"')
    ticks = sorted(set(steps))
    for k in svg.thinned([axes.x(step) for step in ticks], [str(step) for step in ticks]):
        canvas.text(axes.x(ticks[k]), axes.top + axes.height + 14, str(ticks[k]), "middle")
    axes.title("x", "step")
    axes.frame()
    return canvas.svg()


# -- HTML pieces ------------------------------------------------------------------------------

def escaped(value) -> str:
    return html.escape("-" if value is None else str(value))


def table_html(headers: list[str], rows: list[list], left: int = 1, classes: list[str] | None = None) -> str:
    """An HTML table; the first ``left`` columns are left aligned (names)."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{escaped(h)}</th>' for i, h in enumerate(headers))
    body = []
    for k, row in enumerate(rows):
        css = f' class="{classes[k]}"' if classes and classes[k] else ""
        cells = []
        for i, cell in enumerate(row):
            text = escaped(cell)
            if i < left and len(text) > text_tables.NAME_WIDTH + 16:
                cells.append(f'<td class="l name" title="{text}">{escaped(str(cell)[:text_tables.NAME_WIDTH])}…</td>')
            elif len(text) > 48 and " " in text:  # prose (a what-if's why not): wraps, not one 600 px line
                cells.append(f'<td class="l wrap">{text}</td>')
            else:
                cells.append(f'<td class="{"l" if i < left else ""}">{text}</td>')
        body.append(f"<tr{css}>{''.join(cells)}</tr>")
    tall = " tall" if len(rows) > 25 else ""  # long tables scroll inside the page, header kept
    return (f'<div class="scroll{tall}"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _figure(svg: str | None, caption: str) -> str:
    if not svg:
        return ""
    return f"<figure>{svg}<figcaption>{escaped(caption)}</figcaption></figure>"


def evidence_text(finding: Finding, unit: str = "ms") -> str:
    """The numbers behind a finding in sentences (reports/findings.py words them), durations in ``unit``: the
    record's raw fields ("onset step: None; ... pattern: persistent") once ended every card."""
    return phrase(findings_report.evidence_sentences(finding), unit)


def findings_html(findings: list[Finding], unit: str = "ms") -> str:
    """The diagnosis' findings (summary.json ``findings``): severity, finding, message, advice, evidence."""
    if not findings:
        return '<p class="meta">No findings: nothing stood out above the thresholds.</p>'
    cards = []
    for item in findings:
        severity = str(item.severity)
        parts = [f'<span class="badge">{escaped(severity)}</span><b>{escaped(item.finding)}</b>']
        if item.ranks:
            parts.append(f' <span class="meta">rank(s) {escaped(", ".join(map(str, item.ranks[:16])))}</span>')
        saving = findings_report.saving(item, lambda ns: phrase(duration(ns), unit))
        parts.append(f' <span class="meta">{escaped(saving)}</span>')
        body = [f"<p>{''.join(parts)}</p>"]
        if item.message:  # the template: its durations in the report's unit
            body.append(f"<p>{escaped(phrase(item.message, unit))}</p>")
        if item.advice:
            body.append(f'<p class="advice">→ {escaped(item.advice)}</p>')
        shown = evidence_text(item, unit)
        if shown:
            body.append(f'<p class="evidence">{escaped(shown)}</p>')
        css = re.sub(r"[^a-z]", "", severity.lower())
        cards.append(f'<div class="card finding sev-{css}">{"".join(body)}</div>')
    return "".join(cards)


# the across-ranks statistics rows under the Distributed Summary table
_STATS = (("min", lambda stats: stats.min), ("median", lambda stats: stats.median),
          ("max", lambda stats: stats.max))


def distributed_table_html(summary: Summary, unit: str) -> str:
    columns = format.summary_columns(summary.ranks)
    keys = [key for key, _ in columns]
    titles = [title for _, title in columns]

    def value(key, v):
        return format.figure(key, v, unit)

    rows = [[r.rank, r.figures.steps, *(value(k, format.rank_figure(r, k)) for k in keys)]
            for r in summary.ranks]
    classes = [""] * len(rows)
    across = summary.across_ranks
    if len(rows) > 1 and across:
        stats = [format.across_figure(across, k) for k in keys]
        for stat, pick in _STATS:
            rows.append([stat, "", *(value(k, None if s is None else pick(s)) for k, s in zip(keys, stats))])
            classes.append("stat")
        rows.append(["max at rank", "", *("-" if s is None else s.max_rank for s in stats)])
        classes.append("stat")
    headers = ["Rank", "Steps", *(t if k == "overlap_ratio" else f"{t} ({unit})" for k, t in zip(keys, titles))]
    return table_html(headers, rows, classes=classes)


def collectives_html(summary: Summary, unit: str) -> str:
    """The Collectives table (every kind per group, node span and size), "" when there is none."""
    table = summary.collectives
    if not table.rows:
        return ""
    peak = table.peak_busbw_gbps
    note = (f"busbw as nccl-tests; % of the {peak:g} GB/s peak (hardware.peak_busbw_gbps)" if peak
            else "busbw as nccl-tests; set hardware.peak_busbw_gbps for % of peak")
    cells = [format.collective_cells(r, unit, bool(peak)) for r in table.rows]
    return ("<h2>Collectives</h2>" + table_html(format.collective_headers(unit, bool(peak)), cells, left=4)
            + f'<p class="meta">Count: matched/all where some were seen on one rank only (their transfer is their '
              f'whole duration, an upper bound). Wait share: sync wait / duration. {escaped(note)}</p>')


def alltoall_html(summary: Summary) -> str:
    """The All-to-all table (bytes per rank of each all-to-all group), "" when there is none."""
    from . import alltoall_report
    groups = summary.alltoall or []
    if not groups:
        return ""
    return ("<h2>All-to-all</h2>" + table_html(alltoall_report.HEADERS, alltoall_report.cells(groups), left=1)
            + f'<p class="meta">{escaped(alltoall_report.note(groups))}</p>')


def whatif_html(summary: Summary, unit: str) -> str:
    """The What-if table (what each fix would save, replayed), "" without one."""
    what = summary.whatif
    if what is None:
        return ""
    head, headers, rows, notes = whatif_parts(what, unit)
    return ("<h2>What-if</h2>" + f'<p class="meta">{escaped(head)}</p>' + table_html(headers, rows, left=1)
            + "".join(f'<p class="meta">{escaped(note)}</p>' for note in notes))


def checks_html(checks: list[Check]) -> str:
    if not checks:
        return ""
    rows = []
    for c in checks:
        status = str(c.status)
        # the message as summary.json words it: durations in readable units (phrase leaves a phrased one be)
        rows.append(f'<tr><td class="l">{escaped(c.check)}</td><td>{escaped(c.rank)}</td>'
                    f'<td class="{escaped(status)}">{escaped(status)}</td>'
                    f'<td class="l wrap">{escaped(phrase(c.message))}</td>'
                    f'<td class="l wrap">{escaped(c.advice or "")}</td></tr>')
    head = "".join(f'<th class="l">{h}</th>' for h in ("Check", "Rank", "Status", "Message", "Advice"))
    return f'<h2>Checks</h2><div class="scroll"><table><thead><tr>{head}</tr></thead>' \
           f'<tbody>{"".join(rows)}</tbody></table></div>'


def _five(row: ModelRow | MergedModelRow, side: str, scale: int) -> list[str]:
    *times, ratio = text_tables.side_figures(row, side)
    return [text_tables.time_cell(value, scale) for value in times] + [text_tables.ratio_cell(ratio)]


def summary_tables_html(summary: Summary, unit: str, sorted_by: str = "cpu_total") -> str:
    """Device, Overview, Model, Phase, Kernel, Memory Manipulation and UserDefined tables (all ranks)."""
    tables = text_tables.select(summary)
    if not tables:
        return ""
    scale = UNITS[unit]
    ranks = summary.tables.ranks
    merged = len(ranks) > 1
    out = ["<h2>Summary tables" + (" (all ranks)" if merged else "") + f'</h2><p class="meta">time unit {unit}</p>']
    if tables.device:
        if merged:
            pct = text_tables.ratio_cell
            rows = [[d.device, pct(d.mean), f"{pct(d.min)} (rank {d.min_rank})",
                     f"{pct(d.max)} (rank {d.max_rank})"] for d in tables.device]
            headers = ["Device", "Utilization (%) mean", "min", "max"]
        else:
            rows = [[d.device, text_tables.ratio_cell(d.utilization)] for d in tables.device]
            headers = ["Device", "Utilization (%)"]
        out.append("<h3>Device Summary</h3>" + table_html(headers, rows))
    if tables.overview:
        rows = [[r.type, r.side.upper(), r.calls, text_tables.time_cell(r.total_ns, scale),
                 text_tables.ratio_cell(r.ratio)] for r in tables.overview]
        out.append("<h3>Overview Summary</h3>" + table_html(["Event type", "Side", "Calls", f"Time ({unit}, union)",
                                                          "Ratio (%)"], rows, left=2))
    if tables.model:
        has_gpu = any(r.gpu_total_ns is not None for r in tables.model)
        headers = ["Name", "Calls", "CPU total", "avg", "max", "min", "ratio (%)"]
        if has_gpu:
            headers += ["GPU total", "avg", "max", "min", "ratio (%)"]
        if merged:
            headers.append("max CPU at rank")
        rows = []
        for r in tables.model:
            row = [r.name, r.calls, *_five(r, "cpu", scale)]
            if has_gpu:
                row += _five(r, "gpu", scale)
            if merged:
                row.append(text_tables.max_rank_cell(r.cpu_total_ns_by_rank, ranks))
            rows.append(row)
        out.append("<h3>Model Summary</h3>" + table_html(headers, rows))
    out.append(phase_html(tables.phase, scale, sorted_by, merged, unit))
    for table, title, labels, cells in ((tables.kernel, "Kernel Summary", ["Name"], lambda r: [r.name]),
                                        (tables.memory, "Memory Manipulation Summary", ["Kind", "Name"],
                                         lambda r: [r.kind, r.name]),
                                        (tables.user, "UserDefined Summary", ["Name"], lambda r: [r.name])):
        out.append(_by_name_html(table, title, labels, cells, scale, sorted_by, merged))
    out.append(operator_html(tables.operator, scale, sorted_by, merged))
    return "".join(out)


def _by_name_html(table: ByNameTable, title: str, labels: list[str], cells, scale: int, sorted_by: str,
                  merged: bool) -> str:
    """A Kernel, Memory Manipulation or UserDefined table: ``labels`` the titles of its name columns,
    ``cells(row)`` their values; "" without rows."""
    if not table.rows:
        return ""
    rows_in = text_tables.sort_rows(table.rows, sorted_by)
    headers = labels + ["Calls", "Total", "Avg", "Max", "Min", "Ratio (%)"]
    if merged:
        headers += ["Ranks", "Max at rank"]
    rows = []
    for r in rows_in[:KERNEL_ROWS]:
        times = (text_tables.time_cell(value, scale) for value in (r.total_ns, r.avg_ns, r.max_ns, r.min_ns))
        row = cells(r) + [r.calls, *times, text_tables.ratio_cell(r.ratio)]
        if merged:
            row += [r.ranks, r.max_rank]
        rows.append(row)
    note = f'<p class="meta">{len(rows_in) - KERNEL_ROWS} more rows in summary.json</p>' \
        if len(rows_in) > KERNEL_ROWS else ""
    return f"<h3>{title}</h3>" + table_html(headers, rows, left=len(labels)) + note


def phase_html(table: ByNameTable | None, scale: int, sorted_by: str, merged: bool, unit: str) -> str:
    """The Phase Summary (every phase name its own row, as the text report's); "" without rows (or
    in a summary.json older than it)."""
    if not table or not table.rows:
        return ""
    rows_in = text_tables.sort_rows(table.rows, sorted_by)
    headers = ["Name", "Calls", "Total", "Avg", "Max", "Min", "Ratio (%)"]
    headers += ["Ranks", "Per rank min", "median", "max"] if merged else []
    rows = [[r.name, *text_tables.phase_cells(r, scale, merged)] for r in rows_in[:KERNEL_ROWS]]
    note = f'<p class="meta">{len(rows_in) - KERNEL_ROWS} more rows in summary.json</p>' \
        if len(rows_in) > KERNEL_ROWS else ""
    said = text_tables.PHASE_NOTE.format(unit=unit) + (text_tables.PHASE_MERGED_NOTE if merged else "")
    return f'<h3>Phase Summary</h3><p class="meta">{escaped(said)}</p>' + table_html(headers, rows) + note


def operator_html(table: OperatorTable | MergedOperatorTable | None, scale: int, sorted_by: str,
                  merged: bool) -> str:
    """The Operator Summary (CPU total/self/avg/max/min, GPU time launched under the operator)."""
    if table is None or not table.rows:
        return ""
    rows_in = text_tables.sort_operator_rows(table.rows, sorted_by)
    has_gpu = any(r.gpu_total_ns is not None for r in rows_in)
    headers = ["Name", "Calls", "CPU total", "self", "avg", "max", "min", "Ratio (%)"]
    headers += ["GPU total", "avg"] if has_gpu else []
    headers += ["Ranks", "Max at rank"] if merged else []
    rows = []
    for r in rows_in[:KERNEL_ROWS]:
        times = (text_tables.time_cell(value, scale) for value in (r.cpu_total_ns, r.cpu_self_ns, r.cpu_avg_ns,
                                                               r.cpu_max_ns, r.cpu_min_ns))
        row = [r.name, r.calls, *times, text_tables.ratio_cell(r.ratio)]
        row += [text_tables.time_cell(r.gpu_total_ns, scale), text_tables.time_cell(r.gpu_avg_ns, scale)] \
            if has_gpu else []
        row += [r.ranks, r.max_rank] if merged else []
        rows.append(row)
    note = f'<p class="meta">{len(rows_in) - KERNEL_ROWS} more rows in summary.json</p>' \
        if len(rows_in) > KERNEL_ROWS else ""
    return ("<h3>Operator Summary</h3><p class=\"meta\">self = own time minus the child operators'; ratio = CPU "
            "total / window (nested operators overlap); GPU = kernels launched under the operator</p>"
            + table_html(headers, rows) + note)


def profile_html(summary: Summary) -> str:
    """FLOPs and memory per rank, as the text report's section."""
    out = []
    for title, section in (("FLOPs and Memory", profile_section(summary)),
                           ("Model FLOPs Profile", model_profile_section(summary))):
        if section:
            out.append(f"<h2>{title}</h2><pre>" + escaped("\n".join(section[0].splitlines()[1:])) + "</pre>")
            if title == "FLOPs and Memory" and memory_plot(summary):
                out.append(_figure(memory_plot(summary), "Peak allocated memory per step and rank (the rank's "
                                                         "GPU with the largest peak, else its CPU)."))
    return "".join(out)


def _capped(summary: Summary) -> Summary:
    """``summary`` with its names cut as summary.json stores them (names.cap_names, walked over the
    record): one made in this process, or read from a file older than the cap, may hold full ones. The
    same summary when nothing needs cutting."""
    return cap_names(summary)


def render(summary: Summary, unit: str = "ms", sorted_by: str = "cpu_total") -> str:
    """The whole report as one HTML string (names cut: summaries older than the cap hold full ones)."""
    summary = _capped(findings_report.worded(summary))
    head = (f"<h1>distprof report</h1><p class=\"meta\">world size {escaped(summary.world_size)} · source "
            f"{escaped(summary.source)} · {len(summary.ranks)} rank(s) with data · time unit {unit}</p>")
    if summary.missing_ranks:
        missing = summary.missing_ranks
        head += f'<p class="meta">{len(missing)} missing rank(s): {escaped(rank_ranges(missing))}</p>'
    body = [head, "<h2>Findings</h2>", findings_html(summary.findings, unit)]
    body += ["<h2>Distributed Summary</h2>",
             _figure(distributed_bars(summary, unit),
                     "Each rank's analysed window: computation that nothing hides (green), computation overlapped "
                     "by communication (blue), communication nobody hid (red), idle (grey)."),
             distributed_table_html(summary, unit)]
    body.append(collectives_html(summary, unit))
    body.append(alltoall_html(summary))
    body.append(whatif_html(summary, unit))
    body.append(profile_html(summary))
    body.append(critical_path_report.html_section(summary.critical_path, unit, table_html))
    body.append(live_text.html_section(summary.live, unit))
    heatmap = skew_heatmap(summary, unit)
    if heatmap:
        shown, total = summary.skew.collectives_shown, summary.skew.collectives_total
        count = f" ({shown} of {total} matched collectives, those with the largest skew)" \
            if shown and total and shown < total else ""
        body += ["<h2>Arrival skew</h2>",
                 _figure(heatmap, "Per collective and rank: the time from this rank's arrival to the last "
                                  f"rank's arrival{count}. A row that stays light is the rank the others wait for.")]
    steps = step_plot(summary, unit)
    if steps:
        body += ["<h2>Step time</h2>",
                 _figure(steps, "Left: ProfileStep duration per step (band: fastest to slowest rank; line: "
                                f"median rank, the {format.PER_STEP_DEFINITION}). Right: each rank's own mean step "
                                "(bar) and its slowest step (mark).")]
    body.append(checks_html(summary.checks))
    body.append(summary_tables_html(summary, unit, sorted_by))
    if summary.warnings:
        body.append("<h2>Warnings</h2><ul class=\"warn\">" +
                    "".join(f"<li>{escaped(w)}</li>" for w in format.grouped_warnings(summary.warnings)) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>distprof report</title><style>{_CSS}</style></head><body><main>"
            + "".join(body) + "</main></body></html>\n")


def write_report(summary: Summary, out: str | Path, unit: str = "ms", sorted_by: str = "cpu_total") -> Path:
    """Write ``report.html`` into a directory (or to the given ``.html`` path); returns the path."""
    out = Path(out)
    path = out if out.suffix in (".html", ".htm") else out / REPORT_FILE
    return outpaths.write_text(path, render(summary, unit, sorted_by))
