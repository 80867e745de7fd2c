"""What-if: the step time if one thing changed (docs/whatif.md), each scenario a change of the
replay graph's durations or waits (analyses/replay.py builds and replays the graph): no straggler,
overlapped communication, twice the communication bandwidth, no dataloader wait, balanced ranks.
Numbers and reason codes only; reports/ word them (a scenario's ``why`` is a typed.Reason).
"""


from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from .. import columns
from ..matching import Matching
from ..results import RankResult
from ..sections.whatif import Scenario, WhatIf
from ..typed import Reason
from .blame import MIN_PIPELINE_STAGES, stage_pairs
from .collectives import P2P
from .replay import (
    NEG,
    PHASE_END,
    PHASE_START,
    STEP_START,
    WAIT_TOLERANCE_NS,
    Graph,
    along_queues,
    build_graph,
    gpu_waits_unseen,
    job_steps,
    replay,
    step_ns,
)

_STEP_SPAN = 1 << 32               # (rank row, step) coded as one int: steps below 2**32
GAIN_SHARE = 0.01                 # a rank gains when its median step drops by more than this share
REPLAY_ERROR_TARGET = 0.05
SCENARIOS = ("no_straggler", "overlap_communication", "comm_bandwidth_x2", "no_dataloader_wait", "balanced_ranks")


# -- scenarios: new durations or dependencies, replayed --------------------------------------

def _segment_medians(g: Graph, rows: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(segment keys, median duration) over the chain segments of ``rows`` (rank rows) that
    compute (not first, not waited), under durations ``w`` (the measured ones by default)."""
    use = np.isin(g.p_rank, rows) & ~g.p_first & ~g.p_waited
    return columns.group_medians(g.p_key[use], (g.p_w if w is None else w)[use])


def _with_medians(g: Graph, medians: tuple[np.ndarray, np.ndarray], rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Segment durations ``w`` with those of ``rows`` set to the medians of their keys."""
    w = w.copy()
    use = np.flatnonzero(np.isin(g.p_rank, rows) & ~g.p_first & ~g.p_waited)
    median = columns.lookup(medians, g.p_key[use])
    known = ~np.isnan(median)
    w[use[known]] = np.round(median[known]).astype(np.int64)
    return w


def _without_lateness(g: Graph, row: int, others: np.ndarray, since: int | None = None) -> np.ndarray:
    """Segment durations with the straggler's (``row``) lateness removed and its jitter kept;
    ``since``: only from that step on, its lateness measured there (a rank that turned slow).

    Its lateness per segment is its median excess over the other ranks' same segment of the same
    step; that is taken off every step's segment. A rank's step-to-step variation is not
    lateness: capping it at the others' median would make it never the slowest, and with few
    ranks predict a job faster than the one measured without the straggler. Two bounds: a
    segment never drops below the others' median of its step (or its own, when shorter), and it
    is never longer than the longest the other ranks show for that segment (one-off late steps).
    """
    w = g.p_w.copy()
    use = np.flatnonzero((g.p_rank == row) & ~g.p_first & ~g.p_waited & (g.p_step >= (since or NEG)))
    same_step = columns.lookup(_segment_medians(g, others), g.p_key[use])
    known = ~np.isnan(same_step)
    use, same_step = use[known], same_step[known]
    if not use.size:
        return w
    own = w[use].astype(np.float64)
    phase = g.p_phase_key[use]
    lateness = np.maximum(columns.lookup(columns.group_medians(phase, own - same_step), phase), 0)
    rest = np.isin(g.p_rank, others) & ~g.p_first & ~g.p_waited
    longest = np.full(int(g.p_phase_key.max()) + 1, np.nan)
    np.fmax.at(longest, g.p_phase_key[rest], g.p_w[rest].astype(np.float64))
    floor = np.minimum(own, same_step)
    ceiling = np.maximum(np.nan_to_num(longest[phase], nan=np.inf), floor)
    w[use] = np.round(np.clip(own - lateness, floor, ceiling)).astype(np.int64)
    return w


def _depths(g: Graph) -> np.ndarray:
    """Per point, how many phases of its rank are open just after it."""
    step_in = (g.p_kind == PHASE_START).astype(np.int64) - (g.p_kind == PHASE_END)
    opened = np.cumsum(step_in)
    heads = np.flatnonzero(g.p_first)
    return opened - np.repeat(opened[heads] - step_in[heads], np.diff(np.r_[heads, g.p_kind.size]))


def _segment_phases(g: Graph) -> np.ndarray:
    """Per point, the label code of the innermost phase the segment ending there lies in (-1: in
    none): the latest phase start of its rank, at or before the previous point, at that point's
    depth. Phases nest, so no later start at the same depth is still open."""
    depth = _depths(g)
    starts = np.flatnonzero(g.p_kind == PHASE_START)
    group = g.p_rank.astype(np.int64) * (int(depth.max(initial=0)) + 1) + np.maximum(depth, 0)
    found = columns.search(group[starts], starts, group, np.arange(depth.size), "right") - 1
    at = starts[np.maximum(found, 0)] if starts.size else np.zeros(depth.size, np.int64)
    inner = np.where((found >= 0) & (depth > 0) & (group[at] == group), g.p_label[at], -1)
    return np.where(g.p_first, -1, np.r_[-1, inner[:-1]])


def _stage_steps(matching: Matching) -> np.ndarray:
    """(rank rows, step numbers) of the pipeline stages: the ranks with a matched send/recv in a step
    that at least ``MIN_PIPELINE_STAGES`` ranks hand over in (as analyses.blame charges stages)."""
    pairs = stage_pairs(matching.present, np.asarray(matching.name, dtype=str) == P2P, matching.step)
    pairs = pairs[pairs[:, 1] >= 0]  # steps only
    if not pairs.size:
        return np.zeros((0, 2), np.int64)
    steps, count = np.unique(pairs[:, 1], return_counts=True)
    return pairs[np.isin(pairs[:, 1], steps[count >= MIN_PIPELINE_STAGES])]


class _StageCells(msgspec.Struct, frozen=True):
    """The pipeline stages' time outside communication per cell: a step and the innermost phase a
    segment lies in."""

    at: np.ndarray         # the segments counted
    cell: np.ndarray       # each one's cell
    keys: np.ndarray       # (step, phase) per cell
    rows: np.ndarray       # the stages' rank rows
    totals: np.ndarray     # stage x cell
    present: np.ndarray    # stage x cell: it is a stage in that step


class _Context(msgspec.Struct, frozen=True):
    """What the scenarios of one what-if run share."""

    dataloader: str        # the dataloader phase's name
    straggler: tuple       # (its rank row or None, the scenario info: its rank, or why none)
    since: int | None      # the step the straggler turned slow at
    stages: np.ndarray     # the pipeline stages: (rank row, step) pairs


def _stage_cells(g: Graph, stages: np.ndarray, w: np.ndarray) -> _StageCells:
    """The pipeline stages' time outside communication per cell, under durations ``w``."""
    stage_key = np.unique(stages[:, 0] * _STEP_SPAN + stages[:, 1])
    use = ~g.p_first & ~g.p_waited & np.isin(g.p_rank.astype(np.int64) * _STEP_SPAN + g.p_step, stage_key)
    phase = _segment_phases(g)
    keys, inverse = np.unique(np.stack([g.p_step[use], phase[use]], axis=1), axis=0, return_inverse=True)
    rows, cell = np.unique(stages[:, 0]), inverse.reshape(-1)
    totals = np.zeros((rows.size, keys.shape[0]))
    np.add.at(totals, (np.searchsorted(rows, g.p_rank[use]), cell), w[use])
    present = np.isin(rows[:, None] * _STEP_SPAN + keys[None, :, 0], stage_key)
    return _StageCells(at=np.flatnonzero(use), cell=cell, keys=keys, rows=rows, totals=totals, present=present)


def _without_stage_lateness(g: Graph, row: int, stages: np.ndarray, since: int | None = None) -> np.ndarray:
    """Segment durations with pipeline stage ``row``'s lateness removed and its jitter kept. Stages
    run different segments (the first has no recv, the last computes the loss): no segment of one
    has a twin on another, but their time outside communication in a phase (the innermost one a
    segment lies in) compares, as analyses.blame.pipeline_excess compares their steps. Its
    lateness per phase is its median excess over the other stages' median time there in the same step
    (``since``: from that step on); that is taken off every step where it is that far over the
    median (no further), over its segments in the phase as ``_spread`` puts it."""
    w = g.p_w.copy()
    cells = _stage_cells(g, stages, g.p_w)
    keys, stage_rows, totals, in_step = cells.keys, cells.rows, cells.totals, cells.present
    mine = int(np.searchsorted(stage_rows, row))
    if not keys.size or mine >= stage_rows.size or stage_rows[mine] != row:
        return w
    others = in_step & (np.arange(stage_rows.size) != mine)[:, None]
    median, compared = np.full(keys.shape[0], np.nan), others.any(axis=0)
    median[compared] = np.nanmedian(np.where(others, totals, np.nan)[:, compared], axis=0)
    judged = in_step[mine] & compared & (keys[:, 0] >= (since or NEG))
    excess = totals[mine] - median
    by_phase = columns.group_medians(keys[judged, 1], excess[judged])
    lateness = np.maximum(np.nan_to_num(columns.lookup(by_phase, keys[:, 1])), 0)
    removed = np.where(judged, np.minimum(lateness, np.maximum(excess, 0)), 0)
    at = cells.at
    here = g.p_rank[at] == row
    w[at[here]] -= _spread(g, at[here], cells.cell[here], removed, g.p_w)
    return w


def _balanced_stages(g: Graph, stages: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Segment durations ``w`` with every pipeline stage's time outside communication in a step's
    phase set to the median of the stages that spend time there: the pipeline's balanced_ranks
    (stages run unlike segments, so segment medians across them mean nothing). Time comes off a
    stage over the median as ``_spread`` puts it and goes onto one under it by its segments'
    durations; a phase only one stage has (the last stage's loss) is its own and kept."""
    cells = _stage_cells(g, stages, w)
    totals, at, cell = cells.totals, cells.at, cells.cell
    if not cells.keys.size:
        return w
    busy = cells.present & (totals > 0)
    shared = busy.sum(axis=0) >= 2
    median = np.zeros(totals.shape[1])
    median[shared] = np.nanmedian(np.where(busy, totals, np.nan)[:, shared], axis=0)
    delta = np.where(busy & shared, median - totals, 0)  # stage x cell: > 0 more work, < 0 less
    stage = np.searchsorted(cells.rows, g.p_rank[at])
    out = w.copy()
    for k in range(cells.rows.size):  # a handful of stages
        mine = stage == k
        points, cells_of = at[mine], cell[mine]
        removed = _spread(g, points, cells_of, np.maximum(-delta[k], 0), w)
        share = np.maximum(delta[k], 0) / np.maximum(totals[k], 1)
        out[points] += np.round(w[points] * share[cells_of]).astype(np.int64) - removed
    return out


def _spread(g: Graph, points: np.ndarray, cell: np.ndarray, removed: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per point of ``points`` (segments of one rank, each in a ``cell``), its share of its cell's
    ``removed`` time (under durations ``w``). First where a segment is longer than its repeats in
    the cell (the same two points, another micro-batch: a pause in one of them), by that excess;
    what is left by the segments' durations (a stage that computes everything slower)."""
    d = w[points].astype(np.float64)
    pair = g.p_label[points - 1].astype(np.int64) * g.labels.size + g.p_label[points]
    group, _ = columns.runs(cell, pair)
    base = np.full(int(group.max(initial=-1)) + 1, np.inf)
    np.minimum.at(base, group, d)
    over = d - base[group]
    n = removed.size
    total_over = np.bincount(cell, over, minlength=n)
    from_over = over * np.minimum(1, removed / np.maximum(total_over, 1))[cell]
    left = np.maximum(removed - total_over, 0)
    rest = d - from_over
    by_duration = rest * (left / np.maximum(np.bincount(cell, rest, minlength=n), 1))[cell]
    return np.round(np.minimum(from_over + by_duration, d)).astype(np.int64)


def _named(g: Graph, rank: int | None) -> tuple[int | None, dict]:
    """The row of the rank the skew analysis named a straggler (None: it named none)."""
    rows = np.flatnonzero(g.rank_numbers == rank) if rank is not None else np.zeros(0, np.int64)
    return (int(rows[0]), {"rank": int(rank)}) if rows.size else (None, {"reason": "not_named"})


def _input_phases(g: Graph, waited: np.ndarray) -> np.ndarray:
    """Per op (rows: from point, to point, fraction in ppm; -1: keep its issue point): where a
    collective could have been issued had it been issued as soon as its input was ready. The
    K collectives issued one after another right after a phase ends (outside every phase, no
    phase opens in between, same step; ops queued behind them on their lane included), of which the chain waits for at
    least one, are taken to have their inputs ready evenly through that phase, the k-th at
    (k + 1) / K of it, as DDP buckets during backward; the last stays at the phase's end. A
    collective issued inside a phase keeps its issue point."""
    hoist = np.full((g.o_start.size, 3), -1, np.int64)
    root = along_queues(g.o_issue, g.o_issue < 0, g.o_lane_prev, -1)  # a queued op: its queue head's issue
    bound = (g.p_kind == PHASE_END) | (g.p_kind == PHASE_START) | (g.p_kind == STEP_START)
    last_bound = np.maximum.accumulate(np.where(bound, np.arange(g.p_kind.size), -1))
    after = np.where(root >= 0, last_bound[np.maximum(root, 0)], -1)
    safe = np.maximum(after, 0)
    depth = _depths(g)
    ok = (after >= 0) & (g.p_kind[safe] == PHASE_END) & (g.p_rank[safe] == g.p_rank[np.maximum(root, 0)]) \
        & ~g.p_loader[safe] & (depth[np.maximum(root, 0)] == 0)  # issued outside every phase
    serialized = np.unique(after[waited[ok[waited]]]) if waited.size else np.zeros(0, np.int64)
    ends = np.intersect1d(np.unique(after[ok]), serialized)
    begin = np.full(g.p_kind.size, -1, np.int64)
    begin[ends] = _phase_starts(g, ends)
    mine = np.flatnonzero(ok & (begin[safe] >= 0))
    mine = mine[np.lexsort((g.o_start[mine], root[mine], after[mine]))]  # per phase end, in issue order
    _, k = columns.runs(after[mine])
    count = np.bincount(after[mine], minlength=g.p_kind.size)[after[mine]]
    hoist[mine] = np.stack([begin[after[mine]], after[mine], ((k + 1) * 1_000_000) // np.maximum(count, 1)], axis=1)
    return hoist


def _phase_starts(g: Graph, ends: np.ndarray) -> np.ndarray:
    """The start point of each phase-end point: the latest point of its rank, before it, labelled
    with the same name opening (``name<`` for ``name>``); -1 where none is."""
    if not ends.size:
        return np.zeros(0, np.int64)
    position = {text: code for code, text in enumerate(g.labels.tolist())}
    opening = np.asarray([position.get(f"{text[:-1]}<", -1) for text in position], np.int64)  # per label text
    order = np.lexsort((np.arange(g.p_label.size), g.p_label))
    want = opening[g.p_label[ends]]
    found = columns.search(g.p_label[order], order, want, ends, "right") - 1
    lo = order[np.maximum(found, 0)]
    first = np.maximum.accumulate(np.where(g.p_first, np.arange(g.p_first.size), 0))[ends]
    ok = (want >= 0) & (found >= 0) & (g.p_label[lo] == want) & (lo >= first)
    return np.where(ok, lo, -1)


def _scenario_inputs(name: str, g: Graph, context: _Context, base: tuple) -> tuple[tuple | None, dict]:
    """(w, transfer, edges) of a scenario applied on top of ``base`` (the measured durations and
    waits, or another scenario's), or None, and what it changed (or why it does not apply)."""
    w, transfer, edges, hoist = base
    if name == "no_straggler":
        row, info = context.straggler
        if row is None:
            return None, info
        since, stages = context.since, context.stages
        fixed_w = _without_stage_lateness(g, row, stages, since) if (stages[:, 0] == row).any() \
            else _without_lateness(g, row, np.setdiff1d(np.arange(g.n_ranks), [row]), since)
        new_w = w - (g.p_w - fixed_w)
        mine = g.step_index[g.step_rank == row]
        steps = max(int(np.unique(mine[mine >= (since or NEG)]).size), 1)
        return (new_w, transfer, edges, hoist), {**info, "removed_per_step_ns": int((w - new_w).sum() // steps)}
    if name == "balanced_ranks":
        if g.n_ranks < 2:
            return None, {"reason": "one_rank"}
        stages = context.stages
        rows = np.setdiff1d(np.arange(g.n_ranks), stages[:, 0])
        w = _balanced_stages(g, stages, w) if stages.size else w
        return (_with_medians(g, _segment_medians(g, rows, w), rows, w), transfer, edges, hoist), {}
    if name == "comm_bandwidth_x2":
        if not (transfer > 0).any():
            return None, {"reason": "no_transfer"}
        return (w, transfer // 2, edges, hoist), {"transfer_ns": int(transfer.sum())}
    if name == "no_dataloader_wait":
        removed = int(w[g.p_loader].sum())
        if removed <= 0:
            return None, {"reason": "no_dataloader", "phase": context.dataloader}
        return (np.where(g.p_loader, 0, w), transfer, edges, hoist), {"removed_ns": removed}
    if name == "overlap_communication":
        needed = _needed_edges(g, edges)
        if not (~needed).any():
            return None, {"reason": "already_overlapped"}
        done = (g.o_step_end >= 0) & (g.o_end <= g.p_t[np.maximum(g.o_step_end, 0)] + WAIT_TOLERANCE_NS)
        ops = np.flatnonzero(done)
        step_end = np.stack([g.o_step_end[ops], ops, np.zeros(ops.size, np.int64)], axis=1)
        ready_early = _input_phases(g, np.unique(edges[~needed, 1]))
        kept = np.concatenate([edges[needed], step_end])
        return (w, transfer, kept, ready_early), {"waits_removed": int((~needed).sum()),
                                                  "issued_earlier": int((ready_early[:, 0] >= 0).sum())}
    raise ValueError(f"unknown what-if scenario {name!r}; known: {', '.join(SCENARIOS)}")




def _needed_edges(g: Graph, edges: np.ndarray) -> np.ndarray:
    """Per edge of ``edges`` (the graph's or a subset): whether it is one the thread needs (the
    graph's ``e_needed``)."""
    if not edges.shape[0] or not g.edges.shape[0]:
        return np.zeros(edges.shape[0], bool)
    needed = np.zeros(g.p_t.size, bool)
    needed[g.edges[g.e_needed, 0]] = True
    return needed[edges[:, 0]]


def _job_step_ns(g: Graph, t: np.ndarray) -> int:
    """The job's step time under point times ``t`` (median over steps of ``_job_steps``)."""
    return int(round(float(np.median(job_steps(g, step_ns(g, t))[1]))))


def _rank_medians(g: Graph, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank rows ascending, each one's median step)."""
    return columns.group_medians(g.step_rank, ns)

def _why(info: dict) -> Reason:
    """Why a scenario does not apply (its code: not_named, one_rank, no_transfer, no_dataloader,
    already_overlapped, no_steps; reports/findings.py words it) and the figures its words take."""
    return Reason(info["reason"], {key: value for key, value in info.items() if key != "reason"})


def _replay_notes(g: Graph, error: float | None) -> list[Reason]:
    """Why the replay misses the measured steps, when it does."""
    if error is None or error <= REPLAY_ERROR_TARGET:
        return []
    return [Reason("replay_unexplained")]


def _partial_note(g: Graph) -> list[Reason]:
    """Columns that are not one join: said, because the matching (not the replay) may be wrong."""
    partial = int(np.unique(g.o_col[g.o_partial]).size)
    if not partial:
        return []
    return [Reason("partial_columns", {"partial": partial, "columns": int(np.unique(g.o_col).size)})]


def _unwaited_gpu_note(g: Graph) -> list[Reason]:
    """GPU collectives that the host never waits for: what faster communication cannot show."""
    if not gpu_waits_unseen(g):
        return []
    return [Reason("gpu_waits_unseen", {"collectives": int(np.flatnonzero(g.o_gpu).size)})]




class Measured(msgspec.Struct, frozen=True):
    """A job's replay graph and its measured replay (point times, op ends): made once per merge and
    read by every what-if run and the critical path. ``replayed`` None: no steps to replay, or the
    replay could not run (``safe_measured`` warned)."""

    graph: Graph
    replayed: tuple[np.ndarray, np.ndarray] | None


def measured(results: list[RankResult], matching: Matching, config: dict) -> Measured:
    """The replay graph of ``results`` and its replay with the measured durations and transfers."""
    g = build_graph(results, matching, str(config.get("phases", {}).get("dataloader", "Dataloader")))
    return Measured(g, replay(g, g.p_w, g.o_transfer, g.edges, None) if g.step_start.size else None)


def safe_measured(results: list[RankResult], matching: Matching, config: dict,
                  warnings: list[str]) -> Measured | None:
    """``measured`` for pipeline.combine: a trace the replay cannot read costs the what-if (and the
    critical path, which walks the same replay), with a warning saying so, not the whole merge. A graph
    whose replay fails is kept for the critical path, which then says why it has no path."""
    try:
        g = build_graph(results, matching, str(config.get("phases", {}).get("dataloader", "Dataloader")))
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(Reason("whatif_skipped", {"error": f"{type(error).__name__}: {error}"}))
        return None
    try:
        return Measured(g, replay(g, g.p_w, g.o_transfer, g.edges, None) if g.step_start.size else None)
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(Reason("whatif_skipped", {"error": f"{type(error).__name__}: {error}"}))
        return Measured(g, None)


def whatif(results: list[RankResult], matching: Matching, config: dict,
           scenarios: tuple[str, ...] = SCENARIOS, straggler_rank: int | None = None,
           straggler_since: int | None = None, straggler_fix: str = "no_straggler",
           made: Measured | None = None) -> WhatIf:
    """summary.json's ``whatif``: measured and replayed median step, the replay error (median over
    steps of |replayed − measured| / measured) and each scenario's predicted median step,
    saving against the measured one and the ranks whose own median step drops.
    ``straggler_rank``: the rank the skew analysis named (skew.py holds the one straggler rule),
    None when it named none: no_straggler then does not apply. Where it applies, every other
    scenario is also replayed on top of it (``saving_after_straggler_ns``): a delay the straggler
    causes is its cost, not also that of the waits it propagates into. ``made``: the graph and its
    measured replay where the caller made them (``measured``), else made here.
    ``straggler_since``: the step it turned slow at (skew's onset): no_straggler then removes its
    lateness from there on and its saving is per step since then. ``straggler_fix``: the scenario that
    fixes the straggler, on top of which the others are replayed: ``balanced_ranks`` where its
    lateness is its expert load (analyses/alltoall.straggler_load), whose fix is balancing the ranks."""
    dataloader = str(config.get("phases", {}).get("dataloader", "Dataloader"))
    made = made if made is not None else measured(results, matching, config)
    g = made.graph
    if not g.step_start.size:
        why = _why({"reason": "no_steps"})
        return WhatIf(measured_step_ns=None, replayed_step_ns=None, replay_error=None, replay_error_max=None,
                      steps=0, notes=[why],
                      scenarios=[Scenario(name=n, predicted_step_ns=None, saving_ns=None, ranks_gaining=[],
                                          applies=False, why=why) for n in scenarios])
    measured_inputs = (g.p_w, g.o_transfer, g.edges, None)
    t, _ = made.replayed
    replayed = step_ns(g, t)
    job_measured, job_replayed = job_steps(g, step_ns(g, g.p_t))[1], job_steps(g, replayed)[1]
    errors = np.abs(job_replayed - job_measured) / np.maximum(job_measured, 1)
    measured_ns = int(round(float(np.median(job_measured))))
    context = _Context(dataloader=dataloader, straggler=_named(g, straggler_rank), since=straggler_since,
                       stages=_stage_steps(matching))
    base_by_rank = _rank_medians(g, replayed)[1]
    fixed, _ = _scenario_inputs(straggler_fix, g, context, measured_inputs) if context.straggler[0] is not None \
        else (None, None)
    fixed_ns = _job_step_ns(g, replay(g, *fixed)[0]) if fixed else None
    rows = [_scenario(name, g, context, measured_ns, base_by_rank, measured_inputs) for name in scenarios]
    if fixed is not None:
        rows = [row if row.name in ("no_straggler", straggler_fix) else replace(
            row, saving_after_straggler_ns=_saving_on(row.name, g, context, fixed, fixed_ns)) for row in rows]
    error = float(np.median(errors))
    return WhatIf(measured_step_ns=measured_ns, replayed_step_ns=int(round(float(np.median(job_replayed)))),
                  replay_error=error, replay_error_max=float(errors.max()), steps=int(job_measured.size),
                  notes=_partial_note(g) + _replay_notes(g, error) + _unwaited_gpu_note(g), scenarios=rows)


def _saving_on(name: str, g: Graph, context: _Context, base: tuple, base_ns: int) -> int | None:
    """The saving of a scenario replayed on top of ``base`` (another scenario's inputs), against
    ``base_ns`` (that scenario's predicted step); None when it does not apply there."""
    inputs, _ = _scenario_inputs(name, g, context, base)
    if inputs is None:
        return None
    return base_ns - _job_step_ns(g, replay(g, *inputs)[0])


def _scenario(name: str, g: Graph, context: _Context, measured_ns: int, base_by_rank: np.ndarray,
              base: tuple) -> Scenario:
    """One scenario's row: replayed with its changes, or why it does not apply. ``base_by_rank``:
    the replayed median step of each rank row (ascending rows)."""
    inputs, info = _scenario_inputs(name, g, context, base)
    if inputs is None:
        return Scenario(name=name, predicted_step_ns=None, saving_ns=None, ranks_gaining=[], applies=False,
                        why=_why(info), **{k: v for k, v in info.items() if k != "reason"})
    t, _ = replay(g, *inputs)
    rows, by_rank = _rank_medians(g, step_ns(g, t))
    predicted = _job_step_ns(g, t)
    gaining = [int(g.rank_numbers[r]) for r in rows[(base_by_rank - by_rank) > GAIN_SHARE * base_by_rank].tolist()]
    since = context.since if name == "no_straggler" else None
    saving = measured_ns - predicted if since is None else _saving_since(g, t, since)
    return Scenario(name=name, predicted_step_ns=predicted, saving_ns=saving, ranks_gaining=gaining, applies=True,
                    why=None, **info, **({"since_step": since} if since is not None else {}))


def _saving_since(g: Graph, t: np.ndarray, since: int) -> int:
    """The job's median step from step ``since`` on, measured, less the same under times ``t``:
    what a fix saves per step where the lateness is (a rank that turned slow at ``since``)."""
    steps, measured = job_steps(g, step_ns(g, g.p_t))
    predicted = job_steps(g, step_ns(g, t))[1]
    late = steps >= since
    if not late.any():
        return 0
    return int(round(float(np.median(measured[late])) - float(np.median(predicted[late]))))


def safe_whatif(results: list[RankResult], matching: Matching, config: dict, warnings: list[str],
                made: Measured | None, straggler_rank: int | None = None, straggler_since: int | None = None,
                straggler_fix: str = "no_straggler") -> WhatIf | None:
    """``whatif`` for pipeline.combine on the measured replay ``made`` (``safe_measured``; None, or no
    replay: it could not run, and said so): a trace the scenarios cannot replay costs the what-if, with a
    warning saying so, not the whole merge."""
    if made is None or (made.replayed is None and made.graph.step_start.size):
        return None
    try:
        return whatif(results, matching, config, straggler_rank=straggler_rank, straggler_since=straggler_since,
                      straggler_fix=straggler_fix, made=made)
    except (ValueError, KeyError, IndexError) as error:
        warnings.append(Reason("whatif_skipped", {"error": f"{type(error).__name__}: {error}"}))
        return None
