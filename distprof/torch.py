"""PyTorch integration: phases and DDP communication recorded without editing the training loop.

``instrument(model, optimizer)`` installs hooks that feed the same collector and NVTX domain as
``distprof.phase``/``distprof.comm``:

- **forward**: forward pre/post hooks on the top module (the post hook always runs, even when
  forward raises, so the range is closed).
- **backward**: starts when the gradient of the first model output is computed (a tensor hook
  on each output that requires grad) and ends when autograd finishes that backward pass (a
  callback queued on autograd's execution engine, the mechanism DDP itself uses to finalize
  gradients). Module full backward hooks are not used: on a top module whose inputs need no
  grad they fire when backward *starts*, not when it ends. The callback is queued before DDP's
  own one, so the backward phase ends before DDP waits for the last allreduce: that wait is
  exposed communication, not computation. The range is drawn on the lane of the thread that
  ran forward (on CUDA, autograd runs nodes on device threads; the training thread is the lane
  the analysis compares with communication).
- **optimizer**: optimizer step pre/post hooks.
- **DDP communication**: a DDP comm hook records each gradient bucket's collective from issue
  to completion (the future's ``then`` callback) on a lane of its own, ``DDP comm``, the way a
  GPU communication stream is a lane of its own; so real overlap with backward shows up even
  with gloo on CPU. On NCCL the future completes when the collective is enqueued on the GPU,
  so there the host lane shows issue to enqueue; take GPU overlap from nsys or Kineto kernels.

Intervals that start on one thread and end on another (bucket allreduces, backward on CUDA)
do not fit a per-thread ``with`` range: :class:`Lane` records them from explicit clock values
(``distprof.collector.clock_ns``) and emits NVTX start/end ranges, which may end on any thread.

On CUDA, each phase is also timed on the GPU with CUDA events on the current stream; the
events are read without synchronizing (``Event.query``) and the totals are available from
:meth:`Instrumentation.gpu_time_ns`. Without a GPU that path is off. (Not exercised by the
tests: the test machines have no GPU.)
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

try:
    import torch
    import torch.distributed as dist
except ImportError as error:  # torch is the optional extra `distprof[torch]`
    raise ImportError("distprof.torch needs PyTorch: pip install 'distprof[torch]'") from error


from . import annotate
from . import events as ev
from .collector import NO_COMM, ROUTE, clock_ns
from .lanes import SYNTHETIC_LANE_BASE

__all__ = ["instrument", "Instrumentation", "Lane", "FORWARD", "BACKWARD", "OPTIMIZER", "DDP_LANE"]

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
DDP_LANE = "DDP comm"
# Synthetic lane ids start above any Linux thread id (pid_max is at most 2**22), so they never
# collide with a real thread's lane; every rank numbers its lanes in creation order, so the
# same lane has the same id on every rank (collectives are matched per lane).
_lane_ids = itertools.count(SYNTHETIC_LANE_BASE)
_lanes_by_name: dict[str, int] = {}
_lanes_lock = threading.Lock()


class Lane:
    """A timeline lane for intervals measured by start/end clock values, e.g. an allreduce
    issued on the training thread and completed in a callback on a communication thread.

    ``Lane("DDP comm")`` gets a synthetic lane id (its name goes to the native file's thread
    table); ``Lane.of_thread()`` is the calling thread's own lane. Rows go to the active
    collector, so they follow the Profiler's schedule like every other range.
    """

    __slots__ = ("id", "name")

    def __init__(self, name: str, lane_id: int | None = None) -> None:
        if lane_id is None:
            with _lanes_lock:
                lane_id = _lanes_by_name.get(name)
                if lane_id is None:
                    lane_id = _lanes_by_name[name] = next(_lane_ids)
        self.id = lane_id
        self.name = name
        annotate.THREAD_NAMES[lane_id] = name

    @classmethod
    def of_thread(cls) -> Lane:
        """The calling thread's lane (its OS thread id, as ``distprof.phase`` uses)."""
        return cls(threading.current_thread().name, threading.get_native_id())

    def record(self, name: str, start_ns: int, end_ns: int, category: str = ev.COMMUNICATION) -> None:
        """Add one finished interval (``collector.clock_ns`` values) to this lane."""
        append = ROUTE.append
        if append is not None:
            name_id, _ = annotate.descriptor(name, category, _kind(category))
            append((start_ns, end_ns, self.id, name_id))  # atomic under the GIL, like Range.__exit__

    def start(self, name: str, category: str = ev.COMMUNICATION, comm: tuple[str, int, int] = NO_COMM) -> tuple:
        """Open an interval now; pass the token to :meth:`end`, on any thread. ``comm``: the
        message metadata of a communication (annotate.comm_metadata), stored with its name."""
        name_id, attributes = annotate.descriptor(name, category, _kind(category), comm)
        domain = annotate.nvtx_domain()
        handle = domain.start_range(attributes) if domain is not None else None
        return (clock_ns(), name_id, domain, handle)

    def end(self, token: tuple) -> None:
        """Close an interval opened by :meth:`start` and record it."""
        end_ns = clock_ns()
        start_ns, name_id, domain, handle = token
        if handle is not None:
            domain.end_range(handle)
        append = ROUTE.append
        if append is not None:
            append((start_ns, end_ns, self.id, name_id))


def _kind(category: str) -> str:
    return ev.COMM_OP if category == ev.COMMUNICATION else ev.RANGE


def _tensors_needing_grad(output: Any) -> list[torch.Tensor]:
    """The tensors of a forward output (tensor, sequence, mapping, nested) that backward flows into.
    Walked with a stack and a set of the containers seen, not by recursion: an output that holds
    itself, or is nested deeper than Python's recursion limit, is the model's business and must
    not stop its training."""
    found, stack, seen = [], [output], set()
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.requires_grad:
                found.append(item)
        elif isinstance(item, (list, tuple, dict)) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(reversed(list(item.values() if isinstance(item, dict) else item)))
    return found


class _GpuTimer:
    """Phase GPU time from CUDA events on the current stream, read without synchronizing."""

    def __init__(self) -> None:
        self.total_ns: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self._open: dict[str, torch.cuda.Event] = {}
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def begin(self, phase: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._open[phase] = event

    def end(self, phase: str) -> None:
        start = self._open.pop(phase, None)
        if start is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._pending.append((phase, start, event))

    def collect(self, wait: bool = False) -> None:
        """Add the phases whose end event has completed (all of them with ``wait``)."""
        still = []
        for phase, start, end in self._pending:  # a handful per step
            if wait:
                end.synchronize()
            elif not end.query():
                still.append((phase, start, end))
                continue
            self.total_ns[phase] = self.total_ns.get(phase, 0) + int(start.elapsed_time(end) * 1e6)
            self.count[phase] = self.count.get(phase, 0) + 1
        self._pending = still


MODULES_PER_DEPTH = 3   # model_profile.modules: the largest modules (by MACs) at each depth
MAX_FORWARDS_PER_STEP = 64  # forwards without an optimizer step before the probe gives up (accumulation)
_OFF = "off"   # the probe failed or gave up: every hook returns at once for the rest of the run


def _guarded(method: Callable) -> Callable:
    """Run a probe hook so that nothing it raises reaches the training loop: the probe is an
    observer, and a profile is worth less than the step it would break. On an error the probe
    warns once, takes its counter and hooks off and stays off (:meth:`_FlopsProbe.fail`)."""
    @functools.wraps(method)
    def run(self: _FlopsProbe, *args: Any) -> Any:
        if self.state == _OFF:
            return None
        try:
            result = method(self, *args)
        except Exception as error:  # whatever the probe hits, training goes on without it
            self.fail(f"{method.__name__.strip('_')} raised {type(error).__name__}: {error}")
            return None
        if self.broken is not None:  # an error inside the counting mode, noted there
            self.fail(self.broken)
        return result
    return run


def _checked_batch_size(batch_size: object) -> int | None:
    """``batch_size`` as a positive int, else None with a warning: checked when the probe is made,
    so that a bad value costs samples/s, not a TypeError inside ``optimizer.step()``."""
    if batch_size is None:
        return None
    if not isinstance(batch_size, bool):
        try:
            value = operator.index(batch_size)   # int, numpy ints; not "16" nor 16.0
        except TypeError:
            value = None
        if value is not None and value > 0:
            return value
    warnings.warn(f"distprof: instrument(batch_size={batch_size!r}): not a positive integer; the FLOPs "
                  "profile gives no samples/s", RuntimeWarning, stacklevel=5)
    return None


class _FlopsProbe:
    """The live model FLOPs profile (``instrument(..., flops=True)``): on the first recorded step,
    ``torch.utils.flop_counter.FlopCounterMode`` runs from the first forward to the optimizer step
    (every forward of a gradient-accumulation step, and the backwards that ``loss.backward()``
    starts: autograd keeps the mode it was called under), and every submodule's forward is timed
    and its FLOPs taken from the counter's running total with forward hooks of the probe's own.
    Only that step pays. Any error in the probe turns it off with one warning (:func:`_guarded`)."""

    def __init__(self, model: torch.nn.Module, batch_size: int | None) -> None:
        self.model, self.batch_size = model, _checked_batch_size(batch_size)
        self.result: dict | None = None
        self.broken: str | None = None   # set inside the counting mode, acted on at the next hook
        self._counter = None
        self._hooks: list = []
        self._warned = False
        self._cuda = torch.cuda.is_available() and any(p.is_cuda for p in model.parameters())
        self._arm()

    def _arm(self) -> None:
        """Ready to probe the next recorded step, with nothing counted yet."""
        self.state = "armed"
        self._times: dict[str, int] = {}    # module name (or <forward>, <backward>) -> ns in the step
        self._flops: dict[str, int] = {}    # module name -> forward FLOPs in the step
        self._open: dict[str, list[tuple[int, int]]] = {}  # module name -> (clock, FLOPs) at its calls
        self._marks: dict[str, int] = {}
        self._forwards = self._forward_flops = self._backward_flops = 0
        self._forward_open: tuple[int, int] | None = None

    def _now(self) -> int:
        if self._cuda:
            torch.cuda.synchronize()  # the probed step only: module latencies of GPU work
        return clock_ns()

    def _total(self) -> int:
        return int(self._counter.get_total_flops())

    def _leave(self) -> None:
        """Take the module hooks and the counter off, each step on its own (a failed one must
        not keep the others on)."""
        hooks, self._hooks = self._hooks, []
        for handle in hooks:
            try:
                handle.remove()
            except Exception:  # a handle whose module is gone: nothing left to remove
                pass
        counter, self._counter = self._counter, None
        if counter is not None:
            try:
                counter.__exit__(None, None, None)
            except Exception as error:
                self._warn(f"leaving the FLOP counter raised {type(error).__name__}: {error}")

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"distprof: the FLOPs probe is off for this run ({why}); training goes on, "
                          "summary.json has no model_profile", RuntimeWarning, stacklevel=3)

    def fail(self, why: str) -> None:
        """Stop probing for good, with one warning saying why."""
        self._warn(why)
        self._leave()
        self.state = _OFF

    def close(self) -> None:
        """Leave the counter and the module hooks (``Instrumentation.remove`` mid-step)."""
        self._leave()
        self.state = "done"

    def abandon(self) -> None:
        """A forward of the probed step raised: leave the counter and the module hooks now, and probe the next
        recorded step. Used without ``with``, nothing else would: the FlopCounterMode stayed on torch's
        dispatch stack, counting (and slowing) every op after it, the caller's error handling included."""
        if self.state in ("counting", "step"):
            self._leave()
            self._arm()

    def _start(self) -> None:
        """Enter the counter and hook every submodule: the first forward of the probed step."""
        from torch.utils.flop_counter import FlopCounterMode
        for name, module in self.model.named_modules():
            if name:
                self._hooks.append(module.register_forward_pre_hook(functools.partial(self._module_begins, name)))
                self._hooks.append(module.register_forward_hook(functools.partial(self._module_ends, name),
                                                                always_call=True))
        self._counter = counter = FlopCounterMode(display=False)
        counter.__enter__()
        # its ModuleTracker is not needed (the hooks above attribute FLOPs to modules; entered in the
        # top module's pre-hook it names nothing under a plain model) and not safe: its global hooks
        # flatten every module's output recursively (an output that holds itself: RecursionError)
        tracker = getattr(counter, "mod_tracker", None)
        if tracker is not None:
            tracker.__exit__()
        count = getattr(counter, "_count_flops", None)
        if count is not None:
            counter._count_flops = functools.partial(self._count_safely, count)
        self._marks["<iter>"] = self._now()
        self.state = "counting"

    def _count_safely(self, count: Callable, func, out, args, kwargs):
        """The counter's per-op count, its errors kept from the op's caller (the training loop):
        the op's result is returned, and the probe turns off at its next hook."""
        try:
            return count(func, out, args, kwargs)
        except Exception as error:
            self.broken = self.broken or f"counting {func} raised {type(error).__name__}: {error}"
            return out

    @_guarded
    def _module_begins(self, name: str, module, args) -> None:
        if self.state == "counting":
            self._open.setdefault(name, []).append((self._now(), self._total()))

    @_guarded
    def _module_ends(self, name: str, module, args, output) -> None:
        calls = self._open.get(name)
        if self.state == "counting" and calls:
            start_ns, start_flops = calls.pop()
            self._times[name] = self._times.get(name, 0) + self._now() - start_ns
            self._flops[name] = self._flops.get(name, 0) + self._total() - start_flops

    @_guarded
    def forward_begins(self) -> None:
        """A forward of the top module: the first one of a recorded step starts the probe; later
        ones before the optimizer step are micro-batches of the same step (gradient accumulation)."""
        if self.state == "armed" and ROUTE.append is not None:  # the probed step is a recorded one
            self._start()
        elif self.state != "counting":
            return
        if self._forwards >= MAX_FORWARDS_PER_STEP:
            self.fail(f"no optimizer.step() in {MAX_FORWARDS_PER_STEP} forwards: the probed step never ended")
            return
        self._forwards += 1
        self._forward_open = (self._now(), self._total())

    @_guarded
    def forward_ends(self) -> None:
        if self.state != "counting" or self._forward_open is None:
            return
        start_ns, start_flops = self._forward_open
        self._forward_open = None
        self._times["<forward>"] = self._times.get("<forward>", 0) + self._now() - start_ns
        self._forward_flops += self._total() - start_flops

    @_guarded
    def backward(self, start_ns: int, end_ns: int) -> None:
        if self.state == "counting":
            self._times["<backward>"] = self._times.get("<backward>", 0) + end_ns - start_ns

    @_guarded
    def step_begins(self) -> None:
        if self.state != "counting":
            return
        self._backward_flops = self._total() - self._forward_flops
        self._leave()
        self._marks["<step>"] = self._now()
        self.state = "step"

    @_guarded
    def step_ends(self, rank: int, peak_tflops: float | None) -> dict | None:
        if self.state != "step":
            return None
        now = self._now()
        self.result = self._profile(rank, now - self._marks["<step>"], now - self._marks["<iter>"], peak_tflops)
        self.state = "done"
        return self.result

    def _modules(self) -> list[dict]:
        """The modules that ran in the probed step, the ``MODULES_PER_DEPTH`` largest by MACs at
        each depth (names as ``named_modules`` gives them: ``module.*`` under DDP)."""
        named = dict(self.model.named_modules())
        modules = []
        for path, value in self._flops.items():
            latency = self._times.get(path)
            modules.append({"name": path, "depth": path.count(".") + 1,
                            "params": int(sum(p.numel() for p in named[path].parameters())), "macs": value // 2,
                            "fwd_latency_ns": latency, "tflops": value / latency / 1e3 if latency else None})
        modules.sort(key=lambda m: (m["depth"], -m["macs"], m["name"]))
        rank_at_depth: dict[int, int] = {}
        kept = []
        for module in modules:  # sorted: the first ones at each depth are the largest
            seen = rank_at_depth[module["depth"]] = rank_at_depth.get(module["depth"], 0) + 1
            if seen <= MODULES_PER_DEPTH:
                kept.append(module)
        return kept

    def _profile(self, rank: int, step_ns: int, iter_ns: int, peak_tflops: float | None) -> dict:
        flops = self._forward_flops + self._backward_flops
        tflops = flops / iter_ns / 1e3 if iter_ns else None
        samples = self.batch_size * self._forwards if self.batch_size else None
        return {"rank": rank, "params": int(sum(p.numel() for p in self.model.parameters())),
                "forwards": self._forwards,
                "fwd_flops_per_step": self._forward_flops, "bwd_flops_per_step": self._backward_flops,
                "fwd_latency_ns": self._times.get("<forward>"), "bwd_latency_ns": self._times.get("<backward>"),
                "step_latency_ns": step_ns, "iter_latency_ns": iter_ns, "achieved_tflops": tflops,
                "samples_per_s": samples / iter_ns * 1e9 if samples and iter_ns else None,
                "mfu": tflops / peak_tflops if tflops is not None and peak_tflops else None,
                "modules": self._modules()}


class Instrumentation:
    """The hooks installed by :func:`instrument`; ``remove()`` (or leaving ``with``) takes them off."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 profiler=None, comm_hook: tuple[object, Callable] | None = None,
                 comm_name: str = "allreduce", gpu_timing: bool | None = None, flops: bool = False,
                 batch_size: int | None = None) -> None:
        self.model = model
        if flops and optimizer is None:
            warnings.warn("distprof: instrument(flops=True) without an optimizer: the probed step ends at "
                          "optimizer.step(), so there is no FLOPs profile", RuntimeWarning, stacklevel=3)
        self.flops = _FlopsProbe(model, batch_size) if flops and optimizer is not None else None
        self.optimizer = optimizer
        self.profiler = profiler
        self.comm_name = comm_name
        self.comm_lane: Lane | None = None
        self._handles: list = []
        self._train_lane = Lane.of_thread()
        self._backward: tuple | None = None  # the open backward interval's token
        if gpu_timing is None:
            gpu_timing = torch.cuda.is_available() and any(p.is_cuda for p in model.parameters())
        self._gpu = _GpuTimer() if gpu_timing else None
        self._install_phases()
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            self._install_comm_hook(comm_hook)
        elif comm_hook is not None:
            raise ValueError("comm_hook is for DistributedDataParallel models; this model is "
                             f"{type(model).__name__}")

    # -- forward and backward --------------------------------------------------------------
    def _install_phases(self) -> None:
        model = self.model
        self._handles.append(model.register_forward_pre_hook(self._forward_begins))
        self._handles.append(model.register_forward_hook(self._forward_ends, always_call=True))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._step_begins))
            self._handles.append(self.optimizer.register_step_post_hook(self._step_ends))

    def _forward_begins(self, module, args) -> None:
        if self._backward is not None:  # the last backward raised: its end callback never ran
            _, _, domain, handle = self._backward
            if handle is not None:
                domain.end_range(handle)
            self._backward = None
        if threading.get_native_id() != self._train_lane.id:
            self._train_lane = Lane.of_thread()
        annotate.phase(FORWARD).__enter__()
        if self._gpu is not None:
            self._gpu.begin(FORWARD)
        if self.flops is not None:
            self.flops.forward_begins()

    def _forward_ends(self, module, args, output) -> None:
        if self.flops is not None:
            # an always_call hook runs inside torch's except clause, with no output, when the forward raised
            if output is None and sys.exc_info()[1] is not None:
                self.flops.abandon()
            else:
                self.flops.forward_ends()
        if self._gpu is not None:
            self._gpu.end(FORWARD)
        annotate.phase(FORWARD).__exit__(None, None, None)
        if torch.is_grad_enabled():
            for tensor in _tensors_needing_grad(output):
                tensor.register_hook(self._backward_begins)

    def _backward_begins(self, grad: torch.Tensor) -> None:
        """Gradient of a model output is ready: the model's backward starts (first output only)."""
        if self._backward is not None:
            return
        self._backward = self._train_lane.start(BACKWARD, ev.PHASE)
        if self._gpu is not None:
            self._gpu.begin(BACKWARD)
        # runs when this backward pass is done, before callbacks queued later (DDP's finalize)
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_ends)

    def _backward_ends(self) -> None:
        token, self._backward = self._backward, None
        if token is not None:
            if self._gpu is not None:
                self._gpu.end(BACKWARD)
            self._train_lane.end(token)
            if self.flops is not None:
                self.flops.backward(token[0], clock_ns())

    # -- optimizer -------------------------------------------------------------------------
    def _step_begins(self, optimizer, args, kwargs) -> None:
        if self.flops is not None:
            self.flops.step_begins()
        annotate.phase(OPTIMIZER).__enter__()
        if self._gpu is not None:
            self._gpu.begin(OPTIMIZER)

    def _step_ends(self, optimizer, args, kwargs) -> None:
        if self._gpu is not None:
            self._gpu.end(OPTIMIZER)
        annotate.phase(OPTIMIZER).__exit__(None, None, None)
        if self._gpu is not None:
            self._gpu.collect()
        if self.flops is not None:
            self._flops_done()
        if self.profiler is not None:
            self.profiler.step()

    def _flops_done(self) -> None:
        """The probed step's model profile, into the rank file's metadata (summary.json's model_profile)."""
        profiler = self.profiler
        config = getattr(profiler, "config", None) or {}
        rank = getattr(profiler, "rank", None)
        rank = rank if rank is not None else (dist.get_rank() if dist.is_available() and dist.is_initialized() else 0)
        result = self.flops.step_ends(int(rank), (config.get("hardware") or {}).get("peak_tflops"))
        collector = getattr(profiler, "collector", None)
        if result is not None and collector is not None:
            import json
            try:
                collector.set_meta(model_profile=json.dumps(result))
            except Exception as error:  # the rank file's problem surfaces at the profiler's end, not here
                self.flops.fail(f"writing model_profile raised {type(error).__name__}: {error}")

    @property
    def model_profile(self) -> dict | None:
        """This rank's live FLOPs profile (``flops=True``) once the probed step ended; else None."""
        return None if self.flops is None else self.flops.result

    # -- DDP communication -----------------------------------------------------------------
    def _install_comm_hook(self, comm_hook: tuple[object, Callable] | None) -> None:
        if comm_hook is None:
            state, inner = self.model.process_group, _allreduce_mean
        else:
            state, inner = comm_hook
        lane = self.comm_lane = Lane(DDP_LANE)
        name = self.comm_name
        # the default hook allreduces the bucket over the DDP group: its ranks and the bucket's bytes
        # are the message; a user's hook may compress or send elsewhere, so it gets no metadata
        metadata = _bucket_metadata(state) if comm_hook is None else (lambda bucket: NO_COMM)

        # no annotations: DDP checks them against dist.GradBucket by identity, and
        # `from __future__ import annotations` would turn them into strings
        def distprof_comm_hook(state, bucket):
            token = lane.start(name, comm=metadata(bucket))
            future = inner(state, bucket)

            def completed(done):
                lane.end(token)
                return done.value()

            return future.then(completed)

        distprof_comm_hook.__qualname__ = f"distprof({getattr(inner, '__qualname__', 'comm_hook')})"
        try:
            self.model.register_comm_hook(state, distprof_comm_hook)
        except RuntimeError as error:
            raise RuntimeError("this DDP model already has a comm hook (DDP takes one): pass yours as "
                               "distprof.torch.instrument(..., comm_hook=(state, hook)) instead") from error

    # -- results ---------------------------------------------------------------------------
    def gpu_time_ns(self, wait: bool = True) -> dict[str, dict[str, int]]:
        """Per phase: total GPU time (ns) and count, from CUDA events; {} without GPU timing."""
        if self._gpu is None:
            return {}
        self._gpu.collect(wait=wait)
        return {phase: {"gpu_ns": total, "count": self._gpu.count[phase]}
                for phase, total in self._gpu.total_ns.items()}

    def remove(self) -> None:
        """Take the forward/backward/optimizer hooks off (DDP cannot unregister a comm hook:
        it stays, and keeps recording while a collector is active)."""
        if self.flops is not None and self.flops.state in ("counting", "step"):
            self.flops.close()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.profiler = None

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.remove()


def _bucket_metadata(process_group) -> Callable:
    """bucket -> (group text, nbytes, -1) for the default hook's allreduce over ``process_group``
    (global ranks from torch.distributed.get_process_group_ranks; the world when None), made once
    per bucket size."""
    group = process_group if process_group is not None else dist.group.WORLD
    try:
        ranks = dist.get_process_group_ranks(group)
    except (AttributeError, RuntimeError, ValueError):  # an older torch, or a group it cannot list
        ranks = None
    by_size: dict[int, tuple[str, int, int]] = {}

    def metadata(bucket) -> tuple[str, int, int]:
        nbytes = bucket.buffer().nbytes
        found = by_size.get(nbytes)
        if found is None:
            found = by_size[nbytes] = annotate.comm_metadata(ranks, nbytes)
        return found

    return metadata


def _allreduce_mean(process_group, bucket):
    """PyTorch's default DDP reduction: divide by the group size, then allreduce (sum)."""
    group = process_group if process_group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())
    return dist.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda done: done.value()[0])


def instrument(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, profiler=None,
               *, comm_hook: tuple[object, Callable] | None = None, comm_name: str = "allreduce",
               gpu_timing: bool | None = None, flops: bool = False, batch_size: int | None = None) -> Instrumentation:
    """Record forward, backward, optimizer and DDP bucket communication without touching the loop.

    ``model``: the top module the loop calls (the DDP wrapper under DDP: its comm hook is then
    registered). ``profiler``: a running ``distprof.Profiler``; every ``optimizer.step()`` then
    ends a ProfileStep, so the loop needs no ``prof.step()``. ``comm_hook``: your own DDP comm
    hook as ``(state, hook)``, timed instead of the default allreduce (DDP accepts one hook).
    ``gpu_timing``: CUDA-event phase timing; default on when the model is on a GPU.
    ``flops``: count FLOPs and MACs per module (FlopCounterMode) and time each module's forward on
    the first recorded step, all its forwards up to the optimizer step (gradient accumulation);
    that step only pays, and an error in the probe is a warning that turns it off, never an
    exception in the loop. ``batch_size``: the samples of one forward, for samples/s. The result
    is summary.json's ``model_profile`` (and :attr:`Instrumentation.model_profile`).
    Use it as a context manager (or call ``remove()``) so no step is marked after the profiler ends.
    """
    return Instrumentation(model, optimizer, profiler, comm_hook=comm_hook, comm_name=comm_name,
                           gpu_timing=gpu_timing, flops=flops, batch_size=batch_size)
