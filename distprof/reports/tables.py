"""Text rendering of the summary tables (Device, Overview, Model, Phase, Kernel, Memory Manipulation,
UserDefined, Operator) in the layout of the Paddle profiler, from a Summary's ``tables``
(distprof.sections.tables: the merged rows or one rank's, read by attribute).

Only the by-name tables (Phase, Kernel, Memory, UserDefined, Operator) are reordered by ``--sorted-by`` and cut
by ``--top``; Device, Overview and Model keep their fixed order, as in Paddle.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import TYPE_CHECKING

from . import format

if TYPE_CHECKING:
    from ..results import Summary
    from ..sections import tables as sec

    # the Kernel, Memory and UserDefined tables (one rank's or merged) and their rows
    ByNameTable = (sec.KernelTable | sec.MemoryTable | sec.UserTable | sec.MergedKernelTable
                   | sec.MergedMemoryTable | sec.MergedUserTable | sec.PhaseTable | sec.MergedPhaseTable)
    ByNameRow = (sec.KernelRow | sec.MemoryRow | sec.UserRow | sec.MergedKernelRow | sec.MergedMemoryRow
                 | sec.MergedUserRow | sec.PhaseRow | sec.MergedPhaseRow)


def simple_table(rows: list[list], headers: list[str]) -> str:
    """``tabulate(rows, headers, tablefmt="simple", disable_numparse=True)`` byte for byte, without the
    library: it typed every cell to find numbers that disable_numparse then ignores (33k calls in an 8-rank
    text report; HTA's rank's report 15 -> 6 ms). Every cell is text, left-aligned and stripped; a column as
    wide as its widest line and at least its title plus 2; lines joined by 2 spaces and stripped on the
    right; None an empty cell, a short row padded with empty cells; a table with a line break anywhere
    breaks every cell into its lines, top-aligned. Not reproduced, as distprof's cells never hold them
    (names.printable escapes control characters): the library's ANSI-colour widths, its "\x01"
    separating-line marker and wcwidth's double-width characters."""
    texts = [["" if cell is None else f"{cell}" for cell in row] for row in rows]
    titles = [str(title) for title in headers]
    if texts and len(texts[0]) > len(titles):  # untitled leading columns, as tabulate pads them
        titles = [""] * (len(texts[0]) - len(titles)) + titles
    multiline = any("\n" in text or "\r" in text for text in chain(titles, *texts))  # as given, as tabulate tells
    columns = min(max(map(len, texts), default=0), len(titles))  # a column beyond the titles is dropped
    if columns == 0:  # no rows (or only empty ones): the titles alone
        texts, columns = [], len(titles)
    titles = titles[:columns]
    texts = [row[:columns] for row in texts]
    texts = [[cell.strip() for cell in row] + [""] * (columns - len(row)) for row in texts]
    size = _line_width if multiline else len
    widths = [max([size(titles[i]) + 2, *(size(row[i]) for row in texts)]) for i in range(columns)]
    if not multiline:
        lines = ["  ".join(title.ljust(width) for title, width in zip(titles, widths)),
                 "  ".join("-" * width for width in widths),
                 *("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in texts)]
        return "\n".join(line.rstrip() for line in lines)
    head = ["\n".join(line.ljust(width) for line in _LINE_BREAK.split(title)) for title, width in zip(titles, widths)]
    body = [["\n".join(line.ljust(width) for line in cell.splitlines()) for cell, width in zip(row, widths)]
            for row in texts]
    lines = _row_lines(head, widths)
    lines.append("  ".join("-" * width for width in widths).rstrip())
    for row in body:
        lines += _row_lines(row, widths)
    return "\n".join(lines)


_LINE_BREAK = re.compile(r"\r|\n|\r\n")  # how tabulate splits a title (and measures a cell) into lines


def _line_width(text: str) -> int:
    return max(map(len, re.split("[\r\n]", text)))


def _row_lines(cells: list[str], widths: list[int]) -> list[str]:
    """A row of cells that may hold several lines: as many lines as its tallest cell, the others blank below."""
    split = [cell.splitlines() for cell in cells]
    height = max(map(len, split), default=0)
    padded = [lines + [" " * width] * (height - len(lines)) for lines, width in zip(split, widths)]
    return ["  ".join(cell[index] for cell in padded).rstrip() for index in range(height)]


PAD = 4        # what a "simple" table adds to a column's widest line: 2 of padding, 2 between columns
MIN_CELL = 10  # a shortened name column keeps at least this many characters (head and tail around "…")
WHOLE_CELL = 24  # ... and this many where that spares splitting the table


def _simple(cells: list[list[str]], headers: list[str]) -> str:
    return simple_table(cells, headers)


def widest(text: str) -> int:
    """The longest line of a text block, in characters (what the console width must hold)."""
    return max((len(line) for line in text.splitlines()), default=0)


def _needs(cells: list[list[str]], headers: list[str]) -> list[int]:
    """Each column's width in a "simple" table, padding and gap included."""
    return [PAD + max(len(line) for cell in [headers[i], *(row[i] for row in cells)]
                      for line in (cell.splitlines() or [""])) for i in range(len(headers))]


_CALL = re.compile(r"\w\(")  # "kernel(" of a C++ signature, not "thread 7 (comm)"


def _compact(name: str, limit: int) -> str:
    """A long C++ name (kernel, operator) within ``limit`` characters as a reader shortens it:
    template arguments and parameter lists as "<…>" and "(…)", then "void " and the namespaces
    dropped while it is too long; still too long, head and tail around "…" (names.short_name).
    A plain cut of "void at::native::elementwise_kernel<float, float, ...>(...)" kept neither end's
    meaning: "void at::nat…oat, float,…"."""
    from ..names import short_name
    if "<" not in name and not _CALL.search(name):  # not code: "thread 7 (comm)", a path
        return short_name(name, limit)
    out, depth = [], 0
    for char in name:  # one pass over the name's characters
        if char in "<(":
            out.append(char + "…" if depth == 0 else "")
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
            out.append(char if depth == 0 else "")
        elif depth == 0:
            out.append(char)
    text = "".join(out).removeprefix("void ")
    while len(text) > limit and "::" in text.split("<")[0].split("(")[0]:
        text = text.split("::", 1)[1]
    return short_name(text, limit)


def _cut(cells: list[list[str]], headers: list[str], columns: dict[int, int]) -> tuple[list[list[str]], list[str]]:
    """Cells (and titles) of ``columns`` ({index: characters}) shortened to that many characters
    (``_compact``: the ends say which kernel, file or lane)."""
    def fit(text: str, limit: int) -> str:
        return "\n".join(_compact(line, limit) for line in text.splitlines()) if len(text) > limit else text
    cut_cells = [[fit(cell, columns[i]) if i in columns else cell for i, cell in enumerate(row)] for row in cells]
    return cut_cells, [fit(h, columns[i]) if i in columns else h for i, h in enumerate(headers)]


def _shrink(needs: list[int], floors: dict[int, int], excess: int) -> dict[int, int]:
    """How many characters each column of ``floors`` keeps so that the table sheds ``excess``: the
    widest is cut first (water-filling), none below its floor; {} when nothing needs cutting."""
    widths = {i: needs[i] - PAD for i in floors}
    while excess > 0:
        open_ = [i for i in widths if widths[i] > floors[i]]
        if not open_:
            break
        column = max(open_, key=lambda i: widths[i])
        widths[column] -= 1
        excess -= 1
    return {i: w for i, w in widths.items() if w < needs[i] - PAD}


def _groups(needs: list[int], keep: int, width: int) -> list[list[int]]:
    """The columns after the first ``keep`` (the row labels, repeated in every group) as the fewest
    consecutive groups that fit ``width``, of even widths."""
    labels, columns = sum(needs[:keep]), list(range(keep, len(needs)))
    chunks = [columns]
    for count in range(2, len(columns) + 1):
        share = sum(needs[keep:]) / count
        chunks, current, used = [], [], 0
        for column in columns:  # close a chunk once it holds its even share (or the next would not fit)
            if current and (used >= share or labels + used + needs[column] > width):
                chunks.append(current)
                current, used = [], 0
            current.append(column)
            used += needs[column]
        chunks.append(current)
        if len(chunks) <= count and all(labels + sum(needs[c] for c in chunk) <= width for chunk in chunks):
            break
    return chunks


def fitted(rows: list[list], headers: list[str], keep: int = 1, width: int = format.TABLE_WIDTH,
           shrink: tuple[int, ...] = ()) -> str:
    """A "simple" table that fits ``width`` columns, each row one line (a row that wraps on the
    terminal, or inside its cells, no longer reads as a row). Too wide, it first shortens the cells
    of its ``shrink`` columns (names, paths, lane lists: head and tail kept), then splits the columns
    into consecutive tables that fit, each repeating the first ``keep`` (the row labels); a part
    still too wide (one huge column in a narrow console) has its widest cells shortened."""
    cells = [[str(cell) for cell in row] for row in rows]
    headers = [str(h) for h in headers]
    floors = {i: max(MIN_CELL, min(16, max(len(line) for line in headers[i].splitlines() or [""])))
              for i in shrink}  # a shortened column keeps MIN_CELL characters, and its title's (up to 16)
    if len(headers) <= keep + 1:
        return _fit_part(cells, headers, floors, width)
    # whole, a name keeps WHOLE_CELL characters: shorter, splitting the table reads better
    text = _fit_part(cells, headers, {i: max(floor, WHOLE_CELL) for i, floor in floors.items()}, width, force=False)
    if widest(text) <= width:
        return text
    needs = [min(need, floors[i] + PAD) if i in floors else need for i, need in enumerate(_needs(cells, headers))]
    parts = []
    for chunk in _groups(needs, keep, width):
        order = [*range(keep), *chunk]
        parts.append(_fit_part([[row[i] for i in order] for row in cells], [headers[i] for i in order],
                               {order.index(i): floor for i, floor in floors.items() if i in order}, width))
    return "\n\n".join(parts)


def _fit_part(cells: list[list[str]], headers: list[str], floors: dict[int, int], width: int,
              force: bool = True) -> str:
    """One table as it is, else with the columns of ``floors`` shortened, else (``force``) with any
    column shortened until it fits ``width``."""
    text = _simple(cells, headers)
    if widest(text) <= width:
        return text
    if floors:
        cut_cells, cut_headers = _cut(cells, headers, _shrink(_needs(cells, headers), floors, widest(text) - width))
        text = _simple(cut_cells, cut_headers)
        if widest(text) <= width:
            return text
    return _forced(cells, headers, width) if force else text


def _forced(cells: list[list[str]], headers: list[str], width: int) -> str:
    """The last resort: every column may be shortened (widest first) until the table fits."""
    needs = _needs(cells, headers)
    columns = _shrink(needs, {i: 4 for i in range(len(headers))}, sum(needs) - 2 - width)
    return _simple(*_cut(cells, headers, columns))


UNITS = format.UNITS
SORT_KEYS = ("cpu_total", "cpu_avg", "cpu_max", "cpu_min", "gpu_total", "gpu_avg", "gpu_max", "gpu_min",
             "calls", "name", "cpu_self")   # cpu_self: the Operator Summary's self time (elsewhere: total)
NAME_WIDTH = 64


def time_cell(value, scale: int) -> str:
    return "-" if value is None else f"{value / scale:.2f}"


def ratio_cell(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _name(name: str, width: int = NAME_WIDTH) -> str:
    """Long (templated C++) kernel names cut to a readable width (``_compact``)."""
    return name if len(name) <= width else _compact(name, width)


def _banner(title: str, table: str, width: int = format.TABLE_WIDTH) -> str:
    """A banner as wide as the table under it (at least the title and 20 dashes, at most ``width``)."""
    wide = max((len(line) for line in table.splitlines()), default=len(title) + 20)
    return format.banner(title, min(max(wide, len(title) + 20), width))


def _section(title: str, table: str, notes: list[str] = (), width: int = format.TABLE_WIDTH) -> str:
    """Banner, table and notes (wrapped at ``width``, or at WRAP where that is narrower)."""
    return "\n".join([_banner(title, table, width), table,
                      *(line for note in notes for line in format.wrapped(note, min(width, format.WRAP)))])


def select(summary: Summary, rank: int | None = None) -> sec.RankTables | sec.MergedTables | None:
    """The tables to show: merged across ranks, or one rank's own (``rank``)."""
    tables = summary.tables
    if not tables:
        return None
    if rank is None and len(tables.by_rank) == 1:
        return tables.by_rank[0]  # one rank: show its own tables (per-device rows)
    if rank is None:
        return tables.merged
    for entry in tables.by_rank:
        if entry.rank == rank:
            return entry
    from ..events import SourceError
    known = ", ".join(str(e.rank) for e in tables.by_rank)
    raise SourceError(f"--rank {rank}: no such rank in the summary (ranks: {known})")


def _check_sort(sorted_by: str) -> None:
    """A misspelt key from a caller other than the CLI (whose choices are SORT_KEYS) says what is valid."""
    if sorted_by not in SORT_KEYS:
        raise ValueError(f"--sorted-by must be one of {', '.join(SORT_KEYS)}")


def _descending(rows: list, value) -> list:
    """Rows by ``value(row)`` largest first, None last; ties keep the stored order."""
    def key(row) -> float:
        figure = value(row)
        return -(figure if figure is not None else float("-inf"))
    return sorted(rows, key=key)


# a by-name table's one time measure per --sorted-by key (cpu_X and gpu_X alike: the table's own X)
_BY_NAME = {"total": lambda r: r.total_ns, "avg": lambda r: r.avg_ns, "max": lambda r: r.max_ns,
            "min": lambda r: r.min_ns, "self": lambda r: r.total_ns}


def sort_rows(rows: list[ByNameRow], sorted_by: str) -> list[ByNameRow]:
    """Order by-name rows: a ``cpu_X``/``gpu_X`` key orders by the table's own X (its only time
    measure), ``calls`` by calls, ``name`` alphabetically; ties keep the stored order."""
    _check_sort(sorted_by)
    if sorted_by == "name":
        return sorted(rows, key=lambda r: str(r.name))
    if sorted_by == "calls":
        return _descending(rows, lambda r: r.calls)
    return _descending(rows, _BY_NAME[sorted_by.split("_", 1)[1]])


def device_table(device: list[sec.DeviceRow] | list[sec.MergedDeviceRow], merged: bool,
                 width: int = format.TABLE_WIDTH) -> str:
    """Utilization per device: the mean and the ranks at the min and max when merged."""
    if merged:
        rows = [[d.device, ratio_cell(d.mean), f"{ratio_cell(d.min)} (rank {d.min_rank})",
                 f"{ratio_cell(d.max)} (rank {d.max_rank})"] for d in device]
        return fitted(rows, ["Device", "Utilization (%) mean", "min", "max"], width=width, shrink=(0,))
    rows = [[d.device, ratio_cell(d.utilization)] for d in device]
    return fitted(rows, ["Device", "Utilization (%)"], width=width, shrink=(0,))


def overview_table(overview: list[sec.OverviewRow] | list[sec.MergedOverviewRow], scale: int, unit: str,
                   width: int = format.TABLE_WIDTH) -> str:
    """Each event type's calls and union time, CPU then GPU (the parts indented under their whole)."""
    rows = []
    for side, title in (("cpu", "CPU"), ("gpu", "GPU")):
        part = [r for r in overview if r.side == side]
        for r in part:
            indent = "" if r.type in ("ProfileStep", "GPU busy") else "  "
            rows.append([indent + r.type, title, r.calls, time_cell(r.total_ns, scale), ratio_cell(r.ratio)])
    return fitted(rows, ["Event type", "Side", "Calls", f"Time ({unit}, union)", "Ratio (%)"], width=width)


def side_figures(row: sec.ModelRow | sec.MergedModelRow, side: str) -> tuple:
    """A Model Summary row's total, avg, max, min and ratio of one side ("cpu" or "gpu")."""
    if side == "cpu":
        return row.cpu_total_ns, row.cpu_avg_ns, row.cpu_max_ns, row.cpu_min_ns, row.cpu_ratio
    return row.gpu_total_ns, row.gpu_avg_ns, row.gpu_max_ns, row.gpu_min_ns, row.gpu_ratio


def _five(row: sec.ModelRow | sec.MergedModelRow, side: str, scale: int) -> str:
    *times, ratio = side_figures(row, side)
    return " / ".join([*(time_cell(value, scale) for value in times), ratio_cell(ratio)])


def max_rank_cell(values: list | None, ranks: list[int]) -> str:
    pairs = [(v, -r) for v, r in zip(values or [], ranks) if v is not None]
    if not pairs or not max(pairs)[0]:
        return "-"
    return str(-max(pairs)[1])   # ties: the lowest rank


def model_table(model: list[sec.ModelRow] | list[sec.MergedModelRow], scale: int, ranks: list[int] | None,
                width: int = format.TABLE_WIDTH) -> str:
    """The phases' CPU (and GPU) figures, and the rank with the most CPU time in each when merged
    (``ranks``: the merged rows' rank order)."""
    has_gpu = any(r.gpu_total_ns is not None for r in model)
    headers = ["Name", "Calls", "CPU Total / Avg / Max / Min / Ratio(%)"]
    if has_gpu:
        headers.append("GPU Total / Avg / Max / Min / Ratio(%)")
    if ranks and len(ranks) > 1:
        headers.append("Max CPU at rank")
    rows = []
    for r in model:
        row = [("" if r.name == "ProfileStep" else "  ") + r.name, "-" if r.calls is None else r.calls,
               _five(r, "cpu", scale)]
        if has_gpu:
            row.append(_five(r, "gpu", scale))
        if ranks and len(ranks) > 1:
            row.append(max_rank_cell(r.cpu_total_ns_by_rank, ranks))
        rows.append(row)
    return fitted(rows, headers, width=width, shrink=(0,))


def model_note(model: list[sec.ModelRow] | list[sec.MergedModelRow], unit: str) -> str:
    """The Model Summary's note: its GPU columns count one call per step; a trace without a GPU has
    none, and "GPU time per step" under a CPU job's table named a device it never used."""
    has_gpu = any(r.gpu_total_ns is not None for r in model)
    return (f"Time unit: {unit}; ratios are of ProfileStep; "
            + ("GPU time per step" if has_gpu else "CPU time (no GPU in the trace)"))


def _more_rows(rows: list, shown: list) -> list[str]:
    """The note under a table that --top cut, saying how to see the rest."""
    if len(shown) == len(rows):
        return []
    return [f"({len(rows) - len(shown)} more rows; --top 0 shows all {len(rows)})"]


def by_name_table(table: ByNameTable, scale: int, sorted_by: str, top: int | None, side: str, merged: bool,
                  keys=("name",), width: int = format.TABLE_WIDTH) -> tuple[str, list[str]]:
    """Kernel / Memory / UserDefined: rows sorted and cut, and the notes saying what was left out.
    ``keys``: the label columns, ("name",) or ("kind", "name") for the Memory Summary."""
    rows = sort_rows(table.rows, sorted_by)
    shown = rows if not top else rows[:top]
    headers = [k.capitalize() for k in keys] + ["Calls", f"{side} Total / Avg / Max / Min / Ratio(%)"]
    if merged:
        headers += ["Ranks", "Max at rank"]
    out = []
    for r in shown:
        line = [_name(str(r.kind if k == "kind" else r.name)) for k in keys] + [r.calls, " / ".join(
            [time_cell(r.total_ns, scale), time_cell(r.avg_ns, scale), time_cell(r.max_ns, scale),
             time_cell(r.min_ns, scale), ratio_cell(r.ratio)])]
        if merged:
            line += [r.ranks, r.max_rank]
        out.append(line)
    notes = _more_rows(rows, shown) + dropped_note(table, scale, "total")
    return fitted(out, headers, keep=len(keys), width=width, shrink=tuple(range(len(keys)))), notes


def dropped_note(table: ByNameTable | sec.OperatorTable | sec.MergedOperatorTable, scale: int,
                 what: str) -> list[str]:
    """What a table's rows beyond summaries.MAX_ROWS add up to, with its unit: "0.11 total" left a
    reader to guess between ms, s and a share."""
    dropped = table.dropped
    if not dropped.rows:
        return []
    unit = next((name for name, size in UNITS.items() if size == scale), f"x {scale} ns")
    return [f"({dropped.rows} smaller rows not stored: {dropped.calls} calls, "
            f"{dropped.total_ns / scale:.2f} {unit} {what})"]


def phase_cells(row: sec.PhaseRow | sec.MergedPhaseRow, scale: int, merged: bool) -> list:
    """A Phase Summary row's cells after its name (the text and HTML tables alike): calls, total,
    avg, max, min, ratio; merged, the ranks' least / median / largest total with their ranks."""
    cells = [row.calls, *(time_cell(value, scale) for value in (row.total_ns, row.avg_ns, row.max_ns, row.min_ns)),
             ratio_cell(row.ratio)]
    if merged:
        cells += [row.ranks, f"{time_cell(row.rank_min_ns, scale)} (rank {row.min_rank})",
                  time_cell(row.rank_median_ns, scale), f"{time_cell(row.rank_max_ns, scale)} (rank {row.max_rank})"]
    return cells


PHASE_NOTE = ("Time unit: {unit}; Total = the union of the phase's calls in the window (overlapping calls count "
              "once; a phase nested in another counts in both rows); Avg / Max / Min of single calls; Ratio = Total "
              "/ step time")
PHASE_MERGED_NOTE = "; per rank: each rank's Total, over the ranks with the phase"


def phase_table(table: sec.PhaseTable | sec.MergedPhaseTable, scale: int, sorted_by: str, top: int | None,
                merged: bool, width: int = format.TABLE_WIDTH) -> tuple[str, list[str]]:
    """The Phase Summary (every phase name its own row): rows sorted and cut, and what was left out."""
    rows = sort_rows(table.rows, sorted_by)
    shown = rows if not top else rows[:top]
    headers = ["Name", "Calls", "Total", "Avg", "Max", "Min", "Ratio(%)"]
    if merged:
        headers += ["Ranks", "Per rank min", "median", "max"]
    out = [[_name(str(r.name)), *phase_cells(r, scale, merged)] for r in shown]
    notes = _more_rows(rows, shown) + dropped_note(table, scale, "total")
    return fitted(out, headers, width=width, shrink=(0,)), notes


# an Operator Summary's column per --sorted-by key (GPU max/min are not kept per operator: GPU total)
_OPERATOR = {"cpu_total": lambda r: r.cpu_total_ns, "cpu_avg": lambda r: r.cpu_avg_ns,
             "cpu_max": lambda r: r.cpu_max_ns, "cpu_min": lambda r: r.cpu_min_ns,
             "cpu_self": lambda r: r.cpu_self_ns, "gpu_total": lambda r: r.gpu_total_ns,
             "gpu_avg": lambda r: r.gpu_avg_ns, "gpu_max": lambda r: r.gpu_total_ns,
             "gpu_min": lambda r: r.gpu_total_ns, "calls": lambda r: r.calls}


def sort_operator_rows(rows: list[sec.OperatorRow] | list[sec.MergedOperatorRow],
                       sorted_by: str) -> list[sec.OperatorRow] | list[sec.MergedOperatorRow]:
    """Order Operator Summary rows: cpu_X by the CPU column X, gpu_total/avg by the GPU ones (the
    GPU max/min are not kept per operator: by GPU total), calls, name."""
    _check_sort(sorted_by)
    if sorted_by == "name":
        return sorted(rows, key=lambda r: str(r.name))
    return _descending(rows, _OPERATOR[sorted_by])


def operator_table(table: sec.OperatorTable | sec.MergedOperatorTable, scale: int, sorted_by: str,
                   top: int | None, merged: bool, width: int = format.TABLE_WIDTH) -> tuple[str, list[str]]:
    """The Operator Summary: rows sorted and cut, and the notes saying what was left out."""
    rows = sort_operator_rows(table.rows, sorted_by)
    shown = rows if not top else rows[:top]
    has_gpu = any(r.gpu_total_ns is not None for r in rows)
    headers = ["Name", "Calls", "CPU Total / Self / Avg / Max / Min", "Ratio(%)"]
    headers += ["GPU Total / Avg"] if has_gpu else []
    headers += ["Ranks", "Max at rank"] if merged else []
    out = []
    for r in shown:
        line = [_name(str(r.name)), r.calls, " / ".join(time_cell(value, scale) for value in (
            r.cpu_total_ns, r.cpu_self_ns, r.cpu_avg_ns, r.cpu_max_ns, r.cpu_min_ns)), ratio_cell(r.ratio)]
        if has_gpu:
            line.append(f"{time_cell(r.gpu_total_ns, scale)} / {time_cell(r.gpu_avg_ns, scale)}")
        if merged:
            line += [r.ranks, r.max_rank]
        out.append(line)
    notes = _more_rows(rows, shown) + dropped_note(table, scale, "CPU total")
    return fitted(out, headers, width=width, shrink=(0,)), notes


def sections(summary: Summary, unit: str = "ms", sorted_by: str = "cpu_total", top: int | None = 20,
             rank: int | None = None, width: int = format.TABLE_WIDTH) -> list[str]:
    """The summary-table sections of a summary, each a titled text block ``width`` columns wide at
    most (empty tables left out)."""
    tables = select(summary, rank)
    if not tables:
        return []
    scale = UNITS[unit]
    merged = rank is None and len(summary.tables.ranks) > 1
    ranks = summary.tables.ranks if merged else None
    # not merged and no --rank: the one rank's own tables (or, with none, the empty merged ones)
    shown = rank if rank is not None else (summary.tables.ranks or [0])[0]
    scope = "all ranks" if merged else f"rank {shown}"
    out = []
    if tables.device:
        out.append(_section(f"Device Summary ({scope})", device_table(tables.device, merged, width),
                            width=width))
    if tables.overview:
        overview = overview_table(tables.overview, scale, unit, width)
        out.append(_section(f"Overview Summary ({scope})", overview,
                            [f"Time unit: {unit}; a type's time is the union of its intervals in the window"],
                            width))
    if tables.model:
        out.append(_section(f"Model Summary ({scope})", model_table(tables.model, scale, ranks, width),
                            [model_note(tables.model, unit)], width))
    if tables.phase and tables.phase.rows:  # absent in a summary.json older than the Phase Summary
        text, notes = phase_table(tables.phase, scale, sorted_by, top, merged, width)
        note = PHASE_NOTE.format(unit=unit) + (PHASE_MERGED_NOTE if merged else "")
        out.append(_section(f"Phase Summary ({scope})", text, [note, *notes], width))
    for table, title, side, keys in ((tables.kernel, "Kernel Summary", "GPU", ("name",)),
                                     (tables.memory, "Memory Manipulation Summary", "GPU", ("kind", "name")),
                                     (tables.user, "UserDefined Summary", "CPU", ("name",))):
        if table.rows:
            text, notes = by_name_table(table, scale, sorted_by, top, side, merged, keys, width)
            out.append(_section(f"{title} ({scope})", text, [f"Time unit: {unit}", *notes], width))
    if tables.operator.rows:
        text, notes = operator_table(tables.operator, scale, sorted_by, top, merged, width)
        out.append(_section(f"Operator Summary ({scope})", text, [
            f"Time unit: {unit}; Self = own time minus the child operators'; Ratio = CPU total / window "
            "(nested operators overlap); GPU = kernels launched under the operator", *notes], width))
    return out


def render(summary: Summary, unit: str = "ms", sorted_by: str = "cpu_total", top: int | None = 20,
           rank: int | None = None, width: int = format.TABLE_WIDTH) -> str:
    """All summary tables as one text block ("" when the summary has none)."""
    return "\n\n".join(sections(summary, unit, sorted_by, top, rank, width))
