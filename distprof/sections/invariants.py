"""What the reports rely on in a summary.json beyond the type of each leaf: lists that run in parallel are as
long as each other (a memory device's per-step peaks, the merged step times), a window is [first, last], the
tables' ranks are the ranks whose tables are there. Checked once, when a file is read (Summary.from_json), so that
a damaged file is one line naming the key, never a traceback in a renderer; the analyses that write a Summary hold
these by construction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..typed import JsonError

if TYPE_CHECKING:
    from ..results import Summary
    from .machine import Live
    from .tables import Tables


def check(summary: Summary) -> None:
    """A JsonError naming the first key of ``summary`` (read from summary.json) that breaks an invariant."""
    ranks = [row.rank for row in summary.ranks]
    if len(set(ranks)) != len(ranks):
        twice = next(r for r in ranks if ranks.count(r) > 1)
        raise JsonError(f"$.ranks[{ranks.index(twice, ranks.index(twice) + 1)}].rank: rank {twice} has two rows")
    for index, row in enumerate(summary.ranks):
        for at, device in enumerate(row.profile.memory_devices):
            _same_length(f"$.ranks[{index}].memory_devices[{at}]", "steps",
                         {name: getattr(device, name) for name in
                          ("steps", "step_peak_allocated_bytes", "step_peak_reserved_bytes")})
    if summary.tables:
        _tables(summary.tables)
    if summary.live:
        _live(summary.live)


def _same_length(where: str, first: str, lists: dict[str, list]) -> None:
    """Lists that run in parallel (one item per step, or per rank): each as long as ``lists[first]``."""
    size = len(lists[first])
    for name, values in lists.items():
        if values is not None and len(values) != size:
            raise JsonError(f"{where}.{name}: {len(values)} item(s), not one per item of {where}.{first} ({size})")


def _tables(tables: Tables) -> None:
    """tables.by_rank holds the tables of tables.ranks, in that order; each merged row's by-rank list has one
    item per rank; the merged steps' series are as long as the step list, the per-rank ones as their ranks."""
    shown = [entry.rank for entry in tables.by_rank]
    if shown != tables.ranks:
        raise JsonError(f"$.tables.ranks: {tables.ranks} are not the ranks of $.tables.by_rank ({shown})")
    merged, where = tables.merged, "$.tables.merged"
    rows = {"device": (merged.device, ("utilization_by_rank",)),
            "overview": (merged.overview, ("total_ns_by_rank",)),
            "model": (merged.model, ("cpu_total_ns_by_rank", "gpu_total_ns_by_rank")),
            "phase.rows": (merged.phase.rows if merged.phase else [], ("total_ns_by_rank",))}
    for table, (table_rows, names) in rows.items():
        for index, row in enumerate(table_rows):
            _same_length(f"{where}.{table}[{index}]", "ranks",
                         {"ranks": tables.ranks, **{name: getattr(row, name) for name in names}})
    steps = merged.steps
    _same_length(f"{where}.steps", "step", {name: getattr(steps, name) for name in
                                            ("step", "min_ns", "median_ns", "max_ns", "max_rank")})
    _same_length(f"{where}.steps", "ranks", {name: getattr(steps, name) for name in
                                             ("ranks", "mean_ns_by_rank", "max_ns_by_rank")})
    if steps.step and not steps.ranks:
        raise JsonError(f"{where}.steps.ranks: empty, with {len(steps.step)} step(s)")


def _live(live: Live) -> None:
    """Every window, alert and skipped window of the live view is [first step, last step]."""
    spans = [(f"$.live.windows[{i}].steps", w.steps) for i, w in enumerate(live.windows)]
    spans += [(f"$.live.alerts[{i}].steps", a.steps) for i, a in enumerate(live.alerts)]
    spans += [(f"$.live.skipped[{i}]", s) for i, s in enumerate(live.skipped)]
    for where, steps in spans:
        if len(steps) != 2 or steps[0] > steps[1]:
            raise JsonError(f"{where}: expected [first step, last step], got {steps}")
