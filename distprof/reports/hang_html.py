"""``OUT/hang.html``: what ``distprof hang`` found, on one page styled like report.html (its CSS, its table and
escaping helpers): the verdict, who waits for whom since when and the chain to the root, the stacks across
ranks, the groups, the inputs and the next command.

Built from hang.json's document alone (the typed ``HangResult`` with its ``inputs`` and ``next``), so the page says
what the file holds and can be rebuilt from it; the sentences are hang_report's, so the page and the text word a
finding alike. Where the text shows 20 lines a section, a table here shows up to MAX_ROWS rows (it scrolls),
still bounded at 10,000 ranks. Every string is made printable (control characters as ``\\x1b``) and then
HTML-escaped: group names, paths and function names come from dumps anyone can write, and a ``<script>`` or a
bidi override in one must read as text, not act."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import outpaths
from ..names import cap_names, printable_all
from . import hang_report as words
from .html import CSS, escaped, table_html

if TYPE_CHECKING:
    from ..sections.hang import ChainHop, Culprit, GroupState, HangResult

HANG_HTML = "hang.html"
MAX_ROWS = 500  # rows per table; the rest is counted (hang.json has them all)
_PAGE_CSS = "pre.next{white-space:pre-wrap;background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:8px 12px}"


def _rows_note(total: int, what: str) -> str:
    """The line under a table cut at MAX_ROWS, so a reader knows where the rest is."""
    if total <= MAX_ROWS:
        return ""
    return f'<p class="meta">{total - MAX_ROWS} more {escaped(what)} not shown (hang.json has them all)</p>'


def _seq_header(by_step: bool) -> str:
    """'Step' from the watchdog (no sequence numbers), else 'Seq' (the collective's number in its group)."""
    return "Step" if by_step else "Seq"


def verdict_html(doc: HangResult, by_step: bool) -> str:
    """The headline in a card as severe as the finding, then per culprit its root ranks, reason, group, kind,
    seq and who waits for it, and the sentence the text prints for it (what the rank did instead)."""
    culprits = doc.culprits
    severity = "critical" if doc.root_ranks else "warning" if doc.waiting else "info"
    card = f'<div class="card finding sev-{severity}"><p><b>{escaped(words.headline(doc))}</b></p>'
    members = words.members_of(doc)
    card += "".join(f"<p>{escaped(words.culprit_line(c, members, by_step).strip())}</p>"
                    + "".join(f"<p>{escaped(words.fault_line(f, len(c.faults) > 1 or len(c.ranks) > 1).strip())}"
                              "</p>" for f in c.faults[:4])
                    for c in culprits[:MAX_ROWS])
    card += "</div>"
    if not culprits:
        return "<h2>Verdict</h2>" + card
    rows = [[words.ranks_text(c.ranks), f"{c.reason}: {words.WHY.get(c.reason, c.reason)}",
             c.group_name, c.kind, words.ranks_text(c.awaited_by) if c.awaited_by else "none",
             _fault_cell(c), c.seq, "yes" if c.inferred else "no"] for c in culprits[:MAX_ROWS]]
    headers = ["Root", "Reason", "Group", "Kind", "Awaited by", "Fault class", _seq_header(by_step), "Inferred"]
    return "<h2>Verdict</h2>" + card + table_html(headers, rows, left=5) + _rows_note(len(culprits), "culprits")


def _fault_cell(c: Culprit) -> str:
    """'not_completed: issued, never completed (...)', per fault class of the culprit's ranks; '-' where the dumps
    do not show it (no dump, a mismatch)."""
    faults = c.faults
    many = len(faults) > 1
    return "; ".join(f"{words.ranks_text(f.ranks) + ' ' if many else ''}{f.fault_class}: "
                     f"{words.FAULT_CLASS.get(f.fault_class, f.fault_class)}" for f in faults[:4]) or "-"


def _chain_ranks(chain: list[ChainHop]) -> str:
    """'0 → 2 → 3': the ranks of a wait's chain to its root."""
    return " → ".join([str(chain[0].rank)] + [str(hop.waits_for) for hop in chain]) if chain else "-"


def waiting_html(doc: HangResult, by_step: bool) -> str:
    """Who waits for whom since when: one row per wait (the ranks waiting in one collective of one group), with
    whom it waits for and why, and the ranks of its chain to the root."""
    waits = doc.waiting
    if not waits:
        return ""
    rows = [[words.ranks_text(w.ranks), w.group_name, w.kind, words.whom_text(w), _chain_ranks(w.chain),
             words.since_text(w.since_ns).removeprefix(" since ") or "-", w.seq] for w in waits[:MAX_ROWS]]
    headers = ["Waiting", "Group", "Kind", "Waits for (why)", "Chain to the root", "Since", _seq_header(by_step)]
    return ("<h2>Waiting</h2><p class=\"meta\">who waits for whom, since when (the earliest call of the waiting "
            "ranks)</p>" + table_html(headers, rows, left=5) + _rows_note(len(waits), "waits"))


def chain_html(doc: HangResult, by_step: bool) -> str:
    """The longest chain of waits, hop by hop, from a waiting rank to the root (the text's Chain line)."""
    chains = [w.chain for w in doc.waiting if w.chain]
    if not chains:
        return ""
    chain = max(chains, key=len)
    rows = [[f"rank {hop.rank}", hop.group_name, hop.kind, f"rank {hop.waits_for}",
             words.WHY.get(hop.reason, hop.reason) + (", inferred" if hop.inferred else ""), hop.seq]
            for hop in chain]
    headers = ["Rank", "Waits in group", "Kind", "For", "Why", _seq_header(by_step)]
    return (f"<h2>Chain</h2><p>{escaped(words.chain_line(chain, by_step))}</p>" + table_html(headers, rows, left=5))


def stacks_html(doc: HangResult) -> str:
    """The stacks across ranks (distprof's watchdog files): the ranks grouped by where their training thread is
    in the job's own code, the library frame under it, the steps, the comm ranges open, and the root's first."""
    stacks = doc.stacks
    if not stacks:
        return ""
    rows = [[words.ranks_text(g.ranks), g.function, f"{g.file}:{g.line}", g.path, g.inner or "-",
             ", ".join(g.comm[:8]) or "-", ", ".join(map(str, g.steps[:8])) or "-", "yes" if g.root else "no"]
            for g in stacks[:MAX_ROWS]]
    headers = ["Ranks", "Function", "Where", "Path", "Library frame under it", "Inside", "Steps", "Root"]
    return ("<h2>Stacks</h2><p class=\"meta\">distprof's watchdog: where each rank's training thread is, in its own "
            "code (every thread's stack is in the hang_rank&lt;r&gt;.json files)</p>"
            + table_html(headers, rows, left=6) + _rows_note(len(stacks), "stacks"))


def _mismatch_text(mismatch: dict[str, dict[str, list[int]]]) -> str:
    """'sizes: [[8]] on rank 1; [[16]] on ranks 0, 2-3': what differs across a group's members, where it does."""
    return "; ".join(f"{what}: " + "; ".join(f"{value} on {words.ranks_text(ranks)}" for value, ranks in by.items())
                     for what, by in mismatch.items()) or "-"


def _group_row(g: GroupState) -> list:
    """One group's row: members, the first collective not every member completed, who issued it, who not."""
    members = words.ranks_text(g.ranks) + ("" if g.members_stated else " (as the dumps show)")
    issued = "; ".join(f"{words.ranks_text(r)} ({state})" for state, r in g.issued.items()) or "-"

    def ranks(value: list[int]) -> str:
        """The ranks, or '-' where there are none (an empty cell reads as missing data)."""
        return words.ranks_text(value) if value else "-"
    return [g.name, g.desc or "-", members, g.kind or "-", issued, ranks(g.never_issued),
            ranks(g.not_dumped), ranks(g.inferred_missing), _mismatch_text(g.mismatch),
            g.last_completed_seq, "-" if g.first_incomplete_seq is None else g.first_incomplete_seq]


def groups_html(doc: HangResult) -> str:
    """Every process group the dumps name, the stuck ones (a collective not every member completed) first."""
    groups = sorted(doc.groups, key=lambda g: g.first_incomplete_seq is None)
    if not groups:
        return ""
    headers = ["Group", "Description", "Members", "Kind", "Issued by (state)", "Never issued", "No dump",
               "Inferred missing", "Mismatch", "All completed #", "First incomplete #"]
    return ("<h2>Groups</h2>" + table_html(headers, [_group_row(g) for g in groups[:MAX_ROWS]], left=9)
            + _rows_note(len(groups), "groups"))


def inputs_html(doc: HangResult) -> str:
    """Each input and what became of it (read, cut short, refused, and why), the ones not read first."""
    inputs = sorted(doc.inputs or [], key=lambda i: i.status == "read")
    counts = ", ".join(f"{sum(1 for i in inputs if i.status == s)} {shown}" for s, shown in words.STATUS.items())
    rows = [[i.path, words.STATUS.get(i.status, i.status), i.detail or "-",
             "-" if i.rank is None else i.rank] for i in inputs[:MAX_ROWS]]
    return (f"<h2>Inputs</h2><p>{escaped(counts)}</p>" + (table_html(["Path", "Status", "Detail", "Rank"], rows, left=3)
                                                     if rows else "") + _rows_note(len(inputs), "inputs"))


def notes_html(notes: list[str]) -> str:
    """The analysis' notes (a world size not stated, a corrupt value ignored), as report.html shows warnings."""
    if not notes:
        return ""
    return '<h2>Notes</h2><ul class="warn">' + "".join(f"<li>{escaped(note)}</li>" for note in notes) + "</ul>"


def render(doc: HangResult) -> str:
    """The page for hang.json's document: made printable and capped once here, then escaped where written."""
    doc = printable_all(cap_names(doc))
    by_step = doc.source == "distprof_watchdog"
    body = ["<h1>distprof hang</h1>",
            f'<p class="meta">source {escaped(doc.source.replace("_", " "))} · {len(doc.ranks_dumped)} rank(s) '
            f'dumped · world size {"" if doc.world_stated else "at least "}'
            f'{escaped(doc.world_size or len(doc.ranks_dumped))}</p>',
            verdict_html(doc, by_step), waiting_html(doc, by_step), chain_html(doc, by_step), stacks_html(doc),
            groups_html(doc), notes_html(doc.notes), inputs_html(doc),
            f'<h2>Next</h2><pre class="next">{escaped(doc.next or "")}</pre>']
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>distprof hang</title><style>{CSS}{_PAGE_CSS}</style></head><body><main>"
            + "".join(body) + "</main></body></html>\n")


def write(doc: HangResult, out: str | Path) -> Path:
    """``OUT/hang.html`` for hang.json's document, written atomically; returns its path."""
    return outpaths.write_text(Path(out) / HANG_HTML, render(doc))
