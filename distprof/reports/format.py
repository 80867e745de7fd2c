"""How reports write numbers and names: the units, the Distributed Summary columns and their
titles, banners and duration/ratio formatting, in one place for text, tables and HTML."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..console import TABLE_WIDTH, WRAP, wrapped  # noqa: F401 - the reports' console widths
from ..results import RankResult
from ..units import fixed  # noqa: F401 - numbers without a negative zero, for every report

if TYPE_CHECKING:
    from ..sections.collectives import CollectiveRow
    from ..sections.tables import AcrossRanks, FigureStats, RatioStats

UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
# each what-if scenario as the reports name it (what-if table, findings' "priced by", critical path)
SCENARIO_TITLES = {"no_straggler": "no straggler", "overlap_communication": "overlap communication",
                   "comm_bandwidth_x2": "comm bandwidth x2", "no_dataloader_wait": "no dataloader wait",
                   "balanced_ranks": "balanced ranks"}
# what "step time" means everywhere (analyses.steptime computes it): merge, what-if, diff
STEP_TIME_DEFINITION = "step time (median rank per step, median over steps)"
PER_STEP_DEFINITION = "step time per step (median over ranks)"

# the Distributed Summary columns of every report: (summary.json key, title). window_ns is the time
# summed over the rank's steps, not one step's: "ProfileStep (ms)" next to "Steps" read as a step time
SUMMARY_COLUMNS = (("window_ns", "Steps total"), ("communication_ns", "Communication"),
                   ("communication_wait_ns", "Comm wait"), ("communication_transfer_ns", "Comm transfer"),
                   ("computation_ns", "Computation"), ("memory_ns", "Memory"), ("overlap_ns", "Overlap"),
                   ("exposed_communication_ns", "Exposed comm"), ("overlap_ratio", "Overlap ratio"),
                   ("idle_ns", "Idle"), ("gpu_window_ns", "GPU window"))
# columns shown only when some rank has a value
OPTIONAL_COLUMNS = ("gpu_window_ns", "communication_wait_ns", "communication_transfer_ns")

# each column's value, read by attribute: results.RankFigures and sections.tables.AcrossRanks name
# their figures alike (a rank's value; the figure's statistics across ranks)
FIGURE_OF: dict[str, Callable[[Any], Any]] = {
    "window_ns": lambda of: of.window_ns, "communication_ns": lambda of: of.communication_ns,
    "communication_wait_ns": lambda of: of.communication_wait_ns,
    "communication_transfer_ns": lambda of: of.communication_transfer_ns,
    "computation_ns": lambda of: of.computation_ns, "memory_ns": lambda of: of.memory_ns,
    "overlap_ns": lambda of: of.overlap_ns,
    "exposed_communication_ns": lambda of: of.exposed_communication_ns,
    "overlap_ratio": lambda of: of.overlap_ratio, "idle_ns": lambda of: of.idle_ns,
    "gpu_window_ns": lambda of: of.gpu_window_ns}


def rank_figure(rank: RankResult | dict, key: str) -> float | None:
    """A rank's value of a Distributed Summary column: of a summary's rank (``RankResult``), or of a
    side of a diff's rank entry (analyses.diff: a dict of figures, not summary content)."""
    return rank.get(key) if isinstance(rank, dict) else FIGURE_OF[key](rank.figures)


def across_figure(across: AcrossRanks, key: str) -> FigureStats | RatioStats | None:
    """A Distributed Summary column's statistics across ranks (None: no rank has the figure)."""
    return FIGURE_OF[key](across)


def _steps(rank: RankResult | dict) -> int | None:
    return rank.get("steps") if isinstance(rank, dict) else rank.figures.steps


def summary_columns(ranks: Sequence[RankResult] | Sequence[dict]) -> tuple:
    """The Distributed Summary columns of these ranks (a summary's, or a diff's sides: rank_figure):
    optional ones only where a rank has a value. Without steps on any rank the window is the whole
    trace, and its column says so ("Trace span")."""
    stepped = any(_steps(row) for row in ranks)
    return tuple((key, title if key != "window_ns" or stepped else "Trace span") for key, title in SUMMARY_COLUMNS
                 if key not in OPTIONAL_COLUMNS or any(rank_figure(row, key) is not None for row in ranks))


def banner(title: str, width: int) -> str:
    """A section title centred in a line of dashes."""
    return f"{title:-^{width}}"


def figure(key: str, value, unit: str) -> str:
    """A Distributed Summary value in ``unit`` (ratios as a percentage); '-' when unknown."""
    if value is None:
        return "-"
    if key == "overlap_ratio":
        return fixed(100 * value, ".1f") + "%"
    return fixed(value / UNITS[unit], ".2f")


def column_title(key: str, title: str, unit: str) -> str:
    """Header of a Distributed Summary column, with the unit where it has one."""
    return title if key == "overlap_ratio" else f"{title} ({unit})"


# the Collectives table (summary.json ``collectives.rows``): (title, key); the unit is added to times
COLLECTIVE_COLUMNS = (("Kind", "kind"), ("Group", "group"), ("Span", "node_span"), ("Size", "size_bucket"),
                      ("Count", "count"), ("Total", "total_ns"), ("Wait share", "wait_share"),
                      ("Median transfer", "transfer_median_ns"), ("algbw GB/s", "algbw_median_gbps"),
                      ("busbw GB/s", "busbw_median_gbps"), ("% of peak", "peak_share"))


def collective_cells(row: CollectiveRow, unit: str, with_peak: bool) -> list[str]:
    """One Collectives table row as text cells (count as "matched/total" when some were single-rank)."""
    def number(value, digits: int = 1) -> str:  # 3 significant digits below 1: 0.0042, not 0.00
        return "-" if value is None else f"{value:.{digits}f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"
    count = str(row.count) if row.matched == row.count else f"{row.matched}/{row.count}"
    cells = [row.kind, row.group or "-", row.node_span or "-", row.size_bucket, count,
             figure("total_ns", row.total_ns, unit),
             "-" if row.wait_share is None else f"{100 * row.wait_share:.1f}%",
             figure("transfer_median_ns", row.transfer_median_ns, unit),
             number(row.algbw_median_gbps, 2), number(row.busbw_median_gbps, 2)]
    if with_peak:
        cells.append("-" if row.peak_share is None else f"{100 * row.peak_share:.0f}%")
    return cells


def collective_headers(unit: str, with_peak: bool) -> list[str]:
    """Titles of the Collectives table columns."""
    titles = [f"{title} ({unit})" if key in ("total_ns", "transfer_median_ns") else title
              for title, key in COLLECTIVE_COLUMNS]
    return titles if with_peak else titles[:-1]


# -- numbers, paths and repeated warnings as a console shows them --------------------------------

def shown_path(path: str) -> str:
    """A file's path as the user most likely gave it: relative to the current directory where that is
    shorter. Merge keeps absolute paths (``distprof trace OUT`` finds the rank files from anywhere); a
    table cell of the absolute path was cut in the middle where the relative one fits."""
    import os
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return relative if len(relative) < len(path) else path


GROUP_FROM = 3    # a warning said of this many files or more is printed once, with the count
FILES_NAMED = 3   # ... and the names of the first few files
_ABOUT_FILE = re.compile(r"(\S*[/\\.]\S*): (.+)", re.DOTALL)  # "path/rank3.json: what is wrong with it"
_NUMBER = re.compile(r"\d+")


def grouped_warnings(warnings: Sequence[str]) -> list[str]:
    """The warnings to print: one warning said of many files (``FILE: rank 3 appears twice; renumbered``
    for 24 files of a merge) as one line with the count and the first files' names, where the first of
    them was; the others as they are. 24 such lines before the answer hid it. Files whose warnings
    differ only in numbers count as one warning (its numbers shown as N)."""
    keys = [_key(text) for text in warnings]
    said: dict[str, list[tuple[str, str]]] = {}
    for text, key in zip(warnings, keys):  # one per warning
        if key is not None:
            said.setdefault(key, []).append(_ABOUT_FILE.fullmatch(text).groups())
    out, done = [], set()
    for text, key in zip(warnings, keys):
        files = said.get(key, ()) if key is not None else ()
        if len(files) < GROUP_FROM:
            out.append(text)
        elif key not in done:  # the group's line where its first warning was
            done.add(key)
            what = files[0][1] if len({rest for _, rest in files}) == 1 else key
            named = ", ".join(shown_path(name) for name, _ in files[:FILES_NAMED])
            out.append(f"{len(files)} files: {what} (first: {named}{', ...' if len(files) > FILES_NAMED else ''}; "
                       "each one in summary.json's warnings)")
    return out


def _key(text: str) -> str | None:
    """What a warning about a file says, its numbers as N; None for a warning not about a file."""
    match = _ABOUT_FILE.fullmatch(text) if isinstance(text, str) else None
    return _NUMBER.sub("N", match.group(2)) if match else None
