"""report.html: one self-contained file with the plots and the tables, nothing fetched; rendered in
headless Chromium when it is installed (Debian's `chromium`)."""

import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from conftest import run_cli
from msgspec.structs import replace
from test_summaries import CONFIG, gpu_rank, host_rank

from distprof import Summary, pipeline
from distprof import events as ev
from distprof.reports import html
from distprof.sections.findings import Finding, StragglerEvidence
from distprof.sections.skew import CollectiveRow


class Page(HTMLParser):
    """Tags, external references and table headers of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.external: list[str] = []
        self.headers: list[str] = []
        self.sections: list[str] = []
        self._in = None

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "data", "action") and value and \
                    re.match(r"\s*(https?:)?//", value):
                self.external.append(f"{tag} {name}={value}")
        if tag in ("script", "link", "iframe", "object", "embed"):
            self.external.append(tag)
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "th":
            self.headers.append(data.strip())
        elif self._in in ("h2", "h3"):
            self.sections.append(data.strip())


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    assert not page.external, page.external
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//|@import", text), "CSS fetches something"
    return page


def skew_collective(index: int, step: int, waits: dict[int, int], name: str = "allreduce") -> CollectiveRow:
    """A matched collective of the skew section: what the heat map reads (index, step, name, waits)
    as given, the rest plausible."""
    first, last = max(waits, key=waits.__getitem__), min(waits, key=waits.__getitem__)  # first: waits longest
    return CollectiveRow(
        index=index, name=name, kind=name, group_name="", group_ranks=sorted(waits), step=step, ordinal=index,
        start_ns=0, bytes=None, arrival_skew_ns=max(waits.values()), end_skew_ns=0, first_rank=first,
        last_rank=last, last_lateness_ns=0, attributable_wait_ns=0, above_uncertainty=True, transfer_ns=0,
        algbw_gbps=None, busbw_gbps=None, node_span=None, max_sync_ns=0, split_agrees=True,
        wait_ns_by_rank=waits)


def straggler_finding(rank: int, message: str, advice: str, steps_late: int) -> Finding:
    """A high straggler finding, unpriced, with its evidence."""
    evidence = StragglerEvidence(
        slow_phase=None, slow_phase_extra_ns=None, waits_caused_ns=0, waits_caused_share=None,
        total_waits_caused_ns=0, late_in=steps_late, last_in=steps_late, of=steps_late, side=None,
        pattern="persistent", onset_step=None, steps_late=steps_late, steps=steps_late, late_step_ids=[],
        phase=None, phase_extra_ns=None, largest_phase=None, runner_up_waits_caused_ns=0,
        late_steps=steps_late, threshold_ns=0, most_often_last_rank=rank, exposed_waits_ns_by_rank={},
        durations_vary_share=None)
    return Finding(finding="straggler", figure_ns=5_000_000, ranks=[rank], evidence=evidence, severity="high",
                   cost_ns=5_000_000, predicted_saving_ns=None, saving_share=None, priced_by=None,
                   priced_after_straggler=False, why_not=None, durations_vary_share=None, message=message,
                   advice=advice)


def two_rank_summary() -> Summary:
    results = [pipeline.reduce_rank(ev.RankTrace(events=gpu_rank(), rank=0, source_file="r0", pid=10), CONFIG),
               pipeline.reduce_rank(ev.RankTrace(events=host_rank(), rank=1, source_file="r1", pid=11), CONFIG)]
    summary = pipeline.combine(results, CONFIG, source="synthetic", world_size=2)
    collectives = [skew_collective(i, i // 2, {0: 1_000_000 * i, 1: 0}) for i in range(4)]
    return replace(summary, findings=[straggler_finding(1, "rank 1 <arrives> last", "balance the data", 2)],
                   skew=replace(summary.skew, collectives=collectives))


def test_report_has_plots_tables_and_findings(tmp_path):
    path = html.write_report(two_rank_summary(), tmp_path)
    assert path == tmp_path / "report.html"
    text = path.read_text()
    page = parse(text)
    assert page.tags["svg"] == 3          # Distributed Summary bars, skew heatmap, step time
    assert page.sections[:2] == ["Findings", "Distributed Summary"]   # findings first
    for section in ("Arrival skew", "Step time", "Device Summary", "Overview Summary", "Model Summary",
                    "Kernel Summary", "Memory Manipulation Summary", "UserDefined Summary"):
        assert section in page.sections
    # the evidence in sentences, nothing absent said ("onset step: None; ... pattern: persistent" once)
    assert "rank 1 &lt;arrives&gt; last" in text and "balance the data" in text
    evidence = re.search(r'<p class="evidence">([^<]*)</p>', text).group(1)
    assert evidence.startswith("Last to arrive in 2 of its 2 collectives, alone and over 0.00 ms after the median")
    assert "None" not in evidence and "pattern" not in evidence and "_" not in evidence
    assert "GPU total" in page.headers and "Overlap ratio" in page.headers
    assert "ncclDevKernel_AllReduce" in text and "Memcpy HtoD" in text
    assert "<metadata>" not in text and 'width="' not in text.split("<svg", 1)[1].split(">", 1)[0]


def test_report_without_skew_steps_or_gpu(tmp_path):
    summary = two_rank_summary()
    merged = summary.tables.merged
    merged = replace(merged, steps=replace(merged.steps, step=[]))
    summary = replace(summary, findings=[], skew=replace(summary.skew, collectives=[]), checks=[],
                      tables=replace(summary.tables, merged=merged))
    page = parse(html.render(summary))
    assert page.tags["svg"] == 1 and "Arrival skew" not in page.sections and "Step time" not in page.sections
    assert "Findings" in page.sections


def test_missing_ranks_as_ranges():
    assert html.rank_ranges([7, 2, 3, 4]) == "2-4, 7" and html.rank_ranges([]) == "(none)"
    summary = replace(two_rank_summary(), missing_ranks=list(range(2, 1000)))
    assert "998 missing rank(s): 2-999" in html.render(summary)


def test_demo_report_cli(demo_overlap, tmp_path):
    """The live demo writes report.html; `report --html PATH` rewrites it; no network needed."""
    assert (demo_overlap / "report.html").exists()
    target = tmp_path / "again.html"
    result = run_cli("report", str(demo_overlap), "--html", str(target))
    assert result.returncode == 0, result.stderr
    text = target.read_text()
    page = parse(text)
    assert page.tags["svg"] >= 3 and page.tags["table"] >= 5
    assert "Model Summary" in page.sections and "Forward" in text
    assert len(text) < 1_000_000


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0")


def chromium_or_skip() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (tests/browser.sh installs it where it can)")
    return chromium


def console_lines(stderr: str) -> list[str]:
    """What the page wrote to the browser console (script errors, failed loads): Chromium logs each
    as a ``...:CONSOLE...`` line on stderr with --enable-logging=stderr."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_console_check_sees_a_page_error(tmp_path):
    """The check below can fail: a page with a script error shows up in the console lines."""
    chromium = chromium_or_skip()
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    run = subprocess.run([chromium, *CHROMIUM_FLAGS, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert any("undefinedFunction" in line for line in console_lines(run.stderr)), run.stderr[-2000:]


def test_chromium_renders_report(demo_overlap, tmp_path):
    """The page as the browser rendered it: the DOM after loading holds the plots (SVG with marks) and
    the tables, nothing was logged to the console, and the screenshot's plot area is not blank."""
    chromium = chromium_or_skip()
    uri = (demo_overlap / "report.html").as_uri()
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, "--dump-dom", uri], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_lines(dom.stderr) == []
    page = parse(dom.stdout)
    assert page.tags.get("svg", 0) >= 3 and page.tags.get("table", 0) >= 5
    assert page.tags.get("rect", 0) + page.tags.get("path", 0) + page.tags.get("polyline", 0) >= 10
    assert "Model Summary" in page.sections
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1400,2400", uri],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000
    import matplotlib.image
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2400, 1400)
    assert pixels[..., :3].std() > 0.05          # not a blank page: plots and tables were drawn
    assert pixels[:1200, :, :3].std(axis=(0, 1)).max() > 0.05   # the top half (the plots) is drawn too


def test_tables_fit_a_1280_px_window(tmp_path):
    """At 1280 px the tables fit the page: headers and prose cells wrap (the per-rank table and the Checks'
    advice were cut at the right edge). A script added to a copy of the page lists every table wider than
    its box; the report itself has none."""
    chromium = chromium_or_skip()
    advice = ("start each bucket's allreduce as soon as its gradients are ready (DDP bucketing, smaller buckets) "
              "instead of after backward, and make sure the communication stream does not wait on the compute one")
    summary = two_rank_summary()
    summary = replace(summary, checks=[replace(c, status="WARN", advice=advice, message="separate thread, but "
                                               "communication does not overlap computation (overlap 0.9% < 10%): "
                                               "issued after the compute it could hide behind, or waits on it")
                                       for c in summary.checks])
    probe = ("<script>document.body.setAttribute('data-wide', Array.from(document.querySelectorAll('.scroll'))"
             ".filter(d => d.scrollWidth > d.clientWidth + 1).map(d => d.querySelector('th').textContent)"
             ".join('|'))</script>")
    page = tmp_path / "probe.html"
    page.write_text(html.render(summary).replace("</body>", probe + "</body>"))
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, "--window-size=1280,2000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-wide=""' in dom.stdout, re.search(r'data-wide="[^"]*"', dom.stdout)
    assert "<h2>Checks</h2>" in dom.stdout
