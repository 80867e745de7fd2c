"""Text report: the Distributed Summary in the style of the Paddle profiler, then warnings."""

from __future__ import annotations

from tabulate import tabulate

from . import tables

UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_COLUMNS = (("window_ns", "ProfileStep"), ("communication_ns", "Communication"),
            ("computation_ns", "Computation"), ("overlap_ns", "Overlap"),
            ("exposed_communication_ns", "Exposed comm"), ("overlap_ratio", "Overlap ratio"),
            ("idle_ns", "Idle"))


def _banner(title: str, width: int) -> str:
    return f"{title:-^{width}}"


def _value(key: str, value, scale: int) -> str:
    if value is None:
        return "-"
    if key == "overlap_ratio":
        return f"{100 * value:.1f}%"
    return f"{value / scale:.2f}"


def distributed_table(summary: dict, unit: str = "ms") -> str:
    scale = UNITS[unit]
    rows = []
    for rank in summary["ranks"]:
        rows.append([rank["rank"], rank["steps"], *(_value(k, rank[k], scale) for k, _ in _COLUMNS)])
    across = summary.get("across_ranks") or {}
    if len(summary["ranks"]) > 1 and across:
        for stat in ("min", "median", "max"):
            rows.append([stat, "", *(_value(k, (across.get(k) or {}).get(stat), scale) for k, _ in _COLUMNS)])
        rows.append(["max at rank", "", *((across.get(k) or {}).get("max_rank", "-") for k, _ in _COLUMNS)])
    headers = ["Rank", "Steps", *(f"{title}" + ("" if key == "overlap_ratio" else f" ({unit})")
                                  for key, title in _COLUMNS)]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def lanes_table(summary: dict) -> str:
    rows = [[r["rank"], r.get("source_file") or "-", r.get("pid") or "-",
             "-" if r.get("device") is None else r["device"],
             ", ".join(r["comm_lanes"]) or "-", ", ".join(r["compute_lanes"]) or "-"] for r in summary["ranks"]]
    return tabulate(rows, headers=["Rank", "Source", "PID", "Device", "Comm lanes", "Compute lanes"],
                    tablefmt="simple", disable_numparse=True)


def render(summary: dict, unit: str = "ms", **table_options) -> str:
    """The whole text report of a summary."""
    table = distributed_table(summary, unit)
    width = max(len(line) for line in table.splitlines())
    parts = [_banner("Distributed Summary", width),
             f"world size {summary['world_size']} · source {summary['source']} · time unit {unit}",
             table, "", lanes_table(summary)]
    for section in extra_sections(summary, unit):
        parts += ["", section]
    parts += [part for section in tables.sections(summary, unit, **table_options) for part in ("", section)]
    if summary.get("warnings"):
        parts += ["", _banner("Warnings", width), *(f"! {w}" for w in summary["warnings"])]
    return "\n".join(parts) + "\n"


def extra_sections(summary: dict, unit: str) -> list[str]:
    """Sections after the Distributed Summary (diagnosis, other summaries) when present."""
    return []


def render_benchmark(summary: dict, unit: str = "ms") -> str:
    """The Perf Summary of a timer_only run: reader_cost, batch_cost, ips, Reader Ratio."""
    scale = UNITS[unit]
    bench = summary["benchmark"]
    rows = []
    for rank in bench["ranks"]:
        batch, reader, ips = rank["batch_cost"] or {}, rank["reader_cost"] or {}, rank["ips"]
        rows.append([rank["rank"], rank["steps"],
                     *(_value("x_ns", batch.get(k), scale) for k in ("avg_ns", "max_ns", "min_ns")),
                     *(_value("x_ns", reader.get(k), scale) for k in ("avg_ns", "max_ns", "min_ns")),
                     "-" if ips["avg"] is None else f"{ips['avg']:.2f}",
                     "-" if rank["reader_ratio"] is None else f"{100 * rank['reader_ratio']:.1f}%"])
    unit_label = bench["ranks"][0]["ips"]["unit"] if bench["ranks"] else "steps/s"
    table = tabulate(rows, headers=["Rank", "Steps", f"batch avg ({unit})", "max", "min", f"reader avg ({unit})",
                                    "max", "min", f"ips ({unit_label})", "Reader Ratio"],
                     tablefmt="simple", disable_numparse=True)
    width = max(len(line) for line in table.splitlines())
    return "\n".join([_banner("Perf Summary", width), table]) + "\n"
