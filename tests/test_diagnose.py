"""Findings (host-bound GPU, dataloader-bound, ordering) and the Diagnosis section, on traces
whose gaps and shares are known by construction."""

import json

import numpy as np
from result_views import whatif_of, worded_findings

from distprof import config as config_mod
from distprof import events as ev
from distprof import pipeline
from distprof.analyses import cost, diagnose, distributed
from distprof.reports import findings as findings_report
from distprof.reports import text
from distprof.sections.findings import Evidence, Observed

CONFIG = config_mod.load()


def gpu_events(launch_late: bool = True, pid: int = 10):
    """Step [0, 1000). Device 0: kernels [0, 100) and [100, 200) back to back, [300, 400),
    [420, 500), [800, 900). Gaps: [200, 300) (next launch at 250: host-bound, if launch_late;
    else launched at 50), [400, 420) (launched at 150: queued, not host-bound), [500, 800)
    (launched at 700: host-bound). Host-bound = 100 + 300 = 400 of 1000."""
    kernels = [(0, 100, 1, 0), (100, 200, 2, 10), (300, 400, 3, 250 if launch_late else 50),
               (420, 500, 4, 150), (800, 900, 5, 700)]
    rows = [(ev.RANGE, ev.PHASE, ev.PROFILE_STEP, 0, 1000, 1, ev.HOST_THREAD, -1, -1)]
    for start, end, corr, launch in kernels:
        rows.append((ev.KERNEL, ev.COMPUTE, "gemm", start, end, 7, ev.GPU_STREAM, 0, corr))
        rows.append((ev.RUNTIME, ev.RUNTIME_CAT, "cudaLaunchKernel", launch, launch + 5, 1, ev.HOST_THREAD, -1, corr))
    kind, category, name, start, end, lane, lane_kind, device, corr = (np.array(c, dtype=object) for c in zip(*rows))
    return ev.make_events(kind=kind, category=category, name=name, start_ns=start.astype(np.int64),
                          end_ns=end.astype(np.int64), lane=lane.astype(np.int64), lane_kind=lane_kind,
                          device=device.astype(np.int64), correlation_id=corr.astype(np.int64), pid=pid, step=0)


def test_host_bound_gaps_by_construction():
    gaps = diagnose.rank_gpu_gaps(distributed.rank_view(gpu_events(), CONFIG))
    assert (gaps.gaps, gaps.idle_ns) == (3, 420)
    assert (gaps.host_bound_gaps, gaps.host_bound_ns) == (2, 400)
    assert gaps.window_ns == 1000 and gaps.devices[0].busy_ns == 480
    queued = diagnose.rank_gpu_gaps(distributed.rank_view(gpu_events(launch_late=False), CONFIG))
    assert (queued.host_bound_gaps, queued.host_bound_ns) == (1, 300)


def test_host_only_trace_has_no_gpu_gaps():
    events = ev.make_events(kind=ev.RANGE, category=ev.PHASE, name=np.array(["ProfileStep"], object),
                            start_ns=np.array([0]), end_ns=np.array([10]), step=0)
    assert diagnose.rank_gpu_gaps(distributed.rank_view(events, CONFIG)) is None


def test_host_bound_finding():
    result = pipeline.reduce_rank(ev.RankTrace(events=gpu_events(), rank=0, device=0), CONFIG)
    assert result.gpu_gaps.host_bound_ns == 400  # reduce_rank computes it next to the events
    [finding] = diagnose.findings([result], [], None, CONFIG)
    assert finding.finding == "host_bound_gpu" and finding.figure_ns == 400
    assert not hasattr(finding, "message")  # analyses give numbers; reports/findings.py words them
    assert "40% of the window" in worded_findings([finding])[0].message
    [priced] = cost.price_findings([finding], None)  # no scenario models the fix: said, not guessed
    assert priced.predicted_saving_ns is None and priced.cost_ns is None
    assert priced.severity == "unpriced" and priced.why_not == cost.NO_SCENARIO
    strict = config_mod.load(None, {"diagnosis": {"gpu_idle_share": 0.5}})
    assert diagnose.findings([result], [], None, strict) == []


def host_result(rank: int, loader_ns: int):
    """Two 100 ns steps; Dataloader takes ``loader_ns`` of each, forward the rest."""
    rows = []
    for s in range(2):
        base = 100 * s
        rows += [(ev.PROFILE_STEP, base, base + 100, s), ("Dataloader", base, base + loader_ns, s),
                 ("forward", base + loader_ns, base + 100, s)]
    name, start, end, step = (np.array(c, dtype=object) for c in zip(*rows))
    events = ev.make_events(kind=ev.RANGE, category=ev.PHASE, name=name, start_ns=start.astype(np.int64),
                            end_ns=end.astype(np.int64), step=step.astype(np.int64), rank=rank)
    return pipeline.reduce_rank(ev.RankTrace(events=events, rank=rank), CONFIG)


def test_dataloader_bound_finding():
    results = [host_result(0, 10), host_result(1, 30)]
    share = diagnose.rank_dataloader_share(results[1], "Dataloader")
    assert share.dataloader_ns == 60 and share.share == 0.3
    [finding] = diagnose.findings(results, [], None, CONFIG)
    assert finding.finding == "dataloader_bound" and finding.ranks == [1]
    assert finding.figure_ns == 60 and finding.evidence.steps_above == 2
    assert "30% of ProfileStep on rank 1" in worded_findings([finding])[0].message
    assert diagnose.findings([host_result(0, 20)], [], None, CONFIG) == []  # 20% is not above 20%


def test_findings_are_priced_by_the_replay_ordered_and_rendered():
    gpu = pipeline.reduce_rank(ev.RankTrace(events=gpu_events(), rank=0, device=0), CONFIG)
    loader = host_result(1, 30)
    typed = findings_report.worded(pipeline.combine([gpu, loader], CONFIG, source="test"))
    summary = typed.to_json()
    names = [f["finding"] for f in summary["findings"]]
    # the dataloader finding is priced (the no_dataloader_wait replay), the host-bound one is not:
    # priced ones first, though 60 ns of loader time is less than 400 ns of host-bound gaps
    assert names == ["dataloader_bound", "host_bound_gpu"]
    loader_row = next(r for r in summary["whatif"]["scenarios"] if r["name"] == "no_dataloader_wait")
    priced, unpriced = summary["findings"]
    assert priced["predicted_saving_ns"] == priced["cost_ns"] == loader_row["saving_ns"] > 0
    assert priced["priced_by"] == "no_dataloader_wait" and priced["why_not"] is None
    assert priced["saving_share"] == loader_row["saving_ns"] / summary["whatif"]["measured_step_ns"]
    assert unpriced["predicted_saving_ns"] is None and unpriced["severity"] == "unpriced"
    json.dumps(summary)  # plain JSON types only
    lines = text.finding_lines(typed.findings, "ns", width=1000)  # wide: one line each
    assert lines[0].startswith("Findings (ordered by what the fix saves per step")
    assert lines[1].startswith(f"  1. {priced['severity'].upper():<8} fix saves {loader_row['saving_ns']:.2f} ns "
                               "per step")
    assert lines[2].strip().startswith("dataloader-bound on 1/2 ranks") and "-> " in lines[3]
    assert lines[4].startswith("  2. UNPRICED saving not predicted: no what-if scenario models this fix")
    report = text.render(typed, "ns")
    assert any(line.startswith("Checks: N/A 2") for line in report.splitlines())
    # the answer first (issue 40): findings and checks above the per-rank tables
    assert report.index("Distributed Summary") < report.index("Findings (ordered") < report.index("Per rank")


def test_no_findings_reads_as_none():
    summary = pipeline.combine([host_result(0, 5)], CONFIG, source="test")
    assert "Findings: none." in text.render(summary, "ms")


def test_severity_is_the_saving_share_of_the_step():
    assert [cost.severity(c, 100) for c in (10, 9, 3, 2, 0)] == ["high", "medium", "medium", "low", "low"]
    assert cost.severity(None, 100) == cost.severity(5, None) == "unpriced"


def test_saving_after_the_straggler_and_never_above_the_step():
    whatif = whatif_of([
        {"name": "no_straggler", "applies": True, "saving_ns": 40},
        {"name": "overlap_communication", "applies": True, "saving_ns": 50, "saving_after_straggler_ns": 2},
        {"name": "no_dataloader_wait", "applies": False, "saving_ns": None, "why": "no Dataloader phase"},
        {"name": "comm_bandwidth_x2", "applies": True, "saving_ns": 130}], 100)
    found = [Observed(finding=code, figure_ns=1, ranks=[], evidence=Evidence()) for code in
             ("serialized_communication", "straggler", "dataloader_bound", "slow_collective", "host_bound_gpu")]
    priced = {f.finding: f for f in cost.price_findings(found, whatif)}
    assert priced["straggler"].predicted_saving_ns == 40 and priced["straggler"].severity == "high"
    serialized = priced["serialized_communication"]  # the straggler's waits are its cost, not this one's
    assert serialized.predicted_saving_ns == 2 and serialized.severity == "low"
    assert serialized.priced_after_straggler
    assert priced["dataloader_bound"].why_not == "no Dataloader phase"
    assert priced["slow_collective"].predicted_saving_ns is None
    assert priced["slow_collective"].why_not == cost.ABOVE_STEP
    order = [f.finding for f in cost.price_findings(found, whatif)]
    assert order[:2] == ["straggler", "serialized_communication"]
