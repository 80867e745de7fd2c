"""Rank lists as short text: a job of a million ranks must not make a million-item message."""

from __future__ import annotations

from collections.abc import Iterable


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'; empty -> '(none)'."""
    parts: list[list[int]] = []
    for rank in sorted(ranks):
        if parts and rank <= parts[-1][1] + 1:
            parts[-1][1] = max(parts[-1][1], rank)
        else:
            parts.append([rank, rank])
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in parts) or "(none)"
