"""A small data-parallel MLP trained with PyTorch DDP under torchrun, profiled by distprof.

    torchrun --standalone --nproc_per_node 2 examples/torch_ddp.py --out distprof_torch
    launch/torchrun.sh --nproc 2 -- examples/torch_ddp.py --no-overlap

The training loop has no distprof calls: ``distprof.torch.instrument`` hooks forward, backward,
the optimizer step and DDP's gradient-bucket allreduces, and ends a ProfileStep at every
``optimizer.step()``. Rank 0 prints the Distributed Summary (gathered over the job's own process
group) and writes ``summary.json``.

Modes:
  default       DDP as usual: each bucket (``--bucket-cap-mb``) is allreduced as soon as its
                gradients are ready, on DDP's communication lane, while backward goes on.
  --no-overlap  DDP's overlap defeated: forward and backward under ``no_sync()``, then one allreduce of all
                gradients on the training thread, after backward (what the stream placement
                check flags).
Runs on CPU with gloo (no GPU needed); with ``--backend nccl`` each rank uses its GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import distprof
import distprof.torch

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "torchrun.yaml"


def make_model(width: int, layers: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def allreduce_after_backward(model: nn.Module, world: int) -> None:
    """The no-overlap pattern: one allreduce of every gradient, on the training thread."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    with distprof.comm("allreduce"):
        dist.all_reduce(flat)
    flat /= world
    for grad, reduced in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(reduced.view_as(grad))


def train(args: argparse.Namespace) -> dict | None:
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts them)
    model = make_model(args.width, args.layers).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1234 + rank)
    teacher = torch.randn(args.width, args.width, generator=torch.Generator().manual_seed(0)) / args.width ** 0.5

    # step 0 (DDP builds its buckets, allocators warm up) is run but not recorded
    profiler = distprof.Profiler(config=args.config, out=args.out, schedule=(1, args.steps + 1))
    with profiler as prof, distprof.torch.instrument(ddp, optimizer, profiler=prof, flops=args.flops,
                                                     batch_size=args.batch):
        for _ in range(args.steps + 1):
            x = torch.randn(args.batch, args.width, generator=generator)
            x, target = x.to(device), torch.tanh(x @ teacher).to(device)
            optimizer.zero_grad(set_to_none=True)
            # no_sync must cover forward too: DDP arms its bucket allreduces in forward
            with ddp.no_sync() if args.no_overlap else contextlib.nullcontext():
                loss = nn.functional.mse_loss(ddp(x), target)
                loss.backward()
            if args.no_overlap:
                allreduce_after_backward(model, world)
            optimizer.step()
    dist.destroy_process_group()
    return profiler.summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a small DDP job profiled by distprof (run it under torchrun)")
    parser.add_argument("--out", default="distprof_torch", help="output directory (rank files, summary.json)")
    parser.add_argument("--steps", type=int, default=8, help="recorded steps (one more warm-up step runs first)")
    parser.add_argument("--bucket-cap-mb", type=float, default=1.0, help="DDP gradient bucket size")
    parser.add_argument("--no-overlap", action="store_true",
                        help="defeat DDP overlap: no_sync() forward+backward, then one allreduce after it")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--flops", action="store_true",
                        help="live model FLOPs profile on the first recorded step (summary.json model_profile)")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="distprof YAML config")
    train(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
