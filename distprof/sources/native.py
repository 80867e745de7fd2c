"""Reader of distprof's own per-rank file (schema in collector.NATIVE_SCHEMA and the README)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from .. import events as ev
from ..clock import offset_to_root


def _connect(path: Path) -> sqlite3.Connection:
    # read-write so a crashed rank's WAL is readable (it holds the last committed steps)
    return sqlite3.connect(path)


def read(path: Path, config: dict) -> list[ev.RankTrace]:
    """One RankTrace from a native file; a rank that crashed gives its completed steps."""
    try:
        with _connect(path) as db:
            meta = dict(db.execute("SELECT key, value FROM distprof_meta"))
            rows = db.execute(
                "SELECT r.start_ns, r.end_ns, r.tid, r.step, n.name, n.category, n.kind "
                "FROM distprof_ranges r JOIN distprof_names n ON n.id = r.name_id").fetchall()
            clock_rows = db.execute("SELECT phase, offset_ns, rtt_ns FROM distprof_clock").fetchall()
            lane_names = dict(db.execute("SELECT tid, name FROM distprof_threads"))
    except sqlite3.DatabaseError as error:
        raise ev.SourceError(f"{path}: unreadable distprof file ({error})") from None
    warnings = []
    try:
        rank = int(meta["rank"])
        pid = int(meta["pid"])
    except (KeyError, ValueError):
        raise ev.SourceError(f"{path}: distprof file without rank/pid metadata") from None
    if meta.get("complete") != "1":
        warnings.append(f"{path}: rank {rank} did not finish (crashed or killed); "
                        "its completed steps are kept")
    if rows:
        start, end, lane, step = (np.array(col, dtype=np.int64) for col in list(zip(*rows))[:4])
        names, categories, kinds = (np.array(col, dtype=object) for col in list(zip(*rows))[4:])
    else:
        start = end = lane = step = np.empty(0, np.int64)
        names = categories = kinds = np.empty(0, object)
    step = _step_of(start, end, names, step)
    events = ev.make_events(rank=rank, kind=kinds, category=categories, name=names, start_ns=start,
                            end_ns=end, lane=lane, lane_kind=ev.HOST_THREAD, pid=pid, step=step)
    offset_ns, uncertainty_ns = offset_to_root(clock_rows)
    return [ev.RankTrace(events=events, rank=rank, source="native", source_file=str(path), pid=pid,
                         device=None, clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns,
                         rank_from="distprof file", warnings=warnings,
                         meta={"world_size": int(meta.get("world_size", 0)), "hostname": meta.get("hostname", ""),
                               "lane_names": lane_names})]


def _step_of(start: np.ndarray, end: np.ndarray, names: np.ndarray, flush_step: np.ndarray) -> np.ndarray:
    """Step of each range = the ProfileStep whose interval holds its start (−1 outside any);
    ProfileStep rows keep their own index."""
    is_step = names == ev.PROFILE_STEP
    if not is_step.any():
        return np.full(start.size, -1, np.int64)
    order = np.argsort(start[is_step])
    step_start, step_end, step_index = start[is_step][order], end[is_step][order], flush_step[is_step][order]
    position = np.clip(np.searchsorted(step_start, start, side="right") - 1, 0, None)
    inside = (start >= step_start[position]) & (start < step_end[position])
    result = np.where(inside, step_index[position], -1)
    result[is_step] = flush_step[is_step]
    return result
