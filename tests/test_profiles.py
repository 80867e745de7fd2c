"""Operator Summary, FLOPs/MFU and memory profiles, checked against the model's known shape and
against plain-Python counts over the raw Kineto JSON (tests/data/torch_flops: 2 ranks, DDP over
4 x Linear(1024, 1024) at batch 64, record_shapes + profile_memory, ProfilerSteps #2-#4)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest
from msgspec.structs import replace
from result_views import summary_json, worded_findings

from distprof import config as config_mod
from distprof import pipeline
from distprof.analyses import cost, operators, profiles
from distprof.reports import findings as findings_report
from distprof.results import RankProfile, Summary
from distprof.sections.profiles import MemoryDevice
from distprof.sources import kineto, kineto_decode

DATA = Path(__file__).parent / "data" / "torch_flops"
FILES = sorted(DATA.glob("rank*.json.gz"))
UNIT = 2 * 64 * 1024 * 1024          # one 64x1024 @ 1024x1024 GEMM
FORWARD = 4 * UNIT                   # 536,870,912
BACKWARD = 2 * FORWARD - UNIT        # weight and input gradients, no input gradient for layer 1


def _raw(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def _steps(raw: list[dict]) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]


def _in_steps(ts: float, steps) -> bool:
    return any(a <= ts < b for a, b in steps)


@pytest.fixture(scope="module")
def summary():
    return summary_json(pipeline.merge_files(FILES, config_mod.load(overrides={"hardware": {"peak_tflops": 0.5}})))


def test_flops_per_step_equal_the_model_gemms(summary):
    for row in summary["ranks"]:
        assert row["flops_per_step"] == FORWARD + BACKWARD == 1_476_395_008
        assert row["flops_by_phase"]["forward"] == FORWARD == 536_870_912
        assert row["flops_by_phase"]["backward"] == BACKWARD
        assert row["flops_source"] == "shapes" and row["flops_uncounted"]["ops"] == 0


def test_flops_equal_a_plain_count_over_the_raw_json(summary):
    """Innermost GEMMs (mm/addmm) by Input Dims, inside the ProfilerSteps; MFU over the peak."""
    for path, row in zip(FILES, summary["ranks"]):
        raw = _raw(path)
        steps = _steps(raw)
        total = 0
        for e in raw:
            if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm") and _in_steps(e["ts"], steps):
                dims = e["args"]["Input Dims"][1:3] if e["name"] == "aten::addmm" else e["args"]["Input Dims"][:2]
                total += 2 * dims[0][0] * dims[0][1] * dims[1][1]
        step_ns = sum(round((b - a) * 1000) for a, b in steps)
        assert row["flops_total"] == total == 3 * (FORWARD + BACKWARD)
        assert row["achieved_tflops"] == pytest.approx(total / step_ns / 1e3, rel=1e-5)
        assert row["mfu"] == pytest.approx(row["achieved_tflops"] / 0.5)


def test_peak_allocated_is_the_largest_sample_in_the_window(summary):
    for path, row in zip(FILES, summary["ranks"]):
        raw = _raw(path)
        steps = _steps(raw)
        samples = [e for e in raw if e.get("ph") == "i" and e.get("name") == "[memory]" and _in_steps(e["ts"], steps)]
        assert row["memory_peak_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in samples)
        assert row["memory_peak_reserved_bytes"] == max(e["args"]["Total Reserved"] for e in samples)
        (device,) = row["memory_devices"]
        per_step = [max(e["args"]["Total Allocated"] for e in samples if a <= e["ts"] < b) for a, b in steps]
        assert device["device"] == "CPU" and device["step_peak_allocated_bytes"] == per_step
        assert device["growth_per_step_bytes"] == pytest.approx(np.polyfit(range(len(per_step)), per_step, 1)[0])


def _self_ns(op: dict, ops: list[dict]) -> int:
    """Own duration minus its direct children's (contained cpu_ops on its thread with no op between)."""
    def inside(a, b):
        return a is not b and a["tid"] == b["tid"] and b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"]
    below = [o for o in ops if inside(o, op)]
    direct = [o for o in below if not any(inside(o, mid) for mid in below)]
    return round(op["dur"] * 1000) - sum(round(o["dur"] * 1000) for o in direct)


def test_operator_rows_equal_a_plain_count_over_the_raw_json(summary):
    merged = {}
    for path, rank in zip(FILES, summary["tables"]["by_rank"]):
        raw = _raw(path)
        steps = _steps(raw)
        ops = [e for e in raw if e.get("cat") == "cpu_op"]
        for name in ("aten::addmm", "aten::linear", "aten::mm"):
            mine = [e for e in ops if e["name"] == name and _in_steps(e["ts"], steps)]
            row = next(r for r in rank["operator"]["rows"] if r["name"] == name)
            assert row["calls"] == len(mine)
            assert row["cpu_total_ns"] == sum(round(e["dur"] * 1000) for e in mine)
            assert row["cpu_max_ns"] == max(round(e["dur"] * 1000) for e in mine)
            assert row["cpu_self_ns"] == sum(_self_ns(e, ops) for e in mine)
            assert row["gpu_total_ns"] is None   # CPU-only trace
            merged.setdefault(name, [0, 0])
            merged[name][0] += row["calls"]
            merged[name][1] += row["cpu_total_ns"]
    rows = {r["name"]: r for r in summary["tables"]["merged"]["operator"]["rows"]}
    assert rows["aten::addmm"]["calls"] == 2 * 3 * 4 and rows["aten::mm"]["calls"] == 2 * 3 * 7
    for name, (calls, total) in merged.items():
        assert (rows[name]["calls"], rows[name]["cpu_total_ns"], rows[name]["ranks"]) == (calls, total, 2)


def test_op_tree_parents_self_time_and_gpu_up_the_tree():
    #      0: [0, 100)  ├ 1: [10, 50)  ├ 2: [20, 30)   3: [60, 70)     4: [0, 5) on another thread
    thread = np.array([0, 0, 0, 0, 1])
    start, end = np.array([0, 10, 20, 60, 0]), np.array([100, 50, 30, 70, 5])
    parent, depth = operators.op_tree(thread, start, end)
    assert parent.tolist() == [-1, 0, 1, 0, -1] and depth.tolist() == [1, 2, 3, 2, 1]
    assert operators.up_the_tree(np.array([1, 2, 4, 8, 16]), parent, depth).tolist() == [15, 6, 4, 8, 16]


def test_shape_flops_formulas():
    assert profiles.shape_flops("aten::linear", [[8, 4, 16], [32, 16], [32]], None) == 2 * 32 * 16 * 32
    assert profiles.shape_flops("aten::bmm", [[3, 4, 5], [3, 5, 6]], None) == 2 * 3 * 4 * 5 * 6
    assert profiles.shape_flops("aten::baddbmm", [[3, 4, 6], [3, 4, 5], [3, 5, 6]], None) == 2 * 3 * 4 * 5 * 6
    # conv2d: 1x3x8x8 input, 4x3x3x3 weight, stride 1, padding 1 -> 8x8 output
    concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"]
    assert profiles.shape_flops("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [4]], concrete) == 2 * 4 * 64 * 3 * 9
    assert profiles.shape_flops("aten::mm", [[2, 3], [4, 5]], None) is None   # shapes that do not fit
    assert profiles.shape_flops("aten::relu", [[2, 3]], None) is None


def test_kineto_side_tables_hold_every_cpu_op_and_memory_sample():
    trace = kineto.read(FILES[0], config_mod.load())[0]
    raw = _raw(FILES[0])
    assert len(trace.profiles["operators"]) == sum(e.get("cat") == "cpu_op" for e in raw)
    assert len(trace.profiles["memory"]) == sum(e.get("name") == "[memory]" and e.get("ph") == "i" for e in raw)


def test_shape_args_needed_names_the_formulas_ops():
    """The reader decodes Input Dims for the GEMM/conv ops only and Concrete Inputs for convolutions."""
    names = ["aten::mm", "aten::addmm", "aten::linear", "aten::conv2d", "aten::_convolution", "aten::relu",
             "aten::matmul", "aten::conv_transpose2d", "aten::convert_element_type", "ProfilerStep#2"]
    dims, concrete = profiles.shape_args_needed(names)
    assert [n for n, d in zip(names, dims) if d] == ["aten::mm", "aten::addmm", "aten::linear", "aten::conv2d",
                                                     "aten::_convolution"]
    assert [n for n, c in zip(names, concrete) if c] == ["aten::conv2d", "aten::_convolution"]
    assert all(shape is None or d for n, d in zip(names, dims)
               for shape in [profiles.shape_flops(n, [[2, 3], [3, 4], [3, 4]], ["", "", "", "1", "0", "1", "0"])])


def test_kineto_decodes_shapes_only_where_flops_read_them():
    """Input Dims of the ops without a FLOPs formula are left undecoded (code -1), the GEMMs' are kept."""
    side = kineto.read(FILES[0], config_mod.load())[0].profiles
    ops, raw = side["operators"], _raw(FILES[0])
    dims = np.asarray(ops.dims)
    needed, _ = profiles.shape_args_needed(ops.name.texts)
    assert ((dims >= 0) == needed[ops.name.codes]).all() and (dims >= 0).any()
    mm = [e["args"]["Input Dims"] for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert sorted(side["input_dims"][d] for d in dims[ops.name.eq("aten::mm")]) == sorted(mm)
    assert all(dims[~needed[ops.name.codes]] == -1) and (np.asarray(ops.concrete) == -1).all()


def test_no_flops_anywhere_counts_nothing_and_lists_the_gemms_uncounted():
    """Without flops args or usable shapes nothing goes up the tree: every GEMM/conv op is uncounted."""
    names = ["aten::linear", "aten::addmm", "aten::relu", "aten::conv2d"]
    none = np.zeros(4, np.int64)  # what op_flops does not read
    ops = operators.ev.Operators({"name": operators.ev.Texts.of(np.array(names, object)), "flops": np.full(4, np.nan),
                                  "dims": np.full(4, -1), "concrete": np.full(4, -1), "start_ns": none,
                                  "end_ns": none, "pid": none, "lane": none})
    tree = operators.OperatorTree(ops=ops, thread=none, parent=np.array([-1, 0, -1, -1]),
                                  depth=np.array([1, 2, 1, 1]), duration=none, self_ns=none, input_dims=[],
                                  concrete_inputs=[])
    counted, uncounted, source = profiles.op_flops(tree, [], [])
    assert counted.tolist() == [0, 0, 0, 0] and uncounted.tolist() == [True, True, False, True] and source is None
    tree = msgspec.structs.replace(tree, ops=ops.with_columns(dims=np.array([-1, 0, 0, -1]),
                                                         flops=np.array([np.nan, np.nan, 5.0, np.nan])))
    counted, uncounted, source = profiles.op_flops(tree, [[[2, 3], [3, 4]]], [])
    assert counted.tolist() == [0, 0, 5, 0] and uncounted.tolist() == [True, True, False, True] and source == "args"


def test_rank_profile_round_trips_through_json(summary):
    row = summary["ranks"][1]
    profile = RankProfile.from_json(row)
    assert profile.to_json() == {k: row[k] for k in profile.to_json()}
    assert json.loads(json.dumps(profile.to_json())) == profile.to_json()


def test_across_ranks_names_the_slowest_rank(summary):
    tflops = {r["rank"]: r["achieved_tflops"] for r in summary["ranks"]}
    spread = summary["profiles"]["achieved_tflops"]
    assert summary["profiles"]["slowest_rank"] == min(tflops, key=tflops.get) == spread["min_rank"]
    assert spread["max_over_min"] == pytest.approx(max(tflops.values()) / min(tflops.values()))


def _with_memory(result, peaks: list[int]):
    device = MemoryDevice(**{"device": "GPU0", "peak_allocated_bytes": max(peaks), "peak_reserved_bytes": max(peaks),
              "steps": list(range(len(peaks))), "step_peak_allocated_bytes": peaks,
              "step_peak_reserved_bytes": peaks,
              "growth_per_step_bytes": float(np.polyfit(range(len(peaks)), peaks, 1)[0])})
    return replace(result, profile=replace(result.profile, memory_peak_allocated_bytes=max(peaks),
                                           memory_devices=[device]))


def test_memory_creep_and_outlier_findings_invent_no_saving():
    config = config_mod.load()
    base = [pipeline.reduce_rank(kineto.read(path, config)[0], config) for path in FILES]
    creeping = [_with_memory(base[0], [100, 110, 120, 130]), _with_memory(base[1], [100, 100, 100, 100])]
    (creep,) = profiles.memory_findings(creeping, config)
    assert creep.finding == "memory_creep" and creep.ranks == [0]
    assert creep.evidence.growth_per_step_bytes == pytest.approx(10)
    [priced] = cost.price_findings([creep], None)  # memory is not time: priced by nothing, and says so
    assert priced.predicted_saving_ns is None and findings_report.text(priced.why_not) == "memory, not time"
    assert priced.severity == "unpriced"
    assert "grows 0.0 MiB per step" in worded_findings([creep])[0].message
    uneven = [_with_memory(base[0], [100, 100, 100]), _with_memory(base[1], [300, 300, 300]),
              _with_memory(base[1], [100, 100, 100])]
    uneven[2] = replace(uneven[2], rank=2)
    (outlier,) = profiles.memory_findings(uneven, config)
    assert outlier.finding == "memory_imbalance" and outlier.ranks == [1]
    [priced] = cost.price_findings([outlier], None)
    assert priced.predicted_saving_ns is None and priced.cost_ns is None
    assert "rank 1 holds" in worded_findings([outlier])[0].message
    assert profiles.memory_findings(base, config) == []  # the real traces: steady memory, equal ranks


def test_peak_tflops_is_validated():
    with pytest.raises(config_mod.ConfigError):
        config_mod.load(overrides={"hardware": {"peak_tflops": -1}})
    assert config_mod.load()["hardware"]["peak_tflops"] is None


def test_nsys_nvtx_operators_on_an_export_with_nsys_ddl(tmp_path):
    """emit_nvtx-style ranges (``aten::op, seq = N, sizes = [...]``) in an export written with nsys's
    own DDL: the Operator Summary (GPU time of the kernel launched under addmm, counted for linear
    too) and the FLOPs from the sizes."""
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL not available")
    export = fx.NsysExport(schema="2026.2")
    pid = 4242
    export.range(pid, 1_000, 40_000, "ProfileStep#0")
    export.range(pid, 2_000, 9_000, "aten::linear, seq = 1, sizes = [[64, 1024], [1024, 1024], [1024]]")
    export.range(pid, 2_500, 8_000, "aten::addmm, seq = 1, sizes = [[1024], [64, 1024], [1024, 1024], [], []]")
    export.kernel(pid, 0, 7, 1_500, 1_800, "fill", launch=(1_100, 1_200))  # the step's GPU window opens here
    export.kernel(pid, 0, 7, 10_000, 20_000, "gemm", launch=(3_000, 3_500))
    path = export.write(tmp_path / "rank0.sqlite")
    out = summary_json(pipeline.merge_files([path], config_mod.load()))
    rows = {r["name"]: r for r in out["tables"]["by_rank"][0]["operator"]["rows"]}
    assert (rows["aten::addmm"]["calls"], rows["aten::addmm"]["cpu_total_ns"], rows["aten::addmm"]["cpu_self_ns"],
            rows["aten::addmm"]["gpu_total_ns"]) == (1, 5_500, 5_500, 10_000)
    assert (rows["aten::linear"]["cpu_total_ns"], rows["aten::linear"]["cpu_self_ns"],
            rows["aten::linear"]["gpu_total_ns"]) == (7_000, 1_500, 10_000)
    assert out["ranks"][0]["flops_per_step"] == UNIT


def test_reports_show_the_operator_summary_and_the_profiles(summary):
    from distprof.reports import html, tables, text
    typed = Summary.from_json(summary)
    report = text.render(typed, sorted_by="calls", top=5)
    assert "Operator Summary (all ranks)" in report and "FLOPs and Memory" in report
    section = report[report.index("Operator Summary (all ranks)"):]
    most_calls = max(summary["tables"]["merged"]["operator"]["rows"], key=lambda r: r["calls"])
    first_row = section.splitlines()[3]
    assert first_row.startswith(most_calls["name"][:40]) and f" {most_calls['calls']} " in first_row
    assert "1.476" in report   # GFLOPs per step
    page = html.render(typed)
    assert "<h3>Operator Summary</h3>" in page and "<h2>FLOPs and Memory</h2>" in page
    assert "peak allocated (MiB)" in page and page.count(">rank ") >= 2   # the memory plot, a line per rank
    rows = typed.tables.merged.operator.rows
    assert [r.name for r in tables.sort_operator_rows(rows, "cpu_self")][0] == "aten::mm"


def test_side_tables_agree_without_msgspec(monkeypatch):
    """The stdlib JSON fallback reads the same operators, shapes and memory samples."""
    config = config_mod.load()
    fast = kineto.read(FILES[1], config)[0].profiles
    monkeypatch.setattr(kineto_decode, "msgspec", None)
    slow = kineto.read(FILES[1], config)[0].profiles
    assert fast["memory"].equals(slow["memory"])
    for side in (fast, slow):
        side["shapes"] = [side["input_dims"][code] for code in side["operators"]["dims"]]
    assert fast["shapes"] == slow["shapes"]
    columns = ["start_ns", "end_ns", "pid", "lane", "flops"]
    assert fast["operators"].select(*columns).equals(slow["operators"].select(*columns))


def test_operator_records_convert_a_column_at_a_time_as_cell_by_cell():
    """operators._records turns numpy columns into rows a column at a time (tolist); the same values as
    converting each cell: ints as int, floats as float, NaN as None, a None column None in every row,
    names as text (from an object array or a list)."""
    from distprof.analyses import operators as ops_mod
    from distprof.sections.tables import MergedOperatorRow
    rng = np.random.default_rng(3)
    size = 40
    with_nan = rng.random(size) * 1e6
    with_nan[rng.random(size) < 0.3] = np.nan
    columns = {"name": [f"aten::op{i}" for i in range(size)], "calls": rng.integers(1, 50, size),
               "cpu_total_ns": rng.integers(0, 10**12, size), "cpu_self_ns": rng.integers(0, 10**9, size),
               "cpu_avg_ns": rng.random(size) * 1e5, "cpu_max_ns": rng.integers(0, 10**9, size),
               "cpu_min_ns": rng.integers(0, 10**9, size), "gpu_total_ns": np.floor(with_nan),
               "gpu_avg_ns": with_nan, "ratio": None, "ranks": rng.integers(1, 9, size),
               "max_rank": rng.integers(0, 8, size)}
    kept = rng.permutation(size)[:25]
    rows = ops_mod._records(columns, kept, MergedOperatorRow)

    def cell(key, value):  # each cell on its own, as the rows were made before
        if value is None or value != value:
            return None
        if key in ops_mod._INTS:
            return int(value)
        return float(value) if isinstance(value, (float, np.floating)) else str(value)
    expected = [{key: cell(key, None if columns[key] is None else columns[key][g])
                 for key in MergedOperatorRow.__struct_fields__} for g in kept.tolist()]
    assert [msgspec.structs.asdict(row) for row in rows] == expected
    assert {type(row.gpu_total_ns) for row in rows} == {int, type(None)} and all(row.ratio is None for row in rows)
    texts = {**columns, "name": np.array(columns["name"], object)}
    assert ops_mod._records(texts, kept, MergedOperatorRow) == rows
