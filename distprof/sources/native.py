"""Reader of distprof's own per-rank file (schema in collector.NATIVE_SCHEMA and the README)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from .. import events as ev
from ..clock import offset_to_root
from . import sane_rank

_INTEGERS = ("start_ns", "end_ns", "tid", "step")
_GOOD_ROW = " AND ".join(f"typeof(r.{column}) = 'integer'" for column in _INTEGERS)


def _connect(path: Path) -> sqlite3.Connection:
    # read-write so a crashed rank's WAL is readable (it holds the last committed steps)
    return sqlite3.connect(path)


def _query(path: Path) -> tuple[dict, list, int, int, list, dict]:
    """Meta, good range rows (a name id missing from distprof_names gets a placeholder name, so
    its time is kept), the counts of rows skipped and of names missing, clock rows, lane names."""
    try:
        with _connect(path) as db:
            meta = dict(db.execute("SELECT key, value FROM distprof_meta"))
            rows = db.execute(
                "SELECT r.start_ns, r.end_ns, r.tid, r.step, "
                "COALESCE(n.name, '<unknown name ' || r.name_id || '>'), COALESCE(n.category, ?), "
                "COALESCE(n.kind, ?), n.id IS NULL FROM distprof_ranges r "
                f"LEFT JOIN distprof_names n ON n.id = r.name_id WHERE {_GOOD_ROW}",
                (ev.USER, ev.RANGE)).fetchall()
            bad = db.execute(f"SELECT count(*) FROM distprof_ranges r WHERE NOT ({_GOOD_ROW})").fetchone()[0]
            clock_rows = db.execute("SELECT phase, offset_ns, rtt_ns FROM distprof_clock "
                                    "WHERE typeof(offset_ns) = 'integer' AND typeof(rtt_ns) = 'integer'").fetchall()
            lane_names = dict(db.execute("SELECT tid, name FROM distprof_threads"))
    except sqlite3.DatabaseError as error:
        raise ev.SourceError(f"{path}: unreadable distprof file ({error})") from None
    unnamed = sum(row[7] for row in rows)
    return meta, [row[:7] for row in rows], bad, unnamed, clock_rows, lane_names


def _int_meta(meta: dict, key: str, path: Path, warnings: list[str]) -> int | None:
    value = meta.get(key)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        warnings.append(f"{path}: {key} {value!r} in distprof_meta is not an integer; ignored")
        return None


def read(path: Path, config: dict) -> list[ev.RankTrace]:
    """One RankTrace from a native file; a rank that crashed gives its completed steps."""
    meta, rows, bad, unnamed, clock_rows, lane_names = _query(path)
    warnings: list[str] = []
    try:
        rank = int(meta["rank"])
        pid = int(meta["pid"])
    except (KeyError, ValueError, TypeError):
        raise ev.SourceError(f"{path}: distprof file without rank/pid metadata") from None
    rank, world_size, checked = sane_rank(rank, _int_meta(meta, "world_size", path, warnings), path)
    warnings += checked
    if meta.get("failed"):  # written by Profiler.__exit__ when the rank left through an exception
        warnings.append(f"{path}: {meta['failed']}; its completed steps are kept")
    if meta.get("complete") != "1":
        warnings.append(f"{path}: rank {rank} did not finish (crashed or killed); "
                        "its completed steps are kept")
    if bad:
        warnings.append(f"{path}: {bad} range row(s) with a missing or non-integer time, thread or step; skipped")
    if unnamed:
        warnings.append(f"{path}: {unnamed} range row(s) whose name id is missing from distprof_names; "
                        "kept as '<unknown name ID>'")
    if rows:
        start, end, lane, step = (np.array(col, dtype=np.int64) for col in list(zip(*rows))[:4])
        names, categories, kinds = (np.array(col, dtype=object) for col in list(zip(*rows))[4:])
    else:
        start = end = lane = step = np.empty(0, np.int64)
        names = categories = kinds = np.empty(0, object)
    step = _step_of(start, end, names, step)
    try:
        events = ev.make_events(rank=-1 if rank is None else rank, kind=kinds, category=categories, name=names,
                                start_ns=start, end_ns=end, lane=lane, lane_kind=ev.HOST_THREAD, pid=pid, step=step)
    except (ValueError, TypeError) as error:
        raise ev.SourceError(f"{path}: distprof file with invalid rows ({error})") from None
    offset_ns, uncertainty_ns = offset_to_root(clock_rows)
    return [ev.RankTrace(events=events, rank=rank, source="native", source_file=str(path), pid=pid,
                         device=None, clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns,
                         rank_from="distprof file" if rank is not None else "unknown", warnings=warnings,
                         meta={"world_size": world_size or 0, "hostname": meta.get("hostname", ""),
                               "lane_names": lane_names,
                               "process_cpu_ns": _int_meta(meta, "process_cpu_ns", path, warnings),
                               "elapsed_ns": _int_meta(meta, "elapsed_ns", path, warnings)})]


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
