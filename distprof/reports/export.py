"""Machine-readable outputs: summary.json (the documented keys) and a per-rank CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..analyses.distributed import FIGURES

SUMMARY_FILE = "summary.json"


def write_summary(summary: dict, out: str | Path) -> Path:
    """summary.json and ranks.csv in ``out``."""
    path = write_json(summary, out)
    write_csv(summary, Path(out) / "ranks.csv")
    return path


def write_json(summary: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)  # a reader never sees half a file
    return path


def write_csv(summary: dict, path: Path) -> Path:
    columns = ["rank", "steps", *FIGURES, "clock_offset_ns", "clock_uncertainty_ns", "source_file"]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in summary["ranks"]:
            writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return path


def read_summary(path: str | Path) -> dict:
    """Load a summary.json (a file, or a directory holding one); one-line error if unusable."""
    from ..events import SourceError
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text())
    except OSError as error:
        raise SourceError(f"{path}: cannot read ({error.strerror or error})") from None
    except json.JSONDecodeError as error:
        raise SourceError(f"{path}: not valid JSON (line {error.lineno})") from None
    if not isinstance(summary, dict) or "ranks" not in summary:
        raise SourceError(f"{path}: not a distprof summary.json (no 'ranks')")
    return summary
