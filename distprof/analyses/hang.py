"""Hang analysis, numbers and codes only: which rank is at the root of a hang, in which collective of which
process group, and why (missing, a size / kind / dtype mismatch, no dump).

Groups are resolved across ranks by name and member ranks (the local pg id differs between ranks). Per group:
the last collective every member completed and the first one not every member completed; for it who issued it,
who never did, and what differs across the members. Each rank waits in its lowest pending collective of each
group for the members that never issued it (or that issued a mismatching one); following those waits across
groups, the ranks at the end of the chains (a terminal cycle: all its ranks) are the root. Without Flight
Recorder entries, distprof's own watchdog files serve: a rank inside a comm range waits for the members of its
group that are not inside the same one at the same step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from ..events import COMMUNICATION
from ..sources.flight_recorder import Entry, RankDump

MISSING, SIZE, KIND, DTYPE, NOT_DUMPED = "missing", "size_mismatch", "kind_mismatch", "dtype_mismatch", "not_dumped"
WORLD = "world"


@dataclass(frozen=True)
class Culprit:
    rank: int
    reason: str
    group_name: str
    group_ranks: list[int]
    seq: int
    kind: str
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Waiting:
    rank: int
    group_name: str
    seq: int
    kind: str


@dataclass(frozen=True)
class GroupState:
    """One process group at the hang: the last collective all members completed, the first they did not."""

    name: str
    desc: str
    ranks: list[int]
    last_completed_seq: int
    first_incomplete_seq: int | None
    kind: str
    issued: dict[int, str]         # rank -> state, of the members that issued the first incomplete one
    never_issued: list[int]
    not_dumped: list[int]
    mismatch: dict[str, dict[str, list[int]]]   # kind / sizes / dtypes -> value -> ranks, where they differ


@dataclass(frozen=True)
class HangResult:
    root_ranks: list[int]
    culprits: list[Culprit]
    waiting: list[Waiting]
    groups: list[GroupState]
    ranks_dumped: list[int]
    source: str      # flight_recorder | distprof_watchdog | none

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Edge:
    waiter: int
    target: int
    reason: str
    group: str
    seq: int
    kind: str


# -- groups --------------------------------------------------------------------------------------------------
def group_members(dumps: list[RankDump], world_size: int | None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Group name -> (desc, member ranks): as a dump's pg_config states them, else the ranks whose entries
    name the group (the world group: every rank of the world)."""
    stated: dict[str, set[int]] = {}
    seen: dict[str, set[int]] = {}
    desc: dict[str, str] = {}
    for dump in dumps:
        for name, ranks in dump.group_ranks.items():
            stated.setdefault(name, set()).update(ranks)
        for entry in dump.entries:
            seen.setdefault(entry.group_name, set()).add(dump.rank)
            desc.setdefault(entry.group_name, entry.group_desc)
    world = set(range(world_size)) if world_size else {d.rank for d in dumps}
    members = {}
    for name, ranks in seen.items():
        found = stated.get(name) or (world if desc[name] == "default_pg" else ranks)
        members[name] = (desc[name], tuple(sorted(found | ranks)))
    return members


Index = dict[int, dict[str, dict[int, Entry]]]  # rank -> group name -> seq -> entry (collectives only)


def index(dumps: dict[int, RankDump]) -> Index:
    """Each rank's collectives by group and seq, built once (later entries of a seq win)."""
    out: Index = {}
    for rank, dump in dumps.items():
        groups = out.setdefault(rank, {})
        for entry in dump.entries:
            if not entry.is_p2p and entry.seq >= 0:
                groups.setdefault(entry.group_name, {})[entry.seq] = entry
    return out


def _mismatch(entries: dict[int, Entry]) -> dict[str, dict[str, list[int]]]:
    """Per compared field, value -> ranks, for the fields on which the issuing members differ."""
    out = {}
    for label, read in ((KIND, lambda e: e.kind), (SIZE, lambda e: f"{e.input_sizes} -> {e.output_sizes}"),
                        (DTYPE, lambda e: e.dtypes)):
        values: dict[str, list[int]] = {}
        for rank, entry in sorted(entries.items()):
            values.setdefault(read(entry), []).append(rank)
        if len(values) > 1:
            out[label] = values
    return out


def _odd_ranks(mismatch: dict[str, dict[str, list[int]]]) -> dict[int, str]:
    """rank -> reason: the members off the most common value of the first differing field (kind before sizes
    before dtypes); with no majority, every member."""
    for label in (KIND, SIZE, DTYPE):
        values = mismatch.get(label)
        if values:
            counts = Counter({value: len(ranks) for value, ranks in values.items()})
            (top, top_n), *rest = counts.most_common()
            tie = bool(rest) and rest[0][1] == top_n
            return {r: label for value, ranks in values.items() if tie or value != top for r in ranks}
    return {}


def group_state(name: str, desc: str, ranks: tuple[int, ...], dumps: dict[int, RankDump], idx: Index) -> GroupState:
    by_rank = {r: idx[r].get(name, {}) for r in ranks if r in dumps and dumps[r].has_flight_recorder}
    done = {r: max((s for s, e in seqs.items() if e.completed), default=0) for r, seqs in by_rank.items()}
    last_all = min(done.values(), default=0)
    later = sorted({s for seqs in by_rank.values() for s in seqs if s > last_all})
    not_dumped = [r for r in ranks if r not in by_rank]
    if not later:
        return GroupState(name, desc, list(ranks), last_all, None, "", {}, [], not_dumped, {})
    first = later[0]
    issued = {r: seqs[first] for r, seqs in by_rank.items() if first in seqs}
    never = [r for r, seqs in by_rank.items() if first not in seqs and max(seqs, default=0) < first]
    kind = Counter(e.kind for e in issued.values()).most_common(1)[0][0]
    return GroupState(name, desc, list(ranks), last_all, first, kind,
                      {r: ("completed" if e.completed else e.state) for r, e in sorted(issued.items())},
                      never, not_dumped, _mismatch(issued))


# -- waits -------------------------------------------------------------------------------------------------
def _fr_edges(dumps: dict[int, RankDump], members, groups: dict[str, GroupState],
              idx: Index) -> tuple[list[Waiting], list]:
    """Each rank's lowest pending collective per group, and whom it waits for there."""
    waiting, edges = [], []
    last = {(r, name): max(seqs) for r, by_group in idx.items() for name, seqs in by_group.items() if seqs}
    for rank in sorted(dumps):
        for name, seqs in sorted(idx[rank].items()):
            ranks = members[name][1]
            pending = sorted((s, e) for s, e in seqs.items() if not e.completed)
            if not pending:
                continue
            seq, entry = pending[0]
            waiting.append(Waiting(rank, name, seq, entry.kind))
            state = groups[name]
            odd = _odd_ranks(state.mismatch) if seq == state.first_incomplete_seq else {}
            for other, reason in odd.items():
                edges.append(_Edge(rank, other, reason, name, seq, entry.kind))
            for other in ranks:
                if other == rank or other in odd:
                    continue
                if other not in dumps or not dumps[other].has_flight_recorder:
                    edges.append(_Edge(rank, other, NOT_DUMPED, name, seq, entry.kind))
                elif last.get((other, name), 0) < seq:
                    edges.append(_Edge(rank, other, MISSING, name, seq, entry.kind))
    return waiting, edges


def _comm_group(ranges, world: tuple[int, ...]) -> list[tuple[str, tuple[int, ...], str]]:
    """(group name, ranks, comm name) of a rank's open comm ranges."""
    out = []
    for r in ranges:
        if r.category == COMMUNICATION:
            ranks = r.group if r.group else world
            out.append(("ranks " + ",".join(map(str, ranks)) if r.group else WORLD, tuple(ranks), r.name))
    return out


def _watchdog_edges(dumps: dict[int, RankDump], world_size: int) -> tuple[list[Waiting], list]:
    """Without Flight Recorder entries: a rank inside a comm range of a group at step s waits for the
    members that are not inside a comm range of that group at step s."""
    world = tuple(range(world_size))
    inside = {r: {(g, d.step) for g, _, _ in _comm_group(d.open_ranges, world)} for r, d in dumps.items()}
    waiting, edges = [], []
    for rank, dump in sorted(dumps.items()):
        for name, ranks, comm in sorted(set(_comm_group(dump.open_ranges, world))):
            step = -1 if dump.step is None else dump.step
            waiting.append(Waiting(rank, name, step, comm))
            for other in ranks:
                if other == rank:
                    continue
                if other not in dumps:
                    edges.append(_Edge(rank, other, NOT_DUMPED, name, step, comm))
                elif (name, dump.step) not in inside[other]:
                    edges.append(_Edge(rank, other, MISSING, name, step, comm))
    return waiting, edges


def _components(out: dict[int, list[int]], nodes: list[int]) -> dict[int, int]:
    """Node -> strongly connected component id (Tarjan, iterative: a long wait chain must not hit the
    recursion limit)."""
    order, low, comp, stack, on_stack, counter = {}, {}, {}, [], set(), 0
    for root in nodes:
        if root in order:
            continue
        work = [(root, iter(out.get(root, ())))]
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp[member] = node
                        if member == node:
                            break
            elif child not in order:
                order[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(out.get(child, ()))))
            elif child in on_stack:
                low[node] = min(low[node], order[child])
    return comp


def root_ranks(edges: list[_Edge], waiting: list[Waiting]) -> list[int]:
    """The ranks at the end of the wait chains: the ranks of every component of the wait graph that waits on no
    other component (a rank that waits on nobody, or all ranks of a terminal cycle), that a waiting rank waits for."""
    out: dict[int, list[int]] = {}
    for edge in edges:
        out.setdefault(edge.waiter, []).append(edge.target)
    # from the ranks waiting ranks wait for: a rank waiting in a collective every member issued alike waits for
    # no rank that can be named, and is no root by itself
    reachable, todo = set(), sorted({b for w in {w.rank for w in waiting} for b in out.get(w, ())})
    while todo:
        node = todo.pop()
        if node not in reachable:
            reachable.add(node)
            todo.extend(out.get(node, ()))
    comp = _components(out, sorted(reachable))
    exits = {comp[a] for a in reachable for b in out.get(a, ()) if comp[a] != comp[b]}
    return sorted(r for r in reachable if comp[r] not in exits)


def _culprits(edges: list[_Edge], roots: list[int], members, dumps: dict[int, RankDump],
              idx: Index) -> list[Culprit]:
    found: dict[tuple, Culprit] = {}
    for edge in edges:
        if edge.target not in roots:
            continue
        key = (edge.target, edge.reason, edge.group, edge.seq)
        if key in found:
            continue
        found[key] = Culprit(edge.target, edge.reason, edge.group, list(members.get(edge.group, ("", ()))[1]),
                             edge.seq, edge.kind, _detail(edge, dumps, idx))
    causes = {c.rank for c in found.values() if c.reason != MISSING}  # a mismatch explains its own lateness
    return sorted((c for c in found.values() if c.reason != MISSING or c.rank not in causes),
                  key=lambda c: (c.rank, c.group_name, c.seq))


def _detail(edge: _Edge, dumps: dict[int, RankDump], idx: Index) -> dict:
    """Numbers and codes behind one culprit: its last entry in the group, its step and open ranges."""
    dump = dumps.get(edge.target)
    if dump is None:
        return {}
    seqs = idx.get(edge.target, {}).get(edge.group, {})
    last = seqs[max(seqs)] if seqs else (dump.entries[-1] if dump.entries else None)
    detail: dict = {}
    if last is not None:
        detail["last_entry"] = {"group_name": last.group_name, "seq": last.seq, "kind": last.kind,
                                "state": "completed" if last.completed else last.state}
    if edge.reason != MISSING and edge.seq in seqs:
        own = seqs[edge.seq]
        detail["issued"] = {"kind": own.kind, "sizes": f"{own.input_sizes} -> {own.output_sizes}",
                            "dtypes": own.dtypes}
    if dump.step is not None:
        detail["step"] = dump.step
    if dump.open_ranges:
        detail["open_ranges"] = [{"name": r.name, "category": r.category, "elapsed_ns": r.elapsed_ns}
                                 for r in dump.open_ranges]
    return detail


def analyse(dumps: list[RankDump], world_size: int | None = None) -> HangResult:
    """The hang as the dumps show it (``world_size``: ranks of the job when known beyond the dumps)."""
    by_rank = {d.rank: d for d in dumps}
    world_size = world_size or max((d.world_size or 0 for d in dumps), default=0) or None
    members = group_members(dumps, world_size)
    idx = index(by_rank)
    if any(d.entries for d in dumps):
        groups = {name: group_state(name, desc, ranks, by_rank, idx) for name, (desc, ranks) in members.items()}
        waiting, edges = _fr_edges(by_rank, members, groups, idx)
        source = "flight_recorder"
    elif any(d.open_ranges for d in dumps):
        world_size = world_size or (max(by_rank) + 1)
        groups = {}
        waiting, edges = _watchdog_edges(by_rank, world_size)
        members = {e.group: ("", _group_of(e.group, world_size)) for e in edges}
        source = "distprof_watchdog"
    else:
        groups, waiting, edges, source = {}, [], [], "none"
    roots = root_ranks(edges, waiting)
    return HangResult(roots, _culprits(edges, roots, members, by_rank, idx), waiting,
                      [groups[name] for name in sorted(groups)], sorted(by_rank), source)


def _group_of(name: str, world_size: int) -> tuple[int, ...]:
    if name == WORLD:
        return tuple(range(world_size))
    return tuple(int(r) for r in name.removeprefix("ranks ").split(","))
