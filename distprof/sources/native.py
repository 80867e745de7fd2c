"""Reader of distprof's own per-rank file (schema in collector.NATIVE_SCHEMA and the README)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .. import events as ev
from ..clock import offset_to_root
from . import read_only_uri, run_identity, sane_rank

_INTEGERS = ("start_ns", "end_ns", "tid", "step")
GROUP_PREFIX = "ranks "          # group name of a rank list: "ranks 0,1" (collector.group_text)
GROUP_FROM = "distprof.comm(group=[global ranks])"
_GOOD_ROW = " AND ".join(f"typeof(r.{column}) = 'integer'" for column in _INTEGERS)
# perf_counter_ns is CLOCK_MONOTONIC, ns since boot: no host runs 10 years without a reboot, so a
# time (or the offset between two hosts' clocks) beyond this is corrupt, and t + offset fits int64
MAX_CLOCK_NS = 10 * 365 * 86_400 * 10**9
MAX_RTT_NS = 60 * 10**9  # a ping-pong round trip (the best of 16 samples) longer than a minute is corrupt
WAL_MISSING = "distprof rank file whose -wal file is missing (copied without it?)"


@contextlib.contextmanager
def _connect(path: Path, own: bool) -> Iterator[sqlite3.Connection]:
    """A connection that is closed, not just committed. An input (``own`` False) is read through
    read_only_uri: nothing appears beside it. ``own``: a file of the running job (the live view,
    the profiler's own finish), whose writer may still be open or just killed: read-write, so
    whoever closes it last folds the WAL in and removes -wal/-shm (a read-only reader cannot)."""
    if own:
        with contextlib.closing(sqlite3.connect(Path(path).resolve().as_uri() + "?mode=rw", uri=True)) as db:
            yield db
        return
    with read_only_uri(path) as uri, contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        yield db


def _query(path: Path, window: tuple[int, int, int] | None = None,
           own: bool = False) -> tuple[dict, list, int, int, list, dict, list]:
    """Meta, good range rows (a name id missing from distprof_names gets a placeholder name, so
    its time is kept), the counts of rows skipped and of names missing, clock rows, lane names, host
    samples (``_host_rows``).
    ``window`` (rowid after, first step, last step): only those rows, found by rowid (the live
    view reads a growing file window by window, never all of it)."""
    where, arguments = _GOOD_ROW, (ev.USER, ev.RANGE)
    if window is not None:
        where += " AND r.rowid > ? AND r.step BETWEEN ? AND ?"
        arguments += tuple(int(v) for v in window)
    try:
        with _connect(path, own or window is not None) as db:
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
            host_rows = _host_rows(db)
    except sqlite3.DatabaseError as error:
        raise ev.SourceError(f"{path}: unreadable distprof file ({error})") from None
    unnamed = sum(row[-1] for row in rows)
    return meta, [row[:-1] for row in rows], bad, unnamed, clock_rows, lane_names, host_rows


HOST_COLUMNS = ("step", "clock_ns", "cpu_ns", "involuntary", "voluntary", "load_1m", "steal_ticks", "total_ticks",
                "runqueue_ns")


def _host_rows(db: sqlite3.Connection) -> list[tuple]:
    """The collector's host samples (collector.host_sample), the last of each step, in step order; none in
    files written before it kept them. Rows whose counters are not integers are left out."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'distprof_host'").fetchone():
        return []
    have = {row[1] for row in db.execute("PRAGMA table_info(distprof_host)")}
    runqueue = "CASE WHEN typeof(runqueue_ns) = 'integer' THEN runqueue_ns END" if "runqueue_ns" in have else "NULL"
    return db.execute(
        "SELECT step, clock_ns, cpu_ns, involuntary, voluntary, "
        "CASE WHEN typeof(load_1m) IN ('real', 'integer') THEN load_1m END, "
        "CASE WHEN typeof(steal_ticks) = 'integer' THEN steal_ticks END, "
        "CASE WHEN typeof(total_ticks) = 'integer' THEN total_ticks END, "
        f"{runqueue} FROM distprof_host h "
        "WHERE typeof(step) = 'integer' AND typeof(clock_ns) = 'integer' AND typeof(cpu_ns) = 'integer' "
        "AND typeof(involuntary) = 'integer' AND typeof(voluntary) = 'integer' "
        "AND h.rowid = (SELECT max(rowid) FROM distprof_host WHERE step = h.step) ORDER BY step").fetchall()


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


def read(path: Path, config: dict, window: tuple[int, int, int] | None = None,
         own: bool = False) -> list[ev.RankTrace]:
    """One RankTrace from a native file; a rank that crashed gives its completed steps.
    ``window``: (rowid after, first step, last step) of a live window (see _query); ``own``: a file
    of the running job, read as _connect says."""
    wal_missing = window is None and _wal_missing(path)  # before _query's connection makes one
    meta, rows, bad, unnamed, clock_rows, lane_names, host_rows = _query(path, window, own)
    warnings: list[str] = []
    rank, pid = _rank_and_pid(meta, path, warnings)
    rank, world_size, checked = sane_rank(rank, _int_meta(meta, "world_size", path, warnings), path)
    warnings += checked
    if meta.get("failed"):  # written by Profiler.__exit__ when the rank left through an exception
        warnings.append(f"{path}: {meta['failed']}; its completed steps are kept")
    if wal_missing and meta.get("complete") != "1":
        if not rows:
            raise ev.SourceError(f"{path}: {WAL_MISSING}: the main file holds no range rows; copy "
                                 f"{path.name}-wal next to it")
        warnings.append(f"{path}: rank {rank} did not finish (crashed or killed) and no {path.name}-wal is beside "
                        f"it; its completed steps are kept, but a {WAL_MISSING} lacks the steps after its last "
                        "checkpoint: copy the -wal next to it if there is one")
    elif meta.get("complete") != "1":
        warnings.append(f"{path}: rank {rank} did not finish (crashed or killed); "
                        "its completed steps are kept")
    if bad:
        warnings.append(f"{path}: {bad} range row(s) with a missing or non-integer time, thread or step; skipped")
    if unnamed:
        warnings.append(f"{path}: {unnamed} range row(s) whose name id is missing from distprof_names; "
                        "kept as '<unknown name ID>'")
    columns = _checked_rows(_row_columns(rows), path, warnings)
    columns["step"] = _step_of(columns["start"], columns["end"], columns["names"], columns["step"])
    collective, group, process_groups = _comm_fields(columns["names"], columns["kinds"], columns["groups"])
    try:
        events = ev.make_events(rank=-1 if rank is None else rank, kind=columns["kinds"],
                                category=columns["categories"], name=columns["names"], start_ns=columns["start"],
                                end_ns=columns["end"], lane=columns["lane"], lane_kind=ev.HOST_THREAD, pid=pid,
                                step=columns["step"], collective=collective, group=group, nbytes=columns["nbytes"],
                                peer=columns["peer"])
    except (ValueError, TypeError) as error:
        raise ev.SourceError(f"{path}: distprof file with invalid rows ({error})") from None
    offset_ns, uncertainty_ns = offset_to_root(_checked_clock(clock_rows, path, warnings))
    return [ev.RankTrace(events=events, rank=rank, source="native", source_file=str(path), pid=pid,
                         device=None, clock_offset_ns=offset_ns, clock_uncertainty_ns=uncertainty_ns,
                         rank_from="distprof file" if rank is not None else "unknown", warnings=warnings,
                         meta={"world_size": world_size or 0, "hostname": meta.get("hostname", ""),
                               "cpus": _int_meta(meta, "cpus", path, warnings),
                               "load_1m": _load_meta(meta),
                               "lane_names": lane_names,
                               "host_samples": dict(zip(HOST_COLUMNS, map(list, zip(*host_rows))))
                               if host_rows else {},
                               "process_cpu_ns": _int_meta(meta, "process_cpu_ns", path, warnings),
                               "elapsed_ns": _int_meta(meta, "elapsed_ns", path, warnings),
                               "run": _run(meta, events, path, warnings),
                               **({"process_groups": process_groups, "group_from": GROUP_FROM}
                                  if process_groups else {}),
                               **_model_profile(meta, path, warnings)})]


def _run(meta: dict, events: ev.Events, path: Path, warnings: list[str]) -> dict:
    """The rank's run identity (sources.run_identity): its ranges on the wall clock, by the
    ``wall_minus_clock_ns`` the collector measured when it started (from ``started_wall_ns``, when
    it wrote one), and the launcher's and distprof's run ids it recorded."""
    return run_identity(events.start_ns, events.end_ns, _int_meta(meta, "wall_minus_clock_ns", path, warnings),
                        _int_meta(meta, "started_wall_ns", path, warnings), _launcher_meta(meta, path, warnings))


def _launcher_meta(meta: dict, path: Path, warnings: list[str]) -> dict[str, str]:
    """The launcher's job ids and distprof's run id the collector recorded (a JSON object of texts);
    {} from older files, and with a warning when the value is not such an object."""
    text = meta.get("launcher_ids")
    if text is None:
        return {}
    try:
        ids = json.loads(text)
    except (TypeError, ValueError):
        ids = None
    if not isinstance(ids, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ids.items()):
        warnings.append(f"{path}: launcher_ids in distprof_meta is not an object of texts; ignored")
        return {}
    return ids


def _rank_and_pid(meta: dict, path: Path, warnings: list[str]) -> tuple[int | None, int]:
    """The rank (None when the file's is not a rank: the merge numbers it by input order, as it
    does a rank outside the world) and the pid. A file without them is not a rank file."""
    if "rank" not in meta or "pid" not in meta:
        raise ev.SourceError(f"{path}: distprof file without rank/pid metadata")
    try:
        pid = int(meta["pid"])
    except (ValueError, TypeError):
        raise ev.SourceError(f"{path}: pid {str(meta['pid'])[:40]!r} in distprof_meta is not an integer") from None
    try:
        rank = int(meta["rank"])
    except (ValueError, TypeError):
        warnings.append(f"{path}: rank {str(meta['rank'])[:40]!r} in distprof_meta is not an integer; "
                        "numbered by input order instead")
        return None, pid
    if rank < 0:
        warnings.append(f"{path}: rank {rank} in distprof_meta is negative, not a rank; numbered by input "
                        "order instead")
        return None, pid
    return rank, pid


def _row_columns(rows: list) -> dict:
    """The range rows of _query as columns."""
    if not rows:
        empty, texts = np.empty(0, np.int64), np.empty(0, object)
        return {"start": empty, "end": empty, "lane": empty, "step": empty, "names": texts, "categories": texts,
                "kinds": texts, "groups": texts, "nbytes": empty, "peer": empty}
    columns = list(zip(*rows))
    ints = [np.array(col, dtype=np.int64) for col in columns[:4] + columns[8:10]]
    texts = [np.array(col, dtype=object) for col in columns[4:8]]
    return dict(zip(("start", "end", "lane", "step", "nbytes", "peer"), ints)) | \
        dict(zip(("names", "categories", "kinds", "groups"), texts))


def _checked_rows(columns: dict, path: Path, warnings: list[str]) -> dict:
    """The rows whose times a rank's boot clock can hold, without the steps that cannot be steps.

    Times are perf_counter_ns (CLOCK_MONOTONIC: ns since boot), so one beyond MAX_CLOCK_NS either
    way, or ending before it starts, is corrupt and dropped: one near 2**63 made a 292-year window
    and overflowed once the clock offset was added. Step ranges of zero length are dropped and
    overlapping ones named (events.checked_steps, the check every reader shares)."""
    start, end = columns["start"], columns["end"]
    good = (np.abs(start) <= MAX_CLOCK_NS) & (np.abs(end) <= MAX_CLOCK_NS) & (end >= start)
    if not good.all():
        if not good.any():
            raise ev.SourceError(f"{path}: every range row has a time beyond {MAX_CLOCK_NS} ns from boot or "
                                 "ends before it starts: corrupt timestamps")
        first = int(np.flatnonzero(~good)[0])
        warnings.append(f"{path}: {int((~good).sum())} range row(s) dropped: a time beyond {MAX_CLOCK_NS} ns "
                        f"(10 years) from boot or an end before the start (e.g. {int(start[first])} to "
                        f"{int(end[first])} ns): corrupt timestamps")
    is_step = np.flatnonzero(good & (columns["names"] == ev.PROFILE_STEP))
    keep, told = ev.checked_steps(start[is_step], end[is_step], columns["step"][is_step],
                                  np.zeros(is_step.size, np.int64), path)
    warnings += told
    good[is_step[~keep]] = False
    return columns if good.all() else {key: values[good] for key, values in columns.items()}


def _checked_clock(clock_rows: list, path: Path, warnings: list[str]) -> list:
    """The ping-pong samples a clock can give: an offset between two boot clocks within
    MAX_CLOCK_NS, a round trip within 0..MAX_RTT_NS. Others are dropped with a warning (an offset
    of -3.07e18 and a negative uncertainty once reached summary.json); without any, the rank stays
    on its own clock and the merge treats its offset as unverified."""
    kept = [row for row in clock_rows if abs(row[1]) <= MAX_CLOCK_NS and 0 <= row[2] <= MAX_RTT_NS]
    if len(kept) < len(clock_rows):
        phase, offset, rtt = next(row for row in clock_rows if row not in kept)
        what = "the others are used" if kept else "this rank keeps its own clock (offset unverified)"
        warnings.append(f"{path}: {len(clock_rows) - len(kept)} distprof_clock sample(s) out of range dropped "
                        f"(e.g. {str(phase)[:20]}: offset_ns {offset}, rtt_ns {rtt}; an offset is within "
                        f"{MAX_CLOCK_NS} ns, a round trip 0 to {MAX_RTT_NS} ns): {what}")
    return kept


def _wal_missing(path: Path) -> bool:
    """A WAL-mode SQLite file (header bytes 18-19 = 2) with no -wal beside it, or an empty one (a
    read-only open leaves an empty one): what a rank file copied without its -wal looks like."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(20)
        wal = Path(f"{path}-wal")
        return head[18:20] == b"\x02\x02" and (not wal.exists() or wal.stat().st_size == 0)
    except OSError:
        return False


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
