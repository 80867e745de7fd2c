"""All wording of findings and of every reason an analysis gives: a finding's message and advice,
its cost and the straggler verdict, and the text of each typed.Reason (why a fix is unpriced, ...).
Analyses give codes and numbers (analyses/diagnose.py finds, analyses/cost.py prices each finding
by the what-if replay); this module words them once, for summary.json and the text and HTML
reports: ``pipeline.combine`` returns an unworded Summary and :func:`worded` words it where a report
or summary.json is written (the CLI, the profiler's finish). It leaves text alone, so a summary read
back from a file goes through it unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from .. import events as ev
from ..ranges import rank_ranges
from ..results import Summary
from ..sections.findings import NO_REPLAY, NO_SCENARIO
from ..typed import ABSENT, Reason
from ..units import duration
from .format import SCENARIO_TITLES

if TYPE_CHECKING:
    from ..sections.findings import Finding
    from ..sections.skew import Pipeline, StragglerRow

HEADING = "Findings (ordered by what the fix saves per step, predicted by the what-if replay):"


def saving(finding: Finding, t: Callable[[int | None], str]) -> str:
    """'saves X per step (Y% of the step), what-if: scenario' or why it is not priced."""
    value = finding.predicted_saving_ns
    if value is None:
        return f"saving not predicted: {text(finding.why_not or NO_SCENARIO)}"
    share = finding.saving_share
    scenario = SCENARIO_TITLES.get(finding.priced_by or "", finding.priced_by or "")
    after = " after the straggler's fix" if finding.priced_after_straggler else ""
    return (f"fix saves {t(value)} per step" + (f" ({100 * share:.1f}% of the step time)" if share is not None else "")
            + f"; what-if: {scenario}{after}" + assumption(finding.durations_vary_share))


def assumption(vary: float | None) -> str:
    """What the replay assumes, said where the trace puts it in doubt."""
    if vary is None:
        return ""
    return (f" (the replay keeps every duration as traced; here the ranks' phase time varies ±{100 * vary:.0f}% "
            "from step to step, so the saving may be off by as much)")


def _pattern(pattern: str | None, onset_step: int | None, steps_late: int | None, steps: int | None) -> str:
    """How the straggler's lateness repeats: persistent, since a step (turned slow and stayed
    slow), or one profiled step. Plain values: the verdict reads a typed straggler row, the
    finding's words its evidence dict (before the summary is typed)."""
    if pattern == "single step":
        return "one profiled step: cannot tell persistent from one-off"
    if pattern == "since step":
        return (f"late since step {onset_step} (turned slow mid-run and stayed slow): "
                f"in {steps_late}/{steps} steps")
    return f"persistent: late in {steps_late}/{steps} steps"


def straggler_line(straggler: StragglerRow | None, t: Callable[[int | None], str],
                   unconfirmed: StragglerRow | None = None, why: str | None = None) -> str:
    """The one-line straggler verdict of the Diagnosis: what removing its lateness saves (the
    replay), then the waits it causes (not a saving), how often, where. ``unconfirmed``: the
    rank the waits pointed at, whose fix the replay prices under the floor; ``why``: the skew
    note that says why none was named (skew.no_straggler_note), up to its first "; "."""
    if not straggler and unconfirmed:
        at_most = unconfirmed.saving_upper_bound is True  # absent: the replay's saving as it is
        return (f"Straggler: none (rank {unconfirmed.rank} is last in {unconfirmed.late_in} of its "
                f"{unconfirmed.of} collectives and the others wait {t(unconfirmed.waits_caused_ns)} per step "
                f"for it, but removing its lateness saves {'at most ' if at_most else ''}"
                f"{t(unconfirmed.saving_ns)} per step: {100 * unconfirmed.share:.1f}% of the step, under the "
                f"{100 * unconfirmed.floor:.0f}% a straggler costs"
                + ("; an upper bound: its ranks share cores, and the replay cannot see the core a waiting rank "
                   "frees)" if at_most else ")"))
    if not straggler and why:
        return f"Straggler: none ({why.split('; ')[0]})"
    if not straggler:
        return ("Straggler: none (no rank makes the others wait, beyond the clock uncertainty and the threshold, "
                "in enough steps)")
    share = straggler.cost_share
    if straggler.cost_ns is not None and straggler.expert_load is not ABSENT:
        saving_text = (f"its lateness is its expert load ({straggler.expert_load:.1f}x the tokens of the other "
                       f"ranks' median): balancing the ranks saves {t(straggler.cost_ns)} per step") + (
            f" ({100 * share:.1f}% of the step time)" if share is not None else "")
    elif straggler.cost_ns is not None:
        saving_text = f"removing its lateness saves {t(straggler.cost_ns)} per step" + (
            f" ({100 * share:.1f}% of the step time)" if share is not None else "") + assumption(
            None if straggler.durations_vary_share is ABSENT else straggler.durations_vary_share)
    else:
        saving_text = f"saving not predicted ({text(straggler.cost_why_not or NO_REPLAY)})"
    pattern = _pattern(straggler.pattern, straggler.onset_step, straggler.steps_late,
                       straggler.steps).removeprefix("persistent: ")
    where = straggler.phase or "outside any annotated phase"
    return (f"Straggler: rank {straggler.rank}, {saving_text}; the others wait "
            f"{t(straggler.waits_caused_ns)} per step for it; last in {straggler.late_in} of {straggler.of} "
            f"collectives, {pattern} (late: arriving over {t(straggler.threshold_ns)} after the median rank); "
            f"side {_side(straggler.side)}; {where}{_host_busy(straggler, t)}")


def _host_busy(straggler: StragglerRow, t: Callable[[int | None], str]) -> str:
    """The straggler's host, where its file counted it: busy (other processes took its cores), or nothing
    to add; where the inputs carry no such counters (Kineto, nsys), that they cannot tell."""
    host = straggler.host
    if host is ABSENT:
        return "; its host's load: not in these inputs"
    if not host.busy:
        return ""
    load = f", load {host.load_1m:.1f} on {host.cpus} cores" if host.load_1m and host.cpus and \
        host.load_1m >= host.cpus else ""  # a 1-minute average lags a short run: only when it says as much
    return (f"; rank {straggler.rank}'s host was busy: its training thread waited {t(host.runqueue_ns)} per late "
            f"step for a core (the others {t(host.others_runqueue_ns)}){load}, {host.involuntary:,} involuntary "
            f"context switches in {host.steps} steps: other processes took its cores")


def _busy_warning(*, hosts) -> str:
    hosts = "; ".join(f"{h['host'] or 'its host'}: its ranks' training threads waited "
                      f"{100 * h['runqueue_share']:.0f}% of their steps for a core"
                      + (f", load {h['load_1m']:.1f} on {h['cpus']} cores" if h.get("load_1m") and h.get("cpus")
                         and h["load_1m"] >= h["cpus"] else "") for h in hosts[:4])
    return (f"A host was busy ({hosts}): other processes (or more threads than cores) took the ranks' cores, so "
            "its timings and any straggler there are partly theirs")


SIDES = {"host": "its collective calls are issued late",
         "device": "issued on time, its GPU work starts late",
         None: "not known: GPU work without its launches in the trace"}


def _side(side: str | None) -> str:
    """Where the straggler is late, with what that means ("side host" read as a host's name)."""
    return f"{side or 'unknown'} ({SIDES.get(side, SIDES[None])})"


def pipeline_lines(pipelines: list[Pipeline], t: Callable[[int | None], str]) -> list[str]:
    """One line per send/recv pipeline: its stages and each stage's bubble per step (what it
    waits in send/recv for the stage before it and the one after it)."""
    lines = []
    for pipeline in pipelines:
        stages = pipeline.stages
        shown = "; ".join(
            f"rank {s.rank} {t(s.bubble_ns)}" + (f" ({100 * s.share:.0f}%)" if s.share is not None else "")
            + f" [before {t(s.upstream_ns)}, after {t(s.downstream_ns)}]" for s in stages[:8])
        more, cut = " ..." if len(pipeline.ranks) > 16 else "", " ..." if len(stages) > 8 else ""
        lines.append(f"Pipeline: stages {' -> '.join(map(str, pipeline.ranks[:16]))}{more}; bubble per step "
                     f"(waiting in send/recv for the stage before / after): {shown}{cut}")
    return lines


# -- the words of each finding: message (with duration tokens, phrased in the reader's unit) and advice

def _pct(part: float, whole: float | None) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _placement_message(finding: Finding) -> str:
    e = finding.evidence
    worst, exposed = e.worst_rank, e.exposed_communication_ns_by_rank[e.worst_rank]
    share = f"{len(finding.ranks)}/{e.ranks_total} ranks"
    lanes = ", ".join(e.lanes)
    if finding.finding == "serialized_communication":
        word = "stream" if e.lane_kind == ev.GPU_STREAM else "thread"  # by the lane's kind, not its label
        return (f"serialized communication on {share}: {', '.join(e.kinds) or 'communication'} on the compute "
                f"{word} ({lanes} on rank {worst}); exposed communication {duration(exposed)} "
                f"({_pct(exposed, e.window_ns)} of the window) on rank {worst}")
    return (f"communication barely overlaps computation on {share}: overlap {100 * (e.overlap_ratio or 0):.1f}% "
            f"on rank {worst} ({lanes}), exposed communication {duration(exposed)} "
            f"({_pct(exposed, e.window_ns)} of the window)")


_P2P_KINDS = (ev.SEND, ev.RECV, ev.SENDRECV)
_REDUCING = (ev.ALLREDUCE, ev.REDUCE_SCATTER, ev.REDUCE)
_GATHERING = (ev.ALLGATHER, ev.ALLTOALL, ev.BROADCAST, ev.GATHER, ev.SCATTER)


def _placement_advice(finding: Finding) -> str:
    """What fits the communication that is serialized (or not overlapped) on these lanes: by its
    kind (p2p needs no bucketing, reductions are bucketed, gathers prefetched, barriers dropped),
    naming its groups, and a framework only where the trace shows its ops."""
    e = finding.evidence
    serialized = finding.finding == "serialized_communication"
    kinds, word = e.lane_collectives, "stream" if e.on_gpu else "thread"
    by_kind = e.groups_by_kind or {kind: e.lane_groups for kind in kinds}
    in_forward = set(e.in_forward)

    def where(chosen: list[str]) -> str:  # the groups of these kinds only
        groups = sorted({g for kind in chosen for g in by_kind.get(kind, ())})
        return f" (group {', '.join(groups[:4])})" if groups else ""

    parts = []
    p2p = [k for k in kinds if k in _P2P_KINDS]
    if p2p:
        parts.append(f"the point-to-point {'/'.join(p2p)}{where(p2p)} (pipeline or sequence-parallel exchange) "
                     f"{'run on the compute ' + word if serialized else 'wait on the computation'}: post them "
                     f"asynchronously on their own {word} and compute the next micro-batch meanwhile (they need no "
                     "bucketing)")
    parts += _reduction_advice([k for k in kinds if k in _REDUCING], in_forward, where, word, e.pytorch)
    gathering = [k for k in kinds if k in _GATHERING]
    if gathering:
        parts.append(f"issue the {'/'.join(gathering)}{where(gathering)} for the next layer or batch ahead of its "
                     f"use on a separate {word} (prefetch), so it runs under the current computation")
    if ev.BARRIER in kinds:
        parts.append("drop the barrier from the step (or move it out of the loop): it only waits")
    if not parts:
        parts.append(f"move the communication to its own {word} and issue it without blocking, so it runs "
                     "under the computation")
    return "; ".join(parts)


def _reduction_advice(reducing: list[str], in_forward: set, where, word: str, pytorch: bool) -> list[str]:
    """Reductions inside forward (tensor parallel: the next layer needs the result at once) are
    overlapped by chunking the layer's GEMM against them; the others (gradients) by buckets."""
    out = []
    forward = [k for k in reducing if k in in_forward]
    later = [k for k in reducing if k not in in_forward]
    if forward:
        out.append(f"the {'/'.join(forward)}{where(forward)} inside forward (tensor parallel) is needed by the next "
                   "layer at once: overlap it by splitting that layer's matmul into chunks that run while the "
                   "previous chunk's reduction is in flight (async tensor parallelism), not by bucketing")
    if later:
        framework = "; PyTorch DDP/FSDP do this by default" if pytorch else ""
        out.append(f"issue each {'/'.join(later)}{where(later)} on a separate {word} as soon as its input is ready "
                   f"(in buckets, while the computation that follows still runs){framework}")
    return out


_SIDE_TEXT = {"host": "host side: its collective calls are issued late too",
              "device": "device side: launched on time, but its GPU starts the collective late"}
_SIDE_ADVICE = {
    "host": ("its host is late to the collective: check CPU binding and other processes on its cores, data "
             "loading on this rank, and Python work outside the annotated phases (compare its host timeline "
             "with a peer's)"),
    "device": ("its GPU is busy longer before the collective: compare its kernels with a peer's (counts, shapes), "
               "its clocks and thermals (nvidia-smi -q -d CLOCK,PERFORMANCE), and whether another process shares "
               "the GPU"),
    None: ("find what delays it: on the host (CPU binding, data loading, work outside the phases) or on its GPU "
           "(longer kernels, clocks, another process)"),
}


def _straggler_message(finding: Finding) -> str:
    e, rank = finding.evidence, finding.ranks[0]
    pattern = _pattern(e.pattern, e.onset_step, e.steps_late, e.steps)
    message = (f"straggler: rank {rank} is last, and waited for alone, in {e.late_in} of its {e.of} "
               f"collectives ({pattern}); the ranks it shares them with wait {duration(e.waits_caused_ns)} "
               "per step for it")
    if e.side in _SIDE_TEXT:
        message += f"; {_SIDE_TEXT[e.side]}"
    if e.phase:
        return message + (f"; it spends {duration(e.phase_extra_ns)} per step more than the median rank in "
                          f"{e.phase}")
    return message + "; the delay is outside any annotated phase"


def _straggler_advice(finding: Finding) -> str:
    e, rank = finding.evidence, finding.ranks[0]
    advice = _SIDE_ADVICE[e.side if e.side in _SIDE_ADVICE else None]
    advice = (f"look at {e.phase} on rank {rank} first; " + advice if e.phase
              else advice + "; mark more of the step as phases to see where")
    if e.pattern == "single step":
        advice += "; one step only: profile more steps to see whether it repeats"
    return advice


def _slow_collective_message(finding: Finding) -> str:
    e = finding.evidence
    worst = e.worst
    where = f" in group {worst.group!r}" if worst.group else ""
    span = f", {worst.node_span}" if worst.node_span else ""
    return (f"slow collectives: {e.rows_below} kind/size row(s) below {100 * e.limit_share:.0f}% of the "
            f"{e.peak_busbw_gbps:g} GB/s peak; worst {worst.kind}{where} ({worst.size_bucket}{span}): "
            f"median busbw {worst.busbw_median_gbps:.1f} GB/s ({100 * worst.peak_share:.0f}% of peak) over "
            f"{worst.count} instances, median transfer {duration(worst.transfer_median_ns or 0)}")


def _slow_collective_advice(finding: Finding) -> str:
    worst = finding.evidence.worst
    if worst.size_bucket in ("<=64 KiB", "64 KiB-1 MiB"):
        return ("messages this small are latency-bound, not bandwidth-bound: fuse them into fewer, larger ones "
                "(bigger buckets)")
    return ("measure the same size and group with a bandwidth benchmark (nccl-tests for NCCL) on these ranks; "
            + ("check the network path between the nodes (transport, interface, adapters)"
               if worst.node_span == "inter-node" else "check the links between the GPUs of the node "
               "(topology, PCIe vs NVLink) and that peer-to-peer is enabled"))


def _host_bound_message(finding: Finding) -> str:
    e = finding.evidence
    bound = e.host_bound_ns_by_rank[e.worst_rank]
    return (f"host-bound GPU on {len(finding.ranks)}/{e.ranks_total} ranks: the GPU waits for kernel launches "
            f"{duration(bound)} ({100 * bound / e.window_ns:.0f}% of the window, {e.host_bound_gaps} gaps) "
            f"on rank {e.worst_rank}")


def _host_bound_advice(finding: Finding) -> str:
    """PyTorch's knobs only where the trace shows PyTorch, else what any CUDA program can do."""
    if finding.evidence.pytorch:
        return ("the CPU does not launch work fast enough: remove host syncs in the loop (.item(), .cpu(), "
                "prints), fuse small kernels or use CUDA graphs / torch.compile, raise the batch size")
    return ("the CPU does not launch work fast enough: take host-device synchronizations out of the loop "
            "(blocking copies, device/stream synchronize calls), launch fewer, larger kernels (fuse small ones), "
            "give each launch more work")


def _dataloader_message(finding: Finding) -> str:
    e = finding.evidence
    return (f"dataloader-bound on {len(finding.ranks)}/{e.ranks_total} ranks: {e.phase} takes "
            f"{100 * e.share:.0f}% of ProfileStep on rank {e.worst_rank} ({duration(e.dataloader_ns)}; "
            f"{e.steps_above}/{e.steps} steps above {100 * e.limit_share:.0f}%)")


def _dataloader_advice(finding: Finding) -> str:
    return ("load ahead of the step: " + ("more DataLoader workers, pin_memory and prefetch_factor, "
                                          if finding.evidence.pytorch
                                          else "more loader processes or threads, prefetch the next batch, ")
            + "cheaper decoding/augmentation or preprocessed data")


def _mib(value: float) -> str:
    return f"{value / 2 ** 20:.1f} MiB"


def _memory_creep_message(finding: Finding) -> str:
    e = finding.evidence
    return (f"memory creep on {len(finding.ranks)}/{e.ranks_total} ranks: the peak allocated on rank "
            f"{e.worst_rank} ({e.device}) grows {_mib(e.growth_per_step_bytes)} per step "
            f"({_mib(e.first_peak_bytes)} -> {_mib(e.last_peak_bytes)} over {e.steps} steps)")


def _memory_imbalance_message(finding: Finding) -> str:
    e = finding.evidence
    peak = e.peak_by_rank[e.worst_rank]
    return (f"rank {e.worst_rank} holds {_mib(peak)} at its peak, {peak / e.median_bytes:.2f}x the median of "
            f"the ranks ({_mib(e.median_bytes)})")


def _memory_creep_advice(finding: Finding) -> str:
    return ("look for tensors kept across steps (losses or outputs appended without .item()/.detach(), caches, "
            "growing lists); a leak ends in an out-of-memory error")


def _memory_imbalance_advice(finding: Finding) -> str:
    return ("balance what each rank holds (sharding of parameters/optimizer state, pipeline stage sizes, "
            "uneven batches); the rank at the peak limits the batch size of all")


def byte_size(value: float) -> str:
    """A byte count in the largest binary unit that keeps it at or above 1."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"


def _slowest(by_rank: dict[int, int]) -> str:
    """'rank 2 in 3 steps, rank 1 in 1' (the ranks slowest in a phase, most often first)."""
    shown = [f"rank {rank} in {steps}" for rank, steps in list(by_rank.items())[:3]]
    return ", ".join(shown) + (" step" if sum(by_rank.values()) == 1 else " steps") if shown else "-"


def _imbalance_message(finding: Finding) -> str:
    e = finding.evidence
    who = (f"no single straggler: {_ranks(e.late_ranks)} take turns being last" if e.pattern == "rotates" else
           f"no single straggler: {_ranks(e.late_ranks)} make the others wait about as long")
    if not e.phases:
        return f"imbalance across ranks: {who}; no annotated phase to say where their work differs"
    top = e.phases[0]
    share = f", {100 * top.spread_share:.0f}% of the step" if top.spread_share is not None else ""
    return (f"imbalance across ranks: {who}; {top.phase} differs most: its own time spreads "
            f"{duration(top.spread_ns)} per step between the slowest and the fastest rank{share} (slowest: "
            f"{_slowest(top.slowest_steps_by_rank)})")


def _imbalance_advice(finding: Finding) -> str:
    phases = [p.phase for p in finding.evidence.phases[:2]]
    where = f" in {' and '.join(phases)}" if phases else ""
    return (f"give every rank the same work{where}: uneven batches or sequence lengths (pack by tokens, not "
            "samples), uneven shards or layers per rank, or a rank on a slower or busier host or device; mark the "
            "step's parts as phases where none is annotated")


def _expert_imbalance_message(finding: Finding) -> str:
    e = finding.evidence
    hottest = e.hot_ranks[0]
    where = f" in group {e.group!r}" if e.group else ""
    since = f" since step {e.onset_step} (the router turned uneven mid-run)" if e.onset_step is not ABSENT else ""
    message = (f"expert load imbalance{where}: rank {hottest} gets {e.load_ratio:.1f}x the tokens of the other ranks' "
               f"median{since} ({byte_size(e.load_bytes_by_rank[hottest])} against "
               f"{byte_size(e.others_median_bytes)} on its experts' side of {e.ops} all-to-alls)")
    if len(e.hot_ranks) > 1:
        message += f"; above {e.limit_ratio:g}x too: {_ranks(e.hot_ranks[1:])}"
    if e.phase:
        message += (f"; it spends {duration(e.phase_extra_ns)} per step (median over steps) more than the others' "
                    f"median in {e.phase}")
    return message + ("; it is the straggler: this load is its lateness" if e.straggler else "")


def _expert_imbalance_advice(finding: Finding) -> str:
    return ("balance the router: a load-balancing auxiliary loss (or a larger coefficient), or bias-based balancing "
            "of the gate; cap each expert's tokens (capacity factor, dropping overflow); replicate the hot experts "
            "or place experts so that each rank's total load is even")


def _phase_step(phase, steps: int, value: int) -> str:
    """A phase row's sum as per step (over the phase's steps, else the rank's)."""
    return duration(value // max(phase.steps or steps, 1))


def _exposed_allgather_message(finding: Finding) -> str:
    e = finding.evidence
    message = (f"exposed all-gather on {len(finding.ranks)}/{e.ranks_total} ranks: rank {e.worst_rank} waits "
               f"{duration(e.allgather_exposed_ns)} per step for all-gathers no computation hides (of "
               f"{duration(e.allgather_ns)} of all-gather)")
    if e.reduce_scatter_exposed_ns:
        message += f", and {duration(e.reduce_scatter_exposed_ns)} for reduce-scatters"
    if e.share_of_exposed is not None:
        message += f"; {100 * e.share_of_exposed:.0f}% of its exposed communication"
    if e.phases:
        top = e.phases[0]
        where = top.phase or "no annotated phase"
        message += f"; most in {where} ({_phase_step(top, e.steps, top.allgather_exposed_ns)} per step)"
    return message


def _exposed_allgather_advice(finding: Finding) -> str:
    e = finding.evidence
    backward = " and each unit's gradient reduce-scatter while the previous unit's backward computes" \
        if e.reduce_scatter_exposed_ns else ""
    if e.pytorch:
        return ("hide the parameter all-gathers under computation: let FSDP prefetch the next unit's (FSDP2 "
                "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch; FSDP1 forward_prefetch=True, "
                f"backward_prefetch=BACKWARD_PRE){backward}; wrap fewer, larger units (fewer, larger all-gathers); "
                "or keep the parameters gathered from forward to backward (reshard_after_forward=False) to drop "
                "backward's all-gather at a cost in memory; DeepSpeed ZeRO-3: overlap_comm and a larger "
                "stage3_prefetch_bucket_size")
    return ("issue each layer's parameter all-gather a layer ahead, on its own stream or thread, so it runs "
            f"under the current layer's computation{backward}; fewer, larger gathers")

WORDS = {"serialized_communication": (_placement_message, _placement_advice),
         "unoverlapped_communication": (_placement_message, _placement_advice),
         "straggler": (_straggler_message, _straggler_advice),
         "slow_collective": (_slow_collective_message, _slow_collective_advice),
         "host_bound_gpu": (_host_bound_message, _host_bound_advice),
         "dataloader_bound": (_dataloader_message, _dataloader_advice),
         "memory_creep": (_memory_creep_message, _memory_creep_advice),
         "memory_imbalance": (_memory_imbalance_message, _memory_imbalance_advice),
         "imbalance": (_imbalance_message, _imbalance_advice),
         "expert_imbalance": (_expert_imbalance_message, _expert_imbalance_advice),
         "exposed_allgather": (_exposed_allgather_message, _exposed_allgather_advice)}


def worded_findings(findings: list[Finding]) -> list[Finding]:
    """Each finding with its ``message`` (duration tokens kept: units.phrase writes them in the
    reader's unit) and ``advice``; a finding that already has its words (read from a summary.json)
    keeps them."""
    out = []
    for finding in findings:  # one per finding: a handful
        message, advice = WORDS.get(finding.finding, (None, None))
        out.append(finding if message is None or finding.message is not ABSENT else
                   replace(finding, message=message(finding), advice=advice(finding)))
    return out


# -- the words of every other reason an analysis gives (typed.Reason), and the one step that words a Summary

def _lane_word(lane_kind: str | None) -> str:
    return "stream" if lane_kind == ev.GPU_STREAM else "thread"


def _serialized(*, kinds, lane_kind, lanes) -> str:
    return (f"{', '.join(kinds) or 'communication'} {'runs' if len(kinds) <= 1 else 'run'} on the compute "
            f"{_lane_word(lane_kind)} ({', '.join(lanes)}): communication is serialized with computation")


def _own_lane(*, lane_kind, ratio, straggler=None, ratio_without=None, waits_ns=None) -> str:
    """Communication on its own lane; after its waits for the straggler when those are given."""
    said = f"communication on its own {_lane_word(lane_kind)}; {100 * ratio:.1f}% of it overlaps computation"
    if waits_ns is None:
        return said
    return (said + f", {100 * ratio_without:.1f}% without the {duration(waits_ns)} it waited for rank "
            f"{straggler}, the straggler (see its finding)")


# by whether the trace shows PyTorch (events.frameworks): DDP is named only where it applies
_ADVICE_SERIALIZED = {
    True: ("bucket gradients and issue collectives on a separate stream or thread, as DDP and "
           "NCCL do by default, so each allreduce starts while backward is still computing"),
    False: ("issue collectives without blocking on a separate stream or thread (non-blocking calls such as "
            "MPI_Iallreduce, NCCL on its own stream), in buckets as their inputs are ready, so each runs "
            "while the computation continues"),
}
_ADVICE_NO_OVERLAP = {
    True: ("start each bucket's allreduce as soon as its gradients are ready (DDP bucketing, "
           "smaller buckets) instead of after backward, and make sure the communication "
           "stream does not wait on the compute stream"),
    False: ("start each collective as soon as its input is ready (in buckets, non-blocking) instead of after "
            "all the computation, and make sure the communication stream or thread does not wait on the compute "
            "one"),
}


# why the skew analysis names no straggler, and what else its notes say (skew.notes: templates,
# durations as units.duration tokens)
def _split_disagrees(*, group, kind, disagree, matched, gap_ns, end_skew_ns) -> str:
    where = f" (group {group})" if group else ""
    return (f"{kind}{where}: the aligned waits and the sync/transfer split disagree on "
            f"{disagree} of {matched} collectives (median gap {duration(gap_ns)}; median end "
            f"skew {duration(end_skew_ns)}): the ranks do not leave it together (e.g. host threads "
            "resuming late) or the clocks are off; the split needs no clock")


def _clock_unverified(*, rank, late_in, of, per_step_ns) -> str:
    return (f"rank {rank} costs the others {duration(per_step_ns)} per step (last in "
            f"{late_in} of {of} collectives), but its clock offset is unverified (too few matched "
            "collectives to align it, no bound from its source): not named a straggler")


def _delay_spread(*, rank, label, second, per_step_ns, second_per_step_ns) -> str:
    return (f"rank {rank} costs the others {duration(per_step_ns)} per {label}, but rank "
            f"{second} costs nearly as much ({duration(second_per_step_ns)}): no single straggler; "
            "the delay is spread (uneven work, or a busy machine)")


def _rotates(*, label, worst, ranks, late_units, units) -> str:
    """``late_units`` of ``units`` are for analyses/imbalance.py, which reads this note; the words show the worst."""
    label = label
    shown = "; ".join(f"{label} {step}: rank {rank} ({duration(ns)})" for step, rank, ns in worst)
    return (f"the late rank rotates (ranks {', '.join(map(str, ranks))}): not one straggler; "
            f"the worst per {label}: {shown}")


def _last_in_half_or_less(*, rank, last_in, of, label, per_step_ns) -> str:
    return (f"rank {rank} is last in {last_in} of its {of} collectives of the one profiled "
            f"{label}, not in more than half: not named a straggler (costs the others "
            f"{duration(per_step_ns)})")


def _transient(*, steps, rank, label, late, units, per_step_ns) -> str:
    steps = ", ".join(map(str, steps))
    return (f"rank {rank} is late only in {label}(s) {steps} ({late} of {units}): "
            f"transient, not a straggler (costs {duration(per_step_ns)} per {label} on average)")


def _unseen_members(*, missing, rank, late_in, of, incomplete) -> str:
    missing = missing
    ranks = f"rank{'s' if len(missing) > 1 else ''} {rank_ranges(missing)}"
    return (f"rank {rank} is last among the ranks present in {late_in} of {of} collectives, "
            f"but {incomplete} of them belong to groups with members missing from the inputs "
            f"({ranks[:80]}): the missing ranks may be later still, so no straggler is named")


def _hosts(hosts: list[dict]) -> str:
    return "; ".join(f"{h['ranks']} ranks on {h['host']} with {h['cpus']} cores" for h in hosts[:4])


def _crowded(*, hosts) -> str:
    """Why one finding is not priced, said briefly: the warning, printed once at the top, says it whole
    (the whole sentence under every finding and the top finding made it 4 times on one screen)."""
    return "ranks outnumber their host's cores (see the warning on cores)"


def _crowded_warning(*, hosts) -> str:
    return (f"Ranks outnumber the cores of their host ({_hosts(hosts)}): a rank that sleeps or waits "
            "frees a core for the others, which the replay cannot see, so its savings are not given as costs "
            "(findings unpriced; the what-if table kept for reference)")


def _ranks(ranks: list[int]) -> str:
    """'rank 3' / 'ranks 2-127, 130': a 126-rank gap reads as one range, not 126 numbers."""
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"


def _first(ranks: list[int], more: str | None = None, limit: int = 8) -> str:
    """The first ``limit`` ranks, then ``more`` (default: how many more) where there are more."""
    shown = ", ".join(map(str, ranks[:limit]))
    return shown + ((more if more is not None else f" (+{len(ranks) - limit} more)") if len(ranks) > limit else "")


# why a rank has no step window, by its source: how to mark the steps there
_NO_STEP_WINDOW = {
    "native": "no prof.step() was called (0 steps), so the window is the whole trace: call prof.step() at the "
              "end of every training step, or pass window: all",
    "kineto": "no ProfilerStep#N in the trace, so the window is the whole trace: call prof.step() of "
              "torch.profiler at the end of every training step, or pass window: all",
    "nsys": "no ProfileStep NVTX ranges in the trace, so the window is the whole trace: mark each training step "
            "(distprof.Profiler's prof.step()), or pass window: all",
}


def _counts_differ(*, group, step, more, kind, steps_bad, steps, usual, odd) -> str:
    where = f" in group {group!r}" if group else ""
    at = "outside steps" if step < 0 else f"step {step}"
    detail = ", ".join(f"rank {r}: {c}" for r, c in odd) + (f" (+{more} more)" if more else "")
    return (f"collective {kind}{where}: counts differ across ranks in {steps_bad} of {steps} step(s), "
            f"e.g. {at}: {usual} on most ranks but {detail}; those are left unmatched")


TEXTS: dict[str, Callable[..., str]] = {  # code -> its words, from its figures as keyword arguments
    # why a finding's fix is not priced (analyses/cost.py)
    "no_scenario": lambda: "no what-if scenario models this fix",
    "not_time": lambda: "memory, not time",
    "no_replay": lambda: "the what-if replay did not run on this trace",
    "above_step": lambda: "the replay's saving exceeds the measured step: not trusted",
    "oversubscribed": _crowded,
    "oversubscribed_warning": _crowded_warning,
    "busy_host_warning": _busy_warning,
    # why a what-if scenario does not apply (analyses/whatif.py)
    "not_named": lambda: "no straggler named by the skew analysis (skew.notes say why)",
    "one_rank": lambda: "one rank: nothing to balance",
    "no_transfer": lambda: "no collective with a measured transfer time",
    "no_dataloader": lambda phase: f"no {phase} phase with time in it",
    "already_overlapped": lambda: (
        "no step waits for its communication (already overlapped, or not shown by "
        "the trace)"),
    "no_steps": lambda: "no ProfileStep markers: there is no step to replay",
    # what the replay cannot explain or see (whatif.notes)
    "replay_unexplained": lambda: (
        "the chain's waits and lanes do not explain the measured order (events the "
        "compact results do not keep)"),
    "partial_columns": lambda partial, columns: (
        f"{partial} of {columns} matched collectives have members that end "
        "before others arrive (their process group not named by the trace, or clocks "
        "off): each member joins only the members that arrived before it ended"),
    "gpu_waits_unseen": lambda collectives: (
        f"the host waits for none of the {collectives} GPU collectives (no sync "
        "call returns with one): a scenario that speeds communication up saves time "
        "only where a rank waits for it, and the dependencies of kernels on other "
        "streams are not modelled"),
    # a stream placement check (analyses/streams.py): its message and advice
    "no_communication": lambda: "no communication recorded: nothing to place",
    "no_computation": lambda: "no computation recorded: nothing to overlap with",
    "serialized": _serialized,
    "no_overlap": lambda lane_kind, ratio, warn_ratio: (
        f"separate {_lane_word(lane_kind)}, but communication does not overlap "
        f"computation (overlap {100 * ratio:.1f}% < {100 * warn_ratio:.0f}%): "
        "issued after the compute it could hide behind, or waits on it"),
    "own_lane": _own_lane,
    "own_lane_after_waits": _own_lane,
    "pipeline_dependency": lambda kinds, chain: (
        f"{'/'.join(kinds)} of pipeline {' -> '.join(map(str, chain))}: "
        "waiting there for input is a dependency (the bubble, see Pipeline), not "
        "serialized communication"),
    "advice_serialized": lambda pytorch: _ADVICE_SERIALIZED[pytorch],
    "advice_no_overlap": lambda pytorch: _ADVICE_NO_OVERLAP[pytorch],
    # the skew notes (analyses/skew.py; the straggler's unseen group members: pipeline.py)
    "split_disagrees": _split_disagrees,
    "clock_unverified": _clock_unverified,
    "delay_spread": _delay_spread,
    "late_rank_rotates": _rotates,
    "last_in_half_or_less": _last_in_half_or_less,
    "transient": _transient,
    "unseen_members": _unseen_members,
    # what the merge says of its inputs (pipeline.py, align.py: warnings and skew notes)
    "partial_result": lambda world_size, missing: f"partial result: no data for {_ranks(missing)} of {world_size}",
    "no_step_window": lambda source, ranks=None: (f"{_ranks(ranks)}: " if ranks else "") + _NO_STEP_WINDOW[source],
    "clocks_unverified": lambda ranks: (
        f"clock offset of rank(s) {_first(ranks, ' ...')} not verified (no shared "
        "host, clock sample or usable collectives): start spreads and skew across ranks "
        "may be the clocks, not the ranks"),
    "finding_dropped": lambda finding, figure_ns, window_ns: (
        f"finding {finding} dropped: its figure ({figure_ns / 1e9:,.6f} s) exceeds "
        f"the longest analysed window ({window_ns / 1e9:,.6f} s); the inputs' times "
        "are inconsistent"),
    "groups_unnamed": lambda world_size, kinds: (
        f"process group not in the trace for {', '.join(kinds)}: matched among the "
        f"ranks that have them and taken to be on the world ({world_size} ranks) for bus "
        "bandwidth; a job with subgroups (TP/DP/PP) needs traces that name them (Kineto "
        "record_param_comms / pg_config, distprof.comm(group=...))"),
    "wait_not_split": lambda ranks: (
        f"{_ranks(ranks)}: communication not split into wait and transfer (no "
        "collective matched with another rank's, so the wait for the last arrival is not "
        "known)"),
    "merged_anyway": lambda clash: f"merged anyway (--allow-duplicate-ranks): {clash}",
    "world_not_believed": lambda stated, found, ranks: (
        f"world_size {stated} stated by the rank files but only {len(ranks)} "
        f"rank(s) found ({rank_ranges(ranks)}); using {found}"),
    "partly_present": lambda kind, of, ranks: (
        f"collective {kind}: only rank(s) {_first(ranks)} of {of} have it; "
        "matched among those"),
    "counts_differ": _counts_differ,
    "rank_twice": lambda file, rank: f"{file}: rank {rank} appears twice; renumbered",
    "host_clock_distrusted": lambda file, rank, host, gap_ns: (
        f"{file}: rank {rank} names host {host} like another rank, "
        f"but its clock is {gap_ns / 1e9:,.3f} s off that host's: its clock "
        "offset is distrusted (not the same-host clock, unverified; no straggler is "
        "named from it)"),
    "hosts_clustered": lambda gap_ns, spread_ns: (
        f"collective ends differ by host (up to {gap_ns / 1e6:.2f} ms between hosts, "
        f"{spread_ns / 1e6:.3f} ms within one): not used to align clocks across hosts "
        "(the difference may be physical); offsets across hosts are the sources' own, "
        "unverified"),
    # an analysis that could not run on this trace (warnings)
    "whatif_skipped": lambda error: f"what-if replay skipped: {error}",
    "critical_path_skipped": lambda error: f"critical path skipped: {error}",
}


def text(said: str | Reason | None) -> str | None:
    """A reason in words (text and None as they are)."""
    if not isinstance(said, Reason):
        return said
    return TEXTS[said.code](**said.figures)


def _worded_straggler(straggler: StragglerRow | None) -> StragglerRow | None:
    """skew.straggler (or unconfirmed_straggler) with why its fix is not priced in words."""
    if not straggler or straggler.cost_why_not is ABSENT:
        return straggler
    return replace(straggler, cost_why_not=text(straggler.cost_why_not))


def worded(summary: Summary) -> Summary:
    """The summary with every reason in words: findings (message, advice, why not priced), the
    straggler's cost, the skew notes, the what-if's notes and scenarios, the checks, warnings.
    Idempotent."""
    findings = [replace(f, why_not=text(f.why_not)) for f in worded_findings(summary.findings)]
    what = summary.whatif and replace(summary.whatif, notes=[text(n) for n in summary.whatif.notes],
                                      scenarios=[replace(s, why=text(s.why)) for s in summary.whatif.scenarios])
    checks = [replace(c, message=text(c.message), advice=text(c.advice)) for c in summary.checks]
    skew = summary.skew
    skew = replace(skew, straggler=_worded_straggler(skew.straggler), notes=[text(n) for n in skew.notes],
                   unconfirmed_straggler=_worded_straggler(skew.unconfirmed_straggler))
    return replace(summary, findings=findings, skew=skew,
                   warnings=[text(w) for w in summary.warnings], whatif=what, checks=checks)


# -- a finding's evidence in sentences (report.html's line under each finding) ----------------------------------

def _by_rank(values: dict, say: Callable[[object], str], limit: int = 8) -> str:
    shown = [f"rank {rank} {say(value)}" for rank, value in list(values.items())[:limit]]
    return ", ".join(shown) + (", …" if len(values) > limit else "")


def _share(value: float | None) -> str:
    return f"{100 * value:.1f}%"


def _straggler_evidence(e) -> list[str]:
    waits = f"The others wait {duration(e.waits_caused_ns)} per step for it"
    if e.waits_caused_share is not None:
        waits += f" ({_share(e.waits_caused_share)} of the step)"
    out = [f"Last to arrive in {e.last_in} of its {e.of} collectives, alone and over {duration(e.threshold_ns)} "
           f"after the median rank in {e.late_in} of them.", f"{waits}, {duration(e.total_waits_caused_ns)} in all."]
    if e.late_step_ids and len(e.late_step_ids) < e.steps:  # the message says how many
        out.append(f"Its late steps: {rank_ranges(e.late_step_ids)}.")
    if e.slow_phase:
        extra = f" ({duration(e.slow_phase_extra_ns)} per step over the median rank)" \
            if e.slow_phase_extra_ns is not None else ""
        out.append(f"Its slowest phase against the other ranks: {e.slow_phase}{extra}.")
    if e.runner_up_waits_caused_ns:
        out.append(f"The next rank makes the others wait {duration(e.runner_up_waits_caused_ns)} per step.")
    if e.exposed_waits_ns_by_rank:
        out.append(f"Exposed waits for it by rank: {_by_rank(e.exposed_waits_ns_by_rank, duration)}.")
    return out


_LANES_SHOWN = 8  # a rank with 20 streams: its first lanes and the count, not a line of twenty


def _placement_evidence(e) -> list[str]:
    more = f" ({len(e.lanes)} in all)" if len(e.lanes) > _LANES_SHOWN else ""
    lanes = f"Its lanes on rank {e.worst_rank}: {', '.join(e.lanes[:_LANES_SHOWN])}{more}" if e.lanes else ""
    if lanes and e.lane_collectives:
        by_kind = e.groups_by_kind or {kind: e.lane_groups for kind in e.lane_collectives}
        kinds = [f"{kind} (group {', '.join(by_kind[kind][:4])})" if by_kind.get(kind) else kind
                 for kind in e.lane_collectives]
        lanes += f", carrying {', '.join(kinds)}"
    out = [f"Exposed communication by rank: {_by_rank(e.exposed_communication_ns_by_rank, duration)}, "
           f"in a window of {duration(e.window_ns)}.", lanes + "." if lanes else ""]
    if e.kinds:
        out.append(f"On the lanes it shares with computation: {', '.join(e.kinds)}.")
    if e.in_forward:
        out.append(f"Inside forward: {', '.join(e.in_forward)}.")
    return out


def _slow_collective_evidence(e) -> list[str]:
    rows = [f"{r.kind}{f' in group {r.group!r}' if r.group else ''} ({r.size_bucket}): {r.busbw_median_gbps:.1f} "
            f"GB/s, {100 * r.peak_share:.0f}% of peak, over {r.count} instances" for r in e.rows[:4]]
    more = f" ({e.rows_below} in all)" if e.rows_below > len(rows) else ""
    return [f"Below {100 * e.limit_share:.0f}% of the {e.peak_busbw_gbps:g} GB/s peak{more}: {'; '.join(rows)}."]


def _host_bound_evidence(e) -> list[str]:
    return [f"GPU time waiting for launches by rank: {_by_rank(e.host_bound_ns_by_rank, duration)}.",
            f"On rank {e.worst_rank}, {e.host_bound_gaps} of its {e.gaps} GPU gaps wait for a launch; the GPU is "
            f"idle {duration(e.idle_ns)} of a {duration(e.window_ns)} window."]


def _dataloader_evidence(e) -> list[str]:
    return [f"Share of the step in {e.phase} by rank: {_by_rank(e.share_by_rank, _share)}.",
            f"On rank {e.worst_rank}: {duration(e.dataloader_ns)} over {e.steps} steps, {e.steps_above} of them "
            f"above the {100 * e.limit_share:.0f}% limit."]


def _memory_evidence(e) -> list[str]:
    if hasattr(e, "peak_by_rank"):
        return [f"Peak allocated by rank: {_by_rank(e.peak_by_rank, _mib)}; median {_mib(e.median_bytes)}."]
    return [f"On rank {e.worst_rank} ({e.device}): {_mib(e.first_peak_bytes)} at the first step's peak, "
            f"{_mib(e.last_peak_bytes)} at the last of {e.steps}."]


def _exposed_allgather_evidence(e) -> list[str]:
    phases = [f"{p.phase or 'outside the annotated phases'}: all-gather "
              f"{_phase_step(p, e.steps, p.allgather_exposed_ns)} exposed of "
              f"{_phase_step(p, e.steps, p.allgather_ns)}, reduce-scatter "
              f"{_phase_step(p, e.steps, p.reduce_scatter_exposed_ns)} exposed of "
              f"{_phase_step(p, e.steps, p.reduce_scatter_ns)}" for p in e.phases]
    out = [f"Exposed all-gather per step by rank: {_by_rank(e.allgather_exposed_ns_by_rank, duration)} (over "
           f"{100 * e.limit_share:.0f}% of the window; rank {e.worst_rank}: {_share(e.window_share)}).",
           f"By phase on rank {e.worst_rank}, per step: {'; '.join(phases)}." if phases else ""]
    if e.waits_for_straggler_ns:
        out.append(f"Not counted: {duration(e.waits_for_straggler_ns)} per step of these collectives on rank "
                   f"{e.worst_rank} waited for the straggler (its finding).")
    if e.replaces:
        out.append("It stands for the low-overlap finding on the same time (both are priced by overlapping "
                   "communication): all-gathers and reduce-scatters are most of the exposed communication.")
    return out

def _imbalance_evidence(e) -> list[str]:
    phases = [f"{p.phase} {duration(p.spread_ns)} (the slowest {duration(p.excess_ns)} over the median rank; "
              f"slowest {_slowest(p.slowest_steps_by_rank)})" for p in e.phases]
    worst = "; ".join(f"step {w.step}: rank {w.rank} ({duration(w.waits_caused_ns)})" for w in e.worst_by_step)
    out = [f"Own time per step, slowest - fastest rank (median over steps), of the {len(phases)} phases of "
           f"{e.phases_compared} that differ most: {'; '.join(phases)}." if phases else "",
           f"The rank the others waited for most, by step: {worst}." if worst else ""]
    return out


def _expert_imbalance_evidence(e) -> list[str]:
    return [f"Load by rank (bytes on the experts' side of the group's all-to-alls): "
            f"{_by_rank(e.load_bytes_by_rank, byte_size)}.",
            f"Of the {e.ops} all-to-alls per rank, {e.recv_side_ops} carry the tokens to the experts (the received "
            f"bytes differ most across ranks) and {e.ops - e.recv_side_ops} back (the sent bytes do)."]


EVIDENCE_WORDS = {"serialized_communication": _placement_evidence, "unoverlapped_communication": _placement_evidence,
                  "straggler": _straggler_evidence, "slow_collective": _slow_collective_evidence,
                  "host_bound_gpu": _host_bound_evidence, "dataloader_bound": _dataloader_evidence,
                  "memory_creep": _memory_evidence, "memory_imbalance": _memory_evidence,
                  "imbalance": _imbalance_evidence, "expert_imbalance": _expert_imbalance_evidence,
                  "exposed_allgather": _exposed_allgather_evidence}


def evidence_sentences(finding: Finding) -> str:
    """The numbers behind a finding in sentences, with duration tokens (units.phrase): what its message
    does not already say, and nothing absent or empty ("onset step: None; ... pattern: persistent", the
    record's raw fields, once ended every finding's card). Its share of the critical path where known."""
    e = finding.evidence
    said = EVIDENCE_WORDS.get(finding.finding)
    out = [s for s in (said(e) if said else []) if s]
    share = getattr(e, "critical_path_share", ABSENT)
    if isinstance(share, float):
        out.append(f"Its share of the critical path: {_share(share)}.")
    return " ".join(out)
