"""The read-ahead (sources.readahead): the next Kineto file's bytes read on a thread while the one before
is decoded. What it hands over must be what the reader would have read itself, errors included, and
nothing of it may outlive the merge or be inherited by a fork."""

from __future__ import annotations

import gzip
import shutil
import threading
from pathlib import Path

import pytest

from distprof import config as config_mod
from distprof import pipeline, sources
from distprof.events import SourceError
from distprof.reports import findings
from distprof.sources import readahead

DATA = Path(__file__).parent / "data"
DDP = DATA / "torch_ddp" / "late"
NSYS = DATA / "nsys" / "nvfuser_report1_nsys2025.1.1.sqlite.gz"


def _threads_left() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "distprof-read-ahead" and t.is_alive()]


def test_each_kineto_file_is_handed_over_as_the_reader_reads_it(tmp_path, monkeypatch):
    plain = tmp_path / "rank1.json"
    plain.write_bytes(gzip.decompress((DDP / "rank1.json.gz").read_bytes()))
    paths = [DDP / "rank0.json.gz", plain, NSYS]
    read, read_file_bytes = [], sources.read_file_bytes

    def recorded(path, config):
        read.append(path)
        return read_file_bytes(path, config)

    monkeypatch.setattr(sources, "read_file_bytes", recorded)
    with readahead.reading_ahead(paths, {}):
        assert readahead.reading_ahead_now()
        first = readahead.taken(paths[0])
        last = readahead.taken(plain)  # read while rank0 was decoded
    assert first == read_file_bytes(paths[0], {})
    assert last == plain.read_bytes()
    assert read == paths[:2]  # the nsys export is not the Kineto reader's: never read ahead
    assert not readahead.reading_ahead_now()
    assert _threads_left() == []


def test_a_file_out_of_turn_is_read_by_the_reader_itself(tmp_path):
    paths = [DDP / "rank0.json.gz", DDP / "rank1.json.gz"]
    with readahead.reading_ahead(paths, {}):
        assert readahead.taken(paths[1]) is None  # rank0 was read ahead, not rank1
        assert readahead.taken(paths[1]) is None  # and after rank1 nothing is left to read
    assert readahead.taken(paths[0]) is None      # outside the block nothing is read ahead
    assert _threads_left() == []


def test_after_a_file_that_is_not_read_ahead_the_next_one_is(tmp_path):
    paths = [NSYS, DDP / "rank0.json.gz", DDP / "rank1.json.gz"]
    with readahead.reading_ahead(paths, {}):
        assert readahead.taken(paths[1]) is None  # the nsys export first: nothing was read ahead
        assert readahead.taken(paths[2]) == sources.read_file_bytes(paths[2], {})  # read while rank0 was
    assert _threads_left() == []


def test_a_corrupt_file_raises_its_own_one_line_error_in_its_turn(tmp_path):
    corrupt = tmp_path / "rank0.json.gz"
    data = bytearray((DDP / "rank0.json.gz").read_bytes())
    data[2000:2100] = bytes(b ^ 0x5A for b in data[2000:2100])  # the stream broken, its trailer whole
    corrupt.write_bytes(bytes(data))
    with pytest.raises(SourceError) as direct:
        sources.read_file_bytes(corrupt, {})
    with readahead.reading_ahead([corrupt], {}), pytest.raises(SourceError) as ahead:
        readahead.taken(corrupt)
    assert str(ahead.value) == str(direct.value)
    assert str(corrupt) in str(ahead.value) and "\n" not in str(ahead.value)


def test_a_file_too_large_to_hold_beside_another_is_not_read_ahead():
    path = DDP / "rank0.json.gz"
    expanded_mb = len(gzip.decompress(path.read_bytes())) / (1 << 20)
    config = {"input": {"max_uncompressed_mb": int(expanded_mb * readahead.AHEAD_SHARE) - 1}}
    with readahead.reading_ahead([path], config):
        assert readahead.taken(path) is None
    roomy = {"input": {"max_uncompressed_mb": int(expanded_mb * readahead.AHEAD_SHARE) + 1}}
    with readahead.reading_ahead([path], roomy):
        assert readahead.taken(path) is not None


class _Forked(Exception):
    """What the stand-in pool raises: the merge chose to read in forked workers."""


def _pool(*args, **kwargs):
    raise _Forked


def test_a_merge_under_a_read_ahead_gives_the_same_summary_and_never_forks(tmp_path, monkeypatch):
    folder = tmp_path / "ranks"
    shutil.copytree(DDP, folder)
    paths = sorted(folder.glob("*.json.gz"))
    config = config_mod.load()
    monkeypatch.setenv("DISTPROF_READ_WORKERS", "1")
    alone = findings.worded(pipeline.merge_files(paths, config)).to_json()
    monkeypatch.setenv("DISTPROF_READ_WORKERS", "2")
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # the test runner's own threads aside
    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", _pool)
    with pytest.raises(_Forked):  # two workers asked for: without a read-ahead the merge forks
        pipeline.merge_files(paths, config)
    with readahead.reading_ahead(paths, config):
        ahead = findings.worded(pipeline.merge_files(paths, config)).to_json()
    assert ahead == alone
    assert _threads_left() == []


def test_a_merge_of_sqlite_files_reads_nothing_ahead_and_opens_no_database(tmp_path, monkeypatch):
    exports = []
    for rank in range(3):
        exports.append(tmp_path / f"rank{rank}.sqlite")
        exports[-1].write_bytes(gzip.decompress(NSYS.read_bytes()))
    asked = []
    monkeypatch.setattr(sources, "detect", lambda path: asked.append(path) or "nsys")
    monkeypatch.setattr(sources, "read_file_bytes", lambda path, config: asked.append(path))
    with readahead.reading_ahead(exports, {}):
        assert readahead.taken(exports[0]) is None
    assert asked == []  # told by their first bytes: no SQLite connection, no read
