"""Synthetic PyTorch profiler (Kineto) traces with known intervals, for tests and benchmarks.

The layout follows what Kineto writes (``output_json.cpp``) and what the real traces in
``tests/data/kineto/`` hold: top-level ``schemaVersion``, ``deviceProperties``,
``distributedInfo``, ``traceEvents``, ``traceName``, ``displayTimeUnit``,
``baseTimeNanoseconds``; process/thread ``M`` metadata; ``X`` events with ``cat``; GPU events
in the device pseudo-process (pid = device, tid = stream) with ``args.device``/``stream``/
``correlation``; the launching ``cuda_runtime`` call with the same ``correlation`` and an
``ac2g`` flow pair between them; a ``Trace`` span. Only the structure is copied, not content.

Times are given in integer nanoseconds and written as microseconds in one of the formats
seen in real files, always as exact decimal text:

- ``us3``: relative microseconds with three decimals (PyTorch 2.x, e.g. ``1234.567``),
- ``int``: integer microseconds (older PyTorch; every time must be a whole microsecond),
- ``str``: the ``us3`` text inside a JSON string (``"1234.567"``),
- ``float``: integer microseconds written as ``1234.0`` (seen for ``dur`` in real files).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KINETO_DATA = Path(os.environ.get("DISTPROF_KINETO_DATA", REPO_ROOT / "tests" / "data" / "kineto"))

TIME_FORMATS = ("us3", "int", "str", "float")
_NUMBER = "@num@"   # placeholder prefix: the text after it is written as a bare JSON number
_PLACEHOLDER = re.compile(r'"@num@(-?[0-9.]+)"')

NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"


def us_text(ns: int) -> str:
    """Nanoseconds as microsecond text with exactly three decimals: 1001 -> '1.001'."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


class KinetoTrace:
    """Builder of one rank's trace. Every ``*_ns`` argument is an integer nanosecond on the
    trace's own axis (what ``ts`` encodes); ``base_time_ns`` is written as baseTimeNanoseconds."""

    def __init__(self, rank: int | None = 0, world_size: int = 2, pid: int = 4242, tid: int | None = None,
                 device: int = 0, base_time_ns: int | None = 1_700_000_000_000_000_000,
                 time_format: str = "us3", backend: str = "nccl") -> None:
        if time_format not in TIME_FORMATS:
            raise ValueError(f"time_format must be one of {TIME_FORMATS}")
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.pid, self.tid, self.device = pid, pid if tid is None else tid, device
        self.base_time_ns, self.time_format = base_time_ns, time_format
        self.events: list[dict] = []
        self.extra: dict = {}
        self.distributed: dict = {}  # more distributedInfo keys (pg_config, pg_count, nccl_version)
        self._correlation = 1000
        self._external = 1
        self._threads: set[int] = {self.tid}
        self._streams: set[int] = set()

    # -- time text
    def _time(self, ns: int):
        if self.time_format == "int":
            if ns % 1000:
                raise ValueError(f"{ns} ns is not a whole microsecond (time_format 'int')")
            return ns // 1000
        if self.time_format == "float":
            if ns % 1000:
                raise ValueError(f"{ns} ns is not a whole microsecond (time_format 'float')")
            return f"{_NUMBER}{ns // 1000}.0"
        if self.time_format == "str":
            return us_text(ns)
        return f"{_NUMBER}{us_text(ns)}"

    def _complete(self, cat: str, name: str, pid: int, tid: int, start_ns: int, end_ns: int, args: dict) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                 "ts": self._time(start_ns), "dur": self._time(end_ns - start_ns), "args": args}
        self.events.append(event)
        return event

    def _next_external(self) -> int:
        self._external += 1
        return self._external

    # -- host side
    def step(self, number: int, start_ns: int, end_ns: int, tid: int | None = None) -> None:
        """A ``ProfilerStep#N`` range, as ``torch.profiler.profile.step()`` records it."""
        self.cpu_op(f"ProfilerStep#{number}", start_ns, end_ns, tid=tid, cat="user_annotation")

    def cpu_op(self, name: str, start_ns: int, end_ns: int, tid: int | None = None, cat: str = "cpu_op",
               **args) -> None:
        tid = self.tid if tid is None else tid
        self._threads.add(tid)
        self._complete(cat, name, self.pid, tid, start_ns, end_ns,
                       {"External id": self._next_external(), **args})

    def runtime(self, name: str, start_ns: int, end_ns: int, correlation: int, tid: int | None = None,
                cat: str = "cuda_runtime") -> None:
        tid = self.tid if tid is None else tid
        self._threads.add(tid)
        self._complete(cat, name, self.pid, tid, start_ns, end_ns,
                       {"External id": correlation, "cbid": 211, "correlation": correlation})

    # -- GPU side
    def kernel(self, name: str, start_ns: int, end_ns: int, stream: int, launch_ns: int | None = None,
               tid: int | None = None, cat: str = "kernel", launch_cat: str = "cuda_runtime",
               args: dict | None = None) -> int:
        """A GPU activity on ``stream``; with ``launch_ns`` also its launching runtime call (1 µs
        long, on ``tid``) and the ac2g flow pair. Returns the correlation id."""
        self._correlation += 1
        correlation = self._correlation
        self._streams.add(stream)
        if launch_ns is not None:
            launch_name = "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync"
            self.runtime(launch_name, launch_ns, launch_ns + 1000, correlation, tid=tid, cat=launch_cat)
            host_tid = self.tid if tid is None else tid
            self.events.append({"ph": "s", "id": correlation, "pid": self.pid, "tid": host_tid,
                                "ts": self._time(launch_ns), "cat": "ac2g", "name": "ac2g"})
            self.events.append({"ph": "f", "id": correlation, "pid": self.device, "tid": stream,
                                "ts": self._time(start_ns), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        kernel_args = {"External id": correlation, "queued": 0, "device": self.device, "context": 1,
                       "stream": stream, "correlation": correlation}
        if cat == "kernel":
            kernel_args.update({"registers per thread": 32, "shared memory": 0, "grid": [128, 1, 1],
                                "block": [256, 1, 1]})
        else:
            kernel_args.update({"bytes": 4096, "memory bandwidth (GB/s)": 1.5})
        kernel_args.update(args or {})
        self._complete(cat, name, self.device, stream, start_ns, end_ns, kernel_args)
        return correlation

    def memcpy(self, start_ns: int, end_ns: int, stream: int, launch_ns: int | None = None,
               name: str = "Memcpy HtoD (Pinned -> Device)") -> int:
        return self.kernel(name, start_ns, end_ns, stream, launch_ns=launch_ns, cat="gpu_memcpy")

    def memset(self, start_ns: int, end_ns: int, stream: int, launch_ns: int | None = None) -> int:
        return self.kernel("Memset (Device)", start_ns, end_ns, stream, launch_ns=launch_ns, cat="gpu_memset")

    def gpu_annotation(self, name: str, start_ns: int, end_ns: int, stream: int) -> None:
        self._streams.add(stream)
        self._complete("gpu_user_annotation", name, self.device, stream, start_ns, end_ns,
                       {"External id": self._next_external()})

    # -- output
    def document(self) -> dict:
        """The trace as the JSON object Kineto writes (number placeholders still inside)."""
        starts = [e["ts"] for e in self.events if e["ph"] == "X"]
        first = min((_ns_of(t) for t in starts), default=0)
        last = max((_ns_of(e["ts"]) + _ns_of(e["dur"]) for e in self.events if e["ph"] == "X"), default=0)
        meta = []
        for pid, label in ((self.pid, "CPU"), (self.device, f"GPU {self.device}")):
            meta += [{"name": "process_name", "ph": "M", "ts": self._time(first), "pid": pid, "tid": 0,
                      "args": {"name": "python3.11"}},
                     {"name": "process_labels", "ph": "M", "ts": self._time(first), "pid": pid, "tid": 0,
                      "args": {"labels": label}}]
        for stream in sorted(self._streams):
            meta.append({"name": "thread_name", "ph": "M", "ts": self._time(first), "pid": self.device,
                         "tid": stream, "args": {"name": f"stream {stream} "}})
        for tid in sorted(self._threads):
            meta.append({"name": "thread_name", "ph": "M", "ts": self._time(first), "pid": self.pid,
                         "tid": tid, "args": {"name": f"thread {tid} (python3.11)"}})
        span = {"ph": "X", "cat": "Trace", "ts": self._time(first), "dur": self._time(last - first),
                "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0}}
        document: dict = {"schemaVersion": 1,
                          "deviceProperties": [{"id": self.device, "name": "NVIDIA H100 80GB HBM3",
                                                "totalGlobalMem": 85_000_000_000, "computeMajor": 9,
                                                "computeMinor": 0}]}
        if self.rank is not None:
            document["distributedInfo"] = {"backend": self.backend, "rank": self.rank,
                                           "world_size": self.world_size, **self.distributed}
        document["traceEvents"] = meta + self.events + [span]
        document["traceName"] = f"rank{self.rank}.pt.trace.json"
        document["displayTimeUnit"] = "ms"
        if self.base_time_ns is not None:
            document["baseTimeNanoseconds"] = self.base_time_ns
        document.update(self.extra)
        return document

    def text(self) -> str:
        return dumps(self.document())

    def write(self, path: str | Path) -> Path:
        """Write the trace; gzip when the name ends with .gz (as the profiler's tensorboard handler does)."""
        return write_text(path, self.text())


def _ns_of(value) -> int:
    text = value[len(_NUMBER):] if isinstance(value, str) and value.startswith(_NUMBER) else str(value)
    whole, _, frac = text.partition(".")
    sign = -1 if whole.startswith("-") else 1
    return sign * (abs(int(whole)) * 1000 + int((frac + "000")[:3]))


def dumps(document: dict) -> str:
    """JSON text with the placeholder numbers written bare, digit for digit."""
    return _PLACEHOLDER.sub(r"\1", json.dumps(document, indent=None, separators=(", ", ": ")))


def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)
    return path


def overlap_trace(rank: int | None = 0, time_format: str = "us3", origin_ns: int = 0, **kwargs) -> KinetoTrace:
    """Two steps with known intervals: ns after ``origin_ns`` on the trace axis; every launch on
    the main thread except one backward kernel launched from the autograd thread (tid 777).

    step 1, CPU [1_000, 100_000):   memcpy [2_000, 4_000) on stream 7, launched at 1_000
                                    compute on stream 7: [10_000, 40_000) and [35_000, 60_000)
                                    NCCL on stream 13:  [50_000, 80_000)
    step 2, CPU [100_000, 200_000): compute on stream 7: [110_000, 150_000) (autograd thread)
                                    NCCL on stream 13:  [140_000, 170_000), and [205_000, 215_000)
                                    launched at 199_000 (inside step 2, so it extends its window)
    outside any step: compute [300_000, 310_000) launched at 250_000; NCCL [305_000, 330_000)
    launched at 251_000.

    Figures per window, worked out by hand:
      steps (the CPU ProfilerSteps, [1_000, 200_000); GPU windows [2_000, 80_000), [110_000, 215_000)):
        window 199_000; compute 50_000 + 40_000 = 90_000; comm 30_000 + 30_000 = 60_000
        (the SendRecv runs after step 2); overlap 10_000 + 10_000 = 20_000;
        busy = 90_000 + 60_000 - 20_000 = 130_000; idle 69_000
      all ([1_000, 330_000)): compute 100_000; comm 95_000; overlap 25_000;
        window 329_000; busy 170_000; idle 159_000
    """
    o = origin_ns
    trace = KinetoTrace(rank=rank, time_format=time_format, **kwargs)
    trace.step(1, o + 1_000, o + 100_000)
    trace.step(2, o + 100_000, o + 200_000)
    trace.memcpy(o + 2_000, o + 4_000, stream=7, launch_ns=o + 1_000)
    trace.cpu_op("aten::mm", o + 5_000, o + 9_000)
    trace.kernel(GEMM, o + 10_000, o + 40_000, stream=7, launch_ns=o + 6_000)
    trace.kernel(ELEMENTWISE, o + 35_000, o + 60_000, stream=7, launch_ns=o + 7_000)
    trace.cpu_op("nccl:all_reduce", o + 8_000, o + 10_000, cat="user_annotation")
    trace.kernel(NCCL_ALLREDUCE, o + 50_000, o + 80_000, stream=13, launch_ns=o + 9_000)
    trace.cpu_op("autograd::engine::evaluate_function: MmBackward0", o + 100_000, o + 103_000, tid=777)
    trace.kernel(GEMM, o + 110_000, o + 150_000, stream=7, launch_ns=o + 101_000, tid=777)
    trace.kernel(NCCL_ALLREDUCE, o + 140_000, o + 170_000, stream=13, launch_ns=o + 120_000)
    trace.kernel(NCCL_SENDRECV, o + 205_000, o + 215_000, stream=13, launch_ns=o + 199_000)
    trace.kernel(GEMM, o + 300_000, o + 310_000, stream=7, launch_ns=o + 250_000)
    trace.kernel(NCCL_ALLREDUCE, o + 305_000, o + 330_000, stream=13, launch_ns=o + 251_000)
    return trace


def synthetic_job(path: str | Path, events: int, rank: int = 0, time_format: str = "us3",
                  seed: int = 0) -> tuple[Path, int]:
    """A large realistic trace for benchmarks: DDP-like steps (forward kernels on stream 7
    launched from the main thread, backward kernels launched from the autograd thread, bucket
    allreduces on stream 13 overlapping the backward, a memcpy per step), about ``events`` trace
    events in all (each kernel brings its cpu_op, runtime call and two flow events). Returns the
    path and the number of trace events written.

    Written directly as text (no builder dicts) so that generating a million events is fast.
    """
    import random

    rng = random.Random(seed)
    pid, main_tid, autograd_tid, device = 31337, 31337, 31400, rank % 8
    fmt = _TEXT_FORMATS[time_format]
    lines: list[str] = []
    flows: list[str] = []
    correlation = 10_000
    now = 1_000_000  # ns on the trace axis
    step = 0
    kernels_per_step = 100
    buckets = kernels_per_step // 2 // 10
    # per kernel: op, runtime, kernel, 2 flows; per bucket: annotation, runtime, NCCL; per step: 3
    per_step = kernels_per_step * 5 + buckets * 3 + 3
    steps = max(1, events // per_step)

    def x(cat, name, p, t, start, end, args):
        lines.append(f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {p}, "tid": {t}, '
                     f'"ts": {fmt(start)}, "dur": {fmt(end - start)}, "args": {{{args}}}}}')

    for step in range(steps):
        step_start = now
        gpu_free = {7: now + 20_000, 13: now}
        x("user_annotation", f"ProfilerStep#{step}", pid, main_tid, step_start, step_start + 1, "")
        step_line = len(lines) - 1
        correlation += 1  # the batch goes to the GPU first
        x("cuda_runtime", "cudaMemcpyAsync", pid, main_tid, now + 1_000, now + 4_000,
          f'"External id": {correlation}, "cbid": 41, "correlation": {correlation}')
        x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", device, 7, now + 2_000, now + 12_000,
          f'"External id": {correlation}, "device": {device}, "context": 1, "stream": 7, '
          f'"correlation": {correlation}, "bytes": 1048576, "memory bandwidth (GB/s)": 104.8576')
        cpu = now + 5_000
        for k in range(kernels_per_step):
            backward = k >= kernels_per_step // 2
            tid = autograd_tid if backward else main_tid
            op_len = rng.randrange(8_000, 20_000)
            x("cpu_op", "aten::addmm" if k % 3 else "aten::relu", pid, tid, cpu, cpu + op_len,
              f'"External id": {correlation}, "Sequence number": {k}')
            launch = cpu + op_len // 2
            correlation += 1
            x("cuda_runtime", "cudaLaunchKernel", pid, tid, launch, launch + 4_000,
              f'"External id": {correlation}, "cbid": 211, "correlation": {correlation}')
            start = max(launch + 6_000, gpu_free[7])
            end = start + rng.randrange(15_000, 40_000)
            gpu_free[7] = end
            x("kernel", GEMM if k % 3 else ELEMENTWISE, device, 7, start, end,
              f'"External id": {correlation}, "queued": 0, "device": {device}, "context": 1, "stream": 7, '
              f'"correlation": {correlation}, "registers per thread": 32, "grid": [128, 1, 1], "block": [256, 1, 1]')
            flows.append(f'{{"ph": "s", "id": {correlation}, "pid": {pid}, "tid": {tid}, "ts": {fmt(launch)}, '
                         f'"cat": "ac2g", "name": "ac2g"}}')
            flows.append(f'{{"ph": "f", "id": {correlation}, "pid": {device}, "tid": 7, "ts": {fmt(start)}, '
                         f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
            if backward and k % 10 == 9:  # a gradient bucket is ready: allreduce it on stream 13
                correlation += 1
                x("user_annotation", "nccl:all_reduce", pid, tid, launch + 4_000, launch + 9_000, "")
                x("cuda_runtime", "cudaLaunchKernel", pid, tid, launch + 5_000, launch + 8_000,
                  f'"External id": {correlation}, "cbid": 211, "correlation": {correlation}')
                c_start = max(end, gpu_free[13])  # waits for the bucket's gradients
                c_end = c_start + rng.randrange(60_000, 160_000)
                gpu_free[13] = c_end
                x("kernel", NCCL_ALLREDUCE, device, 13, c_start, c_end,
                  f'"External id": {correlation}, "queued": 0, "device": {device}, "context": 1, '
                  f'"stream": 13, "correlation": {correlation}, "Collective name": "allreduce", '
                  f'"In msg nelems": 6553600, "Out msg nelems": 6553600, "Group size": 8, "dtype": "Float"')
            cpu += op_len + rng.randrange(1_000, 3_000)
        now = max(cpu, gpu_free[7], gpu_free[13]) + 10_000
        lines[step_line] = lines[step_line].replace(f'"dur": {fmt(1)}', f'"dur": {fmt(now - step_start)}', 1)
    # the stub step that torch.profiler records when the schedule ends: no GPU work in it
    x("user_annotation", f"ProfilerStep#{step + 1}", pid, main_tid, now, now + 50_000, "")
    return _write_job(path, lines + flows, pid, device, rank, fmt)


def _write_job(path: str | Path, body: list[str], pid: int, device: int, rank: int, fmt) -> tuple[Path, int]:
    """synthetic_job's file: the header, two process names, the events, the trailer."""
    head = (f'{{"schemaVersion": 1, "deviceProperties": [{{"id": {device}, "name": "NVIDIA H100 80GB HBM3"}}], '
            f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 8}}, "traceEvents": [\n')
    meta = [f'{{"name": "process_name", "ph": "M", "ts": {fmt(1_000_000)}, "pid": {p}, "tid": 0, '
            f'"args": {{"name": "python3.11"}}}}' for p in (pid, device)]
    tail = (f'\n], "traceName": "rank{rank}.pt.trace.json", "displayTimeUnit": "ms", '
            '"baseTimeNanoseconds": 1700000000000000000}\n')
    return write_text(path, head + ",\n".join(meta + body) + tail), len(meta) + len(body)


_TEXT_FORMATS = {
    "us3": us_text,
    "int": lambda ns: str(ns // 1000),
    "float": lambda ns: f"{ns // 1000}.0",
    "str": lambda ns: f'"{us_text(ns)}"',
}


# ---------------------------------------------------------------------------- collective jobs

# per kind: record_param_comms "Collective name" (as ProcessGroupNCCL writes it), the nccl:* range,
# the NCCL kernel
_COLLECTIVE_TEXT = {
    "allreduce": ("allreduce", "nccl:all_reduce",
                  "ncclDevKernel_AllReduce_Sum_{t}_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "allgather": ("_allgather_base", "nccl:_all_gather_base",
                  "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "reduce_scatter": ("_reduce_scatter_base", "nccl:_reduce_scatter_base",
                       "ncclDevKernel_ReduceScatter_Sum_{t}_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "alltoall": ("all_to_all", "nccl:all_to_all", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
    "broadcast": ("broadcast", "nccl:broadcast", "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "reduce": ("reduce", "nccl:reduce", "ncclDevKernel_Reduce_Sum_{t}_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "barrier": ("barrier", "nccl:all_reduce_barrier",
                "ncclDevKernel_AllReduce_Sum_u8_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "send": ("send", "nccl:send", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
    "recv": ("recv", "nccl:recv", "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
}
_KERNEL_TYPE = {"Float": "f32", "Half": "f16", "BFloat16": "bf16", "Double": "f64", "Long": "i64", "Int": "i32"}
COMPUTE_STREAM = 7
COMM_STREAM = 20  # + the group's index in the rank's pg_config: one NCCL stream per communicator


@dataclass(frozen=True)
class CommOp:
    """One collective on one rank. ``nelems`` is record_param_comms' "In msg nelems" (the input);
    "Out msg nelems" is nelems x group size for allgather, nelems / group size for reduce_scatter,
    else nelems, so the message size S of nccl-tests is max(in, out) x dtype size. ``start_us`` /
    ``dur_us``: the NCCL kernel on the trace axis (µs, any float with <= 3 decimals)."""

    kind: str
    group: str
    ranks: tuple[int, ...]
    nelems: int
    dtype: str = "Float"
    start_us: float = 0.0
    dur_us: float = 100.0
    out_nelems: int | None = None  # an all-to-all's output, when uneven splits make it differ from the input
    in_splits: tuple[int, ...] = ()  # "In split size" / "Out split size": rows to / from each group rank
    out_splits: tuple[int, ...] = ()

    def in_out(self) -> tuple[int, int]:
        size = len(self.ranks)
        if self.out_nelems is not None:
            return self.nelems, self.out_nelems
        if self.kind == "allgather":
            return self.nelems, self.nelems * size
        if self.kind == "reduce_scatter":
            return self.nelems, self.nelems // size
        return self.nelems, self.nelems


def _ns(us: float) -> int:
    return round(us * 1000)


def _group_order(ops_by_rank: dict[int, list[CommOp]], world: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every process group of the job in creation order: the world ("0") first, then by name."""
    groups = {"0": tuple(range(world))}
    for ops in ops_by_rank.values():
        for op in ops:
            if groups.setdefault(op.group, tuple(op.ranks)) != tuple(op.ranks):
                raise ValueError(f"group {op.group!r} given with two rank lists")
    key = (lambda name: (0, int(name), "") if name.isdigit() else (1, 0, name))
    return sorted(groups.items(), key=lambda item: key(item[0]))


def collective_job(folder: str | Path, ops_by_rank: dict[int, list[CommOp]], world_size: int | None = None,
                   step_us: float | None = None, suffix: str = ".json") -> list[Path]:
    """Write one Kineto trace per rank (``rank<N>.pt.trace<suffix>``) of an NCCL job with known
    collectives, as PyTorch 2.x writes them: distributedInfo with pg_config (the rank's groups
    in creation order), ProfilerStep#N ranges (consecutive windows of ``step_us`` from 0 covering
    every op; one step when None), and per op, relative to its kernel start S (µs):

      aten::mm [S-40, S-36) on the main thread launching a GEMM on stream 7 at [S-25, S-5),
      record_param_comms [S-13, S-6) > nccl:<op> [S-12, S-7) > cudaLaunchKernel [S-10, S-9),
      the NCCL kernel [S, S + dur) on stream 20 + the group's index in pg_config, the collective
      args (Collective name, In/Out msg nelems, Group size, dtype, Process Group Name/Ranks) on
      both record_param_comms and the kernel.

    Ops of one rank must start at least 45 µs apart (their host ranges must not cross). All
    ranks share baseTimeNanoseconds (one clock); a late rank is simply one whose starts are later.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    world = world_size or 1 + max([rank for rank in ops_by_rank] + [r for ops in ops_by_rank.values()
                                                                    for op in ops for r in op.ranks])
    groups = _group_order(ops_by_rank, world)
    end = max([op.start_us + op.dur_us for ops in ops_by_rank.values() for op in ops] + [1.0])
    paths = []
    for rank in range(world):
        trace = KinetoTrace(rank=rank, world_size=world, pid=5000 + rank, device=rank % 8, time_format="us3")
        mine = [(name, ranks) for name, ranks in groups if rank in ranks]
        trace.distributed = {"pg_count": len(groups), "nccl_version": "2.21.5", "pg_config": [
            {"pg_name": name, "pg_desc": "default_pg" if name == "0" else "undefined",
             "backend_config": "cuda:nccl", "pg_size": len(ranks), "ranks": list(ranks)} for name, ranks in mine]}
        width = step_us or end + 100.0
        for number in range(int(end // width) + 1):
            trace.step(number, _ns(number * width), _ns((number + 1) * width))
        stream_of = {name: COMM_STREAM + index for index, (name, _) in enumerate(mine)}
        ops = sorted(ops_by_rank.get(rank, []), key=lambda op: op.start_us)
        for before, after in zip(ops, ops[1:]):
            if after.start_us - before.start_us < 45:
                raise ValueError(f"rank {rank}: ops at {before.start_us} and {after.start_us} µs are under 45 µs apart")
        for op in ops:
            if op.group not in stream_of:
                raise ValueError(f"rank {rank} runs an op of group {op.group!r} without being in it")
            _write_op(trace, op, stream_of[op.group])
        paths.append(trace.write(folder / f"rank{rank}.pt.trace{suffix}"))
    return paths


def _write_op(trace: KinetoTrace, op: CommOp, stream: int) -> None:
    """The host ranges, launches and kernels of one collective (see collective_job)."""
    s = _ns(op.start_us)
    trace.cpu_op("aten::mm", s - 40_000, s - 36_000)
    trace.kernel(GEMM, s - 25_000, s - 5_000, stream=COMPUTE_STREAM, launch_ns=s - 39_000)
    name, annotation, kernel = _COLLECTIVE_TEXT[op.kind]
    in_nelems, out_nelems = op.in_out()
    if op.in_splits:  # ProcessGroupNCCL names an all-to-all with split sizes all_to_allv
        name = "all_to_allv"
    args = {"Collective name": name, "In msg nelems": in_nelems, "Out msg nelems": out_nelems,
            "Group size": len(op.ranks), "dtype": op.dtype, "In split size": json.dumps(list(op.in_splits)),
            "Out split size": json.dumps(list(op.out_splits)),
            "Process Group Name": op.group, "Process Group Description": "default_pg" if op.group == "0"
            else "undefined", "Process Group Ranks": json.dumps(list(op.ranks))}
    trace.cpu_op("record_param_comms", s - 13_000, s - 6_000, **args)
    trace.cpu_op(annotation, s - 12_000, s - 7_000, cat="user_annotation")
    trace.kernel(kernel.format(t=_KERNEL_TYPE.get(op.dtype, "u8")), s, s + _ns(op.dur_us), stream=stream,
                 launch_ns=s - 10_000, args=args)


def tp_dp_ops(steps: int = 2, late_rank: int | None = None, late_us: float = 0.0, step_us: float = 1000.0,
              nelems: int = 1 << 20) -> dict[int, list[CommOp]]:
    """A 4-rank job with tensor parallelism in {0,1} ("1") and {2,3} ("2") and data parallelism in
    {0,2} ("3") and {1,3} ("4"): per step a TP allreduce (nelems floats) at 100 µs, a TP allgather
    (nelems / 4 bf16 per rank) at 300 µs and a DP reduce_scatter (nelems floats in) at 500 µs, each
    100 µs long; ``late_rank`` starts every op ``late_us`` later."""
    tp = {0: ("1", (0, 1)), 1: ("1", (0, 1)), 2: ("2", (2, 3)), 3: ("2", (2, 3))}
    dp = {0: ("3", (0, 2)), 2: ("3", (0, 2)), 1: ("4", (1, 3)), 3: ("4", (1, 3))}
    ops: dict[int, list[CommOp]] = {}
    for rank in range(4):
        shift = late_us if rank == late_rank else 0.0
        ops[rank] = [op for step in range(steps) for op in (
            CommOp("allreduce", *tp[rank], nelems, "Float", step * step_us + 100 + shift, 100),
            CommOp("allgather", *tp[rank], nelems // 4, "BFloat16", step * step_us + 300 + shift, 100),
            CommOp("reduce_scatter", *dp[rank], nelems, "Float", step * step_us + 500 + shift, 100))]
    return ops


def one_group_job(folder: str | Path, group: str) -> list[Path]:
    """Two ranks, three allreduces of 1 KiB in a process group named ``group`` (a name a hostile trace may
    carry: control bytes, a spreadsheet formula)."""
    ops = {r: [CommOp("allreduce", group, (0, 1), 1024, start_us=100.0 + 300 * k) for k in range(3)] for r in (0, 1)}
    return collective_job(folder, ops, world_size=2)
