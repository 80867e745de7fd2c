"""Display names: events keep full names; reports shorten them (100 kB names once made a 117 MB
summary.json)."""

from __future__ import annotations

MAX_NAME_CHARS = 256
ELLIPSIS = "…"


def short_name(name: object, limit: int = MAX_NAME_CHARS) -> str:
    """``name`` as text of at most ``limit`` characters: head and tail kept around an ellipsis, so
    templated kernel names stay recognisable at both ends. Control characters become spaces."""
    text = str(name)
    if any(ord(ch) < 32 for ch in text):
        text = "".join(" " if ord(ch) < 32 else ch for ch in text)
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    head = (limit - len(ELLIPSIS) + 1) // 2
    tail = limit - len(ELLIPSIS) - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")
