"""The Critical path section ("what sets the step"): shares of the path by rank, kind and phase and
its top contributors, for the text report; the same plus one band per step for the HTML report."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from msgspec.structs import asdict

from . import format, tables
from .whatif_report import capped, printed

if TYPE_CHECKING:
    from ..sections.whatif import CriticalPath, PathStep

TITLE = "Critical path (what sets the step)"
SHOWN = 6  # shares listed per line
KIND_COLOURS = {"compute": "#009E73", "communication": "#D55E00", "host": "#E69F00", "wait": "#CC79A7",
                "idle": "#BBBBBB"}
BAND_STEPS = 40  # steps drawn as bands in the HTML report
RANK_COLOURS = ("#0072B2", "#F0E442", "#CC79A7", "#56B4E9", "#1d232b", "#E69F00")  # underline: which rank


def _shares(shares: dict, label: str = "") -> str:
    items = list(shares.items())
    text = ", ".join(f"{label}{'(no phase)' if key == '' else key} {100 * value:.0f}%"  # rank keys are ints
                     for key, value in items[:SHOWN])
    return text + (f", ... ({len(items) - SHOWN} more)" if len(items) > SHOWN else "")


def _by_rank(path: CriticalPath, steps: int) -> str:
    """The shares by rank, worded by ``rank_reading``: with no straggler named, the rank each walk
    starts from holds the path's tail only because the walk starts there (a tie-break among
    balanced ranks), so the line says that instead of listing it first as if it were late."""
    if path.rank_reading != "no_straggler":
        return "by rank: " + _shares(path.share_by_rank, "rank ")
    walked = path.walked_from
    starts = ", ".join(f"rank {rank} in {count}" for rank, count in list(walked.items())[:SHOWN])
    starts += ", ..." if len(walked) > SHOWN else ""
    waited = _shares(path.share_by_rank_waited_for, "rank ") or "none"
    return (f"by rank: no straggler named; {100 * path.share_walked_rank:.0f}% on the rank each walk starts "
            "from "
            f"({starts} of {steps} steps: by construction, not a culprit); waited for: {waited}")


def parts(path: CriticalPath, unit: str = "ms") -> tuple[list[str], list[str], list[list[str]]]:
    """(lines, headers, rows of the top contributors), shared by the text and HTML reports (``path`` with
    its names cut: ``capped``)."""
    scale = format.UNITS[unit]
    steps = path.steps
    closest = sum(step.rank_rule != "median" for step in steps)
    lines = [f"path over {len(steps)} steps, {path.length_ns / scale:.2f} {unit} in all, walked back from "
             "the "
             "step end of the median rank" + (f" (the rank closest to the median in {closest} steps: even rank "
                                               "count)" if closest else ""),
             _by_rank(path, len(steps)),
             "by kind: " + _shares(path.share_by_kind),
             "by phase: " + _shares(path.share_by_phase)]
    # the scenarios by name, in ScenarioShares' field order (summary.json's order)
    acts = {format.SCENARIO_TITLES.get(name, name): share for name, share in asdict(path.scenario_shares).items()
            if share is not None}
    if acts:
        lines.append("what-if scenarios act on: " + ", ".join(f"{name} {100 * share:.0f}%"
                                                           for name, share in acts.items()) + " of the path")
    dominant = path.dominant
    if dominant:
        lines.append(f"{dominant.by} {dominant.name} holds {100 * dominant.share:.0f}% of the path")
    rows = [[top.name, top.kind, f"{top.ns / scale:.2f}", f"{100 * top.share:.1f}%",
             ", ".join(map(str, top.ranks[:8])) + (" ..." if len(top.ranks) > 8 else "")]
            for top in path.top]
    return lines, ["On the path", "Kind", f"Time ({unit})", "Share", "Ranks"], rows


def render(path: CriticalPath | None, unit: str = "ms", width: int | None = None) -> str:
    """The text section ('' without a critical path), ``width`` columns wide (None: the console's)."""
    if path is None or not path.steps:
        return ""
    from .. import console
    width = console.terminal_width(width)
    lines, headers, rows = parts(capped(printed(path)), unit)
    table = tables.fitted(rows, headers, keep=1, width=width, shrink=(0, 4))
    wide = min(max(tables.widest(table), len(TITLE) + 20), width)
    return "\n".join([format.banner(TITLE, wide), *(part for line in lines for part in format.wrapped(line, width)),
                      table])


def _band(step: PathStep, unit: str) -> str:
    """One step's path as a bar of coloured pieces (width = share of the step), each titled."""
    scale = format.UNITS[unit]
    length = max(step.length_ns, 1)
    pieces = []
    for seg in step.segments:  # one per segment of the path (a short list)
        ns = seg.end_ns - seg.start_ns
        title = html.escape(f"rank {seg.rank} · {seg.kind} · {seg.name} · {ns / scale:.2f} {unit}"
                            + (f" · phase {seg.phase}" if seg.phase else ""))
        pieces.append(f'<span title="{title}" style="flex:{ns / length:.6f};background:'
                      f'{KIND_COLOURS.get(seg.kind, "#888")};box-shadow:inset 0 -4px 0 '
                      f'{RANK_COLOURS[seg.rank % len(RANK_COLOURS)]}"></span>')
    label = html.escape(f"step {step.step} (from rank {step.rank}, {step.length_ns / scale:.2f} {unit})")
    return (f'<div style="display:flex;align-items:center;margin:2px 0"><span class="meta" '
            f'style="width:210px;flex:none">{label}</span><div style="display:flex;flex:1;height:14px">'
            + "".join(pieces) + "</div></div>")


def html_section(path: CriticalPath | None, unit: str, table) -> str:
    """The HTML section: the shares, one band per step (hover a piece for what it is) and the top
    contributors; ``table`` is html.table_html (headers, rows, left)."""
    if path is None or not path.steps:
        return ""
    path = capped(path)
    lines, headers, rows = parts(path, unit)
    legend = " ".join(f'<span style="background:{colour};padding:0 6px;margin-right:4px">&nbsp;</span>'
                      f'{html.escape(kind)}' for kind, colour in KIND_COLOURS.items())
    steps = path.steps[:BAND_STEPS]
    more = len(path.steps) - len(steps)
    return (f"<h2>{html.escape(TITLE)}</h2>" + "".join(f'<p class="meta">{html.escape(line)}</p>' for line in lines)
            + f'<div class="card">{"".join(_band(step, unit) for step in steps)}'
            + (f'<p class="meta">{more} more steps in summary.json</p>' if more > 0 else "")
            + f'<p class="meta">{legend} · the underline colour changes where the path moves to another rank '
              '(hover a piece: rank, kind, name, time)</p></div>' + table(headers, rows, left=2))
