"""The user's session: ``with distprof.Profiler(...) as prof:`` turns the collector and NVTX on,
marks steps, and on exit gathers every rank's compact results to rank 0, which prints the
Distributed Summary and writes ``summary.json``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import annotate, clock, transport
from . import config as config_mod
from . import events as ev
from . import schedule as schedule_mod
from .collector import Collector, clock_ns
from .sources import native


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
        self.out = Path(out if out is not None else self.config["out"])
        self.quiet = quiet
        self.summary: dict | None = None
        self.collector: Collector | None = None
        self._comm = None
        self._step_start = 0
        self._step_range = None
        self._step_attributes = annotate.event_attributes(ev.PROFILE_STEP, ev.PHASE)

    # -- session ---------------------------------------------------------------------------
    def __enter__(self) -> Profiler:
        self._comm = transport.mpi_world()
        self.rank, self.world_size, self.rank_from = transport.detect_world()
        if self.rank_from != "MPI":  # MPI's singleton world in a torchrun/Slurm job: not the job's world
            self._comm = None
        annotate.set_nvtx(self.config["collector"]["nvtx"])
        if self.config["collector"]["enabled"] and not self.timer_only:
            self.collector = Collector(self.rank_file(self.rank), self.rank, self.world_size)
            self._clock_sample("start")
            self._follow_schedule()
        self._begin_step(clock_ns())
        self._watchdog = self._start_watchdog()
        return self

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
        if getattr(self, "_watchdog", None) is not None:
            self._watchdog.stop()
        self._end_step_nvtx()
        failure = None if exc_type is None else f"rank {self.rank} left the profiler through {exc_type.__name__}: {exc}"
        if self.timer_only:  # a failing rank still takes part in the gather, or the others wait on it
            self.summary = self._aggregate_timers(failure)
            return
        if self.collector is None:
            return
        self.collector.deactivate()
        if failure is not None:
            self.collector.set_meta(failed=failure)
        try:
            self._clock_sample("stop")  # collective: a failing rank still takes part, or the others hang
        finally:
            self.collector.close()
        self.summary = self._aggregate(failure)  # the exception (if any) propagates after this

    def rank_file(self, rank: int) -> Path:
        return self.out / f"rank{rank}.sqlite"

    # -- steps and data loading ------------------------------------------------------------
    def step(self) -> None:
        """Close the current ProfileStep (and write it to disk when recorded), open the next."""
        now = clock_ns()
        self._end_step_nvtx()
        if self.timer_only:
            self.batch_ns.append(now - self._step_start)
            self.reader_ns.append(self._reader_in_step)
            self._reader_in_step = 0
        elif self.collector is not None:
            state = self.state()
            if state in schedule_mod.RECORDING:
                self.collector.record(ev.PROFILE_STEP, ev.PHASE, ev.RANGE, self._step_start, now)
                self.collector.flush()
            self.collector.step = self.step_num + 1
            if state is schedule_mod.State.RECORD_AND_RETURN and self.on_trace_ready is not None:
                self.on_trace_ready(self)
        self.step_num += 1
        if self.collector is not None:
            self._follow_schedule()
        self._begin_step(now)

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
        """timer_only: the benchmark figures of every rank (with any rank's failure line), gathered to rank 0."""
        from .analyses import benchmark
        from .reports import export, text
        own = {"rank": self.rank, **benchmark.perf_summary(self.batch_ns, self.reader_ns, self.batch_size)}
        if self._comm is not None:
            parts = transport.gather_to_root(self._comm, (own, failure))
        elif transport.torch_group_initialized():
            parts = transport.gather_torch((own, failure))
        else:
            parts = [(own, failure)] if self.rank == 0 else None
        if parts is None:
            return None
        summary = {"world_size": self.world_size, "source": "distprof (timer only)",
                   "benchmark": benchmark.across_ranks([figures for figures, _ in parts]),
                   "warnings": [line for _, line in parts if line is not None]}
        export.write_json(summary, self.out)
        if not self.quiet:
            sys.stdout.write(text.render_benchmark(summary))
            sys.stdout.flush()
        return summary

    def _clock_sample(self, phase: str) -> None:
        if self._comm is not None and self.world_size > 1:
            offset_ns, rtt_ns = clock.pingpong(self._comm, self.config["clock"]["pingpong_samples"])
            self.collector.record_clock(phase, offset_ns, rtt_ns)

    def _own_result(self, failure: str | None):
        """This rank's RankResult; None when a failing rank's file cannot be reduced (it still
        takes part in the gather so the others do not wait on it)."""
        from . import pipeline
        try:
            return pipeline.reduce_rank(native.read(self.rank_file(self.rank), self.config)[0], self.config)
        except Exception:  # noqa: BLE001 - the user's exception is the one to report
            if failure is None:
                raise
            return None

    def _aggregate(self, failure: str | None = None) -> dict | None:
        """Reduce this rank's own file, gather to rank 0, combine there. A rank that failed
        sends its result with a failure line: rank 0 names it in the summary's warnings."""
        from . import pipeline  # the analysis stack loads at the end of a session, not at import
        result = self._own_result(failure)
        warnings = [failure] if failure is not None and result is None else []
        if self._comm is not None or transport.torch_group_initialized():
            mine = (result, failure if result is None else None)  # a result carries its file's failure line
            parts = transport.gather_to_root(self._comm, mine) if self._comm is not None \
                else transport.gather_torch(mine)
            if parts is None:
                return None
            results = [r for r, _ in parts if r is not None]
            warnings = [f for _, f in parts if f is not None]
        elif self.world_size > 1:
            results = transport.results_from_files(
                self.rank_file, self.world_size, self.config["collector"]["merge_timeout_s"], result,
                lambda path: pipeline.reduce_rank(native.read(path, self.config)[0], self.config)) \
                if self.rank == 0 else None
        else:
            results = [result]
        results = None if results is None else [r for r in results if r is not None]
        if not results:
            return None
        summary = pipeline.combine(results, self.config, source="distprof (live)", world_size=self.world_size,
                                   warnings=warnings).to_json()
        from .reports import export, html, text
        export.write_summary(summary, self.out)
        html.write_report(summary, self.out)
        if not self.quiet:
            sys.stdout.write(text.render(summary))
            sys.stdout.flush()
        return summary


