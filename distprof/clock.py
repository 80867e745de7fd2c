"""Clock offsets between ranks: MPI ping-pong at collector start and stop.

Each peer's clock minus rank 0's is taken from the round trip with the smallest RTT (the
least disturbed sample); its half RTT bounds the error. Start and stop together give the
drift over the run. Refinement by collective ends happens at rank 0 (analyses/skew).
"""

from __future__ import annotations

import numpy as np

from .collector import clock_ns

_TAG = 7307


def pingpong(comm, samples: int = 16) -> tuple[int, int]:
    """(this rank's clock − rank 0's clock, RTT of the best sample) in ns; (0, 0) on rank 0."""
    rank, size = comm.Get_rank(), comm.Get_size()
    stamp = np.zeros(1, dtype=np.int64)
    best_by_rank = None
    if rank == 0:
        best_by_rank = [(0, 0)]
        for peer in range(1, size):
            best = None
            for _ in range(samples):
                sent = clock_ns()
                comm.Send(stamp, dest=peer, tag=_TAG)
                comm.Recv(stamp, source=peer, tag=_TAG)
                received = clock_ns()
                rtt = received - sent
                if best is None or rtt < best[1]:
                    best = (int(stamp[0]) - (sent + received) // 2, rtt)
            best_by_rank.append(best)
    else:
        for _ in range(samples):
            comm.Recv(stamp, source=0, tag=_TAG)
            stamp[0] = clock_ns()
            comm.Send(stamp, dest=0, tag=_TAG)
    return comm.scatter(best_by_rank, root=0)


def offset_to_root(samples: list[tuple[str, int, int]]) -> tuple[int, int]:
    """From ('start'|'stop', offset, rtt) samples: the ns to add to this rank's timestamps to put
    them on rank 0's clock, and the uncertainty (half the worst best-RTT plus half the drift)."""
    if not samples:
        return 0, 0
    offsets = np.array([s[1] for s in samples], dtype=np.int64)
    rtts = np.array([s[2] for s in samples], dtype=np.int64)
    drift = int(offsets.max() - offsets.min())
    return -int(round(offsets.mean())), int(rtts.max() // 2 + drift // 2)


# -- refinement by collective ends (pure; runs at rank 0 on the matched collectives) -------------

FEW_SAMPLES = 10  # below this many matched collectives the spread is half the range, not the MAD


def refine_offsets(ends: np.ndarray, present: np.ndarray, offsets, uncertainties,
                   reference: int = 0, min_samples: int = 3) -> list[dict]:
    """Refine per-rank clock offsets by the ends of matched collectives.

    A collective ends nearly together on every rank (all wait for the last arrival), so after a
    correct alignment the end of collective j on rank r equals its end on the reference rank.
    ``ends`` is (ranks, collectives) on each rank's own clock, ``present`` marks the entries that
    exist; ``offsets``/``uncertainties`` are the sources' estimates (ns to add; an uncertainty of
    0 means the source gives no bound). Per rank: correction = median over shared collectives of
    (reference end − rank end) after the initial offsets; spread = median absolute deviation
    (half the range below ``FEW_SAMPLES`` samples). A known initial bound (ping-pong: half the
    best RTT plus half the drift, a hard bound) is intersected with correction ± spread; if the
    two disagree the hard bound wins. Returns one dict per row: offset_ns, uncertainty_ns,
    method, samples, correction_ns, spread_ns.
    """
    ends = np.asarray(ends, dtype=np.int64)
    present = np.asarray(present, dtype=bool)
    offsets = np.asarray(offsets, dtype=np.int64)
    uncertainties = np.asarray(uncertainties, dtype=np.int64)
    out = []
    for row in range(ends.shape[0]):
        initial = {"offset_ns": int(offsets[row]), "uncertainty_ns": int(uncertainties[row]),
                   "samples": 0, "correction_ns": None, "spread_ns": None}
        if row == reference:
            out.append({**initial, "method": "reference"})
            continue
        shared = present[row] & present[reference]
        samples = int(shared.sum())
        initial["samples"] = samples
        if samples < max(min_samples, 1):
            out.append({**initial, "method": "source offset (too few matched collectives)"})
            continue
        diff = ((ends[reference, shared] + offsets[reference]) - (ends[row, shared] + offsets[row]))
        correction = float(np.median(diff))
        if samples >= FEW_SAMPLES:
            spread = float(np.median(np.abs(diff - correction)))
        else:
            spread = float(diff.max() - diff.min()) / 2
        bound = int(uncertainties[row])
        if bound <= 0:  # the source gives no bound: trust the collectives
            low, high, method = correction - spread, correction + spread, "collective ends"
        else:
            low, high = max(-bound, correction - spread), min(bound, correction + spread)
            method = "source offset, narrowed by collective ends"
            if low > high:  # disagree (correction_ns ± spread_ns says by how much): the hard bound wins
                low, high = -bound, bound
                method = "source offset (collective ends disagree)"
        middle = (low + high) / 2
        out.append({"offset_ns": int(offsets[row]) + int(round(middle)),
                    "uncertainty_ns": int(round((high - low) / 2)), "method": method,
                    "samples": samples, "correction_ns": int(round(correction)),
                    "spread_ns": int(round(spread))})
    return out
