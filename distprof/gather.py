"""Aggregation: reduce each rank's events to a compact result where the events are, then
combine the results at rank 0 (over MPI for a live job, in one process for a post-hoc merge).

Only compact results travel: the Distributed Summary figures, lanes, step/phase bounds and
collective start/end. So memory at rank 0 grows with ranks × steps, not with events.
"""

from __future__ import annotations

import numpy as np

from . import clock
from . import events as ev
from .analyses import diagnose, distributed, skew, streams, summaries

RANK_KEYS = ("rank", "source", "source_file", "pid", "device", "rank_from")


def reduce_rank(trace: ev.RankTrace, config: dict) -> dict:
    """Everything rank 0 needs from one rank, computed next to that rank's events."""
    result = {key: getattr(trace, key) for key in RANK_KEYS}
    lane_names = trace.meta.get("lane_names")
    result.update(distributed.rank_summary(trace.events, config, lane_names))
    result.update(skew.rank_markers(trace.events, config, lane_names))
    result.update(diagnose.rank_gpu_gaps(trace.events, config))
    result["clock_offset_ns"] = int(trace.clock_offset_ns)
    result["clock_uncertainty_ns"] = int(trace.clock_uncertainty_ns)
    result["warnings"] = list(trace.warnings)
    result["meta"] = dict(trace.meta)
    result["tables"] = summaries.rank_tables(trace.events, config, trace.meta)
    return result


def assign_ranks(results: list[dict]) -> list[str]:
    """Give every result a distinct rank: known ranks stay, unknown ones get the free numbers in
    input order. Returns warnings for duplicates (the later duplicate is renumbered)."""
    warnings = []
    taken: set[int] = set()
    pending = []
    for result in results:
        if result["rank"] is None or result["rank"] in taken:
            if result["rank"] is not None:
                warnings.append(f"{result['source_file']}: rank {result['rank']} appears twice; renumbered")
                result["rank_from"] = "renumbered (duplicate)"
            pending.append(result)
        else:
            taken.add(result["rank"])
    free = (r for r in range(len(results) + len(taken)) if r not in taken)
    for result in pending:
        result["rank"] = next(free)
        if result["rank_from"] in ("unknown", None):
            result["rank_from"] = "input order"
    results.sort(key=lambda r: r["rank"])
    return warnings


def _aligned(values: list[int], offset_ns: int) -> list[int]:
    return (np.asarray(values, dtype=np.int64) + offset_ns).tolist()


def align(results: list[dict], config: dict | None = None) -> dict:
    """Put every rank's markers on the common clock (own clock + offset); raw values are kept.

    Collectives are matched across ranks first; unless ``clock.align`` is off (``--no-align``:
    the sources' own offsets are used as they are), the offsets are refined by the ends of the
    matched collectives (clock.refine_offsets) and written back to each result's
    ``clock_offset_ns``/``clock_uncertainty_ns``. Returns the matching and, per rank, how its
    offset was obtained.
    """
    ranks = [result["rank"] for result in results]
    matching = skew.match_collectives([result["collectives"] for result in results], ranks)
    clock_config = (config or {}).get("clock", {})
    initial = [(int(r["clock_offset_ns"]), int(r["clock_uncertainty_ns"])) for r in results]
    if clock_config.get("align", True) and len(results) > 1:
        reference = int(np.argmax(matching.present.any(axis=1))) if matching.size else 0
        refined = clock.refine_offsets(matching.end_ns, matching.present, [o for o, _ in initial],
                                       [u for _, u in initial], reference=reference,
                                       min_samples=int(clock_config.get("refine_min_collectives", 3)))
    else:
        reference = 0
        method = "source offset (alignment off)" if len(results) > 1 else "single rank"
        refined = [{"offset_ns": o, "uncertainty_ns": u, "method": method, "samples": 0,
                    "correction_ns": None, "spread_ns": None} for o, u in initial]
    alignment = []
    for row, (result, (offset0, uncertainty0), estimate) in enumerate(zip(results, initial, refined)):
        result["clock_offset_ns"] = estimate["offset_ns"]
        result["clock_uncertainty_ns"] = estimate["uncertainty_ns"]
        # verified: the offset rests on something (reference, collective ends, a source bound);
        # an unrefined offset from a source that states no bound (nsys, Kineto) is not
        verified = row == reference or uncertainty0 > 0 or estimate["correction_ns"] is not None
        alignment.append({"rank": result["rank"], "source_offset_ns": offset0,
                          "source_uncertainty_ns": uncertainty0, **estimate, "verified": verified})
        offset = result["clock_offset_ns"]
        result["aligned"] = {
            "step_bounds": {**result["step_bounds"],
                            "start_ns": _aligned(result["step_bounds"]["start_ns"], offset),
                            "end_ns": _aligned(result["step_bounds"]["end_ns"], offset)},
            "phases": {**result["phases"],
                       "start_ns": _aligned(result["phases"]["start_ns"], offset),
                       "end_ns": _aligned(result["phases"]["end_ns"], offset)},
            "collectives": {**result["collectives"],
                            "start_ns": _aligned(result["collectives"]["start_ns"], offset),
                            "end_ns": _aligned(result["collectives"]["end_ns"], offset)},
        }
    return {"matching": matching, "reference_rank": results[reference]["rank"] if results else None,
            "alignment": alignment}


SUMMARY_ROW_KEYS = ("rank", "source_file", "pid", "device", "rank_from", "window_ns", "steps",
                    "communication_ns", "computation_ns", "overlap_ns", "exposed_communication_ns",
                    "overlap_ratio", "idle_ns", "comm_lanes", "compute_lanes", "lanes",
                    "clock_offset_ns", "clock_uncertainty_ns")


def combine(results: list[dict], config: dict, source: str, world_size: int | None = None,
            warnings: list[str] | None = None) -> dict:
    """The job-wide summary (the content of summary.json) from per-rank results."""
    warnings = list(warnings or [])
    warnings += assign_ranks(results)
    for result in results:
        warnings += result["warnings"]
    world_size = world_size or (max((r["rank"] for r in results), default=-1) + 1)
    missing = sorted(set(range(world_size)) - {r["rank"] for r in results})
    if missing:
        warnings.append(f"partial result: no data for rank(s) {', '.join(map(str, missing))} of {world_size}")
    aligned = align(results, config)
    matching = aligned["matching"]
    warnings += matching.warnings
    rows = [{key: result.get(key) for key in SUMMARY_ROW_KEYS} for result in results]
    uncertainties = [r["clock_uncertainty_ns"] for r in results]
    steps = skew.step_skew([r["aligned"] for r in results], [r["rank"] for r in results], config)
    step_ns = (steps["steps_summary"] or {}).get("duration_median_ns")
    skew_summary = {
        "aligned": bool(config.get("clock", {}).get("align", True)),
        "reference_rank": aligned["reference_rank"], "alignment": aligned["alignment"],
        "max_clock_uncertainty_ns": max(uncertainties, default=0),
        "excluded_kinds": matching.excluded,
        **skew.collective_skew(matching, [r["clock_offset_ns"] for r in results], uncertainties, config,
                               step_ns=step_ns, verified=[a["verified"] for a in aligned["alignment"]]),
        **steps,
    }
    for kind in skew_summary["kinds"]:  # matching counts next to the skew aggregates
        kind.update({k: v for k, v in next((m for m in matching.kinds if m["name"] == kind["name"]), {}).items()
                     if k not in kind})
    checks = streams.stream_checks(results, config)
    summary = {
        "world_size": world_size,
        "source": source,
        "ranks": rows,
        "across_ranks": distributed.across_ranks(rows),
        "missing_ranks": missing,
        "checks": checks,
        "skew": skew_summary,
        "findings": diagnose.findings(results, checks, skew_summary, config),
        "warnings": warnings,
    }
    summary["tables"] = summaries.merge_tables([r.get("tables") for r in results], [r["rank"] for r in results])
    return summary


def gather_to_root(comm, result: dict) -> list[dict] | None:
    """MPI gather of the compact per-rank results; rank 0 gets the list, others None."""
    return comm.gather(result, root=0)


def torch_group_initialized() -> bool:
    """True when the job imported torch.distributed and initialized its default process group
    (looked up in sys.modules: a job without torch never imports it here)."""
    import sys
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def gather_torch(result: dict) -> list[dict] | None:
    """torch.distributed gather_object of the compact per-rank results over the job's default
    process group (gloo or NCCL; with NCCL, torch.cuda.set_device must name this rank's GPU);
    rank 0 gets the list, others None."""
    import torch.distributed as dist
    rank = dist.get_rank()
    results = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(result, results, dst=0)
    return results


_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS")
_MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def mpi_world():
    """COMM_WORLD when this process runs under an MPI launcher or MPI is already initialized,
    else None (no MPI import, so a torchrun or single process never starts MPI)."""
    import os
    import sys
    if "mpi4py.MPI" not in sys.modules and not any(v in os.environ for v in _MPI_LAUNCH_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return None
    return MPI.COMM_WORLD


def detect_world(environ=None) -> tuple[int, int, str]:
    """(rank, world size, where it came from): MPI when initialized, else launcher variables,
    else a single process."""
    import os
    comm = mpi_world() if environ is None else None
    if comm is not None:
        return comm.Get_rank(), comm.Get_size(), "MPI"
    environ = os.environ if environ is None else environ
    for rank_var in _RANK_VARS:
        if rank_var in environ:
            size = next((int(environ[v]) for v in _SIZE_VARS if v in environ), int(environ[rank_var]) + 1)
            return int(environ[rank_var]), size, f"env {rank_var}"
    return 0, 1, "single process"


def results_from_files(profiler, own_result: dict) -> list[dict] | None:
    """Aggregation without MPI (e.g. torchrun without a process group): every rank has closed
    its native file; rank 0 waits (bounded) for the others to be complete and reduces them.
    Ranks still missing at the deadline give a partial result, named in the warnings."""
    import sqlite3
    import time

    from .sources import native
    if profiler.rank != 0:
        return None
    deadline = time.monotonic() + profiler.config["collector"]["merge_timeout_s"]
    results = {0: own_result}
    while len(results) < profiler.world_size and time.monotonic() < deadline:
        for rank in range(profiler.world_size):
            path = profiler.rank_file(rank)
            if rank in results or not path.exists():
                continue
            try:
                with sqlite3.connect(path) as db:
                    complete = db.execute("SELECT value FROM distprof_meta WHERE key='complete'").fetchone()
            except sqlite3.DatabaseError:
                continue
            if complete and complete[0] == "1":
                results[rank] = reduce_rank(native.read(path, profiler.config)[0], profiler.config)
        time.sleep(0.05)
    return list(results.values())


def assign_files(sizes: list[int], workers: int) -> list[list[int]]:
    """Spread files over workers so each gets about the same bytes: largest first, each to the
    least loaded worker. Returns, per worker, its file indices in input order."""
    import heapq
    load = [(0, worker) for worker in range(workers)]
    shares: list[list[int]] = [[] for _ in range(workers)]
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, worker = heapq.heappop(load)
        shares[worker].append(index)
        heapq.heappush(load, (total + sizes[index], worker))
    return [sorted(share) for share in shares]
