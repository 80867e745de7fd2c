"""Lane identity: one key for a lane (GPU stream or host thread) and one way to label it.

Stream and thread ids repeat across processes and devices (one nsys report can hold several
processes), so a lane is (pid, device, lane, kind). Every analysis, report and the Perfetto
writer takes lanes from :func:`lane_index` and names them with :func:`label`, so the DDP comm lane
is 'DDP comm' everywhere.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

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


def lane_index(events: pd.DataFrame) -> tuple[list[LaneKey], np.ndarray]:
    """The distinct lanes of an event table, sorted by (pid, device, lane, kind), and per event
    the position of its lane in that list (one group-by, no loop per event)."""
    if not len(events):
        return [], np.empty(0, np.int64)
    frame = events[KEY_COLUMNS].astype({"lane_kind": str})
    index = frame.groupby(KEY_COLUMNS, sort=True, observed=True).ngroup().to_numpy()
    _, first = np.unique(index, return_index=True)  # one row per lane, in group order
    rows = frame.iloc[first].itertuples(index=False)
    keys = [LaneKey(int(pid), int(device), int(lane), str(kind)) for pid, device, lane, kind in rows]
    return keys, index


def labels(keys: list[LaneKey], names: dict | None = None) -> np.ndarray:
    """Labels of ``keys`` as an object array (index it with lane_index's per-event positions)."""
    return np.array([label(key, names) for key in keys] or [""], dtype=object)
