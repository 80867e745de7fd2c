"""Lane identity: one key for a lane (GPU stream or host thread) and one way to label it.

Stream and thread ids repeat across processes and devices (one nsys report can hold several
processes), so a lane is (pid, device, lane, kind). Every analysis, report and the Perfetto
writer takes lanes from :func:`lane_index` and names them with :func:`label`, so the DDP comm lane
is 'DDP comm' everywhere.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import events as ev

SYNTHETIC_LANE_BASE = 1 << 30  # lanes from here up are named lanes, not OS threads (e.g. 'DDP comm')
KEY_COLUMNS = ["pid", "device", "lane", "lane_kind"]


class LaneKey(NamedTuple):
    """Identity of one lane of a rank."""

    pid: int
    device: int
    lane: int
    kind: str  # ev.GPU_STREAM or ev.HOST_THREAD

    @property
    def is_stream(self) -> bool:
        return self.kind == ev.GPU_STREAM


def label(key: LaneKey, names: dict | None = None) -> str:
    """Human label of a lane: 'cuda:0/stream 7', 'thread 4242', 'thread 4242 (MainThread)' when
    the thread's name is known (``names``: thread names by lane id), or just the name of a
    synthetic lane ('DDP comm')."""
    if key.kind == ev.GPU_STREAM:
        return f"cuda:{key.device}/stream {key.lane}"
    name = names.get(key.lane) if names else None
    if name and key.lane >= SYNTHETIC_LANE_BASE:
        return name
    return f"thread {key.lane} ({name})" if name else f"thread {key.lane}"


def lane_index(events: ev.Events) -> tuple[list[LaneKey], np.ndarray]:
    """The distinct lanes of an event table, sorted by (pid, device, lane, kind), and per event
    the position of its lane in that list (one sort, no loop per event). A rank's analyses read
    it from its view (rankview.RankView), built once per rank."""
    if not len(events):
        return [], np.empty(0, np.int64)
    kinds = events.lane_kind.sorted()  # kinds sort by their text
    kind_texts, kind_codes = kinds.texts, kinds.codes
    columns = [events[name] for name in KEY_COLUMNS[:3]]
    order = np.lexsort((kind_codes, *columns[::-1]))  # last key sorts first: pid, device, lane, kind
    ordered = [column[order] for column in (*columns, kind_codes)]
    new_lane = np.zeros(order.size, bool)
    new_lane[0] = True
    for column in ordered:  # four key columns
        new_lane[1:] |= column[1:] != column[:-1]
    index = np.empty(order.size, np.int64)
    index[order] = np.cumsum(new_lane) - 1
    first = np.flatnonzero(new_lane)
    keys = [LaneKey(int(pid), int(device), int(lane), str(kind_texts[kind]))
            for pid, device, lane, kind in zip(*(column[first].tolist() for column in ordered))]
    return keys, index


def labels(keys: list[LaneKey], names: dict | None = None) -> np.ndarray:
    """Labels of ``keys`` as an object array (index it with lane_index's per-event positions)."""
    return np.array([label(key, names) for key in keys] or [""], dtype=object)
