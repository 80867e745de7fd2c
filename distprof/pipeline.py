"""The one path from sources to a Summary: ``reduce_rank`` (a rank's events -> RankResult, run
where the events are) and ``combine`` (RankResults -> aligned, matched, analysed Summary, at rank
0). ``distprof merge`` (merge_files), the live finish (Profiler) and later diff/whatif all call
these; writing reports is the caller's job.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from . import align as align_mod
from . import console, timings, transport
from . import events as ev
from .analyses import alltoall as alltoall_mod
from .analyses import collectives as coll
from .analyses import (
    cost,
    critical_path,
    diagnose,
    distributed,
    hostload,
    machine,
    profiles,
    replay,
    skew,
    streams,
    summaries,
    whatif,
)
from .analyses import pipelines as pipelines_mod
from .analyses import sharded as sharded_mod
from .results import ClockEstimate, RankResult, Summary
from .sections.collectives import Collectives
from .sections.findings import Finding
from .sections.skew import ClockRow, CollectiveSkew, Skew
from .sections.whatif import WhatIf
from .typed import Reason


def reduce_rank(trace: ev.RankTrace, config: dict) -> RankResult:
    """Everything rank 0 needs from one rank, computed next to that rank's events; the per-rank
    view (window, work masks, lanes, launch join) is built once here and handed to each reducer."""
    view = distributed.rank_view(trace.events, config, trace.meta.get("lane_names"))
    figures, lanes = distributed.rank_figures(view, trace.meta.get("gpu_step_windows"))
    profile, operator_table = profiles.rank_profile(view, config, trace.profiles)
    return RankResult(
        rank=trace.rank, source=trace.source, source_file=trace.source_file, pid=trace.pid, device=trace.device,
        rank_from=trace.rank_from, figures=figures, lanes=lanes, markers=skew.rank_markers(view),
        gpu_gaps=diagnose.rank_gpu_gaps(view),
        tables=msgspec.structs.replace(summaries.rank_tables(view, config, trace.meta),
                                       operator=operator_table),
        clock=ClockEstimate(offset_ns=int(trace.clock_offset_ns), uncertainty_ns=int(trace.clock_uncertainty_ns)),
        warnings=tuple(trace.warnings) + _no_steps(trace, figures.steps, config), meta=dict(trace.meta),
        frameworks=ev.frameworks(trace.events, trace.source), profile=profile,
        sharded=sharded_mod.rank_sharded(view))


def _no_steps(trace: ev.RankTrace, steps: int, config: dict) -> tuple[Reason, ...]:
    """Why a step window is missing (the source says how to get one: reports/findings.py words it); said
    once per job by combine."""
    if steps or config.get("window", "steps") != "steps" or not len(trace.events):
        return ()
    return (Reason("no_step_window", {"source": trace.source if trace.source in ("kineto", "nsys") else "native"}),)


def _rank_warnings(results: list[RankResult]) -> list[str | Reason]:
    """Every rank's warnings in rank order; the ranks without a step window are said once per source."""
    warnings, no_steps = [], {}
    for result in results:
        for said in result.warnings:
            if isinstance(said, Reason) and said.code == "no_step_window":
                no_steps.setdefault(said.figures["source"], []).append(result.rank)
            else:
                warnings.append(said)
    return warnings + [Reason("no_step_window", {"source": source, "ranks": sorted(ranks)})
                       for source, ranks in no_steps.items()]


def _unseen_members(found: CollectiveSkew, matching: align_mod.Matching, missing: list[int]) -> CollectiveSkew:
    """A straggler is last among the ranks *present*: when its collectives' groups have members
    that are not in the merge (or groups not known and ranks missing from the world), the
    absent ranks may be later still, so it is not named; a note says why."""
    straggler = found.straggler
    if not straggler or not missing or not matching.size:
        return found
    row = int(np.flatnonzero(matching.ranks == straggler.rank)[0])
    mine = np.flatnonzero(matching.present[row])
    groups = matching.group if matching.group.size == matching.size else np.full(matching.size, "", object)
    unseen = set(missing)
    incomplete = [j for j in mine.tolist() if not groups[j] or unseen & set(matching.group_ranks[j])]
    if not incomplete:
        return found
    why = Reason("unseen_members", {  # worded by reports/findings.py
        "rank": straggler.rank, "late_in": straggler.late_in, "of": straggler.of,
        "incomplete": len(incomplete), "missing": sorted(unseen)})
    return msgspec.structs.replace(found, straggler=None, notes=[*found.notes, why],
                                   no_straggler_note=len(found.notes))


def _skew_summary(aligned: align_mod.Alignment, config: dict, inst: coll.Instances | None = None,
                  missing: list[int] | None = None, world_size: int | None = None) -> Skew:
    """summary.json's ``skew``: alignment, per-collective and per-step skew on the common clock, its
    notes (the alignment's first) and the send/recv pipelines' bubbles. ``no_straggler_note`` indexes
    the notes as written: the alignment's notes come before the skew analysis's own."""
    results, matching = aligned.results, aligned.matching
    ranks = [r.rank for r in results]
    uncertainties = [r.clock.uncertainty_ns for r in results]
    unknown = [r.rank for r in results if r.clock.uncertainty_ns is None]
    markers = [r.aligned_markers() for r in results]
    steps = skew.step_skew(markers, ranks, config, clock_verified=not unknown)
    step_ns = steps.steps_summary.duration_median_ns if steps.steps_summary else None
    window_ns = int(np.median([r.figures.window_ns for r in results])) if results else None
    found = _unseen_members(skew.collective_skew(
        matching, [r.clock.offset_ns for r in results], [u or 0 for u in uncertainties], config, step_ns=step_ns,
        verified=[r.clock.verified for r in results], inst=inst, window_ns=window_ns,
        gpu=[r.gpu_gaps is not None for r in results], markers=markers), matching, missing or [])
    note = found.no_straggler_note
    return Skew(
        aligned=bool(config.get("clock", {}).get("align", True)),
        reference_rank=aligned.reference_rank, alignment=[ClockRow(**r.clock.to_json(r.rank)) for r in results],
        max_clock_uncertainty_ns=None if unknown else max(uncertainties, default=0),
        clock_unverified_ranks=unknown, excluded_kinds=list(matching.excluded), matched=found.matched,
        kinds=found.kinds, collectives=found.collectives, collectives_total=found.collectives_total,
        collectives_shown=found.collectives_shown, ranks=found.ranks, straggler=found.straggler,
        notes=[*aligned.notes, *found.notes, *_unsplit_note(results),
               *_unnamed_groups_note(results, world_size or len(results))],
        no_straggler_note=None if note is None else note + len(aligned.notes),  # it indexed found.notes alone
        steps=steps.steps, steps_summary=steps.steps_summary, phases=steps.phases,
        pipelines=pipelines_mod.bubbles(matching, inst, step_ns))


MAX_WORLD_PER_RANK = 64  # a stated world this many times the ranks found (and above
MIN_SUSPECT_WORLD = 1024  # this size) is a corrupt value, not a partial job


def _world_size(stated: int | None, ranks: list[int]) -> tuple[int, list[Reason]]:
    """The world size to report, and a warning when the stated one is not believable: a corrupt
    but in-range world_size (1,000,000 from one file, 2 ranks found) would list a million
    missing ranks."""
    found = max(ranks, default=-1) + 1
    if stated and stated > MIN_SUSPECT_WORLD and stated > MAX_WORLD_PER_RANK * max(len(ranks), 1):
        return found, [Reason("world_not_believed", {"stated": stated, "ranks": ranks, "found": found})]
    return stated or found, []


def combine(results: list[RankResult], config: dict, source: str, world_size: int | None = None,
            warnings: list[str] | None = None) -> Summary:
    """The job-wide Summary from per-rank results: ranks numbered, clocks aligned, collectives
    matched, checks, skew, findings and merged tables."""
    warnings = list(warnings or [])
    numbered, renumbered = align_mod.assign_ranks(results)
    warnings += renumbered
    warnings += _rank_warnings(numbered)
    world_size, note = _world_size(world_size, [r.rank for r in numbered])
    warnings += note
    missing = sorted(set(range(world_size)) - {r.rank for r in numbered})
    if missing:
        warnings.append(Reason("partial_result", {"missing": missing, "world_size": world_size}))
    aligned = align_mod.align(numbered, config)
    warnings += aligned.matching.warnings + aligned.warnings
    unverified = [r.rank for r in aligned.results if r.clock.uncertainty_ns is None]
    if unverified and len(aligned.results) > 1:
        warnings.append(Reason("clocks_unverified", {"ranks": unverified}))
    final, inst, collective_table = _collectives(aligned, config, world_size)
    aligned = msgspec.structs.replace(aligned, results=final)
    skew_summary = _skew_summary(aligned, config, inst, missing, world_size)
    checks = streams.pipeline_dependencies(streams.stream_checks(final, config), skew_summary.pipelines)
    made = whatif.safe_measured(final, aligned.matching, config, warnings)  # once: every what-if and the path
    crowded = cost.oversubscribed_hosts(final)
    exchanges = alltoall_mod.groups(final, config)
    skew_summary, what = _priced_straggler(final, aligned.matching, config, warnings, skew_summary, made,
                                           bool(crowded), exchanges)
    straggler_rank = skew_summary.straggler.rank if skew_summary.straggler else None
    path = critical_path.safe_critical_path(made and made.graph, final, warnings, straggler_rank,
                                            str(config.get("phases", {}).get("dataloader", "Dataloader")),
                                            made and made.replayed)
    if crowded:
        warnings.append(Reason("oversubscribed_warning", {"hosts": [host.to_json() for host in crowded]}))
    hosts = machine.facts(final)
    busy = [h for h in machine.busy_hosts(hosts) if h.host not in {c.host for c in crowded}]  # said above
    if busy:  # said once, at the top: the timings on those hosts are partly other processes'
        warnings.append(Reason("busy_host_warning", {"hosts": [h.to_json() for h in busy]}))
    vary = cost.durations_vary(final, straggler_rank)
    straggler = cost.price_straggler(skew_summary.straggler, what, crowded, vary,
                                     alltoall_mod.straggler_load(exchanges, straggler_rank, what, config))
    host = hostload.straggler_host(final, straggler)
    skew_summary = msgspec.structs.replace(
        skew_summary, straggler=msgspec.structs.replace(straggler, host=host) if host else straggler)
    checks = streams.without_straggler_waits(checks, final, skew_summary.straggler, config)
    sharded = sharded_mod.across_ranks(final, aligned.matching, inst, skew_summary.straggler)
    found = diagnose.findings(final, checks, skew_summary, config, collective_table, what, exchanges,
                              sharded=sharded)
    priced, dropped = _plausible_findings(cost.price_findings(found + profiles.memory_findings(final, config), what,
                                                              crowded, vary), final)
    warnings += dropped
    return Summary(  # every section a record made by its analysis: composed, not converted
        world_size=world_size, source=source, ranks=tuple(final),
        across_ranks=distributed.across_ranks(final),
        missing_ranks=missing,
        checks=checks, skew=skew_summary,
        findings=critical_path.with_path_evidence(priced, path),
        warnings=warnings, tables=summaries.merge_tables([r.tables for r in final], [r.rank for r in final]),
        collectives=collective_table, whatif=what, profiles=profiles.across_ranks(final),
        model_profile=profiles.model_profile(final), critical_path=path, machine=hosts,
        **({"alltoall": exchanges} if exchanges else {}), **({"sharded": sharded} if sharded else {}))


def _priced_straggler(results: list[RankResult], matching: align_mod.Matching, config: dict, warnings: list[str],
                      skew_summary: Skew, made: whatif.Measured | None, crowded: bool,
                      exchanges: list) -> tuple[Skew, WhatIf | None]:
    """The what-if, replayed with the named straggler fixed, and the skew summary without that
    straggler when the replay prices its fix under ``skew.straggler_min_step_fraction`` of the step
    (then ``skew.unconfirmed_straggler`` says so, and the replay runs again with none named, for
    the other findings' prices). Also on a host whose ranks outnumber its cores, where no cost is
    given (``cost.unconfirmed_straggler``; its saving is then an upper bound). Not where the replay
    cannot see the waits (GPU collectives no host call waits for: ``replay.gpu_waits_unseen``): its
    saving is no evidence there. A straggler whose lateness is its expert load (the hottest rank of an
    uneven all-to-all, ``exchanges``) is fixed by balancing the ranks: the other findings are priced on
    top of that fix, unless the replay vetoes the imbalance (then on top of removing its lateness)."""
    straggler = skew_summary.straggler
    rank, since = (straggler.rank, straggler.onset_step) if straggler else (None, None)
    fix = "balanced_ranks" if alltoall_mod.is_hottest(exchanges, rank) else "no_straggler"
    what = whatif.safe_whatif(results, matching, config, warnings, made, rank, straggler_since=since,
                              straggler_fix=fix)
    if fix != "no_straggler" and alltoall_mod.straggler_load(exchanges, rank, what, config) is None:
        what = whatif.safe_whatif(results, matching, config, warnings, made, rank, straggler_since=since)
    floor = float(config["skew"]["straggler_min_step_fraction"])
    unconfirmed = cost.unconfirmed_straggler(straggler, what, floor, crowded)
    if unconfirmed is None or made is None or replay.gpu_waits_unseen(made.graph):
        return skew_summary, what
    what = whatif.safe_whatif(results, matching, config, warnings, made)
    return msgspec.structs.replace(skew_summary, straggler=None, unconfirmed_straggler=unconfirmed), what


def _plausible_findings(findings: list[Finding], results: list[RankResult]) -> tuple[list[Finding], list[str]]:
    """The findings whose figure and cost fit in the longest analysed window of any rank, and a
    warning per one that does not: a per-step figure longer than the whole window is a bug upstream
    (a one-day clock offset once printed a HIGH "waiting 86,400 s per step"), never printed."""
    limit = max((max(int(r.figures.window_ns or 0), int(r.figures.gpu_window_ns or 0)) for r in results), default=0)
    if limit <= 0:
        return findings, []
    kept, warnings = [], []
    for finding in findings:  # a handful per job
        worst = max(int(value or 0) for value in (finding.figure_ns, finding.cost_ns, finding.predicted_saving_ns))
        if worst > limit:
            warnings.append(Reason("finding_dropped", {"finding": finding.finding, "figure_ns": worst,
                                                       "window_ns": limit}))
        else:
            kept.append(finding)
    return kept, warnings


def _collectives(aligned: align_mod.Alignment, config: dict,
                 world_size: int | None = None) -> tuple[list[RankResult], dict, Collectives]:
    """Instances of the matched collectives on the aligned clock, each rank's communication split
    into wait and transfer (new RankFigures, nothing changed in place), and the Collectives table
    (matched instances plus the collectives no other rank matched). An op whose group the trace
    does not name is taken to be on the world (``world_size`` ranks) for its bus bandwidth."""
    results, matching = aligned.results, aligned.matching
    gpus_per_node = (config.get("hardware") or {}).get("gpus_per_node")
    ranks = [r.rank for r in results]
    node_of = coll.node_of_ranks(ranks, [r.host for r in results], gpus_per_node)
    inst = coll.instances(matching, [r.clock.offset_ns for r in results], node_of, gpus_per_node,
                          world_size=world_size)
    waits = coll.rank_waits(matching, inst.wait, [r.markers.step_bounds for r in results],
                            config.get("window", "steps") == "steps")
    final = []
    for result, wait in zip(results, waits):  # one iteration per rank
        figures = result.figures
        transfer = None if wait is None else max(figures.communication_ns - wait, 0)
        figures = msgspec.structs.replace(figures, communication_wait_ns=wait, communication_transfer_ns=transfer)
        final.append(msgspec.structs.replace(result, figures=figures))
    groups = align_mod.process_groups(results)
    if world_size and "" not in groups:
        groups[""] = tuple(range(world_size))
    single = coll.unmatched([r.markers.collectives for r in results], ranks, matching, groups, node_of,
                            gpus_per_node)
    return final, inst, coll.summary(matching, inst, single, config)


def _unnamed_groups_note(results: list[RankResult], world_size: int) -> list[Reason]:
    """Say when collectives carry no process group: they are matched among the ranks that have
    them and taken to span the world, which a job with subgroups would contradict."""
    unnamed = sorted({kind for r in results for kind, group in zip(r.markers.collectives.name,
                                                                  r.markers.collectives.group)
                      if not group and kind not in ("other", "send", "recv")})
    if not unnamed:
        return []
    return [Reason("groups_unnamed", {"kinds": unnamed, "world_size": world_size})]


def _unsplit_note(results: list[RankResult]) -> list[Reason]:
    """Why a rank's communication is not split into wait and transfer."""
    ranks = [r.rank for r in results if r.figures.communication_wait_ns is None and r.figures.communication_ns]
    if not ranks:
        return []
    return [Reason("wait_not_split", {"ranks": ranks})]


def _reduce_files(paths: list[Path], indices: list[int], config: dict,
                  progress: bool = True) -> tuple[list, list]:
    """Read the files at ``indices`` one at a time and keep only each rank's RankResult:
    ([(file index, position in file, result)], [(file index, warning)])."""
    from . import sources
    from .sources.readahead import reading_ahead
    reduced, warnings = [], []
    with reading_ahead([paths[index] for index in indices], config):  # the next file's bytes on another core
        for index in console.progress(indices, "reading") if progress else indices:
            try:
                traces = sources.read(paths[index], config)
                reduced += [(index, position, reduce_rank(trace, config)) for position, trace in enumerate(traces)]
                del traces  # bound memory by one file's events
            except ev.SourceError as error:
                warnings.append((index, f"skipped {error}"))
                console.warn(f"skipped {error}")
            except Exception as error:  # noqa: BLE001 - one unreadable file costs that file, not the merge
                text = f"skipped {paths[index]}: could not be read ({type(error).__name__}: {error})"
                warnings.append((index, text))
                console.warn(text)
    return reduced, warnings


def _reduce_here(paths: list[Path], mine: list[int], config: dict) -> tuple[list, list]:
    """This worker's files, read in ``transport.local_workers`` forked processes when more than
    one core is free (each holds one file's events at a time), else one after the other. Never
    forked while other threads run (a live job's threads, a test runner's): a child can inherit a
    lock one of them held at the fork and wait on it forever; a merge must not hang. Nor under a
    read-ahead the command started: it decided these files are read here, one after the other."""
    import threading

    from .sources.readahead import reading_ahead_now
    alone = threading.active_count() > 1 or reading_ahead_now()
    processes = 1 if alone else transport.local_workers(len(mine))
    if processes <= 1:
        return _reduce_files(paths, mine, config)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    sizes = [paths[i].stat().st_size if paths[i].exists() else 0 for i in mine]
    shares = [[mine[k] for k in share] for share in transport.assign_files(sizes, processes) if share]
    with ProcessPoolExecutor(len(shares), mp_context=multiprocessing.get_context("fork")) as pool:
        parts = list(pool.map(_reduce_files, [paths] * len(shares), shares, [config] * len(shares),
                              [False] * len(shares)))
    return [item for part in parts for item in part[0]], [item for part in parts for item in part[1]]


def _claimed_twice(reduced: list, paths: list[Path]) -> str | None:
    """The first rank two inputs claim, whatever their formats (a native file and a Kineto trace that
    both say rank 0 are two processes, not one rank), as one line: two runs' files in one folder."""
    seen: dict[int, int] = {}
    for index, _, result in reduced:  # one per rank result
        if result.rank is None:
            continue
        if result.rank in seen and seen[result.rank] != index:
            return (f"rank {result.rank} is claimed by two inputs: {paths[seen[result.rank]]} and {paths[index]} "
                    "(two runs in one folder?): give one run's files, or --allow-duplicate-ranks to renumber them")
        seen.setdefault(result.rank, index)
    return None


def _not_one_run(reduced: list, paths: list[Path]) -> str | None:
    """Why the inputs are not one run's files (two ranks claiming one number, launcher ids, stated world
    sizes or recorded times of two runs: sources.one_run), as one line naming files of both; None when
    they can be one.
    The rule is the same for every format, so any mix of them is checked as one set."""
    from .sources import one_run
    clash = _claimed_twice(reduced, paths)
    if clash:
        return clash
    spans: dict[int, dict] = {}
    for index, _, result in reduced:  # one per rank result; a file of several ranks is one input
        run = result.meta.get("run") or {}
        mine = spans.setdefault(index, {"span_ns": None, "launcher": {}, "host": result.host,
                                        "world_size": result.meta.get("world_size") or 0})
        if run.get("span_ns"):
            first, last = run["span_ns"]
            old = mine["span_ns"] or (first, last)
            mine["span_ns"] = (min(old[0], first), max(old[1], last))
        mine["launcher"].update(run.get("launcher") or {})
    return one_run([(str(paths[index]), identity) for index, identity in sorted(spans.items())])


def merge_files(paths: list[Path], config: dict, comm=None, warnings: list[str] | None = None,
                allow_duplicate_ranks: bool = False) -> Summary | None:
    """Read every input one at a time, keep only its compact per-rank results, combine.

    Under ``mpirun -n K distprof merge ...`` (``comm`` = COMM_WORLD) the files are spread over
    the K workers by size; each reduces its share one file at a time and rank 0 combines.
    Results are put back in input order, so the output equals a single-process merge.
    Returns the Summary on rank 0 and None on the other workers. ``warnings`` (the caller's,
    e.g. from sources.expand) come first in the summary's ``warnings``.
    """
    worker, workers = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
    mine = transport.files_of(paths, worker, workers)
    extra = warnings
    try:
        with timings.stage(f"read and reduce {len(mine)} file(s)"):
            reduced, warnings = _reduce_here(paths, mine, config) if comm is None else \
                _reduce_files(paths, mine, config)
    except Exception as error:  # noqa: BLE001 - an MPI worker that fails still reaches the gather
        if comm is None:
            raise
        reduced, warnings = [], [(min(mine, default=0), f"merge worker {worker} failed on its files "
                                                        f"({type(error).__name__}: {error}): left out")]
    gathered = transport.gather_workers(comm, reduced, warnings)
    if gathered is None:
        return None
    reduced, warnings = gathered
    reduced = sorted(reduced, key=lambda item: item[:2])
    clash = _not_one_run(reduced, paths)
    if clash and not allow_duplicate_ranks:
        raise ev.SourceError(clash)
    results = [result for _, _, result in reduced]
    warnings = [*(extra or []), *(text for _, text in sorted(warnings))]
    if not results:
        raise ev.SourceError("no readable rank file among the inputs" + (f": {warnings[0]}" if warnings else ""))
    world_size = max((r.meta.get("world_size") or 0) for r in results) or None
    if clash:  # several runs merged on purpose: their ranks side by side make the world, not one run's size
        world_size = max(world_size or 0, len(results))
        warnings.insert(0, Reason("merged_anyway", {"clash": clash.split(": give one run")[0]}))
    kinds = sorted({r.source for r in results})
    with timings.stage(f"combine {len(results)} rank(s)"):
        return combine(results, config, source="+".join(kinds), world_size=world_size, warnings=warnings)
