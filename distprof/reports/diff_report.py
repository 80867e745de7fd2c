"""Wording of a diff (``analyses/diff.py``): the text printed by ``distprof diff`` and an HTML
section with side-by-side bars. Everything here phrases numbers the analysis computed."""

from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from . import tables

DIFF_FILE = "diff.json"
DIFF_HTML = "diff.html"
UNITS = tables.UNITS
MOVERS_SHOWN = 10
RANKS_SHOWN = 32
_FIGURES = (("window_ns", "ProfileStep"), ("communication_ns", "Communication"), ("computation_ns", "Computation"),
            ("overlap_ns", "Overlap"), ("exposed_communication_ns", "Exposed comm"), ("idle_ns", "Idle"))
_UNIT_WORDS = {"kernel": "kernel", "user": "range", "phase": "phase"}
_REASONS = {"no_steps": "a run has no ProfileSteps", "step_counts_differ": "the step counts differ"}


def _t(ns: float | None, unit: str, sign: bool = False) -> str:
    if ns is None:
        return "-"
    return f"{ns / UNITS[unit]:{'+' if sign else ''}.2f}"


def _pct(relative: float | None) -> str:
    return "-" if relative is None else f"{100 * relative:+.1f}%"


def _banner(title: str, width: int = 100) -> str:
    return f"{title:-^{min(width, 100)}}"


def step_lines(step: dict, unit: str) -> list[str]:
    """Median step time before -> after, the change, its interval and the verdict."""
    head = "Step time (slowest rank per step, median): "
    if step["reason"] == "no_steps":
        return [head + "no ProfileSteps in " + ("either run" if not step["steps_before"] and not step["steps_after"]
                                                else "one run") + ": compare per unit of work below"]
    line = (f"{head}{_t(step['before_median_ns'], unit)} -> {_t(step['after_median_ns'], unit)} {unit}, "
            f"{_t(step['delta_ns'], unit, True)} {unit} ({_pct(step['relative'])})")
    counts = f"{step['steps_before']} vs {step['steps_after']} steps"
    if step["reason"] == "too_few_steps":
        return [line, f"  too few steps for an interval ({counts}; at least {step['min_steps']} a run)"]
    if step["significant"]:
        verdict = "significant"
    elif step["reason"] == "below_min_change":
        verdict = (f"not significant: the interval excludes 0 but the change is under {100 * step['min_change']:.0f}%, "
                   "within what two runs of one configuration differ by")
    else:
        verdict = "not significant: the interval includes 0"
    return [line, f"  {100 * step['level']:.0f}% bootstrap interval of the change "
                  f"[{_t(step['ci_low_ns'], unit, True)}, {_t(step['ci_high_ns'], unit, True)}] {unit}: "
                  f"{verdict} ({counts}, {step['resamples']} resamples, seed {step['seed']})"]


def _cell(b: float | None, a: float | None, unit: str) -> str:
    if b is None or a is None:
        return f"{_t(b, unit)} -> {_t(a, unit)}"
    return f"{_t(b, unit)} -> {_t(a, unit)} {'-' if not b else f'{100 * (a - b) / b:+.0f}%'}"


def ranks_table(diff: dict, unit: str) -> str:
    """One row per rank (and the across-ranks median and max): before -> after (relative)."""
    rows = []
    for entry in diff["ranks"][:RANKS_SHOWN]:
        b, a = entry["before"] or {}, entry["after"] or {}
        rows.append([entry["rank"], f"{b.get('steps', '-')} -> {a.get('steps', '-')}",
                     *(_cell(b.get(k), a.get(k), unit) for k, _ in _FIGURES)])
    across = diff.get("across_ranks") or {}
    if len(diff["ranks"]) > 1:
        for stat in ("median", "max"):
            pairs = [(across.get(k) or {}).get(stat) or {} for k, _ in _FIGURES]
            rows.append([stat, "", *(_cell(p.get("before"), p.get("after"), unit) for p in pairs)])
    headers = ["Rank", "Steps", *(f"{title} ({unit})" for _, title in _FIGURES)]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def unit_lines(unit_of_work: dict | None, unit: str) -> list[str]:
    """"after does 12% fewer <unit>s per window", and the time per unit, when it applies."""
    if unit_of_work is None:
        return ["Unit of work: none found in both runs (no repeated kernel, range or phase)"]
    u = unit_of_work
    word = _UNIT_WORDS[u["source"]]
    rate = u["per_second"]["relative"]
    more = "the same number of" if not rate else f"{abs(100 * rate):.0f}% {'more' if rate > 0 else 'fewer'}"
    lines = [f"Unit of work: the most frequent {word}, {tables._name(str(u['name']), 60)!r} ({u['count']['before']} "
             f"-> {u['count']['after']} calls): after does {more} of them per window"]
    if u["applies"]:
        lines[0] += f"; figures per unit because {_REASONS[u['reason']]}"
    for key, title in (("window_per_unit_ns", "wall time"), ("cost_per_unit_ns", f"{word} time"),
                       ("computation_per_unit_ns", "computation"), ("communication_per_unit_ns", "communication")):
        c = u[key]
        lines.append(f"  {title} per unit: {_t(c['before'], unit)} -> {_t(c['after'], unit)} {unit} "
                     f"({_pct(c['relative'])})")
    return lines if u["applies"] else lines[:2]


def movers_table(diff: dict, unit: str) -> str:
    per = {"step": "per rank-step", "unit": "per unit of work", "window": "per window"}[diff["movers_per"]]
    rows = []
    for m in [m for m in diff["movers"] if m["category"] != "bandwidth"][:MOVERS_SHOWN]:
        rows.append([m["category"], tables._name(str(m["name"]), 48), m["metric"].removesuffix("_ns"),
                     _t(m["before"], unit), _t(m["after"], unit), _t(m["delta"], unit, True), _pct(m["relative"])])
    for m in [m for m in diff["movers"] if m["category"] == "bandwidth"][:MOVERS_SHOWN]:
        rows.append(["bandwidth", tables._name(str(m["name"]), 48), "busbw GB/s", f"{m['before']:.2f}",
                     f"{m['after']:.2f}", f"{m['delta']:+.2f}", _pct(m["relative"])])
    if not rows:
        return "Top movers: nothing changed"
    table = tabulate(rows, headers=["What", "Name", "Metric", f"Before ({unit})", f"After ({unit})",
                                    "Delta", "Rel."], tablefmt="simple", disable_numparse=True)
    return f"Top movers ({per}, largest absolute change first):\n{table}"


def finding_lines(diff: dict, unit: str) -> list[str]:
    """Findings resolved / new / kept (by code), and the checks whose verdict changed."""
    lines = []
    for group, label in (("resolved", "resolved"), ("new", "new"), ("kept", "kept")):
        for entry in diff["findings"][group]:
            side = entry["after"] if group != "resolved" else entry["before"]
            cost = f", cost {_t(side['cost_ns'], unit)} {unit}" if side.get("cost_ns") is not None else ""
            was = (f" (before: {entry['before']['severity']}, {_t(entry['before']['cost_ns'], unit)} {unit})"
                   if group == "kept" and entry["before"].get("cost_ns") is not None else "")
            lines.append(f"  {label:<9} {entry['code']} ({side.get('severity')}{cost}){was}")
    if not lines:
        lines = ["  none in either run"]
    changed = diff.get("checks_changed") or []
    for check in changed[:RANKS_SHOWN]:
        device = "" if check["device"] is None else f" device {check['device']}"
        lines.append(f"  check     {check['check']} rank {check['rank']}{device}: "
                     f"{check['before'] or 'absent'} -> {check['after'] or 'absent'}")
    if len(changed) > RANKS_SHOWN:
        lines.append(f"  ... {len(changed) - RANKS_SHOWN} more checks changed (diff.json: checks_changed)")
    return ["Findings and checks:", *lines]


def warning_lines(diff: dict) -> list[str]:
    out = []
    for w in diff.get("warnings") or []:
        if w["code"] == "world_size_differs":
            out.append(f"! world sizes differ: {w['before']} before, {w['after']} after; ranks matched by number")
        elif w["code"] == "ranks_differ":
            out.append(f"! ranks only before: {w['only_before'] or 'none'}; only after: {w['only_after'] or 'none'}")
    return out


def render(diff: dict, labels: tuple[str, str], unit: str = "ms") -> str:
    """The whole text of ``distprof diff``."""
    table = ranks_table(diff, unit)
    width = max(len(line) for line in table.splitlines())
    ws, src = diff["world_size"], diff["source"]
    parts = [_banner("distprof diff", width),
             f"before: {labels[0]} (world size {ws['before']}, {src['before']})",
             f"after:  {labels[1]} (world size {ws['after']}, {src['after']})",
             *warning_lines(diff), "", *step_lines(diff["step_time"], unit),
             *unit_lines(diff["unit_of_work"], unit), "",
             "Distributed Summary per rank, before -> after and the relative change:", table, "",
             movers_table(diff, unit), "", *finding_lines(diff, unit)]
    return "\n".join(parts) + "\n"


def write_json(diff: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / DIFF_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(diff, indent=1) + "\n")
    tmp.replace(path)
    return path


# -- HTML --------------------------------------------------------------------------------------

def rank_bars(diff: dict, unit: str = "ms") -> str | None:
    """Per rank, the window split as in the report, before (upper, pale) and after (lower) side by side."""
    from . import html
    rows = [r for r in diff["ranks"][:64] if r["before"] or r["after"]]
    if not rows:
        return None
    plt, scale = html._pyplot(), UNITS[unit]
    fig, ax = plt.subplots(figsize=(11, min(1.4 + 0.5 * len(rows), 14)))

    def parts(figures: dict | None) -> dict:
        f = {k: (figures or {}).get(k) or 0 for k in ("computation_ns", "overlap_ns", "exposed_communication_ns",
                                                       "idle_ns")}
        return {"computation only": (f["computation_ns"] - f["overlap_ns"]) / scale, "overlap": f["overlap_ns"] / scale,
                "exposed communication": f["exposed_communication_ns"] / scale, "idle": f["idle_ns"] / scale}

    for offset, side, alpha in ((-0.2, "before", 0.45), (0.2, "after", 1.0)):
        y = [i + offset for i in range(len(rows))]
        left = [0.0] * len(rows)
        split = [parts(r[side]) for r in rows]
        for label, colour in html.COLOURS.items():
            values = [s[label] for s in split]
            ax.barh(y, values, left=left, height=0.38, color=colour, alpha=alpha,
                    label=f"{label} ({side})" if side == "after" else None)
            left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(rows)), [f"rank {r['rank']}\nbefore / after" for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(f"time in the analysed window ({unit})")
    ax.legend(ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return html._svg(fig)


def step_bars(step: dict, unit: str = "ms") -> str | None:
    """Each step's duration (slowest rank), before and after, with the medians."""
    if not step["before_steps_ns"] and not step["after_steps_ns"]:
        return None
    from . import html
    plt, scale = html._pyplot(), UNITS[unit]
    fig, ax = plt.subplots(figsize=(11, 3.2))
    for side, colour, shift in (("before", "#999999", -0.2), ("after", "#0072B2", 0.2)):
        values = [v / scale for v in step[f"{side}_steps_ns"]]
        ax.bar([i + shift for i in range(len(values))], values, width=0.4, color=colour, label=side)
        if step[f"{side}_median_ns"] is not None:
            ax.axhline(step[f"{side}_median_ns"] / scale, color=colour, linestyle="--", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel(f"step time, slowest rank ({unit})")
    ax.legend(frameon=False, fontsize=8, ncol=2)
    return html._svg(fig)


def section_html(diff: dict, labels: tuple[str, str], unit: str = "ms") -> str:
    """The diff as one HTML section (plots, then the text's tables), for a page or report.html."""
    from . import html
    step = diff["step_time"]
    lines = step_lines(step, unit) + unit_lines(diff["unit_of_work"], unit)
    body = [f'<h2>Diff: {html._e(labels[0])} &rarr; {html._e(labels[1])}</h2>',
            *(f'<p class="meta">{html._e(w)}</p>' for w in warning_lines(diff)),
            "".join(f"<p>{html._e(line)}</p>" for line in lines),
            html._figure(step_bars(step, unit), "Step time per step (slowest rank), before (grey) and after (blue); "
                                                "dashed: the medians."),
            html._figure(rank_bars(diff, unit), "Each rank's window before (pale, upper bar) and after (lower bar): "
                                                "computation only, overlap, exposed communication, idle."),
            f"<h3>Top movers</h3><pre>{html._e(movers_table(diff, unit))}</pre>",
            f"<h3>Findings and checks</h3><pre>{html._e(chr(10).join(finding_lines(diff, unit)[1:]))}</pre>"]
    return "".join(body)


def write_html(diff: dict, labels: tuple[str, str], out: str | Path, unit: str = "ms") -> Path:
    """``OUT/diff.html``: the section on a page of its own, styled like report.html."""
    from . import html
    path = Path(out) / DIFF_HTML
    path.parent.mkdir(parents=True, exist_ok=True)
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>distprof diff</title>"
            f"<style>{html._CSS}</style></head><body><main>{section_html(diff, labels, unit)}</main></body></html>\n")
    path.write_text(page, encoding="utf-8")
    return path
