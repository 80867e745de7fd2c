"""Make the real expert-parallel (MoE all-to-all, CPU, gloo) PyTorch profiler traces in this folder.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node 2 make_traces.py --out DIR \
        [--hot-rank 1 --hot-weight 2.0] [--active 5]

Each rank holds one expert (a small MLP) of an expert-parallel group of all ranks (``dist.new_group``) and a
batch of ``--tokens`` tokens of ``--hidden`` floats. Per step, in ``## forward ##``: ``moe.router`` picks each
token's expert (a seeded draw, weight ``--hot-weight`` for ``--hot-rank``'s expert, 1 for the others: the
router's skew), ``moe.dispatch`` exchanges the per-expert counts (an even ``all_to_all_single`` of one int64
per peer) and then the tokens (``all_to_all_single`` with uneven ``input_split_sizes``/``output_split_sizes``:
the MoE pattern), ``moe.expert`` runs the expert on the tokens it received (its time grows with them),
``moe.combine`` sends the outputs back (the reverse splits); in ``## optimizer ##`` the router's weights are
averaged over the default group (the data-parallel all-reduce). ``torch.profiler`` (CPU activity,
record_shapes) with a schedule (wait=1, warmup=2, active=N); each rank writes ``DIR/rank<R>.json.gz`` and
``DIR/splits<R>.json`` (the split sizes it used per profiled step, to check the trace against).
"""

import argparse
import gzip
import json
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--hot-rank", type=int, default=1)
    parser.add_argument("--hot-weight", type=float, default=1.0, help="the router's weight of --hot-rank's expert")
    parser.add_argument("--active", type=int, default=5, help="profiled steps")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--expert-width", type=int, default=4096, help="the expert MLP's inner width")
    return parser.parse_args()


def step(expert: torch.nn.Module, router: torch.Tensor, ep_group, weights: torch.Tensor, args,
         generator) -> list[list[int]]:
    """One MoE step; returns [input splits, output splits] of the token all-to-all."""
    world = dist.get_world_size()
    with record_function("## forward ##"):
        with record_function("moe.router"):
            tokens = torch.randn(args.tokens, args.hidden, generator=generator)
            expert_of = torch.multinomial(weights, args.tokens, replacement=True, generator=generator)
            tokens = tokens[torch.argsort(expert_of, stable=True)]
            send_counts = torch.bincount(expert_of, minlength=world)
        with record_function("moe.dispatch"):
            recv_counts = torch.empty_like(send_counts)
            dist.all_to_all_single(recv_counts, send_counts, group=ep_group)
            in_splits, out_splits = send_counts.tolist(), recv_counts.tolist()
            received = torch.empty(sum(out_splits), args.hidden)
            dist.all_to_all_single(received, tokens, output_split_sizes=out_splits, input_split_sizes=in_splits,
                                   group=ep_group)
        with record_function("moe.expert"), torch.no_grad():
            done = expert(received)
        with record_function("moe.combine"):
            back = torch.empty(args.tokens, args.hidden)
            dist.all_to_all_single(back, done, output_split_sizes=in_splits, input_split_sizes=out_splits,
                                   group=ep_group)
    with record_function("## optimizer ##"):
        dist.all_reduce(router)
        router /= world
    return [in_splits, out_splits]


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ep_group = dist.new_group(list(range(world)))
    torch.manual_seed(0)
    expert = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.expert_width), torch.nn.ReLU(),
                                 torch.nn.Linear(args.expert_width, args.hidden))
    router = torch.randn(args.hidden, world)
    weights = torch.ones(world)
    weights[args.hot_rank] = args.hot_weight
    generator = torch.Generator().manual_seed(1000 + rank)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    splits: list = []

    def ready(prof) -> None:
        raw = out / f"rank{rank}.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as source, gzip.open(f"{raw}.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        raw.unlink()

    total = args.active + 3
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=False,
                 schedule=schedule(wait=1, warmup=2, active=args.active, repeat=1), on_trace_ready=ready) as prof:
        for index in range(total):
            used = step(expert, router, ep_group, weights, args, generator)
            if index >= 3:
                splits.append(used)
            prof.step()
    (out / f"splits{rank}.json").write_text(json.dumps(splits) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
