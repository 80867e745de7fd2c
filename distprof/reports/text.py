"""Text report: the answer first (step time, the straggler, the findings with what each fix saves,
the checks), then the tables: the Distributed Summary per rank in the style of the Paddle profiler,
the diagnosis's details, collectives, what-if, critical path and the summary tables. Everything fits
the console's width (``console.terminal_width``) with each table row on one line, and every name
from a trace is printed escaped (``names.printable_all``)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from .. import console
from ..names import printable, printable_capped
from ..ranges import rank_ranges, ranks_text
from ..results import Summary
from ..units import phrase
from . import findings as findings_report
from . import format, tables

if TYPE_CHECKING:
    from ..sections.benchmark import BenchmarkSummary
    from ..sections.findings import Check, Finding
    from ..sections.skew import Skew

UNITS = format.UNITS
_banner = format.banner
MANY_RANKS = 8        # above this many ranks, per-rank tables show min/median/max and the outlying ranks
OUTLIERS_SHOWN = 8    # ... at most this many of them
OUTLIER_MADS = 3.0    # a rank this many (scaled) median absolute deviations from the median is outlying
CHECK_LINES = 8       # checks listed one a line; above it, only the ones not PASS (up to this many)


def outlying_ranks(summary: Summary, limit: int = OUTLIERS_SHOWN) -> list[int]:
    """The ranks a many-rank report prints a row for: the straggler, the ranks a finding names (when
    it names few), then the ranks furthest from the median in some Distributed Summary column (beyond
    OUTLIER_MADS scaled MADs, and 1% of the median: the jitter of identical ranks is no outlier); at
    most ``limit``, in rank order. Printing all 32 ranks three times buried the answer."""
    import statistics  # here: with the fractions and random it imports, ~3 ms a command that shows few ranks
    ranks = summary.ranks
    named = []
    straggler = summary.skew.straggler
    if straggler:
        named.append(straggler.rank)
    for finding in summary.findings:
        if len(finding.ranks) <= max(limit // 2, 1):
            named += finding.ranks
    scores: dict[int, float] = {}
    for key, _ in format.summary_columns(ranks):
        values = [(row.rank, value) for row in ranks if (value := format.rank_figure(row, key)) is not None]
        if len(values) < 3:
            continue
        middle = statistics.median(v for _, v in values)
        spread = 1.4826 * statistics.median(abs(v - middle) for _, v in values)
        scale = max(spread, 0.01 * abs(middle), 1e-9)
        for rank, value in values:
            if abs(value - middle) / scale > OUTLIER_MADS:
                scores[rank] = max(scores.get(rank, 0.0), abs(value - middle) / scale)
    known = {row.rank for row in ranks}
    chosen = dict.fromkeys([r for r in named if r in known] + sorted(scores, key=lambda r: (-scores[r], r)))
    return sorted(list(chosen)[:limit])


def shown_ranks(summary: Summary, all_ranks: bool = False) -> list[int] | None:
    """The ranks the per-rank tables list: None (all) up to MANY_RANKS or with ``--all-ranks``."""
    if all_ranks or len(summary.ranks) <= MANY_RANKS:
        return None
    return outlying_ranks(summary)


def _hidden_note(summary: Summary, shown: list[int] | None) -> list[str]:
    """What a many-rank table leaves out, and where every rank is."""
    if shown is None:
        return []
    count = len(summary.ranks)
    which = (f"{len(shown)} outlying: {rank_ranges(shown)} (the straggler, ranks its findings name, or over "
             f"{OUTLIER_MADS:g} MADs from the median in a column)" if shown else "no rank stands out")
    return [f"({count} ranks: min/median/max of all, ranks {which}; every rank: --all-ranks, ranks.csv, "
            "report.html)"]


def distributed_table(summary: Summary, unit: str = "ms", width: int = format.TABLE_WIDTH,
                      shown: list[int] | None = None) -> str:
    """The per-rank figures (``shown`` ranks only, None: all), then min/median/max across all ranks."""
    rows = []
    columns = format.summary_columns(summary.ranks)
    for rank in summary.ranks:
        if shown is None or rank.rank in shown:
            rows.append([rank.rank, rank.figures.steps,
                         *(format.figure(k, format.rank_figure(rank, k), unit) for k, _ in columns)])
    if len(summary.ranks) > 1:
        stats = [format.across_figure(summary.across_ranks, k) for k, _ in columns]
        for stat, of in (("min", lambda s: s.min), ("median", lambda s: s.median), ("max", lambda s: s.max)):
            rows.append([stat, "", *(format.figure(k, None if s is None else of(s), unit)
                                     for (k, _), s in zip(columns, stats))])
        rows.append(["max at rank", "", *("-" if s is None else s.max_rank for s in stats)])
    headers = ["Rank", "Steps", *(format.column_title(key, title, unit) for key, title in columns)]
    return tables.fitted(rows, headers, keep=2, width=width)


def lanes_table(summary: Summary, width: int = format.TABLE_WIDTH, shown: list[int] | None = None) -> str:
    """Each rank's file (as given: relative to the current directory where shorter), process, device and
    lanes (``shown`` ranks only; None: all)."""
    rows = [[r.rank, format.shown_path(r.source_file) if r.source_file else "-", r.pid or "-",
             "-" if r.device is None else r.device,
             ", ".join(r.comm_lanes) or "-", _comm_rules(r), ", ".join(r.compute_lanes) or "-"]
            for r in summary.ranks if shown is None or r.rank in shown]
    return tables.fitted(rows, ["Rank", "Source", "PID", "Device", "Comm lanes", "Comm by", "Compute lanes"],
                         keep=1, width=width, shrink=(1, 4, 6))


def _comm_rules(rank) -> str:
    """Which rules made the rank's lanes communication (sources/comm_kernels.py): a wrong one shows."""
    return ", ".join(dict.fromkeys(rule for lane in rank.lanes for rule in lane.comm_rules)) or "-"


def printable_summary(summary: Summary) -> Summary:
    """The summary as a terminal may show it: every string escaped (names.printable_all) and cut
    (names.cap_names: summaries older than the cap hold full names), in one walk over the record
    itself (no JSON made and read back), and the checks' messages in readable units, as summary.json
    has them."""
    shown = printable_capped(summary)
    return replace(shown, checks=[replace(c, message=phrase(c.message)) for c in shown.checks])


def render(summary: Summary, unit: str = "ms", width: int | None = None, all_ranks: bool = False,
           **table_options) -> str:
    """The whole text report of a summary, ``width`` columns wide (None: the console's): the answer,
    then the tables. Names are escaped (a trace's control characters never reach the terminal) and
    cut (summaries older than the cap hold full ones)."""
    width = console.terminal_width(width)
    summary = printable_summary(findings_report.worded(summary))
    shown = shown_ranks(summary, all_ranks)
    parts = [_banner("Distributed Summary", width),
             *format.wrapped(f"world size {summary.world_size} · source {summary.source} · time unit {unit}",
                             width),
             *warning_lines(summary.warnings, width), *answer_lines(summary, unit, width, all_ranks)]
    parts += ["", ranks_section(summary, unit, width, shown)]
    from .live_text import section as live_section
    for section in (diagnosis_section(summary, unit, width) + collectives_section(summary, unit, width)
                    + sharded_section(summary, unit, width)
                    + alltoall_section(summary, width)
                    + profile_section(summary, width, shown) + model_profile_section(summary, unit, width, shown)
                    + live_section(summary.live or None, width)):
        parts += ["", section]
    if summary.whatif:
        from . import whatif_report
        parts += ["", whatif_report.render(summary.whatif, unit, width)]
    if summary.critical_path:
        from . import critical_path_report
        parts += ["", critical_path_report.render(summary.critical_path, unit, width)]
    parts += [part for section in tables.sections(summary, unit, width=width, **table_options)
              for part in ("", section)]
    parts += ["", *top_finding_lines(summary, unit, width)]
    return "\n".join(parts) + "\n"


def ranks_section(summary: Summary, unit: str, width: int, shown: list[int] | None) -> str:
    """The Distributed Summary table per rank and the lanes of each rank, under one banner."""
    table = distributed_table(summary, unit, width, shown)
    lanes = lanes_table(summary, width, shown)
    wide = min(max(tables.widest(table), tables.widest(lanes)), width)
    return "\n".join([_banner("Per rank", wide), table,
                      *(line for note in _hidden_note(summary, shown) for line in format.wrapped(note, width)),
                      "", lanes])


WRAP = format.WRAP  # console lines: warnings and notes wrap here where no width is given


def warning_lines(warnings: list[str], width: int = WRAP) -> list[str]:
    """The warnings first, above the answer and the tables whose meaning they change (renumbered
    ranks, missing ranks, clocks not verified, no steps), each wrapped at ``width`` characters; one said
    of many files once, with their count (format.grouped_warnings)."""
    lines = []
    for warning in format.grouped_warnings(warnings):
        lines += textwrap.wrap(warning, width, initial_indent="! ", subsequent_indent="  ", break_on_hyphens=False)
    return lines


def _mib(value) -> str:
    """Bytes in MiB to one decimal; a growth that rounds to zero is "0.0", never "-0.0" (a fit's
    slope of -40 kB/step printed a sign that said nothing)."""
    return "-" if value is None else f"{round(value / 2 ** 20, 1) + 0.0:.1f}"


def _section(title: str, table: str, lines: list[str], width: int | None) -> str:
    """A banner as wide as the table (within ``width``), the table, the notes wrapped at ``width``
    (None, for the HTML report's <pre>: as they are)."""
    wide = max(tables.widest(table), len(title) + 20)
    notes = lines if width is None else [part for line in lines for part in format.wrapped(line, width)]
    return "\n".join([_banner(title, wide if width is None else min(wide, width)), table, *notes])


def _fit(rows: list[list], headers: list[str], width: int | None, keep: int = 1, shrink: tuple[int, ...] = ()) -> str:
    """A table fitted to ``width``; None (the HTML report's <pre>): as it is."""
    if width is None:
        return tables.simple_table(rows, headers)
    return tables.fitted(rows, headers, keep=keep, width=width, shrink=shrink)


def profile_section(summary: Summary, width: int | None = None, shown: list[int] | None = None) -> list[str]:
    """FLOPs and memory per rank (analyses.profiles; ``shown`` ranks only, None: all); [] when no
    rank has either."""
    ranks = [r for r in summary.ranks if r.profile.flops_total is not None
             or r.profile.memory_peak_allocated_bytes is not None]
    if not ranks:
        return []
    rows = []
    for r in ranks:
        if shown is not None and r.rank not in shown:
            continue
        p, phases = r.profile, r.profile.flops_by_phase or {}
        rows.append([r.rank, "-" if p.flops_per_step is None else f"{p.flops_per_step / 1e9:.3f}",
                     " / ".join(f"{phases.get(k, 0) / 1e9:.3f}" for k in ("forward", "backward", "optimizer"))
                     if phases else "-",
                     "-" if p.achieved_tflops is None else f"{p.achieved_tflops:.3f}",
                     "-" if p.mfu is None else f"{100 * p.mfu:.1f}%",
                     p.memory_device or "-", _mib(p.memory_peak_allocated_bytes),
                     _mib(p.memory_peak_reserved_bytes), _mib(p.memory_growth_per_step_bytes)])
    text = _fit(rows, ["Rank", "GFLOPs/step", "fwd / bwd / opt", "TFLOPS", "MFU", "Memory on", "Peak alloc (MiB)",
                       "Peak reserved", "Growth/step"], width, shrink=(5,))
    notes = [f"({len(ranks) - len(rows)} more ranks: --all-ranks)"] if len(rows) < len(ranks) else []
    across = summary.profiles.achieved_tflops
    if across and len(ranks) > 1:
        notes.append(f"TFLOPS across ranks: min {across.min:.3f} (rank {across.min_rank}, the slowest), "
                     f"max {across.max:.3f} (rank {across.max_rank})")
    uncounted = sum(r.profile.flops_uncounted.ops for r in ranks)
    if uncounted:
        names = sorted({n for r in ranks for n in r.profile.flops_uncounted.by_name})
        notes.append(f"not counted: {uncounted} GEMM/conv op(s) without usable shapes ({', '.join(names[:5])}): "
                     "record_shapes=True counts them")
    if any(r.profile.mfu is None for r in ranks if r.profile.achieved_tflops is not None):
        notes.append("no MFU: set hardware.peak_tflops")
    notes.append("FLOPs: innermost GEMM/conv ops (Kineto flops args, else record_shapes Input Dims); TFLOPS over "
                 "ProfileStep time")
    return [_section("FLOPs and Memory", text, notes, width)]


def model_profile_section(summary: Summary, unit: str = "ms", width: int | None = None,
                          shown: list[int] | None = None) -> list[str]:
    """The live FLOPs profile (instrument(flops=True)): per rank (``shown`` ones only, None: all),
    then rank 0's largest modules by depth."""
    ranks = summary.model_profile.ranks if summary.model_profile else []
    if not ranks:
        return []

    def t(ns) -> str:
        return format.figure("x_ns", ns, unit)

    def num(value, digits=3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    rows = [[r.rank, f"{r.params:,}", num(r.fwd_flops_per_step / 1e9), num(r.bwd_flops_per_step / 1e9),
             t(r.fwd_latency_ns), t(r.bwd_latency_ns), t(r.step_latency_ns), t(r.iter_latency_ns),
             num(r.achieved_tflops, 4), num(r.samples_per_s, 1), "-" if r.mfu is None else f"{100 * r.mfu:.1f}%"
             ] for r in ranks if shown is None or r.rank in shown]
    text = _fit(rows, ["Rank", "Params", "fwd GFLOPs", "bwd GFLOPs", f"fwd ({unit})", f"bwd ({unit})",
                       f"step ({unit})", f"iter ({unit})", "TFLOPS", "samples/s", "MFU"], width)
    modules = _fit([[m.depth, m.name, f"{m.params:,}", f"{m.macs / 1e6:.2f}", t(m.fwd_latency_ns),
                     num(m.tflops, 4)] for m in ranks[0].modules],
                   ["Depth", f"Module (rank {ranks[0].rank})", "Params", "MMACs", f"fwd ({unit})", "TFLOPS"],
                   width, keep=2, shrink=(1,))
    notes = [f"({len(ranks) - len(rows)} more ranks: --all-ranks)"] if len(rows) < len(ranks) else []
    counted = ("FLOPs counted by torch.utils.flop_counter on the first recorded step (which alone pays for the "
               "counting and the module timing)")
    return ["\n".join([_section("Model FLOPs Profile (live, one step)", text, notes, width), "", modules,
                       *(format.wrapped(counted, width) if width else [counted])])]


def collectives_section(summary: Summary, unit: str, width: int = format.TABLE_WIDTH) -> list[str]:
    """The Collectives table: every kind per group, node span and size; [] when there is none."""
    table = summary.collectives
    rows = table.rows
    if not rows:
        return []
    peak = table.peak_busbw_gbps
    text = tables.fitted([format.collective_cells(row, unit, bool(peak)) for row in rows],
                         format.collective_headers(unit, bool(peak)), keep=2, width=width, shrink=(1,))
    partial = next((row for row in rows if row.matched != row.count), None)
    note = ("Count: the collectives (one per call across the group's ranks)"
            + (f"; matched/all where some were seen on one rank only ({partial.matched}/{partial.count}: "
               f"{partial.matched} of {partial.count} matched across ranks; an unmatched one's transfer is its "
               "whole duration, an upper bound)" if partial else "")
            + ". Wait share = sync wait / duration of the matched ones. busbw as nccl-tests"
            + (f"; peak {peak:g} GB/s (hardware.peak_busbw_gbps)" if peak else
               "; no % of peak: set hardware.peak_busbw_gbps"))
    return [_section("Collectives", text, [note], width)]


def sharded_section(summary: Summary, unit: str, width: int | None = format.TABLE_WIDTH) -> list[str]:
    """The All-gather / reduce-scatter table (per rank and phase, FSDP / ZeRO); [] when there is none."""
    from . import sharded_report
    rows = summary.sharded or []
    if not rows:
        return []
    text = _fit(sharded_report.cells(rows, _timer(unit)), sharded_report.HEADERS, width, keep=2)
    return [_section("All-gather / reduce-scatter by phase", text, [sharded_report.note(rows)], width)]


def alltoall_section(summary: Summary, width: int | None = format.TABLE_WIDTH) -> list[str]:
    """The All-to-all table (bytes per rank of each all-to-all group); [] when there is none."""
    from . import alltoall_report
    groups = summary.alltoall or []
    if not groups:
        return []
    text = _fit(alltoall_report.cells(groups), alltoall_report.HEADERS, width, keep=2)
    return [_section("All-to-all", text, [alltoall_report.note(groups)], width)]


def _timer(unit: str) -> Callable[[int | None], str]:
    """Durations as the Diagnosis writes them: '12.34 ms', '-' when unknown."""
    scale = UNITS[unit]

    def t(ns) -> str:
        return "-" if ns is None else f"{ns / scale:.2f} {unit}"
    return t


def _hanging(first: str, text: str, width: int, indent: int) -> list[str]:
    """``first`` + ``text`` wrapped at ``width``, continuation lines under column ``indent`` (a narrow
    console moves both left by as much, up to a third of the width)."""
    shift = max(indent - width // 3, 0)
    first, indent = first[min(shift, len(first) - len(first.lstrip(" "))):], indent - shift
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=" " * indent,
                         break_on_hyphens=False) or [first.rstrip()]


def _no_straggler_why(skew: Skew, unit: str) -> str | None:
    """The skew note that says why no straggler was named (``no_straggler_note``: its index), in
    the reader's unit (the typed notes are templates)."""
    index = skew.no_straggler_note
    notes = skew.notes
    return phrase(notes[index], unit) if isinstance(index, int) and 0 <= index < len(notes) else None


def answer_lines(summary: Summary, unit: str = "ms", width: int = WRAP, all_ranks: bool = False) -> list[str]:
    """The answer, first: the step time, the straggler verdict (and pipeline bubbles), the findings
    with what each fix saves, the checks one a line. A reader saw it only after every rank's rows
    (line 141 at 32 ranks)."""
    skew, t = summary.skew, _timer(unit)
    lines = []
    steps = skew.steps_summary
    if steps and steps.imbalance:
        imbalance = steps.imbalance
        lines += format.wrapped(
            f"Steps: {steps.count}, {format.STEP_TIME_DEFINITION} {t(steps.duration_median_ns)}; imbalance (slowest "
            f"rank / median rank) median {imbalance.median:.2f}, worst {imbalance.max:.2f} at step "
            f"{imbalance.max_step} (rank {imbalance.max_rank}); start spread median "
            f"{t(steps.start_spread_ns.median)}" + ("" if steps.clock_verified else " (clock not verified)"),
            width)
    if skew.matched:
        verdict = findings_report.straggler_line(skew.straggler, t, skew.unconfirmed_straggler or None,
                                                 _no_straggler_why(skew, unit))
        lines += format.wrapped(verdict, width)
        lines += [part for line in findings_report.pipeline_lines(skew.pipelines, t)
                  for part in format.wrapped(line, width)]
    lines += finding_lines(summary.findings, unit, width)
    return lines + check_lines(summary.checks, unit, width, all_ranks)


def finding_lines(findings: list[Finding], unit: str, width: int) -> list[str]:
    """Each finding: severity and what its fix saves, its message, its advice (wrapped under it)."""
    if not findings:
        return ["Findings: none."]
    t, lines = _timer(unit), format.wrapped(findings_report.HEADING, width)
    for number, finding in enumerate(findings, 1):
        message = phrase(finding.message, unit)  # the typed message is the template
        lines += _hanging(f"  {number}. {finding.severity.upper():<8} ", findings_report.saving(finding, t),
                          width, 14)
        lines += _hanging(" " * 14, message, width, 14)
        lines += _hanging(" " * 14 + "-> ", finding.advice, width, 17)
    return lines


def check_lines(checks: list[Check], unit: str, width: int, all_ranks: bool = False) -> list[str]:
    """The checks' counts, then one line per check (a long message wraps under itself), ranks with
    the same status and message on one line: all of them up to CHECK_LINES lines or with
    ``--all-ranks``, else the ones not PASS first. The table they were had rows that broke in the
    middle, and 32 ranks made 32 rows of one message."""
    if not checks:
        return []
    counts: dict[str, int] = {}
    groups: dict[tuple[str, str, str], list[Check]] = {}
    for check in checks:
        counts[check.status] = counts.get(check.status, 0) + 1
        groups.setdefault((check.status, check.check, phrase(check.message, unit)), []).append(check)
    keys = list(groups)
    if not all_ranks and len(keys) > CHECK_LINES:
        keys = [k for k in keys if k[0] != "PASS"][:CHECK_LINES]
    hidden = len(groups) - len(keys)
    note = "" if not hidden else " (" + (f"{len(keys)} line(s) not PASS shown; " if keys else "") + "each: --all-ranks)"
    lines = format.wrapped("Checks: " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) + note,
                           width)
    for status, name, message in keys:
        ranks = groups[(status, name, message)]
        # ranges or a stride, cut so that the line's head stays within 2/3 of the width (1,024 ranks made a
        # 1,164-character line); summary.json has every rank
        who = (f"rank {ranks[0].rank}" + ("" if ranks[0].device is None else f" device {ranks[0].device}")
               if len(ranks) == 1 else ranks_text(sorted({r.rank for r in ranks}), max(width * 2 // 3 - len(name) - 34,
                                                                                         16)))
        head = f"  {status:<5} {who} {name}: "
        if len(head) + len(message.split(" ", 1)[0]) > width:  # its first word would be cut: under the head
            lines += [head.rstrip(), *_hanging(" " * 8, message, width, 8)]
        else:
            lines += _hanging(head, message, width, 8)
    return lines


def diagnosis_section(summary: Summary, unit: str, width: int = WRAP) -> list[str]:
    """The Diagnosis's details under the answer: the matched collectives and the clocks, the five
    that waited the most, the notes; [] when there are none."""
    skew, t = summary.skew, _timer(unit)
    lines, table = [], ""
    if skew.matched:
        kinds = ", ".join(f"{k.name}{' [group ' + k.group + ']' if k.group else ''} {k.matched}"
                          for k in skew.kinds)
        counted = f"{skew.matched} matched ({kinds})" if skew.kinds else \
            "one rank's only (no other rank to match them with)"
        lines += format.wrapped(f"Collectives: {counted}; {_clock_text(skew, t)}", width)
        top = sorted(skew.collectives, key=lambda c: -c.arrival_skew_ns)[:5]
        rows = [[c.index, c.step, c.name, t(c.arrival_skew_ns), t(c.end_skew_ns), c.last_rank,
                 t(c.last_lateness_ns), t(c.transfer_ns), t(c.max_sync_ns)] for c in top]
        table = tables.fitted(rows, ["#", "Step", "Collective", "Arrival skew", "End skew", "Last rank",
                                     "Its lateness", "Transfer", "Max sync"], keep=1, width=width, shrink=(2,))
    notes = [part for note in skew.notes  # templates: in the reader's unit
             for part in format.wrapped(f"note: {phrase(note, unit)}", width)]
    if not lines and not notes:
        return []
    body = [*lines, *([table] if table else []), *notes]
    wide = min(max(len(line) for text in body for line in text.splitlines()), width)
    return ["\n".join([_banner("Diagnosis", wide), *body])]


def _clock_text(skew: Skew, t) -> str:
    """How far the clocks can be trusted, and how each rank's offset was found."""
    methods: dict[str, int] = {}
    for estimate in skew.alignment:
        if estimate.method != "reference":
            methods[estimate.method] = methods.get(estimate.method, 0) + 1
    unverified = [a.rank for a in skew.alignment if not a.verified]  # None: not verified either
    reference = next((f"rank {a.rank}" for a in skew.alignment if a.method == "reference"), "the reference rank")
    bound = skew.max_clock_uncertainty_ns
    return ("clock uncertainty " + (f"<= {t(bound)}" if bound is not None else "unknown (not verified)")
            + ("" if skew.aligned else " (alignment off)")
            + (f", unverified for rank(s) {', '.join(map(str, unverified[:8]))}"
               + (" ..." if len(unverified) > 8 else "") if unverified else "")
            + f"; offsets to {reference}'s clock: "
            + "; ".join(f"{n} rank(s) {method}" + (f" ({METHODS[method]})" if method in METHODS else "")
                        for method, n in sorted(methods.items())))


# how an offset was found, said where the Diagnosis counts the ranks of each method ("3 rank(s) same host")
METHODS = {"same host": "a host's ranks share one clock", "MPI ping-pong": "measured by timed messages",
           "collective ends": "matched collectives end together"}


def top_finding_lines(summary: Summary, unit: str, width: int) -> list[str]:
    """The report's last lines repeat its answer, next to where the outputs were written: the top
    finding's first clause and what its fix saves (or that there is none)."""
    findings = summary.findings
    if not findings:
        straggler = summary.skew.straggler
        named = f" (straggler: rank {straggler.rank})" if straggler else ""
        return format.wrapped("top finding: none" + named, width)
    top = findings[0]
    first = phrase(top.message, unit).split("; ")[0]
    return _hanging(f"top finding (1 of {len(findings)}, {top.severity.upper()}): ",
                    f"{first}; {findings_report.saving(top, _timer(unit))}", width, 4)


def _cost_cells(cost, unit: str) -> list[str]:
    """avg, max, min of a per-step time ("-" without steps)."""
    return [format.figure(key, getattr(cost, key, None), unit) for key in ("avg_ns", "max_ns", "min_ns")]


def render_benchmark(summary: BenchmarkSummary, unit: str = "ms", width: int | None = None) -> str:
    """The Perf Summary of a timer_only run: reader_cost, batch_cost, ips, Reader Ratio (``width``
    columns wide; None: the console's). A timer_only run's summary is its own record
    (sections/benchmark.py), not a ``Summary``."""
    bench = summary.benchmark  # numbers only: nothing from a trace to escape
    rows = []
    for rank in bench.ranks:
        rows.append([rank.rank, rank.steps,
                     *_cost_cells(rank.batch_cost, unit), *_cost_cells(rank.reader_cost, unit),
                     "-" if rank.ips.avg is None else f"{rank.ips.avg:.2f}",
                     "-" if rank.reader_ratio is None else f"{100 * rank.reader_ratio:.1f}%"])
    unit_label = bench.ranks[0].ips.unit if bench.ranks else "steps/s"
    table = tables.fitted(rows, ["Rank", "Steps", f"batch avg ({unit})", "max", "min", f"reader avg ({unit})",
                                 "max", "min", f"ips ({unit_label})", "Reader Ratio"], keep=2,
                          width=console.terminal_width(width))
    return _section("Perf Summary", table, [], console.terminal_width(width)) + "\n"


def next_steps(out, html: bool = True, width: int | None = None) -> str:
    """The line after a merge or a live run: where to look next, as commands to copy (wrapped at
    ``width``, None: the console's, between the suggestions, never inside a command); the folder escaped, as
    it can hold the host's name ({host})."""
    width, out = console.terminal_width(width), printable(out)
    pieces = ([f"open {out}/report.html;"] if html else []) + [
        f"`distprof whatif {out}` (what each fix saves),", f"`distprof trace {out}` (timeline for Perfetto),",
        f"`distprof diff {out} OTHER_OUT` (did a change help)"]
    split = []
    for piece in pieces:  # a suggestion wider than a line: its command and its explanation on lines of their own
        command, gap, why = piece.partition("` ")
        split += [command + "`", why] if gap and len(piece) > width - 6 else [piece]
    lines = ["next:"]
    for piece in split:
        if len(lines[-1]) + 1 + len(piece) > width and lines[-1].strip():
            lines.append("     ")
        lines[-1] += " " + piece
    return "\n".join(lines)
