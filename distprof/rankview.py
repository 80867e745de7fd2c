"""The per-rank view: the pieces of one rank's events that several per-rank analyses read (the
analysed window, the work masks, the lanes with their labels, the kernel->launch join, and the
work sets cut to the window), as one frozen value.

``pipeline.reduce_rank`` builds it once per rank (``analyses.distributed.rank_view``) and hands
it to each per-rank reducer, so none of them derives a piece again and no cache is needed; a
caller holding bare events (a test, a benchmark) builds one the same way. It holds values, no
logic: each piece is defined where its figures are (analyses.distributed, lanes, joins).
"""

from __future__ import annotations

import msgspec
import numpy as np

from . import events as ev
from .lanes import LaneKey
from .results import Lane

IntervalSet = tuple[np.ndarray, np.ndarray]  # analyses.intervals' sorted, disjoint (starts, ends)


class RankView(msgspec.Struct, frozen=True, eq=False):
    """One rank's events and what its per-rank analyses share (arrays are read-only by contract)."""

    events: ev.Events
    window: IntervalSet           # the analysed window: the ProfileSteps' union, else the trace's span
    steps: np.ndarray             # per row: a ProfileStep range
    gpu: bool                     # a GPU trace (it has kernels)
    gpu_work: np.ndarray          # per row: GPU work (a kernel, memcpy or memset)
    comm: np.ndarray              # per row: communication (distributed.work_masks)
    compute: np.ndarray           # per row: computation
    lanes: tuple[LaneKey, ...]    # the rank's lanes, sorted (lanes.lane_index)
    lane_of: np.ndarray           # per row: the position of its lane in ``lanes``
    labels: np.ndarray            # per lane: its label (lanes.label with the trace's thread names)
    launch: np.ndarray            # per row: the row of the runtime call that launched it (GPU work), else -1
    communication: IntervalSet    # the communication rows' union inside the window
    computation: IntervalSet      # the computation rows' union inside the window (hosts: less communication)
    lane_work: tuple[Lane, ...]   # per lane with work: its communication and computation in the window
