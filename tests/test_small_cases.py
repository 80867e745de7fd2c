"""Smaller cases of issue 57, item 9, each with its one-line answer."""

import random

from distprof.ranges import ranks_text
from distprof.reports import text
from distprof.sections.findings import Check


def check(rank: int, status: str, message: str) -> Check:
    return Check("stream_placement", rank, 0, status, ["7"], ["7"], ["7"], 1, 1, 1, 0.0, ["allreduce"], message, "")


def test_a_checks_line_at_1024_ranks_fits_its_width():
    # every other rank FAIL, and a scattered set WARN: the rank lists were 1,164 characters in a 100-column report
    picked = sorted(random.Random(7).sample(range(1, 1024, 2), 300))
    checks = [check(r, "FAIL", "allreduce on the compute stream") if r % 2 == 0 else
              check(r, "WARN", "separate stream, but issued late") if r in picked else check(r, "PASS", "ok")
              for r in range(1024)]
    lines = text.check_lines(checks, "ms", 100)
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert lines[1] == ("  FAIL  ranks 0, 2, ..., 1022 (step 2, 512 ranks) stream_placement: allreduce on the "
                        "compute stream")
    warn = next(line for line in lines if line.startswith("  WARN"))
    assert warn.endswith(", ... (300 ranks) stream_placement: separate stream, but issued late"), warn
    assert ranks_text([1, 2, 3, 7]) == "ranks 1-3, 7" and ranks_text([5]) == "rank 5"
    assert ranks_text([0, 2, 4, 6]) == "ranks 0, 2, 4, 6"
    narrow = text.check_lines(checks, "ms", 60)
    assert narrow[1:3] == ["  FAIL  ranks 0, 2, ..., 1022 (step 2, 512 ranks) stream_placement:",
                           "        allreduce on the compute stream"]
