"""The side process's reading of its node's rank files: a cursor per rank file, the windows ready to
reduce, a window's per-rank reduction and the window's summary (pipeline.combine, as the final one)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import outpaths

if TYPE_CHECKING:
    from .nodes import Remote

PROBE_S = 1.0           # how often a rank file not (yet) found, or another node's, is looked for again
STALE_SLACK_NS = 60 * 10**9  # a rank file that started this long before its reader is a previous run's


# -- rank files, windows -----------------------------------------------------------------------

class RankCursor:
    """One rank's file as a side process follows it: its last committed step, and the rowid below
    which every row belongs to an earlier step (so a window's rows are found without reading the
    file). With ``node``, a file whose ``live_node`` meta names another node is not this reader's:
    it is looked at again only when replaced."""

    def __init__(self, path: Path, not_before_ns: int, node: str | None = None) -> None:
        self.path, self.not_before_ns, self.node = path, not_before_ns, node
        self.db = None
        self.inode = None
        self.foreign = None  # inode of a file of another node's rank
        self.next_probe = 0.0
        self.committed: int | None = None
        self.floors: list[tuple[int, int]] = [(-1, 0)]  # (committed step, last rowid) seen

    def _open(self) -> None:
        import sqlite3
        now = time.monotonic()
        if now < self.next_probe:
            return
        self.next_probe = now + PROBE_S
        inode = os.stat(self.path).st_ino
        if inode == self.foreign:
            return
        # read-write, not read-only: the job is writing it, and if this reader closes last it folds the WAL in and
        # removes -wal/-shm (a read-only one would leave them); the URI is quoted (``?``, ``#``, ``%`` in a path)
        db = sqlite3.connect(Path(self.path).resolve().as_uri() + "?mode=rw", uri=True, timeout=0.5)
        meta = dict(db.execute("SELECT key, value FROM distprof_meta WHERE key IN ('started_wall_ns', 'live_node')"))
        if "started_wall_ns" not in meta or int(meta["started_wall_ns"]) < self.not_before_ns or \
                (self.node is not None and meta.get("live_node") != self.node):
            db.close()  # a previous run's file, one not yet set up, or another node's rank
            if self.node is not None and meta.get("live_node") not in (None, self.node):
                self.foreign = inode
            return
        self.db, self.inode, self.committed, self.floors = db, inode, None, [(-1, 0)]

    def poll(self) -> int | None:
        """The last committed step (None: no file of this run yet, or none committed)."""
        import sqlite3
        try:
            if self.db is not None and os.stat(self.path).st_ino != self.inode:
                self.db.close()
                self.db = None
            if self.db is None:
                self._open()
            if self.db is None:
                return None
            row = self.db.execute("SELECT rowid, step FROM distprof_ranges ORDER BY rowid DESC LIMIT 1").fetchone()
        except (OSError, sqlite3.Error, ValueError):
            return self.committed
        if row is not None and (self.committed is None or row[1] > self.committed):
            self.committed = int(row[1])
            self.floors.append((self.committed, int(row[0])))
        return self.committed

    def floor(self, first_step: int) -> int:
        """A rowid below which all rows are of steps before ``first_step``."""
        return max(rowid for step, rowid in self.floors if step < first_step)


def node_cursors(setup: dict) -> list[RankCursor]:
    """A cursor per rank of the job at the place its file has on this host (the out template with
    its rank and this host), taking only the files of this node's ranks."""
    not_before = int(setup["started_wall_ns"]) - STALE_SLACK_NS
    return [RankCursor(outpaths.expand(setup["template"], rank, setup["host"]) / f"rank{rank}.sqlite", not_before,
                       setup.get("node")) for rank in range(int(setup["world_size"]))]


def ready_windows(progress: list[int | None], next_first: int, every: int, final: bool) -> list[tuple[int, int]]:
    """The windows [A, B] that can be reported now: every rank has committed B, or one rank is a
    whole window past B (the others are behind), or the job stopped and some rank reached B."""
    known = [p for p in progress if p is not None]
    out, first = [], next_first
    while known:
        last = first + every - 1
        if not (min(p if p is not None else -1 for p in progress) >= last or max(known) >= last + every
                or (final and max(known) >= last)):
            break
        out.append((first, last))
        first += every
    return out


def reduce_window(cursor: RankCursor, window: tuple[int, int], config: dict):
    """One rank's RankResult over the window's steps (pipeline.reduce_rank on them, as the final
    summary reduces the whole file); None when its file has not reached the window or cannot be read."""
    from .. import events as ev
    from .. import pipeline
    from ..sources import native
    first, last = window
    if cursor.db is None or cursor.committed is None or cursor.committed < last:
        return None
    try:
        trace = native.read(cursor.path, config, (cursor.floor(first), first, last + 1))[0]
    except ev.SourceError:
        return None
    steps = trace.events.step
    trace = replace(trace, events=trace.events.take((steps >= first) & (steps <= last)), warnings=[])
    return pipeline.reduce_rank(trace, config)


def window_summary(cursors: list[RankCursor], window: tuple[int, int], config: dict, world_size: int,
                   remote: Remote | None = None):
    """The window's Summary by the one path (this node's ranks reduced here, the other nodes' as
    their senders reduced them; combine), the ranks left out as behind {rank: last committed step
    or None}, and the bytes each sent rank's result took on the wire {rank: bytes}."""
    from .. import pipeline
    results, behind, sizes = [], {}, {}
    for rank, cursor in enumerate(cursors):  # one per rank
        sent = remote.pop(window[0], rank) if remote is not None else None
        result = sent[0] if sent is not None else reduce_window(cursor, window, config)
        if result is None:
            behind[rank] = cursor.committed if cursor.db is not None or remote is None else remote.behind_step(rank)
            continue
        results.append(result)
        if sent is not None:
            sizes[rank] = sent[1]
    if not results:
        return None, behind, sizes
    summary = pipeline.combine(results, config, source="distprof (live)", world_size=world_size)
    return summary, behind, sizes
