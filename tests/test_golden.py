"""Golden summaries: summary.json of every real trace in tests/data and of a fixed demo run must
not change unless a commit says why.

The merge runs in process (``cli.merge_files``, the function behind ``distprof merge``) with the
default config. Paths are reduced to file names so the result does not depend on where the data
lies. To regenerate after a deliberate change of a figure (say why in the commit message)::

    DISTPROF_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from nsys_fixtures import real_export

from distprof import config as config_mod
from distprof.cli import merge_files

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden"
REGENERATE = os.environ.get("DISTPROF_REGEN_GOLDEN") == "1"

NSYS = ("flameox_nsight-2025.5.2.sqlite", "nsysai_h100_2gpu_1s.sqlite", "nvfuser_report1_nsys2025.1.1.sqlite",
        "pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite", "quasiben_nvtx-examples_cudf-groupby.sqlite")
KINETO = tuple(sorted(p.name for p in (DATA / "kineto").iterdir() if p.is_dir()))


def _inputs(case: str) -> list[Path]:
    kind, name = case.split("/", 1)
    if kind == "nsys":
        return [real_export(name)]
    if kind == "kineto":
        return sorted((DATA / "kineto" / name).glob("*.json.gz"))
    return sorted((DATA / "demo_ranks").glob("rank*.sqlite"))


def normalized(summary: dict, inputs: list[Path]) -> dict:
    """The summary as JSON would store it, with the input folders cut from every path."""
    text = json.dumps(summary, sort_keys=False)
    for folder in {str(path.parent) for path in inputs}:
        text = text.replace(folder + "/", "")
    return json.loads(text)


CASES = [f"nsys/{n}" for n in NSYS] + [f"kineto/{n}" for n in KINETO] + ["demo/demo_ranks"]


@pytest.mark.parametrize("case", CASES)
def test_summary_matches_golden(case: str) -> None:
    inputs = _inputs(case)
    summary = normalized(merge_files(inputs, config_mod.load(None)), inputs)
    golden = GOLDEN / (case.replace("/", "__") + ".json")
    if REGENERATE or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(summary, indent=1) + "\n")
        if not REGENERATE:
            pytest.fail(f"{golden.name} was missing and has been written; run again")
    assert summary == json.loads(golden.read_text())


LANE_LABEL = re.compile(r"^(thread (\d+))(?: \((.+)\))?$")


def _thread_labels(value, found: dict) -> dict:
    """Every 'thread N' / 'thread N (name)' string in a summary, by thread id."""
    if isinstance(value, dict):
        for item in value.values():
            _thread_labels(item, found)
    elif isinstance(value, list):
        for item in value:
            _thread_labels(item, found)
    elif isinstance(value, str) and (match := LANE_LABEL.match(value)):
        found.setdefault(match.group(2), set()).add(value)
    return found


@pytest.mark.parametrize("case", CASES)
def test_one_label_per_lane_in_every_golden(case: str) -> None:
    """One lane identity: a thread is labelled the same in every table of a summary (the device table
    said 'thread 3476' where the lanes said 'thread 3476 (MainThread)')."""
    labels = _thread_labels(json.loads((GOLDEN / (case.replace("/", "__") + ".json")).read_text()), {})
    assert {thread: texts for thread, texts in labels.items() if len(texts) > 1} == {}
