"""Cross-rank skew: what each rank contributes (step and phase boundaries, collectives) and,
at rank 0, the comparison on the aligned clock.

Per-rank extraction runs where the events are (each rank or merge worker); only these compact
columns travel to rank 0.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from .. import events as ev
from ..columns import distinct, union_per_key, unique_rows
from ..matching import Matching
from ..rankview import RankView
from ..results import CollectiveMarkers, PhaseBounds, RankMarkers, StepBounds, SyncCalls
from ..sections.skew import (
    CollectiveRow,
    CollectiveSkew,
    Imbalance,
    KindRow,
    PhaseRow,
    RankRow,
    Spread,
    StepPhase,
    StepRow,
    StepSkew,
    StepsSummary,
    StragglerRow,
)
from ..typed import Reason
from . import blame as blame_mod
from . import changepoint, steptime
from . import collectives as coll
from . import intervals as iv
from .distributed import exposed_per_op

_INT_MIN, _INT_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
# host calls that block until GPU work ends (CUDA runtime/driver names, nsys's _vNNNN suffixes too)
SYNC_CALL = r"Synchronize|^cu(?:da)?Memcpy(?!.*Async)(?:_v\d+)?$|^cuMemcpy[DH]to[DH](?:_v\d+)?$"
# the sync/transfer split and the aligned waits may differ by both ends' clock errors (one rank's
# offset off by +u, another's by -u): up to 2x the largest uncertainty before they "disagree"
SPLIT_TOLERANCE_UNCERTAINTIES = 2
# a kind gets a note when more than this share of its collectives disagree: a few disagreements
# are noise (one late host thread); a quarter or more points at the clocks or the ranks' exits
SPLIT_DISAGREE_NOTE_SHARE = 0.25
# ... and by this much on the same clock (host threads leave a collective up to ~1 ms apart); was
# skew.straggler_min_ns before that became the straggler's per-step floor
SPLIT_MIN_NS = 1_000_000

def _kinds(events: ev.Events, rows: np.ndarray) -> list[str]:
    """Each communication row's kind: the source's ``collective`` where it set one, else the kind
    its name says (events.collective_kind, once per distinct name)."""
    from_name = events.name.take(rows).mapped(lambda name: ev.collective_kind(str(name)))
    given = events.collective.take(rows).values()
    return np.where(given != "", given, from_name).tolist()


def _launch_starts(view: RankView, rows: np.ndarray) -> np.ndarray:
    """For each selected row, when it was issued: GPU work at the start of the runtime call that
    launched it (the view's launch join; -1 when that call was not captured), a host range at its
    own start (the host issues it then), so a late issue reads as a host-side delay on either
    kind of trace."""
    events = view.events
    selected = np.flatnonzero(rows)
    gpu = view.gpu_work[selected]
    out = np.where(gpu, -1, events.start_ns[selected]).astype(np.int64)
    found = view.launch[selected]  # -1 on every row that is not GPU work
    out[found >= 0] = events.start_ns[found[found >= 0]]
    return out


RESUME_NS = 1_000_000  # a thread idle through a host op that resumes this soon after its end waited for it
RESUME_SHARE = 0.25  # ... or this share of its wait, when longer (a loaded host wakes the thread late)


def _waited_for(view: RankView, comm_mask: np.ndarray, runs_steps: np.ndarray) -> np.ndarray:
    """Per selected op, whether the thread that runs the steps waited for it from another thread: a
    synchronous gloo call enqueues the exchange on a gloo worker (its ``c10d::`` call returns at
    once) and waits for it in ``wait()``, which the profiler does not record. The steps' thread
    then starts nothing while the exchange runs and resumes within RESUME_NS of its end."""
    events = view.events
    rows = np.flatnonzero(comm_mask)
    own = np.flatnonzero(runs_steps[view.lane_of] & ~view.steps & ~events.category.eq(ev.PHASE))
    if not rows.size or not own.size:
        return np.zeros(rows.size, bool)
    starts = np.sort(events.start_ns[own])
    op_start, op_end = events.start_ns[rows], events.end_ns[rows]
    after = np.searchsorted(starts, op_start, side="right")  # the first start on the thread after the op's
    resumed = starts[np.minimum(after, starts.size - 1)]
    return (after < starts.size) & (resumed >= op_end) & (resumed - op_end <= RESUME_NS)


def _duplicate_ops(events: ev.Events, comm_mask) -> np.ndarray:
    """Rows of ``c10d::*`` operator ranges where the rank also has the exchange itself (``gloo:*``
    ranges on CPU traces, NCCL kernels on GPU): one collective is then counted once, by the
    exchange, not twice under two kinds."""
    comm_mask = np.asarray(comm_mask, bool)
    is_op = events.name.where(lambda text: text.startswith("c10d::"))
    return comm_mask & is_op if (comm_mask & ~is_op).any() else np.zeros(is_op.size, bool)


def _waited_elsewhere(events: ev.Events, own: np.ndarray, elsewhere: np.ndarray) -> iv.IntervalSet:
    """When a thread (its rows ``own``) waited for host communication on other lanes (``elsewhere``):
    per op, the stretch of the thread between two boundaries of its ranges that ends at its first
    boundary after the op's start and after RESUME_NS before the op's end (gloo closes its range a
    little after ``wait()`` returned), from the op's start or the stretch's, the later, when that
    boundary is within RESUME_NS of the op's end or RESUME_SHARE of that wait (a loaded 2-core host
    resumed 2.3 ms after a 25 ms all-gather). A stretch that outlasts the op (a sleep while a
    prefetched all-gather ran) is no wait."""
    if not elsewhere.any():  # first: the thread's boundaries are a sort of all its rows (8 ms on 65k)
        return iv.empty()
    start, end = events.start_ns, events.end_ns
    bounds = distinct(np.concatenate([start[own], end[own]]))
    if bounds.size < 2:
        return iv.empty()
    op_start, op_end = start[elsewhere], end[elsewhere]
    # where the thread resumed: its first boundary after the op's start and from RESUME_NS before its end on
    after = np.searchsorted(bounds, np.maximum(op_end - RESUME_NS, op_start), side="right")
    inside = (after >= 1) & (after < bounds.size)
    resumed, before = bounds[np.minimum(after, bounds.size - 1)], bounds[np.maximum(after - 1, 0)]
    lo = np.maximum(before, op_start)
    keep = inside & (lo < resumed) & (resumed - op_end <= np.maximum(RESUME_NS, RESUME_SHARE * (op_end - lo)))
    return iv.union(lo[keep], resumed[keep])


def _nested_comm(events: ev.Events, rows: np.ndarray, lane_of: np.ndarray,
                 host: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per row (indices): the communication its own thread waited through inside it, which is
    not the phase's own work: what runs on its own lane (a blocking allreduce an MPI rank runs in
    its forward; a ``c10d::`` call that issues a gloo exchange, 12 ms on a loaded FSDP rank), and
    host communication on other lanes it waited for (_waited_elsewhere: the gloo
    worker-thread all-gather FSDP's forward waits for in an unrecorded ``wait()``) less its own
    computation then. Host time with no wait in it (a sleep, Python) stays the phase's. ``host``:
    per row, host communication (issuing calls included) and host computation (aten ops; the phases themselves where a
    trace has none, as in work_masks: a demo rank's backward computes while its comm thread reduces)."""
    out = np.zeros(rows.size, np.int64)
    start, end = events.start_ns, events.end_ns
    host_comm, computing = host
    for lane in np.unique(lane_of[rows]):  # one iteration per lane that holds phases
        mine, own = lane_of[rows] == lane, lane_of == lane
        own_comm = iv.union(start[host_comm & own], end[host_comm & own])
        waited = iv.difference(_waited_elsewhere(events, own, host_comm & ~own),
                               iv.union(start[computing & own], end[computing & own]))
        out[mine] = iv.covered_lengths(iv.union_sets(own_comm, waited), start[rows[mine]], end[rows[mine]])
    return out


def _phase_bounds(events: ev.Events, rows: np.ndarray, lane_of: np.ndarray,
                  host: tuple[np.ndarray, np.ndarray]) -> dict:
    """Per (step, phase name), sorted by both: the first start, the last end, the summed
    duration of the phase's ranges (``busy_ns``) and of it what its thread did not wait through
    in communication (``compute_ns``, _nested_comm: what the straggler's phase is judged by)."""
    rows = np.flatnonzero(rows)
    names = events.name.take(rows).sorted()  # codes in text order
    step, start, end = events.step[rows], events.start_ns[rows], events.end_ns[rows]
    order = np.lexsort((names.codes, step))
    key_step, key_name = step[order], names.codes[order]
    first = np.flatnonzero(np.concatenate([[True], (key_step[1:] != key_step[:-1]) | (key_name[1:] != key_name[:-1])])
                           ) if rows.size else np.zeros(0, np.int64)
    nested = _nested_comm(events, rows, lane_of, host)
    return PhaseBounds(step=key_step[first].tolist(), name=[str(names.texts[c]) for c in key_name[first].tolist()],
                       start_ns=np.minimum.reduceat(start[order], first).tolist() if first.size else [],
                       end_ns=np.maximum.reduceat(end[order], first).tolist() if first.size else [],
                       busy_ns=np.add.reduceat((end - start)[order], first).tolist() if first.size else [],
                       compute_ns=np.add.reduceat((end - start - nested)[order], first).tolist()
                       if first.size else [])


def rank_markers(view: RankView) -> RankMarkers:
    """Step bounds, per-step phase bounds and the collectives of one rank (own clock), read off
    the rank's view (its masks, lanes and launch join)."""
    events = view.events
    is_range = events.kind.eq(ev.RANGE)
    is_step = events.name.eq(ev.PROFILE_STEP)
    steps = view.steps
    step_bounds = StepBounds(step=events.step[steps].tolist(), start_ns=events.start_ns[steps].tolist(),
                             end_ns=events.end_ns[steps].tolist())
    comm_mask = view.comm & ~_duplicate_ops(events, view.comm)
    lane_of, labels = view.lane_of, view.labels
    # host rows: communication (on CPU traces the c10d:: calls that issue a gloo exchange too) and computation
    host_comm = (view.comm | (events.category.eq(ev.COMMUNICATION) & (not view.gpu))) & ~view.gpu_work
    computing = (view.compute | events.category.eq(ev.COMPUTE)) & ~view.gpu_work & ~is_step
    phases = _phase_bounds(events, is_range & events.category.eq(ev.PHASE) & ~is_step & (events.step >= 0),
                           lane_of, (host_comm, computing))
    # a call on the thread that runs the steps blocks it until it returns: the thread waits for it
    runs_steps = np.zeros(len(view.lanes), bool)  # per lane: it runs the steps (read by position, no sort)
    runs_steps[lane_of[steps]] = True
    blocking = (runs_steps[lane_of[comm_mask]] | _waited_for(view, comm_mask, runs_steps)) & ~view.gpu_work[comm_mask]
    collectives = CollectiveMarkers(
        name=_kinds(events, comm_mask), start_ns=events.start_ns[comm_mask].tolist(),
        end_ns=events.end_ns[comm_mask].tolist(),
        lane=labels[lane_of[comm_mask]].tolist() if comm_mask.any() else [], step=events.step[comm_mask].tolist(),
        group=events.group.take(comm_mask).values().tolist(), nbytes=events.nbytes[comm_mask].tolist(),
        peer=events.peer[comm_mask].tolist(), sent_bytes=events.sent_bytes[comm_mask].tolist(),
        recv_bytes=events.recv_bytes[comm_mask].tolist(), launch_ns=_launch_starts(view, comm_mask).tolist(),
        exposed_ns=exposed_per_op(view, comm_mask).tolist(), blocking=blocking.tolist())
    sync = events.kind.eq(ev.RUNTIME) & events.name.where(lambda name: re.search(SYNC_CALL, name))
    syncs = SyncCalls(start_ns=events.start_ns[sync].tolist(), end_ns=events.end_ns[sync].tolist())
    return RankMarkers(step_bounds, phases, collectives, syncs)


# -- skew on the aligned clock -------------------------------------------------------------

def _masked_max(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, _INT_MIN).max(axis=0)


def _masked_min(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, _INT_MAX).min(axis=0)


def _masked_median(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Median per column over the present rows (float; values are made small first so the
    float median is exact to the nanosecond)."""
    base = _masked_min(values, present)
    relative = np.where(present, (values - base).astype(np.float64), np.nan)
    with np.errstate(all="ignore"):
        return np.nanmedian(relative, axis=0) + base


def _stats(values: np.ndarray) -> Spread | None:
    if values.size == 0:
        return None
    return Spread(median=int(round(float(np.median(values)))), p90=int(round(float(np.percentile(values, 90)))),
                  max=int(values.max()))


def _top(score: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` largest scores, in their original order."""
    if score.size <= limit:
        return np.arange(score.size)
    return np.sort(np.argsort(-score, kind="stable")[:limit])


def collective_skew(matching: Matching, offsets, uncertainties, config: dict,
                    step_ns: int | None = None, verified=None, inst: coll.Instances | None = None,
                    window_ns: int | None = None, gpu=None,
                    markers: list[RankMarkers] | None = None) -> CollectiveSkew:
    """Per-collective arrival/end skew, waits, bytes and bandwidth, the sync/transfer split and the
    straggler.

    ``offsets``/``uncertainties`` are the final per-rank clock offsets (rows of ``matching``);
    ``step_ns`` the median step duration (``window_ns`` the median window, without steps);
    ``inst`` the instances of analyses.collectives (computed here when not given); ``gpu`` per row
    whether the rank's trace has GPU work;
    ``markers`` per row its aligned RankMarkers (a pipeline's stages are charged by them, the
    straggler's phase is read off them).

    Per rank, lateness against the median start (the median, so a second late rank does not hide
    the first) stays in ``ranks[]`` for reference; the straggler is named by what the others
    waited for it alone (``straggler``). The sync/transfer split (transfer = shortest duration
    across ranks) uses durations only and is compared with the aligned waits. Matrices are
    (ranks, collectives): a few times 8 bytes × ranks × matched collectives. Each kind's row ends with
    the matching's counts for it (ranks, steps, unmatched steps).
    """
    n_ranks, n = matching.start_ns.shape
    if n == 0 or n_ranks < 2:
        return CollectiveSkew(matched=n, kinds=[], collectives=[], collectives_total=n, ranks=[], straggler=None,
                              notes=[], no_straggler_note=None)
    cfg = config["skew"]
    inst = inst if inst is not None else coll.instances(matching, offsets)
    arrivals = _arrivals(matching, np.asarray(offsets, np.int64), np.asarray(uncertainties, np.int64), cfg)
    blame = _blame(matching, inst, np.asarray(uncertainties, np.int64), cfg, step_ns or window_ns, markers)
    kinds, notes = _kind_rows(matching, arrivals)
    rows = _collective_rows(matching, arrivals, inst, int(cfg["max_rows"]))
    straggler, why_none = _name_straggler(matching, inst, blame, cfg, verified, markers, gpu)
    return CollectiveSkew(
        matched=n, kinds=kinds, collectives=rows, collectives_total=n, collectives_shown=len(rows),
        ranks=_rank_rows(matching, arrivals, _late_units(matching, arrivals, cfg, step_ns), inst, blame),
        straggler=straggler, notes=notes + why_none,
        # which note says why none was named (the first screen's reason): an index into the notes
        no_straggler_note=len(notes) if why_none and straggler is None else None)


def _rank_rows(matching: Matching, arrivals: _Arrivals, units: _LateUnits, inst: coll.Instances,
               blame: _Blame) -> list[RankRow]:
    """Per rank: its lateness against the median start and the waits it caused (late_units: steps
    in which it was late against the median start, collectives without steps)."""
    return [RankRow(rank=rank, last_count=int(arrivals.last_count[r]), late_count=int(arrivals.late_last[r]),
                    late_collectives=int(arrivals.late[r].sum()), late_units=int(units.late_units[r]),
                    late_steps=int(units.late_units[r]) if units.by_step else None,
                    total_lateness_ns=int(arrivals.total_lateness[r]), wait_ns=int(inst.wait[r].sum()),
                    sync_ns=int(arrivals.sync[r].sum()), threshold_ns=int(arrivals.threshold[r]),
                    late_in=int(blame.late_in[r]), of=int(blame.of[r]),
                    waits_caused_ns=int(round(blame.per_step[r])), total_waits_caused_ns=int(blame.cost[r]),
                    steps_late=int(blame.steps_late[r])) for r, rank in enumerate(matching.ranks.tolist())]


class _Arrivals(msgspec.Struct, frozen=True):
    """Per (rank row, collective) on the aligned clock, and per collective and per rank."""

    unc: np.ndarray            # per rank: its clock uncertainty
    start: np.ndarray
    arrival_skew: np.ndarray   # per collective: latest − earliest start
    end_skew: np.ndarray
    first_row: np.ndarray
    last_row: np.ndarray
    wait: np.ndarray           # last arrival − own start
    transfer: np.ndarray       # per collective: the shortest duration
    sync: np.ndarray           # own duration − the transfer
    median_start: np.ndarray
    lateness: np.ndarray       # own start against the median start
    threshold: np.ndarray      # per rank: lateness above it counts
    late: np.ndarray
    last_count: np.ndarray     # per rank: collectives it arrived last in
    late_last: np.ndarray      # ... and was late in
    total_lateness: np.ndarray
    split_diff: np.ndarray     # per collective: the largest |sync − wait|
    split_agrees: np.ndarray


def _arrivals(matching: Matching, offsets: np.ndarray, unc: np.ndarray, cfg: dict) -> _Arrivals:
    """Per (rank, collective) on the aligned clock: waits, sync/transfer split, lateness against
    the median start and whether it counts (above the rank's threshold)."""
    n_ranks = matching.start_ns.shape[0]
    present = matching.present
    start = matching.start_ns + offsets[:, None]
    end = matching.end_ns + offsets[:, None]
    first, last = _masked_min(start, present), _masked_max(start, present)
    arrival_skew = last - first
    last_row = np.where(present, start, _INT_MIN).argmax(axis=0)
    wait = np.where(present, last[None, :] - start, 0)
    duration = np.where(present, matching.end_ns - matching.start_ns, 0)
    transfer = _masked_min(duration, present)
    sync = np.where(present, duration - transfer[None, :], 0)
    median_start = _masked_median(start, present)
    lateness = np.where(present, (start - first[None, :]) - (median_start - first)[None, :], 0.0)
    lateness = np.round(lateness).astype(np.int64)
    threshold = unc + int(np.median(unc)) + int(cfg["straggler_min_ns"])
    late = present & (lateness > threshold[:, None])
    is_last = present & (np.arange(n_ranks)[:, None] == last_row[None, :]) & (arrival_skew > 0)
    split_tolerance = SPLIT_TOLERANCE_UNCERTAINTIES * int(unc.max()) + SPLIT_MIN_NS
    split_diff = np.abs(sync - wait).max(axis=0)
    return _Arrivals(unc=unc, start=start, arrival_skew=arrival_skew,
                     end_skew=_masked_max(end, present) - _masked_min(end, present),
                     first_row=np.where(present, start, _INT_MAX).argmin(axis=0), last_row=last_row,
                     wait=wait, transfer=transfer, sync=sync, median_start=median_start,
                     lateness=lateness, threshold=threshold, late=late,
                     last_count=is_last.sum(axis=1), late_last=(is_last & late).sum(axis=1),
                     total_lateness=np.where(late, lateness, 0).sum(axis=1),
                     split_diff=split_diff, split_agrees=split_diff <= split_tolerance)


class _LateUnits(msgspec.Struct, frozen=True):
    """Lateness per rank and unit of persistence (a step, else one collective)."""

    by_step: bool
    late_units: np.ndarray     # per rank: units it was late in


def _late_units(matching: Matching, arrivals: _Arrivals, cfg: dict, step_ns: int | None) -> _LateUnits:
    """Lateness per rank and unit of persistence: steps (when collectives span several), else
    single collectives; and in how many units each rank was late."""
    n_ranks, n = matching.start_ns.shape
    late, lateness, threshold = arrivals.late, arrivals.lateness, arrivals.threshold
    unique_steps, unit_of = np.unique(matching.step, return_inverse=True)
    by_step = unique_steps.size >= 2
    if not by_step:
        unit_of = np.arange(n)
    n_units = int(unit_of.max()) + 1
    late_rows, late_cols = np.nonzero(late)
    per_unit = np.bincount(late_rows * n_units + unit_of[late_cols], weights=lateness[late_rows, late_cols],
                           minlength=n_ranks * n_units).reshape(n_ranks, n_units)
    unit_threshold = threshold.astype(np.float64)
    if by_step and step_ns:
        unit_threshold = np.maximum(unit_threshold, float(cfg["straggler_min_step_fraction"]) * step_ns)
    return _LateUnits(by_step=by_step, late_units=(per_unit > unit_threshold[:, None]).sum(axis=1))


def _gbps(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


def _collective_rows(matching: Matching, arrivals: _Arrivals, inst: coll.Instances,
                     limit: int) -> list[CollectiveRow]:
    """The ``limit`` collectives with the largest arrival skew, in time order."""
    a = arrivals
    present, unc, median_start = matching.present, a.unc, a.median_start
    order = np.argsort(median_start, kind="stable")  # index = time order of the collectives
    index = np.empty(order.size, np.int64)
    index[order] = np.arange(order.size)
    rank_of = matching.ranks.tolist()
    first_row, last_row = a.first_row, a.last_row
    groups = matching.group if len(matching.group) == matching.size else np.full(matching.size, "", object)
    members = matching.group_ranks or [tuple(matching.ranks[present[:, j]].tolist()) for j in range(matching.size)]
    return [CollectiveRow(
        index=int(index[j]), name=str(matching.name[j]), kind=str(matching.name[j]),
        group_name=str(groups[j]), group_ranks=list(members[j]), step=int(matching.step[j]),
        ordinal=int(matching.ordinal[j]), start_ns=int(round(float(median_start[j]))),
        bytes=None if not np.isfinite(inst.nbytes[j]) else int(round(float(inst.nbytes[j]))),
        arrival_skew_ns=int(a.arrival_skew[j]), end_skew_ns=int(a.end_skew[j]),
        first_rank=rank_of[first_row[j]], last_rank=rank_of[last_row[j]],
        last_lateness_ns=int(a.lateness[last_row[j], j]),
        attributable_wait_ns=int(inst.last[j] - inst.second_start[j]),
        above_uncertainty=bool(a.arrival_skew[j] > unc[first_row[j]] + unc[last_row[j]]),
        transfer_ns=int(inst.transfer[j]), algbw_gbps=_gbps(inst.algbw[j]),
        busbw_gbps=_gbps(inst.busbw[j]), node_span=inst.node_span[j],
        max_sync_ns=int(a.sync[present[:, j], j].max()), split_agrees=bool(a.split_agrees[j]),
        wait_ns_by_rank={rank_of[r]: int(inst.wait[r, j]) for r in np.flatnonzero(present[:, j])},
    ) for j in order[_top(a.arrival_skew[order], limit)]]


def _kind_rows(matching: Matching, arrivals: _Arrivals) -> tuple[list[KindRow], list[Reason]]:
    """Aggregates per kind of collective and process group, then the matching's counts for it, and
    a note per such pair whose split and waits disagree."""
    counts = {(m["name"], m["group"]): m for m in matching.kinds}
    a = arrivals
    present, rank_of = matching.present, matching.ranks.tolist()
    groups = matching.group if matching.group.size == matching.size else np.full(matching.size, "", object)
    label = np.array([f"{k}|{g}" for k, g in zip(matching.name.tolist(), groups.tolist())], dtype=object)
    kinds, notes = [], []
    for pair in np.unique(label):  # one iteration per (kind, group)
        kind, group = pair.split("|", 1)
        cols = label == pair
        rows = present[:, cols].any(axis=1)
        disagree = ~a.split_agrees[cols]
        found = counts.get((kind, group), {})
        kinds.append(KindRow(
            name=kind, group=group, matched=int(cols.sum()),
            arrival_skew_ns=_stats(a.arrival_skew[cols]), end_skew_ns=_stats(a.end_skew[cols]),
            transfer_ns_total=int(a.transfer[cols].sum()),
            wait_ns_by_rank={rank_of[r]: int(a.wait[r, cols].sum()) for r in np.flatnonzero(rows)},
            sync_ns_by_rank={rank_of[r]: int(a.sync[r, cols].sum()) for r in np.flatnonzero(rows)},
            split_disagreements=int(disagree.sum()),
            **{key: found[key] for key in ("ranks", "steps", "unmatched_steps") if key in found}))
        if disagree.mean() > SPLIT_DISAGREE_NOTE_SHARE:
            notes.append(Reason("split_disagrees", {
                "kind": kind, "group": group, "disagree": int(disagree.sum()), "matched": int(cols.sum()),
                "gap_ns": float(np.median(a.split_diff[cols][disagree])),
                "end_skew_ns": float(np.median(a.end_skew[cols]))}))
    return kinds, notes


class _Blame(msgspec.Struct, frozen=True):
    """What the others waited for each rank's own delay (``_blame``), per rank row and unit."""

    attributable: np.ndarray   # per instance: what the second-latest waited for the last one
    counted: np.ndarray        # per instance: above both clocks' uncertainty + late_min_ns
    own: np.ndarray            # ... and the last rank's own delay (not passed on)
    steps: np.ndarray          # the units' step ids
    per_unit: np.ndarray       # (rank rows, units): waits caused
    cost: np.ndarray           # per rank: over all units
    per_step: np.ndarray       # per rank: cost / units
    n_units: int
    step_ns: float | None
    late_in: np.ndarray        # per rank: counted instances it was last in
    last_in: np.ndarray        # ... last by more than the clocks can tell
    of: np.ndarray             # per rank: instances it took part in
    min_cost: float            # a step costing the others this much is a late step
    steps_late: np.ndarray     # per rank: steps at or above min_cost
    by_step: bool


def _blame(matching: Matching, inst: coll.Instances, unc: np.ndarray, cfg: dict, step_ns: float | None,
           markers: list[RankMarkers] | None = None) -> _Blame:
    """What the other members waited for each rank's own delay: per instance, the last rank's
    attributable wait (what the second-latest waited for it: its start − the second-latest start,
    no more than that rank's op lasted: an eager send waits for nobody), counted when above both
    ranks' clock uncertainty + ``skew.late_min_ns``; of it, the rank's own share
    (analyses.blame: not a delay passed on from a rank it waited for, not the same delay charged
    twice, not a pipeline's structure), as a union per rank and step (one unit without steps).

    ``min_cost`` = max(``straggler_min_step_fraction`` × step, ``straggler_min_ns``): a step in
    which a rank costs the others at least this much is a step it is late in."""
    n_rows, n = matching.present.shape
    last_row, second_row = inst.last_row, inst.second_row
    attributable = inst.wait[second_row, np.arange(n)].astype(np.int64) if n else np.zeros(0, np.int64)
    tolerance = unc[last_row] + unc[second_row]
    joined = matching.present.sum(axis=0) >= 2
    counted = joined & (attributable > tolerance + int(cfg["late_min_ns"]))
    # last by more than the clocks can tell, however little: who a user sees arrive last
    last = joined & (attributable > tolerance)
    p2p = np.asarray(matching.name, dtype=str) == coll.P2P
    own = blame_mod.own_charges(matching.present, inst.start, inst.duration, inst, counted, matching.step)
    own[p2p] = 0  # a pipeline's hand-overs: its stages are charged by their time outside communication
    steps, unit_of = np.unique(matching.step, return_inverse=True)
    n_units = int(steps.size)
    # each instance's own share is the tail of its lateness (up to the last arrival); per rank and
    # step their union: collectives queued together (DDP buckets enqueued back to back) are
    # waited for at once, so one delay is counted once, not per bucket
    mine = own > 0
    per_unit = union_per_key(last_row[mine] * n_units + unit_of.ravel()[mine], inst.last[mine] - own[mine],
                             inst.last[mine], n_rows * n_units).reshape(n_rows, n_units)
    if p2p.any() and markers is not None and (steps >= 0).any():
        stage_steps = np.zeros((n_rows, n_units), bool)
        pairs = blame_mod.stage_pairs(matching.present, p2p, matching.step)
        stage_steps[pairs[:, 0], np.searchsorted(steps, pairs[:, 1])] = True
        per_unit = per_unit + blame_mod.pipeline_excess(stage_steps, markers, steps)
    cost = per_unit.sum(axis=1)
    min_cost = max(float(cfg["straggler_min_step_fraction"]) * float(step_ns or 0), float(cfg["straggler_min_ns"]))
    return _Blame(attributable=attributable, counted=counted, own=counted & (own > 0), steps=steps,
                  per_unit=per_unit, cost=cost, per_step=cost / max(n_units, 1), n_units=n_units,
                  step_ns=step_ns, late_in=np.bincount(last_row[counted], minlength=n_rows),
                  last_in=np.bincount(last_row[last], minlength=n_rows),
                  of=matching.present.sum(axis=1), min_cost=min_cost,
                  steps_late=(per_unit >= min_cost).sum(axis=1), by_step=bool((steps >= 0).any()))


def _side(matching: Matching, inst: coll.Instances, blame: _Blame, row: int, gpu) -> str | None:
    """"device" when the rank's launches are on time (launch lateness vs the other members'
    latest launch < half its attributable wait, median over its late instances) but its kernels
    start late; "host" when the launch is late too, or the collectives are host calls on a
    host-only trace (no launch times); None when not known (GPU work without launches)."""
    mine = blame.own & (inst.last_row == row)
    launch = inst.launch[:, mine]
    others = matching.present[:, mine] & (np.arange(launch.shape[0]) != row)[:, None] & (launch >= 0)
    known = (launch[row] >= 0) & others.any(axis=0)
    if not known.any():
        is_gpu = True if gpu is None else bool(np.asarray(gpu, bool)[row])
        return None if is_gpu else "host"
    other_launch = np.where(others, launch, _INT_MIN).max(axis=0)[known]
    ratio = (launch[row, known] - other_launch) / np.maximum(blame.attributable[mine][known], 1)
    return "device" if float(np.median(ratio)) < 0.5 else "host"


def straggler_phase(markers: list[RankMarkers] | None, row: int,
                    since_step: int | None = None) -> tuple[str, int] | None:
    """The phase where the rank at ``row`` of ``markers`` (each rank's aligned RankMarkers) spends
    the most time per step above the median of the other ranks (the others: with two ranks a
    median that includes the rank itself halves its excess), by the phase's own work: the
    others' forward that holds their wait for this rank is not longer work. Per step it ran, over
    the steps from ``since_step`` on when given (a rank slow since step k: its excess per faulty
    step, as its cost is). None when no phase is longer."""
    if not markers or row >= len(markers):
        return None
    per_step = []  # per rank: {phase name: own work per step it ran}
    for marker in markers:  # one per rank
        phases = marker.phases
        steps = np.asarray(phases.step, np.int64)
        work = np.asarray(phases.own_ns, np.float64)
        keep = (steps >= 0) & (steps >= (since_step if since_step is not None else 0))
        names = np.asarray(phases.name, dtype=object)[keep]
        distinct, code = np.unique(names.astype(str), return_inverse=True) if names.size else (np.zeros(0, str), None)
        totals = np.bincount(code, weights=work[keep], minlength=distinct.size) if names.size else np.zeros(0)
        ran = np.bincount(code, minlength=distinct.size) if names.size else np.zeros(0)  # one row per step
        per_step.append(dict(zip(distinct.tolist(), (totals / np.maximum(ran, 1)).tolist())))
    best = None
    for name, mine in per_step[row].items():  # one iteration per phase name
        others = [p[name] for k, p in enumerate(per_step) if k != row and name in p]
        extra = mine - float(np.median(others)) if others else 0.0
        if extra > 0 and (best is None or extra > best[1]):
            best = (name, int(extra))
    return best


def _onset(per_unit: np.ndarray, r: int, min_cost: float, cfg: dict) -> int | None:
    """The unit rank row ``r`` turned slow at (analyses/changepoint.py: the one change-point rule, with
    the straggler's threshold, late share, lead and shortest tail); None when there is none."""
    return changepoint.onset(per_unit, r, min_cost, float(cfg["straggler_min_late_share"]),
                             float(cfg["straggler_min_lead"]), int(cfg.get("straggler_min_onset_steps", 2)))


def _name_straggler(matching: Matching, inst: coll.Instances, blame: _Blame, cfg: dict, verified, markers,
                    gpu) -> tuple[StragglerRow | None, list[Reason]]:
    """The straggler: the rank whose waits caused are the largest, when (a) they reach ``min_cost``
    per step, (b) it is late in ``straggler_min_late_share`` of the steps, or of the steps from
    an onset to the last (``_onset``; then (a) counts those steps only) (one step: last in more
    than half of its collectives, by any lead above the clock uncertainty: once the others have
    waited for it, its next leads are small, and they are still its), (c) they are
    ``straggler_min_lead`` × the runner-up's and (d) its clock offset is verified. Else None and
    the note that says why. This is the one straggler rule: what-if and findings take its rank."""
    rank_of = matching.ranks.tolist()
    cost, per_step, n_units = blame.cost, blame.per_step, blame.n_units
    r = int(np.argmax(cost))
    if cost[r] <= 0:
        return None, []
    one_step = n_units == 1
    late_in, of, steps_late = int(blame.late_in[r]), int(blame.of[r]), int(blame.steps_late[r])
    big = per_step[r] >= blame.min_cost
    repeats = int(blame.last_in[r]) > of / 2 if one_step else \
        steps_late >= np.ceil(float(cfg["straggler_min_late_share"]) * n_units - 1e-9)
    onset = None
    if not one_step:  # turned slow mid-run: a late rank whose first steps were on time, else the rank
        # costing most over the last units
        shortest = max(int(cfg.get("straggler_min_onset_steps", 2)), 1)
        candidate = r if repeats else int(np.argmax(blame.per_unit[:, -shortest:].sum(axis=1)))
        onset = _onset(blame.per_unit, candidate, blame.min_cost, cfg)
        r = candidate if onset is not None else r
        late_in, of, steps_late = int(blame.late_in[r]), int(blame.of[r]), int(blame.steps_late[r])
    if onset is not None:
        big, repeats = blame.per_unit[r][onset:].mean() >= blame.min_cost, True
    runner_up = float(np.delete(cost, r).max()) if cost.size > 1 else 0.0
    leads = onset is not None or cost[r] >= float(cfg["straggler_min_lead"]) * runner_up  # an onset led since
    verified = np.ones(len(rank_of), bool) if verified is None else np.asarray(verified, bool)
    if not (big and repeats and leads):
        return None, _no_straggler_notes(blame, rank_of, r, big, repeats)
    if not verified[r]:
        return None, [Reason("clock_unverified", {"rank": rank_of[r], "per_step_ns": float(per_step[r]),
                                                  "late_in": late_in, "of": of})]
    return _straggler_row(matching, inst, blame, r, markers, gpu, onset), []


def _straggler_row(matching: Matching, inst: coll.Instances, blame: _Blame, r: int, markers, gpu,
                   onset: int | None) -> StragglerRow:
    """skew.straggler: the contract keys and the older ones reports read. With an onset, the
    waits it causes are per step since then."""
    rank_of = matching.ranks.tolist()
    one_step, n_units = blame.n_units == 1, blame.n_units
    per_step, step_ns = float(blame.per_step[r]), blame.step_ns
    if onset is not None:
        per_step = float(blame.per_unit[r][onset:].mean())
    phase = straggler_phase(markers, r, None if onset is None else int(blame.steps[onset]))
    attributed = phase if phase and phase[1] >= 0.5 * per_step else None
    late_units = np.flatnonzero(blame.per_unit[r] >= blame.min_cost)
    late_in = int(blame.late_in[r])
    return StragglerRow(
        rank=rank_of[r], cost_ns=None, cost_share=None,  # priced by analyses/cost.py (the replay)
        waits_caused_ns=int(round(per_step)), waits_caused_share=float(per_step / step_ns) if step_ns else None,
        total_waits_caused_ns=int(blame.cost[r]),
        late_in=late_in, last_in=int(blame.last_in[r]), of=int(blame.of[r]),
        side=_side(matching, inst, blame, r, gpu),
        pattern="single step" if one_step else "persistent" if onset is None else "since step",
        onset_step=None if onset is None else int(blame.steps[onset]), steps_late=int(late_units.size),
        steps=n_units, late_step_ids=blame.steps[late_units].tolist() if blame.by_step else [],
        phase=attributed[0] if attributed else None, phase_extra_ns=phase[1] if phase else None,
        largest_phase=phase[0] if phase else None,
        runner_up_waits_caused_ns=int(np.delete(blame.cost, r).max()) if blame.cost.size > 1 else 0,
        late_steps=int(late_units.size), threshold_ns=int(round(blame.min_cost)),
        most_often_last_rank=rank_of[int(np.argmax(blame.late_in))],
        exposed_waits_ns_by_rank=_exposed_waits(matching, inst, blame, r, late_units))


def _exposed_waits(matching: Matching, inst: coll.Instances, blame: _Blame, r: int,
                   late_units: np.ndarray) -> dict[int, int]:
    """Per other rank: the part of its waits, in the steps the straggler is late in, that no
    computation of its own overlapped (what its exposed communication owes to the straggler, at
    least: wait − the op's overlapped time; 0 where the op's exposure is unknown). Checks, findings
    and live alerts of those ranks leave it out: it is the straggler's, not theirs."""
    in_late = np.isin(matching.step, blame.steps[late_units]) if blame.by_step else \
        np.ones(matching.size, bool)
    return _owed(matching, inst, r, in_late)


def _owed_to(matching: Matching, inst: coll.Instances, r: int) -> np.ndarray:
    """(ranks, instances): what each rank waited for row ``r`` in each collective. Every wait has one
    owner: the rank whose arrival ended it. A rank's wait counts for ``r`` from the latest arrival of
    the other members as they would have arrived without ``r``'s delay: their arrival less the delay
    they carried in from ``r`` (no more than how far behind they resumed, ``blame.resumed_behind``,
    nor than what they waited for ``r`` in the step, followed back through the chain one hop a pass).
    A wait for a rank late on its own is not the straggler's (the DLRM trace: rank 7 last in 4 of 8
    collectives, credited with the waits of all 8)."""
    present, start, wait = matching.present, inst.start, inst.wait
    n_rows, n = present.shape
    if not n:
        return np.zeros(present.shape, np.int64)
    _, unit = np.unique(matching.step, return_inverse=True)
    unit = unit.ravel()
    behind = blame_mod.resumed_behind(present, start, inst.duration, matching.step)
    others = present & (np.arange(n_rows)[:, None] != r)
    waited_for_r = np.zeros((n_rows, int(unit.max()) + 1), np.int64)  # per rank and step
    owed = np.zeros(present.shape, np.int64)
    for _ in range(n_rows):  # a chain has at most one hop per rank
        carried = np.minimum(behind, waited_for_r[:, unit])
        without_r = np.where(others, start - carried, _INT_MIN).max(axis=0)  # latest arrival but r's delay
        owed = np.where(others, np.clip(inst.last[None, :] - np.maximum(start, without_r[None, :]), 0, wait), 0)
        again = np.zeros_like(waited_for_r)
        np.maximum.at(again, (slice(None), unit), owed)
        if (again == waited_for_r).all():
            break
        waited_for_r = again
    return owed


def _owed(matching: Matching, inst: coll.Instances, r: int, columns: np.ndarray) -> dict[int, int]:
    """_exposed_waits over the collectives ``columns`` (a mask): per rank other than row ``r``, only
    what it waited for ``r`` (``_owed_to``)."""
    exposed = matching.exposed_ns if matching.exposed_ns.shape == matching.present.shape else \
        np.full(matching.present.shape, -1, np.int64)
    owed = np.minimum(np.clip(inst.wait - (inst.duration - exposed), 0, None), _owed_to(matching, inst, r))
    rows, columns = np.nonzero(matching.present & (exposed >= 0) & columns[None, :] & (owed > 0))
    # ops waiting at once (buckets queued together) wait once: a union of each wait's last part
    ends = inst.last[columns]
    total = union_per_key(rows, ends - owed[rows, columns], ends, matching.present.shape[0])
    return {int(rank): int(total[row]) for row, rank in enumerate(matching.ranks.tolist()) if row != r}


def owed_waits(matching: Matching, inst: coll.Instances, straggler: StragglerRow, kind: str) -> dict[int, int]:
    """Per rank other than the named straggler (skew.straggler): what its exposed ``kind`` collectives
    owe to it, as ``exposed_waits_ns_by_rank`` counts it over every kind (analyses/sharded.py: an FSDP
    rank's exposed all-gather net of its waits for the straggler)."""
    found = np.flatnonzero(matching.ranks == straggler.rank)
    if not found.size or not matching.size:
        return {}
    late = straggler.late_step_ids
    columns = (np.isin(matching.step, late) if late else np.ones(matching.size, bool)) & \
        (np.asarray(matching.name, dtype=object) == kind)
    return _owed(matching, inst, int(found[0]), columns)


def comm_rows(view: RankView) -> tuple[np.ndarray, list[str]]:
    """The rank's communication rows as the matching sees them (``c10d::`` calls left out where the
    exchange itself is recorded) and each one's kind (what rank_markers' collectives hold)."""
    mask = view.comm & ~_duplicate_ops(view.events, view.comm)
    return np.flatnonzero(mask), _kinds(view.events, mask)


def _no_straggler_notes(blame: _Blame, rank_of: list[int], r: int, big: bool, repeats: bool) -> list[Reason]:
    """Why no rank is named, by the condition that failed: another rank costs nearly as much (the
    late rank repeats but does not lead), the late rank rotates, or one is late only in a few steps."""
    per_unit, min_cost = blame.per_unit, blame.min_cost
    label = "step" if blame.by_step else "unit"
    if big and repeats:
        second = int(np.argsort(-blame.cost)[1])
        return [Reason("delay_spread", {"rank": rank_of[r], "per_step_ns": float(blame.per_step[r]),
                                        "label": label, "second": rank_of[second],
                                        "second_per_step_ns": float(blame.per_step[second])})]
    worst = per_unit.argmax(axis=0)
    hit = per_unit.max(axis=0) >= min_cost
    culprits = sorted({rank_of[w] for w in worst[hit]})
    if len(culprits) >= 2:
        worst_by_unit = [[int(s), rank_of[w], float(c)] for s, w, c in
                         zip(blame.steps[hit][:8], worst[hit][:8], per_unit.max(axis=0)[hit][:8])]
        return [Reason("late_rank_rotates", {"ranks": culprits[:8], "label": label, "worst": worst_by_unit,
                                             "late_units": int(hit.sum()), "units": int(blame.n_units)})]
    late = np.flatnonzero(per_unit[r] >= min_cost)
    if late.size and not repeats and blame.n_units == 1:
        return [Reason("last_in_half_or_less", {"rank": rank_of[r], "last_in": int(blame.last_in[r]),
                                                "of": int(blame.of[r]), "label": label,
                                                "per_step_ns": float(blame.per_step[r])})]
    if late.size and not repeats:
        return [Reason("transient", {"rank": rank_of[r], "label": label,
                                     "steps": [int(s) for s in blame.steps[late][:8]],
                                     "late": int(late.size), "units": int(blame.n_units),
                                     "per_step_ns": float(blame.per_step[r])})]
    return []


def _dense(keys_by_rank: list[np.ndarray], values_by_rank: list[tuple[np.ndarray, ...]]):
    """Unique keys over all ranks, their presence per (rank, key) and, per value (the tuples' positions),
    a (ranks, keys) matrix."""
    width = keys_by_rank[0].shape[1] if keys_by_rank else 1
    all_keys = np.concatenate(keys_by_rank) if keys_by_rank else np.zeros((0, width), np.int64)
    unique_keys, inverse, _ = unique_rows(all_keys)
    rows = np.concatenate([np.full(k.shape[0], i) for i, k in enumerate(keys_by_rank)]).astype(np.int64)
    present = np.zeros((len(keys_by_rank), unique_keys.shape[0]), dtype=bool)
    present[rows, inverse] = True
    matrices = []
    for values in zip(*values_by_rank):  # a few value columns
        matrix = np.zeros(present.shape, np.int64)
        matrix[rows, inverse] = np.concatenate(values)
        matrices.append(matrix)
    return unique_keys, present, matrices


class _PhaseSpread(msgspec.Struct, frozen=True):
    """Per (step, phase name) key across ranks (``keys``: step, name code), and per phase name the
    aggregates of summary.json's skew.phases (``rows``)."""

    rows: list[PhaseRow]
    keys: np.ndarray
    names: np.ndarray
    start_spread: np.ndarray
    end_spread: np.ndarray
    busy_median: np.ndarray
    busy_max_row: np.ndarray
    busy: np.ndarray           # (ranks, keys)


def _phase_skew(aligned_by_rank: list[RankMarkers], rank_of: list[int]) -> _PhaseSpread:
    """Per (step, phase name): start/end spread and busy time across ranks; per phase name the
    aggregates over its steps."""
    per_rank_names = [np.asarray(a.phases.name, dtype=object).ravel() for a in aligned_by_rank]
    phase_names, name_code = ev.distinct_texts(np.concatenate(per_rank_names + [np.empty(0, object)]))
    name_codes = np.split(name_code, np.cumsum([n.size for n in per_rank_names])[:-1])
    phase_keys = [np.stack([np.asarray(a.phases.step, np.int64), codes], axis=1)
                  .reshape(-1, 2).astype(np.int64) for a, codes in zip(aligned_by_rank, name_codes)]
    pkeys, ppresent, (p_start, p_end, p_busy, p_compute) = _dense(phase_keys, [
        tuple(np.asarray(values, np.int64) for values in (a.phases.start_ns, a.phases.end_ns, a.phases.busy_ns,
                                                            a.phases.own_ns)) for a in aligned_by_rank])
    start_spread = _masked_max(p_start, ppresent) - _masked_min(p_start, ppresent)
    end_spread = _masked_max(p_end, ppresent) - _masked_min(p_end, ppresent)
    rows = []
    for code, name in enumerate(phase_names if pkeys.shape[0] else []):  # aggregates per phase name
        cols = pkeys[:, 1] == code
        totals = np.where(ppresent[:, cols], p_busy[:, cols], 0).sum(axis=1)
        has = ppresent[:, cols].any(axis=1)
        median_total = float(np.median(totals[has]))
        worst = int(np.argmax(np.where(has, totals, -1)))
        compute = np.where(ppresent[:, cols], p_compute[:, cols], 0).sum(axis=1)
        rows.append(PhaseRow(
            name=str(name), steps=int(cols.sum()),
            start_spread_ns=_stats(start_spread[cols]), end_spread_ns=_stats(end_spread[cols]),
            busy_total_median_ns=int(round(median_total)), busy_total_max_ns=int(totals[worst]),
            busy_total_max_rank=rank_of[worst],
            busy_imbalance=float(totals[worst] / median_total) if median_total > 0 else None,
            busy_ns_by_rank={rank_of[r]: int(totals[r]) for r in np.flatnonzero(has)},
            compute_ns_by_rank={rank_of[r]: int(compute[r]) for r in np.flatnonzero(has).tolist()}))
    return _PhaseSpread(rows=rows, keys=pkeys, names=phase_names, start_spread=start_spread, end_spread=end_spread,
                        busy_median=_masked_median(p_busy, ppresent),
                        busy_max_row=np.where(ppresent, p_busy, _INT_MIN).argmax(axis=0), busy=p_busy)


def step_skew(aligned_by_rank: list[RankMarkers], ranks: list[int], config: dict,
              clock_verified: bool = True) -> StepSkew:
    """Per step and phase: start/end spread across ranks (aligned clock), step-time imbalance
    (max/median of the ranks' step durations), and per phase the rank that spends the most in
    it. Steps are matched by their index; ``skew.max_rows`` steps are listed (those where the
    slowest rank loses the most against the median), the aggregates cover all. ``clock_verified``:
    every rank's clock offset was verified (spreads across ranks on clocks nobody verified are not
    real figures: the summary says so)."""
    if not aligned_by_rank:
        return StepSkew(steps=[], steps_summary=None, phases=[])
    rank_of = list(ranks)
    step_keys = [np.asarray(a.step_bounds.step, np.int64)[:, None] for a in aligned_by_rank]
    steps, present, (step_start, step_end) = _dense(step_keys, [
        (np.asarray(a.step_bounds.start_ns, np.int64), np.asarray(a.step_bounds.end_ns, np.int64))
        for a in aligned_by_rank])
    phases = _phase_skew(aligned_by_rank, rank_of)
    if steps.size == 0:
        return StepSkew(steps=[], steps_summary=None, phases=phases.rows)
    steps = steps[:, 0]
    start_spread = _masked_max(step_start, present) - _masked_min(step_start, present)
    end_spread = _masked_max(step_end, present) - _masked_min(step_end, present)
    duration = step_end - step_start
    rows_present, cols_present = np.nonzero(present)  # every column (step) has a rank: _dense made it
    median_duration = steptime.per_step(cols_present, duration[rows_present, cols_present])[1]
    max_duration = _masked_max(duration, present)
    slowest = np.where(present, duration, _INT_MIN).argmax(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        imbalance = np.where(median_duration > 0, max_duration / median_duration, np.nan)
    rows = [StepRow(step=int(steps[j]), ranks=int(present[:, j].sum()), start_spread_ns=int(start_spread[j]),
                    end_spread_ns=int(end_spread[j]), duration_median_ns=int(round(float(median_duration[j]))),
                    duration_max_ns=int(max_duration[j]), slowest_rank=rank_of[slowest[j]],
                    imbalance=None if np.isnan(imbalance[j]) else float(imbalance[j]),
                    phases=_step_phases(phases, int(steps[j]), rank_of))
            for j in _top((max_duration - median_duration).astype(np.float64), int(config["skew"]["max_rows"]))]
    finite = ~np.isnan(imbalance)
    worst = int(np.nanargmax(imbalance)) if finite.any() else None
    return StepSkew(steps=rows, phases=phases.rows, steps_summary=StepsSummary(
        count=int(steps.size), shown=len(rows),
        imbalance=None if worst is None else Imbalance(
            median=float(np.median(imbalance[finite])), max=float(imbalance[worst]),
            max_step=int(steps[worst]), max_rank=rank_of[slowest[worst]]),
        start_spread_ns=_stats(start_spread), end_spread_ns=_stats(end_spread),
        duration_median_ns=int(round(steptime.run_step_time(median_duration))),  # the job's step time
        clock_verified=clock_verified))


def _step_phases(phases: _PhaseSpread, step: int, rank_of: list[int]) -> list[StepPhase]:
    """The phases of one step across ranks."""
    return [StepPhase(name=str(phases.names[phases.keys[k, 1]]), start_spread_ns=int(phases.start_spread[k]),
                      end_spread_ns=int(phases.end_spread[k]),
                      busy_median_ns=int(round(float(phases.busy_median[k]))),
                      busy_max_ns=int(phases.busy[phases.busy_max_row[k], k]),
                      busy_max_rank=rank_of[phases.busy_max_row[k]])
            for k in (np.flatnonzero(phases.keys[:, 0] == step) if phases.keys.shape[0] else [])]
