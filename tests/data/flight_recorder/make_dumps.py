"""Make the Flight Recorder dumps of tests/data/flight_recorder/ (real gloo jobs on CPU, 4 ranks).

    python tests/data/flight_recorder/make_dumps.py [SCENARIO ...]    # default: all of them

Each scenario runs ``torchrun --nproc-per-node 4`` on this file. Every rank starts a timer thread that, a few
seconds after the ranks stop making progress, writes its Flight Recorder dump in both forms (JSON from
``_dump_fr_trace_json``, pickle from ``_dump_fr_trace`` under the watchdog's file name ``nccl_trace_rank_<r>``)
and ends the process, so the job ends on its own.

Scenarios:
  missing   rank 2 never issues the 3rd allreduce of the world group (it goes on to other work)
  size      rank 1 passes a tensor of 5 elements to the 3rd allreduce where the others pass 4
  tp_dp     TP groups {0,1},{2,3} and DP groups {0,2},{1,3}; every step a TP then a DP allreduce; rank 3
            stops before its TP allreduce of step 2: rank 2 waits on it in TP, rank 1 in DP, rank 0 on rank 2 in DP
  a2a_missing  an MoE step: expert-parallel dispatch and combine (all_to_all_single with the uneven splits a router
            makes) in group "expert_parallel", then the data-parallel allreduce; rank 2 never issues the dispatch
            of step 2 (its host stalls before it: data loading, Python)
  a2a_stall the same job; rank 1 issues the dispatch of step 2 and its data moves, but the backend thread that ran
            it is held by a blocking completion callback (as a comm hook can), so the dispatch never completes on
            rank 1 while ranks 0, 2, 3 complete it and wait in the combine for rank 1, which never issues it. Gloo
            records no start (every entry stays "scheduled"; "retired" marks completion), so "issued, never
            completed" is what gloo can show; "never started" needs a backend with device events (NCCL)
  a2a_rows  the same job; at step 2 rank 3 expects one row more from rank 0 than rank 0 sends (its output split
            is off by one): gloo completes the dispatch anyway and the job runs on, so no hang, but the rows its
            members sent (60) and received (61) do not add up
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ("missing", "size", "tp_dp", "a2a_missing", "a2a_stall", "a2a_rows")
WIDTH = 8  # the width of a token (an MoE layer's hidden size)
DUMP_AFTER_S = 6.0  # from the start of the collectives: they all finish (or hang) well before this


def dump_and_exit(out: Path, rank: int, delay_s: float) -> None:
    """After ``delay_s``: this rank's dump in both forms, then end the process (the hung call never returns)."""
    time.sleep(delay_s)
    import torch._C._distributed_c10d as c10d
    (out / f"rank{rank}.json").write_bytes(c10d._dump_fr_trace_json())
    (out / f"nccl_trace_rank_{rank}").write_bytes(c10d._dump_fr_trace(includeStackTraces=False))
    sys.stdout.flush()
    os._exit(0)


def run_missing(rank: int, dist, torch) -> None:
    for i in range(4):
        if rank == 2 and i == 2:
            time.sleep(60)  # "other work": the dump comes first
        dist.all_reduce(torch.ones(4))


def run_size(rank: int, dist, torch) -> None:
    for i in range(4):
        size = 5 if (rank == 1 and i == 2) else 4
        dist.all_reduce(torch.ones(size))


def run_tp_dp(rank: int, dist, torch) -> None:
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group, same order
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    for step in range(4):
        if rank == 3 and step == 2:
            time.sleep(60)
        dist.all_reduce(torch.ones(8), group=tp)
        dist.all_reduce(torch.ones(16), group=dp)


def router_split(rank: int, step: int, world: int) -> list[int]:
    """The rows (tokens) ``rank`` sends to each expert rank at ``step``: uneven, and different on every rank, as
    an MoE router makes them."""
    return [1 + (3 * rank + 5 * peer + 7 * step) % 6 for peer in range(world)]


def moe_step(rank: int, step: int, dist, torch, ep, stall=None, off_by: int = 0) -> None:
    """One MoE step: dispatch the tokens to their experts, the experts' work, combine them back (the reverse
    split), then the data-parallel allreduce; ``stall`` is a callback run when the dispatch completes, ``off_by``
    rows more expected from rank 0 in the dispatch than it sends."""
    world = dist.get_world_size(ep)
    send = router_split(rank, step, world)
    recv = [router_split(peer, step, world)[rank] + (off_by if peer == 0 else 0) for peer in range(world)]
    dispatched = torch.empty(sum(recv), WIDTH)
    work = dist.all_to_all_single(dispatched, torch.ones(sum(send), WIDTH), recv, send, group=ep, async_op=True)
    if stall is not None:
        work.get_future().then(stall)
    work.wait()
    recv[0] -= off_by
    dist.all_to_all_single(torch.empty(sum(send), WIDTH), dispatched[:sum(recv)] * 2, send, recv, group=ep)
    dist.all_reduce(torch.ones(16))


def run_a2a_missing(rank: int, dist, torch) -> None:
    ep = dist.new_group([0, 1, 2, 3], group_desc="expert_parallel")
    for step in range(4):
        if rank == 2 and step == 2:
            time.sleep(60)  # the host stalls before the dispatch: the dump comes first
        moe_step(rank, step, dist, torch, ep)


def run_a2a_stall(rank: int, dist, torch) -> None:
    ep = dist.new_group([0, 1, 2, 3], group_desc="expert_parallel")
    for step in range(4):
        held = rank == 1 and step == 2
        moe_step(rank, step, dist, torch, ep, stall=(lambda _: time.sleep(60)) if held else None)


def run_a2a_rows(rank: int, dist, torch) -> None:
    ep = dist.new_group([0, 1, 2, 3], group_desc="expert_parallel")
    for step in range(4):
        moe_step(rank, step, dist, torch, ep, off_by=1 if (rank == 3 and step == 2) else 0)


def rank_main(scenario: str, out: Path) -> None:
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    dist.barrier()
    threading.Thread(target=dump_and_exit, args=(out, rank, DUMP_AFTER_S), daemon=True).start()
    try:
        {"missing": run_missing, "size": run_size, "tp_dp": run_tp_dp, "a2a_missing": run_a2a_missing,
         "a2a_stall": run_a2a_stall, "a2a_rows": run_a2a_rows}[scenario](rank, dist, torch)
    except Exception as error:  # noqa: BLE001 - a failing collective still leaves its dump
        print(f"rank {rank}: {type(error).__name__}: {str(error).splitlines()[0][:200]}", flush=True)
    time.sleep(60)  # the dump thread ends the process


def launch(scenario: str) -> None:
    out = HERE / scenario
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "64"}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                    "--master-port", str(29500 + SCENARIOS.index(scenario)), __file__, "--rank", scenario, str(out)],
                   env=env, check=False, timeout=90)
    print(f"{scenario}: {len(list(out.iterdir()))} files in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], Path(sys.argv[3]))
    else:
        for name in sys.argv[1:] or SCENARIOS:
            launch(name)
