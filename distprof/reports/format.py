"""How reports write numbers and names: the units, the Distributed Summary columns and their
titles, banners and duration/ratio formatting, in one place for text, tables and HTML."""

from __future__ import annotations

UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

# the Distributed Summary columns of every report: (summary.json key, title)
SUMMARY_COLUMNS = (("window_ns", "ProfileStep"), ("communication_ns", "Communication"),
                   ("computation_ns", "Computation"), ("memory_ns", "Memory"), ("overlap_ns", "Overlap"),
                   ("exposed_communication_ns", "Exposed comm"), ("overlap_ratio", "Overlap ratio"),
                   ("idle_ns", "Idle"), ("gpu_window_ns", "GPU window"))
# columns shown only when some rank has a value
OPTIONAL_COLUMNS = ("gpu_window_ns",)


def summary_columns(ranks: list[dict]) -> tuple:
    """The Distributed Summary columns of these rank rows: optional ones only where a rank has a value."""
    return tuple((key, title) for key, title in SUMMARY_COLUMNS
                 if key not in OPTIONAL_COLUMNS or any(row.get(key) is not None for row in ranks))


def banner(title: str, width: int) -> str:
    """A section title centred in a line of dashes."""
    return f"{title:-^{width}}"


def figure(key: str, value, unit: str) -> str:
    """A Distributed Summary value in ``unit`` (ratios as a percentage); '-' when unknown."""
    if value is None:
        return "-"
    if key == "overlap_ratio":
        return f"{100 * value:.1f}%"
    return f"{value / UNITS[unit]:.2f}"


def column_title(key: str, title: str, unit: str) -> str:
    """Header of a Distributed Summary column, with the unit where it has one."""
    return title if key == "overlap_ratio" else f"{title} ({unit})"
