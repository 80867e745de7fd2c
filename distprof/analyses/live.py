"""The live view's numbers: one window's per-rank figures from its Summary (the same figures,
straggler rule and cost model as the final summary, since the window went through
pipeline.combine) and the alert rule over consecutive windows. Codes and numbers only; the
wording is in reports/live_text.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..results import StepBounds
from ..sections.machine import Behind, LiveAlert, LiveWindow, WindowRank, WindowSpread, WindowStraggler
from . import steptime

MAD_TO_SIGMA = 1.4826  # a normal sample's standard deviation from its median absolute deviation


def _durations(step_bounds: StepBounds, first: int, last: int) -> list[int]:
    steps = np.asarray(step_bounds.step, np.int64)
    keep = (steps >= first) & (steps <= last)
    ends = np.asarray(step_bounds.end_ns, np.int64)[keep]
    return (ends - np.asarray(step_bounds.start_ns, np.int64)[keep]).tolist()


def window_figures(summary, window: tuple[int, int], behind: dict[int, int | None]) -> LiveWindow:
    """summary.json's ``live.windows[]`` entry: per rank its step time (median of its steps),
    each step's duration, and communication / computation / overlap / exposed communication summed
    over the window; the job's step time; the spread across ranks; the priced straggler or None."""
    first, last = window
    straggler = summary.skew.straggler
    owed = straggler.exposed_waits_ns_by_rank if straggler else {}
    ranks = []
    for result in summary.ranks:  # one per rank present in the window
        figures = result.figures
        durations = _durations(result.markers.step_bounds, first, last)
        ranks.append(WindowRank(
            rank=result.rank, steps=figures.steps, step_ns=float(np.median(durations)) if durations else None,
            step_durations_ns=durations, communication_ns=figures.communication_ns,
            computation_ns=figures.computation_ns, overlap_ns=figures.overlap_ns,
            exposed_communication_ns=figures.exposed_communication_ns, overlap_ratio=figures.overlap_ratio,
            waits_for_straggler_ns=int(owed.get(result.rank, 0))))
    step_rows = [(step, d) for row in ranks for step, d in zip(range(first, first + len(row.step_durations_ns)),
                                                               row.step_durations_ns)]
    per_step = steptime.per_step(np.array([s for s, _ in step_rows], np.int64),
                                 np.array([d for _, d in step_rows], np.int64))[1] if step_rows else []
    timed = [row for row in ranks if row.step_ns is not None]
    exposed = [row.exposed_communication_ns for row in ranks]
    return LiveWindow(
        steps=[first, last], ranks=ranks, step_time_ns=steptime.run_step_time(per_step),
        spread=WindowSpread(step_ns=max(r.step_ns for r in timed) - min(r.step_ns for r in timed) if timed else None,
                            slowest_rank=max(timed, key=lambda r: r.step_ns).rank if timed else None,
                            exposed_communication_ns=max(exposed) - min(exposed) if exposed else None),
        straggler=None if not straggler else WindowStraggler(
            rank=straggler.rank, cost_ns=straggler.cost_ns, cost_share=straggler.cost_share,
            waits_caused_ns=straggler.waits_caused_ns, waits_caused_share=straggler.waits_caused_share,
            late_in=straggler.late_in, of=straggler.of),
        behind=[Behind(rank=rank, committed_step=step) for rank, step in sorted(behind.items())])


def _noise(values: list[float]) -> float:
    values = np.asarray(values, np.float64)
    return MAD_TO_SIGMA * float(np.median(np.abs(values - np.median(values)))) if values.size else 0.0


@dataclass
class AlertRule:
    """The alert state across windows. A straggler is alerted once it is named in
    ``straggler_windows`` consecutive windows at a cost of at least ``min_cost_share`` of the step
    (the what-if saving, as in the final summary), and its recovery once it is not so named in as many.
    A rank's step time (or exposed communication per step) jumps when it rises above the median of
    its previous ``baseline`` windows by ``jump_share`` of it and by ``jump_noise`` times the
    baseline's noise (exposed communication, net of the waits for a named straggler: and by
    ``floor_share`` of the step time), in
    ``straggler_windows`` consecutive windows; one alert per jump, re-armed when the figure is no
    longer above (the baseline caught up or it fell).

    A window with ranks left out (behind: their file, or their node's sender, did not reach it)
    says nothing about the straggler, nor about exposed communication: the late rank may be the one
    missing, and the others' waits for it would read as their own jump. Such a window neither
    names, clears nor recovers a straggler, and feeds no exposed-communication baseline."""

    straggler_windows: int = 2
    min_cost_share: float = 0.10
    baseline: int = 3
    min_baseline: int = 2
    jump_share: float = 0.25
    jump_noise: float = 3.0
    floor_share: float = 0.10
    named: list = field(default_factory=list)      # straggler rank (or None) per window
    alerted: int | None = None                     # the straggler last alerted
    history: dict = field(default_factory=dict)    # (code, rank) -> [(value, per-step values)]
    high: set = field(default_factory=set)         # (code, rank) alerted and still above
    above: dict = field(default_factory=dict)      # (code, rank) -> consecutive windows above

    # config ``live.alerts`` key -> field: the thresholds are the user's, the state is not
    CONFIG_FIELDS = {"windows_in_a_row": "straggler_windows", "straggler_min_cost_share": "min_cost_share",
                     "baseline_windows": "baseline", "min_baseline_windows": "min_baseline",
                     "jump_share": "jump_share", "jump_noise": "jump_noise", "exposed_floor_share": "floor_share"}

    @classmethod
    def from_config(cls, alerts: dict) -> AlertRule:
        """The rule with the thresholds of config ``live.alerts`` (keys it lacks keep the defaults)."""
        return cls(**{name: alerts[key] for key, name in cls.CONFIG_FIELDS.items() if key in alerts})

    def update(self, window: LiveWindow) -> list[LiveAlert]:
        """The alerts of this window."""
        steps = window.steps
        whole = not window.behind
        straggler = window.straggler
        # the replay's price; where it gives none (ranks outnumbering their cores) the waits it causes
        share = None if straggler is None else straggler.cost_share
        share = straggler.waits_caused_share if share is None and straggler is not None else share
        out = []
        if whole:
            named = straggler.rank if straggler is not None and (share or 0) >= self.min_cost_share else None
            self.named.append(named)
            out += self._straggler(steps, window)
        step_time = window.step_time_ns or 0.0
        for row in window.ranks:  # one per rank
            if row.step_ns is not None:
                out += self._jump("step_time_jump", row.rank, steps, row.step_ns, row.step_durations_ns, 0.0)
            if not whole:
                continue
            # waiting for a named straggler is the straggler's alert, not this rank's jump
            own = row.exposed_communication_ns - row.waits_for_straggler_ns
            exposed = max(own, 0) / max(row.steps, 1)
            out += self._jump("exposed_communication_jump", row.rank, steps, exposed, [exposed],
                              self.floor_share * step_time)
        return out

    def _straggler(self, steps: list[int], window: LiveWindow) -> list[LiveAlert]:
        recent = self.named[-self.straggler_windows:]
        if len(recent) < self.straggler_windows:
            return []
        out = []
        if self.alerted is not None and self.alerted not in recent:
            out.append(LiveAlert(steps=steps, code="straggler_recovered", rank=self.alerted))
            self.alerted = None
        if recent[0] is not None and all(rank == recent[0] for rank in recent) and recent[0] != self.alerted:
            if self.alerted is not None:
                out.append(LiveAlert(steps=steps, code="straggler_recovered", rank=self.alerted))
            self.alerted = recent[0]
            straggler = window.straggler
            out.append(LiveAlert(steps=steps, code="straggler", rank=recent[0], cost_ns=straggler.cost_ns,
                                 cost_share=straggler.cost_share, windows=self.straggler_windows))
        return out

    def _jump(self, code: str, rank: int, steps: list[int], value: float, samples: list,
              floor: float) -> list[LiveAlert]:
        key = (code, rank)
        past = self.history.setdefault(key, [])
        out, above = [], False
        if len(past) >= self.min_baseline:
            recent = past[-self.baseline:]
            base = float(np.median([v for v, _ in recent]))
            pooled = [s for _, values in recent for s in values] if len(samples) > 1 else [v for v, _ in recent]
            noise = _noise(pooled)
            rise = value - base
            above = rise > self.jump_share * base and rise > self.jump_noise * noise and rise > floor
            self.above[key] = self.above.get(key, 0) + 1 if above else 0
            if self.above[key] >= self.straggler_windows and key not in self.high:
                out.append(LiveAlert(steps=steps, code=code, rank=rank, value_ns=value, baseline_ns=base,
                                     noise_ns=noise))
                self.high.add(key)
            elif not above:
                self.high.discard(key)
        if not above:  # the baseline is what came before a jump, not the jump
            past.append((value, list(samples)))
        return out
