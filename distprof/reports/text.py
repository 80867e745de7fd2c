"""Text report: the Distributed Summary in the style of the Paddle profiler, then warnings."""

from __future__ import annotations

from ..analyses.steptime import STEP_TIME_DEFINITION
from ..names import cap_names
from ..units import phrase
from . import findings as findings_report
from . import format, tables
from .tables import tabulate

UNITS = format.UNITS
_banner = format.banner


def distributed_table(summary: dict, unit: str = "ms") -> str:
    rows = []
    columns = format.summary_columns(summary["ranks"])
    for rank in summary["ranks"]:
        rows.append([rank["rank"], rank["steps"], *(format.figure(k, rank.get(k), unit) for k, _ in columns)])
    across = summary.get("across_ranks") or {}
    if len(summary["ranks"]) > 1 and across:
        for stat in ("min", "median", "max"):
            rows.append([stat, "", *(format.figure(k, (across.get(k) or {}).get(stat), unit) for k, _ in columns)])
        rows.append(["max at rank", "", *((across.get(k) or {}).get("max_rank", "-") for k, _ in columns)])
    headers = ["Rank", "Steps", *(format.column_title(key, title, unit) for key, title in columns)]
    return tables.fitted(rows, headers, keep=2)


def lanes_table(summary: dict) -> str:
    rows = [[r["rank"], r.get("source_file") or "-", r.get("pid") or "-",
             "-" if r.get("device") is None else r["device"],
             ", ".join(r["comm_lanes"]) or "-", ", ".join(r["compute_lanes"]) or "-"] for r in summary["ranks"]]
    return tabulate(rows, headers=["Rank", "Source", "PID", "Device", "Comm lanes", "Compute lanes"],
                    tablefmt="simple", disable_numparse=True)


def render(summary: dict, unit: str = "ms", **table_options) -> str:
    """The whole text report of a summary (names cut: summaries older than the cap hold full ones)."""
    summary = cap_names(summary)
    table = distributed_table(summary, unit)
    width = max(len(line) for line in table.splitlines())
    parts = [_banner("Distributed Summary", width),
             f"world size {summary['world_size']} · source {summary['source']} · time unit {unit}",
             *warning_lines(summary.get("warnings") or []), table, "", lanes_table(summary)]
    from .live_text import section as live_section
    for section in (extra_sections(summary, unit) + collectives_section(summary, unit) + profile_section(summary)
                    + model_profile_section(summary, unit) + live_section(summary.get("live"))):
        parts += ["", section]
    if summary.get("whatif"):
        from . import whatif_report
        parts += ["", whatif_report.render(summary["whatif"], unit)]
    if summary.get("critical_path"):
        from . import critical_path_report
        parts += ["", critical_path_report.render(summary["critical_path"], unit)]
    parts += [part for section in tables.sections(summary, unit, **table_options) for part in ("", section)]
    return "\n".join(parts) + "\n"


WRAP = format.WRAP  # console lines: warnings and notes wrap here


def warning_lines(warnings: list[str]) -> list[str]:
    """The warnings first, above the tables whose meaning they change (renumbered ranks, missing
    ranks, clocks not verified, no steps), each wrapped at ``WRAP`` characters."""
    import textwrap
    lines = []
    for warning in warnings:
        lines += textwrap.wrap(warning, WRAP, initial_indent="! ", subsequent_indent="  ", break_on_hyphens=False)
    return lines


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2 ** 20:.1f}"


def profile_section(summary: dict) -> list[str]:
    """FLOPs and memory per rank (analyses.profiles); [] when no rank has either."""
    ranks = [r for r in summary["ranks"] if r.get("flops_total") is not None
             or r.get("memory_peak_allocated_bytes") is not None]
    if not ranks:
        return []
    rows = []
    for r in ranks:
        phases = r.get("flops_by_phase") or {}
        rows.append([r["rank"], "-" if r.get("flops_per_step") is None else f"{r['flops_per_step'] / 1e9:.3f}",
                     " / ".join(f"{phases.get(k, 0) / 1e9:.3f}" for k in ("forward", "backward", "optimizer"))
                     if phases else "-",
                     "-" if r.get("achieved_tflops") is None else f"{r['achieved_tflops']:.3f}",
                     "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%",
                     r.get("memory_device") or "-", _mib(r.get("memory_peak_allocated_bytes")),
                     _mib(r.get("memory_peak_reserved_bytes")), _mib(r.get("memory_growth_per_step_bytes"))])
    text = tabulate(rows, headers=["Rank", "GFLOPs/step", "fwd / bwd / opt", "TFLOPS", "MFU", "Memory on",
                                   "Peak alloc (MiB)", "Peak reserved", "Growth/step"],
                    tablefmt="simple", disable_numparse=True)
    notes = []
    across = (summary.get("profiles") or {}).get("achieved_tflops")
    if across and len(ranks) > 1:
        notes.append(f"TFLOPS across ranks: min {across['min']:.3f} (rank {across['min_rank']}, the slowest), "
                     f"max {across['max']:.3f} (rank {across['max_rank']})")
    uncounted = sum((r.get("flops_uncounted") or {}).get("ops", 0) for r in ranks)
    if uncounted:
        names = sorted({n for r in ranks for n in ((r.get("flops_uncounted") or {}).get("by_name") or {})})
        notes.append(f"not counted: {uncounted} GEMM/conv op(s) without usable shapes ({', '.join(names[:5])}): "
                     "record_shapes=True counts them")
    if any(r.get("mfu") is None for r in ranks if r.get("achieved_tflops") is not None):
        notes.append("no MFU: set hardware.peak_tflops")
    notes.append("FLOPs: innermost GEMM/conv ops (Kineto flops args, else record_shapes Input Dims); TFLOPS over "
                 "ProfileStep time")
    width = max(len(line) for line in text.splitlines())
    return ["\n".join([_banner("FLOPs and Memory", width), text, *notes])]


def model_profile_section(summary: dict, unit: str = "ms") -> list[str]:
    """The live FLOPs profile (instrument(flops=True)): per rank, then rank 0's largest modules by depth."""
    ranks = ((summary.get("model_profile") or {}).get("ranks")) or []
    if not ranks:
        return []

    def t(ns) -> str:
        return format.figure("x_ns", ns, unit)

    def num(value, digits=3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    rows = [[r["rank"], f"{r['params']:,}", num(r["fwd_flops_per_step"] / 1e9), num(r["bwd_flops_per_step"] / 1e9),
             t(r.get("fwd_latency_ns")), t(r.get("bwd_latency_ns")), t(r.get("step_latency_ns")),
             t(r.get("iter_latency_ns")), num(r.get("achieved_tflops"), 4), num(r.get("samples_per_s"), 1),
             "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"] for r in ranks]
    text = tabulate(rows, headers=["Rank", "Params", "fwd GFLOPs", "bwd GFLOPs", f"fwd ({unit})", f"bwd ({unit})",
                                   f"step ({unit})", f"iter ({unit})", "TFLOPS", "samples/s", "MFU"],
                    tablefmt="simple", disable_numparse=True)
    modules = tabulate([[m["depth"], m["name"], f"{m['params']:,}", f"{m['macs'] / 1e6:.2f}",
                         t(m.get("fwd_latency_ns")), num(m.get("tflops"), 4)] for m in ranks[0].get("modules", [])],
                       headers=["Depth", f"Module (rank {ranks[0]['rank']})", "Params", "MMACs", f"fwd ({unit})",
                                "TFLOPS"], tablefmt="simple", disable_numparse=True)
    width = max(len(line) for line in text.splitlines())
    return ["\n".join([_banner("Model FLOPs Profile (live, one step)", width), text, "", modules,
                        "FLOPs counted by torch.utils.flop_counter on the first recorded step (which alone pays "
                        "for the counting and the module timing)"])]


def collectives_section(summary: dict, unit: str) -> list[str]:
    """The Collectives table: every kind per group, node span and size; [] when there is none."""
    table = summary.get("collectives") or {}
    rows = table.get("rows") or []
    if not rows:
        return []
    peak = table.get("peak_busbw_gbps")
    text = tabulate([format.collective_cells(row, unit, bool(peak)) for row in rows],
                    headers=format.collective_headers(unit, bool(peak)), tablefmt="simple", disable_numparse=True)
    width = max(len(line) for line in text.splitlines())
    notes = ["Count: matched/all where some were seen on one rank only (transfer = their whole duration, an "
             "upper bound). Wait share = sync wait / duration of the matched ones. busbw as nccl-tests"
             + (f"; peak {peak:g} GB/s (hardware.peak_busbw_gbps)" if peak else
                "; no % of peak: set hardware.peak_busbw_gbps")]
    return ["\n".join([_banner("Collectives", width), text,
                       *(line for note in notes for line in format.wrapped(note))])]


def extra_sections(summary: dict, unit: str) -> list[str]:
    """Sections after the Distributed Summary: the Diagnosis (findings first, costliest on top,
    then the check table, the collectives that waited the most and the straggler line), when
    the summary has one. Big jobs print counts and the non-PASS rows, not one row per rank."""
    checks, skew, findings = summary.get("checks"), summary.get("skew") or {}, summary.get("findings")
    if not checks and not skew and not findings:
        return []
    scale = UNITS[unit]

    def t(ns) -> str:
        return "-" if ns is None else f"{ns / scale:.2f} {unit}"

    lines = [findings_report.HEADING if findings else "Findings: none."]
    for number, finding in enumerate(findings or [], 1):
        message = phrase(finding.get("template", finding["message"]), unit)
        lines.append(f"  {number}. {finding['severity'].upper():<8} {findings_report.saving(finding, t)}")
        lines.append(f"     {'':<8} {message}")
        lines.append(f"     {'':<8} -> {finding['advice']}")

    checks = checks or []
    shown = checks if len(checks) <= 16 else [c for c in checks if c["status"] != "PASS"][:16]
    if checks:
        counts = {}
        for check in checks:
            counts[check["status"]] = counts.get(check["status"], 0) + 1
        lines += ["", "Checks: " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))
                  + (f" (showing {len(shown)} of {len(checks)} rows: not PASS)" if len(shown) < len(checks) else "")]
        rows = [[c["rank"], "-" if c["device"] is None else c["device"], c["check"], c["status"],
                 ", ".join(c["comm_lanes"]) or "-", ", ".join(c["compute_lanes"]) or "-", phrase(c["message"], unit)]
                for c in shown]
        if rows:  # lane lists and messages wrap inside their cells: the table fits format.TABLE_WIDTH
            lines.append(tabulate(rows, headers=["Rank", "Device", "Check", "Status", "Comm lanes",
                                                 "Compute lanes", "Message"], tablefmt="simple",
                                  disable_numparse=True, maxcolwidths=[None, None, None, None, 28, 28, 72]))

    if skew.get("matched"):
        kinds = ", ".join(f"{k['name']}{' [group ' + k['group'] + ']' if k.get('group') else ''} {k['matched']}"
                          for k in skew.get("kinds", []))
        methods: dict[str, int] = {}
        for estimate in skew.get("alignment", []):
            if estimate["method"] != "reference":
                methods[estimate["method"]] = methods.get(estimate["method"], 0) + 1
        unverified = [a["rank"] for a in skew.get("alignment", []) if not a.get("verified", True)]
        bound = skew.get("max_clock_uncertainty_ns")
        clock_line = ("clock uncertainty " + (f"<= {t(bound)}" if bound is not None else "unknown (not verified)")
                      + ("" if skew.get("aligned", True) else " (alignment off)")
                      + (f", unverified for rank(s) {', '.join(map(str, unverified[:8]))}"
                         + (" ..." if len(unverified) > 8 else "") if unverified else "")
                      + "; offsets: " + "; ".join(f"{n} rank(s) {method}" for method, n in sorted(methods.items())))
        lines += ["", f"Collectives: {skew['matched']} matched ({kinds}); {clock_line}"]
        top = sorted(skew.get("collectives", []), key=lambda c: -c["arrival_skew_ns"])[:5]
        rows = [[c["index"], c["step"], c["name"], t(c["arrival_skew_ns"]), t(c["end_skew_ns"]), c["last_rank"],
                 t(c["last_lateness_ns"]), t(c["transfer_ns"]), t(c["max_sync_ns"])] for c in top]
        lines.append(tabulate(rows, headers=["#", "Step", "Collective", "Arrival skew", "End skew", "Last rank",
                                             "Its lateness", "Transfer", "Max sync"],
                              tablefmt="simple", disable_numparse=True))
    steps = skew.get("steps_summary")
    if steps and steps.get("imbalance"):
        imbalance = steps["imbalance"]
        lines += ["", f"Steps: {steps['count']}, {STEP_TIME_DEFINITION} {t(steps['duration_median_ns'])}; "
                      "imbalance (slowest rank / median rank) "
                      f"median {imbalance['median']:.2f}, worst {imbalance['max']:.2f} at step {imbalance['max_step']} "
                      f"(rank {imbalance['max_rank']}); start spread median {t(steps['start_spread_ns']['median'])}"
                      + ("" if steps.get("clock_verified", True) else " (clock not verified)")]
    if skew.get("matched"):
        lines.append(findings_report.straggler_line(skew.get("straggler"), t))
        lines += findings_report.pipeline_lines(skew.get("pipelines") or [], t)
    lines += [f"note: {phrase(note, unit)}" for note in skew.get("note_templates", skew.get("notes", []))]
    width = min(max(len(line) for text in lines for line in text.splitlines()), 150)
    return [_banner("Diagnosis", width) + "\n" + "\n".join(fitted for text in lines for line in text.splitlines()
                                                           for fitted in format.wrapped(line))]


def render_benchmark(summary: dict, unit: str = "ms") -> str:
    """The Perf Summary of a timer_only run: reader_cost, batch_cost, ips, Reader Ratio."""
    bench = summary["benchmark"]
    rows = []
    for rank in bench["ranks"]:
        batch, reader, ips = rank["batch_cost"] or {}, rank["reader_cost"] or {}, rank["ips"]
        rows.append([rank["rank"], rank["steps"],
                     *(format.figure(k, batch.get(k), unit) for k in ("avg_ns", "max_ns", "min_ns")),
                     *(format.figure(k, reader.get(k), unit) for k in ("avg_ns", "max_ns", "min_ns")),
                     "-" if ips["avg"] is None else f"{ips['avg']:.2f}",
                     "-" if rank["reader_ratio"] is None else f"{100 * rank['reader_ratio']:.1f}%"])
    unit_label = bench["ranks"][0]["ips"]["unit"] if bench["ranks"] else "steps/s"
    table = tabulate(rows, headers=["Rank", "Steps", f"batch avg ({unit})", "max", "min", f"reader avg ({unit})",
                                    "max", "min", f"ips ({unit_label})", "Reader Ratio"],
                     tablefmt="simple", disable_numparse=True)
    width = max(len(line) for line in table.splitlines())
    return "\n".join([_banner("Perf Summary", width), table]) + "\n"


def next_steps(out, html: bool = True) -> str:
    """The line after a merge or a live run: where to look next, as commands to copy (wrapped at
    ``format.WRAP`` between the suggestions, never inside a command)."""
    pieces = ([f"open {out}/report.html;"] if html else []) + [
        f"`distprof whatif {out}` (what each fix saves),", f"`distprof trace {out}` (timeline for Perfetto),",
        f"`distprof diff {out} OTHER_OUT` (did a change help)"]
    lines = ["next:"]
    for piece in pieces:
        if len(lines[-1]) + 1 + len(piece) > format.WRAP and lines[-1].strip():
            lines.append("     ")
        lines[-1] += " " + piece
    return "\n".join(lines)
