"""The Phase Summary (analyses.phases): every phase a user annotates has a row, per rank and across
ranks, with figures known by construction: real collector files whose phases lie at chosen times,
merged in process and by the CLI; the union rule for nested and overlapping calls on an event table;
text, HTML and summary.json; a summary.json older than the table still reads and reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from msgspec.structs import replace

from distprof import Summary
from distprof import config as config_mod
from distprof import events as ev
from distprof.analyses import distributed, phases, summaries
from distprof.collector import Collector
from distprof.pipeline import merge_files
from distprof.reports import findings, html, tables, text
from distprof.sections.tables import Dropped, PhaseRow

CONFIG = config_mod.load()
DATA = Path(__file__).resolve().parent / "data"
MS = 1_000_000
LOSS = (100_000, 200_000, 300_000)   # each rank's "loss" phase per step (rank 2 the slowest)


def rank_file(path: Path, rank: int, world_size: int = 3) -> Path:
    """A real collector file. Steps 0 and 1 at [1, 2) and [2, 3) ms (the window: 2 ms); in each step
    at B = its start: forward [B, B+300us), loss [B+300us, B+300us+LOSS[rank]) with inner
    [B+320us, B+340us) nested in it, block [B+700us, B+800us) with another block [B+720us, B+760us)
    inside (one name nested in itself), on rank 2 only pp_last [B+950us, B+990us); a USER range
    loss_user in the loss. Before the steps a phase setup [0, 0.5ms) (outside the window); in step 1
    eval [2.95, 3.2) ms, which runs 250 us past the window's end."""
    collector = Collector(path, rank=rank, world_size=world_size)
    collector.record("setup", ev.PHASE, ev.RANGE, 0, MS // 2)
    for step in range(2):
        collector.step = step
        base = MS * (step + 1)
        phase_ranges = [(ev.PROFILE_STEP, 0, MS), ("forward", 0, 300_000), ("loss", 300_000, 300_000 + LOSS[rank]),
                        ("inner", 320_000, 340_000), ("block", 700_000, 800_000), ("block", 720_000, 760_000)]
        phase_ranges += [("pp_last", 950_000, 990_000)] if rank == 2 else []
        phase_ranges += [("eval", 950_000, 1_200_000)] if step == 1 else []
        for name, start, end in phase_ranges:
            collector.record(name, ev.PHASE, ev.RANGE, base + start, base + end)
        collector.record("loss_user", ev.USER, ev.RANGE, base + 300_000, base + 310_000)
        collector.flush()
    collector.set_meta(complete=1)
    collector.close()
    return path


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("phase_ranks")
    for rank in range(3):
        rank_file(folder / f"rank{rank}.sqlite", rank)
    return folder


@pytest.fixture(scope="module")
def summary(ranks_dir) -> Summary:
    return merge_files(sorted(ranks_dir.glob("rank*.sqlite")), CONFIG)


def _row(rows, name: str):
    return next(r for r in rows if r.name == name)


def _rank_expected(rank: int) -> dict:
    """(calls, total, avg, max, min) per phase of one rank, by construction."""
    loss = LOSS[rank]
    out = {"forward": (2, 600_000, 300_000.0, 300_000, 300_000), "loss": (2, 2 * loss, float(loss), loss, loss),
           "inner": (2, 40_000, 20_000.0, 20_000, 20_000),
           "block": (4, 200_000, 70_000.0, 100_000, 40_000),   # union 2 x 100us; calls 100 and 40 us
           "eval": (1, 50_000, 50_000.0, 50_000, 50_000)}      # clipped to the window
    if rank == 2:
        out["pp_last"] = (2, 80_000, 40_000.0, 40_000, 40_000)
    return out


@pytest.mark.parametrize("rank", range(3))
def test_each_rank_has_a_row_per_phase_with_exact_figures(summary, rank):
    table = next(t for t in summary.tables.by_rank if t.rank == rank).phase
    assert table.denominator_ns == 2 * MS and table.dropped.rows == 0
    got = {r.name: (r.calls, r.total_ns, r.avg_ns, r.max_ns, r.min_ns) for r in table.rows}
    assert got == _rank_expected(rank)  # no setup (before the steps), ProfileStep or loss_user (a USER range)
    for row in table.rows:
        assert row.ratio == row.total_ns / (2 * MS)
    totals = [r.total_ns for r in table.rows]
    assert totals == sorted(totals, reverse=True)
    if rank == 0:   # ties of total by name: block before loss
        assert [r.name for r in table.rows] == ["forward", "block", "loss", "eval", "inner"]


def test_across_ranks_sums_and_spread(summary):
    merged = summary.tables.merged.phase
    assert summary.tables.ranks == [0, 1, 2]
    assert merged.denominator_ns == 6 * MS
    assert [r.name for r in merged.rows] == ["forward", "loss", "block", "eval", "inner", "pp_last"]
    loss = _row(merged.rows, "loss")
    assert (loss.calls, loss.total_ns, loss.avg_ns, loss.max_ns, loss.min_ns) == (6, 1_200_000, 200_000.0, 300_000,
                                                                                 100_000)
    assert loss.ratio == 0.2 and loss.ranks == 3
    assert (loss.rank_min_ns, loss.rank_median_ns, loss.rank_max_ns) == (200_000, 400_000, 600_000)
    assert (loss.min_rank, loss.max_rank) == (0, 2)
    assert loss.total_ns_by_rank == [200_000, 400_000, 600_000]
    block = _row(merged.rows, "block")
    assert (block.calls, block.total_ns, block.avg_ns, block.max_ns, block.min_ns) == (12, 600_000, 70_000.0,
                                                                                      100_000, 40_000)
    forward = _row(merged.rows, "forward")
    assert (forward.rank_min_ns, forward.rank_median_ns, forward.rank_max_ns) == (600_000,) * 3
    assert (forward.min_rank, forward.max_rank) == (0, 0)   # ties: the first rank
    only = _row(merged.rows, "pp_last")
    assert (only.calls, only.total_ns, only.ranks, only.min_rank, only.max_rank) == (2, 80_000, 1, 2, 2)
    assert only.total_ns_by_rank == [None, None, 80_000] and only.ratio == 80_000 / (6 * MS)


def test_summary_json_holds_the_table_and_round_trips(summary):
    content = findings.worded(summary).to_json()
    assert json.loads(json.dumps(content)) == content
    rows = content["tables"]["merged"]["phase"]["rows"]
    assert rows[1] == {"name": "loss", "calls": 6, "total_ns": 1_200_000, "avg_ns": 200_000.0, "max_ns": 300_000,
                       "min_ns": 100_000, "ratio": 0.2, "ranks": 3, "rank_min_ns": 200_000,
                       "rank_median_ns": 400_000, "rank_max_ns": 600_000, "min_rank": 0, "max_rank": 2,
                       "total_ns_by_rank": [200_000, 400_000, 600_000]}
    assert [r["name"] for r in content["tables"]["by_rank"][2]["phase"]["rows"]] == [
        "forward", "loss", "block", "pp_last", "eval", "inner"]   # ties of total by name
    assert Summary.from_json(content).to_json() == content


def test_model_summary_still_puts_the_users_phases_under_others(summary):
    """The Model Summary keeps its six rows: the Phase Summary is where loss, block, ... are named."""
    model = {r.name for r in summary.tables.merged.model}
    assert model <= {"ProfileStep", "Dataloader", "Forward", "Backward", "Optimization", "Others"}


@pytest.mark.parametrize("width", [80, 100, 160])
def test_text_report_prints_the_table_within_the_width(summary, width):
    report = text.render(summary, unit="us", width=width)
    assert all(len(line) <= width for line in report.splitlines())
    part = report.split("Phase Summary (all ranks)")[1].split("Summary (")[0]
    assert "Per rank min" in part and "Total = the union" in part
    loss = next(line for line in part.splitlines() if line.startswith("loss") and "6" in line)
    assert "1200.00" in loss and "20.00" in loss   # total (us) and ratio (%)
    assert "200.00 (rank 0)" in part and "600.00 (rank 2)" in part and "pp_last" in part


def test_one_ranks_own_table_and_html(summary):
    one = tables.render(summary, unit="us", rank=1, width=100)
    part = one.split("Phase Summary (rank 1)")[1]
    assert "Per rank" not in part.split("Summary (")[0]
    assert any(line.startswith("loss") and "400.00" in line for line in part.splitlines())
    page = html.summary_tables_html(summary, "us")
    section = page.split("<h3>Phase Summary</h3>")[1].split("<h3>")[0]
    assert "<td class=\"l\">loss</td>" in section and "600.00 (rank 2)" in section and "Per rank min" in section


def test_demo_phases_agree_with_the_model_summary():
    """On the demo's real rank files (no nesting, one call per step and phase) each phase's union
    equals the Model Summary's summed CPU time of its row."""
    demo = merge_files(sorted((DATA / "demo_ranks").glob("rank*.sqlite")), CONFIG)
    merged = demo.tables.merged
    rows = {r.name: r for r in merged.phase.rows}
    assert set(rows) == {"forward", "backward", "optimizer", "Dataloader"}
    for name, model_name in (("forward", "Forward"), ("backward", "Backward"), ("optimizer", "Optimization"),
                             ("Dataloader", "Dataloader")):
        model = _row(merged.model, model_name)
        assert (rows[name].calls, rows[name].total_ns) == (model.calls, model.cpu_total_ns)
        assert rows[name].total_ns_by_rank == model.cpu_total_ns_by_rank
        assert rows[name].rank_max_ns == max(model.cpu_total_ns_by_rank)


def _events(rows) -> ev.Table:
    kind, category, name, start, end, lane, step = (np.array(c, dtype=object) for c in zip(*rows))
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=lane.astype(np.int64), step=step.astype(np.int64),
                          pid=1, lane_kind=ev.HOST_THREAD, device=-1)


def test_overlapping_calls_on_two_threads_count_once():
    """A phase open on two threads at once: its total is the union; avg/max/min are of the calls.
    Window [0, 100) and [200, 300) (two steps with a gap): a call across the gap counts its parts."""
    events = _events([
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 100, 1, 0),
        (ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 200, 300, 1, 1),
        (ev.RANGE, ev.PHASE, "prefetch", 10, 50, 1, 0),
        (ev.RANGE, ev.PHASE, "prefetch", 30, 70, 2, 0),     # another thread: [10, 70) once
        (ev.RANGE, ev.PHASE, "prefetch", 90, 230, 2, 0),    # across the gap: 10 + 30 in the window
        (ev.RANGE, ev.PHASE, "ProfilerStep#3", 200, 300, 3, 1),  # a step range: no row
    ])
    view = distributed.rank_view(events, CONFIG)
    table = summaries.rank_tables(view, CONFIG).phase
    assert table.rows == [PhaseRow(name="prefetch", calls=3, total_ns=100, avg_ns=40.0, max_ns=40, min_ns=40,
                                   ratio=0.5)]
    assert phases.union_in_window(np.array([0, 1, 0]), np.array([0, 5, 50]), np.array([60, 6, 80]),
                                  (np.array([10, 70]), np.array([55, 90])), 2).tolist() == [45 + 10, 0]


def test_rows_beyond_the_limit_are_counted_as_dropped():
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1, 0)]
    rows += [(ev.RANGE, ev.PHASE, f"p{k}", 0, 10 * (k + 1), 1, 0) for k in range(5)]
    events = _events(rows)
    view = distributed.rank_view(events, CONFIG)
    table = phases.phase_table(events, view.window, summaries.rows_in_window(events["start_ns"], view.window), 2)
    assert [r.name for r in table.rows] == ["p4", "p3"]
    assert table.dropped == Dropped(rows=3, calls=3, total_ns=60)
    own = summaries.rank_tables(view, CONFIG)
    with_table, without = replace(own, window_ns=1000, phase=table), replace(own, window_ns=1000, phase=None)
    merged = phases.merge_phase_tables([with_table, without], [0, 1], 1)
    assert [r.name for r in merged.rows] == ["p4"] and merged.denominator_ns == 2000
    assert merged.dropped == Dropped(rows=4, calls=4, total_ns=100)
    assert merged.rows[0].total_ns_by_rank == [50, None]


def test_a_summary_older_than_the_table_reads_and_reports():
    """summary.json written before the Phase Summary (no ``phase`` key): read back as it was, and the
    reports leave the table out."""
    content = json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text())
    content["tables"]["merged"].pop("phase", None)
    for entry in content["tables"]["by_rank"]:
        entry.pop("phase", None)
    old = Summary.from_json(content)
    assert old.to_json() == content
    assert "Phase Summary" not in tables.render(old) and "Phase Summary" not in html.summary_tables_html(old, "ms")


def test_cli_merge_prints_and_writes_the_table(ranks_dir, tmp_path):
    out = tmp_path / "out"
    result = run_cli("merge", str(ranks_dir), "-o", str(out), "--unit", "us", "--width", "100")
    assert result.returncode == 0, result.stderr
    assert "Phase Summary (all ranks)" in result.stdout
    # every line fits but one naming a path (the 'wrote'/'next' lines never cut a path or a command, and
    # pytest's folders under xdist are long)
    assert all(len(line) <= 100 for line in result.stdout.splitlines() if str(tmp_path) not in line)
    content = json.loads((out / "summary.json").read_text())
    loss = next(r for r in content["tables"]["merged"]["phase"]["rows"] if r["name"] == "loss")
    assert (loss["total_ns"], loss["max_rank"], loss["total_ns_by_rank"]) == (1_200_000, 2, [200_000, 400_000,
                                                                                           600_000])
    assert "<h3>Phase Summary</h3>" in (out / "report.html").read_text()
    one = run_cli("report", str(out), "--rank", "2", "--unit", "us", "--width", "100")
    assert one.returncode == 0 and "Phase Summary (rank 2)" in one.stdout and "pp_last" in one.stdout
