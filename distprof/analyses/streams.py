"""Stream placement check: is communication on its own lane, where it can overlap computation?

Per rank and device, from the per-lane figures of the Distributed Summary (``lanes``): a lane
(GPU stream, or host thread) that carries both communication and computation serializes them:
``FAIL``, unless it is a communication stream whose computation is its library's small helper
work (``HELPER_COMPUTE_SHARE``). Separate lanes but an overlap ratio below ``checks.overlap_warn_ratio``: ``WARN``.
Otherwise ``PASS``. Host threads are placed beside the rank's device (gloo or MPI on host
threads next to kernels on a stream are two lanes of one row, not two rows of N/A). A
rank/device with no communication, or with no computation to overlap with, gets ``N/A``
(nothing to check; it is not counted as passing). A lane "carries" communication/computation
when its time in the window is above zero. The overlap ratio is the rank's (lanes only carry
totals); ranks drive one device in all supported sources, so that is the device's too.
"""

from __future__ import annotations

from msgspec.structs import replace

from .. import events as ev
from ..results import CollectiveMarkers, RankResult
from ..sections.findings import Check
from ..sections.skew import Pipeline, StragglerRow
from ..typed import Reason

CHECK = "stream_placement"
PASS, WARN, FAIL, NA = "PASS", "WARN", "FAIL", "N/A"
# A communication stream may run its library's own small kernels (DeepEP's layout and FP8 cast on its
# stream, FSDP's copy-in on the all-gather stream): the lane is the communication's own while the
# computation on it is at most this share of its communication and the rank computes mostly elsewhere
HELPER_COMPUTE_SHARE = 0.10

# A row's message and advice are Reasons (reports/findings.py words them): codes no_communication,
# no_computation, serialized, no_overlap, own_lane, own_lane_after_waits, pipeline_dependency; advice
# advice_serialized / advice_no_overlap, by whether the trace shows PyTorch (events.frameworks).


def _kinds_on_lanes(collectives: CollectiveMarkers, lanes: set[str]) -> list[str]:
    """Collective kinds recorded on the given lane labels (one pass in C via set/zip)."""
    pairs = set(zip(collectives.name, collectives.lane))
    return sorted({name for name, lane in pairs if lane in lanes})


def _comm_lane_with_helpers(lane, compute: list) -> bool:
    """A GPU stream that is communication's own, with small work of its library beside it: its computation
    is at most HELPER_COMPUTE_SHARE of its communication, and other lanes of the device carry more."""
    elsewhere = sum(other.computation_ns for other in compute if other is not lane)
    return (lane.lane_kind == ev.GPU_STREAM and lane.computation_ns <= HELPER_COMPUTE_SHARE * lane.communication_ns
            and elsewhere > lane.computation_ns)


def rank_stream_checks(result: RankResult, config: dict) -> list[Check]:
    """One stream placement row per device of a rank's result (host-only: one row)."""
    lanes = result.lanes
    figures = result.figures
    host = [lane for lane in lanes if lane.device is None or lane.device < 0]
    devices = sorted({lane.device for lane in lanes if lane not in host}) or [None if host else result.device]
    warn_ratio = float(config["checks"]["overlap_warn_ratio"])
    rows = []
    for device in devices:
        # host threads (gloo workers, MPI calls) serve the rank's device: placed beside its streams
        on_device = [lane for lane in lanes if lane.device == device and lane not in host] + host
        comm = [lane for lane in on_device if lane.communication_ns > 0]
        compute = [lane for lane in on_device if lane.computation_ns > 0]
        shared = [lane for lane in comm if lane.computation_ns > 0 and not _comm_lane_with_helpers(lane, compute)]
        shared_labels = [lane.label for lane in shared]
        pytorch = {"pytorch": ev.PYTORCH in result.frameworks}
        ratio = figures.overlap_ratio or 0.0
        kinds: list[str] = []
        advice: str | Reason = ""
        if not comm:
            status, message = NA, Reason("no_communication")
        elif not compute:
            status, message = NA, Reason("no_computation")
        elif shared:
            kinds = _kinds_on_lanes(result.markers.collectives, set(shared_labels))
            status, advice = FAIL, Reason("advice_serialized", pytorch)
            message = Reason("serialized", {"kinds": kinds, "lane_kind": shared[0].lane_kind, "lanes": shared_labels})
        elif ratio < warn_ratio:
            status, advice = WARN, Reason("advice_no_overlap", pytorch)
            message = Reason("no_overlap", {"lane_kind": comm[0].lane_kind, "ratio": ratio, "warn_ratio": warn_ratio})
        else:
            status, message = PASS, Reason("own_lane", {"lane_kind": comm[0].lane_kind, "ratio": ratio})
        rows.append(Check(
            check=CHECK, rank=result.rank, device=None if device is None or device < 0 else int(device),
            status=status, comm_lanes=[lane.label for lane in comm], compute_lanes=[lane.label for lane in compute],
            shared_lanes=shared_labels, shared_communication_ns=sum(lane.communication_ns for lane in shared),
            communication_ns=figures.communication_ns, exposed_communication_ns=figures.exposed_communication_ns,
            overlap_ratio=figures.overlap_ratio, kinds=kinds, message=message, advice=advice))
    return rows


def stream_checks(results: list[RankResult], config: dict) -> list[Check]:
    """Stream placement rows of every rank, in rank order."""
    return [row for result in results for row in rank_stream_checks(result, config)]


def without_straggler_waits(rows: list[Check], results: list[RankResult], straggler: StragglerRow | None,
                            config: dict) -> list[Check]:
    """The rows again, each rank's exposed communication net of what it waited for the straggler
    (``exposed_waits_ns_by_rank``, analyses.skew): a rank that only waits for a late peer has no
    placement problem of its own; its wait is the straggler's finding. A WARN that the waits alone
    explain becomes a PASS saying so; any row with such waits carries ``waits_for_straggler_ns``
    (diagnose prices the rest)."""
    owed = straggler.exposed_waits_ns_by_rank if straggler else {}
    if not owed:
        return rows
    lane_kinds = {(r.rank, lane.label): lane.lane_kind for r in results for lane in r.lanes}
    warn_ratio = float(config["checks"]["overlap_warn_ratio"])
    out = []
    for row in rows:  # one per rank and device
        waits = int(owed.get(row.rank, 0))
        if waits <= 0 or row.status not in (WARN, FAIL):
            out.append(row)
            continue
        communication = row.communication_ns - waits
        exposed = max((row.exposed_communication_ns or 0) - waits, 0)
        ratio = 1.0 - exposed / communication if communication > 0 else 1.0
        row = replace(row, waits_for_straggler_ns=waits)
        if row.status == WARN and ratio >= warn_ratio:
            row = replace(row, status=PASS, advice="", message=Reason("own_lane_after_waits", {
                "lane_kind": lane_kinds.get((row.rank, row.comm_lanes[0])),
                "ratio": row.overlap_ratio or 0.0, "ratio_without": ratio, "waits_ns": waits,
                "straggler": straggler.rank}))
        out.append(row)
    return out


P2P_KINDS = {ev.SEND, ev.RECV}


def pipeline_dependencies(rows: list[Check], pipelines: list[Pipeline]) -> list[Check]:
    """The rows again, where a rank of a send/recv pipeline (analyses.pipelines) FAILs only for
    its send/recv on the compute lane: a stage cannot compute before its input arrives, so a recv
    that waits for it is the pipeline's dependency (its bubble, reported per stage), not
    communication serialized with computation. Any other kind on the compute lane still FAILs."""
    stages = {rank: p.ranks for p in pipelines for rank in p.ranks}
    out = []
    for row in rows:  # one per rank and device
        if row.status != FAIL or row.rank not in stages or not set(row.kinds) <= P2P_KINDS:
            out.append(row)
            continue
        out.append(replace(row, status=PASS, advice="", pipeline_ranks=stages[row.rank],
                           message=Reason("pipeline_dependency", {"kinds": row.kinds, "chain": stages[row.rank]})))
    return out
