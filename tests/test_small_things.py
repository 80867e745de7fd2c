"""The smaller things of issue 40 (point 7), each as a user meets it: the README's Profiler line run
outside the clone, the per-rank column that is a total over steps, units and signs in the notes,
`distprof --version`, `trace`'s next step, `diff`'s movers and unit of work both ways, pytest's skip
reasons, tests/browser.sh's one line, and report.html's labels measured in a real browser."""

from __future__ import annotations

import csv
import html as html_text
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, ROOT, run_cli
from msgspec.structs import replace
from test_html import skew_collective

from distprof import Summary
from distprof.analyses import diff
from distprof.reports import format, html, svg
from distprof.results import RankFigures, RankProfile, RankResult
from distprof.sections.profiles import MemoryDevice
from distprof.sections.tables import MergedSteps, MergedUserRow

MS = 1_000_000


def _golden() -> Summary:
    """A real summary (the demo job's golden) that the tests below change the parts of they are about."""
    return Summary.from_json(json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text()))


def _rank(rank: int, figures: RankFigures, profile: RankProfile | None = None) -> RankResult:
    """A rank with these figures (and profile), the rest of it the golden's rank 0."""
    return replace(_golden().ranks[0], rank=rank, figures=figures, profile=profile or RankProfile())


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> dict[str, Path]:
    """The real 2-rank DDP job, healthy and with a late rank, merged by the CLI."""
    base = tmp_path_factory.mktemp("ddp")
    out = {}
    for name in ("healthy", "late"):
        result = run_cli("merge", str(DATA / "torch_ddp" / name), "-o", str(base / name))
        assert result.returncode == 0, result.stderr[-2000:]
        (base / name / "stdout.txt").write_text(result.stdout)
        out[name] = base / name
    return out


# -- README: config is optional -------------------------------------------------------------------

def _profiler_lines() -> list[str]:
    """The ``distprof.Profiler(...)`` lines of the README's and the docs' Python blocks."""
    lines = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            lines += [line for line in block.splitlines() if "distprof.Profiler(" in line]
    return lines


def test_readme_profiler_line_runs_outside_the_clone(tmp_path):
    """``Profiler(config="configs/default.yaml")`` failed in any folder but the clone's: no example
    names a file of the clone, and the README's line constructs a profiler in an empty folder."""
    lines = _profiler_lines()
    assert lines and not [line for line in lines if "configs/" in line]
    readme = next(line for line in _profiler_lines() if line.startswith("prof = "))
    code = "import distprof\n" + readme.split("#")[0] + "\nprint(type(prof).__name__)"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "Profiler", result.stderr[-2000:]
    assert "`config` is optional" in (ROOT / "docs" / "instrumenting.md").read_text()


# -- the per-rank column: a total over steps ---------------------------------------------------------

def test_per_rank_column_is_named_a_total_over_steps(ddp):
    """"ProfileStep (ms)" next to "Steps" read as one step's time; it is the steps' sum. The text, the
    HTML and the diff say "Steps total"; summary.json and ranks.csv keep their keys."""
    text = (ddp["late"] / "stdout.txt").read_text()
    assert "Steps total (ms)" in text and "ProfileStep (ms)" not in text
    page = (ddp["late"] / "report.html").read_text()
    assert "Steps total (ms)" in page and "ProfileStep (ms)" not in page
    summary = json.loads((ddp["late"] / "summary.json").read_text())
    row = summary["ranks"][0]
    assert row["steps"] == 8 and "window_ns" in row and "window_ns" in summary["across_ranks"]
    with open(ddp["late"] / "ranks.csv") as stream:
        assert next(csv.reader(stream))[:3] == ["rank", "steps", "window_ns"]
    # the figure is the steps' sum: 8 steps of ~48 ms, not one step
    shown = float(re.search(r"^0 +8 +([\d.]+)", text, re.M).group(1))
    assert shown == pytest.approx(row["window_ns"] / MS, abs=0.01) and shown > 8 * 30


def test_without_steps_the_column_is_the_trace_span():
    no_steps, steps = _rank(0, RankFigures(steps=0)), _rank(1, RankFigures(steps=3))
    assert dict(format.summary_columns([no_steps]))["window_ns"] == "Trace span"
    assert dict(format.summary_columns([no_steps, steps]))["window_ns"] == "Steps total"


# -- notes: units, CPU jobs, signs -------------------------------------------------------------------

def test_model_summary_of_a_cpu_job_names_no_gpu(ddp):
    text = (ddp["late"] / "stdout.txt").read_text()
    assert "GPU time per step" not in text and "CPU time (no GPU in the trace)" in text


def _edited_summary(source: Path, target: Path) -> Path:
    """``source``'s summary.json with a memory growth that rounds to zero and rows not stored."""
    summary = json.loads((source / "summary.json").read_text())
    for row in summary["ranks"]:
        row["memory_growth_per_step_bytes"] = -40_000.0  # -0.04 MiB per step
    merged = summary["tables"]["merged"]
    merged["user"]["dropped"] = {"rows": 1339, "calls": 4021, "total_ns": 110_000}
    merged["operator"]["dropped"] = {"rows": 12, "calls": 30, "total_ns": 2_500_000}
    target.mkdir()
    (target / "summary.json").write_text(json.dumps(summary))
    return target


def test_notes_give_units_and_growth_has_no_negative_zero(ddp, tmp_path):
    """"(1339 smaller rows not stored: …, 0.11 total)" left the unit to guess; Growth/step printed -0.0."""
    folder = _edited_summary(ddp["late"], tmp_path / "edited")
    result = run_cli("report", str(folder))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(1339 smaller rows not stored: 4021 calls, 0.11 ms total)" in result.stdout
    assert "(12 smaller rows not stored: 30 calls, 2.50 ms CPU total)" in result.stdout
    growth = [line.split() for line in result.stdout.splitlines() if re.match(r"[01] +1\.9 +0\.0 ", line)]
    assert [cells[-1] for cells in growth] == ["0.0", "0.0"] and "-0.0" not in result.stdout
    micro = run_cli("report", str(folder), "--unit", "us").stdout
    assert "4021 calls, 110.00 us total)" in micro


# -- --version, trace's next step ---------------------------------------------------------------------

def test_version():
    from distprof import __version__
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"distprof {__version__}"


def test_trace_ends_with_how_to_open_it(ddp):
    result = run_cli("trace", str(ddp["late"]))
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("next: open https://ui.perfetto.dev") and "Open trace file" in last
    assert str(ddp["late"] / "trace.json.gz") in last


# -- diff: movers without steps, one unit both ways, equal counts the same ---------------------------------

def _diff(before: Path, after: Path, out: Path) -> tuple[str, dict]:
    result = run_cli("diff", str(before), str(after), "-o", str(out), "--width", "400")  # tables in one piece
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, json.loads((out / "diff.json").read_text())


def test_diff_of_the_real_ddp_job_both_ways(ddp, tmp_path):
    """healthy -> late and back: no step marker among the movers (5 of 10 were ProfilerStep#N), the
    same unit of work both ways, and 256 -> 256 calls over 8 -> 8 steps a rank is "the same number"
    (it read "31% fewer ... per window" because the window had grown)."""
    units = []
    for before, after in (("healthy", "late"), ("late", "healthy")):
        text, data = _diff(ddp[before], ddp[after], tmp_path / f"{before}-{after}")
        assert not [m for m in data["movers"] if re.match(r"ProfilerStep#\d+$|ProfileStep$", m["name"])]
        movers = text.split("Top movers")[1].split("Findings")[0]
        assert "ProfilerStep#" not in movers and " ProfileStep " not in movers
        assert len(movers.strip().splitlines()) == 3 + 10  # still ten rows, all real work
        unit = data["unit_of_work"]
        assert unit["count"]["before"] == unit["count"]["after"] and unit["per_step"]["relative"] == 0
        flowing = " ".join(text.split())  # the line wraps at the report's width
        assert "after does the same number of them per rank-step" in flowing and "per window" not in flowing
        assert "Steps total (ms)" in text
        units.append(unit["name"])
    assert units[0] == units[1]


def _with_users(rows: list[tuple[str, int, float]], steps: int = 8, window_ns: int = 400 * MS) -> Summary:
    """One rank of ``steps`` steps whose only repeated units are these user ranges (name, calls, ms)."""
    golden = _golden()
    merged = golden.tables.merged
    users = [MergedUserRow(name=n, calls=c, total_ns=int(t * MS), max_ns=int(t * MS), min_ns=int(t * MS),
                           ranks=1, max_rank=0, avg_ns=t * MS / c, ratio=None) for n, c, t in rows]
    merged = replace(merged, user=replace(merged.user, rows=users), kernel=replace(merged.kernel, rows=[]),
                     model=[])
    return replace(golden, ranks=(_rank(0, RankFigures(steps=steps, window_ns=window_ns)),),
                   tables=replace(golden.tables, merged=merged))


def test_unit_of_work_does_not_depend_on_the_direction():
    """Two ops tied in calls: by the before run's time alone, AccumulateGrad one way and
    copy_bucket_to_grad the other. Both runs' calls and time together name one unit."""
    a = _with_users([("AccumulateGrad", 256, 10.0), ("copy_bucket_to_grad", 256, 20.0)])
    b = _with_users([("AccumulateGrad", 256, 30.0), ("copy_bucket_to_grad", 256, 5.0)])
    assert diff.dominant_unit(a, b)[1] == diff.dominant_unit(b, a)[1] == "AccumulateGrad"
    tied = _with_users([("zeta", 4, 1.0), ("alpha", 4, 1.0)])
    assert diff.dominant_unit(tied, tied)[1] == "alpha"  # a full tie: by name, not by table order


def test_unit_of_work_rate_is_per_rank_step():
    """Equal counts over equal steps are the same number whatever the windows; without steps the
    counts compare in all."""
    from distprof.reports import diff_report
    grown = 580 * MS  # the after run's window grew 45%
    before, after = _with_users([("op", 256, 10.0)]), _with_users([("op", 256, 10.0)], window_ns=grown)
    line = diff_report.unit_lines(diff.unit_of_work(before, after), "ms")[0]
    assert "(256 -> 256 calls, 32 -> 32 per rank-step): after does the same number of them per rank-step" in line
    before, after = _with_users([("op", 256, 10.0)], steps=0), _with_users([("op", 200, 10.0)], 0, grown)
    line = diff_report.unit_lines(diff.unit_of_work(before, after), "ms")[0]
    assert "after does 22% fewer of them in all" in line


# -- pytest: why tests skipped ------------------------------------------------------------------------

def test_pytest_summary_gives_skip_reasons(tmp_path):
    """The project's pytest options list each skip with its reason (a bare "1 skipped" said nothing)."""
    case = tmp_path / "test_case.py"
    case.write_text("import pytest\n\ndef test_a():\n    pytest.skip('no browser on this machine')\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-n", "0",
                             "-p", "no:cacheprovider", str(case)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert "1 skipped" in result.stdout, result.stdout[-2000:]
    assert re.search(r"SKIPPED \[1\] .*test_case\.py:\d+: no browser on this machine", result.stdout)


# -- tests/browser.sh: one line when it installs ------------------------------------------------------

def _browser_sh(tmp_path: Path, tools: dict[str, str]) -> subprocess.CompletedProcess:
    """tests/browser.sh with only ``tools`` (name -> shell body) on its PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(["/bin/bash", str(ROOT / "tests" / "browser.sh")], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60)


def test_browser_sh_says_what_it_installs_and_why(tmp_path):
    result = _browser_sh(tmp_path, {"id": "echo 0", "apt-get": "exit 0"})
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == 0 and len(lines) == 1, lines
    assert "installing" in lines[0] and "chromium" in lines[0] and "report" in lines[0]


def test_browser_sh_is_silent_when_chromium_is_there(tmp_path):
    result = _browser_sh(tmp_path, {"chromium": "exit 0", "id": "echo 0", "apt-get": "exit 1"})
    assert result.returncode == 0 and result.stdout + result.stderr == ""


# -- report.html: labels apart and inside their plot --------------------------------------------------

def _crowded() -> Summary:
    """16 ranks whose memory lines end at one height over 60 steps, a 2-rank heat map (144 tall)
    of 200 steps, a step plot of 64 ranks: the layouts where labels ran into each other or off."""
    ranks, steps, first = 16, list(range(100, 160)), 100
    figures = RankFigures(window_ns=10 * MS, computation_ns=6 * MS, overlap_ns=MS,
                          exposed_communication_ns=2 * MS, idle_ns=MS)

    def memory(r: int) -> RankProfile:
        peaks = [2 ** 30 + r] * len(steps)
        return RankProfile(memory_device="cuda:0", memory_devices=[MemoryDevice(
            device="cuda:0", peak_allocated_bytes=peaks[0], peak_reserved_bytes=peaks[0], steps=steps,
            step_peak_allocated_bytes=peaks, step_peak_reserved_bytes=peaks, growth_per_step_bytes=0.0)])

    rows = tuple(_rank(r, figures, memory(r)) for r in range(ranks))
    collectives = [skew_collective(j, first + j // 2, {0: (j % 7) * 3 * MS, 1: 0}) for j in range(400)]
    merged_steps = MergedSteps(step=steps, min_ns=[9 * MS] * 60, median_ns=[10 * MS] * 60,
                               max_ns=[12 * MS] * 60, max_rank=[1000] * 60, ranks=list(range(1000, 1064)),
                               mean_ns_by_rank=[10 * MS] * 64, max_ns_by_rank=[12 * MS] * 64)
    golden = _golden()
    merged = replace(golden.tables.merged, steps=merged_steps)
    return replace(golden, ranks=rows, skew=replace(golden.skew, collectives=collectives),
                   tables=replace(golden.tables, merged=merged))


def test_memory_labels_and_colour_bar_title_are_laid_out_apart():
    """Without a browser: the memory chart's line names 13 units apart at least (they were drawn at
    one height), the step ticks thinned, the colour bar's title inside its canvas."""
    summary = _crowded()
    memory = html.memory_plot(summary)
    ys = sorted(float(y) for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)"[^>]*>rank \d+<', memory))
    assert len(ys) == 16 and min(b - a for a, b in zip(ys, ys[1:])) >= 12.9
    ticks = [int(t) for t in re.findall(r'text-anchor="middle" font-size="11">(\d+)<', memory)]
    assert 5 <= len(ticks) < 60 and ticks[0] == 100
    heat = html.skew_heatmap(summary)
    height = float(re.search(r'viewBox="0 0 \d+ ([\d.]+)"', heat).group(1))
    titles = re.findall(r'<text x="[\d.]+" y="([\d.]+)"[^>]*rotate\(-90[^>]*>([^<]*wait[^<]*|[^<]*rank \(ms\))<', heat)
    for y, text in titles:
        assert svg.text_width(text) / 2 <= float(y) <= height - svg.text_width(text) / 2
    assert " ".join(t for _, t in titles) == "wait for the last rank (ms)"


def test_svg_helpers():
    assert svg.thinned([0, 20, 40, 60, 80], ["1"] * 5) == [0, 1, 2, 3, 4]
    assert svg.thinned([0, 20, 40, 60, 80], ["step 100"] * 5) == [0, 4]  # 54.6 wide + 6 apart > 60
    assert svg.spread([50, 50, 50], 0, 100) == [50, 63, 76]
    assert svg.spread([99, 99], 0, 100) == [87, 100]
    assert svg.wrapped("wait for the last rank (ms)", 120) == ["wait for the last", "rank (ms)"]


CHECK_SCRIPT = """<script>
const out = [];
document.querySelectorAll('svg').forEach((svg, n) => {
  const box = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()]);
  texts.forEach(([s, r]) => {
    if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
      out.push(`plot ${n}: "${s}" outside`); });
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const [a, p] = texts[i], [b, q] = texts[j];
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (w > 1 && h > 3) out.push(`plot ${n}: "${a}" overlaps "${b}"`);
  }
});
document.body.dataset.layout = JSON.stringify(out);
</script>"""


def _browser_layout(page: str, folder: Path) -> list[str]:
    """What Chromium measures of every SVG label of ``page``: labels that overlap, or leave their plot."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (tests/browser.sh installs it where it can)")
    checked = folder / "checked.html"
    checked.write_text(page.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--window-size=1400,2400", "--dump-dom", checked.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(html_text.unescape(found.group(1)))


def test_report_labels_do_not_overlap_in_a_browser(ddp, tmp_path):
    """report.html of the real DDP job (its memory chart named both ranks at one spot; the heat map's
    colour bar title ran off the top), and the crowded layouts, as Chromium draws them."""
    assert _browser_layout((ddp["late"] / "report.html").read_text(), tmp_path) == []
    summary = _crowded()
    plots = [html.memory_plot(summary), html.skew_heatmap(summary), html.step_plot(summary),
             html.distributed_bars(summary)]
    page = "<html><body>" + "".join(f"<div style='width:1100px'>{p}</div>" for p in plots) + "</body></html>"
    assert _browser_layout(page, tmp_path) == []


def test_names_are_cut_and_escaped_on_the_record_as_on_its_json():
    """names.map_strings walks a typed record by its JSON keys: cap_names and printable_all give the record whose
    JSON is what they give on its JSON, and the very same record where nothing changes (no copy)."""
    from distprof.names import cap_names, printable_all
    from distprof.sections.hang import GroupState
    group = GroupState(name="g" * 1000, desc="d\x1b" * 3000, ranks=[0, 1], members_stated=True, last_completed_seq=3,
                       first_incomplete_seq=4, kind="all_reduce", issued={"x" * 300: [0]}, never_issued=[1],
                       not_dumped=[], inferred_missing=[], mismatch={})
    for walk in (cap_names, printable_all):
        assert walk(group).to_json() == walk(group.to_json()) != group.to_json()
    assert len(cap_names(group).name) == 256 and len(cap_names(group).desc) == 1024
    short = GroupState.from_json(cap_names(printable_all(group)).to_json())
    assert cap_names(short) is short and printable_all(short) is short


def test_the_walk_skips_what_no_report_shows_and_cuts_what_they_do():
    """The reports' walk (names.map_strings) visits the fields that can hold text and that a report shows:
    a rank's lane labels are cut, its markers and metadata (RankResult.NOT_REPORTED: what only the analyses
    read, most of the walk at 512 ranks) are left as they are, the same objects."""
    from distprof import config as config_mod
    from distprof import pipeline
    from distprof.names import cap_names
    from distprof.results import Lane, RankMarkers
    from distprof.sources import kineto
    config = config_mod.load(None)
    result = pipeline.reduce_rank(kineto.read(DATA / "torch_cpu" / "rank0.json.gz", config)[0], config)
    long = "k" * 3000
    markers = RankMarkers({"name": [long]}, {}, {})
    result = replace(result, lanes=(Lane(long, 0, "host_thread", 1, 1, ()),), markers=markers,
                     meta={**result.meta, "hostname": long})
    cut = cap_names(result)
    assert len(cut.lanes[0].label) == 1024  # names.LONG_TEXT_CHARS: a label is not a "name" key
    assert cut.markers is markers and cut.meta is result.meta and cut.figures is result.figures
