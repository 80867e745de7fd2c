"""The per-rank view: what several per-rank analyses derive from one rank's events (the analysed
window, the work masks, the lane index), built once per rank and shared.

``pipeline.reduce_rank`` opens :func:`shared` around its analyses; inside it, the functions that
build those pieces (``distributed.analysis_window``, ``distributed.work_masks``,
``lanes.lane_index``) compute each once for that events table and hand the same arrays to every
caller. Outside it (tests, reports, the live view) they compute afresh, as before. The memo is
per context (a ``ContextVar``), so a reduce on another thread never sees this one's view.
Imports nothing of distprof (every module may use it without an import circle).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_VIEW: ContextVar[tuple[Any, dict] | None] = ContextVar("distprof_rank_view", default=None)


@contextmanager
def shared(events: Any) -> Iterator[None]:
    """Within this block, pieces of the view of ``events`` (this very table) are built once."""
    token = _VIEW.set((events, {}))
    try:
        yield
    finally:
        _VIEW.reset(token)


def once(events: Any, key: tuple, build: Callable[[], T]) -> T:
    """``build()``, or the value it gave for ``key`` on this same ``events`` table inside the
    current :func:`shared` block. Callers must treat the value as read-only."""
    view = _VIEW.get()
    if view is None or view[0] is not events:
        return build()
    pieces = view[1]
    if key not in pieces:
        pieces[key] = build()
    return pieces[key]
