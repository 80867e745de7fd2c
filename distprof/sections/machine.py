"""summary.json's ``machine`` rows (analyses/machine.py ``facts``) and ``live``, the live view's
record (live.py ``View.record``, its windows from analyses/live.py ``window_figures``): what the
run ran on and what the live view saw while it ran."""

from __future__ import annotations

from ..typed import Record, absent


class Host(Record):
    """One host of the run (a row of ``machine``), as its ranks' inputs record it."""

    host: str | None
    ranks: int                      # ranks on it
    cpus: int | None                # usable cores (the largest a rank records)
    gpus: list[str]                 # GPU models, sorted
    load_1m: float | None           # the highest 1-minute load average a rank saw
    runqueue_share: float = absent()  # median over its ranks: share of their steps their training thread
    #                                   waited for a core (native rank files only)
    steal_share: float = absent()   # share of the host's CPU time the hypervisor stole over the ranks' steps


class CrowdedHost(Record):
    """A host whose ranks outnumber its usable cores (analyses/cost.oversubscribed_hosts): there the
    replay's premise fails, and no fix is priced."""

    host: str
    ranks: int
    cpus: int                  # the most any of its ranks recorded


class StragglerHost(Record):
    """skew.straggler.host: what the straggler's host counted in its late steps (analyses/hostload.py)."""

    steps: int                      # its late steps with counters
    runqueue_ns: int                # per step: its training thread ready to run, waiting for a core
    others_runqueue_ns: int         # the other ranks' median of the same, in the same steps
    involuntary: int                # its involuntary context switches over those steps
    load_1m: float | None           # the highest 1-minute load of its host sampled in them
    cpus: int | None                # its host's usable cores
    busy: bool                      # other processes took its cores: the cause of its lateness


class WindowRank(Record):
    """One rank's figures over a live window (sums over the window)."""

    rank: int
    steps: int
    step_ns: float | None           # median of its steps in the window
    step_durations_ns: list[int]
    communication_ns: int
    computation_ns: int
    overlap_ns: int
    exposed_communication_ns: int
    overlap_ratio: float | None
    waits_for_straggler_ns: int     # its exposed waits owed to the named straggler
    sent_bytes: int | None = absent()  # the record's rows: bytes its node's sender sent (None: read locally)


class WindowSpread(Record):
    """The spread across ranks over a live window (None without timed ranks)."""

    step_ns: float | None
    slowest_rank: int | None
    exposed_communication_ns: int | None


class WindowStraggler(Record):
    """The window's priced straggler (the skew straggler's keys; any may be None)."""

    rank: int | None
    cost_ns: int | None
    cost_share: float | None
    waits_caused_ns: int | None
    waits_caused_share: float | None
    late_in: int | None
    of: int | None


class Behind(Record):
    """A rank left out of a window: the last step it was seen to commit."""

    rank: int
    committed_step: int | None


class LiveWindow(Record):
    """One live window: steps ``steps[0]``..``steps[1]`` as one Distributed Summary."""

    steps: list[int]                # [first, last]
    ranks: list[WindowRank]
    step_time_ns: float | None      # the job's step time over the window
    spread: WindowSpread
    straggler: WindowStraggler | None
    behind: list[Behind]


class LiveAlert(Record):
    """One live alert. ``code`` "straggler_recovered" carries steps, code and rank only;
    "straggler" adds cost_ns, cost_share and windows; "step_time_jump" and
    "exposed_communication_jump" add value_ns, baseline_ns and noise_ns."""

    steps: list[int]                # the window [first, last]
    code: str
    rank: int
    cost_ns: int | None = absent()
    cost_share: float | None = absent()
    windows: int = absent()         # consecutive windows it was named in
    value_ns: float = absent()      # the window's figure (per step)
    baseline_ns: float = absent()   # median of the previous windows' figure
    noise_ns: float = absent()


class LiveNode(Record):
    """A node's sender as the view saw it."""

    ranks: list[int]
    state: str                      # "open", "done" or "lost"
    bytes: int                      # received from it


class Live(Record):
    """summary.json's ``live`` (only where the live view was on)."""

    every_steps: int
    windows: list[LiveWindow]
    alerts: list[LiveAlert]
    skipped: list[list[int]]        # windows [first, last] the view fell too far behind to report
    nodes: dict[str, LiveNode] = absent()  # with senders on other nodes: per node name
    ended: str = absent()           # the view ended before the stop (killed, failed): how; the nodes' states
    #                                 are then as its last window saw them
