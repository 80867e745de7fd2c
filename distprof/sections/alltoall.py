"""summary.json ``alltoall``: per all-to-all process group, what each rank sends and receives
(analyses/alltoall.py). Uneven splits are what an expert-parallel all-to-all is: the router sends each
expert's rank its tokens; a rank whose experts get far more than the others' is an expert load imbalance."""

from __future__ import annotations

from ..typed import Record, absent


class AllToAllRank(Record):
    """One rank of an all-to-all group: its bytes over the group's all-to-alls (its own share included)."""

    rank: int
    ops: int                          # the group's all-to-alls of this rank counted (every member has them)
    sent_bytes: int                   # its input tensors, summed
    recv_bytes: int                   # its output tensors, summed
    load_bytes: int                   # on its experts' side of each all-to-all (received, or sent back)
    load_ratio: float | None          # load_bytes / the median of the other members'; None: they have none


class AllToAllGroup(Record):
    """The bytes of one process group's all-to-alls by rank, and how uneven its load is."""

    group: str                        # process group name; "" = not named by the trace
    ranks: list[int]                  # the members found in the inputs
    ops: int                          # all-to-alls per rank counted (matched by step and order in it)
    steps: int                        # steps they lie in (1 without steps)
    recv_side_ops: int                # of them, those whose received bytes differ more across ranks
    rows: list[AllToAllRank]
    load_ratio_max: float | None
    hot_ranks: list[int]              # load_ratio >= limit_ratio, largest first
    limit_ratio: float                # config diagnosis.expert_imbalance_ratio
    onset_step: int = absent()        # the load turned uneven from this step on (rows' load from it); absent: all
    steps_since: int = absent()       # steps from onset_step on
