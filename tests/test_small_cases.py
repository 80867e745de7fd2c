"""Smaller cases of issue 57, item 9, each with its one-line answer."""

import random

import pytest

from distprof.ranges import ranks_text
from distprof.reports import export, text
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


def test_control_bytes_of_trace_names_are_escaped_in_the_csv_files(tmp_path):
    """A process group named with ESC reached collectives.csv raw: `cat collectives.csv` cleared the screen."""
    import csv
    import subprocess
    import sys

    from kineto_fixtures import CommOp, collective_job
    hostile = "\x1b[2J\x1b]0;owned\x07dp"
    ops = {r: [CommOp("allreduce", hostile, (0, 1), 1024, start_us=100.0 + 300 * k) for k in range(3)]
           for r in (0, 1)}
    files = collective_job(tmp_path / "job", ops, world_size=2)
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "distprof", "merge", *map(str, files), "-o", str(out),
                             "--no-html"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("collectives.csv", "ranks.csv"):
        raw = (out / name).read_bytes()
        assert not [b for b in raw if b < 32 and b not in b"\r\n"] and b"\x7f" not in raw, name
    with open(out / "collectives.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {row["group"] for row in rows} == {"\\x1b[2J\\x1b]0;owned\\x07dp"}, rows
    assert export.csv_cell("a\nb\x9b") == "a\\nb\\x9b" and export.csv_cell("\x1b=x") == "\\x1b=x"


def test_instrument_without_with_leaves_the_flop_counter_when_the_forward_raises(tmp_path, monkeypatch):
    """instrument() as a plain call, the probed step's forward raising (caught by the loop, as an OOM retry
    is): the FlopCounterMode was left on torch's dispatch stack, counting every op after it."""
    torch = pytest.importorskip("torch")
    from test_torch import LAUNCH_VARS
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    import distprof
    from distprof import torch as dtorch
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)

    class Flaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.fail = torch.nn.Linear(8, 8), True

        def forward(self, x):
            x = self.layer(x)
            if self.fail:
                self.fail = False
                raise RuntimeError("out of memory (simulated)")
            return x

    model = Flaky()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        inst = dtorch.instrument(model, optimizer, profiler=prof, flops=True)  # no `with`
        with pytest.raises(RuntimeError, match="simulated"):
            model(torch.randn(2, 8))
        assert _get_current_dispatch_mode_stack() == [] and inst.model_profile is None
        model(torch.randn(2, 8)).sum().backward()  # the retry: the probe takes this step instead
        optimizer.step()
        assert _get_current_dispatch_mode_stack() == []
        assert inst.model_profile is not None and inst.model_profile["fwd_flops_per_step"] == 2 * 2 * 8 * 8
