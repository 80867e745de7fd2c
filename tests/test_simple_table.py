"""reports.tables.simple_table against the library it replaced: tabulate's "simple" format with numbers not
parsed, byte for byte, on random tables (text, numbers, None, blank ends, line breaks, ragged rows, more or
fewer titles than columns, no rows). tabulate 0.9 wrote every golden output; the tests' extras keep it."""

import random

import pytest

from distprof.reports.tables import simple_table

tabulate = pytest.importorskip("tabulate").tabulate

PIECES = ["", " ", "a", "ab c", "  x  ", "12.50", "-", "1e3", "True", "None", "x\ny", "\nlead", "trail\n",
          "a\n\nb", "r\rs", "p\r\nq", "long name here", "…", "ünï", "3", "-4.2"]
TITLES = ["name", "calls", "a\nb", "", "x y", "GPU\ntotal (ms)"]


def _cell(rng: random.Random):
    draw = rng.random()
    if draw < 0.05:
        return None
    if draw < 0.1:
        return rng.choice([1, 2.5, True, -3])
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))


def _table(rng: random.Random, one_line: bool) -> tuple[list, list]:
    columns, height = rng.randint(0, 5), rng.randint(0, 5)
    titles = [rng.choice(TITLES) if rng.random() > 0.3 else str(_cell(rng))
              for _ in range(rng.randint(1, 5) if rng.random() < 0.2 else max(columns, 1))]
    rows = [[_cell(rng) for _ in range(columns if rng.random() < 0.9 else rng.randint(0, 5))]
            for _ in range(height)]
    if one_line:
        def flat(value):
            return value.replace("\n", " ").replace("\r", " ") if isinstance(value, str) else value
        titles, rows = [flat(title) for title in titles], [[flat(cell) for cell in row] for row in rows]
    return rows, titles


@pytest.mark.parametrize("seed", range(4))
def test_simple_table_is_tabulate_simple_byte_for_byte(seed):
    rng = random.Random(seed)
    kinds = set()
    for _ in range(1500):
        rows, titles = _table(rng, one_line=rng.random() < 0.5)
        expected = tabulate(rows, headers=titles, tablefmt="simple", disable_numparse=True)
        assert simple_table(rows, titles) == expected, (titles, rows)
        kinds.add(("\n" in "".join(map(str, titles))) + 2 * (not rows))
    assert kinds == {0, 1, 2, 3}  # one-line and multi-line titles, with rows and without


def test_a_table_as_the_reports_print_it():
    rows = [["ncclKernel_AllReduce", "12", "3.50"], ["aten::mm\n(fused)", "4", "-"]]
    assert simple_table(rows, ["Name", "Calls", "GPU total\n(ms)"]).splitlines() == [
        "Name                  Calls    GPU total",
        "                               (ms)",
        "--------------------  -------  -----------",
        "ncclKernel_AllReduce  12       3.50",
        "aten::mm              4        -",
        "(fused)",
    ]
