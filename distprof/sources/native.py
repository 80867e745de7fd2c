"""Reader of distprof's own per-rank file (schema in collector.NATIVE_SCHEMA and the README)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import numpy as np

from .. import events as ev
from ..clock import offset_to_root
from . import sane_rank

_INTEGERS = ("start_ns", "end_ns", "tid", "step")
GROUP_PREFIX = "ranks "          # group name of a rank list: "ranks 0,1" (collector.group_text)
GROUP_FROM = "distprof.comm(group=[global ranks])"
_GOOD_ROW = " AND ".join(f"typeof(r.{column}) = 'integer'" for column in _INTEGERS)


def _connect(path: Path) -> sqlite3.Connection:
    # read-write so a crashed rank's WAL is readable (it holds the last committed steps)
    return sqlite3.connect(path)


def _query(path: Path, window: tuple[int, int, int] | None = None) -> tuple[dict, list, int, int, list, dict]:
    """Meta, good range rows (a name id missing from distprof_names gets a placeholder name, so
    its time is kept), the counts of rows skipped and of names missing, clock rows, lane names.
    ``window`` (rowid after, first step, last step): only those rows, found by rowid (the live
    view reads a growing file window by window, never all of it)."""
    where, arguments = _GOOD_ROW, (ev.USER, ev.RANGE)
    if window is not None:
        where += " AND r.rowid > ? AND r.step BETWEEN ? AND ?"
        arguments += tuple(int(v) for v in window)
    try:
        with contextlib.closing(_connect(path)) as db:  # closed, not just committed: no -wal/-shm left behind
            meta = dict(db.execute("SELECT key, value FROM distprof_meta"))
            rows = db.execute(
                "SELECT r.start_ns, r.end_ns, r.tid, r.step, "
                "COALESCE(n.name, '<unknown name ' || r.name_id || '>'), COALESCE(n.category, ?), "
                f"COALESCE(n.kind, ?), {_comm_columns(db)}, n.id IS NULL FROM distprof_ranges r "
                f"LEFT JOIN distprof_names n ON n.id = r.name_id WHERE {where}", arguments).fetchall()
            bad = 0 if window is not None else \
                db.execute(f"SELECT count(*) FROM distprof_ranges r WHERE NOT ({_GOOD_ROW})").fetchone()[0]
            clock_rows = db.execute("SELECT phase, offset_ns, rtt_ns FROM distprof_clock "
                                    "WHERE typeof(offset_ns) = 'integer' AND typeof(rtt_ns) = 'integer'").fetchall()
            lane_names = dict(db.execute("SELECT tid, name FROM distprof_threads"))
    except sqlite3.DatabaseError as error:
        raise ev.SourceError(f"{path}: unreadable distprof file ({error})") from None
    unnamed = sum(row[-1] for row in rows)
    return meta, [row[:-1] for row in rows], bad, unnamed, clock_rows, lane_names


def _comm_columns(db: sqlite3.Connection) -> str:
    """comm_group, nbytes, peer of each row's name (schema 2); files of schema 1 have no such
    columns and read as unknown ("" / -1), as does a value of the wrong type."""
    have = {row[1] for row in db.execute("PRAGMA table_info(distprof_names)")}
    if not {"comm_group", "nbytes", "peer"} <= have:
        return "'', -1, -1"
    return ("CASE WHEN typeof(n.comm_group) = 'text' THEN n.comm_group ELSE '' END, "
            "CASE WHEN typeof(n.nbytes) = 'integer' AND n.nbytes >= 0 THEN n.nbytes ELSE -1 END, "
            "CASE WHEN typeof(n.peer) = 'integer' AND n.peer >= 0 THEN n.peer ELSE -1 END")


def _int_meta(meta: dict, key: str, path: Path, warnings: list[str]) -> int | None:
    value = meta.get(key)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        warnings.append(f"{path}: {key} {value!r} in distprof_meta is not an integer; ignored")
        return None


def _load_meta(meta: dict) -> float | None:
    """The higher of the 1-minute load averages the collector saw at start and stop (None: not
    recorded, e.g. files of older versions or a platform without getloadavg)."""
    loads = []
    for key in ("load_1m_start", "load_1m_stop"):
        try:
            loads.append(float(meta[key]))
        except (KeyError, TypeError, ValueError):
            continue
    return max(loads) if loads else None


def read(path: Path, config: dict, window: tuple[int, int, int] | None = None) -> list[ev.RankTrace]:
    """One RankTrace from a native file; a rank that crashed gives its completed steps.
    ``window``: (rowid after, first step, last step) of a live window (see _query)."""
    meta, rows, bad, unnamed, clock_rows, lane_names = _query(path, window)
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
        columns = list(zip(*rows))
        start, end, lane, step = (np.array(col, dtype=np.int64) for col in columns[:4])
        names, categories, kinds, group_texts = (np.array(col, dtype=object) for col in columns[4:8])
        nbytes, peer = (np.array(col, dtype=np.int64) for col in columns[8:10])
    else:
        start = end = lane = step = nbytes = peer = np.empty(0, np.int64)
        names = categories = kinds = group_texts = np.empty(0, object)
    step = _step_of(start, end, names, step)
    collective, group, process_groups = _comm_fields(names, kinds, group_texts)
    try:
        events = ev.make_events(rank=-1 if rank is None else rank, kind=kinds, category=categories, name=names,
                                start_ns=start, end_ns=end, lane=lane, lane_kind=ev.HOST_THREAD, pid=pid, step=step,
                                collective=collective, group=group, nbytes=nbytes, peer=peer)
    except (ValueError, TypeError) as error:
        raise ev.SourceError(f"{path}: distprof file with invalid rows ({error})") from None
    offset_ns, uncertainty_ns = offset_to_root(clock_rows)
    return [ev.RankTrace(events=events, rank=rank, source="native", source_file=str(path), pid=pid,
                         device=None, clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns,
                         rank_from="distprof file" if rank is not None else "unknown", warnings=warnings,
                         meta={"world_size": world_size or 0, "hostname": meta.get("hostname", ""),
                               "cpus": _int_meta(meta, "cpus", path, warnings),
                               "load_1m": _load_meta(meta),
                               "lane_names": lane_names,
                               "process_cpu_ns": _int_meta(meta, "process_cpu_ns", path, warnings),
                               "elapsed_ns": _int_meta(meta, "elapsed_ns", path, warnings),
                               **({"process_groups": process_groups, "group_from": GROUP_FROM}
                                  if process_groups else {}),
                               **_model_profile(meta, path, warnings)})]


def _model_profile(meta: dict, path: Path, warnings: list[str]) -> dict:
    """The live FLOPs profile (distprof.torch.instrument(flops=True)) stored as JSON text, if any."""
    text = meta.get("model_profile")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        warnings.append(f"{path}: model_profile in distprof_meta is not JSON; ignored")
        return {}
    return {"model_profile": value} if isinstance(value, dict) else {}


def _comm_fields(names: np.ndarray, kinds: np.ndarray, group_texts: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """collective (comm_op rows: the kind of their name, one lookup per distinct name), group name
    ("ranks 0,1" from the stored rank text; "" = the world) and {group name: [global ranks]}."""
    is_comm = kinds == ev.COMM_OP
    collective = np.full(names.size, "", dtype=object)
    if is_comm.any():
        distinct, codes = ev.distinct_texts(names[is_comm])
        collective[is_comm] = np.array([ev.collective_kind(name) for name in distinct], dtype=object)[codes]
    distinct, codes = ev.distinct_texts(group_texts)
    labels = np.array([GROUP_PREFIX + text if text else "" for text in distinct], dtype=object)
    process_groups = {}
    for text, label in zip(distinct, labels):  # one per distinct group
        try:
            process_groups[label] = [int(r) for r in text.split(",")] if text else None
        except ValueError:  # not written by distprof: keep the text as the name, members unknown
            process_groups[label] = None
    group = labels[codes] if names.size else np.empty(0, object)
    return collective, group, {k: v for k, v in process_groups.items() if v is not None}


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
