"""Communication metadata (collective kind, process group, message bytes, p2p peer) as the native
collector records it and the native and nsys readers fill it (issue 13). Expected values come from
the files themselves through plain sqlite3, never through distprof."""

import os
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import run_mpi

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
    result = run_mpi(command + [sys.executable, str(script), str(out / "run")],
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
    frame = trace.events.to_frame()
    comm = frame[frame["kind"] == "comm_op"]
    got = sorted({(r.name, r.collective, r.group, r.nbytes, r.peer) for r in comm.itertuples()})
    p2p_row = ("send", "send", "ranks 0,1", 8, 1) if rank == 0 else ("recv", "recv", "ranks 0,1", 8, 0)
    assert got == sorted([("allreduce", "allreduce", "ranks 0,1", 4096, -1), p2p_row,
                          ("barrier", "barrier", "", -1, -1)])
    assert len(comm) == 9
    assert trace.meta["process_groups"] == {"ranks 0,1": [0, 1]}
    assert trace.meta["group_from"]
    other = frame[frame["kind"] != "comm_op"]
    assert set(other["collective"]) == {""} and set(other["nbytes"]) == {-1} and set(other["group"]) == {""}


def test_collector_round_trip_in_process(tmp_path):
    collector = Collector(tmp_path / "r.sqlite", rank=2, world_size=4)
    collector.activate()
    try:
        for _ in range(2):
            with distprof.comm("all_gather", group=[2, 3, 2], nbytes=1 << 20):
                pass
        distprof.comm("bcast", group=(r for r in range(4)), nbytes=64)(lambda: None)()  # any iterable of ranks
        with distprof.comm("allreduce"):
            pass
    finally:
        collector.close()
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        assert db.execute("SELECT value FROM distprof_meta WHERE key = 'schema_version'").fetchone() == ("2",)
    [trace] = native.read(tmp_path / "r.sqlite", {})
    rows = sorted((r.name, r.collective, r.group, r.nbytes, r.peer) for r in trace.events.to_frame().itertuples())
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
    frame = trace.events.to_frame()
    comm = frame[frame["kind"] == "comm_op"]
    assert len(comm) == comm_rows
    assert set(comm["collective"]) == {"allreduce"}
    assert set(frame["group"]) == {""} and set(frame["nbytes"]) == {-1}
    assert set(frame["peer"]) == {-1} and "process_groups" not in trace.meta


def test_demo_records_gradient_bytes_and_world_group(demo_overlap):
    with sqlite3.connect(demo_overlap / "rank0.sqlite") as db:
        width, layers = 512, 4  # config.DEFAULTS["demo"]; every gradient is width x width float64
        stored = db.execute("SELECT DISTINCT n.comm_group, n.nbytes FROM distprof_ranges r JOIN distprof_names n "
                            "ON n.id = r.name_id WHERE n.kind = 'comm_op'").fetchall()
        count = db.execute("SELECT count(*) FROM distprof_ranges r JOIN distprof_names n ON n.id = r.name_id "
                           "WHERE n.kind = 'comm_op'").fetchone()[0]
    assert stored == [("0,1,2,3", width * width * 8)]
    [trace] = native.read(demo_overlap / "rank0.sqlite", {})
    frame = trace.events.to_frame()
    comm = frame[frame["kind"] == "comm_op"]
    assert len(comm) == count and count % layers == 0
    assert set(comm["group"]) == {"ranks 0,1,2,3"} and set(comm["nbytes"]) == {width * width * 8}
    assert trace.meta["process_groups"] == {"ranks 0,1,2,3": [0, 1, 2, 3]}


# -- nsys -----------------------------------------------------------------------------------------

PID, NCCL_STREAM = 500, 7
SENDRECV = "ncclDevKernel_SendRecv"
ALLREDUCE_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _nccl_call(export, start: int, name: str, tid: int = PID) -> None:
    """An NCCL API range as NCCL writes it (domain NCCL, registered string), 10 ns long."""
    export.range(PID, start, start + 10, name, tid=tid, domain="NCCL", registered=True)


def _launch_in_group_end(export, start: int, kernel: str, tid: int = PID) -> None:
    """ncclGroupEnd [start, start + 100] on ``tid`` that launches ``kernel`` at start + 50."""
    export.range(PID, start, start + 100, "ncclGroupEnd", tid=tid, domain="NCCL", registered=True)
    export.kernel(PID, 0, NCCL_STREAM, start + 1_000, start + 1_500, kernel, launch=(start + 50, start + 60), tid=tid)


def _nccl_export():
    """One rank: NCCL kernels launched under PyTorch ranges, NCCL API ranges and NCCL groups.
    Kernels in launch order and the collective each must get:
      0 SendRecv in a send+recv group under nccl:all_to_all        -> alltoall (PyTorch names the op)
      1 SendRecv in a send+recv group, no PyTorch range             -> sendrecv (mixed group: kernel name)
      2 SendRecv in a group of sends only                           -> send
      3 SendRecv in a nested group holding one recv                 -> recv
      4 AllReduce kernel in a group of two ncclBroadcast            -> broadcast
      5 AllReduce kernel launched by ncclAllReduce (no group)       -> allreduce
      6 SendRecv under nccl:all_to_all on another thread than its launch -> sendrecv (not around it)
      7 SendRecv whose launch was not captured                     -> sendrecv
    """
    from nsys_fixtures import NsysExport
    export = NsysExport()
    export.range(PID, 0, 400, "nccl:all_to_all")                   # PyTorch record_function, default domain
    _nccl_call(export, 10, "ncclGroupStart")
    _nccl_call(export, 30, "ncclSend")
    _nccl_call(export, 50, "ncclRecv")
    _launch_in_group_end(export, 100, SENDRECV)                      # 0
    _nccl_call(export, 1_000, "ncclGroupStart")
    _nccl_call(export, 1_020, "ncclSend")
    _nccl_call(export, 1_040, "ncclRecv")
    _launch_in_group_end(export, 1_100, SENDRECV)                    # 1
    _nccl_call(export, 2_000, "ncclGroupStart")
    _nccl_call(export, 2_020, "ncclSend")
    _nccl_call(export, 2_040, "ncclSend")
    _launch_in_group_end(export, 2_100, SENDRECV)                    # 2
    _nccl_call(export, 3_000, "ncclGroupStart")
    _nccl_call(export, 3_020, "ncclGroupStart")
    _nccl_call(export, 3_040, "ncclRecv")
    _nccl_call(export, 3_060, "ncclGroupEnd")                        # inner end: launches nothing
    _launch_in_group_end(export, 3_100, SENDRECV)                    # 3
    _nccl_call(export, 4_000, "ncclGroupStart")
    _nccl_call(export, 4_020, "ncclBroadcast")
    _nccl_call(export, 4_040, "ncclBroadcast")
    _launch_in_group_end(export, 4_100, ALLREDUCE_KERNEL)            # 4
    export.range(PID, 5_000, 5_200, "ncclAllReduce", domain="NCCL", registered=True)
    export.kernel(PID, 0, NCCL_STREAM, 6_000, 6_500, ALLREDUCE_KERNEL, launch=(5_050, 5_060))  # 5
    export.range(PID, 7_000, 7_400, "nccl:all_to_all", tid=PID + 1)
    export.kernel(PID, 0, NCCL_STREAM, 8_000, 8_500, SENDRECV, launch=(7_050, 7_060))  # 6
    export.kernel(PID, 0, NCCL_STREAM, 9_000, 9_500, SENDRECV)      # 7
    return export


def _sql_torch_op_of_kernels(path: Path) -> list[str | None]:
    """Per NCCL kernel in start order: the innermost 'nccl:*' range on its launching thread around
    its launch call (by plain SQL over the export), or None."""
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute(
            "SELECT (SELECT COALESCE(n.text, s2.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s2 ON s2.id = n.textId "
            "        WHERE n.globalTid = r.globalTid AND n.start <= r.start AND n.end >= r.end "
            "        AND COALESCE(n.text, s2.value) LIKE 'nccl:%' ORDER BY n.start DESC LIMIT 1) "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
            "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "     AND (r.globalTid >> 24) = (k.globalPid >> 24) "
            "WHERE s.value LIKE 'nccl%' ORDER BY k.start")]


def test_nsys_nccl_kernels_take_the_op_of_the_range_around_their_launch(tmp_path):
    from nsys_fixtures import ddl_available
    if not ddl_available():
        pytest.skip("nsys DDL files not available")
    from distprof.sources import nsys
    path = _nccl_export().write(tmp_path / "nccl.sqlite")
    torch_ops = _sql_torch_op_of_kernels(path)
    assert torch_ops == ["nccl:all_to_all"] + [None] * 7
    [trace] = nsys.read(path, {})
    frame = trace.events.to_frame()
    kernels = frame[frame["kind"] == "kernel"].sort_values("start_ns")
    assert list(kernels["collective"]) == ["alltoall", "sendrecv", "send", "recv", "broadcast", "allreduce",
                                           "sendrecv", "sendrecv"]
    assert set(kernels["nbytes"]) == {-1} and set(kernels["peer"]) == {-1} and set(kernels["group"]) == {""}
    # NCCL API ranges are comm_op rows of their own name's kind
    calls = frame[frame["kind"] == "comm_op"]
    expected = {"ncclGroupStart": "other", "ncclGroupEnd": "other", "ncclSend": "send", "ncclRecv": "recv",
                "ncclBroadcast": "broadcast", "ncclAllReduce": "allreduce"}
    assert {(str(r.name), str(r.collective)) for r in calls.itertuples()} == set(expected.items())
    other = frame[~frame["kind"].isin(["kernel", "comm_op"])]
    assert set(other["collective"]) == {""}


def test_nsys_distprof_comm_ranges_read_nbytes_from_the_int64_payload(tmp_path):
    from nsys_fixtures import ddl_available
    if not ddl_available():
        pytest.skip("nsys DDL files not available")
    from nsys_fixtures import NsysExport, global_tid

    from distprof.annotate import NVTX_CATEGORY
    from distprof.sources import nsys
    export = NsysExport()
    distprof_domain = export.domain(PID, "distprof")
    nccl_domain = export.domain(PID, "NCCL")
    for start, text, domain, category, value in (
            (100, "allreduce", distprof_domain, NVTX_CATEGORY["COMMUNICATION"], 4096),  # distprof.comm(nbytes=4096)
            (300, "allreduce", distprof_domain, NVTX_CATEGORY["COMMUNICATION"], None),  # distprof.comm("allreduce")
            (500, "forward", distprof_domain, NVTX_CATEGORY["PHASE"], 77),              # not a comm range
            (700, "ncclAllReduce", nccl_domain, None, 99)):                             # not distprof's payload
        export.add("NVTX_EVENTS", start=start, end=start + 100, eventType=59, text=text, category=category,
                   globalTid=global_tid(PID, PID), domainId=domain, int64Value=value)
    export.kernel(PID, 0, NCCL_STREAM, 1_000, 2_000, ALLREDUCE_KERNEL)
    path = export.write(tmp_path / "payload.sqlite")
    with sqlite3.connect(path) as db:
        stored = dict(db.execute("SELECT start, int64Value FROM NVTX_EVENTS WHERE eventType = 59"))
    [trace] = nsys.read(path, {})
    rows = {int(r.start_ns): (str(r.collective), int(r.nbytes)) for r in trace.events.to_frame().itertuples()
            if r.kind in ("comm_op", "range")}
    assert rows == {100: ("allreduce", stored[100]), 300: ("allreduce", -1), 500: ("", -1), 700: ("allreduce", -1)}


def _sql_hostname(path: Path) -> str | None:
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "TARGET_INFO_SYSTEM_ENV" not in tables:
            return None
        row = db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'").fetchone()
    if row is None:
        return None
    return row[0].decode() if isinstance(row[0], bytes) else row[0]


REAL_EXPORTS = sorted(p.name[:-3] for p in (DATA / "nsys").glob("*.sqlite.gz"))


@pytest.mark.parametrize("name", REAL_EXPORTS)
def test_nsys_real_exports_hostname_and_unknown_message_fields(name):
    from nsys_fixtures import real_export

    from distprof.sources import nsys
    path = real_export(name)
    expected_host = _sql_hostname(path)
    for trace in nsys.read(path, {}):
        assert trace.meta.get("hostname") == expected_host
        assert not expected_host or not expected_host.startswith("b'")
        events = trace.events.to_frame()
        # no real export here has a decodable NCCL payload, MPI tables or distprof comm payloads
        assert set(events["nbytes"]) <= {-1} and set(events["peer"]) <= {-1} and set(events["group"]) <= {""}
        assert set(events.loc[events["category"] != "COMMUNICATION", "collective"]) <= {""}


def test_nsys_pipit_mpi_calls_get_their_kind():
    from nsys_fixtures import real_export

    from distprof.sources import nsys
    path = real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite")
    with sqlite3.connect(path) as db:
        counts = dict(db.execute(
            "SELECT COALESCE(e.text, s.value) AS n, count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
            "ON s.id = e.textId WHERE e.eventType IN (59, 60) AND (e.globalTid >> 24) & 16777215 IN "
            "(SELECT (d.globalTid >> 24) & 16777215 FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.text = 'MPI' "
            " AND d.domainId = e.domainId) GROUP BY n"))
    assert counts == {"MPI_Init": 1, "MPI_Send": 10, "MPI_Recv": 5, "MPI_Finalize": 1}
    [trace] = nsys.read(path, {})
    frame = trace.events.to_frame()
    comm = frame[frame["kind"] == "comm_op"]
    kinds = {"MPI_Send": "send", "MPI_Recv": "recv"}  # MPI_Init/MPI_Finalize are setup, not communication
    assert comm.groupby(["name", "collective"], observed=True).size().to_dict() == {
        (name, kind): counts[name] for name, kind in kinds.items()}
    assert set(comm["nbytes"]) == {-1} and set(comm["peer"]) == {-1}


def test_nsys_hosts_are_told_apart(tmp_path):
    from nsys_fixtures import ddl_available
    if not ddl_available():
        pytest.skip("nsys DDL files not available")
    from nsys_fixtures import VM_ID, NsysExport

    from distprof.sources import nsys
    hosts = {}
    for index, (host, schema) in enumerate((("node-a", "2026.2"), (b"node-b", "2025.1"))):
        export = NsysExport(schema=schema)
        export.kernel(PID, 0, NCCL_STREAM, 100, 200, ALLREDUCE_KERNEL)
        export.add("TARGET_INFO_SYSTEM_ENV", globalVid=VM_ID << 48, devStateName="Local (CLI)", name="Hostname",
                   nameEnum=0, value=host)
        path = export.write(tmp_path / f"r{index}.sqlite")
        [trace] = nsys.read(path, {})
        hosts[index] = trace.meta["hostname"]
        assert hosts[index] == _sql_hostname(path)
    assert hosts == {0: "node-a", 1: "node-b"}


def test_known_nbytes_rides_as_the_nvtx_payload(monkeypatch):
    from distprof import annotate

    class Domain:  # records the attributes distprof asks NVTX for
        def __init__(self):
            self.asked = []

        def get_event_attributes(self, **attributes):
            self.asked.append(attributes)
            return attributes

        def push_range(self, attributes):
            pass

        def pop_range(self):
            pass

    domain = Domain()
    monkeypatch.setattr(annotate, "_active_domain", domain)
    monkeypatch.setattr(annotate, "_descriptors", {})
    annotate.descriptor("allreduce", "COMMUNICATION", "comm_op", annotate.comm_metadata([0, 1], 4096))
    annotate.descriptor("allreduce", "COMMUNICATION", "comm_op")
    assert [a.get("payload") for a in domain.asked] == [4096, None]
    assert [a["message"] for a in domain.asked] == ["allreduce", "allreduce"]
