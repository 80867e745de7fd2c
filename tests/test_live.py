"""The live view (issue 27): config, demo flags, window readiness, the alert rule, the view's file
cursor and exports, and a real mpirun job printing windows while it trains (under torchrun: test_torch)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import numpy as np
import pytest
from conftest import foreign_cores, machine_clock, run_cli, skip_if_busy
from result_views import live_window

from distprof import collector, live
from distprof import config as config_mod
from distprof import events as ev
from distprof.analyses.live import AlertRule
from distprof.demo.job import parse_straggler
from distprof.reports import live_text
from distprof.sections.machine import Behind, LiveAlert, WindowSpread
from distprof.sources import native


@pytest.mark.parametrize("live_config, key", [({"every_steps": -1}, "live.every_steps"),
                                              ({"prometheus_port": 0}, "live.prometheus_port"),
                                              ({"prometheus_port": 70000}, "live.prometheus_port"),
                                              ({"prometheus_port": "9100"}, "live.prometheus_port"),
                                              ({"textfile": ""}, "live.textfile"),
                                              ({"alerts": 1}, "live.alerts")])
def test_live_keys_are_validated(live_config, key):
    with pytest.raises(config_mod.ConfigError, match=f"key '{key}'"):
        config_mod.load(None, {"live": live_config})


ALERTS = {"enabled": True, "windows_in_a_row": 2, "straggler_min_cost_share": 0.1, "baseline_windows": 3,
          "min_baseline_windows": 2, "jump_share": 0.25, "jump_noise": 3.0, "exposed_floor_share": 0.1}
LIVE_DEFAULTS = {"every_steps": 0, "prometheus_port": None, "prometheus_addr": "127.0.0.1", "textfile": None,
                 "node": "{host}", "view_addr": None, "priority": "idle", "alerts": ALERTS}


def test_live_is_off_by_default_and_takes_its_keys():
    assert config_mod.load()["live"] == LIVE_DEFAULTS  # /metrics on loopback, side processes at idle priority
    loaded = config_mod.load(None, {"live": {"every_steps": 4, "prometheus_port": 9100, "textfile": "x.prom"}})
    assert loaded["live"] == {**LIVE_DEFAULTS, "every_steps": 4, "prometheus_port": 9100, "textfile": "x.prom"}


def test_straggler_from_a_step_parses_and_old_form_still_works():
    assert parse_straggler("1:50@12") == (1, 0.05, 12)
    assert parse_straggler("2:50") == (2, 0.05, 0)


@pytest.mark.parametrize("text", ["1:50@", "1:50@x", "1:50@-2"])
def test_demo_rejects_bad_straggler_step(text):
    result = run_cli("demo", "--ranks", "2", "--straggler", text, "--dry-run")
    assert result.returncode == 2 and "--straggler: STEP" in result.stderr and "Traceback" not in result.stderr


def test_demo_passes_live_flags_to_the_job():
    result = run_cli("demo", "--ranks", "2", "--straggler", "1:50@12", "--live-every", "4",
                     "--prometheus-port", "9109", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "--straggler 1:50@12 --live-every 4 --prometheus-port 9109" in result.stdout
    bad = run_cli("demo", "--prometheus-port", "0", "--dry-run")
    assert bad.returncode == 2 and "--prometheus-port: expected a TCP port" in bad.stderr


def test_windows_are_ready_when_every_rank_committed_or_one_is_a_window_past():
    assert live.ready_windows([3, 2], 0, 4, final=False) == []
    assert live.ready_windows([3, 3], 0, 4, final=False) == [(0, 3)]
    assert live.ready_windows([9, 6], 0, 4, final=False) == [(0, 3)]  # 4-7 waits for rank 1
    assert live.ready_windows([7, None], 0, 4, final=False) == [(0, 3)]  # rank 1 missing: behind
    assert live.ready_windows([6, None], 0, 4, final=False) == []
    assert live.ready_windows([5, 2], 4, 4, final=True) == []
    assert live.ready_windows([9, 2], 4, 4, final=True) == [(4, 7)]
    assert live.ready_windows([None, None], 0, 4, final=True) == []


def _window(first: int, straggler: int | None, step_ms: list[float], exposed_ms: float = 1.0, cost_share: float = 0.1,
            **parts):
    durations = [int(v * 1e6) for v in step_ms]
    row = {"rank": 0, "steps": len(durations), "step_ns": sorted(durations)[len(durations) // 2],
           "step_durations_ns": durations, "exposed_communication_ns": int(exposed_ms * 1e6 * len(durations)),
           **parts}
    return live_window([first, first + len(durations) - 1], [row], step_time_ns=row["step_ns"],
                       straggler=None if straggler is None else
                       {"rank": straggler, "cost_ns": 5_000_000, "cost_share": cost_share})


def test_straggler_alert_needs_two_windows_in_a_row_and_says_recovery():
    rule = AlertRule()
    named = [None, 1, None, 1, 1, 1, None, 1, None, None]
    codes = []
    for index, rank in enumerate(named):
        codes += [(index, a.code, a.rank) for a in rule.update(_window(4 * index, rank, [100, 101, 99, 100]))
                  if a.code.startswith("straggler")]
    assert codes == [(4, "straggler", 1), (9, "straggler_recovered", 1)]


def test_a_cheap_straggler_raises_no_alert():
    rule = AlertRule()
    cheap = [_window(4 * i, 1, [100, 100], cost_share=0.05) for i in range(4)]
    assert [a for window in cheap for a in rule.update(window)] == []


def test_step_time_jump_alerts_once_after_two_windows_above_baseline_and_noise():
    rule = AlertRule()
    series = [[100, 102, 98, 101], [99, 100, 103, 100], [101, 99, 100, 100],  # baseline ~100 ms, noise ~1.5 ms
              [120, 119, 121, 120],  # +20%: under the 25% share
              [140, 141, 139, 140], [141, 140, 142, 139], [140, 140, 141, 139],  # +40%: alert on the 2nd window
              [100, 101, 99, 100]]
    alerts = [(i, a.code) for i, steps in enumerate(series) for a in rule.update(_window(4 * i, None, steps))]
    assert alerts == [(5, "step_time_jump")]


def test_noisy_baseline_raises_no_jump():
    rule = AlertRule()
    series = [[100, 160, 70, 130], [90, 150, 100, 60], [140, 80, 120, 100], [150, 140, 130, 135],
              [150, 130, 140, 145]]  # +40% over the median, within 3 x the noise of the baseline
    assert [a for steps in series for a in rule.update(_window(0, None, steps))] == []


def test_window_and_alert_lines_start_with_the_prefix():
    window = msgspec.structs.replace(
        _window(12, 1, [100, 100, 100, 100], communication_ns=4e7, computation_ns=3e8, overlap_ns=2e7,
                overlap_ratio=0.5),
        spread=WindowSpread(step_ns=1e6, slowest_rank=1, exposed_communication_ns=None),
        behind=[Behind(rank=2, committed_step=9)])
    lines = live_text.window_lines(window)
    assert all(line.startswith("[distprof live] steps 12-15") for line in lines)
    assert "straggler rank 1 (costs 5.0 ms/step (10% of the step)" in lines[0]
    assert lines[-1].endswith("rank 2: behind (at step 9), left out of this window")
    alert = live_text.alert_line(LiveAlert(steps=[16, 19], code="straggler", rank=1, cost_ns=5e6, cost_share=0.1,
                                           windows=2))
    assert alert.startswith("[distprof live] ALERT steps 16-19: straggler rank 1")


def _file_with_steps(path: Path, steps: int) -> collector.Collector:
    rec = collector.Collector(path, 0, 1)
    rec.activate()
    for step in range(steps):
        rec.step = step
        rec.record(ev.PROFILE_STEP, ev.PHASE, ev.RANGE, 1000 * step, 1000 * step + 900)
        rec.record("forward", ev.PHASE, ev.RANGE, 1000 * step + 100, 1000 * step + 500)
        rec.flush()
    return rec


def test_cursor_follows_a_file_being_written_and_reads_only_the_window(tmp_path):
    path = tmp_path / "rank0.sqlite"
    rec = _file_with_steps(path, 6)
    cursor = live.RankCursor(path, 0)
    assert cursor.poll() == 5
    rec.step = 6
    rec.record(ev.PROFILE_STEP, ev.PHASE, ev.RANGE, 6000, 6900)
    rec.flush()
    assert cursor.poll() == 6
    trace = native.read(path, config_mod.load(), (cursor.floor(4), 4, 5))[0]
    assert sorted(set(trace.events["start_ns"].tolist())) == [4000, 4100, 5000, 5100]
    rec.close()


def test_cursor_ignores_a_previous_runs_file(tmp_path):
    path = tmp_path / "rank0.sqlite"
    _file_with_steps(path, 3).close()
    assert live.RankCursor(path, time.time_ns() + 10**9).poll() is None
    assert live.RankCursor(tmp_path / "rank1.sqlite", 0).poll() is None  # no file: not created either
    assert not (tmp_path / "rank1.sqlite").exists()


def test_textfile_export_and_a_failing_disk_cost_only_a_warning(tmp_path, capsys):
    pytest.importorskip("prometheus_client")
    window = _window(0, 1, [100, 100], communication_ns=4e7, computation_ns=3e8, overlap_ratio=0.5)
    target = tmp_path / "distprof.prom"
    live.Metrics({"textfile": str(target), "prometheus_port": None}).update(window, [])
    text = target.read_text()
    assert 'distprof_step_seconds{rank="0"} 0.1' in text and "distprof_straggler_rank 1.0" in text
    assert "distprof_straggler_cost_seconds 0.005" in text
    broken = live.Metrics({"textfile": str(tmp_path / "missing" / "x.prom"), "prometheus_port": None})
    broken.update(window, [])
    broken.update(window, [])
    assert capsys.readouterr().err.count("live view: cannot write") == 1
    assert live.view._write_record(tmp_path / "missing", {}) is False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _live_demo_job(out: Path) -> tuple[str, str | None, float, int]:
    """The 2-rank demo with a live window every 4 steps and rank 1 late from step 8, scraped once
    while it runs: (its output, the scraped /metrics text, cores other jobs took, return code)."""
    port = _free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    before = machine_clock()
    job = subprocess.Popen([sys.executable, "-m", "distprof", "demo", "--ranks", "2", "--steps", "20",
                            "--live-every", "4", "--straggler", "1:50@8", "--prometheus-port", str(port),
                            "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env)
    scraped, deadline = None, time.monotonic() + 55
    try:
        while scraped is None and job.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
                if "distprof_step_seconds{" in body:
                    scraped = body
            except OSError:
                time.sleep(0.2)
        output, _ = job.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        if job.poll() is None:
            job.kill()
    return output, scraped, foreign_cores(before, machine_clock()), job.returncode


@pytest.mark.exclusive
@pytest.mark.slow
def test_mpirun_demo_prints_windows_alerts_the_late_straggler_and_serves_metrics(tmp_path):
    """On 2 shared cores, in 1 of 3 full suites on 2026-11-27 (a fresh-clone CI on 72818bf; 0 of 20 runs
    alone), a window before the onset names a rank that really is late there (as test_live_nodes sees):
    the job is run once more before that fails the test. Windows, metrics and, when the machine was
    not busy, the alert's timing are asserted in the run kept."""
    pytest.importorskip("prometheus_client")
    for attempt in range(2):
        out = tmp_path / f"o{attempt}"
        output, scraped, busy, returncode = _live_demo_job(out)
        assert returncode == 0, output[-3000:]
        assert scraped is not None and "distprof_exposed_communication_seconds{" in scraped, \
            "no /metrics during the run"
        heads = [line.split(":")[0] for line in output.splitlines() if line.startswith("[distprof live] steps")]
        assert [h for h in heads if " rank " not in h] == [f"[distprof live] steps {a}-{a + 3}"
                                                           for a in range(0, 20, 4)]
        alerts = [line for line in output.splitlines() if line.startswith("[distprof live] ALERT")]
        straggler = [a for a in alerts if ": straggler rank" in a and "recovered" not in a]
        early = [a for a in straggler if a.startswith(tuple(f"[distprof live] ALERT steps {s}-" for s in (0, 4)))]
        final = json.loads((out / "summary.json").read_text())["skew"]["straggler"] or {}
        onset = (final.get("rank"), final.get("pattern"), final.get("onset_step"))
        if not early and onset == (1, "since step", 8):
            break
    assert not early, alerts
    # the final verdict agrees with the windows: rank 1 turned slow at step 8 (it was "persistent", its
    # cost averaged over every step, while the windows since step 8 priced it at the whole sleep). In 1 of
    # 6 fresh-clone suites on 2026-12-02 both ranks of the run were late by 40-85 ms in random steps before
    # step 8 (the hypervisor's steal), as late as the sleep: no onset shows there, and the job runs again
    assert onset == (1, "since step", 8), final
    skip_if_busy(busy, "alert timing")
    assert straggler and straggler[0].startswith(("[distprof live] ALERT steps 8-11: straggler rank 1",
                                                  "[distprof live] ALERT steps 12-15: straggler rank 1")), alerts
    assert len(straggler) == 1, alerts
    summary = json.loads((out / "summary.json").read_text())
    record = summary["live"]
    assert record["every_steps"] == 4 and [w["steps"] for w in record["windows"]][:2] == [[0, 3], [4, 7]]
    assert [a["rank"] for a in record["alerts"] if a["code"] == "straggler"] == [1]
    windows = [w["straggler"]["cost_ns"] for w in record["windows"][2:] if (w["straggler"] or {}).get("rank") == 1]
    assert windows and abs(final["cost_ns"] - float(np.median(windows))) <= 0.25 * float(np.median(windows))


def _window_rank(rank: int, step_ns: int):
    """A rank's row of a live window, with only its step time (the rest zero)."""
    from distprof.sections.machine import WindowRank
    return WindowRank(rank=rank, steps=4, step_ns=step_ns, step_durations_ns=[], communication_ns=0,
                      computation_ns=0, overlap_ns=0, exposed_communication_ns=0, overlap_ratio=None,
                      waits_for_straggler_ns=0)


def test_report_html_shows_the_windows_over_time():
    from distprof.reports import live_text
    from distprof.sections.machine import Live, LiveAlert, LiveWindow, WindowSpread
    from distprof.typed import ABSENT
    spread = WindowSpread(step_ns=None, slowest_rank=None, exposed_communication_ns=None)
    windows = [LiveWindow(steps=[a, a + 3], step_time_ns=100_000_000, spread=spread, straggler=None, behind=[],
                          ranks=[_window_rank(0, 100_000_000),
                                 _window_rank(1, 150_000_000 if a >= 12 else 100_000_000)])
               for a in range(0, 28, 4)]
    live = Live(every_steps=4, alerts=[LiveAlert(steps=[16, 19], code="straggler", rank=1)], skipped=[],
                windows=windows)
    section = live_text.html_section(live, "ms")
    assert section.startswith("<h2>Live view</h2>") and "7 windows, 1 alerts" in section
    assert section.count("<polyline") == 3  # two ranks and the job's step time
    assert ">straggler 1</text>" in section and 'stroke="#D55E00"' in section
    empty = Live(every_steps=4, windows=[], alerts=[], skipped=[])
    assert live_text.html_section(None) == "" and live_text.html_section(empty) == ""
    assert live_text.html_section(ABSENT) == "" and live_text.section(ABSENT) == []


def test_an_unpriced_straggler_alerts_by_the_waits_it_causes():
    """Ranks outnumbering their cores give the straggler no replay price; the alert then weighs the
    waits it causes, so a lagging rank on a crowded host is still told."""
    from distprof.analyses.live import AlertRule
    rule = AlertRule()
    alerts = []
    for first in range(0, 16, 4):
        window = live_window([first, first + 3], step_time_ns=100_000_000,
                             straggler={"rank": 1, "cost_ns": None, "cost_share": None, "waits_caused_share": 0.3})
        alerts += rule.update(window)
    assert [a.code for a in alerts] == ["straggler"] and alerts[0].rank == 1
