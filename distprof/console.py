"""The console: lines a person reads on a terminal. Report prose wraps at ``WRAP`` characters, tables
fit ``TABLE_WIDTH``. Warnings on stderr stay one line each (``distprof: warning: ...``, like a
compiler's diagnostics) so that a log can be grepped; the report repeats them wrapped, first."""

from __future__ import annotations

import sys

TABLE_WIDTH = 200  # console tables fit this many columns; prose lines wrap at WRAP
WRAP = 160


def wrapped(line: str, width: int = WRAP) -> list[str]:
    """One prose line of a report as console lines of at most ``width`` characters: its indentation
    kept, continuation lines hanging under the text after a leading marker ("-> ", "note: ")."""
    if len(line) <= width:
        return [line]
    import textwrap
    body = line.lstrip(" ")
    indent = " " * (len(line) - len(body))
    marker = next((m for m in ("-> ", "note: ", "straggler: ") if body.startswith(m)), "")
    return textwrap.wrap(body, width, initial_indent=indent, subsequent_indent=indent + " " * (len(marker) or 2),
                         break_on_hyphens=False, break_long_words=False)


def warn(text: str) -> None:
    """``distprof: warning: TEXT`` on stderr, one line."""
    print(f"distprof: warning: {text}", file=sys.stderr, flush=True)


def progress(items, desc: str):
    """A progress bar over files on a terminal only (tqdm): CI logs and pipes stay clean, and do not
    even import it."""
    if not sys.stderr.isatty() or len(items) < 2:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=desc, unit="file", leave=False)
