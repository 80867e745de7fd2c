"""Gloo process groups told apart on a real TP x DP torch job whose trace names none of them
(no record_param_comms): each rank's pg_config lists the default group first, then its TP and
DP groups; the default group ran no collective, so only two of the three have worker threads
with gloo ranges. Checked against the raw JSON."""

import gzip
import json
from pathlib import Path

from result_views import summary_json

from distprof import config as config_mod
from distprof import pipeline

DATA = Path(__file__).parent / "data" / "torch_tpdp" / "late3"
CONFIG = config_mod.load()


def _raw(path: Path) -> dict:
    return json.loads(gzip.open(path).read())


def _expected_groups() -> dict[tuple[str, tuple[int, ...]], int]:
    """(kind, group members) -> gloo ranges per member, from the raw traces: a rank's TP group is
    pg_config's second entry, its DP group the third, and the TP collective is all_reduce."""
    out: dict = {}
    for path in sorted(DATA.glob("rank*.pt.trace.json.gz")):
        trace = _raw(path)
        pg = trace["distributedInfo"]["pg_config"]
        assert [entry["pg_desc"] for entry in pg][0] == "default_pg"
        names = [e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("gloo:")]
        for kind, entry in (("gloo:all_reduce", pg[1]), ("gloo:all_gather", pg[2])):
            out[(kind, tuple(entry["ranks"]))] = names.count(kind)
    return out


def test_gloo_groups_with_an_idle_default_group_are_told_apart():
    summary = summary_json(pipeline.merge_files(sorted(DATA.glob("rank*.pt.trace.json.gz")), CONFIG))
    expected = _expected_groups()
    assert sorted(expected) == [("gloo:all_gather", (0, 2)), ("gloo:all_gather", (1, 3)),
                                ("gloo:all_reduce", (0, 1)), ("gloo:all_reduce", (2, 3))]
    kinds = {(k["name"], k["group"]): k["matched"] for k in summary["skew"]["kinds"]}
    assert sorted(kinds.values()) == sorted(expected.values())  # every range matched, per group
    assert sum(kinds.values()) == summary["skew"]["matched"] == 48
    assert not [w for w in summary["warnings"] if "could not be told apart" in w]
    members = {entry["pg_name"]: tuple(entry["ranks"]) for path in DATA.glob("rank*.pt.trace.json.gz")
               for entry in _raw(path)["distributedInfo"]["pg_config"]}
    named = {(name, members[group]) for name, group in kinds}
    assert named == {("allreduce", (0, 1)), ("allreduce", (2, 3)), ("allgather", (0, 2)), ("allgather", (1, 3))}
    straggler = summary["skew"]["straggler"]
    assert straggler["rank"] == 3  # its 20 ms reach rank 2 (TP) and rank 1 (DP): charged once, to 3


def _waited_from_raw(trace: dict) -> list[bool]:
    """Per gloo range in time order, from the raw JSON: the main thread (the one with the
    ProfilerSteps) starts no event while the exchange runs and its next one within 1 ms of its end."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    main = next(e["tid"] for e in events if str(e["name"]).startswith("ProfilerStep#"))
    starts = sorted(float(e["ts"]) for e in events if e["tid"] == main and e.get("cat") != "user_annotation")
    out = []
    for gloo in sorted((e for e in events if str(e["name"]).startswith("gloo:")), key=lambda e: float(e["ts"])):
        begin, end = float(gloo["ts"]), float(gloo["ts"]) + float(gloo["dur"])
        resumed = next((s for s in starts if s > begin), None)
        out.append(resumed is not None and end <= resumed <= end + 1000.0)
    return out


def test_a_synchronous_gloo_call_is_waited_for_by_the_thread_that_runs_the_steps():
    """dist.all_reduce / all_gather enqueue the exchange on a gloo worker thread and wait for it in
    wait(), which the profiler does not record: the replay learns the wait from the main thread,
    idle while the exchange runs and back within 1 ms of its end. Every TP and DP call of this job is
    synchronous, but its 4 ranks shared 2 cores: now and then the main thread got its core back later
    than that, and the replay then keeps the gap as it was traced (1 to 5 of a rank's 24 calls)."""
    from distprof import sources

    for path in sorted(DATA.glob("rank*.pt.trace.json.gz")):
        (trace,) = sources.read(path, CONFIG)
        collectives = pipeline.reduce_rank(trace, CONFIG).markers.collectives
        flags = [b for _, b in sorted(zip(collectives.start_ns, collectives.blocking))]
        expected = _waited_from_raw(_raw(path))
        assert flags == expected and len(expected) == 24 and sum(expected) >= 19, path
