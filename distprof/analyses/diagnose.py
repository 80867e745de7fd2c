"""Diagnosis: turn the checks, the skew and per-rank figures into findings.

Each finding says what is wrong, the figure it describes (``figure_ns``: e.g. the exposed
communication or the waits a straggler causes, per step where the trace has steps) and what to
change. Its cost, severity and order come from one place, analyses/cost.py: what the what-if
replay says its fix saves. One per-rank reduction lives here too (``rank_gpu_gaps``), run next to
the rank's events like the other reductions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec
import numpy as np

from .. import events as ev
from ..rankview import RankView
from ..results import DeviceGaps, GpuGaps, RankMarkers, RankResult
from ..sections.collectives import CollectiveRow, Collectives
from ..sections.findings import Check, Observed, SlowCollectiveRow, StragglerEvidence
from ..sections.skew import Skew, StragglerRow
from ..sections.whatif import WhatIf
from ..typed import ABSENT
from . import alltoall as alltoall_mod
from . import collectives as collectives_mod
from . import imbalance as imbalance_mod
from . import intervals as iv
from . import sharded as sharded_mod

T = TypeVar("T")

# -- per rank: host-bound GPU gaps ---------------------------------------------------------

def rank_gpu_gaps(view: RankView) -> GpuGaps | None:
    """Idle gaps between GPU work on each device, and the host-bound part of them.

    A gap is the time between two busy periods of a device (all its streams together) inside
    the analysis window. It is host-bound when the kernel that ends it was launched (its
    runtime call: the view's launch join) at or after the gap began: the GPU had
    nothing queued and waited for the CPU. Kernels whose launch is
    unknown are not counted as host-bound. The time the host spends in communication (MPI,
    gloo) is not host-bound (the CPU waits for the network, not its own launches): it is
    ``host_comm_ns``. None on host-only traces.
    """
    events, window = view.events, view.window
    if not len(events) or not view.gpu:
        return None
    work = np.flatnonzero(view.gpu_work)
    launched = view.launch[work]
    launch_ns = np.where(launched >= 0, events.start_ns[np.maximum(launched, 0)], np.nan)
    host_comm = view.comm & events.lane_kind.eq(ev.HOST_THREAD)
    host_comm_set = iv.union(events.start_ns[host_comm], events.end_ns[host_comm])
    device_of = events.device[work]
    devices = [_device_gaps(int(device), events.start_ns[work][mine], events.end_ns[work][mine],
                            launch_ns[mine], window, host_comm_set)
               for device, mine in ((device, device_of == device) for device in np.unique(device_of))]
    return GpuGaps(gaps=sum(d.gaps for d in devices), idle_ns=sum(d.idle_ns for d in devices),
                   host_bound_gaps=sum(d.host_bound_gaps for d in devices),
                   host_bound_ns=sum(d.host_bound_ns for d in devices),
                   host_comm_ns=sum(d.host_comm_ns for d in devices), busy_ns=sum(d.busy_ns for d in devices),
                   window_ns=iv.total(window), devices=devices)


def _device_gaps(device: int, start: np.ndarray, end: np.ndarray, launch_ns: np.ndarray, window: iv.IntervalSet,
                 host_comm: iv.IntervalSet) -> DeviceGaps:
    """The gaps of one device's GPU work (rows by start; launch_ns NaN = unknown)."""
    reach = np.maximum.accumulate(end)
    opens = np.flatnonzero(start[1:] > reach[:-1]) + 1  # work that ends an idle gap
    gap_start, gap_end = reach[opens - 1], start[opens]
    host_bound = launch_ns[opens] >= gap_start  # NaN (launch unknown) compares False
    idle = iv.intersect(iv.union(gap_start, gap_end), window)
    bound = iv.intersect(iv.union(gap_start[host_bound], gap_end[host_bound]), window)
    return DeviceGaps(device=device, gaps=int(opens.size), idle_ns=iv.total(idle),
                      host_bound_gaps=int(host_bound.sum()), host_bound_ns=iv.total(iv.difference(bound, host_comm)),
                      host_comm_ns=iv.total(iv.intersect(idle, host_comm)),
                      busy_ns=iv.total(iv.intersect(iv.union(start, end), window)),
                      launch_known=float(np.mean(~np.isnan(launch_ns[opens]))) if opens.size else None)


# -- findings at rank 0: codes and numbers (reports/findings.py words them) ------------------

_finding = Observed.of  # a finding before pricing (analyses/cost.py) and wording (reports/findings.py)


def _on_lanes(result: RankResult, lanes: list[str]) -> dict:
    """What the advice of a placement finding depends on: the kinds and groups of the collectives
    on these lanes (the groups per kind: a TP allreduce and a DP allgather are different advice),
    which kinds run inside a forward phase (a tensor-parallel reduction the next layer needs at
    once, not a gradient bucket), whether a lane is a GPU stream and whether the trace shows PyTorch."""
    collectives = result.markers.collectives
    names = np.asarray(collectives.name, dtype=object)
    on = np.isin(np.asarray(collectives.lane, dtype=object), lanes) if names.size else np.zeros(0, bool)
    groups = np.asarray(collectives.group or [""] * names.size, dtype=object)
    by_kind: dict[str, set] = {}
    for kind, group in set(zip(names[on].tolist(), groups[on].tolist())):  # one per (kind, group)
        by_kind.setdefault(kind, set()).update([group] if group else [])
    forward = _in_forward(result.markers, np.flatnonzero(on))
    return {"lane_collectives": sorted(by_kind), "lane_groups": sorted(set().union(*by_kind.values())),
            "groups_by_kind": {kind: sorted(g) for kind, g in sorted(by_kind.items())},
            "in_forward": sorted(set(names[forward].tolist())),
            "on_gpu": any(lane.label in lanes and lane.lane_kind == ev.GPU_STREAM for lane in result.lanes),
            "pytorch": ev.PYTORCH in result.frameworks}


def _in_forward(markers: RankMarkers, rows: np.ndarray) -> np.ndarray:
    """The rows (of markers.collectives) that start inside a phase whose name says forward, in
    their step: ``searchsorted`` over that rank's forward phase bounds, ordered by step."""
    phases = markers.phases
    is_forward = np.array(["forward" in str(name).lower() for name in phases.name], bool)
    if not rows.size or not is_forward.any():
        return np.zeros(0, np.int64)
    step = np.asarray(phases.step, np.int64)[is_forward]
    begin = np.asarray(phases.start_ns, np.int64)[is_forward]
    end = np.asarray(phases.end_ns, np.int64)[is_forward]
    order = np.lexsort((begin, step))
    step, begin, end = step[order], begin[order], end[order]
    op_step = np.asarray(markers.collectives.step, np.int64)[rows]
    op_start = np.asarray(markers.collectives.start_ns, np.int64)[rows]
    at = np.clip(np.searchsorted(step, op_step, side="right") - 1, 0, step.size - 1)  # that step's last phase
    inside = (step[at] == op_step) & (begin[at] <= op_start) & (op_start < end[at])
    return rows[inside]


def _placement_findings(results: list[RankResult], checks: list[Check]) -> list[Observed]:
    out = []
    by_rank = {r.rank: r for r in results}
    for status, name in (("FAIL", "serialized_communication"), ("WARN", "unoverlapped_communication")):
        rows = [c for c in checks if c.status == status]
        if not rows:
            continue
        # what a rank waited for the straggler is the straggler's finding, not this one's
        exposed = {c.rank: max((by_rank[c.rank].figures.exposed_communication_ns or 0)
                               - (c.waits_for_straggler_ns or 0), 0) for c in rows}
        worst = max(exposed, key=exposed.get)
        worst_row = next(c for c in rows if c.rank == worst)
        lanes = worst_row.shared_lanes or worst_row.comm_lanes
        lane_kind = {lane.label: lane.lane_kind for lane in by_rank[worst].lanes}.get(lanes[0]) if lanes else None
        out.append(_finding(name, exposed[worst], sorted(exposed), worst_rank=worst, ranks_total=len(results),
                            exposed_communication_ns_by_rank={str(k): v for k, v in exposed.items()},
                            lanes=lanes, lane_kind=lane_kind, kinds=worst_row.kinds,
                            overlap_ratio=worst_row.overlap_ratio,
                            window_ns=by_rank[worst].figures.window_ns, **_on_lanes(by_rank[worst], lanes)))
    return out


def _straggler_finding(skew: Skew | None) -> list[Observed]:
    """The straggler: the waits it causes the ranks it shares collectives with per step, how often,
    where (host or device, which phase). Its cost is the replay's saving of removing its lateness
    (cost.price_straggler), not those waits."""
    straggler = skew.straggler if skew is not None else None
    if not straggler:
        return []
    evidence = {name: getattr(straggler, name) for name in StragglerEvidence.__struct_fields__
                if name in StragglerRow.__struct_fields__ and getattr(straggler, name) is not ABSENT}
    return [_finding("straggler", straggler.waits_caused_ns, [straggler.rank], slow_phase=straggler.phase,
                     slow_phase_extra_ns=straggler.phase_extra_ns if straggler.phase else None, **evidence)]


def _slow_collective_findings(collectives: Collectives | None, config: dict) -> list[Observed]:
    """Collectives table rows whose median busbw is below ``hardware.slow_collective_share`` of the
    configured peak (no peak, no finding). Figure: the transfer time a rank would save at the peak."""
    rows = collectives_mod.slow_rows(collectives.rows if collectives is not None else [], config)
    if not rows:
        return []
    saved = [r.count * (r.transfer_median_ns or 0) * (1 - (r.peak_share or 0)) for r in rows]
    return [_finding("slow_collective", int(sum(saved)), [], rows=[_slow_row(r) for r in rows[:8]],
                     rows_below=len(rows), worst=_slow_row(rows[int(np.argmax(saved))]),
                     peak_busbw_gbps=float(config["hardware"]["peak_busbw_gbps"]),
                     limit_share=float(config["hardware"]["slow_collective_share"]))]


def _slow_row(row: CollectiveRow) -> SlowCollectiveRow:
    """The fields of a Collectives table row that a slow_collective finding keeps."""
    return SlowCollectiveRow(kind=row.kind, group=row.group, node_span=row.node_span, size_bucket=row.size_bucket,
                             count=row.count, busbw_median_gbps=row.busbw_median_gbps, peak_share=row.peak_share,
                             transfer_median_ns=row.transfer_median_ns)


def _ranks_over(results: list[RankResult], measured: Callable[[RankResult], T | None],
                share: Callable[[T], float | None], limit: float, size: Callable[[T], int]
                ) -> tuple[dict[int, T], int | None]:
    """The per-rank findings' threshold: each rank's ``measured`` figures whose ``share`` is above
    ``limit`` (by rank), and the rank among them with the largest ``size`` (None: no rank is over)."""
    hit = {}
    for result in results:  # one per rank
        figures = measured(result)
        if figures is not None and (value := share(figures)) is not None and value > limit:
            hit[result.rank] = figures
    return hit, (max(hit, key=lambda r: size(hit[r])) if hit else None)


def _any_pytorch(results: list[RankResult], ranks) -> bool:
    return any(ev.PYTORCH in result.frameworks for result in results if result.rank in ranks)


def _gpu_gap_findings(results: list[RankResult], config: dict) -> list[Observed]:
    hit, worst = _ranks_over(results, lambda result: result.gpu_gaps, lambda gaps: gaps.host_bound_share,
                             float(config["diagnosis"]["gpu_idle_share"]), lambda gaps: gaps.host_bound_ns)
    if worst is None:
        return []
    gaps = hit[worst]
    return [_finding("host_bound_gpu", gaps.host_bound_ns, sorted(hit), worst_rank=worst,
                     ranks_total=len(results),
                     host_bound_ns_by_rank={str(r): g.host_bound_ns for r, g in hit.items()},
                     host_bound_gaps=gaps.host_bound_gaps, gaps=gaps.gaps, idle_ns=gaps.idle_ns,
                     window_ns=gaps.window_ns, pytorch=_any_pytorch(results, hit))]


class DataloaderShare(msgspec.Struct, frozen=True):
    """A rank's Dataloader time over its ProfileStep time (own clock), over all and per step."""

    dataloader_ns: int
    steps_ns: int
    share: float
    per_step_share: np.ndarray
    steps: np.ndarray


def rank_dataloader_share(result: RankResult, phase_name: str) -> DataloaderShare | None:
    """Dataloader time over ProfileStep time of one rank (own clock), and the steps above it."""
    bounds, phases = result.markers.step_bounds, result.markers.phases
    steps = np.asarray(bounds.step, np.int64)
    if steps.size == 0:
        return None
    durations = np.asarray(bounds.end_ns, np.int64) - np.asarray(bounds.start_ns, np.int64)
    is_loader = np.asarray(phases.name, dtype=object) == phase_name
    loader_steps = np.asarray(phases.step, np.int64)[is_loader]
    loader_busy = np.asarray(phases.busy_ns, np.int64)[is_loader]
    order = np.argsort(steps)
    position = np.clip(np.searchsorted(steps[order], loader_steps), 0, steps.size - 1)
    known = steps[order][position] == loader_steps
    busy = np.zeros(steps.size, np.int64)
    np.add.at(busy, order[position[known]], loader_busy[known])
    total = int(durations.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step = np.where(durations > 0, busy / np.maximum(durations, 1), 0.0)
    return DataloaderShare(dataloader_ns=int(busy.sum()), steps_ns=total, share=busy.sum() / total if total else 0.0,
                           per_step_share=per_step, steps=steps)


def _dataloader_findings(results: list[RankResult], config: dict) -> list[Observed]:
    limit = float(config["diagnosis"]["dataloader_share"])
    name = config["phases"]["dataloader"]
    hit, worst = _ranks_over(results, lambda result: rank_dataloader_share(result, name), lambda found: found.share,
                             limit, lambda found: found.dataloader_ns)
    if worst is None:
        return []
    share = hit[worst]
    return [_finding("dataloader_bound", share.dataloader_ns, sorted(hit), worst_rank=worst,
                     ranks_total=len(results), phase=name, share=float(share.share),
                     dataloader_ns=share.dataloader_ns, steps=int(share.steps.size), limit_share=limit,
                     share_by_rank={str(r): float(s.share) for r, s in hit.items()},
                     steps_above=int((share.per_step_share > limit).sum()), pytorch=_any_pytorch(results, hit))]


def findings(results: list[RankResult], checks: list[Check], skew: Skew | None, config: dict,
             collectives: Collectives | None = None, whatif: WhatIf | None = None, alltoall: list | None = None,
             sharded: list | None = None) -> list[Observed]:
    """All findings, unpriced, unordered and unworded: analyses/cost.py prices and orders them,
    reports/findings.py words them. ``sharded``: each rank's all-gather / reduce-scatter figures
    (analyses/sharded.py), whose exposed_allgather finding stands in for unoverlapped_communication (both
    priced by overlap_communication: a delay is charged once). ``whatif``: the replay, whose saving vetoes
    an imbalance finding under the straggler's floor. ``skew``: the skew section (None: not analysed, no straggler
    and no imbalance). ``alltoall``: the all-to-all groups
    (analyses/alltoall.groups); one fix, one finding: an expert load imbalance is the cause of the ranks'
    imbalance that balanced_ranks prices, so the general imbalance finding is left out beside it."""
    experts = alltoall_mod.expert_findings(results, alltoall or [], skew, whatif, config)
    placement = sharded_mod.exposed_allgather_findings(sharded or [], _placement_findings(results, checks),
                                                       results, config)
    # a straggler whose lateness is its expert load has one fix, balancing the ranks: the expert finding
    straggler = [] if any(f.evidence.straggler for f in experts) else _straggler_finding(skew)
    return (placement + straggler
            + _slow_collective_findings(collectives, config)
            + _gpu_gap_findings(results, config) + _dataloader_findings(results, config)
            + (experts or imbalance_mod.imbalance_findings(results, skew, whatif, config)))
