"""A rank's markers (results.RankMarkers) are records of columns from the rank to the analyses: they travel
over the stop exchange as they are made, and a sender whose markers lack a column still decodes."""

from pathlib import Path

import msgspec

from distprof import config as config_mod
from distprof import pipeline, wire
from distprof.results import RankMarkers
from distprof.sources import kineto

DATA = Path(__file__).parent / "data"


def test_a_real_ranks_markers_cross_the_wire_unchanged():
    trace = kineto.read(DATA / "torch_tpdp" / "late3" / "rank3.pt.trace.json.gz", config_mod.load())[0]
    result = pipeline.reduce_rank(trace, config_mod.load())
    back = wire.decode_stop("result", wire.encode_stop("result", result))
    assert back.markers == result.markers and len(back.markers.collectives.name) > 0
    assert back.markers.to_json() == msgspec.to_builtins(result.markers)  # the dict view tests compare


def test_markers_without_a_column_decode_with_it_empty():
    """An older sender's markers: no compute split of the phases, no blocking flags, no sync calls."""
    sent = {"step_bounds": {"step": [0], "start_ns": [0], "end_ns": [10]},
            "phases": {"step": [0], "name": ["forward"], "start_ns": [1], "end_ns": [4], "busy_ns": [3]},
            "collectives": {"name": ["allreduce"], "start_ns": [5], "end_ns": [9], "step": [0]}}
    markers = msgspec.msgpack.decode(msgspec.msgpack.encode(sent), type=RankMarkers)
    assert markers.phases.own_ns == [3] and markers.collectives.blocking == [] and markers.syncs.start_ns == []
    assert markers.shifted(100).collectives.start_ns == [105] and markers.shifted(100).step_bounds.end_ns == [110]
