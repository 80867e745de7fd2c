"""Reading an input never writes beside it (issue 54): SQLite opened even read-only on a WAL-mode file (an nsys
export, distprof's rank files) left -wal/-shm next to it. And a run leaves its rank files as single files."""

import contextlib
import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli

from distprof import sources
from distprof.collector import Collector, settle
from distprof.live import RankCursor

DATA = Path(__file__).parent / "data"
ODD = "in?put #1 %20 x"  # a folder name a URI must quote


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def wal_export(folder: Path) -> Path:
    """A small nsys export switched to WAL mode, as some are: once closed, no -wal beside it."""
    folder.mkdir(parents=True)
    path = folder / "export.sqlite"
    path.write_bytes(gzip.decompress((DATA / "nsys" / "quasiben_nvtx-examples_cudf-groupby.sqlite.gz").read_bytes()))
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    assert listing(folder) == ["export.sqlite"]
    return path


def test_merging_a_wal_mode_export_leaves_its_folder_as_it_was(tmp_path):
    path = wal_export(tmp_path / ODD)
    content = path.read_bytes()
    result = run_cli("merge", str(path), "-o", str(tmp_path / "out"), "--no-html")
    assert result.returncode == 0, result.stderr[-2000:]
    assert listing(path.parent) == ["export.sqlite"] and path.read_bytes() == content


def running_rank(path: Path) -> Collector:
    """A collector still writing: two flushed steps, both only in its -wal."""
    collector = Collector(path, rank=0, world_size=1)
    for step in range(2):
        collector.step = step
        base = 1_000_000 * (step + 1)
        collector.record("ProfileStep", "PHASE", "range", base, base + 900_000)
        collector.flush()
    return collector


def killed_rank(tmp_path: Path, with_shm: bool = True) -> Path:
    """The files a rank killed mid-run leaves (its -shm too, unless ``with_shm`` is False: copied without it)."""
    collector = running_rank(tmp_path / "rank0.sqlite")
    copy = tmp_path / ODD
    copy.mkdir()
    for suffix in ("", "-wal", "-shm")[:3 if with_shm else 2]:
        shutil.copy(f"{tmp_path / 'rank0.sqlite'}{suffix}", copy / f"rank0.sqlite{suffix}")
    collector.close()
    return copy / "rank0.sqlite"


@pytest.mark.parametrize("with_shm", [True, False])
def test_a_killed_ranks_file_is_read_with_its_wal_and_gains_nothing(tmp_path, with_shm):
    path = killed_rank(tmp_path, with_shm)
    before = listing(path.parent)
    content = {name: (path.parent / name).read_bytes() for name in ("rank0.sqlite", "rank0.sqlite-wal")}
    trace = sources.read(path, {})[0]
    assert int((trace.events.to_frame()["name"] == "ProfileStep").sum()) == 2  # the steps only in the -wal
    assert any("did not finish" in warning for warning in trace.warnings)
    assert listing(path.parent) == before
    assert content == {name: (path.parent / name).read_bytes() for name in content}  # not checkpointed into


def test_a_closed_rank_file_is_one_file_that_even_a_read_only_open_leaves_alone(tmp_path):
    path = tmp_path / "rank0.sqlite"
    running_rank(path).close()
    assert listing(tmp_path) == ["rank0.sqlite"] and path.read_bytes()[18:20] == b"\x01\x01"  # rollback journal
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:  # any other tool's read
        assert db.execute("SELECT count(*) FROM distprof_ranges").fetchone() == (2,)
    assert listing(tmp_path) == ["rank0.sqlite"]


def test_a_live_reader_open_at_close_leaves_one_file_when_it_closes(tmp_path):
    """The live view reads the file while the job writes it: open when the writer closes, it closes last and
    folds the WAL in, so the run's folder keeps one file per rank."""
    path = tmp_path / ODD / "rank0.sqlite"
    collector = running_rank(path)
    cursor = RankCursor(path, not_before_ns=0)
    assert cursor.poll() == 1
    collector.close()
    cursor.db.close()
    assert listing(path.parent) == ["rank0.sqlite"]
    assert int((sources.read(path, {})[0].events.to_frame()["name"] == "ProfileStep").sum()) == 2


def test_settle_makes_a_killed_ranks_files_one_file(tmp_path):
    """What ``distprof demo --hang`` does to the rank files of the job it ended."""
    path = killed_rank(tmp_path)
    settle(path)
    settle(path.parent / "rank9.sqlite")  # absent: nothing
    assert listing(path.parent) == ["rank0.sqlite"]
    assert int((sources.read(path, {})[0].events.to_frame()["name"] == "ProfileStep").sum()) == 2
