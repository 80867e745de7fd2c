"""Make the real CPU (gloo) PyTorch profiler traces in this folder: a 2-rank DDP job under torchrun.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node 2 make_traces.py OUT_DIR

Each rank: an MLP of known shape (``--layers`` x Linear(``--width``, ``--width``) with ReLU between,
batch ``--batch``), wrapped in DistributedDataParallel (gloo), ``## forward ##`` /
``## backward ##`` / ``## optimizer ##`` ranges, SGD. ``torch.profiler`` (CPU activities,
``record_shapes=True``, ``profile_memory=True``; ``with_flops`` only with ``--with-flops``: torch 2.13
writes no ``flops`` args into the exported JSON, so the traces here are made without it) with a
schedule of wait 1, warmup 1, active ``--active`` writes one Kineto JSON per rank,
gzip-compressed: ``rank<N>.json.gz``.

The GEMM FLOPs of one step are known by construction: forward = layers x 2 x batch x width²;
backward = 2 x forward minus the first layer's input gradient (its input needs no gradient).
"""

import argparse
import gzip
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=4, help="Linear layers (the traces here: 4)")
    parser.add_argument("--width", type=int, default=1024, help="in = out features (the traces here: 1024)")
    parser.add_argument("--batch", type=int, default=64, help="samples per step (the traces here: 64)")
    parser.add_argument("--active", type=int, default=3, help="profiled steps (the traces here: 3)")
    parser.add_argument("--with-flops", action="store_true", help="Kineto's own flops args (with_flops=True)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = []
    for index in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width)] + ([torch.nn.ReLU()] if index < args.layers - 1 else [])
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    torch.manual_seed(rank)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 with_flops=args.with_flops, on_trace_ready=ready,
                 schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1)) as prof:
        for _ in range(args.active + 2):
            x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
            with record_function("## forward ##"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with record_function("## backward ##"):
                optimizer.zero_grad()
                loss.backward()
            with record_function("## optimizer ##"):
                optimizer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
