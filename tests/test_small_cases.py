"""Smaller cases of issue 57, item 9, each with its one-line answer."""

import random

import pytest

from distprof.ranges import ranks_text
from distprof.reports import export, text
from distprof.sections.findings import Check

# a launcher's variables: unset, the Profiler is one rank of one
LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")


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

    from kineto_fixtures import one_group_job
    files = one_group_job(tmp_path / "job", "\x1b[2J\x1b]0;owned\x07dp")
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


def test_a_killed_live_view_is_said_once_and_recorded(tmp_path, monkeypatch, capsys):
    """The view's process killed mid-run: rank 0 said nothing and summary.json's live read as if the view had
    seen the end (its nodes 'open'). Now one warning line, and live.ended says how it ended."""
    import json
    import os
    import signal
    import time

    import distprof
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    with distprof.Profiler(out=tmp_path, quiet=True, live={"every_steps": 2}) as prof:
        deadline = time.monotonic() + 60
        while not (tmp_path / "live.json").exists() and time.monotonic() < deadline:
            with distprof.phase("forward"):
                time.sleep(0.02)
            prof.step()
        assert (tmp_path / "live.json").exists()
        os.kill(prof._live.process.pid, signal.SIGKILL)
        prof._live.process.wait(timeout=10)
        for _ in range(4):
            prof.step()
    said = [line for line in capsys.readouterr().err.splitlines() if "live view" in line]
    assert len(said) == 1 and said[0].startswith("distprof: warning: the live view ended early (killed by "
                                                  "SIGKILL): its last window steps "), said
    record = json.loads((tmp_path / "summary.json").read_text())["live"]
    assert record["ended"] == "killed by SIGKILL" and record["windows"]
    from distprof.reports import live_text
    from distprof.sections.machine import Live
    shown = live_text.section(Live.from_json(record))[0]
    assert "the live view ended early (killed by SIGKILL): no window after steps" in shown


def test_a_view_that_ends_by_its_stop_is_not_said(tmp_path, capsys):
    import subprocess
    import sys

    from distprof import live
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    (tmp_path / live.LIVE_FILE).write_text('{"every_steps": 2, "windows": [], "alerts": [], "skipped": []}')
    record = live.stop(live.LiveProcess(process, tmp_path))
    assert record == {"every_steps": 2, "windows": [], "alerts": [], "skipped": []} and capsys.readouterr().err == ""
    assert live.ended_early(1, True) == "failed, exit status 1" and live.ended_early(0, True) is None
    assert live.ended_early(-15, False) == "killed by SIGTERM at the stop"


def test_a_silent_sender_does_not_hold_every_ranks_windows(monkeypatch):
    """A sender stopped (SIGSTOP, a frozen host) sends no heartbeat: the view held each window LAG_S for its
    results, then the windows that piled up came at once and beyond MAX_PENDING were skipped for every rank
    (12 of 20). Silent for SILENT_S, its ranks are behind at once; a node that speaks is still waited for."""
    from distprof import live
    remote = live.Remote()
    progress = {"kind": "progress", "committed": {1: 2}}
    remote.take([("message", "n1", {**progress, "node": "n1"}, 100),
                 ("message", "n2", {"kind": "progress", "node": "n2", "committed": {2: 2}}, 100)], 0)
    remote.take([], 0)  # the view polls at its pace: awake
    assert remote.holding((0, 3)) and remote.slow == set()  # both may have results on their way
    remote.nodes["n1"]["seen"] -= live.SILENT_S + 1  # n1 silent since
    remote.take([], 0)
    assert remote.holding((0, 3)) and remote.slow == {1}  # n2 still waited for, n1's rank behind at once
    remote.nodes["n2"]["seen"] -= live.SILENT_S + 1
    remote.take([], 0)
    assert not remote.holding((0, 3)) and remote.slow == {1, 2}
    starved = live.Remote()  # the view itself starved (it read nothing): silence is not judged
    starved.take([("message", "n1", {**progress, "node": "n1"}, 100)], 0)
    starved.nodes["n1"]["seen"] -= live.SILENT_S + 1
    starved.looked -= live.AWAKE_S + 1
    starved.take([], 0)
    assert starved.holding((0, 3)) and starved.slow == set()
