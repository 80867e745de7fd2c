"""summary.json ``collectives``: the Collectives table (analyses.collectives.summary)."""

from __future__ import annotations

import msgspec

from ..typed import Record


class CollectiveRow(Record):
    """One row of the table: the instances of one kind x group x node span x size bucket, matched across
    ranks and single-rank (kind "p2p": matched send/recv pairs and unmatched point-to-point ops)."""

    kind: str
    group: str                        # process group name; "" = not named by the trace (the world)
    node_span: str | None             # "intra-node" / "inter-node"; None = not known
    size_bucket: str                  # one of Collectives.size_buckets
    count: int                        # instances, matched and single-rank
    matched: int                      # of them matched with another rank
    total_ns: int                     # sum of the members' durations
    wait_ns: int                      # sum of the matched members' waits for the last arrival
    wait_share: float | None          # wait_ns / the matched members' time; None without matched time
    transfer_median_ns: int | None
    bytes_median: float | None
    algbw_median_gbps: float | None
    busbw_median_gbps: float | None   # nccl-tests bus bandwidth
    peak_share: float | None          # busbw / Collectives.peak_busbw_gbps; None without a peak


class Collectives(Record):
    """The Collectives table, costliest rows first, and what it was measured against
    (``Collectives()``: no table, a Summary made without one)."""

    rows: list[CollectiveRow] = msgspec.field(default_factory=list)
    peak_busbw_gbps: float | None = None  # config hardware.peak_busbw_gbps; None = not known
    gpus_per_node: int | None = None      # config hardware.gpus_per_node
    size_buckets: list[str] = msgspec.field(default_factory=list)  # bucket labels, smallest first, then "unknown"
    matched: int = 0                      # instances matched across ranks
    single_rank: int = 0                  # ops no other rank matched
