"""Kernel-table ingest of the nsys reader versus ``pandas.read_sql_query`` of the same columns on
the same file, and peak memory of a merge of 8 files versus 1, measured in one run.
Targets: ingest >= 3x faster than read_sql_query; peak RSS(8 files) / peak RSS(1 file) ~ 1.

The exports are synthetic, written with the real nsys 2026.2 DDL (tests/nsys_fixtures.py) into a
temporary folder: one with ``--kernels`` kernels (each with its launch call, NCCL kernels on a
second stream, ProfileStep ranges), and ``--files`` with ``--merge-kernels`` each. The two timed
paths alternate for ``--rounds`` rounds and each keeps its best round, so a busy machine slows
both alike. Peak RSS is measured in fresh child processes that read and reduce the files one at
a time, keeping only the compact per-rank results, as ``distprof merge`` does.

    python benchmarks/nsys_ingest.py [--kernels 2000000] [--rounds 5] [--files 8] [--merge-kernels 500000]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from distprof import config as config_module
from distprof import pipeline, sources
from distprof.sources import nsys, read_only_uri

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import nsys_fixtures  # noqa: E402  (the synthetic-export writer lives with the tests)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when imported (tests import merge_scale)
from _memory import peak_rss_mib  # noqa: E402

KERNEL_COLUMNS = "start, end, deviceId, streamId, correlationId, globalPid, shortName"


def read_sql_query(path: Path) -> int:
    with read_only_uri(path) as uri, contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
        frame = pd.read_sql_query(f"SELECT {KERNEL_COLUMNS} FROM {nsys.KERNEL_TABLE}", connection)
    return len(frame)


def read_with_distprof(path: Path, config: dict) -> int:
    return len(nsys.read_kernel_table(path, config)["start"])


def best_of(rounds: int, *variants):
    """Interleaved rounds; for each variant its best wall time, best CPU time (all threads of
    this process: the work done, which other jobs on the machine disturb less) and row count."""
    wall = [float("inf")] * len(variants)
    cpu = [float("inf")] * len(variants)
    counts = [0] * len(variants)
    for _ in range(rounds):
        for index, variant in enumerate(variants):
            gc.collect()
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            counts[index] = variant()
            cpu[index] = min(cpu[index], time.process_time() - cpu_start)
            wall[index] = min(wall[index], time.perf_counter() - wall_start)
    return wall, cpu, counts


def merge_child(paths: list[str]) -> None:
    """Child process: read and reduce each file in turn, keep the compact results only."""
    config = config_module.load()
    results = []
    for path in paths:
        for trace in sources.read(path, config):
            results.append(pipeline.reduce_rank(trace, config))
            del trace
        gc.collect()
    results_mb = len(pickle.dumps(results)) / 2**20  # what would travel to rank 0
    summary = pipeline.combine(results, config, source="nsys")
    print(json.dumps({"peak_rss_mb": peak_rss_mib(), "ranks": len(summary.ranks), "results_mb": results_mb}))


def merge_peak(paths: list[Path]) -> dict:
    command = [sys.executable, __file__, "--merge-child", *map(str, paths)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--merge-kernels", type=int, default=500_000)
    parser.add_argument("--merge-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_child:
        merge_child(args.merge_child)
        return
    if not nsys_fixtures.ddl_available():
        sys.exit(f"nsys DDL folder {nsys_fixtures.DDL_DIR} is absent: set DISTPROF_NSYS_DATA")
    config = config_module.load()

    with tempfile.TemporaryDirectory(prefix="distprof-nsys-bench-") as folder:
        big = Path(folder) / "big.sqlite"
        started = time.perf_counter()
        nsys_fixtures.bulk_kernels(big, args.kernels)
        print(f"synthetic export: {args.kernels:,} kernels + launch calls, nsys 2026.2 DDL, "
              f"{big.stat().st_size / 2**20:.0f} MiB, written in {time.perf_counter() - started:.1f} s")
        read_sql_query(big)  # warm the page cache for both
        (ours, theirs), (ours_cpu, theirs_cpu), (ours_rows, theirs_rows) = best_of(
            args.rounds, lambda: read_with_distprof(big, config), lambda: read_sql_query(big))
        assert ours_rows == theirs_rows == args.kernels, (ours_rows, theirs_rows)
        print(f"kernel ingest ({KERNEL_COLUMNS}), best of {args.rounds} interleaved rounds:")
        print(f"  pandas.read_sql_query  wall {theirs:7.3f} s  {args.kernels / theirs / 1e6:6.2f} M kernels/s"
              f"   cpu {theirs_cpu:7.3f} s")
        print(f"  distprof nsys reader   wall {ours:7.3f} s  {args.kernels / ours / 1e6:6.2f} M kernels/s"
              f"   cpu {ours_cpu:7.3f} s  ({nsys.MAX_WORKERS} threads at most, {os.cpu_count()} CPUs)")
        print(f"  ratio, wall: {theirs / ours:.2f}x   cpu: {theirs_cpu / ours_cpu:.2f}x   (target >= 3x)")

        started = time.perf_counter()
        traces = nsys.read(big, config)
        whole = time.perf_counter() - started
        rows = sum(len(trace.events) for trace in traces)
        print(f"whole nsys.read (kernels, launch calls, NVTX, phases, event table): {whole:.3f} s, "
              f"{rows:,} event rows, {rows / whole / 1e6:.2f} M rows/s")
        del traces
        big.unlink()

        paths = []
        for index in range(args.files):
            path = Path(folder) / f"rank{index}.sqlite"
            nsys_fixtures.bulk_kernels(path, args.merge_kernels, rank=index)
            paths.append(path)
        one = merge_peak(paths[:1])
        many = merge_peak(paths)
        print(f"merge peak RSS ({args.merge_kernels:,} kernels per file, one file at a time):")
        print(f"  1 file   {one['peak_rss_mb']:7.0f} MiB")
        print(f"  {args.files} files  {many['peak_rss_mb']:7.0f} MiB   ({many['ranks']} ranks in the summary; "
              f"the kept per-rank results pickle to {many['results_mb']:.0f} MiB, "
              f"{one['results_mb']:.1f} MiB for one rank)")
        print(f"  ratio {args.files} files / 1 file: {many['peak_rss_mb'] / one['peak_rss_mb']:.2f}   (target ~1)")


if __name__ == "__main__":
    main()
