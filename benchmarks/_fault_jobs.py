"""Real torch jobs with an injected fault, for benchmarks/verdict_matrix.py: torchrun, CPU, gloo,
``torch.profiler`` (record_shapes on, so ``c10d::send``/``recv_`` carry the peer; schedule wait=1,
warmup=1, active=STEPS), one Chrome trace per rank, gzipped: ``OUT/rank<R>.pt.trace.json.gz``.

    python benchmarks/_fault_jobs.py --topology {tpdp,pp,ddp,fsdp,moe} [--steps 8] [--fault RANK:MS[@STEP][:where]]
                                     [--kernel-ms MS] [--ranks N] [--router-skew RANK[@STEP]] --out DIR

Topologies:
  tpdp  4 ranks: tensor-parallel pairs {0,1},{2,3} (an allreduce in each forward block), data-parallel
        pairs {0,2},{1,3} (all_gather of the gradients after backward);
  pp    4 stages (rank r = stage r), 2 micro-batches: dist.send/recv of activations r -> r+1 in forward
        and of gradients r -> r-1 in backward;
  ddp   2 ranks: DistributedDataParallel of a small MLP (a core per rank on a 2-core machine);
  fsdp  2 ranks (--ranks N): FSDP2 ``fully_shard`` on each Linear of a small MLP and on the whole (all-gathers
        in forward, reduce-scatters in backward);
  moe   4 ranks (--ranks N), an expert per rank: each rank's router sends its tokens to the experts
        (uneven splits, the router's counts), ``all_to_all_single`` dispatches them and combines the
        experts' outputs back (and the gradients the same way in backward); the non-expert layers are data
        parallel (an all_reduce of their gradients after backward). The router's counts are the same in
        every run: uneven from each rank to each expert (up to +-25% of the even share, turning with the
        step), even in sum per expert, so a clean run's experts are evenly loaded.
Fault ``RANK:MS[@STEP][:where]``: that rank pauses MS ms in every profiled step from STEP on (STEP
counts profiled steps from 0). where: ``forward`` (default; in the first forward block or micro-batch),
``data`` (in the DataLoader's ``__next__``, a slow input pipeline), ``comm`` (right before one
collective or send: tpdp the first DP all_gather, pp the first backward send (stage 0: its first
forward send), ddp the first gradient bucket's allreduce, through a comm hook, fsdp the first
reduce-scatter of backward (the last layer's, through FSDP2's custom reduce-scatter), moe the dispatch
all_to_all), ``once`` (one pause in forward at STEP only: a one-off, not a straggler). fsdp's and moe's
forward pause comes after their first layer (moe: before the router). The script re-launches itself
under ``torch.distributed.run --standalone``, like benchmarks/make_real_job.py.

``--router-skew RANK[@STEP]`` (moe): from profiled step STEP on, the router's weight for expert RANK is
twice each other expert's, so that rank's expert receives 2x the tokens any other does (40% of them with 4
experts): an expert load imbalance, not a pause.

``--kernel-ms MS`` (> 0): the models shrink to a few dozen units and every matmul is followed, in
forward and in backward, by an MS ms wait that uses no CPU, as a GPU job's training thread waits for
its kernels (the demo's ``demo.kernel_ms``): ranks sharing cores then do not slow each other at
random, and an injected fault is what makes a rank late. moe's expert waits grow with the tokens it
received (MS x its rows / the rows a balanced router gives it), as an expert's GEMM time does.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RANKS = {"tpdp": 4, "pp": 4, "ddp": 2, "fsdp": 2, "moe": 4}
FREE_RANKS = ("fsdp", "moe")  # topologies whose world size --ranks sets
WHERE = ("forward", "data", "comm", "once")
WAIT, WARMUP = 1, 1  # the profiler schedule's unprofiled steps before the active ones
KERNEL = {"s": 0.0}  # --kernel-ms: the wait after each matmul, forward and backward (0: none)
SMALL = {"TpDp": {"width": 32, "hidden": 64, "batch": 16}, "Pipeline": {"width": 32, "micro": 8},
         "Ddp": {"width": 32, "batch": 16}, "Fsdp": {"width": 32, "batch": 16},
         "Moe": {"width": 32, "hidden": 64}}  # the models' sizes with --kernel-ms: compute next to nothing


@dataclass(frozen=True)
class Fault:
    """One rank's pause: ``ms`` milliseconds at ``where`` from profiled step ``step`` on (``once``: at it only)."""

    rank: int
    ms: float
    step: int = 0
    where: str = "forward"

    def seconds(self, rank: int, step: int, where: str) -> float:
        """The pause this rank makes at ``where`` in profiled step ``step`` (0 for none)."""
        if rank != self.rank:
            return 0.0
        if self.where == "once":
            return self.ms / 1000.0 if where == "forward" and step == self.step else 0.0
        return self.ms / 1000.0 if where == self.where and step >= self.step else 0.0


def parse_fault(text: str | None) -> Fault | None:
    """``RANK:MS[@STEP][:where]`` as a Fault (None for no text)."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in WHERE):
        raise ValueError(f"--fault: expected RANK:MS[@STEP][:{'|'.join(WHERE)}], got {text!r}")
    ms, _, step = parts[1].partition("@")
    return Fault(int(parts[0]), float(ms), int(step or 0), parts[2] if len(parts) == 3 else "forward")


@dataclass(frozen=True)
class Skew:
    """The moe router's skew: expert ``rank``'s weight ``factor`` x each other's from profiled step ``step`` on."""

    rank: int
    step: int = 0
    factor: float = 2.0

    def weights(self, world: int, step: int) -> list[float]:
        """The router's weight per expert in profiled step ``step``."""
        return [self.factor if expert == self.rank and step >= self.step else 1.0 for expert in range(world)]


def parse_skew(text: str | None) -> Skew | None:
    """``RANK[@STEP]`` as a Skew (None for no text)."""
    if not text:
        return None
    rank, _, step = text.partition("@")
    try:
        return Skew(int(rank), int(step or 0))
    except ValueError:
        raise ValueError(f"--router-skew: expected RANK[@STEP], got {text!r}") from None


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=sorted(RANKS), required=True)
    parser.add_argument("--steps", type=int, default=8, help="profiled (active) steps")
    parser.add_argument("--fault", default=None, metavar="RANK:MS[@STEP][:where]")
    parser.add_argument("--out", required=True)
    parser.add_argument("--kernel-ms", type=float, default=0.0,
                        help="a wait of this many ms after every matmul, as for a GPU kernel (0: none)")
    parser.add_argument("--ranks", type=int, default=None, metavar="N",
                        help=f"world size of {' and '.join(FREE_RANKS)} (default: "
                             f"{', '.join(str(RANKS[t]) for t in FREE_RANKS)})")
    parser.add_argument("--router-skew", default=None, metavar="RANK[@STEP]",
                        help="moe: from profiled step STEP on, expert RANK gets 2x the tokens of each other expert")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.kernel_ms < 0:
        parser.error(f"--kernel-ms: a wait of at least 0 ms, not {args.kernel_ms:g}")
    if args.ranks is not None and (args.topology not in FREE_RANKS or args.ranks < 2):
        parser.error(f"--ranks: 2 or more, for {' or '.join(FREE_RANKS)} only")
    args.world = args.ranks or RANKS[args.topology]
    try:
        fault, skew = parse_fault(args.fault), parse_skew(args.router_skew)
    except ValueError as error:
        parser.error(str(error))
    if skew is not None and args.topology != "moe":
        parser.error("--router-skew: moe only")
    for name, given in (("--fault", fault), ("--router-skew", skew)):
        if given is not None and not 0 <= given.rank < args.world:
            parser.error(f"{name}: rank {given.rank} is not one of the {args.world} ranks of {args.topology}")
    return args


def pause(fault: Fault | None, rank: int, step: int, where: str) -> None:
    """Sleep the fault's pause here, if it has one."""
    seconds = fault.seconds(rank, step, where) if fault is not None else 0.0
    if seconds:
        time.sleep(seconds)


def kernel(x, scale: float = 1.0):
    """``x``, after the kernel wait of --kernel-ms (times ``scale``), in forward and again in backward (none
    without it)."""
    if not KERNEL["s"]:
        return x
    import torch

    class KernelWait(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value):
            time.sleep(KERNEL["s"] * scale)
            return value.view_as(value)

        @staticmethod
        def backward(ctx, grad):
            time.sleep(KERNEL["s"] * scale)
            return grad

    return KernelWait.apply(x)


def mlp(widths: list[int], seed: int):
    """A ReLU MLP with the same weights on every rank that uses the same seed (each Linear followed by
    its kernel wait with --kernel-ms)."""
    import torch

    class Kernel(torch.nn.Module):
        def forward(self, x):
            return kernel(x)

    torch.manual_seed(seed)
    layers = []
    for i in range(len(widths) - 1):
        layers += [torch.nn.Linear(widths[i], widths[i + 1]), Kernel(), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class TpDp:
    """4 ranks: two TP blocks (column- then row-parallel, allreduce in the TP pair) and a DP all_gather of grads."""

    width, hidden, batch = 384, 768, 64

    def __init__(self, rank: int, fault: Fault | None) -> None:
        import torch
        import torch.distributed as dist

        tp = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank makes every group, in one order
        dp = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        self.tp, self.dp, self.rank, self.fault = tp[rank // 2], dp[rank % 2], rank, fault
        torch.manual_seed(rank % 2)  # the shard: the same on both DP replicas
        self.blocks = [(torch.nn.Parameter(torch.randn(self.width, self.hidden // 2) / self.width ** 0.5),
                        torch.nn.Parameter(torch.randn(self.hidden // 2, self.width) / self.hidden ** 0.5))
                       for _ in range(2)]
        self.params = [p for block in self.blocks for p in block]
        self.optimizer = torch.optim.SGD(self.params, lr=0.01)

    def make_batch(self, index: int):
        import torch

        return torch.randn(self.batch, self.width, generator=torch.Generator().manual_seed(index * 10 + self.rank // 2))

    def step(self, x, step: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.profiler import record_function

        with record_function("## forward ##"):
            for i, (w1, w2) in enumerate(self.blocks):
                partial = kernel(torch.relu(kernel(x @ w1)) @ w2)
                if i == 0:
                    pause(self.fault, self.rank, step, "forward")
                summed = partial.detach().clone()
                dist.all_reduce(summed, group=self.tp)
                x = x + partial + (summed - partial).detach()  # the sum forward, the local gradient backward
            loss = x.pow(2).mean()
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## grad_sync ##"):
            for i, param in enumerate(self.params):
                if i == 0:
                    pause(self.fault, self.rank, step, "comm")
                gathered = [torch.empty_like(param.grad) for _ in range(2)]
                dist.all_gather(gathered, param.grad, group=self.dp)
                param.grad.copy_((gathered[0] + gathered[1]) / 2)
        with record_function("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad()


class Pipeline:
    """4 stages, 2 micro-batches, GPipe order: all forwards (send r -> r+1), then all backwards (send r -> r-1)."""

    width, micro, micro_batches = 512, 32, 2

    def __init__(self, rank: int, fault: Fault | None) -> None:
        import torch

        self.rank, self.fault, self.last = rank, fault, rank == 3
        self.stage = mlp([self.width] * 4, seed=rank)
        self.optimizer = torch.optim.SGD(self.stage.parameters(), lr=0.01)

    def make_batch(self, index: int):
        import torch

        generator = torch.Generator().manual_seed(index)
        return [torch.randn(self.micro, self.width, generator=generator) for _ in range(self.micro_batches)]

    def forward(self, batch, step: int) -> tuple[list, list]:
        import torch
        import torch.distributed as dist

        inputs, outputs = [], []
        for m in range(self.micro_batches):
            if self.rank == 0:
                x = batch[m]
            else:
                x = torch.empty(self.micro, self.width)
                dist.recv(x, self.rank - 1)
                x.requires_grad_(True)
            if m == 0:
                pause(self.fault, self.rank, step, "forward")
            y = self.stage(x)
            if not self.last:
                if m == 0 and self.rank == 0:
                    pause(self.fault, self.rank, step, "comm")
                dist.send(y.detach(), self.rank + 1)
            inputs.append(x)
            outputs.append(y)
        return inputs, outputs

    def step(self, batch, step: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.profiler import record_function

        with record_function("## forward ##"):
            inputs, outputs = self.forward(batch, step)
        with record_function("## backward ##"):
            for m in range(self.micro_batches):
                if self.last:
                    outputs[m].pow(2).mean().backward()
                else:
                    grad = torch.empty(self.micro, self.width)
                    dist.recv(grad, self.rank + 1)
                    outputs[m].backward(grad)
                if self.rank > 0:
                    if m == 0:
                        pause(self.fault, self.rank, step, "comm")
                    dist.send(inputs[m].grad, self.rank - 1)
        with record_function("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad()


class Ddp:
    """2 ranks: DistributedDataParallel of a small MLP; a comm hook holds the ``comm`` pause."""

    width, batch = 768, 64

    def __init__(self, rank: int, fault: Fault | None) -> None:
        import torch
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        self.rank, self.fault, self.current = rank, fault, -1
        self.model = DistributedDataParallel(mlp([self.width] * 5, seed=0), bucket_cap_mb=1)

        def hook(state, bucket):
            if bucket.index() == 0:
                pause(self.fault, self.rank, self.current, "comm")
            return default_hooks.allreduce_hook(None, bucket)

        self.model.register_comm_hook(None, hook)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def make_batch(self, index: int):
        import torch

        return torch.randn(self.batch, self.width, generator=torch.Generator().manual_seed(index * 10 + self.rank))

    def step(self, x, step: int) -> None:
        from torch.profiler import record_function

        self.current = step
        with record_function("## forward ##"):
            pause(self.fault, self.rank, step, "forward")
            loss = self.model(x).pow(2).mean()
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad()


class Fsdp:
    """FSDP2: ``fully_shard`` on each Linear of a small MLP and on the whole; the ``comm`` pause in a custom
    reduce-scatter of the last layer (the first gradient FSDP reduces in backward)."""

    width, batch = 768, 64

    def __init__(self, rank: int, fault: Fault | None) -> None:
        import torch
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter  # FSDP2's own

        self.rank, self.fault, self.current = rank, fault, -1
        self.model = mlp([self.width] * 5, seed=0)
        linears = [module for module in self.model if isinstance(module, torch.nn.Linear)]
        for layer in linears:
            fully_shard(layer)
        fully_shard(self.model)
        job = self

        class PausedReduceScatter(DefaultReduceScatter):
            def __call__(self, *args, **kwargs):
                pause(job.fault, job.rank, job.current, "comm")
                return super().__call__(*args, **kwargs)

        linears[-1].set_custom_reduce_scatter(PausedReduceScatter())
        linears[0].register_forward_hook(lambda *_: pause(self.fault, self.rank, self.current, "forward"))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def make_batch(self, index: int):
        import torch

        return torch.randn(self.batch, self.width, generator=torch.Generator().manual_seed(index * 10 + self.rank))

    def step(self, x, step: int) -> None:
        from torch.profiler import record_function

        self.current = step
        with record_function("## forward ##"):
            loss = self.model(x).pow(2).mean()
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad()


def all_to_all(x, out_splits: list[int], in_splits: list[int]):
    """``x``'s rows sent ``in_splits[j]`` to rank j and ``out_splits[i]`` received from rank i, by
    ``all_to_all_single``; in backward the gradients go back the same way reversed (one more all_to_all)."""
    import torch
    import torch.distributed as dist

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value):
            out = value.new_empty(sum(out_splits), value.shape[1])
            dist.all_to_all_single(out, value.contiguous(), out_splits, in_splits)
            return out

        @staticmethod
        def backward(ctx, grad):
            back = grad.new_empty(sum(in_splits), grad.shape[1])
            dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
            return back

    return AllToAll.apply(x)


def router_counts(tokens: int, world: int, rank: int, step: int, skew: Skew | None = None) -> list[int]:
    """The tokens ``rank`` sends each expert in profiled step ``step``: shares by the router's weights (equal;
    one doubled under --router-skew), each moved by up to 25% of the even share in a pattern that turns with
    the step and sums to 0 over the ranks sending to one expert: uneven splits, experts evenly loaded in a
    clean run."""
    weights = skew.weights(world, step) if skew else [1.0] * world
    counts = [round(tokens * weight / sum(weights) + 0.25 * tokens / world
                    * math.cos(2 * math.pi * (rank + expert + step) / world)) for expert, weight in enumerate(weights)]
    counts[counts.index(max(counts))] += tokens - sum(counts)  # rounding: the rank's whole batch is sent
    return counts


class Moe:
    """Expert parallel, an expert MLP per rank, between data-parallel layers (dense, gate, head): dispatch and
    combine by ``all_to_all_single`` with the router's uneven splits, the dense layers' gradients all_reduced."""

    width, hidden, tokens = 384, 768, 256  # tokens: each rank's batch, and what a balanced router gives an expert

    def __init__(self, rank: int, fault: Fault | None, skew: Skew | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.rank, self.fault, self.skew, self.world = rank, fault, skew, dist.get_world_size()
        torch.manual_seed(0)  # the data-parallel layers: the same on every rank
        self.shared = torch.nn.ModuleDict({"dense": torch.nn.Linear(self.width, self.width),
                                           "gate": torch.nn.Linear(self.width, self.world),
                                           "head": torch.nn.Linear(self.width, self.width)})
        torch.manual_seed(100 + rank)  # this rank's expert
        self.expert = torch.nn.ModuleList([torch.nn.Linear(self.width, self.hidden),
                                           torch.nn.Linear(self.hidden, self.width)])
        params = [*self.shared.parameters(), *self.expert.parameters()]
        self.optimizer = torch.optim.SGD(params, lr=0.01)

    def make_batch(self, index: int):
        import torch

        return torch.randn(self.tokens, self.width, generator=torch.Generator().manual_seed(index * 10 + self.rank))

    def route(self, step: int):
        """Each token's expert: router_counts' tokens to each, in an order seeded by the step and rank."""
        import torch

        counts = router_counts(self.tokens, self.world, self.rank, step, self.skew)
        generator = torch.Generator().manual_seed(1000 * (step + WAIT + WARMUP) + self.rank)
        choice = torch.repeat_interleave(torch.arange(self.world), torch.tensor(counts))
        return choice[torch.randperm(self.tokens, generator=generator)]

    def experts(self, h, choice, step: int):
        """The tokens through their experts and back: counts exchanged, dispatch, this rank's expert, combine."""
        import torch
        import torch.distributed as dist

        order = torch.argsort(choice, stable=True)
        send = torch.bincount(choice, minlength=self.world)
        received = torch.empty_like(send)
        dist.all_to_all_single(received, send)  # the counts: what each rank receives from each
        send_splits, recv_splits = send.tolist(), received.tolist()
        pause(self.fault, self.rank, step, "comm")
        tokens = all_to_all(h[order], recv_splits, send_splits)
        scale = len(tokens) / self.tokens  # an expert's kernels take longer with more rows
        first, second = self.expert
        y = kernel(second(torch.relu(kernel(first(tokens), scale))), scale)
        return all_to_all(y, send_splits, recv_splits)[torch.argsort(order)]

    def step(self, x, step: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.profiler import record_function

        with record_function("## forward ##"):
            h = torch.relu(kernel(self.shared["dense"](x)))
            pause(self.fault, self.rank, step, "forward")
            choice = self.route(step)
            gate = torch.softmax(self.shared["gate"](h), dim=1).gather(1, choice[:, None])
            loss = kernel(self.shared["head"](h + gate * self.experts(h, choice, step))).pow(2).mean()
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## grad_sync ##"):
            for param in self.shared.parameters():
                dist.all_reduce(param.grad)
                param.grad.div_(self.world)
        with record_function("## optimizer ##"):
            self.optimizer.step()
            self.optimizer.zero_grad()


JOBS = {"tpdp": TpDp, "pp": Pipeline, "ddp": Ddp, "fsdp": Fsdp, "moe": Moe}
JOBS_BY_CLASS = {job.__name__: job for job in JOBS.values()}


def batches(job, fault: Fault | None, rank: int, total: int):
    """A torch Dataset of whole batches (``batch_size=None``): its ``__getitem__`` holds the ``data`` pause."""
    import torch

    class Batches(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return total

        def __getitem__(self, index: int):
            pause(fault, rank, index - WAIT - WARMUP, "data")
            return job.make_batch(index)

    return torch.utils.data.DataLoader(Batches(), batch_size=None, shuffle=False, num_workers=0)


def worker(args: argparse.Namespace) -> None:
    """One rank: the topology's training loop under torch.profiler, one gzipped Chrome trace."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    cores = sorted(os.sched_getaffinity(0))
    if args.world <= len(cores):  # a core each, as a launcher binds them: no turn-taking
        os.sched_setaffinity(0, {cores[int(os.environ["LOCAL_RANK"])]})  # before gloo's threads: they inherit it
    torch.set_num_threads(1)
    KERNEL["s"] = args.kernel_ms / 1000
    if args.kernel_ms:
        for name, sizes in SMALL.items():
            for key, value in sizes.items():
                setattr(JOBS_BY_CLASS[name], key, value)
    dist.init_process_group("gloo")
    rank, fault, out = dist.get_rank(), parse_fault(args.fault), Path(args.out)
    skew = {"skew": parse_skew(args.router_skew)} if args.topology == "moe" else {}
    job = JOBS[args.topology](rank, fault, **skew)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.pt.trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb", compresslevel=3) as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    plan = schedule(wait=WAIT, warmup=WARMUP, active=args.steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=plan, on_trace_ready=ready) as prof:
        for index, batch in enumerate(batches(job, fault, rank, WAIT + WARMUP + args.steps)):
            job.step(batch, index - WAIT - WARMUP)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def launch(args: argparse.Namespace) -> float:
    """This script again under torchrun (one host, the topology's ranks); the job's wall time in seconds."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.pt.trace.json*"):
        old.unlink()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(args.world), __file__, "--worker", "--topology", args.topology, "--steps",
               str(args.steps), "--out", str(out), *(["--fault", args.fault] if args.fault else []),
               *(["--kernel-ms", str(args.kernel_ms)] if args.kernel_ms else []),
               *(["--ranks", str(args.ranks)] if args.ranks else []),
               *(["--router-skew", args.router_skew] if args.router_skew else [])]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    started = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"torchrun failed (exit {done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}")
    return time.perf_counter() - started


if __name__ == "__main__":
    arguments = parse()
    if arguments.worker:
        worker(arguments)
    else:
        wall = launch(arguments)
        print(f"{arguments.topology}: {len(list(Path(arguments.out).glob('rank*.pt.trace.json.gz')))} rank traces "
              f"in {arguments.out} ({wall:.1f} s)")
