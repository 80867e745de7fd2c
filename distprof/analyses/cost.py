"""The one cost model (docs/whatif.md): a finding costs what fixing it saves, per step.

The saving is the what-if replay's: the step time predicted with the fix (the scenario that models it)
against the measured one, both by the one step-time definition the what-if uses. A delay is charged
once, to its cause: when a straggler is named, its saving is that of removing its lateness, and every
other finding is priced on top of that fix (``saving_after_straggler_ns``), so the waits the straggler
propagates into other ranks' communication are not also the cost of those findings.

Severity is the saving's share of the measured step: high >= 10%, medium >= 3%, low below. A finding no
scenario prices (or whose scenario does not apply to the trace) keeps ``predicted_saving_ns: None`` with
``why_not``, is "unpriced", and sorts after the priced ones by the figure it describes.
"""

from __future__ import annotations

from msgspec.structs import replace

from ..sections.findings import ABOVE_STEP, NO_REPLAY, NO_SCENARIO, NOT_TIME, Finding, Observed
from ..sections.machine import CrowdedHost
from ..sections.skew import StragglerRow
from ..sections.whatif import Scenario, WhatIf
from ..typed import ABSENT, Reason

HIGH_SHARE, MEDIUM_SHARE = 0.10, 0.03
UNPRICED = "unpriced"
SEVERITY_ORDER = ("high", "medium", "low", UNPRICED)

# the scenario whose replay prices the fix of each finding
FINDING_SCENARIOS = {"straggler": "no_straggler", "serialized_communication": "overlap_communication",
                     "unoverlapped_communication": "overlap_communication", "dataloader_bound": "no_dataloader_wait",
                     "slow_collective": "comm_bandwidth_x2", "imbalance": "balanced_ranks",
                     "expert_imbalance": "balanced_ranks", "exposed_allgather": "overlap_communication"}
MEMORY_FINDINGS = ("memory_creep", "memory_imbalance")
DURATIONS_VARY_SHARE = 0.10  # above this step-to-step spread of the ranks' phase time, a saving says so
MAD_TO_SIGMA = 1.4826


def oversubscribed_hosts(results) -> list[CrowdedHost]:
    """Hosts whose ranks outnumber the host's usable cores (rank files record ``cpus``: the
    machine's cores capped by the cgroup's cpuset and quota, not the rank's affinity, which is one
    core when the launcher binds ranks; other sources do not, and are never flagged): there the
    replay's premise, that a rank's compute takes as long without the others' waits as with them,
    fails (measured: the 4-rank demo on 2 cores, rank 2 sleeping 50 ms a step: no_straggler
    predicted 34.6 ms/step, removing the sleep saved 4.1). The host's cores are the largest any of
    its ranks records: files written before ``cpus`` meant the host recorded the affinity."""
    hosts: dict = {}
    for result in results:  # one per rank
        cpus = result.meta.get("cpus")
        if result.host and isinstance(cpus, int) and cpus > 0:
            hosts.setdefault(result.host, []).append(cpus)
    return [CrowdedHost(host=host, ranks=len(cpus), cpus=max(cpus)) for host, cpus in sorted(hosts.items())
            if len(cpus) > max(cpus)]


def crowded_hosts(hosts: list[CrowdedHost]) -> Reason:
    """Why nothing is priced on these hosts: their ranks outnumber their cores."""
    return Reason("oversubscribed", {"hosts": [host.to_json() for host in hosts]})


def severity(saving_ns: int | None, step_ns: int | None) -> str:
    """high / medium / low by the saving's share of the measured step; unpriced without one."""
    if saving_ns is None or not step_ns:
        return UNPRICED
    share = saving_ns / step_ns
    return "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"


def _scenario_rows(whatif: WhatIf | None) -> dict[str, Scenario]:
    return {row.name: row for row in whatif.scenarios} if whatif is not None else {}


def _step_ns(whatif: WhatIf | None) -> int | None:
    """The measured step the savings are shares of (None without a replay)."""
    return whatif.measured_step_ns if whatif is not None else None


def saving(code: str, whatif: WhatIf | None, oversubscribed: list[CrowdedHost] | None = None, alone: bool = False
           ) -> tuple[int | None, Reason | None, bool]:
    """(predicted saving per step, why not, priced after the straggler's fix) of a finding's fix;
    ``alone``: on the measured run, not after the straggler's fix (the finding is the straggler's cause)."""
    scenario = FINDING_SCENARIOS.get(code)
    if scenario is None:
        return None, NOT_TIME if code in MEMORY_FINDINGS else NO_SCENARIO, False
    if oversubscribed:
        return None, crowded_hosts(oversubscribed), False
    row = _scenario_rows(whatif).get(scenario)
    if row is None:
        return None, NO_REPLAY, False
    if not row.applies:
        return None, row.why or NO_REPLAY, False
    after = code != "straggler" and not alone and row.saving_after_straggler_ns is not ABSENT
    value = row.saving_after_straggler_ns if after else row.saving_ns
    value = max(int(value or 0), 0)  # a fix that the replay finds slower saves nothing
    if whatif.measured_step_ns and value > whatif.measured_step_ns:
        return None, ABOVE_STEP, False
    return value, None, after


def durations_vary(results, straggler_rank: int | None) -> float | None:
    """How much the replay's premise is in doubt on this trace: it keeps every duration as traced,
    yet a rank's phase time per step (its phases' busy time, summed) varies from step to step.
    The median over the ranks other than the straggler of that spread (1.4826 × MAD / median, ≥ 3
    steps), when above ``DURATIONS_VARY_SHARE``; else None. Measured: a 2-rank DDP pair on 2
    shared cores ran compute 19.5% faster beside a sleeping rank than beside a busy one. numpy is
    imported here: the reports read this module's texts, and ``distprof report`` needs no numpy."""
    import numpy as np
    spreads = []
    for result in results:  # one per rank
        phases = result.markers.phases
        if result.rank == straggler_rank or not len(phases.step):
            continue
        steps, index = np.unique(np.asarray(phases.step, np.int64), return_inverse=True)
        per_step = np.bincount(index, weights=np.asarray(phases.busy_ns, np.float64))[steps >= 0]
        middle = float(np.median(per_step)) if per_step.size >= 3 else 0.0
        if middle > 0:
            spreads.append(MAD_TO_SIGMA * float(np.median(np.abs(per_step - middle))) / middle)
    spread = float(np.median(spreads)) if spreads else 0.0
    return spread if spread > DURATIONS_VARY_SHARE else None


def price(finding: Observed, whatif: WhatIf | None, oversubscribed: list[CrowdedHost] | None = None,
          vary: float | None = None) -> Finding:
    """The finding with its cost: ``predicted_saving_ns`` (= ``cost_ns``), its share of the step,
    ``severity``, the scenario that priced it and, when unpriced, ``why_not``; with a saving,
    ``durations_vary_share`` (``durations_vary``: the replay's premise in doubt by about that much).
    An expert imbalance whose hottest rank is the straggler is that straggler's cause: priced alone."""
    cause = finding.finding == "expert_imbalance" and getattr(finding.evidence, "straggler", False) is True
    value, why_not, after = saving(finding.finding, whatif, oversubscribed, alone=cause)
    step_ns = _step_ns(whatif)
    return Finding(finding=finding.finding, figure_ns=finding.figure_ns, ranks=finding.ranks,
                   evidence=finding.evidence, severity=severity(value, step_ns), cost_ns=value,
                   predicted_saving_ns=value, saving_share=value / step_ns if value is not None and step_ns else None,
                   priced_by=FINDING_SCENARIOS.get(finding.finding) if value is not None else None,
                   priced_after_straggler=after, why_not=why_not,
                   durations_vary_share=vary if value is not None else None)


def price_findings(findings: list[Observed], whatif: WhatIf | None, oversubscribed: list[CrowdedHost] | None = None,
                   vary: float | None = None) -> list[Finding]:
    """Every finding priced, the priced ones first by saving (largest first), then the unpriced by
    the figure they describe (``figure_ns``)."""
    priced = [price(f, whatif, oversubscribed, vary) for f in findings]
    return sorted(priced, key=lambda f: (f.predicted_saving_ns is None, -(f.predicted_saving_ns or 0),
                                         -(f.figure_ns or 0)))


def unconfirmed_straggler(straggler: StragglerRow | None, whatif: WhatIf | None, min_share: float,
                          crowded: bool = False) -> StragglerRow | None:
    """The straggler the skew analysis named when the one cost model disagrees: the replay prices
    removing its lateness at less than ``min_share`` of the measured step, the same share its waits
    had to reach. Waits a rank causes can exceed what fixing it saves (a rank a little behind in
    every bucket of a 2-rank DDP job: 10 ms of waits a step, 1 ms saved); a wrong verdict is worse
    than none. Also on a host whose ranks outnumber its cores: there the replay over-prices (a rank
    that waits frees a core it cannot see), so no cost is given, but a fix it prices under the
    floor even so saves little (the 4-rank demos on 2 cores: the 3 clean runs of 39 that named a
    rank are withheld, and 16 right namings of faults whose measured effects were -6 to 13% of the
    step). A rank that turned slow is priced per step since its onset (whatif's
    ``straggler_since``); one profiled step is not judged (one step of a trace cut around it says
    little of what the lateness costs the job). None when it stands or none was named; else the
    straggler's row with the saving, its share of the step and the floor; ``crowded`` (ranks outnumber
    their host's cores) marks that saving an upper bound."""
    if not straggler or straggler.pattern == "single step":
        return None
    value, _, _ = saving("straggler", whatif)
    step_ns = _step_ns(whatif)
    if value is None or not step_ns or value >= min_share * step_ns:
        return None
    return replace(straggler, saving_ns=value, share=value / step_ns, floor=min_share,
                   **({"saving_upper_bound": True} if crowded else {}))


def price_straggler(straggler: StragglerRow | None, whatif: WhatIf | None,
                    oversubscribed: list[CrowdedHost] | None = None,
                    vary: float | None = None, expert_load: tuple[float, float] | None = None) -> StragglerRow | None:
    """skew.straggler with ``cost_ns`` = the step-time saving of removing its lateness (the
    no_straggler scenario) and ``cost_share`` of the measured step; the waits it causes stay in
    ``waits_caused_ns``. ``expert_load``: (load ratio, share of the steps since it turned uneven) where
    the straggler is the hottest rank of an uneven all-to-all (analyses/alltoall.straggler_load): its
    lateness is the tokens the router sends it, which no fix of that rank removes (measured: a router
    sending one of 2 ranks 2x the tokens of the other, +8.2 ms a step against clean runs; removing that
    rank's lateness predicted 22.5 ms). Its cost is then balancing the ranks (balanced_ranks), per step
    since the load turned uneven where the straggler is "since step" k, and ``expert_load`` says why."""
    if not straggler:
        return straggler
    if expert_load is None:
        value, why_not, _ = saving("straggler", whatif, oversubscribed)
    else:
        value, why_not, _ = saving("expert_imbalance", whatif, oversubscribed, alone=True)
        since = expert_load[1] if straggler.pattern == "since step" else 1.0
        value = None if value is None else int(round(value / max(since, 1e-9)))
    step_ns = _step_ns(whatif)
    return replace(straggler, cost_ns=value, cost_share=value / step_ns if value is not None and step_ns else None,
                   cost_why_not=why_not, durations_vary_share=vary if value is not None else None,
                   **({"expert_load": expert_load[0]} if expert_load is not None else {}))
