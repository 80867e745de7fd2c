"""Make the real CPU (gloo) PyTorch profiler traces in this folder: a 4-rank job under torchrun.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node 4 make_traces.py OUT_DIR [--late-ms 30]

Each rank: a tiny MLP, ``record_function`` phases (``## forward ##``, ``## backward ##``,
``Optimizer.step#SGD.step`` comes from torch itself), two process groups ({0,1} and {2,3}) for
the gradient allreduce, the world group for an all_gather and a broadcast, one all_to_all
(world), and rank 2 sleeping ``--late-ms`` before the allreduce in every step (0: no late
rank). ``torch.profiler`` (CPU activities, record_shapes) with a schedule writes one Kineto
JSON per rank, gzip-compressed: ``rank<N>.json.gz``.
"""

import argparse
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--late-ms", type=float, default=30.0)
    parser.add_argument("--active", type=int, default=3, help="profiled steps (the traces here: 3)")
    parser.add_argument("--late-rank", type=int, default=2, help="the rank that sleeps (the traces here: 2)")
    parser.add_argument("--width", type=int, default=64, help="hidden width of the MLP (the traces here: 64)")
    parser.add_argument("--batch", type=int, default=16, help="samples per micro-batch (the traces here: 16)")
    parser.add_argument("--depth", type=int, default=0, help="hidden width x width layers (the traces here: 0)")
    parser.add_argument("--micro", type=int, default=1, help="micro-batches accumulated per step (the traces here: 1)")
    parser.add_argument("--bucket", action="store_true",
                        help="one allreduce of all the gradients flattened, as DDP buckets them "
                        "(the traces here: one per tensor)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # pairs {0,1}, {2,3}, ... (with 2 ranks: one pair, beside the world); every rank creates every group
    pair = [dist.new_group([first, first + 1]) for first in range(0, world - 1, 2)][min(rank // 2, world // 2 - 1)]
    torch.manual_seed(rank)
    hidden = [layer for _ in range(args.depth) for layer in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())]
    model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(), *hidden,
                                torch.nn.Linear(args.width, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(args.active + 2):
            for micro in range(args.micro):
                x, y = torch.randn(args.batch, 64), torch.randn(args.batch, 8)
                with record_function("## forward ##"):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                with record_function("## backward ##"):
                    if micro == 0:
                        optimizer.zero_grad()
                    loss.backward()
            if rank == args.late_rank and args.late_ms:
                time.sleep(args.late_ms / 1000)
            with record_function("## allreduce ##"):
                grads = [param.grad for param in model.parameters()]
                if args.bucket:
                    flat = torch.cat([grad.reshape(-1) for grad in grads])
                    dist.all_reduce(flat, group=pair)
                    for grad, averaged in zip(grads, torch.split(flat / 2, [grad.numel() for grad in grads])):
                        grad.copy_(averaged.view_as(grad))
                for grad in [] if args.bucket else grads:
                    dist.all_reduce(grad, group=pair)
                    grad /= 2
            optimizer.step()
            with record_function("## exchange ##"):
                gathered = [torch.empty(4) for _ in range(world)]
                dist.all_gather(gathered, torch.full((4,), float(rank)))
                swapped = torch.empty(world * 2)
                dist.all_to_all_single(swapped, torch.arange(world * 2, dtype=torch.float32))
                dist.broadcast(swapped, src=0)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
