"""The per-rank view: built once per rank inside ``rankview.shared``, fresh outside it, and the
numpy lane index equal to a plain-Python grouping of the rows."""

import numpy as np

from distprof import config as config_mod
from distprof import events as ev
from distprof import lanes, rankview
from distprof.analyses import distributed

CONFIG = config_mod.load()


def table():
    """Six rows on four lanes, given out of lane order: (pid, device, lane, lane kind) by construction."""
    keys = [(7, -1, 3, ev.HOST_THREAD), (7, 0, 9, ev.GPU_STREAM), (5, -1, 3, ev.HOST_THREAD),
            (7, -1, 3, ev.HOST_THREAD), (7, 0, 2, ev.GPU_STREAM), (5, -1, 3, ev.HOST_THREAD)]
    pid, device, lane, kind = (np.array(column) for column in zip(*keys))
    n = len(keys)
    return ev.make_events(kind=np.where(kind == ev.GPU_STREAM, ev.KERNEL, ev.RANGE), category=ev.COMPUTE,
                          name=np.array([f"op{i}" for i in range(n)], object),
                          start_ns=np.arange(n, dtype=np.int64) * 10, end_ns=np.arange(n, dtype=np.int64) * 10 + 5,
                          pid=pid, device=device, lane=lane, lane_kind=kind)


def test_lane_index_matches_plain_grouping():
    events = table()
    rows = list(zip(events["pid"].tolist(), events["device"].tolist(), events["lane"].tolist(),
                    events["lane_kind"].values().tolist()))
    expected_keys = sorted(set(rows))
    keys, index = lanes.lane_index(events)
    assert [tuple(k) for k in keys] == expected_keys
    assert index.tolist() == [expected_keys.index(row) for row in rows]


def test_view_is_built_once_inside_shared_and_fresh_outside():
    events, other = table(), table()
    with rankview.shared(events):
        first, again = lanes.lane_index(events), lanes.lane_index(events)
        masks = distributed.work_masks(events, CONFIG)
        assert first is again and distributed.work_masks(events, CONFIG) is masks
        assert lanes.lane_index(other) is not first  # another table is never served this one's view
        window = distributed.analysis_window(events, "steps")
        assert distributed.analysis_window(events, "all") is not window  # one entry per window mode
    outside = lanes.lane_index(events)
    assert outside is not first
    assert outside[0] == first[0] and np.array_equal(outside[1], first[1])


def test_empty_table_has_no_lanes():
    keys, index = lanes.lane_index(table().take(slice(0, 0)))
    assert keys == [] and index.size == 0
