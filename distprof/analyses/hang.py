"""Hang analysis, numbers and codes only: which rank is at the root of a hang, in which collective of which
process group, why (missing, a size / kind / dtype mismatch, no dump), and who waits for whom.

Groups are resolved across ranks by name and member ranks (the local pg id differs between ranks). Per group:
the last collective every member completed and the first one not every member completed; for it who issued it,
who never did, and what differs across the members. Each rank waits in its lowest pending collective of each
group; the ranks waiting in one (group, seq) form one *wait*, which waits for the members that never issued it,
issued a mismatching one, or left no dump. Following the waits across groups, the ranks at the end of the chains
(a terminal cycle: all its ranks) are the root.

The stuck rank is the one most likely to leave no dump. Where the dumps state a group's members (NCCL's
pg_config) a member without a dump is named as such. Where they do not (gloo leaves subgroups' ranks empty), a
group whose dumped members all issued a collective that never completed must be waiting for a member that left
no dump: the ranks without a dump are inferred to be it (of the stated world; without one, the gaps among the
dumped ranks, else the first rank past them).

An all-to-all's uneven rows are no mismatch (an MoE router sends each rank its own number of tokens); rows that
do not add up (sent to a rank vs received by it, or in total) are a note. Beside each root rank, its fault class:
never issued (the host), issued but never started or completed (the device / backend), or waiting for a peer.

Scale: a wait is one record for all its ranks, and the ranks it waits for are one shared tuple (a world of
10,000 ranks with half the dumps missing is 5,000 waiting ranks and one tuple of 5,000, not 25 million edges).
Without Flight Recorder entries, distprof's own watchdog files serve: a rank inside a comm range waits for the
members of its group that are not inside the same one at the same step.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import NamedTuple

from msgspec.structs import replace

from .. import events as ev
from ..dumps import UNIX_NS, Entry, RankDump
from ..events import COMMUNICATION
from ..sections.hang import (
    CallGroup,
    ChainHop,
    Culprit,
    CulpritDetail,
    Fault,
    GroupState,
    HangResult,
    LastEntry,
    OpenRange,
    RankDetail,
    StackGroup,
    Waiting,
    WaitTarget,
)
from ..typed import Reason

MISSING, SIZE, KIND, DTYPE, NOT_DUMPED = "missing", "size_mismatch", "kind_mismatch", "dtype_mismatch", "not_dumped"
# a reason, and a fault class: issued, never started on the device (scheduled where a member started it; a
# backend with device events records starts: NCCL, not gloo)
NOT_STARTED = "not_started"
# the other fault classes of a root rank (Fault.fault_class), from its own dump: which side of the job holds it
NOT_ISSUED = "not_issued"            # never issued it; everything it issued completed: the host (Python, GIL, data)
NOT_COMPLETED = "not_completed"      # issued (started, or no start recorded: gloo), never completed on it; peers did
WAITING_FOR_PEER = "waiting_for_peer"  # issued, and waits for members that never completed it either
WORLD = "world"
MAX_DETAIL_RANKS = 16   # culprits' per-rank details (last entry, step, ranges) for at most this many ranks
MAX_CHAIN = 64          # hops of a wait chain kept
MAX_WORLD_PER_RANK = 64  # as merge (pipeline.py): a stated world this many times the dumps (and above
MIN_SUSPECT_WORLD = 1024  # this size) is a corrupt value, not a partial job
CLOCK_SLACK_NS = 10**9  # clocks of one job's hosts may differ by this much
MAX_PAIRS = 1024  # members of an all-to-all whose per-peer rows are checked pair by pair (n^2 pairs)


@dataclass
class _Wait:
    """A wait being built: its targets are (reason, ranks, inferred) with ranks a tuple shared where it can be."""

    group: str
    seq: int
    kind: str
    waiters: list[int]
    since_ns: int = 0
    targets: list[tuple[str, tuple[int, ...], bool]] = field(default_factory=list)
    completed_by: list[int] = field(default_factory=list)


@dataclass
class _Track:
    """One rank's record of one group: its collectives by seq, the last it completed / issued, its lowest pending."""

    seqs: dict[int, Entry] = field(default_factory=dict)
    done: int = 0
    last: int = 0
    pending: Entry | None = None


# -- one job ---------------------------------------------------------------------------------------------------
def one_job(dumps: list[RankDump]) -> Reason | None:
    """None when the dumps can be one job's; else why not, naming two files (hang_report words it): a group
    stated with other members, a rank outside a group it calls or outside the stated world, two worlds, two
    clocks, a collective that completed though its members called it further apart than its timeout, a rank
    past a barrier before a member entered it, a collective completed that a member had not issued, or
    pg_config's unnamed group stated unlike."""
    return (_config_clash(dumps) or _world_clash(dumps) or _time_clash(dumps) or _barrier_clash(dumps)
            or _moment_clash(dumps) or _unnamed_clash(dumps))


def _unnamed_clash(dumps: list[RankDump]) -> Reason | None:
    """pg_config's unnamed entry stated alike in every dump of one job (gloo's: the world's ranks in a job without
    subgroups, none once there are): two jobs' halves that nothing else tells apart (rc 0, 'root ranks 1-2')."""
    first = next((d for d in dumps if d.unnamed_ranks is not None), None)
    for dump in dumps:
        if first is not None and dump.unnamed_ranks is not None and dump.unnamed_ranks != first.unnamed_ranks:
            return Reason("unnamed_ranks_clash", {"ranks": first.unnamed_ranks, "path": first.path,
                                                  "other_ranks": dump.unnamed_ranks, "other_path": dump.path})
    return None


def _barrier_clash(dumps: list[RankDump]) -> Reason | None:
    """A rank that called something after a barrier it completed, before a member of that barrier entered it:
    ``barrier()`` returns once every member entered it, so that rank's next call comes after the member's (one
    clock; ``CLOCK_SLACK_NS`` for a job's hosts). Two same-shaped jobs' dumps mixed (the same groups, kinds and
    sequence numbers, recorded 30 s apart) are told apart by their first barrier."""
    entered: dict[tuple[str, int], tuple[int, RankDump]] = {}  # (group, seq) -> latest entry into it
    left: list[tuple[str, int, int, RankDump]] = []            # (group, seq, next call after it, dump)
    for dump in dumps:
        calls = sorted((e for e in dump.entries if e.created_ns and not e.is_p2p), key=lambda e: e.created_ns)
        for at, entry in enumerate(calls):
            if entry.kind != "barrier" or entry.seq < 0:
                continue
            key = (entry.group_name, entry.seq)
            if entry.created_ns > entered.get(key, (-1,))[0]:
                entered[key] = (entry.created_ns, dump)
            if entry.completed and at + 1 < len(calls):
                left.append((*key, calls[at + 1].created_ns, dump))
    for group, seq, next_ns, dump in left:  # a few barriers per dump
        last_ns, member = entered[(group, seq)]
        if next_ns + CLOCK_SLACK_NS < last_ns:
            return Reason("barrier_clash", {"rank": dump.rank, "path": dump.path, "group": group, "seq": seq,
                                            "before_ns": last_ns - next_ns, "member": member.rank,
                                            "member_path": member.path})
    return None


def _moment_clash(dumps: list[RankDump]) -> Reason | None:
    """A collective completed on one rank that a member had not issued when it dumped: a collective completes
    only once every member issued it, and the member's own newest entries of the group are kept by its ring
    buffer, so the two dumps are not of one job at one moment (the other job's ranks, or a rank dumped before the
    hang that went on afterwards). Members: the ranks whose whole dumps name the group, and for the world group
    every rank whose whole dump reaches back past the completed call (``_covers``) with no entry of it."""
    done: dict[str, tuple[int, RankDump, str, int]] = {}  # group -> (highest completed seq, dump, kind, called)
    behind: dict[str, tuple[int, RankDump]] = {}     # group -> (lowest last seq of a whole dump, that dump)
    world = {e.group_name for d in dumps for e in d.entries if e.group_desc == "default_pg"}
    for dump in dumps:
        last: dict[str, int] = {}
        for entry in dump.entries:
            if entry.is_p2p or entry.seq < 0:
                continue
            last[entry.group_name] = max(last.get(entry.group_name, -1), entry.seq)
            if entry.completed and entry.seq > done.get(entry.group_name, (-1,))[0]:
                done[entry.group_name] = (entry.seq, dump, entry.kind, entry.created_ns)
        if dump.status == "read":
            for name, seq in last.items():
                if seq < behind.get(name, (1 << 63,))[0]:
                    behind[name] = (seq, dump)
    for name in sorted(world & done.keys(), key=_group_key):  # every rank is a member of the world group
        called = done[name][3]
        for dump in dumps:  # a whole dump that reaches back past that call yet has no entry of the group
            if dump.status == "read" and name not in {e.group_name for e in dump.entries} and _covers(dump, called):
                behind[name] = (-1, dump)
                break
    for name in sorted(done.keys() & behind.keys(), key=_group_key):
        (seq, early, kind, _), (last_seq, late) = done[name], behind[name]
        if seq > last_seq:
            return Reason("moment_clash", {"rank": early.rank, "path": early.path, "kind": kind, "seq": seq,
                                           "group": name, "member": late.rank, "member_path": late.path,
                                           "member_seq": last_seq})
    return None


def _covers(dump: RankDump, called_ns: int) -> bool:
    """The dump's ring buffer still holds what its rank issued at ``called_ns``: it holds the process's first
    record (nothing was evicted), or an entry called no later than that."""
    first = min((e.record_id for e in dump.entries if e.record_id >= 0), default=-1)
    oldest = min((e.created_ns for e in dump.entries if e.created_ns), default=0)
    return first == 0 or 0 < oldest <= called_ns


def _config_clash(dumps: list[RankDump]) -> Reason | None:
    stated: dict[str, tuple[tuple[int, ...], str]] = {}
    descs: dict[str, tuple[str, str]] = {}
    for dump in dumps:
        for name, ranks in dump.group_ranks.items():
            first = stated.setdefault(name, (ranks, dump.path))
            if first[0] is not ranks and first[0] != ranks:
                return Reason("group_ranks_clash", {"group": name, "ranks": first[0], "path": first[1],
                                                    "other_ranks": ranks, "other_path": dump.path})
        for name, desc in {e.group_name: e.group_desc for e in dump.entries if e.group_desc}.items():
            first_desc = descs.setdefault(name, (desc, dump.path))
            if first_desc[0] != desc:
                return Reason("group_desc_clash", {"group": name, "desc": first_desc[0],
                                                   "path": first_desc[1], "other_desc": desc,
                                                   "other_path": dump.path})
    members = {name: set(ranks) for name, (ranks, _) in stated.items()}
    for dump in dumps:
        for name in {e.group_name for e in dump.entries} & members.keys():
            if dump.rank not in members[name]:
                return Reason("outside_group", {"rank": dump.rank, "path": dump.path, "group": name,
                                                "ranks": stated[name][0], "ranks_path": stated[name][1]})
    return None


def _world_clash(dumps: list[RankDump]) -> Reason | None:
    first: tuple[int, str] | None = None
    for dump in dumps:
        if dump.world_size:
            if first and first[0] != dump.world_size:
                return Reason("world_clash", {"world": first[0], "path": first[1],
                                              "other_world": dump.world_size, "other_path": dump.path})
            first = first or (dump.world_size, dump.path)
    outside = next((d for d in dumps if first and d.rank >= first[0]), None)
    if outside is not None and first is not None:
        return Reason("outside_world", {"rank": outside.rank, "path": outside.path, "world": first[0],
                                        "world_path": first[1]})
    return None


def given_world_clash(dumps: list[RankDump], world_size: int | None) -> Reason | None:
    """Why ``--world-size`` cannot be the dumps' world (None when it can, or none was given): a dump states
    another world, a rank at or past it left a dump, or a stated group names one. Used when it fits, refused when
    it does not: taking the larger of the two without a word hid a wrong --world-size."""
    if world_size is None:
        return None
    for dump in dumps:
        if dump.world_size and dump.world_size != world_size:
            return Reason("given_world_stated", {"given": world_size, "world": dump.world_size, "path": dump.path})
    for dump in dumps:
        if dump.rank >= world_size:
            return Reason("given_world_dump", {"given": world_size, "rank": dump.rank, "path": dump.path})
    checked: set[int] = set()  # ids of rank tuples: one world tuple is shared by every dump
    for dump in dumps:
        for name, ranks in dump.group_ranks.items():
            if id(ranks) not in checked:
                checked.add(id(ranks))
                if ranks and max(ranks) >= world_size:
                    return Reason("given_world_group", {"given": world_size, "group": name, "ranks": ranks,
                                                        "path": dump.path})
    return None


def _time_clash(dumps: list[RankDump]) -> Reason | None:
    """Two clocks; a completed collective called further apart than its timeout allows; or one that a rank saw
    completed (NCCL's time_discovered_completed_ns) before a member called it."""
    clocks: dict[bool, RankDump] = {}
    calls: dict[tuple[str, int], _Calls] = {}
    for dump in dumps:
        for entry in dump.entries:
            if entry.created_ns and not entry.is_p2p:
                clocks.setdefault(entry.created_ns >= UNIX_NS, dump)
                key = (entry.group_name, entry.seq)
                call = calls.get(key)
                if call is None:
                    call = calls[key] = _Calls(entry.created_ns, dump, entry.created_ns, dump)
                call.add(entry, dump)
    if len(clocks) > 1:
        return Reason("two_clocks", {"unix_path": clocks[True].path, "other_path": clocks[False].path})
    for (group, seq), call in sorted(calls.items(), key=lambda item: (_group_key(item[0][0]), item[0][1])):
        apart = call.late_ns - call.early_ns
        if call.completed and call.timeout_ms and apart > call.timeout_ms * 10**6 + CLOCK_SLACK_NS:
            return Reason("called_apart", {"seq": seq, "group": group, "early": call.early.rank,
                                           "early_path": call.early.path, "apart_ns": apart,
                                           "late": call.late.rank, "late_path": call.late.path,
                                           "timeout_ns": call.timeout_ms * 10**6})
        if call.done is not None and call.late_ns > call.done_ns + CLOCK_SLACK_NS:
            return Reason("called_after_done", {"rank": call.done.rank, "path": call.done.path, "seq": seq,
                                                "group": group, "after_ns": call.late_ns - call.done_ns,
                                                "late": call.late.rank, "late_path": call.late.path})
    return None


@dataclass
class _Calls:
    """One collective (group, seq) across the dumps: its earliest and latest call, its first completion seen."""

    early_ns: int
    early: RankDump
    late_ns: int
    late: RankDump
    completed: bool = False
    timeout_ms: int = 0
    done_ns: int = 0
    done: RankDump | None = None

    def add(self, entry: Entry, dump: RankDump) -> None:
        if entry.created_ns < self.early_ns:
            self.early_ns, self.early = entry.created_ns, dump
        if entry.created_ns > self.late_ns:
            self.late_ns, self.late = entry.created_ns, dump
        self.completed |= entry.completed
        self.timeout_ms = max(self.timeout_ms, entry.timeout_ms)
        if entry.completed and entry.done_ns and (self.done is None or entry.done_ns < self.done_ns):
            self.done_ns, self.done = entry.done_ns, dump


# -- the world ---------------------------------------------------------------------------------------------------
def world_of(dumps: list[RankDump], world_size: int | None) -> tuple[int, bool, list[Reason]]:
    """(ranks of the job, whether stated, notes): as given or stated; else at least the dumped and stated ranks."""
    stated = world_size or max((d.world_size or 0 for d in dumps), default=0)
    stated_ranks = {id(r): r for d in dumps for r in d.group_ranks.values() if r}  # one tuple shared by many dumps
    found = max([d.rank for d in dumps] + [r[-1] for r in stated_ranks.values()], default=-1) + 1
    if stated and not world_size and stated > MIN_SUSPECT_WORLD and stated > MAX_WORLD_PER_RANK * len(dumps):
        note = Reason("world_not_trusted", {"stated": stated, "dumps": len(dumps), "found": found})
        return found, False, [note]
    if stated:
        return max(stated, found), True, []
    return found, False, []


def pool_of(world: int, stated: bool, usable: set[int]) -> tuple[int, ...]:
    """The ranks that could be a member that left no dump: of a stated world, every rank without a usable dump;
    else the gaps among the dumped ranks, or, without gaps, the first rank past them."""
    if stated:
        return tuple(r for r in range(world) if r not in usable)
    gaps = tuple(r for r in range(max(usable, default=-1) + 1) if r not in usable)
    return gaps or (max(usable, default=-1) + 1,)


# -- groups ------------------------------------------------------------------------------------------------------
class GroupMembers(NamedTuple):
    """A process group's members as the dumps tell them."""

    desc: str                   # pg_config's description ("default_pg": the world)
    ranks: tuple[int, ...]
    complete: bool              # stated (pg_config, or the world's size), not only seen in entries


def group_members(dumps: list[RankDump], world: int, world_stated: bool) -> dict[str, GroupMembers]:
    """Group name -> its members: as a dump's pg_config states them; the world group: every
    rank of the world (complete where the world is stated; else the ranks up to the highest dumped, which are
    in it for sure); else the ranks whose entries name the group (not complete)."""
    stated: dict[str, set[int]] = {}
    seen: dict[str, set[int]] = {}
    desc: dict[str, str] = {}
    added: set[tuple[str, int]] = set()  # (group, id of a ranks tuple): the world's is one tuple in every dump
    for dump in dumps:
        for name, ranks in dump.group_ranks.items():
            if (name, id(ranks)) not in added:
                added.add((name, id(ranks)))
                stated.setdefault(name, set()).update(ranks)
        for name in {e.group_name: None for e in dump.entries}:
            seen.setdefault(name, set()).add(dump.rank)
        for entry in dump.entries:
            desc.setdefault(entry.group_name, entry.group_desc)
    members = {}
    for name, ranks in seen.items():
        if name in stated:
            members[name] = GroupMembers(desc[name], tuple(sorted(stated[name] | ranks)), True)
        elif desc[name] == "default_pg":  # every rank below the world's size, and ranks 0..max dumped are in it
            members[name] = GroupMembers(desc[name], tuple(range(world)), world_stated)
        else:
            members[name] = GroupMembers(desc[name], tuple(sorted(ranks)), False)
    return members


Index = dict[int, dict[str, _Track]]  # rank -> group name -> its record (collectives only)


def index(dumps: dict[int, RankDump]) -> Index:
    """Each rank's collectives by group and seq, with the last completed / issued and the lowest pending seq,
    built in one pass (later entries of a seq win)."""
    out: Index = {}
    for rank, dump in dumps.items():
        groups = out.setdefault(rank, {})
        for entry in dump.entries:
            if entry.is_p2p or entry.seq < 0:
                continue
            track = groups.get(entry.group_name)
            if track is None:
                track = groups[entry.group_name] = _Track()
            track.seqs[entry.seq] = entry
        for track in groups.values():
            track.last = max(track.seqs)
            track.done = max((s for s, e in track.seqs.items() if e.completed), default=0)
            pending = [s for s, e in track.seqs.items() if not e.completed]
            track.pending = track.seqs[min(pending)] if pending else None
    return out


_LEADING_DIM = re.compile(r"(?<=\[)\d+")


def _compared_sizes(entry: Entry) -> str:
    """The sizes the members of one collective must agree on. An all-to-all's rows are its split: the router
    of an MoE layer sends each rank its own number of tokens ([[4096, 5120]] -> [[4107, 5120]] on one rank,
    -> [[4034, 5120]] on the next), so only the other dimensions and the tensor count are compared."""
    sizes = f"{entry.input_sizes} -> {entry.output_sizes}"
    return _LEADING_DIM.sub("*", sizes) if ev.collective_kind(entry.kind) == ev.ALLTOALL else sizes


def _rows(sizes: str) -> list[int] | None:
    """The leading dimension of each tensor in a sizes text ('[[12, 8]]' -> [12]); None when cut short."""
    return None if "..." in sizes else [int(m) for m in _LEADING_DIM.findall(sizes)]


def rows_notes(idx: Index, groups: dict[str, GroupState], every_rank: bool) -> list[Reason]:
    """Per group, the first all-to-all whose rows do not add up: what its members sent to each other must be what
    they received. Uneven rows are what an MoE all-to-all is; rows that do not add up are a split that disagrees
    across ranks (gloo completes it anyway). Only where every member left its entry of it, and the members are
    stated or every rank of a stated world left a dump (a member the dumps do not show would leave its rows out)."""
    notes = []
    for name in sorted(groups, key=_group_key):
        state = groups[name]
        tracks = [idx[r].get(name) for r in state.ranks if r in idx]
        if not (state.members_stated or every_rank) or len(tracks) != len(state.ranks) or None in tracks:
            continue
        seqs = set.intersection(*(set(t.seqs) for t in tracks))
        for seq in sorted(s for s in seqs if ev.collective_kind(tracks[0].seqs[s].kind) == ev.ALLTOALL):
            note = _rows_note(name, seq, state.ranks, [t.seqs[seq] for t in tracks])
            if note is not None:
                notes.append(note)
                break
    return notes


def _rows_note(group: str, seq: int, ranks: list[int], entries: list[Entry]) -> Reason | None:
    """Where one tensor a peer (the list form) records the split: rank a's rows to b must be b's rows from a;
    else (one tensor a rank: all_to_all_single) the rows all sent must be the rows all received."""
    sent, got = [_rows(e.input_sizes) for e in entries], [_rows(e.output_sizes) for e in entries]
    if any(rows is None for rows in sent + got):
        return None
    figures = {"group": group, "seq": seq, "kind": entries[0].kind, "completed": all(e.completed for e in entries)}
    n = len(ranks)
    if 1 < n <= MAX_PAIRS and all(len(rows) == n for rows in sent + got):
        pair = next(((i, j) for i in range(n) for j in range(n) if sent[i][j] != got[j][i]), None)
        if pair is None:
            return None
        i, j = pair
        return Reason("a2a_rows_pair", {**figures, "sender": ranks[i], "receiver": ranks[j], "sent": sent[i][j],
                                        "received": got[j][i]})
    total_sent, total_got = sum(map(sum, sent)), sum(map(sum, got))
    if total_sent != total_got:
        return Reason("a2a_rows_total", {**figures, "sent": total_sent, "received": total_got, "ranks": len(ranks)})
    return None


def _mismatch(entries: dict[int, Entry]) -> dict[str, dict[str, list[int]]]:
    """Per compared field, value -> ranks, for the fields on which the issuing members differ."""
    out = {}
    for label, read in ((KIND, lambda e: e.kind), (SIZE, _compared_sizes),
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


_EMPTY = _Track()


def group_state(name: str, desc: str, ranks: tuple[int, ...], stated: bool, idx: Index,
                pool: tuple[int, ...]) -> GroupState:
    """The group's last collective completed by all dumped members and its first one not; who issued that one,
    who never did, who left no dump; and, where the members are not stated, the members inferred to be missing."""
    by_rank = {r: idx[r].get(name, _EMPTY) for r in ranks if r in idx}
    last_all = min((t.done for t in by_rank.values()), default=0)
    first = min((s for t in by_rank.values() if t.last > last_all for s in t.seqs if s > last_all), default=None)
    not_dumped = [r for r in ranks if r not in idx]
    if first is None:
        return GroupState(name, desc, list(ranks), stated, last_all, None, "", {}, [], not_dumped, [], {})
    issued = {r: t.seqs[first] for r, t in by_rank.items() if first in t.seqs}
    never = [r for r, t in by_rank.items() if first not in t.seqs and t.last < first]
    kind = Counter(e.kind for e in issued.values()).most_common(1)[0][0]
    states: dict[str, list[int]] = {}
    for rank, entry in sorted(issued.items()):
        states.setdefault("completed" if entry.completed else entry.state or "issued", []).append(rank)
    mismatch = _mismatch(issued)
    inferred = pool if not stated and not never and not not_dumped and not mismatch and not not_started(states) \
        and not any(e.completed for e in issued.values()) else ()
    return GroupState(name, desc, list(ranks), stated, last_all, first, kind, states, never, not_dumped,
                      list(inferred), mismatch)


def not_started(issued: dict[str, list[int]]) -> list[int]:
    """The members that issued the collective but never started it where another member started it: the started
    ones wait for them. Only a backend with device events records starts (NCCL); gloo's entries all stay
    'scheduled', so there is nothing to tell apart."""
    return issued.get("scheduled", []) if "started" in issued else []


# -- waits -------------------------------------------------------------------------------------------------------
def _fr_waits(idx: Index, members: dict[str, GroupMembers], groups: dict[str, GroupState],
              pool: tuple[int, ...]) -> list[_Wait]:
    """Each rank's lowest pending collective per group, gathered per (group, seq), and whom they wait for."""
    waits: dict[tuple[str, int], _Wait] = {}
    for rank in sorted(idx):
        for name, track in idx[rank].items():
            entry = track.pending
            if entry is None:
                continue
            wait = waits.get((name, entry.seq))
            if wait is None:
                wait = waits[(name, entry.seq)] = _Wait(name, entry.seq, entry.kind, [], entry.created_ns)
            wait.waiters.append(rank)
            if entry.created_ns and (not wait.since_ns or entry.created_ns < wait.since_ns):
                wait.since_ns = entry.created_ns
    shared: dict[str, tuple[int, ...]] = {}
    for (name, seq), wait in sorted(waits.items()):
        state = groups[name]
        odd = _odd_ranks(state.mismatch) if seq == state.first_incomplete_seq else {}
        for reason in (KIND, SIZE, DTYPE):
            ranks = tuple(r for r, why in odd.items() if why == reason)
            if ranks:
                wait.targets.append((reason, ranks, False))
        if odd and any(r not in odd for r in wait.waiters):  # a rank that issued it unlike the others waits for
            wait.waiters = [r for r in wait.waiters if r not in odd]  # them, not for itself
        if seq == state.first_incomplete_seq and not_started(state.issued):
            wait.targets.append((NOT_STARTED, tuple(not_started(state.issued)), False))
        if state.not_dumped:
            wait.targets.append((NOT_DUMPED, shared.setdefault(name, tuple(state.not_dumped)), False))
        if state.inferred_missing:
            wait.targets.append((NOT_DUMPED, pool, True))
        behind = tuple(r for r in members[name].ranks if r in idx and r not in odd
                       and idx[r].get(name, _EMPTY).last < seq)
        if behind:
            wait.targets.append((MISSING, behind, False))
        if not wait.targets:
            wait.completed_by = [r for r in members[name].ranks if r in idx and idx[r].get(name, _EMPTY).done >= seq]
    return list(waits.values())


def _comm_groups(ranges, world: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(group name, ranks, comm name) of a rank's open comm ranges."""
    out = []
    for r in ranges:
        if r.category == COMMUNICATION:
            ranks = tuple(r.group) if r.group else tuple(range(world))
            out.append(("ranks " + ",".join(map(str, ranks)) if r.group else WORLD, ranks, r.name))
    return out


def _watchdog_waits(dumps: dict[int, RankDump], world: int) -> list[_Wait]:
    """Without Flight Recorder entries: the ranks inside a comm range of a group at step s wait for the members
    that left no file, and for those not inside a comm range of that group at step s."""
    inside: dict[tuple[str, int], set[int]] = {}
    waits: dict[tuple[str, int, str], _Wait] = {}
    members: dict[str, tuple[int, ...]] = {}
    for rank, dump in sorted(dumps.items()):
        step = -1 if dump.step is None else dump.step
        for name, ranks, comm in sorted(set(_comm_groups(dump.open_ranges, world))):
            inside.setdefault((name, step), set()).add(rank)
            members[name] = ranks
            waits.setdefault((name, step, comm), _Wait(name, step, comm, [])).waiters.append(rank)
    for (name, step, _), wait in waits.items():
        ranks = members[name]
        absent = tuple(r for r in ranks if r not in dumps)
        if absent:
            wait.targets.append((NOT_DUMPED, absent, False))
        outside = tuple(r for r in ranks if r in dumps and r not in inside[(name, step)])
        if outside:
            wait.targets.append((MISSING, outside, False))
    return list(waits.values())


# -- the wait graph ----------------------------------------------------------------------------------------------
Graph = tuple[dict[int, list[int]], list[int], dict[int, int]]


def wait_graph(waits: list[tuple[list[int], list[tuple[int, ...]]]]) -> Graph:
    """(out-edges, start nodes, wait node -> index in ``waits``): rank r -> wait node (-1, -2, ...) -> ranks it
    waits for, through one shared node per target tuple of more than one rank (linear in the ranks, not their
    product). Waits for no one add no node: their ranks wait on no rank that can be named. The start nodes: what
    the waits wait for."""
    out: dict[int, list[int]] = {}
    shared: dict[int, int] = {}
    start: list[int] = []
    nodes: dict[int, int] = {}
    next_node = -1
    for position, (waiters, targets) in enumerate(waits):
        if not any(targets):
            continue
        node, next_node = next_node, next_node - 1
        nodes[node] = position
        out[node] = []
        for ranks in targets:
            if len(ranks) > 1:
                if id(ranks) not in shared:
                    shared[id(ranks)], next_node = next_node, next_node - 1
                    out[shared[id(ranks)]] = list(ranks)
                out[node].append(shared[id(ranks)])
            else:
                out[node].extend(ranks)
        start += out[node]
        for rank in waiters:
            out.setdefault(rank, []).append(node)
    return out, start, nodes


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


def root_ranks(waits: list[tuple[list[int], list[tuple[int, ...]]]]) -> list[int]:
    """The ranks at the end of the wait chains: the ranks of every component of the wait graph that waits on no
    other component (a rank that waits on nobody, or all ranks of a terminal cycle), that some wait waits for.
    ``waits``: (waiting ranks, [tuples of ranks they wait for])."""
    out, start, _ = wait_graph(waits)
    return _roots(out, start)


def _roots(out: dict[int, list[int]], start: list[int]) -> list[int]:
    reachable, todo = set(), list(dict.fromkeys(start))
    while todo:
        node = todo.pop()
        if node not in reachable:
            reachable.add(node)
            todo.extend(out.get(node, ()))
    comp = _components(out, sorted(reachable))
    exits = {comp[a] for a in reachable for b in out.get(a, ()) if comp[a] != comp[b]}
    return sorted(r for r in reachable if r >= 0 and comp[r] not in exits)


def _toward_roots(out: dict[int, list[int]], roots: list[int]) -> dict[int, int]:
    """Node -> distance to the nearest root (breadth first over the reversed graph)."""
    back: dict[int, list[int]] = {}
    for node, children in out.items():
        for child in children:
            back.setdefault(child, []).append(node)
    dist = dict.fromkeys(roots, 0)
    queue = deque(roots)
    while queue:
        node = queue.popleft()
        for parent in back.get(node, ()):
            if parent not in dist:
                dist[parent] = dist[node] + 1
                queue.append(parent)
    return dist


def _chain(wait: _Wait, by_node: dict[int, _Wait], out, dist: dict[int, int], roots: set[int]) -> list[ChainHop]:
    """Hops from the wait's first rank to the nearest root, through this wait first."""
    hops: list[ChainHop] = []
    rank = next((w for w in wait.waiters if w not in roots), None)
    current = wait if rank is not None else None
    while current is not None and len(hops) < MAX_CHAIN and rank not in roots:
        nxt = min(_targets_of(current), key=lambda t: (dist.get(t[0], 1 << 30), t[0]), default=None)
        if nxt is None or nxt[0] not in dist:
            break
        target, reason, inferred = nxt
        hops.append(ChainHop(rank, current.group, current.seq, current.kind, target, reason, inferred))
        rank = target
        nodes = [n for n in out.get(rank, ()) if n in dist]
        current = by_node[min(nodes, key=dist.__getitem__)] if nodes else None
    return hops


def _targets_of(wait: _Wait) -> list[tuple[int, str, bool]]:
    seen: dict[int, tuple[int, str, bool]] = {}
    for reason, ranks, inferred in wait.targets:
        for rank in ranks:
            seen.setdefault(rank, (rank, reason, inferred))
    return list(seen.values())


# -- culprits ----------------------------------------------------------------------------------------------------
def _culprits(waits: list[_Wait], roots: list[int], dumps: dict[int, RankDump], idx: Index,
              groups: dict[str, GroupState], starts: set[str]) -> list[Culprit]:
    """Per wait and reason, the root ranks it waits for, with their fault class; a rank's mismatch (or a
    collective it never started) explains its own lateness elsewhere."""
    root_set, hits, found, done_by = set(roots), {}, [], {}
    for wait in waits:
        for reason, ranks, inferred in wait.targets:
            if id(ranks) not in hits:
                hits[id(ranks)] = [r for r in ranks if r in root_set]
            hit = hits[id(ranks)]
            if hit:
                awaited = [w for w in wait.waiters if w not in root_set or w not in hit]
                found.append(Culprit(hit, reason, wait.group, wait.seq, wait.kind, awaited, inferred,
                                     _detail(hit, reason, wait, dumps, idx, groups), []))
    causes = {r for c in found if c.reason not in (MISSING, NOT_DUMPED) for r in c.ranks}
    kept = []
    for culprit in found:
        ranks = [r for r in culprit.ranks if r not in causes] if culprit.reason == MISSING else culprit.ranks
        if ranks:
            faults = _faults(ranks, culprit.reason, culprit, idx, groups, starts, done_by)
            kept.append(Culprit(ranks, culprit.reason, culprit.group_name, culprit.seq, culprit.kind,
                                culprit.awaited_by, culprit.inferred, culprit.detail, faults))
    return sorted(kept, key=lambda c: (c.ranks[0], c.group_name, c.seq))


def _faults(ranks: list[int], reason: str, where: Culprit, idx: Index, groups: dict[str, GroupState],
            starts: set[str], done_by: dict[tuple[str, int], list[int]]) -> list[Fault]:
    """The fault class of a culprit's ranks, grouped (a 5,000-rank culprit is a few records). Only where their
    own dumps show it: none for a rank without a dump, nor for a mismatch (the call itself is the fault)."""
    if reason == NOT_STARTED:
        return [Fault(ranks, NOT_STARTED, where.group_name, where.seq, where.kind, "scheduled",
                      _completed_by(where.group_name, where.seq, idx, groups, done_by))]
    if reason != MISSING:
        return []
    found: dict[tuple[str, str, int, str, str], list[int]] = {}
    for rank in ranks:
        if rank in idx:
            found.setdefault(_fault_of(idx[rank], idx, groups, starts, done_by), []).append(rank)
    return [Fault(r, fault, group, seq, kind, state, _completed_by(group, seq, idx, groups, done_by) if group else [])
            for (fault, group, seq, kind, state), r in found.items()]


def _fault_of(tracks: dict[str, _Track], idx: Index, groups: dict[str, GroupState], starts: set[str],
              done_by: dict[tuple[str, int], list[int]]) -> tuple[str, str, int, str, str]:
    """(fault class, group, seq, kind, state) of a rank that never issued what others wait for: the host side
    when every collective it issued completed; else where its earliest pending collective stands: never
    started (the backend records starts and it did not start), never completed though members did, or waiting
    for members that did not complete it either."""
    pending = [t.pending for t in tracks.values() if t.pending is not None]
    if not pending:
        return NOT_ISSUED, "", -1, "", ""
    entry = min(pending, key=lambda e: (e.created_ns, _group_key(e.group_name), e.seq))
    if entry.state == "scheduled" and entry.group_name in starts:
        fault = NOT_STARTED
    elif _completed_by(entry.group_name, entry.seq, idx, groups, done_by):
        fault = NOT_COMPLETED
    else:
        fault = WAITING_FOR_PEER
    return fault, entry.group_name, entry.seq, entry.kind, entry.state


def _completed_by(group: str, seq: int, idx: Index, groups: dict[str, GroupState],
                  done_by: dict[tuple[str, int], list[int]]) -> list[int]:
    """The members of ``group`` that completed its collective ``seq`` (one list per collective, shared)."""
    found = done_by.get((group, seq))
    if found is None:
        members = groups[group].ranks if group in groups else []
        found = done_by[(group, seq)] = [r for r in members if r in idx and idx[r].get(group, _EMPTY).done >= seq]
    return found


def _detail(ranks: list[int], reason: str, wait: _Wait, dumps: dict[int, RankDump], idx: Index,
            groups: dict[str, GroupState]) -> CulpritDetail:
    """Numbers behind one culprit: for a mismatch every member's call (kind, sizes, dtypes, grouped); per rank
    (at most MAX_DETAIL_RANKS) its last entry in the group, step and open ranges."""
    detail: dict = {}  # CulpritDetail's fields, those the culprit has
    if reason in (KIND, SIZE, DTYPE):
        calls: dict[tuple[str, str, str], list[int]] = {}
        for rank in groups[wait.group].ranks:
            entry = idx.get(rank, {}).get(wait.group, _EMPTY).seqs.get(wait.seq)
            if entry is not None:
                calls.setdefault((entry.kind, f"{entry.input_sizes} -> {entry.output_sizes}", entry.dtypes),
                                 []).append(rank)
        detail["calls"] = [CallGroup(r, k, sizes, d) for (k, sizes, d), r in calls.items()]
    per_rank = []
    for rank in ranks[:MAX_DETAIL_RANKS]:
        dump = dumps.get(rank)
        if dump is None:
            continue
        item: dict = {"rank": rank}  # RankDetail's fields, those its dump has
        seqs = idx.get(rank, {}).get(wait.group, _EMPTY).seqs
        last = seqs[max(seqs)] if seqs else (dump.entries[-1] if dump.entries else None)
        if last is not None:
            item["last_entry"] = LastEntry(last.group_name, last.seq, last.kind,
                                           "completed" if last.completed else last.state)
        if dump.step is not None:
            item["step"] = dump.step
        if dump.open_ranges:
            item["open_ranges"] = [OpenRange(r.name, r.category, r.elapsed_ns) for r in dump.open_ranges]
        per_rank.append(RankDetail(**item))
    if per_rank:
        detail["ranks"] = per_rank
    return CulpritDetail(**detail)


# -- the whole ---------------------------------------------------------------------------------------------------
def analyse(dumps: list[RankDump], world_size: int | None = None) -> HangResult:
    """The hang as the dumps show it (``world_size``: ranks of the job when known beyond the dumps)."""
    by_rank = {d.rank: d for d in dumps}
    world, stated, notes = world_of(dumps, world_size)
    usable = {d.rank for d in dumps if d.has_flight_recorder}
    idx = index({r: d for r, d in by_rank.items() if d.has_flight_recorder})
    groups: dict[str, GroupState] = {}
    if any(d.entries for d in dumps):
        pool = pool_of(world, stated, usable)
        members = group_members(dumps, world, stated)
        groups = {name: group_state(name, desc, ranks, st, idx, pool) for name, (desc, ranks, st) in members.items()}
        waits, source = _fr_waits(idx, members, groups, pool), "flight_recorder"
        notes += rows_notes(idx, groups, stated and not any(r not in usable for r in range(world)))
        if not stated and any(g.inferred_missing for g in groups.values()):
            world = max(world, max(pool) + 1)
    elif any(d.open_ranges for d in dumps):
        waits = _watchdog_waits(by_rank, world)
        source = "distprof_watchdog"
    else:
        waits, source = [], "none"
    out, start, nodes = wait_graph([(w.waiters, [t[1] for t in w.targets]) for w in waits])
    roots = _roots(out, start)
    waiting = _waiting(waits, out, nodes, roots)
    notes += [Reason("no_rank_to_name", {"group": w.group, "kind": w.kind, "seq": w.seq})
              for w in waits if not w.targets and w.group in groups and groups[w.group].members_stated]
    newest = max((e.created_ns for d in dumps for e in d.entries), default=0)
    starts = {e.group_name for d in dumps for e in d.entries if e.state in ("started", "completed")}
    return HangResult(roots, _culprits(waits, roots, by_rank, idx, groups, starts), waiting,
                      [groups[name] for name in sorted(groups, key=_group_key)], sorted(by_rank), source,
                      world, stated, newest, notes, stacks_of(dumps, roots))


# frames that are not the job's own code (distprof's demo job is its own code)
LIBRARY_PATHS = ("/lib/python3", "site-packages", "dist-packages", "<frozen", "/distprof/annotate",
                 "/distprof/collector", "/distprof/watchdog", "/distprof/profiler")


def _frame_parts(frame: str) -> tuple[str, str, str]:
    """'path/train.py:88 in step' -> ('path/train.py', '88', 'step')."""
    where, _, function = frame.rpartition(" in ")
    path, _, line = where.rpartition(":")
    return path, line, function


def _new_stack_group(own: str, inner: str) -> StackGroup:
    path, line, function = _frame_parts(own)
    inner_path, inner_line, inner_function = _frame_parts(inner)
    return StackGroup(ranks=[], path=path, file=path.rsplit("/", 1)[-1], line=line, function=function,
                      inner=f"{inner_function} ({inner_path.rsplit('/', 1)[-1]}:{inner_line})" if inner else "",
                      steps=[], comm=[], root=False)


def stacks_of(dumps: list[RankDump], roots: list[int]) -> list[StackGroup]:
    """The watchdog's stacks across ranks, next to the Flight Recorder verdict: the ranks grouped by where their
    training thread is: its innermost frame of the job's own code (not the standard library, site-packages or
    distprof's instrumentation), and the innermost frame when that differs ({ranks, path, file, line, function,
    inner, steps, comm, root}); the groups holding a root first, then the largest. 4,096 ranks in one all_reduce
    are one line."""
    groups: dict[tuple[str, str], StackGroup] = {}  # its lists filled in place while the dumps are read
    for dump in dumps:
        if not dump.stack:
            continue
        own = next((f for f in reversed(dump.stack) if not any(p in f for p in LIBRARY_PATHS)), dump.stack[-1])
        inner = dump.stack[-1] if dump.stack[-1] != own else ""
        group = groups.get((own, inner)) or groups.setdefault((own, inner), _new_stack_group(own, inner))
        group.ranks.append(dump.rank)
        if dump.step is not None and dump.step not in group.steps:
            group.steps.append(dump.step)
        for comm in (r.name for r in dump.open_ranges if r.category == COMMUNICATION):
            if comm not in group.comm:
                group.comm.append(comm)
    root_set = set(roots)
    out = [replace(g, steps=sorted(g.steps), root=bool(root_set & set(g.ranks))) for g in groups.values()]
    return sorted(out, key=lambda g: (not g.root, -len(g.ranks), g.ranks[0]))


def _waiting(waits: list[_Wait], out: dict[int, list[int]], nodes: dict[int, int], roots: list[int]
             ) -> list[Waiting]:
    """The waits as reported: ranks, since when, whom they wait for, and the chain to the nearest root."""
    dist = _toward_roots(out, roots)
    by_node = {node: waits[i] for node, i in nodes.items()}
    return [Waiting(w.waiters, w.group, w.seq, w.kind, w.since_ns,
                    [WaitTarget(reason, list(ranks), inferred) for reason, ranks, inferred in w.targets],
                    _chain(w, by_node, out, dist, set(roots)), w.completed_by)
            for w in sorted(waits, key=lambda w: (w.waiters[0], _group_key(w.group), w.seq))]


def _group_key(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)
