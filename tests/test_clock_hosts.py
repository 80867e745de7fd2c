"""Clocks: never invent certainty (issue 12 item 6). Synthetic multi-host nsys exports with the
real DDL: ranks on one host share a clock, collective ends that cluster by host are not used to
shift clocks across hosts, and an offset nobody verified has an unknown (None) uncertainty."""

from __future__ import annotations

from pathlib import Path

import nsys_fixtures as fx
import numpy as np
import pytest
from result_views import summary_json

from distprof import config as config_mod
from distprof import pipeline
from distprof.reports import text
from distprof.results import Summary

pytestmark = pytest.mark.skipif(not fx.ddl_available(), reason=f"nsys DDL folder {fx.DDL_DIR} is absent")

HOST_GAP_NS = 1_100_000  # collective ends on host h are h x 1.1 ms later, for "physical" reasons
PERIOD_NS = 5_000_000


def _rank_file(tmp: Path, rank: int, host: str | None, end_shift_ns: int, count: int) -> Path:
    """One rank's export: ``count`` allreduce kernels starting together, ending ``end_shift_ns``
    later (plus a 1 us jitter per rank) on a clock shared by all files (same session start)."""
    env = {"RANK": str(rank), **({"HOSTNAME": host} if host else {})}
    export = fx.NsysExport(env=env)
    pid = 1000 + rank
    for k in range(count):  # one collective per iteration
        start = 1_000_000 + k * PERIOD_NS
        end = start + 2_000_000 + end_shift_ns + 1_000 * (rank % 3) + 300 * ((k * 7 + rank) % 5)
        export.kernel(pid, 0, fx.NCCL_STREAM, start, end, fx.NCCL_KERNEL, launch=(start - 50_000, start - 40_000))
    return export.write(tmp / f"rank{rank}.sqlite")


def _merge(tmp: Path, hosts: list[str | None], shifts: list[int], count: int = 12, **clock) -> dict:
    paths = [_rank_file(tmp, r, h, s, count) for r, (h, s) in enumerate(zip(hosts, shifts))]
    config = config_mod.load(overrides={"clock": clock} if clock else None)
    return summary_json(pipeline.merge_files(paths, config))


def _methods(summary: dict) -> list[tuple[str, int | None]]:
    return [(a["method"], a["uncertainty_ns"]) for a in summary["skew"]["alignment"]]


THREE_HOSTS = [f"node{r // 3}" for r in range(9)]


def test_nsys_reads_hostname(tmp_path):
    from distprof import sources
    path = _rank_file(tmp_path, 0, "node7", 0, 2)
    assert [t.meta.get("hostname") for t in sources.read(path, config_mod.load())] == ["node7"]


def test_ends_clustered_by_host_do_not_shift_clocks_across_hosts(tmp_path):
    shifts = [HOST_GAP_NS * (r // 3) for r in range(9)]
    summary = _merge(tmp_path, THREE_HOSTS, shifts)
    alignment = summary["skew"]["alignment"]
    assert _methods(summary)[:3] == [("reference", 0), ("same host", 0), ("same host", 0)]
    assert all(m == ("source offset (collective ends cluster by host)", None) for m in _methods(summary)[3:])
    # every offset stays the source's: the files share one clock, the 1.1 ms is physical
    assert all(a["offset_ns"] == a["source_offset_ns"] for a in alignment)
    assert [r["clock_uncertainty_ns"] for r in summary["ranks"]] == [0, 0, 0] + [None] * 6
    assert summary["skew"]["max_clock_uncertainty_ns"] is None
    assert any("differ by host" in note for note in summary["skew"]["notes"])
    assert summary["skew"]["straggler"] is None


def test_ends_that_agree_across_hosts_refine(tmp_path):
    summary = _merge(tmp_path, THREE_HOSTS, [0] * 9)
    methods = _methods(summary)
    assert methods[:3] == [("reference", 0), ("same host", 0), ("same host", 0)]
    assert {m for m, _ in methods[3:]} == {"collective ends"}
    assert all(u is not None and u < 5_000 for _, u in methods[3:])  # spread of 1 us jitter + 0.3 us noise


def test_without_hosts_the_ends_are_trusted(tmp_path):
    """Without host names nothing tells the ends cluster: refined (the old behaviour, a 1.1 ms shift)."""
    shifts = [HOST_GAP_NS * (r // 3) for r in range(6)]
    summary = _merge(tmp_path, [None] * 6, shifts)
    alignment = summary["skew"]["alignment"]
    assert [a["method"] for a in alignment[3:]] == ["collective ends"] * 3
    shift = np.array([a["offset_ns"] - a["source_offset_ns"] for a in alignment[3:]])
    assert np.all(np.abs(shift + HOST_GAP_NS) < 5_000)


def test_two_collectives_leave_offsets_unverified(tmp_path):
    """The reported 9-rank job: too few collectives to refine, no hosts: unknown, never <= 0.00 ms."""
    summary = _merge(tmp_path, [None] * 3, [0] * 3, count=2)
    assert _methods(summary) == [("reference", 0), ("source offset (unverified)", None),
                                 ("source offset (unverified)", None)]
    assert summary["skew"]["max_clock_uncertainty_ns"] is None
    assert summary["skew"]["clock_unverified_ranks"] == [1, 2]
    assert any("not verified" in w for w in summary["warnings"])
    rendered = text.render(Summary.from_json(summary))
    assert "clock uncertainty unknown (not verified)" in rendered and "<= 0.00" not in rendered


def test_same_host_without_collectives_is_verified(tmp_path):
    summary = _merge(tmp_path, ["a", "a", "b"], [0] * 3, count=2)
    assert _methods(summary) == [("reference", 0), ("same host", 0), ("source offset (unverified)", None)]


def test_alignment_off_keeps_unknown_unknown(tmp_path):
    summary = _merge(tmp_path, [None] * 2, [0] * 2, align=False)
    assert _methods(summary) == [("alignment off", 0), ("alignment off", None)]
