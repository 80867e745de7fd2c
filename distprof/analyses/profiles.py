"""Per-rank profiles next to the Distributed Summary: FLOPs (achieved TFLOPS, MFU) and memory
(allocated / reserved peaks per device and step), and across ranks the spread, the slowest rank,
memory creep and a rank whose peak stands out.

FLOPs of an operator: Kineto's ``flops`` arg where present (``with_flops`` of older PyTorch),
else from record_shapes' Input Dims for GEMM and convolution ops (2 x multiply-adds):

=======================  ===============================  =============================
op                       Input Dims                       FLOPs
=======================  ===============================  =============================
aten::mm                 [M,K], [K,N]                     2·M·K·N
aten::addmm              bias, [M,K], [K,N]               2·M·K·N
aten::bmm                [B,M,K], [B,K,N]                 2·B·M·K·N
aten::baddbmm            bias, [B,M,K], [B,K,N]           2·B·M·K·N
aten::linear             [...,K], [N,K]                   2·Π(...)·K·N
aten::conv*/convolution  [N,C,...], [O,C/g,k...] and      2·N·O·Π(out)·(C/g)·Π(k)
                         stride/padding/dilation          (out from the concrete inputs)
=======================  ===============================  =============================

Each GEMM is counted once: an op with FLOPs under another op with FLOPs (``aten::linear`` →
``aten::addmm``) counts, its ancestors do not (the innermost op). GEMM/conv ops without usable
shapes are counted in ``flops_uncounted``. Steps and phases of an op: the ProfileStep holding its
start, the innermost phase range around it on its thread; an op outside every phase range of its
thread but inside a backward range of another thread of its process is backward (autograd's device
threads run a GPU model's backward while the training thread waits under ``## backward ##``).

Memory: Kineto's ``[memory]`` samples (``profile_memory=True``): ``Total Allocated`` /
``Total Reserved`` per (Device Type, Device Id) after each allocation; peaks are the largest
samples whose time lies in the window; per step the largest in that step; growth per step is the
least-squares slope of the per-step peaks. The rank's headline device is its GPU with the
largest peak, else the CPU.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
from msgspec.structs import replace

from .. import events as ev
from ..columns import Groups, unique_rows
from ..flop_ops import CONV, GEMM_OPERANDS, shape_args_needed
from ..joins import innermost_enclosing
from ..rankview import RankView
from ..results import RankProfile
from ..sections.findings import Observed
from ..sections.profiles import FlopsUncounted, MemoryDevice, ModelProfile, Profiles, ProfileSpread
from ..sections.tables import OperatorTable
from . import intervals as iv
from . import operators as ops_mod
from .summaries import MAX_STEPS, model_row, rows_in_window

_FLOP_OPS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|linear|matmul|_?convolution|conv[123]d|cudnn_convolution"
                       r"|mkldnn_convolution|conv_transpose[123]d)$")
_PHASE_KEYS = {"Forward": "forward", "Backward": "backward", "Optimization": "optimizer", "Dataloader": "dataloader"}
# the phase keys of FLOPs by phase, sorted: an operator's phase is its index here (-1: none)
_PHASES = ("backward", "dataloader", "forward", "optimizer", "other")
_BACKWARD = _PHASES.index("backward")
_DEVICE_TYPES = {0: "CPU", 1: "GPU"}   # c10::DeviceType: CPU 0, CUDA 1


def _prod(values) -> int:
    return int(math.prod(int(v) for v in values))


def _gemm_flops(name: str, dims) -> int | None:
    """FLOPs of a GEMM from its Input Dims (None when the shapes do not fit)."""
    try:
        if name == "aten::linear":
            x, w = dims[0], dims[1]
            return 2 * _prod(x[:-1]) * int(x[-1]) * int(w[0]) if len(w) == 2 and x and x[-1] == w[1] else None
        a, b = (dims[i] for i in GEMM_OPERANDS[name])
        if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            return 2 * int(a[0]) * int(a[1]) * int(b[1])
        if len(a) == 3 and len(b) == 3 and a[2] == b[1]:
            return 2 * int(a[0]) * int(a[1]) * int(a[2]) * int(b[2])
    except (IndexError, TypeError, ValueError, KeyError):
        return None
    return None


def _concrete_list(value, size: int) -> list[int] | None:
    """A stride/padding/dilation argument as ``size`` ints ('[1, 1]', '1', 1)."""
    try:
        value = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    if isinstance(value, int):
        return [value] * size
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return value * size if len(value) == 1 else value if len(value) == size else None
    return None


def _conv_flops(name: str, dims, concrete) -> int | None:
    """FLOPs of a (not transposed) convolution from Input Dims and the concrete stride/padding/dilation."""
    try:
        x, w = dims[0], dims[1]
        spatial = len(x) - 2
        if spatial < 1 or len(w) != len(x) or not concrete:
            return None
        stride, padding, dilation = (_concrete_list(concrete[i], spatial) for i in (3, 4, 5))
        if name in ("aten::convolution", "aten::_convolution") and str(concrete[6]).lower() not in ("false", "0"):
            return None  # transposed
        if None in (stride, padding, dilation):
            return None
        out = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
        return 2 * int(x[0]) * int(w[0]) * _prod(out) * int(w[1]) * _prod(w[2:])
    except (IndexError, TypeError, ValueError):
        return None


def shape_flops(name: str, dims, concrete) -> int | None:
    """FLOPs of one GEMM/conv op from its recorded shapes; None when not a GEMM/conv op or not known."""
    if not isinstance(dims, list):
        return None
    if name in GEMM_OPERANDS or name == "aten::linear":
        return _gemm_flops(name, dims)
    if CONV.match(name):
        return _conv_flops(name, dims, concrete)
    return None


def _shape_flops(ops: ev.Table, input_dims: list, concrete_inputs: list) -> np.ndarray:
    """Per operator, the FLOPs of its recorded shapes (0: none), computed once per distinct (name,
    shapes) and only among the GEMM/conv ops that have shapes."""
    names, dims = ops.name, np.asarray(ops.dims, np.int64)
    shape = np.zeros(dims.size, np.int64)
    formula, _ = shape_args_needed(names.texts)
    rows = np.flatnonzero(formula[names.codes] & (dims >= 0)) if dims.size else dims[:0]
    if not rows.size:
        return shape
    keys = np.stack([names.codes[rows].astype(np.int64), dims[rows], np.asarray(ops.concrete, np.int64)[rows]],
                    axis=1)
    distinct, key_of, _ = unique_rows(keys)
    per_key = []
    for code, dim, concrete in distinct.tolist():  # per distinct (name, shapes), not per event
        value = shape_flops(str(names.texts[code]), input_dims[dim],
                            concrete_inputs[concrete] if concrete >= 0 else None)
        per_key.append(-1 if value is None else value)
    shape[rows] = np.maximum(np.asarray(per_key, np.int64)[np.asarray(key_of).ravel()], 0)
    return shape


def op_flops(tree: ops_mod.OperatorTree, input_dims: list,
             concrete_inputs: list) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Per operator: FLOPs counted (innermost op with FLOPs only), a mask of the FLOP ops whose
    shapes were not usable, and where the FLOPs came from ("args", "shapes", "args+shapes")."""
    ops = tree.ops
    names = ops.name
    arg = np.asarray(ops.flops, np.float64)
    from_args = np.isfinite(arg) & (arg > 0)
    flops = np.where(from_args, np.nan_to_num(arg), _shape_flops(ops, input_dims, concrete_inputs)).astype(np.int64)
    has = flops > 0
    flop_op = names.where(lambda name: _FLOP_OPS.match(str(name)))
    if not has.any():  # no FLOPs at all: nothing to count up the tree, every GEMM/conv op is uncounted
        return np.zeros(flops.size, np.int64), flop_op, None
    below = ops_mod.up_the_tree(has.astype(np.int64), tree.parent, tree.depth) - has  # descendants with FLOPs
    counted = np.where(has & (below == 0), flops, 0)
    uncounted = flop_op & ~has & (below == 0)
    used = {"args" if (from_args & (counted > 0)).any() else "", "shapes" if (~from_args & (counted > 0)).any() else ""}
    source = "+".join(sorted(u for u in used if u)) or None
    return counted, uncounted, source


def _step_and_phase(view: RankView, tree: ops_mod.OperatorTree) -> tuple[np.ndarray, np.ndarray]:
    """Per operator: the ProfileStep index holding its start (-1) and its Model Summary phase as an
    index into _PHASES (-1: none; codes, not texts: FLOPs by phase then groups integers)."""
    ops = tree.ops
    start, end = ops.start_ns, ops.end_ns
    events = view.events
    is_range = events.kind.eq(ev.RANGE)
    is_step = view.steps
    ev_start, ev_end = events.start_ns, events.end_ns
    step_starts, step_ends = ev_start[is_step], ev_end[is_step]
    found = innermost_enclosing(np.zeros(step_starts.size, np.int64), step_starts, step_ends,
                                np.zeros(start.size, np.int64), start, start)
    step = np.where(found >= 0, events.step[is_step][np.maximum(found, 0)], -1) if step_starts.size \
        else np.full(start.size, -1)
    phase_mask = is_range & events.category.eq(ev.PHASE) & ~is_step
    phase = np.full(start.size, -1, np.int8)
    if phase_mask.any():
        pid, lane = events.pid, events.lane
        thread_ops, thread_phase = ops_mod.thread_keys((ops.pid, ops.lane), (pid[phase_mask], lane[phase_mask]))
        at = innermost_enclosing(thread_phase, ev_start[phase_mask], ev_end[phase_mask], thread_ops, start, end)
        key = events.name.take(phase_mask).mapped(
            lambda n: _PHASES.index(_PHASE_KEYS.get(model_row(str(n)) or "", "other")), np.int8)
        phase[at >= 0] = key[at[at >= 0]]
        _backward_of_other_threads(phase, ops, events, np.flatnonzero(phase_mask)[key == _BACKWARD])
    return step, phase


def _backward_of_other_threads(phase: np.ndarray, ops: ev.Table, events: ev.Events, backward: np.ndarray) -> None:
    """Ops outside every phase range of their own thread that run inside a backward range of
    another thread of their process are backward (``phase`` is set in place). Autograd runs a
    GPU model's backward ops on its device threads while the training thread waits in
    ``loss.backward()`` under ``## backward ##``: on an 8-rank DLRM trace that is 2/3 of the step's
    GEMM FLOPs, which their own thread alone leaves in no phase (backward FLOPs 0)."""
    loose = np.flatnonzero(phase < 0)
    if not loose.size or not backward.size:
        return
    pid = np.concatenate([np.asarray(events.pid[backward], np.int64), np.asarray(ops.pid[loose], np.int64)])
    _, code = np.unique(pid, return_inverse=True)   # one key per process: the ranges of any thread
    code = code.ravel().astype(np.int64)
    at = innermost_enclosing(code[:backward.size], events.start_ns[backward], events.end_ns[backward],
                             code[backward.size:], ops.start_ns[loose], ops.end_ns[loose])
    phase[loose[at >= 0]] = _BACKWARD


def _counts_by_name(names: ev.Texts, limit: int) -> dict:
    """{name: rows} of the ``limit`` most frequent names, most first (ties: first seen first)."""
    counts = np.bincount(names.codes, minlength=names.texts.size)
    seen = np.flatnonzero(counts)
    first = np.full(names.texts.size, names.codes.size, np.int64)
    np.minimum.at(first, names.codes, np.arange(names.codes.size))
    order = seen[np.lexsort((first[seen], -counts[seen]))][:limit]
    return {str(names.texts[code]): int(counts[code]) for code in order.tolist()}


def flops_figures(view: RankView, tree: ops_mod.OperatorTree, in_window: np.ndarray,
                  peak_tflops: float | None) -> RankProfile:
    """The rank's profile with its FLOPs figures over its view's window (all None when no operator has
    FLOPs), its memory not yet measured (memory_figures)."""
    counted, uncounted, source = op_flops(tree, tree.input_dims, tree.concrete_inputs)
    missing = uncounted & in_window
    uncounted_ops = FlopsUncounted(ops=int(missing.sum()),
                                   by_name=_counts_by_name(tree.ops.name.take(missing), 20))
    if not (counted[in_window] > 0).any():
        return RankProfile(flops_source=source, flops_uncounted=uncounted_ops)
    step, phase = _step_and_phase(view, tree)
    total = int(counted[in_window].sum())
    window_ns = iv.total(view.window)
    in_step = step >= 0
    step_values, step_of = np.unique(step[in_step], return_inverse=True)
    per_step = np.zeros(step_values.size, np.int64)
    np.add.at(per_step, np.asarray(step_of).ravel(), counted[in_step])
    achieved = total / window_ns / 1e3 if window_ns else None   # FLOP/ns = GFLOP/s
    by_phase = None
    if (phase >= 0).any() and per_step.size:
        by_phase = _median_by_phase(np.asarray(step_of).ravel(), step_values.size, phase[in_step], counted[in_step])
    return RankProfile(flops_source=source, flops_uncounted=uncounted_ops,
                       flops_per_step=int(round(np.median(per_step))) if per_step.size else None,
                       flops_total=total, achieved_tflops=achieved,
                       mfu=achieved / peak_tflops if achieved is not None and peak_tflops else None,
                       flops_by_phase=by_phase)


def _median_by_phase(step_of: np.ndarray, steps: int, phase: np.ndarray, flops: np.ndarray) -> dict:
    """Per phase that an operator ran in (sorted), the median over all steps of the FLOPs summed in
    that step and phase (0 in a step without that phase). Only the ops with FLOPs are added up."""
    named = phase >= 0
    present = np.flatnonzero(np.bincount(phase[named], minlength=len(_PHASES)))
    adds = named & (flops != 0)
    table = np.zeros((steps, len(_PHASES)), np.int64)
    np.add.at(table, (step_of[adds], phase[adds]), flops[adds])
    return {_PHASES[k]: int(round(np.median(table[:, k]))) for k in present.tolist()}


def _device_label(device_type: int, device_id: int) -> str:
    kind = _DEVICE_TYPES.get(int(device_type), f"device type {int(device_type)}")
    return kind if kind == "CPU" else f"{kind}{max(int(device_id), 0)}"


def memory_figures(view: RankView, memory: ev.Table | None) -> list[MemoryDevice]:
    """Peaks of allocated / reserved bytes per device, per step, and their growth per step (samples
    in the view's window, steps from its ProfileStep rows); none without samples there."""
    if memory is None or not len(memory):
        return []
    samples = memory.take(rows_in_window(memory.time_ns, view.window))
    if not len(samples):
        return []
    events, steps = view.events, np.flatnonzero(view.steps)  # by start
    starts, ends = events.start_ns[steps], events.end_ns[steps]
    time_ns = samples.time_ns
    at = np.searchsorted(starts, time_ns, side="right") - 1
    ok = (at >= 0) & (time_ns < ends[np.maximum(at, 0)]) if starts.size else np.zeros(time_ns.size, bool)
    step = np.where(ok, events.step[steps][np.maximum(at, 0)], -1) if starts.size else np.full(time_ns.size, -1)
    pairs, pair_of, _ = unique_rows(np.stack([samples.device_type, samples.device_id], axis=1))
    return [_device_memory(samples.take(rows), step[rows], *pair)  # per device
            for pair, rows in zip(pairs.tolist(), Groups.of(pair_of, len(pairs)).members())]


def with_memory(profile: RankProfile, devices: list[MemoryDevice]) -> RankProfile:
    """``profile`` with the memory of ``devices``: its headline figures those of the GPU with the largest
    peak, else of the CPU."""
    if not devices:
        return profile
    main = max([d for d in devices if d.device != "CPU"] or devices, key=lambda d: d.peak_allocated_bytes)
    return replace(profile, memory_peak_allocated_bytes=main.peak_allocated_bytes,
                   memory_peak_reserved_bytes=main.peak_reserved_bytes,
                   memory_growth_per_step_bytes=main.growth_per_step_bytes, memory_device=main.device,
                   memory_devices=devices)


def _device_memory(samples: ev.Table, step: np.ndarray, device_type: int, device_id: int) -> MemoryDevice:
    """One device's peaks: overall, per step (the first MAX_STEPS steps) and the growth per step."""
    in_step = step >= 0
    steps, step_of = np.unique(step[in_step], return_inverse=True)
    allocated, reserved = (np.full(steps.size, np.iinfo(np.int64).min) for _ in range(2))
    np.maximum.at(allocated, step_of.ravel(), samples.allocated[in_step])
    np.maximum.at(reserved, step_of.ravel(), samples.reserved[in_step])
    growth = float(np.polyfit(steps.astype(np.float64), allocated.astype(np.float64), 1)[0]) \
        if steps.size >= 2 else None
    return MemoryDevice(device=_device_label(device_type, device_id),
                        peak_allocated_bytes=int(samples.allocated.max()),
                        peak_reserved_bytes=int(samples.reserved.max()), steps=steps.tolist()[:MAX_STEPS],
                        step_peak_allocated_bytes=allocated.tolist()[:MAX_STEPS],
                        step_peak_reserved_bytes=reserved.tolist()[:MAX_STEPS], growth_per_step_bytes=growth)


def rank_profile(view: RankView, config: dict,
                 profiles: dict | None = None) -> tuple[RankProfile, OperatorTable]:
    """The rank's FLOPs and memory profile and its Operator Summary table (``profiles``: the
    trace's side tables, RankTrace.profiles)."""
    profiles = profiles or {}
    tree = ops_mod.prepared(view.events, profiles, lambda names: shape_args_needed(names)[0])
    in_window = rows_in_window(tree.ops.start_ns, view.window)
    table = ops_mod.operator_table(view, tree, in_window)
    peak = (config.get("hardware") or {}).get("peak_tflops")
    return with_memory(flops_figures(view, tree, in_window, peak), memory_figures(view, profiles.get("memory"))), table


def _spread(values: dict[int, float]) -> ProfileSpread | None:
    """min / median / max across ranks, max/min, and the argmin / argmax rank (the lowest rank on a
    tie); NaN figures are not known."""
    ranks = sorted(r for r, v in values.items() if v == v)
    if not ranks:
        return None
    series = np.array([values[r] for r in ranks], np.float64)
    low, high = float(series.min()), float(series.max())
    return ProfileSpread(min=low, median=float(np.median(series)), max=high, max_over_min=high / low if low else None,
                         min_rank=int(ranks[int(np.argmin(series))]), max_rank=int(ranks[int(np.argmax(series))]))


def across_ranks(results: list) -> Profiles:
    """summary.json ``profiles``: the spread of achieved TFLOPS (the slowest rank runs the fewest
    FLOPS), of FLOPs per step (unequal work) and of peak allocated memory."""
    tflops = {r.rank: r.profile.achieved_tflops for r in results if r.profile.achieved_tflops is not None}
    work = {r.rank: r.profile.flops_per_step for r in results if r.profile.flops_per_step is not None}
    peaks = {r.rank: r.profile.memory_peak_allocated_bytes for r in results
             if r.profile.memory_peak_allocated_bytes is not None}
    spread = _spread(tflops)
    return Profiles(achieved_tflops=spread, slowest_rank=spread.min_rank if spread else None,
                    flops_per_step=_spread(work), memory_peak_allocated_bytes=_spread(peaks))


def _memory_finding(name: str, ranks: list[int], **evidence) -> Observed:
    """Memory is not time: no figure in ns and no predicted saving (analyses/cost.py says why);
    reports/findings.py words it."""
    return Observed.of(name, 0, ranks, **evidence)


def memory_findings(results: list, config: dict) -> list[Observed]:
    """Memory creep (per-step peaks that grow every step, by more than ``diagnosis.memory_creep_share``
    of the first step's over the steps) and a rank whose peak stands out (above the median of the
    ranks by more than ``diagnosis.memory_outlier_share``)."""
    diagnosis = config.get("diagnosis") or {}
    creep_share, outlier_share = diagnosis.get("memory_creep_share", 0.01), diagnosis.get("memory_outlier_share", 0.2)
    out, creeping = [], {}
    for result in results:  # one iteration per rank
        for device in result.profile.memory_devices:
            peaks = np.asarray(device.step_peak_allocated_bytes, np.float64)
            if peaks.size >= 3 and (np.diff(peaks) > 0).all() and peaks[-1] - peaks[0] > creep_share * peaks[0]:
                creeping[(result.rank, device.device)] = (device.growth_per_step_bytes, peaks)
    if creeping:
        (rank, device), (growth, peaks) = max(creeping.items(), key=lambda item: item[1][0])
        out.append(_memory_finding("memory_creep", sorted({r for r, _ in creeping}), ranks_total=len(results),
                                   worst_rank=rank, device=device, growth_per_step_bytes=growth,
                                   first_peak_bytes=float(peaks[0]), last_peak_bytes=float(peaks[-1]),
                                   steps=int(peaks.size)))
    peaks = {r.rank: r.profile.memory_peak_allocated_bytes for r in results
             if r.profile.memory_peak_allocated_bytes}
    if len(peaks) >= 2:
        median = float(np.median(list(peaks.values())))
        high = {r: p for r, p in peaks.items() if p > (1 + outlier_share) * median}
        if high:
            out.append(_memory_finding("memory_imbalance", sorted(high), worst_rank=max(high, key=high.get),
                                       peak_by_rank={str(r): int(p) for r, p in peaks.items()}, median_bytes=median))
    return out


def model_profile(results: list) -> ModelProfile | None:
    """summary.json ``model_profile``: each rank's live FLOPs profile (distprof.torch.instrument
    with flops=True, carried in the rank file's metadata) in rank order; None when no rank has one."""
    ranks = [{**r.meta["model_profile"], "rank": r.rank} for r in results if r.meta.get("model_profile")]
    return ModelProfile.from_json({"ranks": ranks}, "$.model_profile") if ranks else None
