"""Readers that turn files into per-rank event tables (``RankTrace``). Sources never compute
metrics. Every reader has the signature ``read(path, config) -> list[RankTrace]`` and raises
``SourceError`` with one line naming the file and the problem."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..events import RankTrace, SourceError

SQLITE_MAGIC = b"SQLite format 3\x00"


def detect(path: Path) -> str:
    """'native', 'nsys' or 'kineto', from the file's content (not only its name)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if head.startswith(b"\x1f\x8b") or path.suffix == ".json" or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if head != SQLITE_MAGIC:
        raise SourceError(f"{path}: not a SQLite file, nsys export or Kineto JSON trace")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as error:
        raise SourceError(f"{path}: corrupt SQLite file ({error})") from None
    if "distprof_meta" in tables:
        return "native"
    return "nsys"


def communication_prefixes(config: dict) -> tuple[str, ...]:
    """Kernel-name prefixes of communication kernels: ``communication.kernel_prefixes`` of the
    config, else the shipped default; the one place every reader takes them from."""
    from ..config import DEFAULTS
    default = DEFAULTS["communication"]["kernel_prefixes"]
    return tuple((config.get("communication") or {}).get("kernel_prefixes", default))


def read(path: str | Path, config: dict) -> list[RankTrace]:
    """Read one file of any supported format."""
    path = Path(path)
    kind = detect(path)
    if kind == "native":
        from . import native
        return native.read(path, config)
    if kind == "nsys":
        from . import nsys
        return nsys.read(path, config)
    from . import kineto
    return kineto.read(path, config)


def expand(inputs: list[str]) -> list[Path]:
    """Files, directories (their trace files) and globs, sorted by name, without duplicates."""
    import glob
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found += [p for p in sorted(path.iterdir()) if p.is_file() and
                      (p.suffix in (".sqlite", ".json") or p.name.endswith(".json.gz"))]
        elif any(ch in item for ch in "*?["):
            found += [Path(p) for p in sorted(glob.glob(item))]
        else:
            found.append(path)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return sorted(unique, key=lambda p: (p.name, str(p)))


__all__ = ["read", "detect", "expand", "communication_prefixes"]
