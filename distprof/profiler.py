"""The user's session: ``with distprof.Profiler(...) as prof:`` turns the collector and NVTX on,
marks steps, and on exit gathers every rank's compact results to rank 0, which prints the
Distributed Summary and writes ``summary.json``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import annotate, clock, outpaths, transport
from . import config as config_mod
from . import events as ev
from . import schedule as schedule_mod
from .collector import NAMES, Collector, clock_ns
from .names import printable
from .sources import native


@functools.cache
def _profile_step_id() -> int:
    """The ProfileStep range's name id: one registry a process (``NAMES``), looked up once."""
    return NAMES.id_of(ev.PROFILE_STEP, ev.PHASE, ev.RANGE)


class Profiler:
    """Profile one rank of a job; every rank of the job makes its own Profiler."""

    def __init__(self, config: str | Path | dict | None = None, out: str | Path | None = None,
                 quiet: bool = False, schedule=None, on_trace_ready=None, timer_only: bool = False,
                 batch_size: int | None = None, **overrides) -> None:
        """``schedule``: None (record every step), ``(start, end)``, a dict of
        ``skip_first/wait/warmup/active/repeat``, or a callable step -> schedule.State.
        ``on_trace_ready(prof)`` fires after each recorded cycle. ``timer_only``: no tracing,
        only the benchmark figures (reader_cost, batch_cost, ips; samples/s with ``batch_size``)."""
        self.schedule = schedule_mod.resolve(schedule)
        self.on_trace_ready = on_trace_ready
        self.timer_only = timer_only
        self.batch_size = batch_size
        self.step_num = 0
        self.batch_ns: list[int] = []
        self.reader_ns: list[int] = []
        self._reader_in_step = 0
        if isinstance(config, dict):
            self.config = config_mod.load(None, config)
        else:
            self.config = config_mod.load(config, overrides or None)
        # ``out`` may name a folder per rank or node ({rank}, {host}): checked with this rank as far
        # as it is known here, and again with the job's rank at the start
        self._out_template = str(out if out is not None else self.config["out"])
        self._out_problem: str | None = None  # why this rank's folder cannot be written (a job of several ranks)
        self.out = self._checked_out(self._guess_rank())  # one line, before the job
        self.quiet = quiet
        self.summary: dict | None = None
        self.collector: Collector | None = None
        self._unprofiled: str | None = None  # why this rank's file could not be written (it trains on)
        self._comm = None
        self._step_start = 0
        self._step_range = None
        self._step_attributes = annotate.event_attributes(ev.PROFILE_STEP, ev.PHASE)
        self._closed = False
        self._stop_link = False  # not made yet
        self._failed: list[int] = []  # ranks that failed, told when rank 0's summary is written
        self._failure_lines: dict[int, str | None] = {}  # what each of them said
        self._live = None  # the live side process: rank 0's view, or its node's sender (live.every_steps)

    def _checked_out(self, rank: int) -> Path:
        """``rank``'s output folder, checked writable: one error line before the job for a single process;
        in a job of several ranks the rank trains on unprofiled instead (``_out_problem``, said at the start
        by ``_open_collector``): a rank that raised here would leave the others waiting in its collectives."""
        import os
        folder = self._expand_out(rank)
        try:
            return outpaths.check_dir(folder)
        except ev.SourceError as error:
            if transport.detect_world(os.environ)[1] <= 1:
                raise
            self._out_problem = str(error)
            return folder

    def _guess_rank(self) -> int:
        """This rank before the start, for a templated ``out`` only (launcher variables; 0 when
        they say nothing): the start expands it again with the job's rank."""
        if not outpaths.has_placeholders(self._out_template):
            return 0
        import os
        return transport.detect_world(os.environ)[0]

    def _expand_out(self, rank: int) -> Path:
        """The output folder of ``rank`` on this host: ``out`` with {rank} and {host} filled in."""
        if not outpaths.has_placeholders(self._out_template):
            return Path(self._out_template)
        return outpaths.expand(self._out_template, rank, outpaths.host_name())

    # -- session ---------------------------------------------------------------------------
    def __enter__(self) -> Profiler:
        self._comm = transport.mpi_world()
        self.rank, self.world_size, self.rank_from = transport.detect_world()
        if self.rank_from != "MPI":  # MPI's singleton world in a torchrun/Slurm job: not the job's world
            self._comm = None
        if outpaths.has_placeholders(self._out_template):
            self._out_problem = None
            self.out = self._checked_out(self.rank)  # this rank's own folder
        annotate.set_nvtx(self.config["collector"]["nvtx"])
        if self.config["collector"]["enabled"] and not self.timer_only:
            self.collector = self._open_collector()
            self._clock_sample("start")  # a rank that cannot profile still takes part: the others wait for it
            self._share_run_id()
            if self.collector is not None:
                self._follow_schedule()
            self._start_live()
        self._begin_step(clock_ns())
        self._watchdog = self._start_watchdog()
        return self

    def _open_collector(self) -> Collector | None:
        """This rank's collector, or None where its file cannot be written (a full disk, a read-only or
        missing folder): the rank trains on unprofiled, says so in one line naming the file, and tells
        rank 0 at the stop. The profiler is not the job's to break, nor to hang: its start and stop
        exchanges go on without this rank's data."""
        import sqlite3
        path = self.rank_file(self.rank)
        try:
            if self._out_problem:
                raise OSError(self._out_problem)
            return Collector(path, self.rank, self.world_size)
        except (sqlite3.Error, OSError) as error:
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            self._unprofiled = f"rank {self.rank} is not profiled: cannot write {path} ({reason})"
            sys.stderr.write(f"distprof: warning: {printable(self._unprofiled)}; it trains on without distprof\n")
            sys.stderr.flush()
            return None

    def _start_watchdog(self):
        """The hang watchdog when ``collector.hang_dump_s`` is set (None otherwise)."""
        limit = self.config["collector"]["hang_dump_s"]
        if limit is None:
            return None
        from .watchdog import HangWatchdog
        return HangWatchdog(lambda: (self.step_num, self._step_start), limit, self.out, self.rank,
                            self.world_size).start()

    def state(self, step: int | None = None) -> schedule_mod.State:
        """Schedule state of a step (the current one by default)."""
        step = self.step_num if step is None else step
        return schedule_mod.State.RECORD if self.schedule is None else self.schedule(step)

    def _follow_schedule(self) -> None:
        if self.state() in schedule_mod.RECORDING:
            self.collector.activate()
        else:
            self.collector.deactivate()

    def __exit__(self, exc_type, exc, traceback) -> None:
        """The stop. A rank that leaves through an exception commits its data, says so, and enters
        no collective: the other ranks may be inside the job's own collectives, waiting for it, and
        its error must end the job as it would without distprof. Every wait of the stop is bounded
        (transport.stop_exchange)."""
        if getattr(self, "_watchdog", None) is not None:
            self._watchdog.stop()
        self._end_step_nvtx()
        failure = None if exc_type is None else f"rank {self.rank} left the profiler through {exc_type.__name__}: {exc}"
        if self.collector is not None and not self.timer_only:
            self.collector.deactivate()
            if failure is not None:
                self.collector.set_meta(failed=failure)
                self.collector.close()  # nothing collected is lost, whatever happens next
                self._closed = True
        if failure is not None:
            sys.stderr.write(f"distprof: {failure}; " + (f"its steps are in {self.rank_file(self.rank)}\n"
                                                          if self.collector is not None else "\n"))
            sys.stderr.flush()
            self._abort_if_unhandled()
        try:
            if self.timer_only:
                self.summary = self._aggregate_timers(failure)
            elif self.collector is not None or self._unprofiled:
                # the exception (if any) propagates after this; an unprofiled rank's line reaches rank 0, and
                # so does a rank's whose writing stopped (rank 0 reads the steps it has, where it sees them)
                stopped = self.collector.failed if self.collector is not None else None
                self.summary = self._aggregate(failure or self._unprofiled or stopped)
        finally:
            if self._live is not None:
                # rank 0: a stop that wrote no summary, the view ends now; a node's sender: its last
                # windows (bounded), unless this rank failed
                from . import live
                live.stop(self._live, wait_s=0.5 if self._live.role == "view" or failure else None)
                self._live = None

    def _start_live(self) -> None:
        """The rolling view (distprof/live/): rank 0 starts the view, one rank of every other node its
        sender, separate processes reading their node's rank files. The node and rank 0's address
        are exchanged here, once; the training thread never waits for them after the start."""
        if self.config["live"]["every_steps"] <= 0:
            return
        from . import live
        node = str(outpaths.expand(self.config["live"]["node"], self.rank, outpaths.host_name()))
        if self.collector is not None:
            self.collector.set_meta(live_node=node)  # how a side process tells its node's rank files
        self._live = live.start_rank(self.rank, self.world_size, node, self._out_template, self.out, self.config,
                                     self._comm, self.quiet)

    def _abort_if_unhandled(self) -> None:
        """Under MPI, an exception that reaches the top of the program aborts the job once Python has
        printed it (as ``python -m mpi4py`` does): the ranks still in the job's collectives would
        otherwise wait for this one forever, and its MPI_Finalize for them. One the program catches
        aborts nothing."""
        if self._comm is None or self.world_size <= 1:
            return
        previous, comm = sys.excepthook, self._comm

        def hook(kind, value, trace) -> None:
            previous(kind, value, trace)
            sys.stderr.flush()
            comm.Abort(1)
        sys.excepthook = hook

    def rank_file(self, rank: int) -> Path:
        """A rank's native file: this rank's in its folder; another's where it is on this host."""
        folder = self.out if rank == getattr(self, "rank", None) else self._expand_out(rank)
        return folder / f"rank{rank}.sqlite"

    # -- steps and data loading ------------------------------------------------------------
    def step(self) -> None:
        """Close the current ProfileStep (handed to the collector's writer thread when recorded, so
        the training thread does not wait for SQLite), open the next. Without a schedule every step
        is recorded and the collector stays on: no state to look up or follow (the training thread
        pays every call here, and pays it cold, right after its wait for the GPU)."""
        now = clock_ns()
        self._end_step_nvtx()
        if self.timer_only:
            self.batch_ns.append(now - self._step_start)
            self.reader_ns.append(self._reader_in_step)
            self._reader_in_step = 0
        elif self.collector is not None and self.schedule is None:
            self.collector.record_id(_profile_step_id(), self._step_start, now)
            self.collector.submit()
            self.collector.step = self.step_num + 1
        elif self.collector is not None:
            self._scheduled_step(now)
        self.step_num += 1
        if self.collector is not None and self.schedule is not None:
            self._follow_schedule()
        self._begin_step(now)

    def _scheduled_step(self, now: int) -> None:
        """The step's end under a schedule: recorded when its state records, and a cycle's last step
        written before ``on_trace_ready``, which may read the file."""
        state = self.state()
        ready = state is schedule_mod.State.RECORD_AND_RETURN and self.on_trace_ready is not None
        if state in schedule_mod.RECORDING:
            self.collector.record_id(_profile_step_id(), self._step_start, now)
            self.collector.flush() if ready else self.collector.submit()
        self.collector.step = self.step_num + 1
        if ready:
            self.on_trace_ready(self)

    def loader(self, iterable: Iterable) -> Iterator:
        """Yield from ``iterable``, timing every ``next()`` as the Dataloader phase."""
        iterator = iter(iterable)
        name = self.config["phases"]["dataloader"]
        while True:
            timed = annotate.phase(name)
            timed.__enter__()
            started = clock_ns()
            try:
                item = next(iterator)
            except StopIteration:
                timed.cancel()  # the call that found the end is not a load
                return
            self._reader_in_step += clock_ns() - started
            timed.__exit__(None, None, None)
            yield item

    def _begin_step(self, now: int) -> None:
        self._step_start = now
        domain = annotate.nvtx_domain()
        self._step_domain = domain
        self._step_range = domain.start_range(self._step_attributes) if domain is not None else None

    def _end_step_nvtx(self) -> None:
        if self._step_range is not None:
            self._step_domain.end_range(self._step_range)
            self._step_range = None

    # -- clocks and aggregation ------------------------------------------------------------
    def _aggregate_timers(self, failure: str | None = None) -> dict | None:
        """timer_only: the benchmark figures of every rank (with any rank's failure line), to rank 0."""
        from .analyses import benchmark
        from .reports import export, text
        from .sections.benchmark import BenchmarkSummary, RankPerf
        own = benchmark.perf_summary(self.rank, self.batch_ns, self.reader_ns, self.batch_size).to_json()
        gathered = self._stop_exchange(failure, lambda participants: None, lambda: own)  # JSON over the link
        if gathered is None:
            return None
        parts, warnings = gathered
        ranks = [RankPerf.from_json(parts[r], f"rank {r}'s perf summary") for r in sorted(parts)]
        typed = BenchmarkSummary(world_size=self.world_size, source="distprof (timer only)",
                                 benchmark=benchmark.across_ranks(ranks), warnings=warnings)
        summary = typed.to_json()
        try:
            export.write_json(summary, self.out)
            if not self.quiet:
                sys.stdout.write(text.render_benchmark(typed))
                sys.stdout.flush()
        finally:
            if self._link() is not None:
                transport.tell_done(self._link(), self._failed)
                transport.drain(self._link())
        return summary

    def _link(self):
        """How this rank's stop talks to rank 0: MPI messages, the torch store, or None (files);
        made once per session (a store link numbers its keys by session)."""
        if self._stop_link is False:
            if self._comm is not None and self.world_size > 1:
                self._stop_link = transport.MpiLink(self._comm)
            else:
                self._stop_link = transport.torch_store_link(self.rank) if self.world_size > 1 else None
        return self._stop_link

    def _stop_exchange(self, failure: str | None, ready, payload) -> tuple[dict, list[str]] | None:
        """transport.stop_exchange over this rank's link; on rank 0 ({rank: payload}, warnings),
        else None. Without a link: this rank's own payload (one process) or None."""
        link = self._link()
        if link is None:
            if self.world_size > 1:
                return None
            ready([])
            return {0: payload()}, [failure] if failure else []
        timeout = float(self.config["collector"]["merge_timeout_s"])
        try:
            out = transport.stop_exchange(link, self.rank, self.world_size, failure, timeout, ready, payload)
        finally:
            transport.drain(link)
        if out is None:
            return None
        parts, failed, gave_up = out
        self._failed, self._failure_lines = sorted(failed), dict(failed)
        warnings = ([failure] if failure else []) + [failed[r] or f"rank {r} failed" for r in sorted(failed)]
        if gave_up:
            warnings.append(f"rank(s) {', '.join(map(str, gave_up))} did not reach the end of the profiler within "
                            f"{timeout:g} s (collector.merge_timeout_s): left out, their files kept")
        return parts, warnings

    def _clock_sample(self, phase: str) -> None:
        if self._comm is not None and self.world_size > 1:
            offset_ns, rtt_ns = clock.pingpong(self._comm, self.config["clock"]["pingpong_samples"])
            if self.collector is not None:
                self.collector.record_clock(phase, offset_ns, rtt_ns)

    def _share_run_id(self) -> None:
        """Rank 0's random id for this run, given to every rank at the start (MPI only: a buffer
        broadcast, nothing pickled) and written in each rank file beside the launcher's ids, so
        ``merge`` tells two runs' files apart in one folder whatever the launcher (MPICH's Hydra
        gives none)."""
        if self._comm is None or self.world_size <= 1:
            return
        import os

        import numpy as np
        run_id = np.frombuffer(os.urandom(16) if self.rank == 0 else bytes(16), np.uint8).copy()
        self._comm.Bcast(run_id, root=0)
        if self.collector is not None:
            self.collector.add_launcher_id("distprof_run", run_id.tobytes().hex())

    def _own_result(self, failure: str | None):
        """This rank's RankResult; None when a failing rank's file cannot be reduced."""
        from . import pipeline
        try:
            return pipeline.reduce_rank(native.read(self.rank_file(self.rank), self.config, own=True)[0], self.config)
        except Exception:  # noqa: BLE001 - the user's exception is the one to report
            if failure is None:
                raise
            return None

    def _stop_sample(self, participants: list[int]) -> None:
        """The stop clock sample with the ranks that take part (MPI), then the file is complete."""
        if self._comm is not None and self.world_size > 1 and (self.rank != 0 or participants):
            offset_ns, rtt_ns = clock.pingpong(self._comm, self.config["clock"]["pingpong_samples"], participants)
            if self.rank != 0 and self.collector is not None:
                self.collector.record_clock("stop", offset_ns, rtt_ns)
        self._close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.collector is not None:
                self.collector.close()

    def _failed_results(self) -> list:
        """Rank 0: the results of the ranks that failed, from their files where this host sees them
        (their data up to the failure); a file it cannot read leaves the rank's failure line."""
        from . import pipeline
        out = []
        for rank in self._failed:  # one per failed rank
            path = self.rank_file(rank)
            if rank != self.rank and path.exists():
                try:
                    out.append(pipeline.reduce_rank(native.read(path, self.config, own=True)[0], self.config))
                except Exception:  # noqa: BLE001 - a failed rank's file may be cut short: its warning stays
                    continue
        return out

    def _aggregate(self, failure: str | None = None) -> dict | None:
        """Reduce this rank's own file, send it to rank 0 (bounded), combine there. A rank that
        failed sends only its failure line: rank 0 names it and reads its file where it can. The
        analysis stack loads only where a result is made (a failed rank never waits for its import)."""
        try:
            if self._link() is None and self.world_size > 1:
                from . import pipeline
                self._stop_sample([])
                result = self._own_result(failure)
                results = transport.results_from_files(
                    self.rank_file, self.world_size, self.config["collector"]["merge_timeout_s"], result,
                    lambda path: pipeline.reduce_rank(native.read(path, self.config, own=True)[0], self.config)) \
                    if self.rank == 0 else None
                warnings = [failure] if failure is not None else []
            else:
                gathered = self._stop_exchange(failure, self._stop_sample, lambda: self._own_result(failure))
                if gathered is None:
                    return None
                parts, warnings = gathered
                failed = self._failed_results()  # their files name their failure themselves
                results = [parts[r] for r in sorted(parts)] + failed
                # a failed rank's line is said once: by its file where the file could record it (a full
                # disk leaves it unsaid there), else here
                said = {line for r in failed if (line := self._failure_lines.get(r.rank)) and
                        any(line in warning for warning in r.warnings if isinstance(warning, str))}
                warnings = [w for w in warnings if w not in said]
        finally:
            self._close()
        try:
            return self._write_summary(results, warnings)
        finally:
            if self.rank == 0 and self._link() is not None:
                transport.tell_done(self._link(), self._failed)
                transport.drain(self._link())

    def _write_summary(self, results: list | None, warnings: list[str]) -> dict | None:
        """Rank 0: combine, write summary.json and report.html, print the Distributed Summary; returns
        summary.json's content (what ``stop()`` has always returned)."""
        from . import pipeline
        results = None if results is None else [r for r in results if r is not None]
        if not results:
            return None
        from msgspec.structs import replace

        from . import live
        from .sections.machine import Live
        live_record, self._live = live.stop(self._live), None  # every rank file is complete by now
        summary = pipeline.combine(results, self.config, source="distprof (live)", world_size=self.world_size,
                                   warnings=warnings)
        if live_record is not None:  # only a session with the live view on has one
            summary = replace(summary, live=Live.from_json(live_record))
        from .reports import export, findings, html, text
        summary = findings.worded(summary)
        export.write_summary(summary, self.out)
        report = html.write_report(summary, self.out)
        if not self.quiet:
            sys.stdout.write(text.render(summary))
            sys.stdout.write(f"\n{export.written_line(summary, self.out)}\nwrote {printable(report)}\n"
                             f"{text.next_steps(self.out)}\n")
            sys.stdout.flush()
        return summary.to_json()
