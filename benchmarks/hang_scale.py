"""`distprof hang` at thousands of ranks, timed as a user runs it (issue 38, point 6).

Targets: 1,024 ranks with every dump under 1 s; 10,000 ranks with half the dumps missing under 10 s and 500 MiB
(peak RSS of the whole `python -m distprof hang` process); the text stays short (rank ranges, capped sections).

The job is synthetic, written in the schema of ``_dump_fr_trace_json`` as the real dumps of
tests/data/flight_recorder have it (same keys, sizes as lists, pg_status as text), with NCCL's pg_config (each
group's ranks stated as the text "[0, 1, ...]", the world's in every dump: what made the old reader N^2).
A job of N ranks (``--sizes N:MISSING``) in TP groups of ``--tp`` consecutive ranks and DP groups of the ranks
with the same TP index: a world barrier, then ``--steps`` steps of a TP all_reduce and a DP all_reduce (``--tp
0``: the world group only, an all_reduce a step). The stuck rank (N - 1 - tp/2) stops before its TP all_reduce
of the last step: its TP peers wait for it, and every DP group waits for the peer stuck in that TP group. MISSING
drops the dumps of that fraction of the ranks, the upper ones (the stuck one among them): "half the nodes' dumps
never arrived". By construction the root is the stuck rank when its dump is there, and the ranks without a dump
that are awaited when it is not.

    python benchmarks/hang_scale.py                       # 1,024 all dumped; 10,000 with half missing
    python benchmarks/hang_scale.py --sizes 4096:0 --keep /tmp/hang4096
    python benchmarks/hang_scale.py --worker OUT.json hang DIR -o OUT   # (internal) one measured run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_795_469_762_000_000_000  # unix ns, as the real dumps' clock
STEP_NS = 100_000_000


def _entry(record: int, pg_id: int, group: str, seq: int, kind: str, size: int, created: int, done: bool) -> str:
    state, retired, found = ("completed", "true", created + 50_000) if done else ("scheduled", "false", 0)
    return (f'{{"collective_seq_id": {seq}, "input_dtypes": ["Float"], "input_sizes": [[{size}]], "is_p2p": false, '
            f'"op_id": {seq}, "output_dtypes": ["Float"], "output_sizes": [[{size}]], "p2p_seq_id": 0, '
            f'"pg_id": {pg_id}, "process_group": ["{group}", "undefined"], "profiling_name": "nccl:{kind}", '
            f'"record_id": {record}, "retired": {retired}, "state": "{state}", "thread_id": "140697367460736", '
            f'"thread_name": "python", "time_created_ns": {created}, "time_discovered_completed_ns": {found}, '
            f'"time_discovered_started_ns": {created + 10_000}, "timeout_ms": 600000}}')


class Job:
    """The groups of a TP x DP job of ``ranks`` ranks: names as torch numbers them (world "0", then the TP
    groups, then the DP groups), each group's ranks text made once."""

    def __init__(self, ranks: int, tp: int) -> None:
        if tp and ranks % tp:
            raise SystemExit(f"--ranks {ranks} is not a multiple of --tp {tp}")
        self.ranks, self.tp = ranks, tp
        self.world_text = json.dumps(list(range(ranks)))
        tp = tp or ranks  # --tp 0: the world group only
        self.tp_text = [json.dumps(list(range(g * tp, g * tp + tp))) for g in range(ranks // tp)]
        self.dp_text = [json.dumps(list(range(d, ranks, tp))) for d in range(tp)]

    def tp_name(self, rank: int) -> str:
        return str(1 + rank // self.tp)

    def dp_name(self, rank: int) -> str:
        return str(1 + self.ranks // self.tp + rank % self.tp)

    def pg_config(self, rank: int) -> str:
        if not self.tp:
            return json.dumps({"0": {"name": "0", "desc": "default_pg", "ranks": self.world_text}})
        return json.dumps({"0": {"name": "0", "desc": "default_pg", "ranks": self.world_text},
                           self.tp_name(rank): {"name": self.tp_name(rank), "desc": "undefined",
                                                "ranks": self.tp_text[rank // self.tp]},
                           self.dp_name(rank): {"name": self.dp_name(rank), "desc": "undefined",
                                                "ranks": self.dp_text[rank % self.tp]}})


def dump_text(job: Job, rank: int, steps: int, stuck: int) -> str:
    """One rank's dump: barrier, then per step TP then DP all_reduce; the stuck rank's TP group never completes
    the last TP all_reduce (the stuck rank never issues it), so no one completes the last DP all_reduce."""
    tp_stuck = rank // job.tp == stuck // job.tp
    entries = [_entry(0, 0, "0", 1, "barrier", 0, T0 + rank, True)]
    done = {0: 1, 1: 0, 2: 0}
    for step in range(steps):
        last, at = step == steps - 1, T0 + (step + 1) * STEP_NS + rank
        if last and rank == stuck:
            break
        tp_done = not (last and tp_stuck)
        entries.append(_entry(len(entries), 1, job.tp_name(rank), step + 1, "all_reduce", 8, at, tp_done))
        done[1] += tp_done
        if last and tp_stuck:
            break
        entries.append(_entry(len(entries), 2, job.dp_name(rank), step + 1, "all_reduce", 16, at + 1000, not last))
        done[2] += not last
    enqueued = {0: 1, 1: steps if rank != stuck else steps - 1, 2: steps - (1 if tp_stuck else 0)}
    status = {str(pg): {"last_completed_collective": str(done[pg]), "last_enqueued_collective": str(enqueued[pg]),
                        "last_started_collective": "-1"} for pg in (0, 1, 2)}
    return (f'{{"comm_lib_version": "2.21.5", "entries": [{", ".join(entries)}], "nccl_comm_state": {{}}, '
            f'"pg_config": {job.pg_config(rank)}, "pg_status": {json.dumps(status)}, "version": "2.10"}}')


def world_dump_text(job: Job, rank: int, steps: int, stuck: int) -> str:
    """One rank's dump of a job with the world group only: barrier, then an all_reduce per step; the stuck rank
    never issues the last one, which the others issued and wait in."""
    entries = [_entry(0, 0, "0", 1, "barrier", 0, T0 + rank, True)]
    for step in range(steps):
        last = step == steps - 1
        if last and rank == stuck:
            break
        entries.append(_entry(len(entries), 0, "0", step + 2, "all_reduce", 8, T0 + (step + 1) * STEP_NS + rank,
                              not last))
    status = {"0": {"last_completed_collective": str(steps), "last_enqueued_collective": str(len(entries)),
                    "last_started_collective": "-1"}}
    return (f'{{"comm_lib_version": "2.21.5", "entries": [{", ".join(entries)}], "nccl_comm_state": {{}}, '
            f'"pg_config": {job.pg_config(rank)}, "pg_status": {json.dumps(status)}, "version": "2.10"}}')


def write_job(out: Path, ranks: int, tp: int = 8, steps: int = 8, stuck: int | None = None,
              missing: float = 0.0) -> dict:
    """Write rank<r>.json for every rank but the upper ``missing`` fraction (``tp`` 0: the world group only);
    what it wrote, by construction."""
    job = Job(ranks, tp)
    stuck = ranks - 1 - tp // 2 if stuck is None else stuck
    kept = ranks - int(ranks * missing)
    out.mkdir(parents=True, exist_ok=True)
    make = dump_text if tp else world_dump_text
    for rank in range(kept):
        (out / f"rank{rank}.json").write_text(make(job, rank, steps, stuck))
    return {"ranks": ranks, "tp": tp, "steps": steps, "stuck": stuck, "dumped": kept,
            "tp_group": job.tp_name(stuck) if tp else None, "dp_group": job.dp_name(stuck) if tp else None}


def worker(argv: list[str]) -> int:
    """One measured `distprof hang` in this process: its wall and CPU time (interpreter start and imports
    included in the CPU time) and peak RSS (VmHWM) into argv[0]."""
    started = time.perf_counter()
    from distprof.cli import main
    code = main(argv[1:])
    wall = time.perf_counter() - started
    hwm = next((int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:")), 0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(argv[0]).write_text(json.dumps({"code": code, "in_process_s": wall, "peak_rss_mib": hwm / 1024,
                                         "cpu_s": usage.ru_utime + usage.ru_stime}))
    return code


def measure(folder: Path, out: Path) -> dict:
    """`python -m distprof hang` as a user runs it (through --worker, to read the process's own VmHWM)."""
    figures = out / "figures.json"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--worker", str(figures), "hang", str(folder), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    result = json.loads(figures.read_text()) if figures.exists() else {"code": done.returncode}
    return {**result, "wall_s": wall, "stdout_lines": len(done.stdout.splitlines()), "stdout": done.stdout,
            "stderr": done.stderr[-2000:]}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024:0,10000:0.5", help="RANKS:MISSING_FRACTION,... (default: %(default)s)")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--keep", default=None, help="write the dumps here and keep them")
    parser.add_argument("--show", action="store_true", help="print each run's text")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hang_scale_"))
    try:
        for spec in args.sizes.split(","):
            ranks, missing = spec.split(":")
            folder = base / f"r{ranks}_m{missing}"
            shutil.rmtree(folder, ignore_errors=True)
            made = time.perf_counter()
            truth = write_job(folder / "dumps", int(ranks), args.tp, args.steps, missing=float(missing))
            made = time.perf_counter() - made
            figures = measure(folder / "dumps", folder / "out")
            print(f"{ranks} ranks, {truth['dumped']} dumped (stuck rank {truth['stuck']}): exit {figures['code']}, "
                  f"{figures['wall_s']:.2f} s wall ({figures.get('in_process_s', 0):.2f} s in the command, "
                  f"{figures.get('cpu_s', 0):.2f} s CPU), peak RSS "
                  f"{figures.get('peak_rss_mib', 0):.0f} MiB, {figures['stdout_lines']} lines of text "
                  f"(dumps written in {made:.1f} s; load {os.getloadavg()[0]:.1f})", flush=True)
            if args.show or figures["code"]:
                print(figures["stdout"] + figures["stderr"])
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
