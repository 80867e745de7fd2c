"""Make the real DDP (CPU, gloo) PyTorch profiler traces in this folder: a 2-rank job under torchrun.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node 2 make_traces.py --out DIR \
        [--late-rank 1 --late-ms 25] [--no-sync 4] [--active 8] [--manual-sync]

Each rank: an MLP wrapped in ``DistributedDataParallel`` with a small ``bucket_cap_mb`` (several
gradient buckets, so several allreduces per step, issued by DDP's reducer during backward and run
by gloo's worker threads), ``## forward ##`` / ``## backward ##`` / ``## optimizer ##`` ranges,
``torch.profiler`` (CPU activity, record_shapes, profile_memory, no stacks) with a schedule
(wait=1, warmup=1, active=N). ``--late-rank R --late-ms MS``: rank R sleeps MS inside its forward
every micro-batch that syncs. ``--no-sync K``: gradient accumulation, K-1 micro-batches under
``model.no_sync()`` then one synced. ``--manual-sync``: no DDP; after backward the main thread
calls ``dist.all_reduce`` on each gradient and waits for it (the reduction blocks the step).
Each rank writes ``DIR/rank<R>.json.gz``.
"""

import argparse
import contextlib
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--late-rank", type=int, default=1)
    parser.add_argument("--late-ms", type=float, default=0.0, help="sleep in forward on --late-rank (0: none)")
    parser.add_argument("--no-sync", type=int, default=1,
                        help="micro-batches per step, all but the last under no_sync()")
    parser.add_argument("--active", "--steps-profiled", dest="active", type=int, default=8, help="profiled steps")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=6, help="hidden width x width layers")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--bucket-mb", type=float, default=0.3)
    parser.add_argument("--manual-sync", action="store_true", help="no DDP: blocking all_reduce per gradient")
    return parser.parse_args()


def build(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    hidden = [layer for _ in range(args.depth) for layer in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())]
    model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(), *hidden,
                                torch.nn.Linear(args.width, 8))
    if args.manual_sync:
        return model
    return DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, args: argparse.Namespace, late: bool) -> None:
    world = dist.get_world_size()
    for micro in range(args.no_sync):
        synced = micro == args.no_sync - 1
        context = model.no_sync() if not synced and not args.manual_sync else contextlib.nullcontext()
        with context:
            x, y = torch.randn(args.batch, 64), torch.randn(args.batch, 8)
            with record_function("## forward ##"):
                if late and synced:
                    time.sleep(args.late_ms / 1000)
                loss = torch.nn.functional.mse_loss(model(x), y)
            with record_function("## backward ##"):
                loss.backward()
    if args.manual_sync:
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
    with record_function("## optimizer ##"):
        optimizer.step()
        optimizer.zero_grad()


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = build(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    late = rank == args.late_rank and args.late_ms > 0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(args.active + 2):
            step(model, optimizer, args, late)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
