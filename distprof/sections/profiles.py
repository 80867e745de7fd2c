"""summary.json ``profiles`` (the FLOPS and memory spread across ranks), ``model_profile`` (the live
FLOPs profile of distprof.torch.instrument(flops=True)) and the profile parts of a rank row
(``ranks[].memory_devices[]``, ``ranks[].flops_uncounted``): analyses.profiles, distprof.torch."""

from __future__ import annotations

import msgspec

from ..typed import Record


class MemoryDevice(Record):
    """One device's memory peaks in a rank's window (ranks[].memory_devices[]), from Kineto's
    ``[memory]`` samples."""

    device: str                    # "GPU0", "CPU"
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    steps: list[int]               # ProfileStep indices with samples (the first summaries.MAX_STEPS)
    step_peak_allocated_bytes: list[int]  # per step in ``steps``
    step_peak_reserved_bytes: list[int]
    growth_per_step_bytes: float | None   # least-squares slope of the per-step peaks; None under 2 steps


class FlopsUncounted(Record):
    """GEMM/convolution operators in a rank's window whose FLOPs could not be counted (no usable
    shapes or flops arg): ranks[].flops_uncounted."""

    ops: int = 0
    by_name: dict[str, int] = msgspec.field(default_factory=dict)  # operator name -> count, the 20 most frequent


class ProfileSpread(Record):
    """A profile figure across the ranks that have it (values as floats)."""

    min: float
    median: float
    max: float
    max_over_min: float | None     # None when min is 0
    min_rank: int                  # the lowest rank on a tie
    max_rank: int


class Profiles(Record):
    """summary.json ``profiles``: achieved TFLOPS (the slowest rank runs the fewest), FLOPs per step
    (unequal work) and peak allocated memory across ranks; None where no rank has the figure."""

    achieved_tflops: ProfileSpread | None = None
    slowest_rank: int | None = None       # achieved_tflops.min_rank
    flops_per_step: ProfileSpread | None = None
    memory_peak_allocated_bytes: ProfileSpread | None = None


class ModuleProfile(Record):
    """A module of the probed step (the torch.MODULES_PER_DEPTH largest by MACs at each depth)."""

    name: str                      # as named_modules gives it ("module.0" under DDP)
    depth: int                     # 1 = a direct child of the model
    params: int
    macs: int                      # forward multiply-adds (FLOPs // 2)
    fwd_latency_ns: int | None     # its forwards' time in the step; None: not timed
    tflops: float | None           # forward FLOPs / fwd_latency_ns


class RankModelProfile(Record):
    """One rank's live FLOPs profile of one probed training step (torch.utils.flop_counter)."""

    rank: int
    params: int
    forwards: int                  # forwards in the probed step (gradient accumulation: several)
    fwd_flops_per_step: int
    bwd_flops_per_step: int
    fwd_latency_ns: int | None
    bwd_latency_ns: int | None
    step_latency_ns: int           # the optimizer step
    iter_latency_ns: int           # the step's first forward to the optimizer step's end
    achieved_tflops: float | None  # (fwd + bwd FLOPs) / iter_latency_ns
    samples_per_s: float | None    # None without a batch_size
    mfu: float | None              # achieved / hardware.peak_tflops; None without a peak
    modules: list[ModuleProfile]


class ModelProfile(Record):
    """summary.json ``model_profile`` (null when no rank ran the probe): the ranks' profiles in rank order."""

    ranks: list[RankModelProfile]
