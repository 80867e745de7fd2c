"""The hang report: root ranks and why, who waits for whom since when, the chain to the root, each stuck group,
what became of the inputs, and the next command to run. All wording of ``distprof hang`` lives here; the
analysis gives numbers and codes. Bounded at any scale: rank lists read as ranges (0-4095) and each section
shows at most MAX_LINES lines (hang.json has everything). Every line is printed with its control characters
escaped (names.printable): group names, paths and function names come from dumps anyone can write. hang.html
(hang_html.py) says the same in a browser, with these sentences."""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING

from msgspec.structs import replace

from .. import ranges
from ..dumps import UNIX_NS
from ..names import printable
from ..ranges import rank_ranges
from ..typed import ABSENT, Reason

if TYPE_CHECKING:
    from ..sections.hang import ChainHop, Culprit, Fault, GroupState, HangInput, HangResult, StackGroup, Waiting

STATUS = {"read": "read", "cut_short": "cut short", "refused": "refused"}
WHY = {"missing": "never issued it", "size_mismatch": "issued it with other sizes",
       "kind_mismatch": "issued another collective", "dtype_mismatch": "issued it with other dtypes",
       "not_dumped": "left no dump", "not_started": "issued it, never started it"}
# a root rank's fault class (analyses.hang.Fault): which side holds it, as its own dump shows it
FAULT_CLASS = {"not_issued": "never issued (the host side: Python, the GIL, data loading)",
               "not_started": "issued, never started on the device",
               "not_completed": "issued, never completed (the device / backend side)",
               "waiting_for_peer": "issued, waiting for a peer"}
MAX_LINES = 20       # lines per section; the rest is counted
MAX_RANK_TEXT = 120  # characters of one rank list
MAX_HOPS = 8         # hops of the chain shown


def duration_text(ns: int) -> str:
    """'1.0 d', '30.0 min', '10 s': a span as the clash texts give it."""
    seconds = ns / 1e9
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.3g} s"


def _rr(ranks) -> str:  # noqa: ANN001
    """A group's stated members, at most 64 shown (a corrupt dump can state a million)."""
    if len(ranks) <= 64:
        return rank_ranges(ranks)
    return f"{rank_ranges(sorted(ranks)[:64])}, ... ({len(ranks)})"


def _stated(ranks) -> str:  # noqa: ANN001
    return f"ranks {_rr(ranks)}" if ranks else "stated with no ranks"


# Reason code of analyses/hang.py -> its words, from its figures: why the inputs are not one job's (one_job),
# and the notes of the analysis
WORDS = {
    "moment_clash": lambda rank, path, kind, seq, group, member, member_path, member_seq: (
        f"rank {rank} ({path}) completed {kind} #{seq} of group {group}, which rank "
        f"{member} ({member_path}), a member, had not issued when it dumped ("
        + (f"its last there: #{member_seq}" if member_seq >= 0 else "it has no entry of that group")
        + "): two jobs' dumps, or one job's taken at different times"),
    "barrier_clash": lambda rank, path, seq, group, member, member_path, before_ns: (
        f"rank {rank} ({path}) went on past barrier #{seq} of group {group} "
        f"{duration_text(before_ns)} before rank {member} ({member_path}), a member, entered it: "
        "a barrier returns once every member entered it, so these are two jobs' dumps"),
    "group_ranks_clash": lambda group, path, other_path, ranks, other_ranks: (
        f"group {group} is ranks {_rr(ranks)} in {path} but ranks {_rr(other_ranks)} in "
        f"{other_path}"),
    "unnamed_ranks_clash": lambda path, other_path, ranks, other_ranks: (
        f"pg_config's unnamed group is {_stated(ranks)} in {path} but {_stated(other_ranks)} in "
        f"{other_path}"),
    "given_world_stated": lambda path, world, given: (  # given: the --world-size that the dump contradicts
        f"{path} states a world of {world} ranks: give --world-size {world}, or leave it out"),
    "given_world_dump": lambda rank, path, given: (
        f"rank {rank} left a dump ({path}), outside a world of {given} ranks: give the job's "
        "world size, or leave it out"),
    "given_world_group": lambda group, path, given, ranks: (
        f"group {group} is ranks {_rr(ranks)} in {path}, outside a world of {given} ranks: "
        "give the job's world size, or leave it out"),
    "group_desc_clash": lambda group, desc, path, other_desc, other_path: (
        f"group {group} is {desc} in {path} but {other_desc} in {other_path}"),
    "outside_group": lambda rank, path, group, ranks_path, ranks: (
        f"rank {rank} ({path}) calls group {group}, whose members are ranks {_rr(ranks)} "
        f"({ranks_path})"),
    "world_clash": lambda world, path, other_world, other_path: (
        f"a world of {world} ranks in {path} but of {other_world} in {other_path}"),
    "outside_world": lambda rank, path, world, world_path: (
        f"rank {rank} ({path}) is outside the world of {world} ranks stated by "
        f"{world_path}"),
    "two_clocks": lambda unix_path, other_path: (
        f"the times of {unix_path} are unix time but those of {other_path} another clock "
        "(not one job, or not one kind of clock)"),
    "called_apart": lambda seq, group, early, early_path, late, late_path, apart_ns, timeout_ns: (
        f"#{seq} of group {group} completed, yet rank {early} ({early_path}) called "
        f"it {duration_text(apart_ns)} before rank {late} ({late_path}), longer than its "
        f"timeout of {duration_text(timeout_ns)} (not one job, or their clocks disagree)"),
    "called_after_done": lambda rank, path, seq, group, late, late_path, after_ns: (
        f"rank {rank} ({path}) saw #{seq} of group {group} completed "
        f"{duration_text(after_ns)} before rank {late} ({late_path}) called it (not one "
        "job, or their clocks disagree)"),
    "world_not_trusted": lambda stated, dumps, found: (
        f"world_size {stated} stated by the dumps but only {dumps} rank(s) found; using "
        f"{found}"),
    "a2a_rows_total": lambda kind, seq, group, ranks, sent, received, completed: (
        f"{kind} #{seq} of group {group}: its {ranks} members sent {sent} rows and received "
        f"{received}: a split disagrees across ranks{', and it completed anyway' if completed else ''} "
        "(the dumps record each rank's total rows, not its split, so no rank is named)"),
    "a2a_rows_pair": lambda kind, seq, group, sender, sent, receiver, received, completed: (
        f"{kind} #{seq} of group {group}: rank {sender} sent {sent} rows to rank "
        f"{receiver}, which received {received} from it: their splits disagree"
        f"{', and it completed anyway' if completed else ''}"),
    "no_rank_to_name": lambda group, kind, seq: (
        f"every dumped member of group {group} issued {kind} #{seq} and it never completed: "
        "no rank to name (a fault in the collective itself, or a member the dumps do not show)"),
}


def text(reason: Reason | str) -> str:
    """A Reason of the hang analysis in words (a text passes as it is): the one place they are worded."""
    return WORDS[reason.code](**reason.figures) if isinstance(reason, Reason) else reason


def worded(result: HangResult) -> HangResult:
    """The result with its notes worded: before hang.json, the text and hang.html, which all show them so."""
    return replace(result, notes=[text(note) for note in result.notes])


def ranks_text(ranks: list[int]) -> str:
    """'rank 3' / 'ranks 0-2, 5' / 'ranks 3, 11, ..., 2043 (step 8)' (a DP group): ranges.ranks_text, cut at
    MAX_RANK_TEXT characters."""
    return ranges.ranks_text(ranks, MAX_RANK_TEXT)


def _where(kind: str, seq: int, group: str, members: list[int] | None, by_step: bool) -> str:
    """'all_reduce #4 of group 0 (ranks 0-3)'; from the watchdog (no sequence numbers): '... at step 5'."""
    shown = f"group {group}" if members is None or group.startswith("ranks ") \
        else f"group {group} ({ranks_text(members)})"
    return f"{kind} at step {seq} in {shown}" if by_step else f"{kind} #{seq} of {shown}"


def since_text(ns: int) -> str:
    """' since 21:36:02.533 UTC' (unix time), ' since 12.345 s on its clock' (another clock), '' (not known)."""
    if not ns:
        return ""
    if ns >= UNIX_NS:
        clock = time.strftime("%H:%M:%S", time.gmtime(ns // 10**9))
        return f" since {clock}.{ns // 10**6 % 1000:03d} UTC"
    return f" since {ns / 1e9:.3f} s on its clock"


ACTS = {"missing": ("never issued", ""), "size_mismatch": ("issued", " with other sizes than the others"),
        "kind_mismatch": ("issued", " as another collective than the others"),
        "dtype_mismatch": ("issued", " with other dtypes than the others"),
        "not_started": ("issued", " but never started it, where the others started it")}


def fault_line(f: Fault, many: bool) -> str:
    """'    fault class: issued, never completed (...): its all_to_all #5 of group 1 never completed (scheduled),
    though ranks 0, 2-3 completed it': which side holds a root rank, and what in its dump says so."""
    who = f"{ranks_text(f.ranks)}: " if many else ""
    where, state, fault = f"{f.kind} #{f.seq} of group {f.group_name}", f.state, f.fault_class
    done = f", though {ranks_text(f.completed_by)} completed it" if f.completed_by else ""
    if fault == "not_issued":
        why = "no entry for it, and every collective it issued completed"
    elif fault == "not_started":
        why = f"its {where} stayed {state}{done or ', though members started it'}"
    elif fault == "not_completed":
        gloo = ": the backend records no start, as gloo" if state == "scheduled" else ""
        why = f"its {where} never completed (left {state}{gloo}){done}"
    else:
        why = f"it waits in {where} ({state}), which no member completed"
    return f"    fault class: {who}{FAULT_CLASS.get(fault, fault)}: {why}"


def culprit_lines(culprits: list[Culprit], members: dict[str, list[int] | None], by_step: bool) -> list[str]:
    """Each culprit's line, then its ranks' fault class (at most 4 lines each; said once for a rank that two
    groups wait for), at most MAX_LINES culprits."""
    lines, said = [], set()
    for c in culprits[:MAX_LINES]:
        lines.append(culprit_line(c, members, by_step))
        many = len(c.faults) > 1 or len(c.ranks) > 1
        for f in c.faults[:4]:
            key = (tuple(f.ranks), f.fault_class, f.group_name, f.seq)
            if key not in said:
                said.add(key)
                lines.append(fault_line(f, many))
    if len(culprits) > MAX_LINES:
        lines.append(f"  ... {len(culprits) - MAX_LINES} more culprits (hang.json has them all)")
    return lines


def culprit_line(c: Culprit, members: dict[str, list[int] | None], by_step: bool) -> str:
    """'rank 3 left no dump; rank 2 waits for it in all_reduce #4 of group 2', and for the other reasons what
    the rank did instead, then who waits for it."""
    who, many = ranks_text(c.ranks), len(c.ranks) > 1
    where = _where(c.kind, c.seq, c.group_name, members.get(c.group_name), by_step)
    waiters, n = ranks_text(c.awaited_by), len(c.awaited_by)
    waits = f"{waiters} wait{'s' if n == 1 else ''} for {'them' if many else 'it'}"
    if c.reason == "not_dumped":
        line = f"  {who} left no dump; " + (f"{waits} in {where}" if n else f"awaited in {where}")
        if c.inferred:
            line += (f" (inferred: the dumped members of group {c.group_name} all issued it and it never "
                     "completed, so a member left no dump)")
        return line
    before, after = ACTS.get(c.reason, (c.reason, ""))
    return f"  {who} {before} {where}{after}" + (f"; {waits}" if n else "") + detail_text(c, by_step)


def detail_text(c: Culprit, by_step: bool) -> str:
    """'; calls: ...; its last entry there: ...; at step 5; inside ...': what a culprit's ranks did instead, from
    its ``detail``; one function so that the text and hang.html word it alike."""
    text, many = "", len(c.ranks) > 1
    detail = c.detail
    if detail.calls:
        text += "; calls: " + "; ".join(f"{x.kind} sizes {x.sizes} dtypes {x.dtypes} on "
                                        f"{ranks_text(x.ranks)}" for x in detail.calls[:MAX_LINES])
    for item in (detail.ranks or [])[:3]:
        last = item.last_entry
        mine = "its" if not many else f"rank {item.rank}'s"
        if last and c.reason == "missing":
            text += f"; {mine} last entry there: {last.kind} #{last.seq} ({last.state})"
        if item.step is not ABSENT and not by_step:
            text += f"; at step {item.step}"
        if item.open_ranges:
            text += "; inside " + ", ".join(f"{r.name} ({r.elapsed_ns / 1e9:.1f} s)" for r in item.open_ranges)
    return text


def whom_text(w: Waiting) -> str:
    """'rank 3 (left no dump, inferred)': whom one wait waits for and why, as the text and hang.html say it."""
    return "; ".join(f"{ranks_text(t.ranks)} ({WHY.get(t.reason, t.reason)}"
                     f"{', inferred' if t.inferred else ''})" for t in w.waits_for) or (
        f"no rank: {ranks_text(w.completed_by)} completed it" if w.completed_by else "no rank named")


def _wait_line(w: Waiting, members: dict[str, list[int] | None], by_step: bool) -> str:
    """'  rank 0 waits in all_reduce #3 of group 3 since 21:36:02.533 UTC for rank 2 (never issued it)'."""
    where = _where(w.kind, w.seq, w.group_name, members.get(w.group_name), by_step)
    verb = "waits" if len(w.ranks) == 1 else "wait"
    return f"  {ranks_text(w.ranks)} {verb} in {where}{since_text(w.since_ns)} for {whom_text(w)}"


def chain_line(chain: list[ChainHop], by_step: bool) -> str:
    """'Chain: rank 0 -> rank 2 (...) -> rank 3 (...)', at most MAX_HOPS hops."""
    parts = [f"rank {chain[0].rank}"]
    for hop in chain[:MAX_HOPS]:
        where = f"{hop.kind} at step {hop.seq}" if by_step else f"{hop.kind} #{hop.seq}"
        parts.append(f"rank {hop.waits_for} ({where} of group {hop.group_name}: "
                     f"{WHY.get(hop.reason, hop.reason)}{', inferred' if hop.inferred else ''})")
    more = f" -> ... ({len(chain) - MAX_HOPS} more)" if len(chain) > MAX_HOPS else ""
    return "Chain: " + " -> ".join(parts) + more


def _stack_line(g: StackGroup) -> str:
    """'ranks 0-2: in all_reduce at train.py:88 (step 5)'."""
    steps = f"step{'s' if len(g.steps) > 1 else ''} {', '.join(map(str, g.steps[:8]))}" if g.steps else ""
    comm = f"inside {', '.join(g.comm[:4])}" if g.comm else ""
    extra = "; ".join(x for x in (steps, comm, "root" if g.root else "") if x)
    where = f"  {ranks_text(g.ranks)}: in {g.function} at {g.file}:{g.line}"
    where += f" -> {g.inner}" if g.inner else ""
    return where + (f" ({extra})" if extra else "")


def _group_line(g: GroupState) -> str:
    """One stuck group: who issued its first incomplete collective, who never did ("never by none" read as if
    someone had not, where every member issued it), who left no dump."""
    issued = "; ".join(f"{ranks_text(r)} ({state})" for state, r in g.issued.items()) or "none"
    members = ranks_text(g.ranks) + ("" if g.members_stated else " as the dumps show")
    if g.never_issued:
        never = f"never by {ranks_text(g.never_issued)}"
    else:
        never = "every dumped member issued it" if g.not_dumped or g.inferred_missing else \
            "every member issued it"
    line = (f"  group {g.name} ({members}): all completed #{g.last_completed_seq}; "
            f"#{g.first_incomplete_seq} {g.kind} issued by {issued}; {never}")
    if g.not_dumped:
        line += f"; no dump: {ranks_text(g.not_dumped)}"
    if g.inferred_missing:
        line += f"; a member without a dump inferred: {ranks_text(g.inferred_missing)}"
    return line


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return lines[:MAX_LINES] + [f"  ... {len(lines) - MAX_LINES} more {what} (hang.json has them all)"]


def members_of(result: HangResult) -> dict[str, list[int] | None]:
    """Group name -> its members where the dumps state them (None: only the ranks the dumps show in it)."""
    return {g.name: g.ranks if g.members_stated else None for g in result.groups}


def headline(result: HangResult) -> str:
    """The verdict's first line: the root ranks and how much of the world the dumps cover, a hang without a
    root, or no hang."""
    roots, dumped = result.root_ranks, len(result.ranks_dumped)
    world = (f"a world of {result.world_size}" if result.world_stated
             else f"a world of at least {result.world_size or dumped}")
    source = result.source.replace("_", " ")
    if roots:
        return f"Hang: root {ranks_text(roots)} (from {source}; {dumped} ranks dumped of {world})"
    if result.waiting:
        return f"Hang, no root named: ranks wait but for no rank the dumps can name ({dumped} ranks dumped)"
    return f"No hang seen: no rank waits in an unfinished collective ({dumped} ranks dumped)"


def render(result: HangResult, inputs: list[HangInput], rerun: str = "distprof hang DUMPS",
           html_path: str | None = None) -> str:
    """The text printed by ``distprof hang``; it ends with where hang.html is (``html_path``, when written) and the
    next command to run. Each line is made printable here, once, where it is rendered: a group name, a path or
    a function name from a dump holding ESC or a newline would otherwise retitle or clear the terminal, or forge
    a report line."""
    by_step = result.source == "distprof_watchdog"
    members = members_of(result)
    lines = [headline(result)]
    if result.root_ranks:
        lines += culprit_lines(result.culprits, members, by_step)
    if result.waiting:
        lines.append("Waiting (who waits for whom, since when):")
        lines += _capped([_wait_line(w, members, by_step) for w in result.waiting], "waits")
        longest = max((w.chain for w in result.waiting), key=len)
        if longest:
            lines.append(chain_line(longest, by_step))
    if result.stacks:
        lines.append("Stacks (distprof's watchdog: where each rank's training thread is, in its own code):")
        lines += _capped([_stack_line(g) for g in result.stacks], "stacks")
    stuck = [g for g in result.groups if g.first_incomplete_seq is not None]
    if stuck:
        lines.append("Groups:")
        lines += _capped([_group_line(g) for g in stuck], "groups")
    lines += [f"Note: {note}" for note in result.notes]
    counts = {s: sum(1 for i in inputs if i.status == s) for s in STATUS}
    lines.append("Inputs: " + ", ".join(f"{n} {STATUS[s]}" for s, n in counts.items()))
    lines += _capped([f"  {i.detail}" for i in inputs if i.status != "read"], "inputs")
    if html_path:
        lines.append(f"wrote {html_path}   (the same in a browser: verdict, waits, chain, stacks, groups, inputs)")
    lines.append(f"Next: {next_step(result, rerun)}")
    return "".join(f"{printable(line)}\n" for line in lines)


def next_step(result: HangResult, rerun: str) -> str:
    """The one command to run next, for what was found."""
    roots, dumped = result.root_ranks, set(result.ranks_dumped)
    absent = [r for r in roots if r not in dumped]
    if absent:
        rank = absent[0]
        step = (f"{rerun} PATH/nccl_trace_rank_{rank}   (rank {rank} left no dump among the inputs: its host's "
                f"/tmp/nccl_trace_rank_{rank}, or its rank{rank}.json)")
        if not result.world_stated:
            step += f"; or state the world: {rerun} --world-size N"
        return step
    stack = next((g for g in result.stacks if g.root), None)
    if roots and stack and stack.path and stack.line.isdigit():
        line = int(stack.line)
        return (f"sed -n {max(1, line - 10)},{line + 10}p {shlex.quote(stack.path)}   ({ranks_text(stack.ranks)} "
                f"{'is' if len(stack.ranks) == 1 else 'are'} in {stack.function} there; every thread's stack is "
                "in the hang_rank<r>.json files)")
    if roots:
        rank = roots[0]
        fault = next((f for c in result.culprits for f in c.faults if rank in f.ranks), None)
        if fault and fault.fault_class in ("not_started", "not_completed"):
            return (f"py-spy dump --native --pid PID   (on rank {rank}'s host: rank {rank} issued {fault.kind} "
                    f"#{fault.seq} of group {fault.group_name} and it never "
                    f"{'started' if fault.fault_class == 'not_started' else 'completed'} there, so look below its "
                    "Python: the backend's threads, and the GPU's stream with nvidia-smi / cuda-gdb)")
        return (f"py-spy dump --pid PID   (on rank {rank}'s host: where rank {rank} is, in Python; or rerun the job "
                "with collector.hang_dump_s: 60, and distprof's hang_rank<r>.json files carry every thread's stack)")
    if result.waiting:
        return ("NCCL_DEBUG=INFO python ...   (rerun the job: every member issued the collective and none "
                "completed, so look at the transport, not at one rank)")
    return (f"{rerun}   (with dumps taken while the job hangs: TORCH_FR_BUFFER_SIZE=2000 and "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1, or distprof's collector.hang_dump_s: 60)")


def rerun_command(inputs: list[str], limit: int = 4) -> str:
    """`distprof hang IN...` as typed again, a few inputs at most."""
    shown = [shlex.quote(i) for i in inputs[:limit]] + (["..."] if len(inputs) > limit else [])
    return "distprof hang " + " ".join(shown)
