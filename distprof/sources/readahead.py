"""Reading the next Kineto file while the one before it is decoded and reduced.

A merge in one process reads its files one after the other, and a Kineto file's first cost is its
bytes: the read and the gunzip (ISA-L or zlib), both of which release the GIL. So a thread reads the
next file on another core while this one is decoded, and the first file while the analyses are
imported. Only the bytes are read ahead, by ``sources.read_file_bytes`` itself: what it raises is
raised when that file's turn comes, in its own words, and every other decision stays with the reader.
One file ahead at most, and only one whose expanded size is at most a quarter of
``input.max_uncompressed_mb``: the memory a merge holds grows by one such file's bytes, never more.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

AHEAD_SHARE = 4  # a file is read ahead when it expands to at most 1/AHEAD_SHARE of the input limit

_ACTIVE: ContextVar[ReadAhead | None] = ContextVar("distprof_read_ahead", default=None)


class _Read(threading.Thread):
    """One file's bytes read on this thread, or the exception reading them raised. The thread runs
    nothing but ``read_file_bytes``: every other step would wait for the GIL the decoder holds."""

    def __init__(self, path: Path, config: dict) -> None:
        super().__init__(name="distprof-read-ahead", daemon=True)
        self.path, self._config = path, config
        self.data: bytes | bytearray | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from . import read_file_bytes
        try:
            self.data = read_file_bytes(self.path, self._config)
        except BaseException as error:  # noqa: BLE001 - raised in the reader's thread, when it asks
            self.error = error


def _worth_reading(path: Path, config: dict) -> bool:
    """Whether ``sources.read`` gives this file's whole bytes to the Kineto reader, and they are small
    enough to hold beside another file's (a gzip whose trailer cannot tell is not read ahead). A SQLite
    file is told by its first bytes, never opened as a database here. Whatever fails is left for the
    reader to say."""
    from . import (
        MB,
        REPORT_SUFFIXES,
        SQLITE_MAGIC,
        SourceError,
        _compressed_sqlite,
        check_file,
        detect,
        expanded_size_hint,
        input_limit_mb,
    )
    try:
        check_file(path, config)
        with open(path, "rb") as handle:
            sqlite = handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
        if sqlite or path.name.endswith(REPORT_SUFFIXES) or _compressed_sqlite(path) or detect(path) != "kineto":
            return False
        return 0 < expanded_size_hint(path) <= input_limit_mb(config, "max_uncompressed_mb")[0] * MB // AHEAD_SHARE
    except (SourceError, OSError):
        return False


class ReadAhead:
    """One file read ahead of the reader, in the order of ``paths``."""

    def __init__(self, paths: Sequence[Path], config: dict) -> None:
        self._paths, self._config = [Path(path) for path in paths], config
        self._pending = self._start(0)

    def _start(self, position: int) -> _Read | None:
        """Read the file at ``position`` when the Kineto reader will read it whole (None: not read ahead;
        the reader's next turn looks at the one after it)."""
        if position >= len(self._paths) or not _worth_reading(self._paths[position], self._config):
            return None
        read = _Read(self._paths[position], self._config)
        read.start()
        return read

    def take(self, path: Path) -> bytes | bytearray | None:
        """The bytes read ahead for ``path`` (raising what reading them raised), None when they were not;
        either way the next file's read starts, so it runs while this one is decoded."""
        read, self._pending = self._pending, None
        if read is not None:
            read.join()  # one read in flight at most
        path = Path(path)
        position = next((at for at, known in enumerate(self._paths) if known == path), None)
        if position is not None:
            self._pending = self._start(position + 1)
        if read is None or read.path != path:
            return None
        if read.error is not None:
            raise read.error
        return read.data

    def close(self) -> None:
        """Wait for the read under way (one file at most): nothing runs on after the merge."""
        read, self._pending = self._pending, None
        if read is not None:
            read.join()


@contextmanager
def reading_ahead(paths: Sequence[Path], config: dict) -> Iterator[None]:
    """Read ``paths`` one file ahead of ``sources.read_bytes`` while the block runs. Within a read-ahead
    already under way (the command's, started before the analyses are imported) it adds nothing."""
    if _ACTIVE.get() is not None or len(paths) == 0:
        yield
        return
    ahead = ReadAhead(paths, config)
    token = _ACTIVE.set(ahead)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        ahead.close()


def reading_ahead_now() -> bool:
    """Whether a read-ahead is under way here (its thread must not be inherited by a fork)."""
    return _ACTIVE.get() is not None


def taken(path: Path) -> bytes | bytearray | None:
    """The bytes of ``path`` read ahead, None when no read-ahead holds them."""
    ahead = _ACTIVE.get()
    return None if ahead is None else ahead.take(path)
