"""The machine a run ran on, as its inputs record it (host names, the host's usable cores, GPU model,
the 1-minute load average): a diff of two runs made under different conditions may measure the
machine, not the change, and says so. Facts only where a source records them."""

from __future__ import annotations

from ..results import RankResult
from ..sections.diff import MachineDifference
from ..sections.machine import Host
from . import hostload

LOAD_PER_CORE_DIFFERS = 0.25   # 1-minute load averages this far apart per core: "the load differs"


def facts(results: list[RankResult]) -> list[Host]:
    """One entry per host: its ranks, the host's usable cores (the largest a rank records: the
    machine's, capped by its cgroup; files from before that recorded a rank's affinity), GPU models,
    the highest 1-minute load average a rank saw at its start, stop or a step (None where not recorded), and
    where rank files sample it, the share of their steps the ranks' training threads waited for a core."""
    by_host: dict[str, list[RankResult]] = {}
    for result in results:  # in order: a host's first rank names it
        by_host.setdefault(result.host or "", []).append(result)
    return [_host(mine) for _, mine in sorted(by_host.items())]


def _host(mine: list[RankResult]) -> Host:
    """The facts of one host from its ranks' records."""
    cpus = [c for c in (r.meta.get("cpus") for r in mine) if isinstance(c, int) and c > 0]
    gpus = {g for g in (r.meta.get("gpu_name") for r in mine) if isinstance(g, str) and g}
    loads = [float(v) for v in (r.meta.get("load_1m") for r in mine) if isinstance(v, (int, float))]
    share, sampled, stolen = hostload.runqueue_share(mine), hostload.max_load(mine), hostload.steal_share(mine)
    loads += [sampled] if sampled is not None else []
    return Host(host=mine[0].host, ranks=len(mine), cpus=max(cpus) if cpus else None, gpus=sorted(gpus),
                load_1m=max(loads) if loads else None, **({"runqueue_share": share} if share is not None else {}),
                **({"steal_share": stolen} if stolen is not None else {}))


def busy_hosts(hosts: list[Host]) -> list[Host]:
    """The hosts whose ranks' training threads waited ``hostload.BUSY_SHARE`` or more of their steps for a
    core (from ``facts``): the run's timings there are partly the host's."""
    return [h for h in hosts if (h.runqueue_share or 0.0) >= hostload.BUSY_SHARE]


def differences(before: list[Host] | None, after: list[Host] | None) -> list[MachineDifference]:
    """What differs between two runs' machines, where both record it: hosts, cores, GPU models and load
    (per core, at least ``LOAD_PER_CORE_DIFFERS`` apart)."""
    if not before or not after:
        return []
    out = []

    def known(hosts: list[Host], field: str) -> list[str]:
        values = (getattr(h, field) for h in hosts)
        return sorted({str(v) for value in values for v in (value if isinstance(value, list) else [value])
                       if v not in (None, "")})

    for fact, field in (("hosts", "host"), ("cores", "cpus"), ("gpus", "gpus")):
        b, a = known(before, field), known(after, field)
        if b and a and b != a:
            out.append(MachineDifference(fact, b, a))
    b_load, a_load = _load_per_core(before), _load_per_core(after)
    if b_load is not None and a_load is not None and abs(b_load - a_load) >= LOAD_PER_CORE_DIFFERS:
        out.append(MachineDifference("load_per_core", round(b_load, 2), round(a_load, 2)))
    return out


def _load_per_core(hosts: list[Host]) -> float | None:
    """The busiest host's 1-minute load average per usable core of the host."""
    loads = [h.load_1m / h.cpus for h in hosts if h.load_1m is not None and h.cpus]
    return max(loads) if loads else None
