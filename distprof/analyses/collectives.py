"""Collectives, numbers only: per matched instance who arrived when, each member's sync wait, the
transfer, bytes and bandwidth (nccl-tests' algbw and busbw); per rank how much of its
communication is waiting; and the Collectives table by kind x group x node span x size.

Definitions (docs/summary.md, "Collectives"), on the aligned clock (own start + clock offset):
arrival skew = latest − earliest start; a member's wait = clip(last arrival − own start, 0, own
duration); transfer = the last-arriving rank's duration (its start is the last arrival; start and
end on one clock, so clock error does not enter it); bytes = median of the members' known sizes;
algbw = bytes / transfer (bytes per ns = GB/s); busbw = algbw × the nccl-tests factor of the kind.
"""

from __future__ import annotations

import msgspec
import numpy as np

from .. import events as ev
from ..columns import unique_rows
from ..matching import Matching
from ..results import CollectiveMarkers, StepBounds
from ..sections.collectives import CollectiveRow, Collectives

P2P = "p2p"  # align's kind of a matched send/recv pair
# nccl-tests' busbw factor per kind, as a function of the group size n; None: no bandwidth
_SHARE_KINDS = (ev.ALLGATHER, ev.REDUCE_SCATTER, ev.ALLTOALL, ev.GATHER, ev.SCATTER)
_ONE_KINDS = (ev.BROADCAST, ev.REDUCE, P2P, ev.SEND, ev.RECV, ev.SENDRECV)
# size buckets: upper bounds in bytes (inclusive) and labels; a size above the last is the last label
SIZE_EDGES = (64 << 10, 1 << 20, 16 << 20, 256 << 20)
SIZE_BUCKETS = ("<=64 KiB", "64 KiB-1 MiB", "1-16 MiB", "16-256 MiB", ">256 MiB", "unknown")
INTRA, INTER = "intra-node", "inter-node"
_INT_MIN, _INT_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def bus_factors(kinds: np.ndarray, n: np.ndarray) -> np.ndarray:
    """busbw / algbw per instance: allreduce 2(n−1)/n; allgather, reduce_scatter, alltoall (and
    gather, scatter) (n−1)/n; broadcast, reduce, p2p 1; NaN for barrier, other and unknown n."""
    kinds = np.asarray(kinds, dtype=str)
    n = np.asarray(n, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n >= 1, (n - 1) / n, np.nan)
    return np.select([kinds == ev.ALLREDUCE, np.isin(kinds, _SHARE_KINDS), np.isin(kinds, _ONE_KINDS)],
                     [2 * share, share, np.where(n >= 1, 1.0, np.nan)], default=np.nan)


def size_bucket(nbytes: np.ndarray) -> np.ndarray:
    """The SIZE_BUCKETS label of each size (NaN or negative: "unknown")."""
    nbytes = np.asarray(nbytes, np.float64)
    known = np.isfinite(nbytes) & (nbytes >= 0)
    index = np.searchsorted(np.asarray(SIZE_EDGES, np.float64), np.where(known, nbytes, 0), side="left")
    return np.asarray(SIZE_BUCKETS, dtype=object)[np.where(known, index, len(SIZE_BUCKETS) - 1)]


def node_of_ranks(ranks: list[int], hosts: list[str | None], gpus_per_node: int | None) -> dict[int, str]:
    """{rank: node} from the ranks' hostnames, else rank // gpus_per_node; ranks with neither are absent."""
    out = {int(r): f"node {int(r) // int(gpus_per_node)}" for r in ranks} if gpus_per_node else {}
    out.update({int(r): str(h) for r, h in zip(ranks, hosts) if h})
    if gpus_per_node and not all(hosts):  # one way of naming for all, or mixing them would split nodes
        out = {int(r): f"node {int(r) // int(gpus_per_node)}" for r in ranks}
    return out


def node_spans(members: list[tuple[int, ...]], node_of: dict[int, str], gpus_per_node: int | None) -> np.ndarray:
    """Per instance: INTRA when all members are on one node, INTER when not, None when unknown
    (computed once per distinct member set: there are few groups and many instances)."""
    cache: dict[tuple[int, ...], str | None] = {}
    for group in set(members):  # one iteration per distinct process group
        nodes = [node_of.get(r) if r in node_of else (f"node {r // gpus_per_node}" if gpus_per_node else None)
                 for r in group]
        cache[group] = None if not nodes or None in nodes else INTRA if len(set(nodes)) == 1 else INTER
    return np.array([cache[m] for m in members], dtype=object)


def _masked_max(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, values, _INT_MIN).max(axis=0)


def _known_median(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Median per column of the present, known (>= 0) entries; NaN where none."""
    known = present & (values >= 0)
    if not values.size:
        return np.full(values.shape[1], np.nan)
    out = np.full(values.shape[1], np.nan)
    some = known.any(axis=0)
    out[some] = np.nanmedian(np.where(known[:, some], values[:, some].astype(np.float64), np.nan), axis=0)
    return out


class Instances(msgspec.Struct, frozen=True):
    """Every matched instance's figures on the aligned clock: per (rank row, instance) matrices
    (``start``, ``launch``: -1 unknown, ``duration``, ``wait``) and per-instance columns."""

    start: np.ndarray          # own start + the rank's offset
    launch: np.ndarray         # when it was issued, aligned (-1: not captured)
    duration: np.ndarray       # 0 where the rank is not a member
    first: np.ndarray          # earliest arrival
    last: np.ndarray           # latest arrival
    last_row: np.ndarray       # the row that arrived last
    second_row: np.ndarray     # the second-latest arrival (the last one itself with one member)
    second_start: np.ndarray
    arrival_skew: np.ndarray
    wait: np.ndarray           # clip(last − own start, 0, own duration)
    transfer: np.ndarray       # the last arrival's duration
    n: np.ndarray              # the group's size
    nbytes: np.ndarray         # median of the members' known sizes (NaN: unknown)
    algbw: np.ndarray          # bytes per ns = GB/s
    busbw: np.ndarray
    node_span: np.ndarray      # INTRA, INTER or None


def instances(matching: Matching, offsets, node_of: dict[int, str] | None = None,
              gpus_per_node: int | None = None, world_size: int | None = None) -> Instances:
    """Every matched instance's figures (columns of ``matching``; matrices are ranks x instances).

    n = the group's size; an op of a group the trace does not name ("") is on the world, so
    n = ``world_size`` when known (2 of 128 ranks in an all-to-all still move 127/128 of it).

    ``second_row`` is the second-latest arrival (the last rank's attributable wait is measured to
    it); an instance with one member has ``second_start`` = its own start."""
    present = matching.present
    n_rows = present.shape[0]
    start = matching.start_ns + np.asarray(offsets, np.int64)[:, None]
    duration = np.where(present, matching.end_ns - matching.start_ns, 0)
    first = np.where(present, start, _INT_MAX).min(axis=0)
    last = _masked_max(start, present)
    last_row = np.where(present, start, _INT_MIN).argmax(axis=0)
    others = present & (np.arange(n_rows)[:, None] != last_row[None, :])
    has_second = others.any(axis=0)
    second_row = np.where(has_second, np.where(others, start, _INT_MIN).argmax(axis=0), last_row)
    second_start = np.where(has_second, _masked_max(start, others), last)
    wait = np.where(present, np.clip(last[None, :] - start, 0, duration), 0)
    columns = np.arange(present.shape[1])
    transfer = duration[last_row, columns] if present.shape[1] else np.zeros(0, np.int64)
    n = np.array([len(m) for m in matching.group_ranks], np.int64) if matching.group_ranks else \
        present.sum(axis=0)
    if world_size and matching.group.size == n.size:
        n = np.where((matching.group == "") & (np.asarray(matching.name, dtype=str) != P2P), world_size, n)
    nbytes = _known_median(matching.nbytes, present)
    kinds = np.asarray(matching.name, dtype=str)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((transfer > 0) & np.isfinite(nbytes), nbytes / np.maximum(transfer, 1), np.nan)
    algbw = np.where(kinds == ev.BARRIER, np.nan, algbw)
    launch = np.where(matching.launch_ns >= 0, matching.launch_ns + np.asarray(offsets, np.int64)[:, None], -1) \
        if matching.launch_ns.shape == present.shape else np.full(present.shape, -1, np.int64)
    return Instances(start=start, launch=launch, duration=duration, first=first, last=last, last_row=last_row,
                     second_row=second_row, second_start=second_start, arrival_skew=last - first, wait=wait,
                     transfer=transfer, n=n, nbytes=nbytes, algbw=algbw, busbw=algbw * bus_factors(kinds, n),
                     node_span=node_spans(list(matching.group_ranks), node_of or {}, gpus_per_node)
                     if matching.group_ranks else np.full(present.shape[1], None, object))


def shared(matching: Matching) -> np.ndarray:
    """Instances that at least two ranks took part in: matched across ranks. One rank alone (a
    1-of-N trace, a group whose other members are missing) matches only itself: its wait is unknown."""
    return matching.present.sum(axis=0) >= 2


def _covered_per_key(n_keys: int, intervals: tuple, windows: tuple, clipped: np.ndarray) -> np.ndarray:
    """Per key 0..n_keys-1: |∪ intervals ∩ ∪ windows| where ``clipped[key]``, else |∪ intervals|
    (each a (key, starts, ends) triple, ends >= starts). One sweep over every key's boundaries:
    sorted by (key, position), the coverage counts of both sets are running sums that return to 0
    at the end of each key; the state after a boundary holds until the next one of the same key."""
    key = np.concatenate([intervals[0], intervals[0], windows[0], windows[0]]).astype(np.int64)
    position = np.concatenate([intervals[1], intervals[2], windows[1], windows[2]]).astype(np.int64)
    size, window_size = intervals[0].size, windows[0].size
    zeros, ones = np.zeros(2 * window_size, np.int64), np.ones(size, np.int64)
    in_a = np.concatenate([ones, -ones, zeros])
    in_b = np.concatenate([np.zeros(2 * size, np.int64), np.ones(window_size, np.int64),
                           -np.ones(window_size, np.int64)])
    order = np.lexsort((position, key))
    key, position = key[order], position[order]
    covered = (np.cumsum(in_a[order]) > 0) & ((np.cumsum(in_b[order]) > 0) | ~clipped[key])
    length = np.where(covered[:-1] & (key[1:] == key[:-1]), position[1:] - position[:-1], 0)
    out = np.zeros(n_keys, np.int64)
    np.add.at(out, key[:-1], length)
    return out


def rank_waits(matching: Matching, wait: np.ndarray, step_bounds: list[StepBounds],
               use_steps: bool) -> list[int | None]:
    """Per row of ``matching``: |∪ [own start, own start + wait] over its matched collectives ∩ its
    window| on its own clock (window: the union of its step bounds when it has steps and the
    analysis window is the steps); None for a rank with no matched collective. All ranks in one
    sweep (analyses.intervals' algebra per rank was a few ms per rank at 512 ranks)."""
    n_rows = matching.present.shape[0]
    rows, columns = np.nonzero(matching.present & shared(matching)[None, :])
    starts = matching.start_ns[rows, columns]
    bounds = [(row, b) for row, b in enumerate(step_bounds[:n_rows]) if use_steps and len(b.start_ns)]
    windows = tuple(np.concatenate([*part, np.zeros(0, np.int64)]) for part in (
        [np.full(len(b.start_ns), row, np.int64) for row, b in bounds],
        [np.asarray(b.start_ns, np.int64) for _, b in bounds],
        [np.asarray(b.end_ns, np.int64) for _, b in bounds]))
    clipped = np.zeros(n_rows, bool)
    clipped[[row for row, _ in bounds]] = True
    waited = _covered_per_key(n_rows, (rows, starts, starts + wait[rows, columns]), windows, clipped)
    matched = np.bincount(rows, minlength=n_rows) > 0
    return [int(w) if has else None for w, has in zip(waited.tolist(), matched.tolist())]


def _taken(row: np.ndarray, start: np.ndarray, end: np.ndarray, matching: Matching) -> np.ndarray:
    """Whether each op (its rank's row in ``matching``, own start and end) is one of that row's
    instances matched with another rank: one sort of all (row, start, end) triples, not one per rank."""
    rows, columns = np.nonzero(matching.present & shared(matching)[None, :])
    if not row.size or not rows.size:
        return np.zeros(row.size, bool)
    keys = [np.concatenate(pair) for pair in ((row, rows), (start, matching.start_ns[rows, columns]),
                                             (end, matching.end_ns[rows, columns]))]
    order = np.lexsort(keys[::-1])
    ordered = [key[order] for key in keys]
    opens = np.r_[True, np.any([key[1:] != key[:-1] for key in ordered], axis=0)]
    triple = np.cumsum(opens) - 1
    has_taken = np.maximum.reduceat(order >= row.size, np.flatnonzero(opens))
    out = np.empty(order.size, bool)
    out[order] = has_taken[triple]
    return out[:row.size]


class SingleOps(msgspec.Struct, frozen=True):
    """Collectives that no other rank matched, as single-rank instances (one entry each)."""

    rank: np.ndarray
    kind: np.ndarray           # p2p for a send or a recv
    group: np.ndarray
    duration: np.ndarray       # its own: the transfer's upper bound (the wait is unknown)
    nbytes: np.ndarray         # NaN: unknown
    n: np.ndarray              # the named group's size (2 for p2p), -1 unknown
    node_span: np.ndarray      # INTRA, INTER or None


def _column(collectives_by_rank: list[CollectiveMarkers], key: str, dtype, missing) -> np.ndarray:
    """One column of every rank's collectives, concatenated (``missing`` where a rank lacks it)."""
    parts = [np.asarray(getattr(columns, key) or [missing] * len(columns.name), dtype)
             for columns in collectives_by_rank]
    return np.concatenate([*parts, np.zeros(0, dtype)])


def unmatched(collectives_by_rank: list[CollectiveMarkers], ranks: list[int], matching: Matching,
              process_groups: dict, node_of: dict[int, str], gpus_per_node: int | None) -> SingleOps:
    """Each rank's collectives that no other rank matched (a 1-of-N trace, counts that differ), as
    single-rank instances: transfer = their own duration (an upper bound: the wait is unknown), n
    from the named group's members (else unknown), bytes their own (NaN unknown)."""
    sizes = [len(columns.name) for columns in collectives_by_rank]
    row = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    start, end = (_column(collectives_by_rank, key, np.int64, 0) for key in ("start_ns", "end_ns"))
    left = ~_taken(row, start, end, matching)
    kind = _column(collectives_by_rank, "name", object, "")[left]
    nbytes = _column(collectives_by_rank, "nbytes", np.int64, -1)[left]
    group = _column(collectives_by_rank, "group", object, "")[left]
    is_p2p = np.isin(kind, ev.POINT_TO_POINT)  # p2p: its 2 ends, not the group
    # per distinct group, not per op: a 1-of-N trace leaves every op unmatched
    names, code = np.unique(group.astype(str), return_inverse=True)
    code = code.ravel()
    members = [tuple(process_groups.get(str(name), ())) for name in names.tolist()]
    size = np.array([len(m) for m in members], np.int64)[code]
    span = (node_spans(members, node_of, gpus_per_node) if members else np.empty(0, object))[code]
    known = (size > 0) & ~is_p2p
    return SingleOps(rank=np.asarray(ranks, np.int64)[row[left]],
                     kind=np.where(is_p2p, P2P, kind).astype(object), group=group, duration=(end - start)[left],
                     nbytes=np.where(nbytes >= 0, nbytes.astype(np.float64), np.nan),
                     n=np.where(is_p2p, 2, np.where(known, size, -1)), node_span=np.where(known, span, None))


class _InstanceColumns(msgspec.Struct, frozen=True):
    """One row per instance, matched and single-rank alike, with what the Collectives table aggregates."""

    kind: np.ndarray
    group: np.ndarray
    node_span: np.ndarray      # "unknown" where not known
    size_bucket: np.ndarray
    nbytes: np.ndarray
    duration: np.ndarray       # Σ members' durations (int64 ns: exact sums)
    wait: np.ndarray           # Σ members' waits (0 for a single-rank one)
    transfer: np.ndarray
    algbw: np.ndarray
    busbw: np.ndarray
    matched: np.ndarray


def _instance_columns(matching: Matching, inst: Instances, single: SingleOps) -> _InstanceColumns:
    """The matched instances (``inst``) followed by the single-rank ones."""
    both = shared(matching)
    kinds = single.kind.astype(str)
    duration = single.duration
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((duration > 0) & (kinds != ev.BARRIER), single.nbytes / duration, np.nan)
    groups = np.asarray(matching.group, dtype=object) if len(matching.group) == matching.size else \
        np.full(matching.size, "", object)
    span = np.concatenate([np.asarray(inst.node_span, dtype=object)[both], single.node_span])
    nbytes = np.concatenate([inst.nbytes[both], single.nbytes])
    return _InstanceColumns(
        kind=np.concatenate([np.asarray(matching.name, dtype=object)[both], kinds.astype(object)]),
        group=np.concatenate([groups[both], single.group.astype(str).astype(object)]),
        node_span=np.where(span == None, "unknown", span),  # noqa: E711 - elementwise
        size_bucket=size_bucket(nbytes), nbytes=nbytes,
        duration=np.concatenate([inst.duration.sum(axis=0)[both], duration]),
        wait=np.concatenate([inst.wait.sum(axis=0)[both], np.zeros(duration.size, np.int64)]),
        transfer=np.concatenate([inst.transfer[both].astype(np.float64), duration.astype(np.float64)]),
        algbw=np.concatenate([inst.algbw[both], algbw]),
        busbw=np.concatenate([inst.busbw[both], algbw * bus_factors(kinds, single.n)]),
        matched=np.concatenate([np.ones(int(both.sum()), bool), np.zeros(duration.size, bool)]))


def _median(values: np.ndarray) -> float | None:
    known = values[~np.isnan(values)]
    return float(np.median(known)) if known.size else None


def _table_groups(keys: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows ordered by group, where each group starts in that order, each group's first row):
    groups of equal ``keys`` texts, in the order of the sorted key tuples."""
    codes = np.stack([np.unique(np.asarray(key, dtype=str), return_inverse=True)[1].ravel()
                      for key in keys], axis=1)
    _, group_of, _ = unique_rows(codes.astype(np.int64))  # groups numbered in sorted key order
    order = np.argsort(group_of, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(group_of[order]) != 0])
    return order, starts, order[starts]


def table(matching: Matching, inst: Instances, single: SingleOps, peak_gbps: float | None) -> list[CollectiveRow]:
    """The Collectives table: per kind x group x node span x size bucket, the count (matched and
    single-rank), total time (Σ members' durations), wait share (Σ wait / Σ duration of the
    matched ones), median transfer, median bytes, algbw and busbw, and busbw's share of
    ``peak_gbps`` when the peak is known. Costliest rows first."""
    columns = _instance_columns(matching, inst, single)
    if not columns.kind.size:
        return []
    order, starts, first = _table_groups((columns.kind, columns.group, columns.node_span, columns.size_bucket))
    rows = []
    for part, head in zip(np.split(order, starts[1:]), first.tolist()):  # one iteration per table row
        matched = part[columns.matched[part]]
        matched_time = float(columns.duration[matched].sum())
        wait = int(columns.wait[matched].sum())
        transfer, busbw = _median(columns.transfer[part]), _median(columns.busbw[part])
        span = str(columns.node_span[head])
        rows.append(CollectiveRow(
            kind=str(columns.kind[head]), group=str(columns.group[head]),
            node_span=None if span == "unknown" else span, size_bucket=str(columns.size_bucket[head]),
            count=int(part.size), matched=int(matched.size), total_ns=int(columns.duration[part].sum()),
            wait_ns=wait, wait_share=float(wait / matched_time) if matched_time > 0 else None,
            transfer_median_ns=None if transfer is None else int(round(transfer)),
            bytes_median=_median(columns.nbytes[part]), algbw_median_gbps=_median(columns.algbw[part]),
            busbw_median_gbps=busbw, peak_share=busbw / peak_gbps if busbw is not None and peak_gbps else None))
    return sorted(rows, key=lambda r: (-r.total_ns, r.kind, r.group))


def summary(matching: Matching, inst: Instances, single: SingleOps, config: dict) -> Collectives:
    """summary.json's ``collectives``: the table and what it was measured against."""
    hardware = config.get("hardware") or {}
    peak = hardware.get("peak_busbw_gbps")
    return Collectives(rows=table(matching, inst, single, peak), peak_busbw_gbps=peak,
                       gpus_per_node=hardware.get("gpus_per_node"), size_buckets=list(SIZE_BUCKETS),
                       matched=int(shared(matching).sum()), single_rank=int(single.rank.size))


def slow_rows(rows: list[CollectiveRow], config: dict) -> list[CollectiveRow]:
    """Table rows whose median busbw is below ``hardware.slow_collective_share`` of the peak; none
    without a peak (a peak is never guessed)."""
    hardware = config.get("hardware") or {}
    peak, share = hardware.get("peak_busbw_gbps"), float(hardware.get("slow_collective_share", 0.5))
    if not peak:
        return []
    return [r for r in rows if r.busbw_median_gbps is not None and r.busbw_median_gbps < share * peak]
