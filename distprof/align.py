"""Alignment, one step of the pipeline: rank assignment, collective matching (kind x step x
ordinal), clock-offset refinement by collective ends, and the aligned result.

Runs at rank 0 on compact per-rank results (results.RankResult); returns new results, never
changes the ones it is given.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from . import events as ev
from .columns import take, unique_rows
from .matching import Matching
from .results import ClockEstimate, CollectiveMarkers, RankResult
from .typed import Reason

# -- matching collectives across ranks (rank 0, compact results only) ------------------------

# communication that is not a collective: matching the k-th "MPI_Wait" of one rank with the
# k-th of another would be a guess; never matched (nor used for alignment)
_UNMATCHED_KINDS = (ev.OTHER_COMM,)
_P2P = "p2p"  # send/recv, matched by (group, sender, receiver, order)


def _ordinal_in_group(*sorted_keys: np.ndarray) -> np.ndarray:
    """Position of each row within its run of equal keys (rows already sorted by the keys)."""
    n = sorted_keys[0].size
    if n == 0:
        return np.zeros(0, np.int64)
    opens = np.zeros(n, dtype=bool)
    opens[0] = True
    for key in sorted_keys:
        opens[1:] |= key[1:] != key[:-1]
    index = np.arange(n)
    return index - np.maximum.accumulate(np.where(opens, index, 0))


class _Ops(msgspec.Struct, frozen=True):
    """Communication ops as columns, with each op's series (kind, group, sender, receiver)."""

    kind: np.ndarray       # the matching's kind: p2p for a send or a recv
    raw_kind: np.ndarray   # as the rank recorded it
    group: np.ndarray
    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray
    launch: np.ndarray
    exposed: np.ndarray
    src: np.ndarray        # a send's rank, a recv's peer; -1 for a collective
    dst: np.ndarray
    keep: np.ndarray       # matched at all: not an unmatched kind, not a send/recv without its peer


def _op_columns(collectives: CollectiveMarkers, rank: int) -> _Ops:
    """One rank's collectives as arrays, with each op's series: (kind, group, sender, receiver);
    sender/receiver only for send/recv (the k-th send 0 -> 1 pairs with the k-th receive of 1
    from 0), -1 otherwise."""
    kind = np.asarray(collectives.name, dtype=str)
    n = kind.size

    def column(key: str, default, dtype):  # a column the sender did not have (empty): its default
        values = getattr(collectives, key)
        return np.asarray(values if len(values) == n else np.full(n, default), dtype=dtype)

    peer = column("peer", -1, np.int64)
    is_send, is_recv = kind == ev.SEND, kind == ev.RECV
    return _Ops(kind=np.where(is_send | is_recv, _P2P, kind), raw_kind=kind, group=column("group", "", str),
                step=column("step", -1, np.int64), start=column("start_ns", 0, np.int64),
                end=column("end_ns", 0, np.int64), nbytes=column("nbytes", -1, np.int64),
                launch=column("launch_ns", -1, np.int64), exposed=column("exposed_ns", -1, np.int64),
                src=np.where(is_send, rank, np.where(is_recv, peer, -1)),
                dst=np.where(is_send, peer, np.where(is_recv, rank, -1)),
                keep=~np.isin(kind, _UNMATCHED_KINDS) & ~((is_send | is_recv) & (peer < 0)))


def _concatenated(parts: list[_Ops]) -> _Ops:
    """Every rank's ops one after the other."""
    return _Ops(**{name: np.concatenate([getattr(part, name) for part in parts]) for name in _Ops.__struct_fields__})


def _expected(series: np.ndarray, kinds: np.ndarray, groups: np.ndarray, has: np.ndarray,
              rank_numbers: np.ndarray, process_groups: dict) -> np.ndarray:
    """(ranks, series): which ranks take part in each series: the sender and receiver of a p2p
    series, the members of a group the trace names (those in the merge), else the ranks that have
    it; a rank that has an op of the series always takes part."""
    expected = has.copy()
    for code, (kind, group, src, dst) in enumerate(series.tolist()):  # one iteration per series
        if kinds[kind] == _P2P:
            expected[:, code] |= np.isin(rank_numbers, (src, dst))
        elif str(groups[group]) in process_groups:
            expected[:, code] |= np.isin(rank_numbers, list(process_groups[str(groups[group])]))
    return expected


def _reports(series, kinds, groups, expected, steps_of, step_bad, key_series, matched_key, all_series, all_steps,
             all_rows, rank_numbers) -> tuple[list[dict], list[str]]:
    """Per kind and group: how many matched, and warnings where ranks miss it or counts differ."""
    out, warnings = [], []
    label_of = np.array([f"{kinds[k]}|{groups[g]}" for k, g, _, _ in series.tolist()])
    for label in np.unique(label_of):  # one iteration per (kind, group)
        kind, group = label.split("|", 1)
        codes = np.flatnonzero(label_of == label)
        in_label = np.isin(steps_of[:, 0], codes)
        bad = steps_of[in_label & step_bad]
        members = expected[:, codes].any(axis=1)
        out.append({"name": kind, "group": group, "ranks": int(members.sum()),
                    "matched": int(matched_key[np.isin(key_series, codes)].sum()), "steps": int(in_label.sum()),
                    "unmatched_steps": int(bad.shape[0])})
        if not group and kind != _P2P and 0 < members.sum() < rank_numbers.size:
            warnings.append(Reason("partly_present", {"kind": kind, "ranks": rank_numbers[members].tolist(),
                                                      "of": int(rank_numbers.size)}))
        if bad.shape[0]:
            code, step = (int(v) for v in bad[0])
            mine = (all_series == code) & (all_steps == step)
            per_rank = np.bincount(all_rows[mine], minlength=rank_numbers.size)[expected[:, code]]
            part = rank_numbers[expected[:, code]]
            usual = int(np.bincount(per_rank).argmax())
            odd = per_rank != usual
            warnings.append(Reason("counts_differ", {
                "kind": kind, "group": group, "steps_bad": int(bad.shape[0]), "steps": int(in_label.sum()),
                "step": step, "usual": usual, "odd": [[r, c] for r, c in zip(part[odd][:8].tolist(),
                                                                             per_rank[odd][:8].tolist())],
                "more": max(int(odd.sum()) - 8, 0)}))
    return out, warnings


def match_collectives(collectives_by_rank: list[CollectiveMarkers], ranks: list[int],
                      process_groups: dict | None = None) -> Matching:
    """Match the k-th collective of each kind within each process group and step across the
    group's ranks (send/recv: the k-th of each sender -> receiver pair).

    The key of a collective is (series, step, k) with series = (kind, group, sender, receiver);
    a key is matched when every rank that takes part in the series (``_expected``) has it.
    Where the counts of a series in a step differ between those ranks, the whole (series, step)
    is left unmatched and named in a warning: which k-th matches which would be a guess.
    ``process_groups`` ({name: [global ranks]}) says who is in a named group; ops whose group
    is not known ("") are matched among the ranks that have them (the world, as far as the
    trace shows). Vectorized: one ``np.unique`` over all ranks' keys, no loop per collective.
    """
    n_ranks, rank_numbers = len(ranks), np.asarray(ranks, np.int64)
    columns = [_op_columns(c, int(r)) for c, r in zip(collectives_by_rank, ranks)]
    excluded = sorted({str(k) for c in columns for k in np.unique(c.raw_kind[~c.keep])})
    columns = [take(c, c.keep) for c in columns]
    total = int(sum(c.kind.size for c in columns))
    if total == 0:
        empty = np.zeros((n_ranks, 0), np.int64)
        return Matching(rank_numbers, np.empty(0, object), np.empty(0, np.int64), np.empty(0, np.int64), empty,
                        empty.copy(), empty.astype(bool), excluded=excluded, nbytes=empty.copy(),
                        launch_ns=empty.copy(), exposed_ns=empty.copy())
    cat = _concatenated(columns)
    all_rows = np.concatenate([np.full(c.kind.size, row, np.int64) for row, c in enumerate(columns)])
    kinds, kind_code = ev.distinct_texts(cat.kind)
    groups, group_code = ev.distinct_texts(cat.group)
    series, series_of, _ = unique_rows(np.stack([kind_code, group_code, cat.src, cat.dst], axis=1))
    order = np.lexsort((cat.start, cat.step, series_of, all_rows))  # per rank, series, step, time
    sorted_rows, sorted_series, sorted_step = all_rows[order], series_of[order], cat.step[order]
    ordinal = _ordinal_in_group(sorted_rows, sorted_series, sorted_step)
    has = np.zeros((n_ranks, series.shape[0]), bool)
    has[all_rows, series_of] = True
    expected = _expected(series, kinds, groups, has, rank_numbers, process_groups or {})
    keys = np.stack([sorted_series, sorted_step, ordinal], axis=1)
    unique_keys, inverse, counts = unique_rows(keys)
    on_all = counts == expected.sum(axis=0)[unique_keys[:, 0]]
    steps_of, step_group, _ = unique_rows(unique_keys[:, :2])
    step_bad = np.bincount(step_group, weights=~on_all, minlength=steps_of.shape[0]) > 0
    matched_key = on_all & ~step_bad[step_group]
    column = np.cumsum(matched_key) - 1
    n_matched = int(matched_key.sum())
    chosen = matched_key[inverse]
    cells = (sorted_rows[chosen], column[inverse[chosen]])
    matrices = {}
    for name, values, fill in (("start", cat.start, 0), ("end", cat.end, 0), ("nbytes", cat.nbytes, -1),
                               ("launch", cat.launch, -1), ("exposed", cat.exposed, -1)):
        matrix = np.full((n_ranks, n_matched), fill, np.int64)
        matrix[cells] = values[order][chosen]
        matrices[name] = matrix
    present = np.zeros((n_ranks, n_matched), bool)
    present[cells] = True
    report_rows, warnings = _reports(series, kinds, groups, expected, steps_of, step_bad, unique_keys[:, 0],
                                     matched_key, sorted_series, sorted_step, sorted_rows, rank_numbers)
    matched = unique_keys[matched_key]
    matched_series = series[matched[:, 0]]
    members = [tuple(rank_numbers[expected[:, code]].tolist()) for code in matched[:, 0]]
    return Matching(rank_numbers, kinds[matched_series[:, 0]].astype(object), matched[:, 1].copy(),
                    matched[:, 2].copy(), matrices["start"], matrices["end"], present, report_rows, warnings,
                    excluded, group=groups[matched_series[:, 1]].astype(object), group_ranks=members,
                    nbytes=matrices["nbytes"], launch_ns=matrices["launch"], exposed_ns=matrices["exposed"],
                    sender=matched_series[:, 2].astype(np.int64), receiver=matched_series[:, 3].astype(np.int64))


# -- refinement by collective ends (pure; runs at rank 0 on the matched collectives) -------------

FEW_SAMPLES = 10  # below this many matched collectives the spread is half the range, not the MAD


def refine_offsets(ends: np.ndarray, present: np.ndarray, offsets, uncertainties,
                   reference: int = 0, min_samples: int = 3) -> list[dict]:
    """Refine per-rank clock offsets by the ends of matched collectives.

    A collective ends nearly together on every rank (all wait for the last arrival), so after a
    correct alignment the end of collective j on rank r equals its end on the reference rank.
    ``ends`` is (ranks, collectives) on each rank's own clock, ``present`` marks the entries that
    exist; ``offsets``/``uncertainties`` are the sources' estimates (ns to add; an uncertainty of
    0 means the source gives no bound). Per rank: correction = median over shared collectives of
    (reference end − rank end) after the initial offsets; spread = median absolute deviation
    (half the range below ``FEW_SAMPLES`` samples). A known initial bound (ping-pong: half the
    best RTT plus half the drift, a hard bound) is intersected with correction ± spread; if the
    two disagree the hard bound wins. Returns one dict per row: offset_ns, uncertainty_ns,
    method, samples, correction_ns, spread_ns.
    """
    ends = np.asarray(ends, dtype=np.int64)
    present = np.asarray(present, dtype=bool)
    offsets = np.asarray(offsets, dtype=np.int64)
    uncertainties = np.asarray(uncertainties, dtype=np.int64)
    out = []
    for row in range(ends.shape[0]):
        initial = {"offset_ns": int(offsets[row]), "uncertainty_ns": int(uncertainties[row]),
                   "samples": 0, "correction_ns": None, "spread_ns": None}
        if row == reference:
            out.append({**initial, "method": "reference"})
            continue
        shared = present[row] & present[reference]
        samples = int(shared.sum())
        initial["samples"] = samples
        if samples < max(min_samples, 1):
            out.append({**initial, "method": "source offset (too few matched collectives)"})
            continue
        diff = ((ends[reference, shared] + offsets[reference]) - (ends[row, shared] + offsets[row]))
        correction = float(np.median(diff))
        if samples >= FEW_SAMPLES:
            spread = float(np.median(np.abs(diff - correction)))
        else:
            spread = float(diff.max() - diff.min()) / 2
        bound = int(uncertainties[row])
        if bound <= 0:  # the source gives no bound: trust the collectives
            low, high, method = correction - spread, correction + spread, "collective ends"
        else:
            low, high = max(-bound, correction - spread), min(bound, correction + spread)
            method = "source offset, narrowed by collective ends"
            if low > high:  # disagree (correction_ns ± spread_ns says by how much): the hard bound wins
                low, high = -bound, bound
                method = "source offset (collective ends disagree)"
        middle = (low + high) / 2
        out.append({"offset_ns": int(offsets[row]) + int(round(middle)),
                    "uncertainty_ns": int(round((high - low) / 2)), "method": method,
                    "samples": samples, "correction_ns": int(round(correction)),
                    "spread_ns": int(round(spread))})
    return _chained(out, ends, present, offsets, uncertainties, max(min_samples, 1))


def _chained(out: list[dict], ends: np.ndarray, present: np.ndarray, offsets: np.ndarray,
             uncertainties: np.ndarray, min_samples: int) -> list[dict]:
    """Ranks that share too few collectives with the reference but enough with a rank already
    aligned by collective ends (TP x DP: rank 3 meets rank 0 only through ranks 1 and 2, in
    other groups) are aligned to that rank, the one they share the most with; its uncertainty
    adds to theirs. Ranks whose source states a bound keep it (verified already)."""
    def aligned(k: int) -> bool:
        return out[k]["method"] == "reference" or out[k]["correction_ns"] is not None

    pending = [row for row, entry in enumerate(out) if not aligned(row) and uncertainties[row] <= 0]
    while pending:  # each round aligns the ranks one more hop from the reference
        progress = []
        for row in pending:  # one iteration per rank still unaligned
            shared = (present[row][None, :] & present).sum(axis=1)
            anchors = [k for k in range(len(out)) if aligned(k) and shared[k] >= min_samples]
            if not anchors:
                continue
            anchor = max(anchors, key=lambda k: (shared[k], -k))
            both = present[row] & present[anchor]
            diff = (ends[anchor, both] + out[anchor]["offset_ns"]) - (ends[row, both] + offsets[row])
            correction = float(np.median(diff))
            spread = float(np.median(np.abs(diff - correction))) if diff.size >= FEW_SAMPLES else \
                float(diff.max() - diff.min()) / 2
            progress.append((row, {"offset_ns": int(offsets[row]) + int(round(correction)),
                                   "uncertainty_ns": int(round(spread)) + int(out[anchor]["uncertainty_ns"] or 0),
                                   "method": "collective ends (chained)", "samples": int(both.sum()),
                                   "correction_ns": int(round(correction)), "spread_ns": int(round(spread))}))
        if not progress:
            break
        for row, entry in progress:
            out[row] = entry
        pending = [row for row in pending if not aligned(row)]
    return out


def process_groups(results: list[RankResult]) -> dict[str, tuple[int, ...]]:
    """{group name: member ranks} over all ranks' sources (``meta["process_groups"]``); a name
    two ranks describe differently keeps the union of what they say."""
    groups: dict[str, set[int]] = {}
    seen: set[tuple] = set()  # every member of a group lists all of its members: add each list once
    for result in results:  # one iteration per rank
        for name, members in (result.meta.get("process_groups") or {}).items():
            said = (str(name), tuple(members))
            if said not in seen:
                seen.add(said)
                groups.setdefault(str(name), set()).update(int(m) for m in members)
    return {name: tuple(sorted(members)) for name, members in groups.items()}


# -- rank numbers and the aligned clock ------------------------------------------------------

def assign_ranks(results: list[RankResult]) -> tuple[list[RankResult], list[str]]:
    """Every result with a distinct rank, in rank order: known ranks stay, unknown ones get the
    free numbers in input order. Also returns warnings for duplicates (the later one is renumbered)."""
    warnings = []
    taken: set[int] = set()
    pending = []
    out = list(results)
    for position, result in enumerate(results):
        if result.rank is None or result.rank in taken:
            if result.rank is not None:
                warnings.append(Reason("rank_twice", {"file": result.source_file, "rank": result.rank}))
                out[position] = replace(result, rank_from="renumbered (duplicate)")
            pending.append(position)
        else:
            taken.add(result.rank)
    free = (r for r in range(len(results) + len(taken)) if r not in taken)
    for position in pending:
        result = out[position]
        rank_from = "input order" if result.rank_from in ("unknown", None) else result.rank_from
        out[position] = replace(result, rank=next(free), rank_from=rank_from)
    return sorted(out, key=lambda r: r.rank), warnings


class Alignment(msgspec.Struct, frozen=True):
    """Results on the common clock (their ``clock`` refined), the matching the refinement used,
    the rank whose clock is the reference, and notes on how far the clocks can be trusted."""

    results: list[RankResult]
    matching: Matching
    reference_rank: int | None
    notes: list[str | Reason] = msgspec.field(default_factory=list)   # reason codes: reports/findings.py words them
    warnings: list[str | Reason] = msgspec.field(default_factory=list)   # clock claims distrusted, naming file and rank


# hosts "cluster" when their median corrections differ by more than this many within-host
# spreads (and by more than HOST_GAP_MIN_NS): collective ends then differ by host for physical
# reasons (network distance), or the host clocks differ -- the ends cannot tell which
HOST_GAP_SPREADS = 3.0
HOST_GAP_MIN_NS = 20_000

# refine_offsets' methods as reported: the only source that states a bound is the MPI ping-pong
_METHOD_NAMES = {"source offset (too few matched collectives)": "MPI ping-pong",
                 "source offset, narrowed by collective ends": "MPI ping-pong, narrowed by collective ends",
                 "source offset (collective ends disagree)": "MPI ping-pong (collective ends disagree)"}


def hosts_cluster(hosts: list[str | None], corrections, spreads, reference: int) -> dict | None:
    """Whether the collective-end corrections group by host (see HOST_GAP_SPREADS).

    ``corrections``/``spreads`` per row (None where not refined; the reference's correction is 0).
    Within-host spread = the largest half-range of the corrections of one host's ranks, or the
    median per-rank spread when no host has two refined ranks; gap = the largest distance of a
    host's median correction from the reference host's. None when fewer than two hosts are known.
    """
    known = [h for h in hosts if h]
    if len(set(known)) < 2 or len(known) < len(hosts):
        return None
    value = np.array([0.0 if row == reference else (np.nan if c is None else float(c))
                      for row, c in enumerate(corrections)])
    host_of = ev.distinct_texts(hosts)[1]
    medians, within = {}, []
    for host in np.unique(host_of):  # one iteration per host
        mine = value[(host_of == host) & ~np.isnan(value)]
        if mine.size:
            medians[int(host)] = float(np.median(mine))
            if mine.size >= 2:
                within.append((mine.max() - mine.min()) / 2)
    rank_spreads = [float(x) for x in spreads if x is not None]
    spread = max(within) if within else float(np.median(rank_spreads)) if rank_spreads else 0.0
    base = medians.get(int(host_of[reference]), 0.0)
    gap = max((abs(m - base) for m in medians.values()), default=0.0)
    return {"gap_ns": gap, "spread_ns": spread,
            "clustered": bool(gap > max(HOST_GAP_SPREADS * spread, HOST_GAP_MIN_NS))}


def _final_estimates(results: list[RankResult], refined: list[dict], reference: int, aligned_on: bool,
                     cluster: dict | None, warnings: list | None = None) -> list[dict]:
    """Method, offset and uncertainty per row: None where nothing verified the offset; a rank on
    the host of a verified rank shares its clock (and its offset's error relative to the reference)."""
    hosts = [r.host for r in results]
    out = []
    for row, (result, estimate) in enumerate(zip(results, refined)):  # one pass per rank
        bound = int(result.clock.uncertainty_ns or 0)
        method = _METHOD_NAMES.get(estimate["method"], estimate["method"])
        if not aligned_on and len(results) > 1:
            method = "alignment off"
        refined_here = estimate["correction_ns"] is not None and aligned_on
        if refined_here and cluster and cluster["clustered"] and hosts[row] != hosts[reference]:
            estimate = {**estimate, "offset_ns": int(result.clock.offset_ns), "uncertainty_ns": bound}
            method, refined_here = "source offset (collective ends cluster by host)", False
        verified = row == reference or bound > 0 or refined_here
        if not verified and method != "alignment off" and "cluster" not in method:
            method = "source offset (unverified)"
        elif "cluster" in method and bound > 0:
            method = "MPI ping-pong"
        out.append({**estimate, "method": method, "verified": verified,
                    "uncertainty_ns": estimate["uncertainty_ns"] if verified else None})
    return _same_host(out, results, hosts, reference, warnings)


# one host has one clock: collective ends a minute apart on it, or (without collectives to tell)
# the files of one job starting an hour apart, mean the file's clock claim is wrong, not the job
SAME_HOST_MAX_END_GAP_NS = 60 * 1_000_000_000
SAME_HOST_MAX_START_GAP_NS = 3600 * 1_000_000_000


def _same_host_gap(out: list[dict], results: list[RankResult], row: int, anchor: int) -> int | None:
    """How far ``row``'s clock is from its host's where that is implausible (None: plausible): by
    the collective ends when refined, else by the sources' own offsets."""
    own = out[row].get("correction_ns")
    if own is not None:
        gap = int(own) - int(out[anchor].get("correction_ns") or 0)
        return gap if abs(gap) > SAME_HOST_MAX_END_GAP_NS else None
    gap = int(results[row].clock.offset_ns) - int(results[anchor].clock.offset_ns)
    same_kind = results[row].source == results[anchor].source
    return gap if same_kind and abs(gap) > SAME_HOST_MAX_START_GAP_NS else None


def _distrusted(entry: dict, result: RankResult, gap: int, warnings: list) -> dict:
    """A rank whose clock its host contradicts: offset by the collective ends where they exist,
    unverified (no straggler is named from it), and one warning naming the file and rank."""
    host = result.host
    warnings.append(Reason("host_clock_distrusted", {"file": result.source_file, "rank": result.rank,
                                                     "host": host, "gap_ns": int(gap)}))
    offset = entry["offset_ns"] if entry.get("correction_ns") is not None else int(result.clock.offset_ns)
    return {**entry, "offset_ns": int(offset), "uncertainty_ns": None, "verified": False,
            "method": "source offset (distrusted: contradicts its host's clock)"}


def _same_host(out: list[dict], results: list[RankResult], hosts: list, reference: int,
               warnings: list | None = None) -> list[dict]:
    """Ranks on the reference's host share its clock (uncertainty 0); on another host, the clock of
    that host's best-verified rank (its uncertainty). Native offsets (to rank 0 by ping-pong) are
    replaced by that rank's (one CLOCK_MONOTONIC); nsys/Kineto offsets are on the host's one system
    clock already: the source offset plus the anchor's correction."""
    rows_of: dict = {}  # host -> its rows in order: the anchors of a row are looked for on its host only
    for row, host in enumerate(hosts):
        rows_of.setdefault(host, []).append(row)
    for row, host in enumerate(hosts):  # one pass per rank
        if not host or row == reference:
            continue
        anchors = [reference] if host == hosts[reference] else [
            k for k in rows_of[host] if k != row and out[k]["verified"]
            and (k == reference or out[k]["method"] != "same host")]
        if not anchors:
            continue
        anchor = min(anchors, key=lambda k: (out[k]["uncertainty_ns"] or 0))
        gap = _same_host_gap(out, results, row, anchor)
        if gap is not None:
            out[row] = _distrusted(out[row], results[row], gap, warnings if warnings is not None else [])
            continue
        if host != hosts[reference] and out[row]["verified"] \
                and (out[row]["uncertainty_ns"] or 0) <= (out[anchor]["uncertainty_ns"] or 0):
            continue
        anchor_shift = out[anchor]["offset_ns"] - int(results[anchor].clock.offset_ns)
        offset = (out[anchor]["offset_ns"] if results[row].source == "native"
                  else int(results[row].clock.offset_ns) + anchor_shift)
        out[row] = {**out[row], "offset_ns": int(offset), "uncertainty_ns": out[anchor]["uncertainty_ns"],
                    "method": "same host", "verified": True}
    return out


def align(results: list[RankResult], config: dict | None = None) -> Alignment:
    """Match collectives across ranks and, unless ``clock.align`` is off (``--no-align``: the
    sources' own offsets are used as they are), refine the offsets by the ends of the matched
    collectives (refine_offsets) -- across hosts only when the ends do not cluster by host
    (hosts_cluster). Each result's ``clock`` becomes the final estimate, with the source's offset
    kept beside it; its markers stay on its own clock (``aligned_markers()``). An offset nothing
    verified has uncertainty None (unknown), never 0."""
    ranks = [result.rank for result in results]
    matching = match_collectives([result.markers.collectives for result in results], ranks,
                                 process_groups(results))
    clock_config = (config or {}).get("clock", {})
    initial = [(int(r.clock.offset_ns), int(r.clock.uncertainty_ns or 0)) for r in results]
    aligned_on = bool(clock_config.get("align", True)) and len(results) > 1
    reference = 0
    if aligned_on:
        reference = int(np.argmax(matching.present.any(axis=1))) if matching.size else 0
        refined = refine_offsets(matching.end_ns, matching.present, [o for o, _ in initial],
                                 [u for _, u in initial], reference=reference,
                                 min_samples=int(clock_config.get("refine_min_collectives", 3)))
    else:
        method = "source offset (alignment off)" if len(results) > 1 else "single rank"
        refined = [{"offset_ns": o, "uncertainty_ns": u, "method": method, "samples": 0,
                    "correction_ns": None, "spread_ns": None} for o, u in initial]
    cluster = hosts_cluster([r.host for r in results], [e["correction_ns"] for e in refined],
                            [e["spread_ns"] for e in refined], reference) if aligned_on else None
    notes = []
    if cluster and cluster["clustered"]:
        notes.append(Reason("hosts_clustered", {"gap_ns": cluster["gap_ns"], "spread_ns": cluster["spread_ns"]}))
    warnings: list = []
    estimates = _final_estimates(results, refined, reference, aligned_on, cluster, warnings)
    aligned = []
    for result, (offset0, uncertainty0), estimate in zip(results, initial, estimates):
        clock = ClockEstimate(**estimate, source_offset_ns=offset0, source_uncertainty_ns=uncertainty0)
        aligned.append(replace(result, clock=clock))
    return Alignment(aligned, matching, results[reference].rank if results else None, notes, warnings)
