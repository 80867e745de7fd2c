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


def ranks_text(ranks: list[int], limit: int = 120) -> str:
    """'rank 3' / 'ranks 0-2, 5' / 'ranks 3, 11, ..., 2043 (step 8, 256 ranks)' for sorted ``ranks``: ranges or
    a stride, cut at ``limit`` characters with the count (at 1,024 ranks a list of every other rank was a line
    of thousands of characters)."""
    if not ranks:
        return "no rank"
    shown = rank_ranges(ranks)
    step = ranks[1] - ranks[0] if len(ranks) >= 4 else 0
    if step > 1 and all(b - a == step for a, b in zip(ranks, ranks[1:])):
        stride = f"{ranks[0]}, {ranks[1]}, ..., {ranks[-1]} (step {step}, {len(ranks)} ranks)"
        if len(stride) < len(shown):  # 0, 2, 4, 6 says it best as it is
            return f"ranks {stride}"
    if len(shown) > limit:
        cut = shown[:limit].rsplit(", ", 1)[0]
        shown = f"{cut}, ... ({len(ranks)} ranks)"
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}"
