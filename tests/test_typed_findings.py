"""summary.json's ``findings``, ``checks`` and ``collectives`` as typed values (distprof.sections):
every golden summary and fresh merges of real traces decode and write back the same JSON, key order
included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec.structs import replace

from distprof import config, pipeline
from distprof.analyses import cost, profiles
from distprof.cli import merge_files
from distprof.reports import findings as findings_report
from distprof.sections import findings as sections
from distprof.sections.collectives import CollectiveRow, Collectives
from distprof.sections.findings import Check, Finding
from distprof.sections.profiles import MemoryDevice
from distprof.sources import kineto
from distprof.typed import ABSENT, JsonError
from distprof.units import phrase

DATA = Path(__file__).parent / "data"
GOLDEN = sorted((DATA / "golden").glob("*.json"))
TPDP = sorted((DATA / "torch_tpdp" / "late3").glob("*.json.gz"))
PP = sorted((DATA / "torch_pp" / "late1").glob("*.json.gz"))


def _same(decoded, raw) -> None:
    assert decoded.to_json() == raw
    assert json.dumps(decoded.to_json()) == json.dumps(raw)


def _round_trip(summary: dict) -> tuple[list[Finding], list[Check], Collectives]:
    """Each section decoded, written back identical, and read by attribute."""
    found = [Finding.from_json(row) for row in summary["findings"]]
    for finding, raw in zip(found, summary["findings"]):
        _same(finding, raw)
        assert finding.finding == raw["finding"] and finding.ranks == raw["ranks"]
        assert finding.template == raw["template"]
        assert finding.predicted_saving_ns == raw["predicted_saving_ns"]
    checks = [Check.from_json(row) for row in summary["checks"]]
    for check, raw in zip(checks, summary["checks"]):
        _same(check, raw)
        assert check.status == raw["status"] and check.overlap_ratio == raw["overlap_ratio"]
    table = Collectives.from_json(summary["collectives"])
    _same(table, summary["collectives"])
    assert table.matched == summary["collectives"]["matched"]
    assert [row.total_ns for row in table.rows] == [row["total_ns"] for row in summary["collectives"]["rows"]]
    assert all(isinstance(row, CollectiveRow) for row in table.rows)
    return found, checks, table


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_sections_round_trip(path):
    summary = json.loads(path.read_text())
    found, _, _ = _round_trip(summary)
    for finding, raw in zip(found, summary["findings"]):
        if isinstance(finding.evidence, sections.PlacementEvidence):
            rank = finding.evidence.worst_rank
            assert finding.evidence.exposed_communication_ns_by_rank[rank] == \
                raw["evidence"]["exposed_communication_ns_by_rank"][str(rank)]


def test_fresh_merge_with_every_time_finding_round_trips():
    """A peak busbw (slow_collective), the trace's dataloader phase (dataloader_bound): keys the
    goldens lack, e.g. critical_path_share, a check's waits_for_straggler_ns."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    cfg = config.load(None, {"hardware": {"peak_busbw_gbps": 1000.0}, "diagnosis": {"dataloader_share": 0.0},
                             "phases": {"dataloader": loader}})
    summary = merge_files(TPDP, cfg)
    found, checks, table = _round_trip(summary)
    by_code = {f.finding: f for f in found}
    assert {"straggler", "slow_collective", "dataloader_bound"} <= set(by_code)
    straggler = by_code["straggler"].evidence
    assert isinstance(straggler, sections.StragglerEvidence) and straggler.critical_path_share is not ABSENT
    assert set(straggler.exposed_waits_ns_by_rank) <= {0, 1, 2, 3}
    slow = by_code["slow_collective"].evidence
    assert isinstance(slow, sections.SlowCollectiveEvidence) and slow.peak_busbw_gbps == 1000.0
    raw = summary["findings"][found.index(by_code["slow_collective"])]["evidence"]
    assert slow.worst.kind == raw["worst"]["kind"] and slow.rows_below == raw["rows_below"]
    dataloader = by_code["dataloader_bound"].evidence
    assert isinstance(dataloader, sections.DataloaderEvidence) and dataloader.phase == loader
    assert any(c.waits_for_straggler_ns is not ABSENT for c in checks)
    assert table.peak_busbw_gbps == 1000.0 and table.rows[0].peak_share is not None
    for finding in found:
        said_in_sentences(finding)


def said_in_sentences(finding: Finding) -> None:
    """report.html's evidence line: sentences, nothing absent said (raw 'onset step: None; ...' once)."""
    said = phrase(findings_report.evidence_sentences(finding), "ms")
    assert said.endswith(".") and said[0].isupper(), said
    assert "None" not in said and "ABSENT" not in said and ": ;" not in said and "_ns" not in said, said


def test_pipeline_checks_round_trip():
    """A send/recv pipeline: its stages' checks carry pipeline_ranks."""
    summary = merge_files(PP, config.load(None))
    _, checks, _ = _round_trip(summary)
    assert any(c.pipeline_ranks is not ABSENT for c in checks)


def _with_memory(result, peaks: list[int]):
    device = MemoryDevice(**{"device": "GPU0", "peak_allocated_bytes": max(peaks), "peak_reserved_bytes": max(peaks),
              "steps": list(range(len(peaks))), "step_peak_allocated_bytes": peaks,
              "step_peak_reserved_bytes": peaks,
              "growth_per_step_bytes": float(peaks[-1] - peaks[0]) / (len(peaks) - 1)})
    return replace(result, profile=replace(result.profile, memory_peak_allocated_bytes=max(peaks),
                                           memory_devices=[device]))


def test_memory_findings_round_trip():
    """Memory findings (no real trace here has one), priced and worded as pipeline.combine does:
    the in-memory shape, without ``template``."""
    cfg = config.load(None)
    base = [pipeline.reduce_rank(kineto.read(path, cfg)[0], cfg) for path in sorted(
        (DATA / "torch_flops").glob("rank*.json.gz"))]
    results = [_with_memory(base[0], [100, 110, 120, 130]), _with_memory(base[1], [400, 400, 400, 400])]
    rows = cost.price_findings(profiles.memory_findings(results, cfg), None)
    found = findings_report.worded_findings(rows)
    for finding, raw in zip(found, rows):
        assert finding.template is ABSENT and finding.why_not == cost.NOT_TIME and finding.message
        assert replace(finding, message=ABSENT, advice=ABSENT) == raw  # wording adds words only
        unworded = replace(raw, why_not=None).to_json()
        _same(Finding.from_json(json.loads(json.dumps(unworded))), unworded)
    creep, imbalance = (next(f.evidence for f in found if f.finding == code)
                        for code in ("memory_creep", "memory_imbalance"))
    assert isinstance(creep, sections.MemoryCreepEvidence) and creep.device == "GPU0" and creep.steps == 4
    assert isinstance(imbalance, sections.MemoryImbalanceEvidence)
    assert imbalance.peak_by_rank == {0: 130, 1: 400}
    for finding in found:
        said_in_sentences(finding)


def test_unknown_finding_code_is_an_error():
    row = next(f for path in GOLDEN for f in json.loads(path.read_text())["findings"])
    with pytest.raises(JsonError, match="unknown finding"):
        Finding.from_json({**row, "finding": "no_such_finding"})
    with pytest.raises(JsonError, match="unknown key"):
        Finding.from_json({**row, "evidence": {**row["evidence"], "extra": 1}})
