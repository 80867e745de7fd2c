"""hang.json: what ``distprof hang`` found (analyses/hang.py) as one typed value. Its fields, in their declared
order, are hang.json's keys; ``HangResult.from_json(j).to_json() == j`` for every hang.json distprof wrote, and
``reports/hang_report.py`` and ``reports/hang_html.py`` read it by attribute. Why typed: the culprits' details,
the waits, their chains and the stacks were dicts built in the analysis and read by string key in two reports."""

from __future__ import annotations

import msgspec

from ..typed import Reason, Record, absent


class Fault(Record):
    """Which side holds root ranks, as their own dumps show it: the host never issued the collective, or it was
    issued and the device / backend never started or completed it, or it waits for a peer. Why: the reason says
    what the others wait for; the fix differs (py-spy on the host, the GPU or the transport)."""

    ranks: list[int]
    fault_class: str             # not_issued | not_started | not_completed | waiting_for_peer
    group_name: str = ""         # the collective it is stuck in ("" and -1: not_issued, it is in none)
    seq: int = -1
    kind: str = ""
    state: str = ""              # its entry's state there, as the recorder saw it (gloo: always scheduled)
    completed_by: list[int] = msgspec.field(default_factory=list)  # the members that completed that collective


class CallGroup(Record):
    """The members of a mismatched collective that called it one way."""

    ranks: list[int]
    kind: str
    sizes: str                   # "input sizes -> output sizes"
    dtypes: str


class LastEntry(Record):
    """A rank's last entry in the group a culprit is awaited in."""

    group_name: str
    seq: int
    kind: str
    state: str                   # completed, or the state the recorder saw


class OpenRange(Record):
    """A range open on a rank when its watchdog dumped (distprof's hang files)."""

    name: str
    category: str
    elapsed_ns: int


class RankDetail(Record):
    """One culprit rank: its last entry there, its step and the ranges open on it, where its dump has them."""

    rank: int
    last_entry: LastEntry = absent()
    step: int = absent()
    open_ranges: list[OpenRange] = absent()


class CulpritDetail(Record):
    """The numbers behind a culprit: every member's call (a mismatch), and per rank what its dump shows."""

    calls: list[CallGroup] = absent()
    ranks: list[RankDetail] = absent()


class Culprit(Record):
    """Ranks at the root, one reason, one wait: e.g. rank 3 left no dump; rank 2 waits for it in #3 of group 2."""

    ranks: list[int]
    reason: str
    group_name: str
    seq: int
    kind: str
    awaited_by: list[int]
    inferred: bool = False       # the dumps do not state the member: it is inferred (see analyses/hang.py)
    detail: CulpritDetail = msgspec.field(default_factory=CulpritDetail)
    faults: list[Fault] = msgspec.field(default_factory=list)  # the fault class of its ranks, where dumps show it


class WaitTarget(Record):
    """Whom one wait waits for, and why."""

    reason: str
    ranks: list[int]
    inferred: bool


class ChainHop(Record):
    """One hop of a chain of waits toward a root: ``rank`` waits in a collective for ``waits_for``."""

    rank: int
    group_name: str
    seq: int
    kind: str
    waits_for: int
    reason: str
    inferred: bool


class Waiting(Record):
    """One wait: the ranks waiting in one collective of one group, since when, for whom, and the chain from the
    first of them to a root."""

    ranks: list[int]
    group_name: str
    seq: int                     # the collective's seq (from the watchdog: the step)
    kind: str
    since_ns: int                # the earliest call of the waiting ranks (0: not known)
    waits_for: list[WaitTarget]  # a rank in both lists waits for the others
    chain: list[ChainHop] = msgspec.field(default_factory=list)
    completed_by: list[int] = msgspec.field(default_factory=list)  # waiting for no one: the members that completed it


class GroupState(Record):
    """One process group at the hang: the last collective all members completed, the first they did not."""

    name: str
    desc: str
    ranks: list[int]
    members_stated: bool         # all members known (pg_config, a stated world); else the ranks the dumps show in it
    last_completed_seq: int
    first_incomplete_seq: int | None
    kind: str
    issued: dict[str, list[int]]  # state -> ranks, of the members that issued the first incomplete one
    never_issued: list[int]
    not_dumped: list[int]
    inferred_missing: list[int]  # members inferred among the ranks without a dump
    mismatch: dict[str, dict[str, list[int]]]   # kind / sizes / dtypes -> value -> ranks, where they differ


class StackGroup(Record):
    """Ranks whose training thread is at one place in the job's own code (distprof's watchdog files)."""

    ranks: list[int]
    path: str
    file: str
    line: str                    # as the frame gives it (a number)
    function: str
    inner: str                   # the innermost frame under it, where that is library code ("" where none)
    steps: list[int]
    comm: list[str]              # communication ranges open on them
    root: bool                   # holds a root rank


class HangInput(Record):
    """One input of ``distprof hang`` and what became of it (sources.flight_recorder)."""

    path: str
    status: str                  # read, cut_short, refused
    rank: int | None
    detail: str


class HangResult(Record):
    """The whole hang.json: the analysis, then (written by the command) its inputs and the next command."""

    root_ranks: list[int]
    culprits: list[Culprit]
    waiting: list[Waiting]
    groups: list[GroupState]
    ranks_dumped: list[int]
    source: str                  # flight_recorder | distprof_watchdog | none
    world_size: int | None = None
    world_stated: bool = False   # False: the world is the dumped (and inferred) ranks, a lower bound
    newest_ns: int = 0           # the latest call in the dumps: about when they were written
    notes: list[str | Reason] = msgspec.field(default_factory=list)  # Reasons; hang_report.worded words them
    stacks: list[StackGroup] = msgspec.field(default_factory=list)  # watchdog: ranks by their innermost own frame
    inputs: list[HangInput] = absent()
    next: str = absent()         # the one command to run next (reports/hang_report.next_step)
