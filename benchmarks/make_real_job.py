"""Make 8 small REAL Kineto ranks for the merge benchmarks: a recommendation-style model
(sparse EmbeddingBag features + a dense MLP, concatenated, then a top MLP) trained under
``DistributedDataParallel`` (CPU, gloo) by torchrun, profiled by ``torch.profiler`` for a few
steps (record_shapes on), one Chrome trace per rank, gzipped.

    python benchmarks/make_real_job.py [--out benchmarks/.traces/recsys8] [--ranks 8] [--active 3]

It re-launches itself under ``torch.distributed.run`` (``--nproc-per-node RANKS``, one host), so
it runs on a laptop; each rank writes ``OUT/rank<R>.pt.trace.json.gz`` (a few thousand to ~25k
events a rank). The folder is gitignored: traces are made, not kept.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / ".traces" / "recsys8"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--active", type=int, default=3, help="profiled steps")
    parser.add_argument("--tables", type=int, default=8, help="sparse features (one EmbeddingBag each)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per embedding table")
    parser.add_argument("--dim", type=int, default=32, help="embedding dimension")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def build(args: argparse.Namespace):
    """Sparse tables + bottom MLP + top MLP, the shape of a DLRM-like model."""
    import torch

    class RecSys(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(args.rows, args.dim, mode="sum")
                                              for _ in range(args.tables))
            self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 128), torch.nn.ReLU(),
                                              torch.nn.Linear(128, args.dim), torch.nn.ReLU())
            width = args.dim * (args.tables + 1)
            self.top = torch.nn.Sequential(torch.nn.Linear(width, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64),
                                           torch.nn.ReLU(), torch.nn.Linear(64, 1))

        def forward(self, dense, indices, offsets):
            sparse = [table(indices[i], offsets[i]) for i, table in enumerate(self.tables)]
            return self.top(torch.cat([self.bottom(dense), *sparse], dim=1))

    torch.manual_seed(0)
    return RecSys()


def batch(args: argparse.Namespace, generator):
    """Dense features, per-table bag indices (1-5 ids a sample) and offsets, labels."""
    import torch
    dense = torch.randn(args.batch, 13, generator=generator)
    indices, offsets = [], []
    for _ in range(args.tables):
        lengths = torch.randint(1, 6, (args.batch,), generator=generator)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
        indices.append(torch.randint(0, args.rows, (int(lengths.sum()),), generator=generator))
    return dense, indices, offsets, torch.randint(0, 2, (args.batch, 1), generator=generator).float()


def worker(args: argparse.Namespace) -> None:
    """One rank: DDP training, profiled for ``args.active`` steps."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(build(args), bucket_cap_mb=4)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(rank)
    out = Path(args.out)

    def ready(prof) -> None:
        raw = out / f"rank{rank}.pt.trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=1, active=args.active, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(args.active + 2):
            dense, indices, offsets, labels = batch(args, generator)
            with record_function("## forward ##"):
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, indices, offsets), labels)
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def launch(args: argparse.Namespace) -> None:
    """This script again under torchrun, ``--ranks`` processes on this host."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.pt.trace.json*"):
        old.unlink()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.ranks),
               "--master-port", "29517", __file__, "--worker", *sys.argv[1:]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env)
    if done.returncode != 0:
        sys.exit(f"torchrun failed (exit {done.returncode}): {' '.join(command)}")
    written = sorted(out.glob("rank*.pt.trace.json.gz"))
    print(f"{len(written)} rank traces in {out} ({sum(p.stat().st_size for p in written) / 2**20:.1f} MiB gzipped)")


if __name__ == "__main__":
    arguments = parse()
    worker(arguments) if arguments.worker else launch(arguments)
