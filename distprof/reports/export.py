"""Machine-readable outputs: summary.json (the documented keys) and a per-rank CSV."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import asdict

from .. import outpaths
from ..names import cap_names, printable
from ..results import FIGURES
from . import findings as findings_words

if TYPE_CHECKING:
    from ..results import Summary

SUMMARY_FILE = "summary.json"


def write_summary(summary: Summary, out: str | Path) -> Path:
    """summary.json, ranks.csv and collectives.csv in ``out``; names cut (names.cap_names): a 100 kB
    kernel name once made a 117 MB summary.json. The rank files keep the full names. Worded here
    (findings.worded: a no-op on a worded summary), so no reason is ever written as a code."""
    summary = findings_words.worded(summary)
    path = write_json(cap_names(summary).to_json(), out)  # cut on the record: a smaller walk than its JSON
    write_csv(summary, Path(out) / "ranks.csv")
    write_collectives_csv(summary, Path(out) / "collectives.csv")
    return path


def written_line(summary: Summary, out: str | Path) -> str:
    """"wrote OUT/summary.json, ranks.csv, collectives.csv": every file write_summary wrote, named where
    the outputs are listed (ranks.csv and collectives.csv were written without a word). The folder printed
    escaped: it can hold the host's name ({host}), which anyone can set to terminal controls."""
    names = [SUMMARY_FILE, "ranks.csv", *(["collectives.csv"] if summary.collectives.rows else [])]
    return f"wrote {printable(Path(out) / names[0])}, " + ", ".join(names[1:])


def write_json(summary: dict, out: str | Path) -> Path:
    """``summary`` (JSON content: summary.json's, or the timer-only benchmark's) as OUT/summary.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SUMMARY_FILE
    return outpaths.write_text(path, indented_json(summary) + "\n")


def indented_json(content: object) -> str:
    """``json.dumps(content, indent=1)``, byte for byte, at a quarter of its time: with an indent the stdlib
    encodes in Python (20 ms for a 109k-event rank's summary), so the C encoder writes it on one line (the
    same escapes and float texts) and msgspec's formatter re-indents it, passing every token through as
    written. NaN and Infinity are not JSON to msgspec: those few summaries take the stdlib's own path."""
    try:
        return msgspec.json.format(json.dumps(content).encode(), indent=1).decode()
    except msgspec.DecodeError:
        return json.dumps(content, indent=1)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: control characters escaped as the text report shows them
    (names.printable: a trace name holding ESC reached collectives.csv raw, and `cat` of it acted on it), then
    text starting like a formula (a process-group name "=HYPERLINK(..." from a trace) gets a leading ' ;
    numbers stay numbers, None is empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = printable(value)
        return "'" + value if value.startswith(FORMULA_STARTS) else value
    return value


def _cells(values: list) -> list:
    """A CSV row: text cut as in summary.json (names.cap_names), then made spreadsheet-safe."""
    return [csv_cell(cap_names(value)) for value in values]


def write_csv(summary: Summary, path: Path) -> Path:
    """ranks.csv: a row per rank, its Distributed Summary figures (results.FIGURES) and clock."""
    columns = ["rank", "steps", *FIGURES, "clock_offset_ns", "clock_uncertainty_ns", "source_file"]
    with outpaths.atomic_open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in summary.ranks:
            figures = asdict(row.figures)  # the figures by the names FIGURES lists
            writer.writerow(_cells([row.rank, row.figures.steps, *(figures[f] for f in FIGURES),
                                    row.clock.offset_ns, row.clock.uncertainty_ns, row.source_file]))
    return path


COLLECTIVE_CSV = ("kind", "group", "node_span", "size_bucket", "count", "matched", "total_ns", "wait_ns",
                  "wait_share", "transfer_median_ns", "bytes_median", "algbw_median_gbps", "busbw_median_gbps",
                  "peak_share")


def write_collectives_csv(summary: Summary, path: Path) -> Path | None:
    """collectives.csv: the Collectives table (summary.json ``collectives.rows``); none without rows."""
    rows = summary.collectives.rows
    if not rows:
        return None
    with outpaths.atomic_open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLLECTIVE_CSV)
        for row in rows:  # the columns of COLLECTIVE_CSV, in its order
            writer.writerow(_cells([row.kind, row.group, row.node_span, row.size_bucket, row.count,
                                    row.matched, row.total_ns, row.wait_ns, row.wait_share,
                                    row.transfer_median_ns, row.bytes_median, row.algbw_median_gbps,
                                    row.busbw_median_gbps, row.peak_share]))
    return path


REQUIRED_KEYS = ("ranks", "world_size", "source")
MAX_SUMMARY_MB = 512   # a summary of 100k ranks is tens of MB; beyond this it is not one
MAX_DEPTH = 32         # a summary nests 7 levels deep
MAX_ITEMS = 1 << 20    # a list of a summary: at most one row per rank (sources.MAX_WORLD_SIZE)
# the other JSON that distprof writes and nothing reads back, by keys only it has: named when given as a summary
OTHER_OUTPUTS = {"diff": {"runs", "step_time", "movers", "checks_changed"},
                 "hang": {"root_ranks", "culprits", "waiting"}}
RANK_FILE_HINT = "is a rank file, not a summary: run `distprof merge {path} -o OUT` first, then `distprof report OUT`"


def read_summary(path: str | Path) -> Summary:
    """Load a summary.json (a file, or a directory holding one) as the typed Summary; one-line
    error if unusable, saying what to run instead when it is a rank file (SQLite, gzip'd or plain
    Kineto trace), and naming the key path where its content does not fit the types (every leaf is
    checked: a report trusts them). A NaN or infinite figure (json.loads reads them) is unknown, null,
    where its type allows one, with a warning naming the first; elsewhere it is refused as any wrong leaf."""
    from .. import console
    from ..events import SourceError
    from ..results import Summary
    from ..typed import JsonError
    content = _read_json(path)
    unknown: dict[str, float] = {}
    try:
        unknown = _non_finite(content)
        summary = Summary.from_json(_nulled(content, "$", set(unknown)) if unknown else content)
    except JsonError as error:
        said = str(error)
        where = said.split(": ", 1)[0]
        if where in unknown and said.endswith("got null"):  # null was NaN or infinite in the file
            said = said[:-len("null")] + repr(unknown[where])
        raise SourceError(f"{path}: not a complete distprof summary.json ({said})") from None  # as given
    if unknown:
        console.warn(f"{path}: {len(unknown)} figure(s) NaN or infinite (first: {next(iter(unknown))[2:]}): read "
                     "as unknown (\"-\"); merge the run again to get them")
    return summary


_TEXTS = (str, bool, type(None))
INT64 = 1 << 63   # a figure beyond int64 is no time, count or byte size a trace holds; numpy would overflow on it


def _non_finite(value: object, where: str = "$", found: dict | None = None) -> dict[str, float]:
    """The key paths of the NaN and infinite numbers in ``value`` and their values, in file order; a JsonError
    for an integer beyond int64. ``value`` is _read_json's: at most MAX_DEPTH deep (the recursion is bounded)."""
    from ..typed import JsonError
    found = {} if found is None else found
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        kind = type(item)
        if (kind is int and -INT64 <= item < INT64) or (kind is float and math.isfinite(item)) or kind in _TEXTS:
            continue
        at = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"
        if isinstance(item, float):
            found[at] = item
        elif isinstance(item, int) and not -INT64 <= item < INT64:
            raise JsonError(f"{at}: {item:.3g} is out of range (a figure fits in 64 bits)")
        elif isinstance(item, (dict, list)):
            _non_finite(item, at, found)
    return found


def _nulled(value: object, where: str, paths: set[str]) -> object:
    """``value`` with the numbers at ``paths`` as None (a copy of what holds them)."""
    if isinstance(value, dict):
        return {key: None if f"{where}.{key}" in paths else _nulled(item, f"{where}.{key}", paths)
                for key, item in value.items()}
    if isinstance(value, list):
        return [None if f"{where}[{i}]" in paths else _nulled(item, f"{where}[{i}]", paths)
                for i, item in enumerate(value)]
    return value


def _traces_in(folder: Path) -> int:
    """How many trace files (what `distprof merge` reads) lie directly in ``folder``: a folder of rank
    files given where a merge's output was meant gets the command that makes one."""
    try:
        return sum(1 for p in folder.iterdir() if p.name.endswith(outpaths.TRACE_SUFFIXES + outpaths.REPORT_SUFFIXES)
                   and not outpaths.is_own_file(p.name) and p.is_file())
    except OSError:
        return 0


def _read_json(path: str | Path) -> dict:
    """A summary.json's content, checked for the shape every summary has (an object with rank rows)."""
    from ..events import SourceError
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        if path.is_dir():
            raise SourceError(f"{path}: is a directory, not a summary.json")
        size = path.stat().st_size
        if size > MAX_SUMMARY_MB << 20:
            raise SourceError(f"{path}: refused unread: {size >> 20} MB, above the {MAX_SUMMARY_MB} MB a "
                              "summary.json can be")
        data = path.read_bytes()
    except OSError as error:
        traces = _traces_in(path.parent) if path.name == SUMMARY_FILE and not path.exists() else 0
        if traces:
            raise SourceError(f"{path.parent}: no {SUMMARY_FILE} here, but {traces} trace file(s): a folder of rank "
                              f"files, not a merge's output: run `distprof merge {path.parent} -o OUT` first, then "
                              "`distprof report OUT`") from None
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    if data.startswith((b"SQLite format 3\x00", b"\x1f\x8b")):
        raise SourceError(f"{path}: {RANK_FILE_HINT.format(path=path)}")
    try:
        summary = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a distprof summary.json (not UTF-8 text)") from None
    except json.JSONDecodeError as error:
        raise SourceError(f"{path}: not valid JSON (line {error.lineno})") from None
    except RecursionError:
        raise SourceError(f"{path}: not a distprof summary.json (JSON nested too deep)") from None
    problem = _shape_problem(summary)
    if problem:
        raise SourceError(f"{path}: not a distprof summary.json ({problem})")
    if isinstance(summary, (dict, list)) and (isinstance(summary, list) or "traceEvents" in summary):
        raise SourceError(f"{path}: {RANK_FILE_HINT.format(path=path)}")
    if not isinstance(summary, dict):
        raise SourceError(f"{path}: not a distprof summary.json (a JSON {type(summary).__name__}, not an object)")
    made_by = next((command for command, keys in OTHER_OUTPUTS.items() if keys <= summary.keys()), None)
    if made_by:
        raise SourceError(f"{path}: `distprof {made_by}`'s output ({made_by}.json), not a summary.json: pass the "
                          "output folder of a `distprof merge` (or its summary.json)")
    missing = [key for key in REQUIRED_KEYS if key not in summary]
    if missing:
        raise SourceError(f"{path}: not a complete distprof summary.json (missing key {missing[0]!r})")
    if not isinstance(summary["ranks"], list) or not all(isinstance(r, dict) and "rank" in r for r in summary["ranks"]):
        raise SourceError(f"{path}: not a distprof summary.json ('ranks' is not a list of rank rows)")
    return summary


def _shape_problem(summary: object) -> str | None:
    """The first list longer than MAX_ITEMS or nesting deeper than MAX_DEPTH ("where: what"), or
    None: what reads a summary must not recurse without bound or size arrays by a hostile list."""
    stack: list[tuple[object, str, int]] = [(summary, "$", 0)]
    while stack:  # containers only
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep at {where}"
        if isinstance(value, list):
            if len(value) > MAX_ITEMS:
                return f"{where} holds {len(value):,} items, above the limit of {MAX_ITEMS:,}"
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)
                         if isinstance(item, (dict, list)))
        elif isinstance(value, dict):
            stack.extend((item, f"{where}.{key}", depth + 1) for key, item in value.items()
                         if isinstance(item, (dict, list)))
    return None
