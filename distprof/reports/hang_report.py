"""The hang report: root ranks and why, who waits where, each group's state, and what became of the inputs.
All wording of ``distprof hang`` lives here; the analysis gives numbers and codes."""

from __future__ import annotations

REASONS = {"missing": ("never issued", ""), "size_mismatch": ("issued", " with other sizes than the others"),
           "kind_mismatch": ("issued", " as another collective than the others"),
           "dtype_mismatch": ("issued", " with other dtypes than the others"),
           "not_dumped": ("left no usable dump, awaited in", "")}
STATUS = {"read": "read", "cut_short": "cut short", "refused": "refused"}


def _ranks(ranks) -> str:
    return ",".join(map(str, ranks))


def _where(kind: str, seq: int, group_name: str, group_ranks, by_step: bool) -> str:
    """'all_reduce #4 of group 0 (ranks 0,1,2,3)'; from the watchdog (no sequence numbers): '... at step 5'."""
    group = f"group {group_name}" if group_name.startswith("ranks ") or group_ranks is None \
        else f"group {group_name} (ranks {_ranks(group_ranks)})"
    return f"{kind} at step {seq} in {group}" if by_step else f"{kind} #{seq} of {group}"


def _culprit_line(culprit: dict, by_step: bool) -> str:
    where = _where(culprit["kind"], culprit["seq"], culprit["group_name"], culprit["group_ranks"], by_step)
    before, after = REASONS.get(culprit["reason"], (culprit["reason"], ""))
    line = f"  rank {culprit['rank']}: {before} {where}{after}"
    detail = culprit.get("detail", {})
    issued = detail.get("issued")
    if issued and culprit["reason"] != "missing":
        line += f"; its call: {issued['kind']} sizes {issued['sizes']} dtypes {issued['dtypes']}"
    last = detail.get("last_entry")
    if last and culprit["reason"] == "missing":
        line += f"; its last entry there: {last['kind']} #{last['seq']} ({last['state']})"
    if "step" in detail and not by_step:
        line += f"; at step {detail['step']}"
    ranges = detail.get("open_ranges")
    if ranges:
        line += "; inside " + ", ".join(f"{r['name']} ({r['elapsed_ns'] / 1e9:.1f} s)" for r in ranges)
    return line


def render(result: dict, inputs: list[dict]) -> str:
    """The text printed by ``distprof hang``."""
    lines = []
    by_step = result["source"] == "distprof_watchdog"
    roots = result["root_ranks"]
    if roots:
        lines.append(f"Hang: root rank{'s' if len(roots) > 1 else ''} {_ranks(roots)} "
                     f"(from {result['source'].replace('_', ' ')})")
        lines += [_culprit_line(c, by_step) for c in result["culprits"]]
    else:
        lines.append(f"No hang seen: no rank waits in an unfinished collective ({len(result['ranks_dumped'])} "
                     "ranks dumped)")
    for wait in result["waiting"]:
        lines.append(f"  rank {wait['rank']} waits in "
                     + _where(wait["kind"], wait["seq"], wait["group_name"], None, by_step))
    stuck = [g for g in result["groups"] if g["first_incomplete_seq"] is not None]
    for group in stuck:
        issued = ", ".join(f"{r} {state}" for r, state in group["issued"].items()) or "none"
        lines.append(f"  group {group['name']} (ranks {_ranks(group['ranks'])}): all completed "
                     f"#{group['last_completed_seq']}; #{group['first_incomplete_seq']} {group['kind']} issued by "
                     f"{issued}; never by {_ranks(group['never_issued']) or 'none'}"
                     + (f"; not dumped: {_ranks(group['not_dumped'])}" if group["not_dumped"] else ""))
    counts = {s: sum(1 for i in inputs if i["status"] == s) for s in STATUS}
    lines.append("Inputs: " + ", ".join(f"{n} {STATUS[s]}" for s, n in counts.items()))
    lines += [f"  {i['detail']}" for i in inputs if i["status"] != "read"]
    return "\n".join(lines) + "\n"
