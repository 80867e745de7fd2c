"""Expert-parallel all-to-all: the bytes each rank sends and receives per process group, and the
expert load imbalance finding (docs/diagnosis.md).

Uneven splits are what an MoE all-to-all is (the router sends each expert's rank its tokens), so a rank
that receives more than another is no fault in itself; a rank whose experts get far more tokens than the
others' over the group's all-to-alls is a load imbalance, and its fix is a balanced router (the what-if
``balanced_ranks`` prices it). Which side of an all-to-all is the experts' is read off the trace, not
assumed: the dispatch gathers the tokens to the experts (the received bytes differ across ranks), the
combine sends them back (the sent bytes differ), and so do their gradients in backward. Per all-to-all
matched across the group (by step and order within it) the side whose bytes differ more across ranks is
the experts' side; a rank's load is its bytes on that side, summed. Codes and numbers only.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..results import RankResult
from ..sections.alltoall import AllToAllGroup, AllToAllRank
from ..sections.findings import ExpertImbalanceEvidence, Observed
from ..sections.skew import Skew
from ..sections.whatif import WhatIf
from ..typed import ABSENT
from . import changepoint, imbalance

ALLTOALL = "alltoall"


class _Exchanges(msgspec.Struct, frozen=True):
    """Every rank's all-to-alls with both sides known, as columns."""

    row: np.ndarray        # the rank's row
    group: np.ndarray
    step: np.ndarray
    ordinal: np.ndarray    # order within (rank, group, step) by start
    sent: np.ndarray       # bytes
    recv: np.ndarray


def _ops(results: list[RankResult]) -> _Exchanges | None:
    """Every rank's all-to-alls with both sides known (None: no rank has one)."""
    parts = []
    for row, result in enumerate(results):  # one iteration per rank
        ops = result.markers.collectives
        sent, recv = ops.sent_bytes, ops.recv_bytes
        if not sent or not recv:
            continue
        known = (np.asarray(ops.name, object) == ALLTOALL) & (np.asarray(sent) >= 0) & (np.asarray(recv) >= 0)
        groups = np.asarray(ops.group or [""] * known.size, object)
        parts.append((np.full(int(known.sum()), row), groups[known], np.asarray(ops.step, np.int64)[known],
                      np.asarray(ops.start_ns, np.int64)[known], np.asarray(sent, np.int64)[known],
                      np.asarray(recv, np.int64)[known]))
    if not parts:
        return None
    row, group, step, start, sent, recv = (np.concatenate(column) for column in zip(*parts))
    group = group.astype(str)
    order = np.lexsort((start, step, group, row))
    row, group, step, sent, recv = row[order], group[order], step[order], sent[order], recv[order]
    first = np.r_[True, (row[1:] != row[:-1]) | (group[1:] != group[:-1]) | (step[1:] != step[:-1])]
    starts = np.flatnonzero(first)
    ordinal = np.arange(row.size) - np.repeat(starts, np.diff(np.r_[starts, row.size]))
    return _Exchanges(row=row, group=group, step=step, ordinal=ordinal, sent=sent, recv=recv)


def _spread(matrix: np.ndarray) -> np.ndarray:
    """Per column, max / median across the rows (1 where the median is 0)."""
    middle = np.median(matrix, axis=0)
    return np.where(middle > 0, matrix.max(axis=0) / np.maximum(middle, 1), 1.0)


def _turned_hot(load: np.ndarray, step: np.ndarray, rule: tuple[float, float, float]) -> tuple[int, int] | None:
    """(member row, position of its first hot step) when one member's load turned hot mid-run and stayed so,
    by the one change-point rule (analyses/changepoint.py) over each step's load ratio less 1: a router
    skewed from step k on has a window ratio diluted by the steps before it (2x for 4 of 8 steps: 1.45),
    and its finding says since when."""
    steps, column = np.unique(step, return_inverse=True)
    per_step = np.zeros((load.shape[0], steps.size))
    np.add.at(per_step, (slice(None), column.ravel()), load)
    others = np.stack([np.median(np.delete(per_step, i, axis=0), axis=0) for i in range(load.shape[0])])
    excess = np.where(others > 0, per_step / np.maximum(others, 1), 1.0) - 1.0
    limit, late_share, lead = rule
    candidate = int(np.argmax(excess[:, -2:].sum(axis=1)))
    onset = changepoint.onset(excess, candidate, limit - 1.0, late_share, lead)
    return None if onset is None else (candidate, onset)


def _group(ops: _Exchanges, mine: np.ndarray, name: str, ranks: list[int], rule: tuple[float, float, float]
           ) -> AllToAllGroup | None:
    """The group's rows: its all-to-alls that every member has (matched by step and order in it)."""
    members, member_row = np.unique(ops.row[mine], return_inverse=True)
    keys, column = np.unique(np.stack([ops.step[mine], ops.ordinal[mine]], axis=1), axis=0,
                             return_inverse=True)
    shape = (members.size, keys.shape[0])
    sent, recv, present = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, bool)
    sent[member_row, column.ravel()], recv[member_row, column.ravel()] = ops.sent[mine], ops.recv[mine]
    present[member_row, column.ravel()] = True
    full = present.all(axis=0)
    if members.size < 2 or not full.any():
        return None
    sent, recv = sent[:, full], recv[:, full]
    recv_side = _spread(recv) >= _spread(sent)
    per_op = np.where(recv_side, recv, sent)
    load, limit, onset_step, steps_since = per_op.sum(axis=1), rule[0], None, None
    turned = _turned_hot(per_op, keys[full, 0], rule)
    if turned is not None:  # the load since the onset is what the finding weighs
        first = np.unique(keys[full, 0])[turned[1]]
        load, onset_step = per_op[:, keys[full, 0] >= first].sum(axis=1), int(first)
        steps_since = int(np.unique(keys[full, 0][keys[full, 0] >= first]).size)
    ratio = [_ratio(load, i) for i in range(members.size)]
    rows = [AllToAllRank(rank=ranks[m], ops=int(full.sum()), sent_bytes=int(sent[i].sum()),
                         recv_bytes=int(recv[i].sum()), load_bytes=int(load[i]), load_ratio=ratio[i])
            for i, m in enumerate(members.tolist())]
    hot = sorted((r for r in rows if r.load_ratio is not None and r.load_ratio >= limit), key=lambda r: -r.load_ratio)
    known = [r for r in ratio if r is not None]
    return AllToAllGroup(group=name, ranks=[r.rank for r in rows], ops=int(full.sum()),
                         steps=int(np.unique(keys[full, 0]).size), recv_side_ops=int(recv_side.sum()), rows=rows,
                         load_ratio_max=max(known) if known else None, hot_ranks=[r.rank for r in hot],
                         limit_ratio=limit, **({} if onset_step is None else
                                               {"onset_step": onset_step, "steps_since": steps_since}))


def _ratio(load: np.ndarray, i: int) -> float | None:
    """Row i's load over the median of the others' (with two ranks, a median that holds the rank
    itself would halve its excess)."""
    others = float(np.median(np.delete(load, i)))
    return float(load[i] / others) if others > 0 else None


def groups(results: list[RankResult], config: dict) -> list[AllToAllGroup]:
    """summary.json ``alltoall``: per process group with all-to-alls whose sides are known, each rank's
    bytes sent, received and on the experts' side."""
    ops = _ops(results)
    if ops is None:
        return []
    rule = (float(config["diagnosis"]["expert_imbalance_ratio"]), float(config["skew"]["straggler_min_late_share"]),
            float(config["skew"]["straggler_min_lead"]))
    ranks = [r.rank for r in results]
    out = []
    for name in np.unique(ops.group).tolist():  # one iteration per all-to-all group
        found = _group(ops, ops.group == name, name, ranks, rule)
        out += [found] if found else []
    return out


def _since_share(hot_groups: list[AllToAllGroup]) -> float:
    """The share of the steps a load that turned uneven at step k is in (1: uneven from the start): the
    replay's saving per step over the window, spread over the steps since k, is theirs."""
    return min((g.steps_since / g.steps for g in hot_groups if g.steps_since is not ABSENT and g.steps),
               default=1.0)


def standing_groups(found: list[AllToAllGroup], whatif: WhatIf | None, config: dict) -> list[AllToAllGroup]:
    """The all-to-all groups with a hot rank, unless the replay prices balancing the ranks under the
    straggler's floor (the one cost model's veto, imbalance.replay_disagrees): none then."""
    floor = float(config["skew"]["straggler_min_step_fraction"])
    hot_groups = [g for g in found if g.hot_ranks]
    return [] if not hot_groups or imbalance.replay_disagrees(whatif, floor, _since_share(hot_groups)) \
        else hot_groups


def is_hottest(found: list[AllToAllGroup], rank: int | None) -> bool:
    """Whether ``rank`` is the hottest rank of an all-to-all group with a hot rank."""
    return rank is not None and any(g.hot_ranks and g.hot_ranks[0] == rank for g in found)


def straggler_load(found: list[AllToAllGroup], straggler_rank: int | None, whatif: WhatIf | None,
                   config: dict) -> tuple[float, float] | None:
    """(load ratio, share of the steps since the load turned uneven) of the standing all-to-all group
    whose hottest rank is the straggler, None where there is none: the straggler's lateness is then the
    tokens the router sends it, which no fix of that rank removes; balancing the ranks is the fix."""
    groups = standing_groups(found, whatif, config)
    hot = next((g for g in groups if straggler_rank is not None and g.hot_ranks[0] == straggler_rank), None)
    return None if hot is None else (float(hot.load_ratio_max or 0.0), _since_share([hot]))


def expert_findings(results: list[RankResult], found: list[AllToAllGroup], skew: Skew | None, whatif: WhatIf | None,
                    config: dict) -> list[Observed]:
    """An expert_imbalance finding per all-to-all group with a hot rank, unpriced (analyses/cost.py
    prices it by balanced_ranks, on top of the straggler's fix where one is named; where the straggler
    is the hot rank, the imbalance is its cause and is priced alone, the straggler's finding left
    out), unless the replay prices balancing under the straggler's floor. Figure: the hottest rank's
    own time per step over the others' median in its phase that exceeds it most (0 where none does)."""
    floor = float(config["skew"]["straggler_min_step_fraction"])
    hot_groups = standing_groups(found, whatif, config)
    if not hot_groups:
        return []
    phases = imbalance.phase_matrix(results)
    straggler = skew.straggler.rank if skew is not None and skew.straggler else None
    out = []
    for group in hot_groups:  # one per skewed group: a handful
        hottest = group.hot_ranks[0]
        load = {r.rank: r.load_bytes for r in group.rows}
        where = imbalance.rank_excess(phases, hottest)
        evidence = ExpertImbalanceEvidence(
            group=group.group, group_ranks=group.ranks, hot_ranks=group.hot_ranks,
            load_ratio=float(group.load_ratio_max or 0.0), limit_ratio=group.limit_ratio, load_bytes_by_rank=load,
            others_median_bytes=float(np.median([v for r, v in load.items() if r != hottest])), ops=group.ops,
            recv_side_ops=group.recv_side_ops, phase=where[0] if where else None,
            phase_extra_ns=where[1] if where else None, straggler=straggler == hottest, floor_share=floor,
            **({} if group.onset_step is ABSENT else {"onset_step": group.onset_step}))
        out.append(Observed(finding="expert_imbalance", figure_ns=where[1] if where else 0, ranks=group.hot_ranks,
                            evidence=evidence))
    return out
