"""What-if replay: exact on jobs that follow the model, scenario predictions known by hand, the
CLI table, and the replay error on the real traces."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distprof import align, pipeline
from distprof import config as config_mod
from distprof import events as ev
from distprof.analyses import whatif

CONFIG = config_mod.load()
MS = 1_000_000
DATA = Path(__file__).parent / "data"
F, T, OPT = 20 * MS, 10 * MS, 5 * MS  # forward, transfer, optimizer


def serial_job(ranks: int, late: int | None = None, delay: int = 0, steps: int = 5, shifts=None,
               loader: int = 0) -> list:
    """A data-parallel job that follows the model: each step, (a Dataloader phase of ``loader``,)
    forward (``delay`` longer on rank ``late``), then one blocking allreduce on a gloo-like worker
    lane that ends ``T`` after the last arrival, then the optimizer right after it; the next step
    starts when this one ends. Every rank's step is loader + F + delay + T + OPT."""
    rows = {r: [] for r in range(ranks)}
    start = 0
    for s in range(steps):
        extra = np.where(np.arange(ranks) == late, delay, 0)
        last = start + loader + F + delay
        for r in range(ranks):
            arrive = start + loader + F + extra[r]
            rows[r] += [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, start, last + T + OPT, 1, s, ""),
                        (ev.RANGE, ev.PHASE, "forward", start + loader, arrive, 1, s, ""),
                        (ev.COMM_OP, ev.COMMUNICATION, "gloo:all_reduce", arrive, last + T, 2, s, "allreduce"),
                        (ev.RANGE, ev.PHASE, "optimizer", last + T, last + T + OPT, 1, s, "")]
            if loader:
                rows[r].append((ev.RANGE, ev.PHASE, "Dataloader", start, start + loader, 1, s, ""))
        start = last + T + OPT
    results = []
    for r in range(ranks):
        kind, category, name, begin, end, lane, step, collective = (np.array(c, dtype=object) for c in zip(*rows[r]))
        shift = (shifts or [0] * ranks)[r]
        events = ev.make_events(kind=kind, category=category, name=name, rank=r, step=step.astype(np.int64),
                                start_ns=begin.astype(np.int64) + shift, end_ns=end.astype(np.int64) + shift,
                                lane=lane.astype(np.int64), collective=collective)
        results.append(pipeline.reduce_rank(ev.RankTrace(events=events, rank=r), CONFIG))
    return results


def summarize(results) -> dict:
    return pipeline.combine(results, CONFIG, source="test", world_size=len(results)).to_json()


def scenario(summary: dict, name: str) -> dict:
    return next(row for row in summary["whatif"]["scenarios"] if row["name"] == name)


@pytest.mark.parametrize("ranks", [2, 4])
def test_no_straggler_predicts_the_job_without_it(ranks):
    summary = summarize(serial_job(ranks, late=1, delay=30 * MS))
    what = summary["whatif"]
    assert what["measured_step_ns"] == F + 30 * MS + T + OPT
    assert what["replay_error"] == 0
    row = scenario(summary, "no_straggler")
    assert row["applies"] and row["rank"] == 1
    assert row["predicted_step_ns"] == F + T + OPT  # by hand: the late rank's forward at the others'
    assert row["saving_ns"] == 30 * MS
    assert row["ranks_gaining"] == list(range(ranks))
    # the job without the late rank, measured, is what was predicted
    assert summarize(serial_job(ranks))["whatif"]["measured_step_ns"] == row["predicted_step_ns"]


def test_replay_exact_on_a_model_conforming_job_with_clock_shifts():
    what = summarize(serial_job(4, late=2, delay=7 * MS, shifts=[0, 37 * MS, -12 * MS, 50 * MS]))["whatif"]
    assert what["replay_error"] == 0 and what["replay_error_max"] == 0
    assert what["replayed_step_ns"] == what["measured_step_ns"] == F + 7 * MS + T + OPT


def test_bandwidth_x2_saves_half_the_transfer_of_a_serialized_job():
    summary = summarize(serial_job(2))
    row = scenario(summary, "comm_bandwidth_x2")
    assert row["applies"] and row["saving_ns"] == T // 2
    overlap = scenario(summary, "overlap_communication")  # optimizer no longer waits: step = F + max(T, OPT)
    assert overlap["applies"] and overlap["predicted_step_ns"] == F + max(T, OPT)


def test_no_dataloader_wait_removes_the_loader_phase():
    row = scenario(summarize(serial_job(2, loader=4 * MS)), "no_dataloader_wait")
    assert row["applies"] and row["saving_ns"] == 4 * MS


def test_scenarios_that_do_not_apply_say_why():
    summary = summarize(serial_job(2))
    for name in ("no_straggler", "no_dataloader_wait"):
        row = scenario(summary, name)
        assert not row["applies"] and row["why"] and row["predicted_step_ns"] is None
    one = summarize(serial_job(1))
    row = scenario(one, "balanced_ranks")
    assert not row["applies"] and "one rank" in row["why"]


def test_findings_sorted_by_predicted_saving():
    summary = summarize(serial_job(4, late=3, delay=30 * MS, loader=25 * MS))
    keys = [f["cost_ns"] if f["predicted_saving_ns"] is None else f["predicted_saving_ns"]
            for f in summary["findings"]]
    assert summary["findings"] and keys == sorted(keys, reverse=True)
    by_name = {f["finding"]: f for f in summary["findings"]}
    assert by_name["straggler"]["predicted_saving_ns"] == scenario(summary, "no_straggler")["saving_ns"]
    fake = [{"finding": "host_bound_gpu", "cost_ns": 4}, {"finding": "straggler", "cost_ns": 1},
            {"finding": "dataloader_bound", "cost_ns": 50}]
    result = {"scenarios": [{"name": "no_straggler", "applies": True, "saving_ns": 7},
                            {"name": "no_dataloader_wait", "applies": True, "saving_ns": 3}]}
    ranked = whatif.rank_findings(fake, result)  # dataloader: 50 described, 3 saved
    assert [f["finding"] for f in ranked] == ["straggler", "host_bound_gpu", "dataloader_bound"]
    assert [f["predicted_saving_ns"] for f in ranked] == [7, None, 3]


def test_cli_prints_the_table():
    files = sorted(str(p) for p in (DATA / "torch_cpu").glob("rank*.json.gz"))
    out = subprocess.run([sys.executable, "-m", "distprof", "whatif", *files], capture_output=True, text=True,
                         check=True).stdout
    assert "What-if" in out and "no straggler" in out and "replay error" in out
    only = subprocess.run([sys.executable, "-m", "distprof", "whatif", *files, "--scenario", "comm_bandwidth_x2"],
                          capture_output=True, text=True, check=True).stdout
    assert "comm bandwidth x2" in only and "no straggler" not in only
    bad = subprocess.run([sys.executable, "-m", "distprof", "whatif", *files, "--scenario", "faster"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown faster" in bad.stderr


REAL = ["torch_cpu/rank*.json.gz", "torch_cpu_nolate/rank*.json.gz", "kineto_h100/gloo_cuda/rank*.json.gz",
        "demo_ranks/rank*.sqlite", "kineto/hta_trace_filter_2rank/*.json.gz",
        "kineto/hta_nccl_parser_config_1of2/*.json.gz", "kineto/hta_negative_queue_1of16/*.json.gz",
        "kineto/hta_trace_diff_control_1of8/*.json.gz", "kineto_h100/nccl_world1/*.json.gz"]


@pytest.mark.parametrize("pattern", REAL)
def test_replay_error_on_real_traces(pattern):
    paths = sorted(DATA.glob(pattern))
    assert paths
    summary = pipeline.merge_files(paths, CONFIG)
    what = summary.whatif
    assert what["steps"] > 0
    # measured 0.0% (to the ns rounding of medians) on every real trace here; worse would need a reason
    assert what["replay_error"] <= whatif.REPLAY_ERROR_TARGET or what["notes"]
    assert what["replay_error"] < 1e-4
    aligned = align.align(list(summary.ranks), CONFIG)
    assert whatif.whatif(aligned.results, aligned.matching, CONFIG)["replay_error"] == what["replay_error"]


def test_no_steps_nothing_to_replay():
    events = ev.make_events(kind=[ev.RANGE], category=[ev.PHASE], name=["forward"], start_ns=[0], end_ns=[MS])
    summary = summarize([pipeline.reduce_rank(ev.RankTrace(events=events, rank=0), CONFIG)])
    what = summary["whatif"]
    assert what["measured_step_ns"] is None and what["replay_error"] is None
    assert all(not row["applies"] and "ProfileStep" in row["why"] for row in what["scenarios"])
    assert "no steps to replay" in whatif_text(what)


def whatif_text(what: dict) -> str:
    from distprof.reports import whatif_report
    return whatif_report.render(what)


def test_html_report_shows_the_whatif_table():
    from distprof.reports import html as html_report
    from distprof.reports.whatif_report import TITLES
    paths = sorted((Path(__file__).resolve().parent / "data" / "torch_cpu").glob("rank*.json.gz"))
    summary = pipeline.merge_files(paths, config_mod.load()).to_json()
    page = html_report.render(summary)
    assert "<h2>What-if</h2>" in page
    assert all(f'<td class="l">{TITLES[row["name"]]}</td>' in page for row in summary["whatif"]["scenarios"])
    applied = next(r for r in summary["whatif"]["scenarios"] if r["applies"])
    assert f"{applied['predicted_step_ns'] / 1e6:.2f}" in page
