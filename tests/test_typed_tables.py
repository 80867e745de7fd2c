"""summary.json's ``tables``, ``across_ranks``, ``profiles`` and ``model_profile`` sections and the
profile parts of a rank row as typed records (distprof.sections.tables / .profiles): every golden
summary and fresh in-process merges decode and write back the same JSON, key order included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distprof import config
from distprof.cli import merge_files
from distprof.sections.profiles import FlopsUncounted, MemoryDevice, ModelProfile, Profiles
from distprof.sections.tables import AcrossRanks, Tables
from distprof.typed import decode

DATA = Path(__file__).parent / "data"
GOLDEN = sorted((DATA / "golden").glob("*.json"))
# real inputs with keys the goldens lack (FLOPs by phase, memory devices, pipeline stages, TP x DP)
MERGES = {
    "torch_flops": sorted((DATA / "torch_flops").glob("rank*.json.gz")),
    "torch_tpdp": sorted((DATA / "torch_tpdp" / "late3").glob("*.json.gz")),
    "torch_pp": sorted((DATA / "torch_pp" / "late1").glob("*.json.gz")),
}
SECTIONS = {"tables": Tables, "across_ranks": AcrossRanks, "profiles": Profiles}


def same(decoded, section) -> None:
    """Written back equal to the section, keys in the same order."""
    assert decoded.to_json() == section
    assert json.dumps(decoded.to_json()) == json.dumps(section)


def round_trips(summary: dict) -> dict:
    """Every section of this file's types round-trips; the decoded sections by name."""
    out = {name: kind.from_json(summary[name]) for name, kind in SECTIONS.items()}
    for name, decoded in out.items():
        same(decoded, summary[name])
    if summary["model_profile"] is not None:
        out["model_profile"] = ModelProfile.from_json(summary["model_profile"])
        same(out["model_profile"], summary["model_profile"])
    for row in summary["ranks"]:
        for device in row["memory_devices"]:
            same(MemoryDevice.from_json(device), device)
        same(FlopsUncounted.from_json(row["flops_uncounted"]), row["flops_uncounted"])
        assert decode(dict[str, int] | None, row["flops_by_phase"]) == row["flops_by_phase"]
    return out


def check_reads(summary: dict, decoded: dict) -> None:
    """A few values read by attribute equal the raw JSON's."""
    tables, raw = decoded["tables"], summary["tables"]
    assert tables.ranks == raw["ranks"]
    assert tables.merged.window_ns == raw["merged"]["window_ns"]
    kernels = raw["merged"]["kernel"]["rows"]
    assert [row.name for row in tables.merged.kernel.rows] == [row["name"] for row in kernels]
    assert tables.merged.operator.dropped.rows == raw["merged"]["operator"]["dropped"]["rows"]
    assert tables.merged.steps.median_ns == raw["merged"]["steps"]["median_ns"]
    for mine, theirs in zip(tables.by_rank, raw["by_rank"], strict=True):
        assert (mine.rank, mine.span_ns) == (theirs["rank"], theirs["span_ns"])
        assert [row.cpu_total_ns for row in mine.model] == [row["cpu_total_ns"] for row in theirs["model"]]
        assert [row.utilization for row in mine.device] == [row["utilization"] for row in theirs["device"]]
    across = decoded["across_ranks"]
    window = summary["across_ranks"]["window_ns"]
    assert (across.window_ns.max, across.window_ns.max_rank) == (window["max"], window["max_rank"])
    profiles = decoded["profiles"]
    assert profiles.slowest_rank == summary["profiles"]["slowest_rank"]


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_sections_round_trip(path):
    summary = json.loads(path.read_text())
    check_reads(summary, round_trips(summary))


@pytest.fixture(scope="module")
def merged() -> dict[str, dict]:
    return {name: merge_files(paths, config.load(None)) for name, paths in MERGES.items()}


@pytest.mark.parametrize("name", list(MERGES))
def test_merged_sections_round_trip(merged, name):
    summary = merged[name]
    check_reads(summary, round_trips(summary))


def test_flops_and_memory_profiles_read_by_attribute(merged):
    """The FLOPs input has the profile keys the goldens lack: FLOPs by phase, memory devices, spreads."""
    summary = merged["torch_flops"]
    profiles = round_trips(summary)["profiles"]
    assert profiles.flops_per_step.max == summary["profiles"]["flops_per_step"]["max"] > 0
    memory = summary["profiles"]["memory_peak_allocated_bytes"]
    assert profiles.memory_peak_allocated_bytes.min_rank == memory["min_rank"]
    row = summary["ranks"][0]
    device = MemoryDevice.from_json(row["memory_devices"][0])
    first = row["memory_devices"][0]
    assert (device.device, device.steps) == (first["device"], first["steps"])
    assert FlopsUncounted.from_json(row["flops_uncounted"]).ops == row["flops_uncounted"]["ops"]


def test_pipeline_tables_have_per_rank_model_columns(merged):
    tables = Tables.from_json(merged["torch_pp"]["tables"])
    for row in tables.merged.model:
        assert len(row.cpu_total_ns_by_rank) == len(tables.ranks)


def test_live_model_profile_round_trips(tmp_path, monkeypatch):
    """A real model_profile: a tiny loop under the probe (distprof.torch.instrument(flops=True)),
    merged from its rank file."""
    torch = pytest.importorskip("torch")
    import distprof
    import distprof.torch as dtorch
    for var in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "RANK",
                "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with distprof.Profiler(out=tmp_path, quiet=True) as prof, \
            dtorch.instrument(model, optimizer, profiler=prof, flops=True, batch_size=4):
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    summary = merge_files([tmp_path / "rank0.sqlite"], config.load(None))
    decoded = round_trips(summary)
    profile, raw = decoded["model_profile"], summary["model_profile"]
    assert [r.rank for r in profile.ranks] == [r["rank"] for r in raw["ranks"]] == [0]
    forward = 2 * 4 * (8 * 16 + 16 * 4)   # 2 x batch x the two Linear layers' weights
    assert profile.ranks[0].fwd_flops_per_step == raw["ranks"][0]["fwd_flops_per_step"] == forward
    assert [m.name for m in profile.ranks[0].modules] == [m["name"] for m in raw["ranks"][0]["modules"]]
    assert profile.ranks[0].samples_per_s == raw["ranks"][0]["samples_per_s"]
