"""Where distprof writes: output paths checked before any analysis runs, and every file written
through a unique temporary file in its folder plus ``os.replace`` (a fixed ``summary.json.tmp``
made concurrent writers into one folder collide)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .events import SourceError

# Every file distprof writes into an output folder (merge, report --html, trace, diff, hang, the live
# view, the hang watchdog's hang_rank<r>.json): finding inputs in a folder skips them without a word
# (`merge OUTDIR`, a live run's folder). tests/test_bad_input_cli.py checks this against the writers.
# what `distprof merge` reads, by name (sources.expand); Nsight Systems reports need `nsys export --type sqlite`
TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz", ".sqlite.gz", ".sqlite.zst")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
OWN_FILES = frozenset({"summary.json", "ranks.csv", "collectives.csv", "report.html", "trace.json.gz",
                       "diff.json", "diff.html", "hang.json", "live.json", "whatif.json"})
_OWN_PATTERN = re.compile(r"hang_rank\d+\.json")


def is_own_file(name: str) -> bool:
    """True for the name of a file distprof itself writes (OWN_FILES, hang_rank<r>.json)."""
    return name in OWN_FILES or _OWN_PATTERN.fullmatch(name) is not None


# read once at import (os.umask is process-wide, not thread-safe to probe later): mkstemp makes
# 0600 files, and outputs should get the permissions of ordinary files
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _nearest_existing(path: Path) -> Path:
    """The path itself or its nearest existing ancestor (what decides if it can be created)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link: creating through it fails
            raise SourceError(f"{path}: output path is a broken symbolic link ({probe})")
        probe = probe.parent
    return probe


def _check_writable_dir(path: Path, shown: Path) -> None:
    if not path.is_dir():
        raise SourceError(f"{shown}: output path goes through {path}, which is a file, not a directory")
    if str(path.resolve()).startswith(("/proc", "/sys")):
        raise SourceError(f"{shown}: cannot write output under {path.resolve()} (a kernel file system)")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SourceError(f"{shown}: output directory {path} is not writable")


def check_dir(out: str | Path, files: tuple[str, ...] = ()) -> Path:
    """``out`` as an output directory that exists or can be created and written, and ``files`` in
    it as files that can be written (one named summary.json being a directory failed only after
    the whole analysis); a probe file proves an existing folder writable. One-line errors."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SourceError(f"{out}: output directory is an existing file (choose another -o)")
    _check_writable_dir(_nearest_existing(out), out)
    for name in files:
        if (out / name).is_dir():
            raise SourceError(f"{out / name}: output file is an existing directory (remove it or choose another -o)")
    if out.is_dir():
        _probe(out)
        for name in files:
            _check_replaceable(out / name)
    return out


def _check_replaceable(path: Path) -> None:
    """An existing output file that cannot be replaced fails here, before the analysis: an
    immutable or append-only one (``chattr +i`` / ``+a``, which stops root too) made ``os.replace``
    raise PermissionError after the whole merge. A file that cannot be written (os.access) is
    linked to a probe name: the kernel refuses that, like the replace, for exactly those flags."""
    if not path.is_file() or os.access(path, os.W_OK):
        return  # absent, or writable: neither flag is set
    probe = path.parent / f".distprof-probe.{os.getpid()}.{path.name}"
    try:
        os.link(path, probe)
    except OSError as error:
        owner = path.stat().st_uid == os.geteuid() or os.geteuid() == 0  # else protected_hardlinks may refuse
        if error.errno == errno.EPERM and owner:
            raise SourceError(f"{path}: existing output file cannot be replaced (immutable or append-only? "
                              f"`lsattr {path}`; clear the flag with `chattr -i -a` or choose another -o)") from None
        return
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _probe(folder: Path) -> None:
    """Create and remove a temporary file in ``folder``: what os.access cannot tell (a read-only
    mount seen by root, ACLs, a full disk of inodes) fails here, before any analysis."""
    try:
        fd, name = new_file(folder, ".distprof-probe.")
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        raise SourceError(f"{folder}: output directory is not writable ({error.strerror or error})") from None


def new_file(folder: str | Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """(descriptor, absolute path) of a new file in ``folder`` named ``prefix`` + random + ``suffix``,
    created exclusively (no other writer holds it; a link there is not followed), mode 0600:
    tempfile.mkstemp's contract. Why not tempfile itself: with the shutil and random it imports, ~4 ms
    of every command's start-up, for these few lines."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    folder = os.path.abspath(folder)
    for _ in range(100):  # a name taken (by chance, or by another writer): draw again
        name = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", folder)


def check_file(path: str | Path) -> Path:
    """``path`` as an output file that can be (re)written; one-line error."""
    path = Path(path)
    if path.is_dir():
        raise SourceError(f"{path}: output file is an existing directory (choose another -o)")
    _check_writable_dir(_nearest_existing(path.parent), path)
    _check_replaceable(path)
    return path


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs) -> Iterator:
    """Open a unique temporary file beside ``path``; on success it replaces ``path`` atomically,
    on error it is removed: readers never see half a file, concurrent writers never collide."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_file(path.parent, f".{path.name}.", ".tmp")
    try:
        with open(fd, mode, **kwargs) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """``text`` into ``path`` atomically."""
    with atomic_open(path, "w", encoding=encoding) as handle:
        handle.write(text)
    return Path(path)


# -- a folder per rank or node: ``out`` with {rank} and {host} ----------------------------------

_FIELD = re.compile(r"\{([^{}]*)\}")
PLACEHOLDERS = ("rank", "host")


def host_name() -> str:
    """This host's name as {host} and the live view's default node name use it (the rank files'
    ``hostname`` meta is the same), made one safe folder name (folder_name)."""
    import socket
    return folder_name(socket.gethostname() or "localhost")


def folder_name(value: str) -> str:
    """``value`` (a host's name) as exactly one folder: separators and NUL become ``_``, and ``.``, ``..``
    or nothing become underscores. The name is anyone's to set: a host named ``..`` made ``--out
    '{host}'`` write into the parent folder, and one named ``a/b`` a folder two deep."""
    value = value.replace(os.sep, "_").replace("/", "_").replace("\0", "_")
    if value in ("", ".", ".."):
        return value.replace(".", "_") or "_"
    return value


def check_template(template: str | Path) -> str:
    """``template`` as an output path that can name a folder per rank or node: not empty, only the
    placeholders {rank} and {host}, and no other brace. One-line errors, before the job: ``''`` wrote
    into the current folder, and ``{{rank}}`` (no escape here) made folders ``{0}``, ``{1}``."""
    text = str(template)
    if not text.strip():
        raise SourceError(f"output path {text!r} is empty: name a folder (e.g. distprof_out, or . for this one)")
    for name in _FIELD.findall(text):
        if name not in PLACEHOLDERS:
            raise SourceError(f"{text}: unknown placeholder {{{name}}} in the output path (known: {{rank}}, {{host}})")
    if "{" in _FIELD.sub("", text) or "}" in _FIELD.sub("", text):
        raise SourceError(f"{text}: a brace outside {{rank}} and {{host}} in the output path (doubled braces "
                          "are not an escape here: write {rank} or {host}, or no brace)")
    return text


def check_one_folder(out: str | Path, option: str = "-o") -> str:
    """The output path of a command that writes one folder or file (merge, diff, hang, trace): not empty, and
    no {rank} / {host}, which name a folder per rank of a running job (the Profiler's ``out``, demo
    --out): refused in one line rather than made a folder literally named ``{rank}``."""
    text = check_template(out)
    if has_placeholders(text):
        raise SourceError(f"{option} {text}: {{rank}} and {{host}} name a folder per rank of a running job "
                          "(the Profiler's out, demo --out); this command writes one: name it without them")
    return text


def has_placeholders(template: str | Path) -> bool:
    """Whether an output path names a folder per rank or node ({rank}, {host}); a path that cannot be an
    output template (check_template) is a one-line error here, where every reader of one asks first."""
    return _FIELD.search(check_template(template)) is not None


def expand(template: str | Path, rank: int, host: str | None = None) -> Path:
    """``template`` with {rank} and {host} filled in: every rank writes under its own folder (a
    node's local disk), and no rank needs another's. Any other {name} is a one-line error: a
    misspelt placeholder would otherwise make one literal folder that every rank shares."""
    def field(match: re.Match) -> str:
        name = match.group(1)
        if name == "rank":
            return str(int(rank))
        return folder_name(host) if host is not None else host_name()
    return Path(_FIELD.sub(field, check_template(template)))
