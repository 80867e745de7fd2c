"""Peak memory of the calling process, for the benchmarks (imported as a sibling module)."""

from __future__ import annotations

import resource


def peak_rss_mib() -> float:
    """Peak resident memory of this process in MiB. VmHWM, because on Linux ru_maxrss survives
    fork+exec and would report the (large) benchmark parent that started this child."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB (macOS: bytes)


def children_peak_rss_mib() -> float:
    """Peak resident memory of the largest child this process has waited for (forked readers, a
    pool's workers), in MiB; 0 without one. A forked child's peak counts the pages it shares with
    its parent at the fork (they are resident in it too); a child that exec'd would also carry its
    pre-exec peak, so use this for forked workers only."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB


def current_rss_mib() -> float:
    """Resident memory of this process now, in MiB (VmRSS): the baseline a later peak is measured
    from, so that a figure counts what one step added, not the interpreter and its imports."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024  # kB
    raise OSError("no VmRSS in /proc/self/status")
