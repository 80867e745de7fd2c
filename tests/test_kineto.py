"""Kineto (PyTorch profiler) traces: exact figures on synthetic traces with known intervals, exact
time conversion, rank detection, bad files, and the real traces in tests/data/kineto."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import kineto_fixtures as kf
import numpy as np
import pytest
from result_views import rank_row, summary_json

from distprof import align, pipeline, sources
from distprof import config as config_mod
from distprof import events as ev
from distprof.sources import kineto, kineto_decode


def config(window: str = "steps", **overrides) -> dict:
    return config_mod.load(overrides={"window": window, **overrides})


def read_one(path: Path, cfg: dict | None = None) -> ev.RankTrace:
    traces = sources.read(path, cfg or config())
    assert len(traces) == 1
    return traces[0]


def figures(trace: ev.RankTrace, window: str) -> dict:
    result = rank_row(pipeline.reduce_rank(trace, config(window)))
    keys = ("window_ns", "communication_ns", "computation_ns", "memory_ns", "overlap_ns", "exposed_communication_ns",
            "idle_ns")
    return {key: result[key] for key in keys}


# The window is the CPU ProfilerStep span [1_000, 200_000) (issue 12: ProfileStep is the step as
# torch.profiler marks it). It was the GPU-projected span (183_000 ns, comm 70_000, idle 43_000),
# which counted the SendRecv launched in step 2 but run after it. The memcpy [2_000, 4_000) is
# Memory, not Idle (idle was 69_000 / 159_000 before Memory counted).
STEPS_FIGURES = {"window_ns": 199_000, "communication_ns": 60_000, "computation_ns": 90_000, "memory_ns": 2_000,
                 "overlap_ns": 20_000, "exposed_communication_ns": 40_000, "idle_ns": 67_000}
ALL_FIGURES = {"window_ns": 329_000, "communication_ns": 95_000, "computation_ns": 100_000, "memory_ns": 2_000,
               "overlap_ns": 25_000, "exposed_communication_ns": 70_000, "idle_ns": 157_000}


# ------------------------------------------------------------------ known intervals

@pytest.mark.parametrize("time_format", kf.TIME_FORMATS)
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_overlap_figures_exact_in_both_windows(tmp_path, time_format, suffix):
    path = kf.overlap_trace(time_format=time_format).write(tmp_path / f"rank0{suffix}")
    trace = read_one(path)
    assert figures(trace, "steps") == STEPS_FIGURES
    assert figures(trace, "all") == ALL_FIGURES
    result = rank_row(pipeline.reduce_rank(trace, config("all")))
    assert result["overlap_ratio"] == 25_000 / 95_000
    assert result["comm_lanes"] == ["cuda:0/stream 13"]
    assert result["compute_lanes"] == ["cuda:0/stream 7"]


@pytest.mark.parametrize("time_format", ["us3", "str"])
def test_figures_exact_far_from_zero_with_sub_microsecond_origin(tmp_path, time_format):
    # 4458676522690.655 µs: the magnitude of the real nccl trace, where rint(x * 1000) is off by 1 ns
    origin = 4_458_676_522_690_655
    path = kf.overlap_trace(time_format=time_format, origin_ns=origin).write(tmp_path / "t.json")
    trace = read_one(path)
    assert figures(trace, "steps") == STEPS_FIGURES
    assert figures(trace, "all") == ALL_FIGURES
    assert trace.events.to_frame()["start_ns"].min() == origin + 1_000


def test_epoch_microseconds_with_fractions_are_exact(tmp_path):
    # beyond 2**43 µs a float cannot hold the ns: the reader must fall back to the text itself
    origin = 1_682_725_898_236_567_123  # ns since the epoch
    path = kf.overlap_trace(origin_ns=origin, base_time_ns=None).write(tmp_path / "t.json.gz")
    trace = read_one(path)
    assert figures(trace, "all") == ALL_FIGURES
    assert trace.events.to_frame()["start_ns"].min() == origin + 1_000
    assert trace.clock_offset_ns == 0


def test_steps_are_cpu_profiler_steps_and_gpu_windows_are_meta(tmp_path):
    # was test_step_windows_are_gpu_projected: ProfileStep rows carried the GPU span; now they
    # are the CPU ProfilerStep#N ranges and the GPU span travels in meta["gpu_step_windows"]
    trace = read_one(kf.overlap_trace().write(tmp_path / "t.json"))
    markers = rank_row(pipeline.reduce_rank(trace, config()))["step_bounds"]
    assert markers == {"step": [1, 2], "start_ns": [1_000, 100_000], "end_ns": [100_000, 200_000]}
    assert trace.meta["gpu_step_windows"] == {"step": [1, 2], "start_ns": [2_000, 110_000],
                                              "end_ns": [80_000, 215_000]}
    table = trace.events.to_frame()
    cpu_steps = table[table["name"].astype(str).str.startswith("ProfilerStep#")]
    assert cpu_steps["start_ns"].tolist() == [1_000, 100_000]
    assert set(cpu_steps["category"].astype(str)) == {ev.USER}


def test_kernel_step_comes_from_launching_call_on_any_thread(tmp_path):
    table = read_one(kf.overlap_trace().write(tmp_path / "t.json")).events.to_frame()
    gpu = table[table["lane_kind"] == ev.GPU_STREAM].sort_values("start_ns")
    assert gpu["start_ns"].tolist() == [2_000, 10_000, 35_000, 50_000, 110_000, 140_000, 205_000, 300_000, 305_000]
    assert gpu["step"].tolist() == [1, 1, 1, 1, 2, 2, 2, -1, -1]  # 110_000 was launched from tid 777
    runtime = table[table["kind"] == ev.RUNTIME]
    assert (runtime["correlation_id"] > 0).all()
    assert set(gpu["correlation_id"]) <= set(runtime["correlation_id"])


def test_step_without_gpu_work_keeps_cpu_bounds(tmp_path):
    trace = kf.overlap_trace()
    trace.step(3, 400_000, 450_000)
    markers = rank_row(pipeline.reduce_rank(read_one(trace.write(tmp_path / "t.json")), config()))["step_bounds"]
    assert markers["start_ns"][-1] == 400_000 and markers["end_ns"][-1] == 450_000


def test_event_mapping(tmp_path):
    trace = kf.overlap_trace(pid=555, device=3, base_time_ns=1_711_964_646_000_000_000)
    trace.gpu_annotation("## backward ##", 110_000, 150_000, stream=7)
    trace.kernel(kf.GEMM, 400_000, 401_000, stream=7, launch_ns=399_000, launch_cat="cuda_driver")
    result = read_one(trace.write(tmp_path / "t.json"))
    table = result.events.to_frame()
    assert result.pid == 555 and result.device == 3 and result.source == "kineto"
    assert result.clock_offset_ns == 1_711_964_646_000_000_000
    assert set(table["pid"]) == {555}  # GPU rows carry the host process, not Kineto's device pid
    kernels = table[table["kind"] == ev.KERNEL]
    assert set(kernels["device"]) == {3} and set(kernels["lane"]) == {7, 13}
    assert set(kernels[kernels["lane"] == 13]["category"].astype(str)) == {ev.COMMUNICATION}
    assert set(kernels[kernels["lane"] == 7]["category"].astype(str)) == {ev.COMPUTE}
    memcpy = table[table["kind"] == ev.MEMCPY]
    assert memcpy["category"].astype(str).tolist() == [ev.MEMORY]
    annotation = table[table["name"] == "## backward ##"]
    assert annotation["lane_kind"].astype(str).tolist() == [ev.GPU_STREAM]
    assert annotation["lane"].tolist() == [7] and annotation["category"].astype(str).tolist() == [ev.USER]
    host = table[table["name"] == "aten::mm"]
    assert host["lane_kind"].astype(str).tolist() == [ev.HOST_THREAD] and host["lane"].tolist() == [555]
    assert (table[table["kind"] == ev.RUNTIME]["category"] == ev.RUNTIME_CAT).all()
    assert table[table["start_ns"] == 400_000]["step"].tolist() == [-1]
    assert result.meta["skipped_categories"] == {"Trace": 1}


def test_communication_prefixes_come_from_config(tmp_path):
    path = kf.overlap_trace().write(tmp_path / "t.json")
    table = read_one(path, config(communication={"kernel_prefixes": ["ncclKernel"]})).events.to_frame()
    comm = table[table["category"] == ev.COMMUNICATION]
    # ncclDevKernel_ is no prefix now: compute, except the one launched inside nccl:all_reduce (a
    # communication op launched it: sources/comm_kernels.py)
    assert list(zip(comm["name"].astype(str), comm["comm_rule"].astype(str))) == [
        (kf.NCCL_ALLREDUCE, "launched by a communication op"), (kf.NCCL_SENDRECV, "ncclKernel* kernel")]
    assert (table[(table["name"] == kf.NCCL_ALLREDUCE)]["category"] == ev.COMPUTE).sum() == 2


def test_distributed_info_in_meta(tmp_path):
    trace = kf.overlap_trace()
    trace.kernel(kf.NCCL_ALLREDUCE, 500_000, 501_000, stream=13, launch_ns=499_000,
                 args={"Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10,
                       "Group size": 8, "dtype": "Float"})
    meta = read_one(trace.write(tmp_path / "t.json")).meta
    assert "nccl_collectives" not in meta  # dropped: nothing read it (collectives come from the events)
    assert meta["world_size"] == 2 and meta["backend"] == "nccl"


def test_stdlib_fallback_gives_the_same_table(tmp_path, monkeypatch):
    paths = [kf.overlap_trace().write(tmp_path / "a.json"),
             kf.overlap_trace(origin_ns=1_682_725_898_236_567_123, base_time_ns=None).write(tmp_path / "b.json")]
    fast = [read_one(path) for path in paths]
    monkeypatch.setattr(kineto_decode, "msgspec", None)
    for path, expected in zip(paths, fast):
        slow = read_one(path)
        assert slow.events.equals(expected.events)
        assert (slow.rank, slow.pid, slow.device, slow.clock_offset_ns) == \
            (expected.rank, expected.pid, expected.device, expected.clock_offset_ns)


# ------------------------------------------------------------------ exact microseconds -> ns

def ns(values: list) -> list[int]:
    converted, missing = kineto_decode.us_to_ns(values)
    assert missing is None
    return converted.tolist()


def test_us_to_ns_examples():
    assert ns([1.001, 0.1, 0, 5, 2.5]) == [1001, 100, 0, 5000, 2500]
    assert ns([3, 7]) == [3000, 7000]
    assert ns(["1.001", "0.1", "1e3", "-0.5", 7]) == [1001, 100, 1_000_000, -500, 7000]
    assert ns([4458676522690.655]) == [4458676522690655]
    assert ns([Decimal("1682725898236567.123")]) == [1682725898236567123]
    assert ns(["0.0005", "0.0015", "0.00049"]) == [0, 2, 0]  # below the ns: nearest, ties to even
    converted, missing = kineto_decode.us_to_ns([1.5, None, 2])
    assert converted.tolist() == [1500, 0, 2000] and missing.tolist() == [False, True, False]
    with pytest.raises(kineto_decode.NeedText):
        kineto_decode.us_to_ns([1682725898236567.2])  # a float this large no longer holds the ns
    with pytest.raises(kineto_decode.NeedText):
        kineto_decode.us_to_ns([1.5, "2.5"])
    with pytest.raises(ev.SourceError, match="not a number"):
        kineto_decode.us_to_ns(["12", "abc"])


def test_times_inferred_once_convert_as_their_list():
    """The reader hands us_to_ns the array numpy inferred while checking the range (one pass over
    the Python numbers, not two): the same nanoseconds as from the list, and the array left as it was."""
    from distprof.sources import kineto
    for values in ([1.001, 0.1, 0, 5, 2.5], [3, 7], [4458676522690.655, 1]):
        beyond, kept = kineto._beyond_time_range(values)
        assert isinstance(kept, np.ndarray) and not beyond.any()
        before = kept.copy()
        assert kineto_decode.us_to_ns(kept)[0].tolist() == ns(values)
        assert np.array_equal(kept, before)
    beyond, kept = kineto._beyond_time_range([1.5, None, "1e400"])  # not plain numbers: the list itself
    assert kept == [1.5, None, "1e400"] and beyond.tolist() == [False, False, True]


def test_missing_times(tmp_path):
    document = kf.overlap_trace().document()
    document["traceEvents"] += [{"ph": "X", "cat": "cpu_op", "name": "no time", "pid": 4242, "tid": 4242},
                                {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 4242, "tid": 4242, "ts": 500.0}]
    result = read_one(kf.write_text(tmp_path / "t.json", kf.dumps(document)))
    frame = result.events.to_frame()
    assert "no time" not in set(frame["name"].astype(str))
    assert result.meta["skipped_categories"]["(no ts)"] == 1
    row = frame[frame["name"] == "no dur"]
    assert row["start_ns"].tolist() == [500_000] and row["end_ns"].tolist() == [500_000]
    assert figures(result, "steps") == STEPS_FIGURES


def test_us_to_ns_matches_decimal_on_random_three_decimal_text():
    rng = np.random.default_rng(7)
    ns_of = ns
    expected = np.concatenate([rng.integers(0, 10**12, 20_000),  # up to 11 days
                         rng.integers(4_400 * 10**12, 4_500 * 10**12, 20_000),  # the real nccl trace's range
                         rng.integers(2**43 * 1000 - 10**15, 2**43 * 1000, 20_000)])  # up to the limit
    texts = [kf.us_text(int(value)) for value in expected]
    floats = [float(text) for text in texts]  # what a JSON decoder hands over
    assert ns_of(floats) == expected.tolist()
    assert ns_of(texts) == expected.tolist()
    naive = np.rint(np.array(floats) * 1000).astype(np.int64)
    assert (naive != expected).any()  # the trap the split avoids


def test_times_written_as_strings_read_exactly(tmp_path):
    trace = kf.KinetoTrace(time_format="str")
    trace.cpu_op("aten::add", 1_001, 1_101)
    table = read_one(trace.write(tmp_path / "t.json")).events.to_frame()
    row = table[table["name"] == "aten::add"]
    assert row["start_ns"].tolist() == [1001] and row["end_ns"].tolist() == [1101]


# ------------------------------------------------------------------ ranks

@pytest.mark.parametrize("name,rank", [("trace_rank-3.json", 3), ("rank3.json", 3),
                                       ("job_rank_12.pt.trace.json.gz", 12), ("RANK.5.json", 5)])
def test_rank_from_file_name(tmp_path, name, rank):
    trace = read_one(kf.overlap_trace(rank=None).write(tmp_path / name))
    assert (trace.rank, trace.rank_from) == (rank, "file name")


def test_rank_order_distributed_info_then_name_then_unknown(tmp_path):
    info = read_one(kf.overlap_trace(rank=1).write(tmp_path / "rank-5.json"))
    assert (info.rank, info.rank_from) == (1, "distributedInfo")
    folder = tmp_path / "rank7"
    folder.mkdir()
    in_folder = read_one(kf.overlap_trace(rank=None).write(folder / "host.pt.trace.json"))
    assert (in_folder.rank, in_folder.rank_from) == (7, "file name")
    unknown = read_one(kf.overlap_trace(rank=None).write(tmp_path / "worker.json"))
    assert (unknown.rank, unknown.rank_from) == (None, "unknown")
    results = [pipeline.reduce_rank(t, config()) for t in (unknown, info)]
    results, _ = align.assign_ranks(results)  # the merge numbers unknown ranks by input order
    assert [(r.rank, r.rank_from) for r in results] == [(0, "input order"), (1, "distributedInfo")]


# ------------------------------------------------------------------ bad input

def _bad_files(tmp_path: Path) -> dict[str, Path]:
    good = kf.overlap_trace().write(tmp_path / "good.json.gz").read_bytes()
    files = {
        "not valid JSON": ("notjson.json", b"hello, this is not json"),
        "corrupt or truncated gzip": ("truncated.json.gz", good[: len(good) // 2]),
        "not valid JSON ": ("cut.json", kf.overlap_trace().text().encode()[:5000]),
        "traceEvents": ("other.json", json.dumps({"foo": 1}).encode()),
        "traceEvents ": ("list.json", b"[1, 2, 3]"),
        "no CPU or GPU events": ("meta_only.json", json.dumps({"traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "x"}}]}).encode()),
        "no CPU or GPU events ": ("empty_events.json", b'{"traceEvents": []}'),
        "empty file": ("empty.json", b"   \n"),
        "not a number": ("badts.json", json.dumps({"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "soon", "dur": 1}]}).encode()),
        "unexpected trace content": ("badtype.json", json.dumps({"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": [1], "dur": 1}]}).encode()),
    }
    out = {}
    for problem, (name, data) in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        out[problem] = path
    return out


def test_bad_files_give_one_line_naming_the_file(tmp_path):
    for problem, path in _bad_files(tmp_path).items():
        with pytest.raises(ev.SourceError) as caught:
            sources.read(path, config())
        message = str(caught.value)
        assert message.startswith(f"{path}: "), message
        assert problem.strip() in message, message
        assert "\n" not in message


# ------------------------------------------------------------------ real traces

REAL_FILES = sorted(kf.KINETO_DATA.glob("*/*.json.gz")) if kf.KINETO_DATA.is_dir() else []


def real(folder: str) -> list[Path]:
    files = sorted((kf.KINETO_DATA / folder).glob("*.json.gz"))
    if not files:
        pytest.skip(f"real traces absent: {kf.KINETO_DATA / folder}")
    return files


def lanes(result: dict, key: str) -> set[int]:
    return {int(label.rsplit(" ", 1)[1]) for label in result[key]}


def test_real_trace_filter_2rank():
    results = [rank_row(pipeline.reduce_rank(read_one(path), config())) for path in real("hta_trace_filter_2rank")]
    assert [(r["rank"], r["rank_from"], r["device"], r["steps"]) for r in results] == \
        [(0, "distributedInfo", 0, 2), (1, "distributedInfo", 1, 2)]
    for result in results:
        assert lanes(result, "comm_lanes") == {84, 203}
        assert lanes(result, "compute_lanes") == {7, 23}
        assert result["step_bounds"]["step"] == [551, 552]
        assert result["meta"]["world_size"] == 128
        assert result["clock_offset_ns"] == 0


def test_real_nccl_parser_config():
    (path,) = real("hta_nccl_parser_config_1of2")
    trace = read_one(path)
    result = rank_row(pipeline.reduce_rank(trace, config()))
    assert result["steps"] == 3 and result["step_bounds"]["step"] == [4, 5, 6]
    assert lanes(result, "comm_lanes") == {40} and lanes(result, "compute_lanes") == {7}
    frame = trace.events.to_frame()
    comm = frame[frame["category"] == ev.COMMUNICATION]
    assert {kind for kind in comm["name"].astype(str).str.extract(r"^ncclKernel_([A-Za-z]+)")[0]} == \
        {"AllReduce", "Broadcast"}
    assert trace.clock_offset_ns == 1_711_964_646_000_000_000
    names = comm["name"].astype(str)
    assert names.str.contains("AllReduce").sum() == 15 and names.str.contains("Broadcast").sum() == 6
    assert (frame["lane_kind"] == ev.GPU_STREAM).sum() > 0
    annotations = frame[(frame["kind"] == ev.RANGE) & (frame["lane_kind"] == ev.GPU_STREAM)]
    assert len(annotations) == 30  # gpu_user_annotation rows


def test_real_negative_queue():
    (path,) = real("hta_negative_queue_1of16")
    result = rank_row(pipeline.reduce_rank(read_one(path), config()))
    assert (result["rank"], result["steps"], result["meta"]["world_size"]) == (0, 5, 16)
    assert lanes(result, "comm_lanes") == {84, 285, 363}
    assert lanes(result, "compute_lanes") == {7, 27}


def test_real_trace_diff_control():
    (path,) = real("hta_trace_diff_control_1of8")
    trace = read_one(path)
    result = rank_row(pipeline.reduce_rank(trace, config()))
    assert (result["rank"], result["device"], result["steps"], result["meta"]["world_size"]) == (3, 3, 6, 8)
    assert lanes(result, "comm_lanes") == {21} and lanes(result, "compute_lanes") == {7, 20}
    frame = trace.events.to_frame()
    comm = frame[frame["category"] == ev.COMMUNICATION]["name"].astype(str)
    assert set(comm.str.extract(r"^ncclKernel_([A-Za-z]+)")[0]) == {"AllReduce", "SendRecv"}


# HTA's get_comm_comp_overlap, per rank: |∪comm ∩ ∪comp| / |∪comm| over the GPU events (events
# with an args.stream), comm = name matches ^nccl.*Kernel, comp = HTA's "computation" kernel
# type: not comm, not memory (^Memcpy|^Memset|^dma) and not matching
# (^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync). Computed here deliberately plainly: stdlib json
# with Decimal numbers, Python sorting and two-pointer sweeps, no numpy, nothing shared with
# distprof. (HTA itself also rounds fractional µs and drops the last step's kernels when loading;
# the definition is what is compared.)
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")


def _merge(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _intersection_length(a, b):
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, high - low)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def reference_overlap(path: Path) -> tuple[int, int]:
    """(|∪comm|, |∪comm ∩ ∪comp|) in ns, the HTA definition, the slow obvious way."""
    with (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)) as handle:
        document = json.load(handle, parse_float=Decimal)
    comm, comp = [], []
    for event in document["traceEvents"]:
        args = event.get("args") or {}
        if event.get("ph") != "X" or event.get("cat") == "Trace" or not isinstance(args.get("stream"), int):
            continue
        start = Decimal(event["ts"]) * 1000
        end = start + Decimal(event["dur"]) * 1000
        assert start == int(start) and end == int(end)
        name = event["name"]
        if _HTA_COMM.match(name):
            comm.append((int(start), int(end)))
        elif not _HTA_MEMORY.match(name) and not _HTA_NOT_COMPUTE.match(name):
            comp.append((int(start), int(end)))
    comm_set, comp_set = _merge(comm), _merge(comp)
    return sum(end - start for start, end in comm_set), _intersection_length(comm_set, comp_set)


@pytest.mark.skipif(not REAL_FILES, reason="real Kineto traces absent")
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_overlap_ratio_equals_hta_definition(path):
    communication, overlap = reference_overlap(path)
    result = rank_row(pipeline.reduce_rank(read_one(path, config("all")), config("all")))
    assert result["communication_ns"] == communication
    assert result["overlap_ns"] == overlap
    assert result["overlap_ratio"] == pytest.approx(overlap / communication, rel=0, abs=1e-12)


def test_unknown_or_missing_phase_falls_back_to_untagged_decoding(tmp_path):
    document = kf.overlap_trace().document()
    document["traceEvents"] += [{"ph": "Z", "name": "from the future", "pid": 1, "tid": 1, "ts": 1},
                                {"name": "no phase", "pid": 1, "tid": 1, "ts": 1}]
    trace = read_one(kf.write_text(tmp_path / "t.json", kf.dumps(document)))
    assert figures(trace, "steps") == STEPS_FIGURES


@pytest.mark.parametrize("time_format", kf.TIME_FORMATS)
def test_synthetic_overlap_ratio_equals_hta_definition(tmp_path, time_format):
    path = kf.overlap_trace(time_format=time_format, origin_ns=0 if time_format in ("int", "float") else 7_777)
    path = path.write(tmp_path / "t.json")
    communication, overlap = reference_overlap(path)
    assert (communication, overlap) == (95_000, 25_000)
    result = rank_row(pipeline.reduce_rank(read_one(path, config("all")), config("all")))
    assert (result["communication_ns"], result["overlap_ns"]) == (communication, overlap)


def test_two_ranks_merge(tmp_path):
    traces = [read_one(kf.overlap_trace(rank=rank, device=rank, pid=100 + rank).write(tmp_path / f"r{rank}.json.gz"))
              for rank in (1, 0)]
    cfg = config()
    reduced = [pipeline.reduce_rank(trace, cfg) for trace in traces]
    summary = summary_json(pipeline.combine(reduced, cfg, source="kineto"))
    assert [row["rank"] for row in summary["ranks"]] == [0, 1]
    assert [row["device"] for row in summary["ranks"]] == [0, 1]
    assert summary["across_ranks"]["overlap_ns"]["max"] == 20_000
    assert summary["missing_ranks"] == []


def test_factorize_names_of_any_json_type():
    codes, names = kineto._factorize_names(["a", None, 5, "a", "5", ["x"]])
    assert [names[c] for c in codes] == ["a", "", "5", "a", "5", "['x']"]
    assert len(names) == len(set(names))
