"""Diagnosis: turn the checks, the skew and per-rank figures into findings.

Each finding says what is wrong, the figure it describes (``figure_ns``: e.g. the exposed
communication or the waits a straggler causes, per step where the trace has steps) and what to
change. Its cost, severity and order come from one place, analyses/cost.py: what the what-if
replay says its fix saves. One per-rank reduction lives here too (``rank_gpu_gaps``), run next to
the rank's events like the other reductions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import events as ev
from ..results import RankResult
from ..sources.joins import launch_join
from ..units import duration
from . import collectives as collectives_mod
from . import intervals as iv
from .distributed import analysis_window, is_gpu_trace, work_masks

_GPU_WORK = (ev.KERNEL, ev.MEMCPY, ev.MEMSET)


def _pct(part: float, whole: float | None) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


# -- per rank: host-bound GPU gaps ---------------------------------------------------------

def rank_gpu_gaps(events: pd.DataFrame, config: dict) -> dict:
    """Idle gaps between GPU work on each device, and the host-bound part of them.

    A gap is the time between two busy periods of a device (all its streams together) inside
    the analysis window. It is host-bound when the kernel that ends it was launched (its
    runtime call, joined by ``sources.joins.launch_join``) at or after the gap began: the GPU had
    nothing queued and waited for the CPU. Kernels whose launch is
    unknown are not counted as host-bound. The time the host spends in communication (MPI,
    gloo) is not host-bound (the CPU waits for the network, not its own launches): it is
    ``host_comm_ns``. ``{"gpu_gaps": None}`` on host-only traces.
    """
    if not len(events) or not is_gpu_trace(events):
        return {"gpu_gaps": None}
    window = analysis_window(events, config["window"])
    kind = events["kind"].to_numpy()
    work = np.flatnonzero(np.isin(kind, _GPU_WORK))
    calls = np.flatnonzero(kind == ev.RUNTIME)
    correlation, pid = events["correlation_id"].to_numpy(), events["pid"].to_numpy()
    launched = launch_join(correlation[work], correlation[calls], pid[work], pid[calls])
    launch_ns = np.where(launched >= 0, events["start_ns"].to_numpy()[calls[np.maximum(launched, 0)]]
                         if calls.size else 0, np.nan)
    comm_mask, _ = work_masks(events, config)
    host_comm = comm_mask & (events["lane_kind"].to_numpy() == ev.HOST_THREAD)
    host_comm_set = iv.union(events["start_ns"].to_numpy()[host_comm], events["end_ns"].to_numpy()[host_comm])
    rows = pd.DataFrame({"device": events["device"].to_numpy()[work], "start_ns": events["start_ns"].to_numpy()[work],
                         "end_ns": events["end_ns"].to_numpy()[work], "launch_ns": launch_ns})
    devices, totals = [], {"gaps": 0, "idle_ns": 0, "host_bound_gaps": 0, "host_bound_ns": 0, "host_comm_ns": 0,
                           "busy_ns": 0}
    for device in np.unique(rows["device"].to_numpy()):  # one iteration per device
        row = _device_gaps(rows[rows["device"].to_numpy() == device], window, host_comm_set)
        devices.append({"device": int(device), **row})
        for key in totals:
            totals[key] += row[key]
    return {"gpu_gaps": {**totals, "window_ns": iv.total(window), "devices": devices}}


def _device_gaps(rows: pd.DataFrame, window: iv.IntervalSet, host_comm: iv.IntervalSet) -> dict:
    """The gaps of one device's GPU work (rows: start_ns, end_ns, launch_ns; NaN = unknown)."""
    rows = rows.sort_values("start_ns", kind="stable")
    start, end = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()
    launch_ns = rows["launch_ns"].to_numpy(dtype=np.float64)
    reach = np.maximum.accumulate(end)
    opens = np.flatnonzero(start[1:] > reach[:-1]) + 1  # work that ends an idle gap
    gap_start, gap_end = reach[opens - 1], start[opens]
    host_bound = launch_ns[opens] >= gap_start  # NaN (launch unknown) compares False
    idle = iv.intersect(iv.union(gap_start, gap_end), window)
    bound = iv.intersect(iv.union(gap_start[host_bound], gap_end[host_bound]), window)
    return {"gaps": int(opens.size), "idle_ns": iv.total(idle),
            "host_bound_gaps": int(host_bound.sum()), "host_bound_ns": iv.total(iv.difference(bound, host_comm)),
            "host_comm_ns": iv.total(iv.intersect(idle, host_comm)),
            "busy_ns": iv.total(iv.intersect(iv.union(start, end), window)),
            "launch_known": float(np.mean(~np.isnan(launch_ns[opens]))) if opens.size else None}


# -- findings at rank 0 --------------------------------------------------------------------

def _finding(name: str, figure_ns: int, ranks: list[int], message: str, advice: str, **evidence) -> dict:
    """A finding before pricing (analyses/cost.py adds its cost, severity and order)."""
    return {"finding": name, "figure_ns": int(figure_ns), "ranks": ranks, "message": message, "advice": advice,
            "evidence": evidence}


def _placement_findings(results: list[RankResult], checks: list[dict]) -> list[dict]:
    out = []
    by_rank = {r.rank: r.figures for r in results}
    lane_kinds = {r.rank: {lane.label: lane.lane_kind for lane in r.lanes} for r in results}
    for status, name in (("FAIL", "serialized_communication"), ("WARN", "unoverlapped_communication")):
        rows = [c for c in checks if c["status"] == status]
        if not rows:
            continue
        exposed = {c["rank"]: by_rank[c["rank"]].exposed_communication_ns or 0 for c in rows}
        worst = max(exposed, key=exposed.get)
        ranks = sorted(exposed)
        share = f"{len(ranks)}/{len(results)} ranks"
        worst_row = next(c for c in rows if c["rank"] == worst)
        lanes = ", ".join(worst_row["shared_lanes"] or worst_row["comm_lanes"])
        if status == "FAIL":
            what = ", ".join(worst_row["kinds"]) or "communication"
            shown = worst_row["shared_lanes"] or worst_row["comm_lanes"]
            on_stream = bool(shown) and lane_kinds[worst].get(shown[0]) == ev.GPU_STREAM
            word = "stream" if on_stream else "thread"  # by the lane's kind, not its label
            message = (f"serialized communication on {share}: {what} on the compute {word} "
                       f"({lanes} on rank {worst}); exposed communication {duration(exposed[worst])} "
                       f"({_pct(exposed[worst], by_rank[worst].window_ns)} of the window) on rank {worst}")
        else:
            ratio = worst_row.get("overlap_ratio") or 0.0
            message = (f"communication barely overlaps computation on {share}: overlap {100 * ratio:.1f}% "
                       f"on rank {worst} ({lanes}), exposed communication {duration(exposed[worst])} "
                       f"({_pct(exposed[worst], by_rank[worst].window_ns)} of the window)")
        advice = _placement_advice(next(r for r in results if r.rank == worst),
                                   worst_row["shared_lanes"] or worst_row["comm_lanes"], status == "FAIL")
        out.append(_finding(name, exposed[worst], ranks, message, advice,
                            worst_rank=worst, exposed_communication_ns_by_rank={str(k): v for k, v in exposed.items()},
                            lanes=worst_row["shared_lanes"] or worst_row["comm_lanes"]))
    return out


_SIDE_TEXT = {"host": "host side: its collective calls are issued late too",
              "device": "device side: launched on time, but its GPU starts the collective late"}
_SIDE_ADVICE = {
    "host": ("its host is late to the collective: check CPU binding and other processes on its cores, data "
             "loading on this rank, and Python work outside the annotated phases (compare its host timeline "
             "with a peer's)"),
    "device": ("its GPU is busy longer before the collective: compare its kernels with a peer's (counts, shapes), "
               "its clocks and thermals (nvidia-smi -q -d CLOCK,PERFORMANCE), and whether another process shares "
               "the GPU"),
    None: ("find what delays it: on the host (CPU binding, data loading, work outside the phases) or on its GPU "
           "(longer kernels, clocks, another process)"),
}


_P2P_KINDS = (ev.SEND, ev.RECV, ev.SENDRECV)
_REDUCING = (ev.ALLREDUCE, ev.REDUCE_SCATTER, ev.REDUCE)
_GATHERING = (ev.ALLGATHER, ev.ALLTOALL, ev.BROADCAST, ev.GATHER, ev.SCATTER)


def _placement_advice(result: RankResult, lanes: list[str], serialized: bool) -> str:
    """What fits the communication that is serialized (or not overlapped) on these lanes: by its
    kind (p2p needs no bucketing, reductions are bucketed, gathers prefetched, barriers dropped),
    naming its groups, and a framework only where the trace shows its ops (events.frameworks)."""
    collectives = result.markers.collectives
    pairs = set(zip(collectives.get("name", ()), collectives.get("lane", ()), collectives.get("group") or
                    [""] * len(collectives.get("name", ()))))
    kinds = sorted({k for k, lane, _ in pairs if lane in lanes})
    groups = sorted({g for _, lane, g in pairs if lane in lanes and g})
    on_gpu = any(lane.label in lanes and lane.lane_kind == ev.GPU_STREAM for lane in result.lanes)
    word = "stream" if on_gpu else "thread"
    where = f" (group {', '.join(groups[:4])})" if groups else ""
    parts = []
    p2p = [k for k in kinds if k in _P2P_KINDS]
    if p2p:
        parts.append(f"the point-to-point {'/'.join(p2p)}{where} (pipeline or sequence-parallel exchange) "
                     f"{'run on the compute ' + word if serialized else 'wait on the computation'}: post them "
                     f"asynchronously on their own {word} and compute the next micro-batch meanwhile (they need no "
                     "bucketing)")
    reducing = [k for k in kinds if k in _REDUCING]
    if reducing:
        framework = "; PyTorch DDP/FSDP do this by default" if ev.PYTORCH in result.frameworks else ""
        parts.append(f"issue each {'/'.join(reducing)}{where} on a separate {word} as soon as its input is ready "
                     f"(in buckets, while the computation that follows still runs){framework}")
    gathering = [k for k in kinds if k in _GATHERING]
    if gathering:
        parts.append(f"issue the {'/'.join(gathering)}{where} for the next layer or batch ahead of its use on a "
                     f"separate {word} (prefetch), so it runs under the current computation")
    if ev.BARRIER in kinds:
        parts.append("drop the barrier from the step (or move it out of the loop): it only waits")
    if not parts:
        parts.append(f"move the communication to its own {word} and issue it without blocking, so it runs "
                     "under the computation")
    return "; ".join(parts)


def _straggler_finding(skew: dict) -> list[dict]:
    """The straggler: the waits it causes the ranks it shares collectives with per step, how often,
    where (host or device, which phase) and what fits that. Its cost is the replay's saving of
    removing its lateness (cost.price_straggler), not those waits."""
    straggler = skew.get("straggler")
    if not straggler:
        return []
    rank, waits = straggler["rank"], straggler["waits_caused_ns"]
    if straggler["pattern"] == "single step":
        pattern = "one profiled step: cannot tell persistent from one-off"
    else:
        pattern = f"{straggler['pattern']}: late in {straggler['steps_late']}/{straggler['steps']} steps"
    message = (f"straggler: rank {rank} is last, and waited for alone, in {straggler['late_in']} of its "
               f"{straggler['of']} collectives ({pattern}); the ranks it shares them with wait "
               f"{duration(waits)} per step for it")
    if straggler.get("side") in _SIDE_TEXT:
        message += f"; {_SIDE_TEXT[straggler['side']]}"
    if straggler.get("phase"):
        message += (f"; it spends {duration(straggler['phase_extra_ns'])} per step more than the median rank in "
                    f"{straggler['phase']}")
    else:
        message += "; the delay is outside any annotated phase"
    advice = _SIDE_ADVICE[straggler.get("side") if straggler.get("side") in _SIDE_ADVICE else None]
    if straggler.get("phase"):
        advice = f"look at {straggler['phase']} on rank {rank} first; " + advice
    else:
        advice += "; mark more of the step as phases to see where"
    if straggler["pattern"] == "single step":
        advice += "; one step only: profile more steps to see whether it repeats"
    evidence = {k: v for k, v in straggler.items() if k not in ("rank", "cost_ns", "cost_share", "cost_why_not")}
    return [_finding("straggler", waits, [rank], message, advice, slow_phase=straggler.get("phase"),
                     slow_phase_extra_ns=straggler.get("phase_extra_ns") if straggler.get("phase") else None,
                     **evidence)]


def _slow_collective_findings(collectives: dict | None, config: dict) -> list[dict]:
    """Collectives table rows whose median busbw is below ``hardware.slow_collective_share`` of the
    configured peak (no peak, no finding). Cost: the transfer time a rank would save at the peak."""
    rows = collectives_mod.slow_rows((collectives or {}).get("rows") or [], config)
    if not rows:
        return []
    peak = float(config["hardware"]["peak_busbw_gbps"])
    saved = [r["count"] * (r["transfer_median_ns"] or 0) * (1 - (r["peak_share"] or 0)) for r in rows]
    worst = rows[int(np.argmax(saved))]
    where = f" in group {worst['group']!r}" if worst["group"] else ""
    span = f", {worst['node_span']}" if worst["node_span"] else ""
    limit = 100 * float(config["hardware"]["slow_collective_share"])
    message = (f"slow collectives: {len(rows)} kind/size row(s) below {limit:.0f}% of the {peak:g} GB/s peak; "
               f"worst {worst['kind']}{where} ({worst['size_bucket']}{span}): median busbw "
               f"{worst['busbw_median_gbps']:.1f} GB/s ({100 * worst['peak_share']:.0f}% of peak) over "
               f"{worst['count']} instances, median transfer {duration(worst['transfer_median_ns'] or 0)}")
    small = worst["size_bucket"] in ("<=64 KiB", "64 KiB-1 MiB")
    advice = ("messages this small are latency-bound, not bandwidth-bound: fuse them into fewer, larger ones "
              "(bigger buckets)" if small else
              "measure the same size and group with a bandwidth benchmark (nccl-tests for NCCL) on these ranks; "
              + ("check the network path between the nodes (transport, interface, adapters)"
                 if worst["node_span"] == "inter-node" else "check the links between the GPUs of the node "
                 "(topology, PCIe vs NVLink) and that peer-to-peer is enabled"))
    return [_finding("slow_collective", int(sum(saved)), [], message, advice,
                     rows=[{k: r[k] for k in ("kind", "group", "node_span", "size_bucket", "count",
                                              "busbw_median_gbps", "peak_share")} for r in rows[:8]],
                     peak_busbw_gbps=peak)]


# host-bound GPU: PyTorch's knobs only where the trace shows PyTorch, else what any CUDA program can do
_HOST_BOUND_ADVICE = {
    True: ("the CPU does not launch work fast enough: remove host syncs in the loop (.item(), .cpu(), "
           "prints), fuse small kernels or use CUDA graphs / torch.compile, raise the batch size"),
    False: ("the CPU does not launch work fast enough: take host-device synchronizations out of the loop "
            "(blocking copies, device/stream synchronize calls), launch fewer, larger kernels (fuse small ones), "
            "give each launch more work"),
}


def _gpu_gap_findings(results: list[RankResult], config: dict) -> list[dict]:
    limit = float(config["diagnosis"]["gpu_idle_share"])
    hit = {}
    for result in results:
        gaps = result.gpu_gaps
        if gaps and gaps["window_ns"] and gaps["host_bound_ns"] / gaps["window_ns"] > limit:
            hit[result.rank] = gaps
    if not hit:
        return []
    worst = max(hit, key=lambda r: hit[r]["host_bound_ns"])
    gaps = hit[worst]
    message = (f"host-bound GPU on {len(hit)}/{len(results)} ranks: the GPU waits for kernel launches "
               f"{duration(gaps['host_bound_ns'])} "
               f"({100 * gaps['host_bound_ns'] / gaps['window_ns']:.0f}% of the window, "
               f"{gaps['host_bound_gaps']} gaps) on rank {worst}")
    pytorch = any(ev.PYTORCH in result.frameworks for result in results if result.rank in hit)
    advice = _HOST_BOUND_ADVICE[pytorch]
    return [_finding("host_bound_gpu", gaps["host_bound_ns"], sorted(hit), message, advice,
                     worst_rank=worst, host_bound_ns_by_rank={str(r): g["host_bound_ns"] for r, g in hit.items()},
                     host_bound_gaps=gaps["host_bound_gaps"], gaps=gaps["gaps"], idle_ns=gaps["idle_ns"])]


def rank_dataloader_share(result: RankResult, phase_name: str) -> dict | None:
    """Dataloader time over ProfileStep time of one rank (own clock), and the steps above it."""
    bounds, phases = result.markers.step_bounds, result.markers.phases
    steps = np.asarray(bounds.get("step", []), np.int64)
    if steps.size == 0:
        return None
    durations = np.asarray(bounds["end_ns"], np.int64) - np.asarray(bounds["start_ns"], np.int64)
    is_loader = np.asarray(phases.get("name", []), dtype=object) == phase_name
    loader_steps = np.asarray(phases.get("step", []), np.int64)[is_loader]
    loader_busy = np.asarray(phases.get("busy_ns", []), np.int64)[is_loader]
    order = np.argsort(steps)
    position = np.clip(np.searchsorted(steps[order], loader_steps), 0, steps.size - 1)
    known = steps[order][position] == loader_steps
    busy = np.zeros(steps.size, np.int64)
    np.add.at(busy, order[position[known]], loader_busy[known])
    total = int(durations.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step = np.where(durations > 0, busy / np.maximum(durations, 1), 0.0)
    return {"dataloader_ns": int(busy.sum()), "steps_ns": total, "share": busy.sum() / total if total else 0.0,
            "per_step_share": per_step, "steps": steps}


def _dataloader_findings(results: list[RankResult], config: dict) -> list[dict]:
    limit = float(config["diagnosis"]["dataloader_share"])
    name = config["phases"]["dataloader"]
    hit = {}
    for result in results:
        share = rank_dataloader_share(result, name)
        if share and share["share"] > limit:
            hit[result.rank] = share
    if not hit:
        return []
    worst = max(hit, key=lambda r: hit[r]["dataloader_ns"])
    share = hit[worst]
    above = int((share["per_step_share"] > limit).sum())
    message = (f"dataloader-bound on {len(hit)}/{len(results)} ranks: {name} takes {100 * share['share']:.0f}% "
               f"of ProfileStep on rank {worst} ({duration(share['dataloader_ns'])}; "
               f"{above}/{share['steps'].size} steps "
               f"above {100 * limit:.0f}%)")
    pytorch = any(ev.PYTORCH in result.frameworks for result in results if result.rank in hit)
    advice = ("load ahead of the step: " + ("more DataLoader workers, pin_memory and prefetch_factor, " if pytorch
                                             else "more loader processes or threads, prefetch the next batch, ")
              + "cheaper decoding/augmentation or preprocessed data")
    return [_finding("dataloader_bound", share["dataloader_ns"], sorted(hit), message, advice,
                     worst_rank=worst, share_by_rank={str(r): float(s["share"]) for r, s in hit.items()},
                     steps_above=above)]


def findings(results: list[RankResult], checks: list[dict], skew: dict, config: dict,
             collectives: dict | None = None) -> list[dict]:
    """All findings, unpriced and unordered: analyses/cost.py prices and orders them."""
    return (_placement_findings(results, checks) + _straggler_finding(skew)
            + _slow_collective_findings(collectives, config)
            + _gpu_gap_findings(results, config) + _dataloader_findings(results, config))
