"""Clock offsets between ranks: MPI ping-pong at collector start and stop.

Each peer's clock minus rank 0's is taken from the round trip with the smallest RTT (the
least disturbed sample); its half RTT bounds the error. Start and stop together give the
drift over the run. Refinement by collective ends happens at rank 0 (analyses/skew).
"""

from __future__ import annotations

import numpy as np

from .collector import clock_ns

_TAG = 7307


def pingpong(comm, samples: int = 16, peers: list[int] | None = None) -> tuple[int, int]:
    """(this rank's clock − rank 0's clock, RTT of the best sample) in ns; (0, 0) on rank 0.
    ``peers``: only these ranks take part (the live stop: a rank that failed does not), and each
    gets its sample by a message, not a collective; None: every rank, at the start."""
    rank, size = comm.Get_rank(), comm.Get_size()
    stamp = np.zeros(1, dtype=np.int64)
    best_by_rank = None
    if rank == 0:
        best_by_rank = [(0, 0)] * size
        for peer in (range(1, size) if peers is None else peers):
            best = None
            for _ in range(samples):
                sent = clock_ns()
                comm.Send(stamp, dest=peer, tag=_TAG)
                comm.Recv(stamp, source=peer, tag=_TAG)
                received = clock_ns()
                rtt = received - sent
                if best is None or rtt < best[1]:
                    best = (int(stamp[0]) - (sent + received) // 2, rtt)
            best_by_rank[peer] = best
            if peers is not None:
                comm.send(best, dest=peer, tag=_TAG + 1)
    else:
        for _ in range(samples):
            comm.Recv(stamp, source=0, tag=_TAG)
            stamp[0] = clock_ns()
            comm.Send(stamp, dest=0, tag=_TAG)
        if peers is not None:
            return comm.recv(source=0, tag=_TAG + 1)
    return comm.scatter(best_by_rank, root=0) if peers is None else (0, 0)


def offset_to_root(samples: list[tuple[str, int, int]]) -> tuple[int, int]:
    """From ('start'|'stop', offset, rtt) samples: the ns to add to this rank's timestamps to put
    them on rank 0's clock, and the uncertainty (half the worst best-RTT plus half the drift)."""
    if not samples:
        return 0, 0
    offsets = np.array([s[1] for s in samples], dtype=np.int64)
    rtts = np.array([s[2] for s in samples], dtype=np.int64)
    drift = int(offsets.max() - offsets.min())
    return -int(round(offsets.mean())), int(rtts.max() // 2 + drift // 2)
