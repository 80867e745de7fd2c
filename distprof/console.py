"""The console: lines a person reads on a terminal. Reports fit the terminal's width
(``terminal_width``: ``--width``, else COLUMNS or the terminal, else ``DEFAULT_WIDTH`` when stdout is
a pipe or a file); prose wraps at that width, tables split or shorten their cells to it, so no row
breaks. Warnings on stderr stay one line each (``distprof: warning: ...``, like a compiler's
diagnostics) so that a log can be grepped; the report repeats them wrapped, first."""

from __future__ import annotations

import os
import sys

from .names import printable

TABLE_WIDTH = 200  # the widest a table gets where no width is asked for (direct callers, the diff report)
WRAP = 160         # prose lines wrap here where no width is asked for
DEFAULT_WIDTH = 100  # stdout is not a terminal (a pipe, a file, a CI log) and COLUMNS is not set
MIN_WIDTH = 40     # narrower, no table of the report fits even with its cells shortened
MAX_WIDTH = 1000   # wider is no screen: a COLUMNS or --width of 10**9 would build rows of that width


def terminal_width(requested: int | None = None) -> int:
    """The width a report fits: ``requested`` (``--width``), else COLUMNS or the terminal's own width
    (shutil.get_terminal_size reads both, in that order), else DEFAULT_WIDTH; never under MIN_WIDTH
    nor over MAX_WIDTH. A fixed 160 was wider than most terminals, and wider rows broke in the middle.
    A width of 0 is unknown, not narrow: Open MPI gives each rank a pty of 0x0 columns when mpirun's own
    stdout is a file or a pipe (a batch job's log), and that log gets DEFAULT_WIDTH."""
    if requested:
        return _bounded(int(requested))
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and columns.strip("0"):
        return _bounded(int(columns[-8:]) if len(columns.lstrip("0")) <= 8 else MAX_WIDTH)
    try:  # the terminal stdout writes to now (not the one the process started with: a redirected
        # stdout is a pipe or a file, whatever terminal the process was started from)
        width = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
    except (OSError, ValueError, AttributeError):
        width = 0
    return _bounded(width) if width > 0 else DEFAULT_WIDTH


def _bounded(width: int) -> int:
    return min(max(width, MIN_WIDTH), MAX_WIDTH)


def width_option(text: str) -> int:
    """An argparse type for ``--width N``: whole columns, at least MIN_WIDTH (said, not clamped
    silently, when asked for on the command line)."""
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of columns") from None
    if value < MIN_WIDTH:
        raise argparse.ArgumentTypeError(f"{text!r}: the report needs at least {MIN_WIDTH} columns")
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_WIDTH} columns")
    return value


def wrapped(line: str, width: int = WRAP) -> list[str]:
    """One prose line of a report as console lines of at most ``width`` characters: its indentation
    kept, continuation lines hanging under the text after a leading marker ("-> ", "note: "). A word
    longer than a whole line (a path, a kernel name) is cut across lines rather than overflow."""
    if len(line) <= width:
        return [line]
    import textwrap
    body = line.lstrip(" ")
    indent = " " * (len(line) - len(body))
    marker = next((m for m in ("-> ", "note: ", "straggler: ") if body.startswith(m)), "")
    hang = indent + " " * (len(marker) or 2)
    if len(hang) > width // 2:  # a narrow console: hang less, keep room for the text
        hang = indent[: width // 4] + "  "
    return textwrap.wrap(body, width, initial_indent=indent[: width // 2], subsequent_indent=hang,
                         break_on_hyphens=False, break_long_words=True)


def warn(text: str) -> None:
    """``distprof: warning: TEXT`` on stderr, one line (control characters escaped: a warning can
    quote a file's or a trace's names), in one write: forked readers share stderr, and print's separate
    write of the line end let another reader's warning land inside this line."""
    sys.stderr.write(f"distprof: warning: {printable(text)}\n")
    sys.stderr.flush()


def progress(items, desc: str):
    """A progress bar over files on a terminal only (tqdm): CI logs and pipes stay clean, and do not
    even import it."""
    if not sys.stderr.isatty() or len(items) < 2:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=desc, unit="file", leave=False)
