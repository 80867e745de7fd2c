"""The step boundary off the training thread (issue 41): prof.step() hands a step's rows to the
collector's writer thread; the file holds exactly what the row-by-row executemany wrote."""

import sqlite3
import threading

import pytest

import distprof
from distprof import events as ev
from distprof.collector import ROWS_PER_STATEMENT, Collector


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                "RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)


def ranges_in(path) -> list[tuple]:
    """The file's committed ranges as another process sees them (its own connection)."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT rowid, start_ns, end_ns, tid, name_id, step, typeof(start_ns), typeof(step) "
                          "FROM distprof_ranges ORDER BY rowid").fetchall()


def test_step_returns_before_its_rows_are_written_and_close_writes_them(tmp_path):
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        collector, real_write = prof.collector, prof.collector._write
        entered, gate, writers = threading.Event(), threading.Event(), []

        def gated(batch):
            writers.append(threading.current_thread().name)
            entered.set()
            assert gate.wait(30)
            return real_write(batch)

        collector._write = gated
        try:
            for _ in range(3):
                with distprof.phase("forward"):
                    pass
            prof.step()  # returns while the writer thread waits at the gate
            assert entered.wait(30) and writers == ["distprof-writer-0"]
            assert ranges_in(tmp_path / "rank0.sqlite") == []
        finally:
            gate.set()
        with distprof.phase("forward"):
            pass
    rows = ranges_in(tmp_path / "rank0.sqlite")
    assert [row[5] for row in rows] == [0, 0, 0, 0, 1]  # 3 forward + ProfileStep, then the last forward
    assert not collector._writer.is_alive()


def _expected(rows_by_step: list[tuple[int, list[tuple]]], path) -> list[tuple]:
    """What the collector wrote before issue 41: executemany, one transaction a step."""
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("CREATE TABLE distprof_ranges(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, "
                   "tid INTEGER NOT NULL, name_id INTEGER NOT NULL, step INTEGER NOT NULL)")
        for step, rows in rows_by_step:
            db.execute("BEGIN")
            db.executemany(f"INSERT INTO distprof_ranges VALUES (?, ?, ?, ?, {step})", rows)
            db.execute("COMMIT")
    return ranges_in(path)


@pytest.mark.parametrize("sizes", [[1, 15, 16, 17, 0, 1000], [ROWS_PER_STATEMENT - 1, ROWS_PER_STATEMENT + 3]])
def test_rows_are_written_exactly_as_executemany_wrote_them(tmp_path, sizes):
    """Same rowids, values and types, whatever the padding and the statements a step takes."""
    batches = []
    for step, size in enumerate(sizes):
        batches.append((step, [(10 ** 18 + 7 * i, 10 ** 18 + 7 * i + 3, 2 ** 40 + i % 3, (i % 5) - 1)
                               for i in range(size)]))
    batches.append((len(sizes), [(-5, 2 ** 63 - 1, 0, 1), (1, 2, 3, 4.5)]))  # extremes and a float: REAL
    collector = Collector(tmp_path / "rank0.sqlite", rank=0, world_size=1)
    for step, rows in batches:
        collector.step = step
        collector.rows.extend(rows)
        assert collector.submit() == len(rows)
    collector.close()
    assert ranges_in(tmp_path / "rank0.sqlite") == _expected(batches, tmp_path / "expected.sqlite")


def test_a_failed_write_is_raised_at_the_next_step_and_the_file_stays_usable(tmp_path):
    collector = Collector(tmp_path / "rank0.sqlite", rank=0, world_size=1)
    collector.rows.append((1, None, 3, 4))  # NOT NULL: the writer thread's transaction fails
    collector.submit()
    collector.rows.append((5, 6, 7, 8))
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        collector.submit()
    collector.step = 1
    collector.submit()
    collector.close()
    assert [row[1:6] for row in ranges_in(tmp_path / "rank0.sqlite")] == [(5, 6, 7, 8, 1)]


def test_on_trace_ready_finds_its_cycle_on_disk(tmp_path):
    seen = []

    def ready(prof):
        with sqlite3.connect(prof.rank_file(prof.rank)) as db:
            seen.append(db.execute("SELECT count(DISTINCT step) FROM distprof_ranges").fetchone()[0])

    with distprof.Profiler(out=tmp_path, quiet=True, schedule={"active": 3, "repeat": 2}, on_trace_ready=ready) as prof:
        for _ in range(6):
            with distprof.phase("forward"):
                pass
            prof.step()
    assert seen == [3, 6]


def test_after_close_a_flush_writes_on_the_calling_thread(tmp_path):
    """Once close() stopped the writer, a late step is written here, not handed to nobody."""
    collector = Collector(tmp_path / "rank0.sqlite", rank=0, world_size=1)
    collector._stop_writer()
    collector.record(ev.PROFILE_STEP, ev.PHASE, ev.RANGE, 1, 2)
    assert collector.submit() == 1
    assert [row[1:3] for row in ranges_in(tmp_path / "rank0.sqlite")] == [(1, 2)]
    collector.close()
