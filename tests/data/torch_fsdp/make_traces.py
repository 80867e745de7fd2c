"""Make the real FSDP2 (CPU, gloo) PyTorch profiler traces in this folder: a 2-rank job under torchrun.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node 2 make_traces.py --out DIR \
        [--late-rank 1 --late-ms 20] [--active 4]

Each rank: an MLP of ``--depth`` Linear layers, each layer and then the whole model under torch FSDP2
``fully_shard`` (parameters sharded across the 2 ranks: forward all-gathers each layer's parameters,
backward all-gathers them again, the next layer's ahead (FSDP's backward prefetch), and reduce-scatters
the gradients; on CPU, FSDP2 waits for each all-gather as soon as it is issued, and gloo runs a
reduce-scatter as an all-reduce, ``gloo:all_reduce``, issued by ``c10d::_reduce_scatter_base_``),
``## forward ##`` / ``## backward ##`` / ``## optimizer ##`` ranges, ``torch.profiler`` (CPU activity,
record_shapes, no stacks) with a schedule (wait=1, warmup=1, active=N). ``--late-rank R --late-ms MS``:
rank R sleeps MS inside its forward every step, after the first layer (so inside the span of FSDP's
all-gathers). Each rank writes ``DIR/rank<R>.json.gz``.
"""

import argparse
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--late-rank", type=int, default=1)
    parser.add_argument("--late-ms", type=float, default=0.0, help="sleep in forward on --late-rank (0: none)")
    parser.add_argument("--active", type=int, default=4, help="profiled steps")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4, help="Linear layers, each its own FSDP unit")
    parser.add_argument("--batch", type=int, default=64)
    return parser.parse_args()


class Net(torch.nn.Module):
    """Linear layers with ReLU between; ``late_s`` seconds of sleep after the first (the injected host delay)."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.late_s = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if index == 0 and self.late_s:
                time.sleep(self.late_s)
        return x


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = Net(args.width, args.depth)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.late_s = args.late_ms / 1000 if rank == args.late_rank else 0.0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    generator = torch.Generator().manual_seed(rank)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(args.active + 2):
            x = torch.randn(args.batch, args.width, generator=generator)
            with record_function("## forward ##"):
                loss = model(x).square().mean()
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
