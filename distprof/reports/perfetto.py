"""Merged timeline: all ranks in one Chrome-trace / Perfetto JSON (``trace.json.gz``).

Layout: one process per rank (``pid`` = rank), one track per lane (host thread or GPU stream),
on the aligned clock (each rank's own timestamps + its ``clock_offset_ns`` from the summary),
relative to one origin so microsecond timestamps keep nanosecond digits. Slices carry their
category as ``cat`` and a colour (``cname``); a flow arrow goes from each launching runtime call
to its kernel/memcpy/memset where the source knows the correlation id. The critical path (summary.json
``critical_path``) gets its own track per rank, category ``critical_path``, with flow arrows where it
moves between ranks. Ranks are written one at a time, so memory stays at one rank's events.

Serialization is vectorized (pandas ``to_json`` per rank), not a Python loop per event.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import events as ev
from .. import lanes as lanes_mod
from .. import outpaths
from ..joins import launch_join
from ..names import LONG_TEXT_CHARS, short_name

if TYPE_CHECKING:
    from ..results import RankResult, Summary
    from ..sections.whatif import CriticalPath

TRACE_FILE = "trace.json.gz"
# catapult's reserved colour names (Chrome's trace viewer); Perfetto also filters by ``cat``
CNAME = {ev.COMPUTE: "thread_state_running", ev.COMMUNICATION: "terrible", ev.MEMORY: "thread_state_iowait",
         ev.PHASE: "rail_response", ev.USER: "thread_state_runnable", ev.RUNTIME_CAT: "generic_work"}
STEP_CNAME = "grey"
_GPU_KINDS = (ev.KERNEL, ev.MEMCPY, ev.MEMSET)


MAX_SELECTION_PARTS = 1024  # ranges in one --ranks/--steps list
MAX_SELECTION_VALUE = 1 << 40  # larger bounds are typos, not ranks or steps


@dataclass(frozen=True)
class Selection:
    """A --ranks/--steps list as inclusive (low, high) ranges, never expanded: '0-999999999999'
    once built a set of a trillion numbers."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, value: object) -> bool:
        return isinstance(value, (int, np.integer)) and any(lo <= value <= hi for lo, hi in self.ranges)

    def mask(self, values: np.ndarray) -> np.ndarray:
        """Which of ``values`` are selected (vectorized: one comparison per range)."""
        values = np.asarray(values)
        chosen = np.zeros(len(values), dtype=bool)
        for lo, hi in self.ranges:
            chosen |= (values >= lo) & (values <= hi)
        return chosen

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


def parse_selection(text: str | None) -> Selection | None:
    """'0,2,5-7' -> ranges (0,0), (2,2), (5,7); None or '' -> None (everything). Raises
    ValueError on anything else, on a range whose end is below its start, and on absurd sizes."""
    if not text:
        return None
    parts = text.split(",")
    if len(parts) > MAX_SELECTION_PARTS:
        raise ValueError(f"more than {MAX_SELECTION_PARTS} items in {text[:40]!r}…")
    ranges = []
    for part in parts:
        low, sep, high = part.strip().partition("-")
        try:
            lo = int(low)
            hi = int(high) if sep else lo
        except ValueError:
            raise ValueError(f"expected numbers and ranges like 0,2,5-7, got {text!r}") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"{part.strip()!r} is not a range low-high with 0 <= low <= high")
        if hi > MAX_SELECTION_VALUE:
            raise ValueError(f"{part.strip()!r}: {hi} is beyond any rank or step number")
        ranges.append((lo, hi))
    return Selection(tuple(ranges))


def _selected(values: np.ndarray, chosen: Selection | set[int]) -> np.ndarray:
    """Mask of ``values`` in a Selection (or a plain set, as tests and callers may pass)."""
    if isinstance(chosen, Selection):
        return chosen.mask(values)
    return np.isin(values, sorted(chosen))


def _capped(names: pd.Series) -> np.ndarray:
    """Slice names cut at names.LONG_TEXT_CHARS (longer than in tables: the timeline is where a
    user reads a whole templated name; still bounded, a 100 kB name per slice adds up)."""
    long = names.str.len().to_numpy() > LONG_TEXT_CHARS
    if long.any():
        names = names.copy()
        names[long] = names[long].map(lambda n: short_name(n, LONG_TEXT_CHARS))
    return names.to_numpy()


def lanes(events: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The distinct lanes of a rank (host threads first, then GPU streams by device) and, per
    event, the index of its lane; a lane is (pid, device, lane, lane_kind)."""
    keys = ["lane_kind", "pid", "device", "lane"]
    frame = events[keys].astype({"lane_kind": str})
    frame = frame.assign(order=np.where(frame["lane_kind"] == ev.GPU_STREAM, 1, 0))
    table = frame.drop_duplicates(keys).sort_values(["order", "device", "pid", "lane"], kind="stable")
    table = table.reset_index(drop=True)
    index = frame.merge(table.reset_index()[[*keys, "index"]], on=keys, how="left")["index"].to_numpy()
    return table, index


def _lane_label(lane, names: dict | None = None) -> str:
    """Label of a row of lanes()' table (lanes.label: the same as in the summary)."""
    key = lanes_mod.LaneKey(int(lane.pid), int(lane.device), int(lane.lane), str(lane.lane_kind))
    return lanes_mod.label(key, names)


def _lines(frame: pd.DataFrame) -> str:
    if not len(frame):
        return ""
    return frame.to_json(orient="records", lines=True, double_precision=3, force_ascii=True).rstrip("\n")


def _with_args(main: str, args: pd.DataFrame) -> str:
    """Splice a JSON ``args`` object into each JSON line (both per row, in the same order)."""
    if not main:
        return ""
    left = pd.Series(main.split("\n")).str[:-1]
    right = pd.Series(_lines(args).split("\n"))
    return "\n".join((left + ',"args":' + right + "}").tolist())


def rank_records(events: pd.DataFrame, rank: int, offset_ns: int, origin_ns: int, label: str = "",
                 steps: Selection | set[int] | None = None, first_flow_id: int = 1,
                 lane_names: dict | None = None) -> tuple[str, int]:
    """Chrome-trace JSON lines of one rank (metadata, slices, instants, flows) and the next free
    flow id. ``origin_ns`` is on the aligned clock; ``steps`` keeps only those steps' events;
    ``lane_names`` (thread names by lane id) label lanes as the summary does ('DDP comm')."""
    if steps is not None:
        events = events[_selected(events["step"].to_numpy(), steps)]
    table, lane_index = lanes(events)
    tid = lane_index + 1
    meta = [{"ph": "M", "ts": 0, "pid": rank, "tid": 0, "name": "process_name",
             "args": {"name": f"rank {rank}" + (f" ({label})" if label else "")}},
            {"ph": "M", "ts": 0, "pid": rank, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank}}]
    for i, lane in enumerate(table.itertuples(index=False)):  # one iteration per lane
        meta += [{"ph": "M", "ts": 0, "pid": rank, "tid": i + 1, "name": "thread_name",
                  "args": {"name": _lane_label(lane, lane_names)}},
                 {"ph": "M", "ts": 0, "pid": rank, "tid": i + 1, "name": "thread_sort_index",
                  "args": {"sort_index": i}}]
    parts = [json.dumps(m, separators=(",", ":")) for m in meta]

    start = events["start_ns"].to_numpy() + (offset_ns - origin_ns)
    duration = events["end_ns"].to_numpy() - events["start_ns"].to_numpy()
    category = events["category"].astype(str).to_numpy()
    names = _capped(events["name"].astype(str))
    cname = pd.Series(category).map(CNAME).fillna("generic_work").to_numpy()
    cname = np.where(names == ev.PROFILE_STEP, STEP_CNAME, cname)
    kind = events["kind"].astype(str).to_numpy()
    instant = (duration == 0) | (kind == ev.MARK)
    slices = pd.DataFrame({"name": names, "cat": category, "ph": np.where(instant, "i", "X"),
                           "ts": start / 1000.0, "dur": duration / 1000.0, "pid": rank, "tid": tid,
                           "cname": cname})
    args = pd.DataFrame({"kind": kind, "step": events["step"].to_numpy(),
                         "phase": events["phase"].astype(str).to_numpy(),
                         "correlation_id": events["correlation_id"].to_numpy()})
    x, i = ~instant, instant
    parts.append(_with_args(_lines(slices[x]), args[x]))
    parts.append(_with_args(_lines(slices[i].drop(columns="dur").assign(s="t")), args[i]))

    flows, next_id = flow_records(events, tid, start, rank, first_flow_id)
    parts.append(flows)
    return "\n".join(p for p in parts if p), next_id


def flow_records(events: pd.DataFrame, tid: np.ndarray, start: np.ndarray, rank: int,
                 first_id: int) -> tuple[str, int]:
    """Flow start ('s') on the launching runtime call and flow end ('f', bound to the enclosing
    slice) on the GPU op, joined by ``joins.launch_join``."""
    kind = events["kind"].to_numpy()
    corr = events["correlation_id"].to_numpy()
    pid = events["pid"].to_numpy()
    calls = np.flatnonzero(kind == ev.RUNTIME)
    ops = np.flatnonzero(np.isin(kind, _GPU_KINDS))
    launched = launch_join(corr[ops], corr[calls], pid[ops], pid[calls])
    found = launched >= 0
    if not found.any():
        return "", first_id
    a, b = calls[launched[found]], ops[found]
    order = np.lexsort((b, a))  # launch order, then op order (as the flows were always numbered)
    a, b = a[order], b[order]
    ids = first_id + np.arange(a.size)
    common = {"name": "launch", "cat": "launch", "id": ids, "pid": rank}
    begin = pd.DataFrame({**common, "ph": "s", "ts": start[a] / 1000.0, "tid": tid[a]})
    end = pd.DataFrame({**common, "ph": "f", "bp": "e", "ts": start[b] / 1000.0, "tid": tid[b]})
    return _lines(begin) + "\n" + _lines(end), int(ids[-1]) + 1


CRITICAL_PATH = "critical_path"
CRITICAL_PATH_TID = 1_000_000  # its own track in each rank's process, after the lanes


def critical_path_records(path: CriticalPath | None, origin_ns: int, ranks: list[int],
                          steps: Selection | set[int] | None, first_flow_id: int) -> tuple[str, int]:
    """The critical path (summary.json ``critical_path``) as slices on a "critical path" track of
    each rank it visits (category ``critical_path``) and a flow arrow wherever it moves to
    another rank, so it can be followed across ranks; only ``ranks`` (those written) and
    ``steps``."""
    rows = [(seg.rank, seg.lane, seg.name, seg.kind, seg.start_ns, seg.end_ns, seg.phase, step.step, i)
            for i, step in enumerate(path.steps if path is not None else []) for seg in step.segments]
    frame = pd.DataFrame(rows, columns=["rank", "lane", "name", "kind", "start_ns", "end_ns", "phase", "step",
                                        "walk"])
    frame = frame[frame["rank"].isin(ranks) & (_selected(frame["step"].to_numpy(), steps) if steps is not None
                                                else True)].reset_index(drop=True)
    if not len(frame):
        return "", first_flow_id
    meta = [json.dumps({"ph": "M", "ts": 0, "pid": int(rank), "tid": CRITICAL_PATH_TID, "name": name,
                        "args": {"name": "critical path"} if name == "thread_name" else {"sort_index": -1}},
                       separators=(",", ":"))
            for rank in sorted(set(frame["rank"].tolist())) for name in ("thread_name", "thread_sort_index")]
    ts = (frame["start_ns"].to_numpy() - origin_ns) / 1000.0
    slices = pd.DataFrame({"name": frame["kind"] + ": " + frame["name"], "cat": CRITICAL_PATH, "ph": "X", "ts": ts,
                           "dur": (frame["end_ns"] - frame["start_ns"]).to_numpy() / 1000.0,
                           "pid": frame["rank"].to_numpy(), "tid": CRITICAL_PATH_TID, "cname": "terrible"})
    args = frame[["step", "kind", "lane", "phase"]]
    moves = np.flatnonzero((frame["walk"].to_numpy()[1:] == frame["walk"].to_numpy()[:-1])
                           & (frame["rank"].to_numpy()[1:] != frame["rank"].to_numpy()[:-1]))
    ids = first_flow_id + np.arange(moves.size)
    common = {"name": "critical path", "cat": CRITICAL_PATH, "id": ids, "tid": CRITICAL_PATH_TID}
    begin = pd.DataFrame({**common, "ph": "s", "ts": (frame["end_ns"].to_numpy()[moves] - origin_ns) / 1000.0,
                          "pid": frame["rank"].to_numpy()[moves]})
    end = pd.DataFrame({**common, "ph": "f", "bp": "e", "ts": ts[moves + 1],
                        "pid": frame["rank"].to_numpy()[moves + 1]})
    parts = ["\n".join(meta), _with_args(_lines(slices), args), _lines(begin), _lines(end)]
    return "\n".join(p for p in parts if p), int(first_flow_id + moves.size)


class TraceWriter:
    """Streams ranks into one gzip'd Chrome-trace JSON file: ``add_rank`` per rank, then ``close``."""

    def __init__(self, path: str | Path, origin_ns: int | None, metadata: dict | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._atomic = outpaths.atomic_open(self.path, "wb")
        self._file = gzip.open(self._atomic.__enter__(), "wt", encoding="ascii", compresslevel=6)
        self._file.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        self.origin_ns = origin_ns
        self.metadata = dict(metadata or {})
        self._first = True
        self._next_flow = 1
        self.ranks: list[int] = []
        self.events = 0
        self.selected = 0  # events of the ranks written that the step selection kept

    def add_rank(self, events: ev.Table, rank: int, offset_ns: int = 0, label: str = "",
                 steps: Selection | set[int] | None = None, lane_names: dict | None = None) -> None:
        events = events.to_frame()  # this writer builds its text with pandas (the trace command only)
        if self.origin_ns is None:  # no summary spans: the first rank written sets the origin
            self.origin_ns = int(events["start_ns"].min()) + offset_ns if len(events) else 0
        self.selected += len(events) if steps is None else int(_selected(events["step"].to_numpy(), steps).sum())
        text, self._next_flow = rank_records(events, rank, offset_ns, self.origin_ns, label, steps,
                                             self._next_flow, lane_names)
        if text:
            self._file.write(("" if self._first else ",\n") + text.replace("\n", ",\n"))
            self._first = False
            self.events += text.count("\n") + 1
        self.ranks.append(rank)

    def add_critical_path(self, path: CriticalPath | None, steps: Selection | set[int] | None = None) -> None:
        """The summary's critical path on the ranks written so far (call after ``add_rank``)."""
        text, self._next_flow = critical_path_records(path, self.origin_ns or 0, self.ranks, steps, self._next_flow)
        if text:
            self._file.write(("" if self._first else ",\n") + text.replace("\n", ",\n"))
            self._first = False
            self.events += text.count("\n") + 1

    def close(self) -> Path:
        meta = {**self.metadata, "origin_ns": self.origin_ns, "ranks": self.ranks,
                "clock": "aligned (own clock + clock_offset_ns), relative to origin_ns"}
        try:
            self._file.write('\n],"otherData":' + json.dumps(meta) + "}\n")
            self._file.close()
        except BaseException as error:  # a full disk at the last flush: the temporary file goes, the error stays
            self._atomic.__exit__(type(error), error, error.__traceback__)
            raise
        self._atomic.__exit__(None, None, None)  # replaces self.path
        return self.path

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            with contextlib.suppress(OSError):  # the body's error is the one to say (a full disk fails here too)
                self._file.close()
            self._atomic.__exit__(exc_type, exc, traceback)  # removes the temporary file


def origin_from_summary(summary: Summary) -> int | None:
    """Earliest aligned event time over the ranks (own span start + offset), from the tables."""
    spans = {e.rank: e.span_ns for e in summary.tables.by_rank}
    offsets = {r.rank: r.clock.offset_ns or 0 for r in summary.ranks}
    starts = [span[0] + offsets.get(rank, 0) for rank, span in spans.items() if span]
    return min(starts) if starts else None


def rank_map(summary: Summary) -> dict[tuple[str, int | None], RankResult]:
    """(source file, pid) -> the summary's row of that rank (rank number, clock offset)."""
    return {(str(r.source_file), r.pid): r for r in summary.ranks}
