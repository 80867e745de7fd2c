"""The job's step time, defined once for merge, whatif and diff.

Per step, the median over ranks of that rank's ProfileStep duration; the run's step time is the
median over steps of that series. The median rank (not the slowest) so that one odd rank among a
thousand does not set the job's figure: in a synchronous job the ranks' durations agree within
noise, and a late rank is the straggler analysis' business, not the step time's. Figures that are
not this step time (the slowest rank's step, one rank's own steps) say so in their labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_STEPS = 2000  # steps kept in a step-time series (summary.json's tables, a diff's input)


def per_step(steps: np.ndarray, durations_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(step indices ascending, median over ranks of each step's duration) from one row per
    (rank, step). A step seen by an even number of ranks takes the mean of the middle two
    (as ``np.median``). One sort, no loop per step. numpy is imported here, not with the module:
    the reports read only the definitions above, and ``distprof report`` needs no numpy."""
    import numpy as np
    steps = np.asarray(steps, np.int64)
    durations = np.asarray(durations_ns)
    if steps.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    order = np.lexsort((durations, steps))
    steps, durations = steps[order], durations[order]
    first = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
    count = np.diff(np.r_[first, steps.size])
    low, high = first + (count - 1) // 2, first + count // 2
    middle = (durations[low].astype(np.float64) + durations[high].astype(np.float64)) / 2
    return steps[first], middle


def run_step_time(per_step_ns: np.ndarray) -> float | None:
    """The run's step time: the median over steps of the per-step series; None without steps."""
    import numpy as np
    values = np.asarray(per_step_ns, np.float64)
    return float(np.median(values)) if values.size else None
