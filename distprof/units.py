"""Durations inside analysis messages: analyses embed numbers as tokens, reports phrase them.

An analysis that explains a finding in words writes each duration as ``duration(ns)`` (a token
holding the exact integer ns), never as text in a fixed unit; ``phrase`` turns the tokens into
text in the unit the reader asked for (``report --unit us``), or in a readable unit per value.
"""

from __future__ import annotations

import re

SCALE = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TOKEN = re.compile(r"\u27e6ns:(-?\d+)\u27e7")


def duration(ns: float) -> str:
    """A duration token for a message: the exact value, phrased later by the report."""
    return f"\u27e6ns:{int(round(ns))}\u27e7"


def fixed(value: float, spec: str) -> str:
    """``format(value, spec)`` without a negative zero: a change that rounds to nothing prints "0.0%"
    (or "+0.0" where a sign is asked for), never "-0.0%", which gave a direction nothing had."""
    text = format(value, spec)
    if text.startswith("-") and not any(char in "123456789in" for char in text):  # not -inf, not -nan
        return format(0.0, spec)
    return text


def readable(ns: float) -> str:
    """A duration in the unit that keeps it readable (1.2 s, 45.3 ms, 15.0 us, 80 ns)."""
    for unit in ("s", "ms", "us"):
        if abs(ns) >= SCALE[unit]:
            return f"{ns / SCALE[unit]:.{2 if unit == 's' else 1}f} {unit}"
    return f"{ns:.0f} ns"


def phrase(template: str, unit: str | None = None) -> str:
    """The message with every duration token written out: in ``unit`` (2 decimals) when given,
    else each in its readable unit."""
    def written(match: re.Match) -> str:
        ns = int(match.group(1))
        return readable(ns) if unit is None else f"{fixed(ns / SCALE[unit], '.2f')} {unit}"
    return _TOKEN.sub(written, template)
