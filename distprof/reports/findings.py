"""The wording of findings' costs and of the straggler verdict: analyses give the numbers
(analyses/cost.py prices each finding by the what-if replay), this module phrases them once for
the text and HTML reports."""

from __future__ import annotations

from collections.abc import Callable

from ..analyses import cost

HEADING = "Findings (ordered by what the fix saves per step, predicted by the what-if replay):"
SCENARIO_TITLES = {"no_straggler": "no straggler", "overlap_communication": "overlap communication",
                   "comm_bandwidth_x2": "comm bandwidth x2", "no_dataloader_wait": "no dataloader wait",
                   "balanced_ranks": "balanced ranks"}


def saving(finding: dict, t: Callable[[int | None], str]) -> str:
    """'saves X per step (Y% of the step), what-if: scenario' or why it is not priced."""
    value = finding.get("predicted_saving_ns")
    if value is None:
        return f"saving not predicted: {finding.get('why_not') or cost.NO_SCENARIO}"
    share = finding.get("saving_share")
    scenario = SCENARIO_TITLES.get(finding.get("priced_by") or "", finding.get("priced_by") or "")
    after = " after the straggler's fix" if finding.get("priced_after_straggler") else ""
    return (f"fix saves {t(value)} per step" + (f" ({100 * share:.1f}% of the step time)" if share is not None else "")
            + f"; what-if: {scenario}{after}")


def straggler_line(straggler: dict | None, t: Callable[[int | None], str]) -> str:
    """The one-line straggler verdict of the Diagnosis: what removing its lateness saves (the
    replay), then the waits it causes (not a saving), how often, where."""
    if not straggler:
        return ("Straggler: none (no rank makes the others wait, beyond the clock uncertainty and the threshold, "
                "in enough steps)")
    share = straggler.get("cost_share")
    if straggler.get("cost_ns") is not None:
        saving_text = f"removing its lateness saves {t(straggler['cost_ns'])} per step" + (
            f" ({100 * share:.1f}% of the step time)" if share is not None else "")
    else:
        saving_text = f"saving not predicted ({straggler.get('cost_why_not') or cost.NO_REPLAY})"
    pattern = ("one profiled step: cannot tell persistent from one-off" if straggler.get("pattern") == "single step"
               else f"late in {straggler.get('steps_late')}/{straggler.get('steps')} steps")
    where = straggler.get("phase") or "outside any annotated phase"
    return (f"Straggler: rank {straggler['rank']}, {saving_text}; the others wait {t(straggler['waits_caused_ns'])} "
            f"per step for it; last in {straggler['late_in']} of {straggler['of']} collectives, {pattern}; "
            f"side {straggler.get('side') or 'unknown'}; {where} (threshold {t(straggler['threshold_ns'])})")
