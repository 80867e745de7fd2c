"""Communication metadata (collective kind, process group, message bytes, p2p peer) as the native
collector records it and the native and nsys readers fill it (issue 13). Expected values come from
the files themselves through plain sqlite3, never through distprof."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import distprof
from distprof.cli import find_mpirun
from distprof.collector import Collector
from distprof.sources import native

DATA = Path(__file__).parent / "data"

JOB = """
import sys
import distprof
with distprof.Profiler(out=sys.argv[1], quiet=True) as prof:
    rank = prof.rank
    for step in range(3):
        with distprof.comm("allreduce", group=[1, 0], nbytes=4096):
            sum(range(2000))
        with distprof.comm("send" if rank == 0 else "recv", group=[0, 1], nbytes=8, peer=1 - rank):
            pass
        with distprof.comm("barrier"):
            pass
        prof.step()
"""


@pytest.fixture(scope="module")
def two_rank_job(tmp_path_factory) -> Path:
    """A real 2-rank mpirun job that records comm() with and without metadata."""
    out = tmp_path_factory.mktemp("comm_meta")
    script = out / "job.py"
    script.write_text(JOB)
    command = [find_mpirun(), "-n", "2", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,sm"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    result = subprocess.run(command + [sys.executable, str(script), str(out / "run")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return out / "run"


def _sql_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT n.name, n.comm_group, n.nbytes, n.peer FROM distprof_ranges r "
                          "JOIN distprof_names n ON n.id = r.name_id WHERE n.kind = 'comm_op'").fetchall()


@pytest.mark.parametrize("rank", [0, 1])
def test_real_mpirun_job_records_group_bytes_and_peer(two_rank_job, rank):
    path = two_rank_job / f"rank{rank}.sqlite"
    stored = sorted(set(_sql_rows(path)))
    p2p = ("send", "0,1", 8, 1) if rank == 0 else ("recv", "0,1", 8, 0)
    assert stored == sorted([("allreduce", "0,1", 4096, -1), p2p, ("barrier", "", -1, -1)])
    [trace] = native.read(path, {})
    comm = trace.events[trace.events["kind"] == "comm_op"]
    got = sorted({(r.name, r.collective, r.group, r.nbytes, r.peer) for r in comm.itertuples()})
    p2p_row = ("send", "send", "ranks 0,1", 8, 1) if rank == 0 else ("recv", "recv", "ranks 0,1", 8, 0)
    assert got == sorted([("allreduce", "allreduce", "ranks 0,1", 4096, -1), p2p_row,
                          ("barrier", "barrier", "", -1, -1)])
    assert len(comm) == 9
    assert trace.meta["process_groups"] == {"ranks 0,1": [0, 1]}
    assert trace.meta["group_from"]
    other = trace.events[trace.events["kind"] != "comm_op"]
    assert set(other["collective"]) == {""} and set(other["nbytes"]) == {-1} and set(other["group"]) == {""}


def test_collector_round_trip_in_process(tmp_path):
    collector = Collector(tmp_path / "r.sqlite", rank=2, world_size=4)
    collector.activate()
    try:
        for _ in range(2):
            with distprof.comm("all_gather", group=[2, 3, 2], nbytes=1 << 20):
                pass
        distprof.comm("bcast", group=range(4), nbytes=64)(lambda: None)()
        with distprof.comm("allreduce"):
            pass
    finally:
        collector.close()
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        assert db.execute("SELECT value FROM distprof_meta WHERE key = 'schema_version'").fetchone() == ("2",)
    [trace] = native.read(tmp_path / "r.sqlite", {})
    rows = sorted((r.name, r.collective, r.group, r.nbytes, r.peer) for r in trace.events.itertuples())
    assert rows == [("all_gather", "allgather", "ranks 2,3", 1 << 20, -1)] * 2 + [
        ("allreduce", "allreduce", "", -1, -1), ("bcast", "broadcast", "ranks 0,1,2,3", 64, -1)]
    assert trace.meta["process_groups"] == {"ranks 2,3": [2, 3], "ranks 0,1,2,3": [0, 1, 2, 3]}


def test_comm_without_metadata_is_the_cached_range_and_bad_values_fail_early():
    assert distprof.comm("allreduce") is distprof.comm("allreduce")
    assert distprof.comm("allreduce", group=[0, 1], nbytes=8) is distprof.comm("allreduce", group=[0, 1], nbytes=8)
    assert distprof.comm("allreduce", nbytes=8) is not distprof.comm("allreduce")
    for bad in ({"nbytes": -1}, {"peer": 1.5}, {"group": []}, {"group": [-1, 0]}, {"nbytes": True}):
        with pytest.raises(ValueError):
            distprof.comm("allreduce", **bad)


@pytest.mark.parametrize("path", sorted((DATA / "demo_ranks").glob("*.sqlite")), ids=lambda p: p.name)
def test_schema_1_files_read_with_unknown_metadata(path):
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(distprof_names)")}
        comm_rows = db.execute("SELECT count(*) FROM distprof_ranges r JOIN distprof_names n "
                               "ON n.id = r.name_id WHERE n.kind = 'comm_op'").fetchone()[0]
    assert "nbytes" not in columns and comm_rows > 0
    [trace] = native.read(path, {})
    comm = trace.events[trace.events["kind"] == "comm_op"]
    assert len(comm) == comm_rows
    assert set(comm["collective"]) == {"allreduce"}
    assert set(trace.events["group"]) == {""} and set(trace.events["nbytes"]) == {-1}
    assert set(trace.events["peer"]) == {-1} and "process_groups" not in trace.meta


def test_demo_records_gradient_bytes_and_world_group(demo_overlap):
    with sqlite3.connect(demo_overlap / "rank0.sqlite") as db:
        width, layers = 512, 4  # config.DEFAULTS["demo"]; every gradient is width x width float64
        stored = db.execute("SELECT DISTINCT n.comm_group, n.nbytes FROM distprof_ranges r JOIN distprof_names n "
                            "ON n.id = r.name_id WHERE n.kind = 'comm_op'").fetchall()
        count = db.execute("SELECT count(*) FROM distprof_ranges r JOIN distprof_names n ON n.id = r.name_id "
                           "WHERE n.kind = 'comm_op'").fetchone()[0]
    assert stored == [("0,1,2,3", width * width * 8)]
    [trace] = native.read(demo_overlap / "rank0.sqlite", {})
    comm = trace.events[trace.events["kind"] == "comm_op"]
    assert len(comm) == count and count % layers == 0
    assert set(comm["group"]) == {"ranks 0,1,2,3"} and set(comm["nbytes"]) == {width * width * 8}
    assert trace.meta["process_groups"] == {"ranks 0,1,2,3": [0, 1, 2, 3]}
