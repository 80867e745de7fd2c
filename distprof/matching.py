"""The collectives matched across ranks (align.match_collectives makes it; skew, the what-if
replay, the Collectives table and the pipelines read it): a value beside the results, so the
analyses read it without reaching back into the alignment step."""

from __future__ import annotations

import msgspec
import numpy as np


class Matching(msgspec.Struct, frozen=True):
    """Collectives matched across ranks. Column j is one collective: the ``ordinal``-th of its
    kind in its process group and step (for p2p, of its sender -> receiver pair), on every rank
    of the group that is in the merge (``present``). Times are on each rank's own clock; rows
    follow ``ranks``. ``group_ranks[j]``: the group's members (global ranks) when the trace
    names them, else the ranks that have the op; ``nbytes``/``launch_ns``/``exposed_ns`` (the part of
    the op no computation of its rank overlaps): per rank, -1 unknown."""

    ranks: np.ndarray
    name: np.ndarray
    step: np.ndarray
    ordinal: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    present: np.ndarray
    kinds: list[dict] = msgspec.field(default_factory=list)
    warnings: list = msgspec.field(default_factory=list)  # str or typed.Reason (reports/findings.py words the codes)
    excluded: list[str] = msgspec.field(default_factory=list)
    group: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, object))
    group_ranks: list[tuple[int, ...]] = msgspec.field(default_factory=list)
    nbytes: np.ndarray = msgspec.field(default_factory=lambda: np.zeros((0, 0), np.int64))
    launch_ns: np.ndarray = msgspec.field(default_factory=lambda: np.zeros((0, 0), np.int64))
    exposed_ns: np.ndarray = msgspec.field(default_factory=lambda: np.zeros((0, 0), np.int64))  # -1 unknown
    sender: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int64))    # p2p: global rank; else -1
    receiver: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, np.int64))  # p2p: global rank; else -1

    @property
    def size(self) -> int:
        return int(self.name.size)
