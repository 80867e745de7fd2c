"""How often distprof's straggler verdict is right on real jobs with injected faults (issue 36).

Jobs: the demo's topologies (``distprof demo --topology T --ranks 4``: dp, tp2dp2, pp4; MPI, numpy) and
real torch jobs (benchmarks/_fault_jobs.py under torchrun, CPU, gloo, torch.profiler, merged with
``distprof merge``: tpdp, pp (4 ranks), ddp (2 ranks), fsdp (FSDP2 ``fully_shard``, 2 ranks) and moe
(expert-parallel ``all_to_all_single`` with uneven splits + a data-parallel all_reduce, 4 ranks);
``--ranks fsdp=N,moe=N`` sets those two's world size). Per job: a clean run first (its median step
time sets the fault sizes), then every fault kind (demo: forward, data; torch: forward, data, comm,
once; moe also router_skew) x size (5, 10, 25, 50% of that step) x onset (start: step 0; mid: half-way),
with clean runs spread among them (``--kinds`` keeps some kinds only). Runs go one at a time. Each run's
verdict is ``summary.json``'s ``skew.straggler`` (rank, cost_ns, pattern, onset_step when the analysis
gives one).

``router_skew`` (moe; one run per onset, no size): from the onset on, the router sends one rank's expert 2x
the tokens of each other's (``_fault_jobs.py --router-skew``). Its right verdict is an ``expert_imbalance``
finding in ``summary.json`` ``findings`` whose first rank is that one (and no straggler but that rank);
its cost is that finding's ``cost_ns``. A distprof without that finding scores these runs as missed. Any
other run with an ``expert_imbalance`` finding is wrong (a clean run's experts are evenly loaded).

Scored: recall (faults >= 10% of the step: the injected rank named; and, as a second figure, faults whose
measured effect on the steps they are in is >= 10% of the clean step: a dataloader sleep on a pipeline's
last stage hides in its bubble and costs nothing), precision (named ranks that are the
injected one / all named, clean and one-off runs included), false stragglers per clean run, and |cost_ns
- measured effect| / measured effect, where measured effect = median step time of the faulty run - that
of its paired clean runs (the job's clean runs just before and after it, averaged; a mid-run fault: the
median of its faulty steps, per step where the verdict is "since step" k as cost_ns then is, else spread
over the profiled steps), from the rank files themselves (Kineto ``ProfilerStep#N``, the demo's
``ProfileStep`` rows), only for jobs whose ranks have a core each (a rank that waits frees a core for
the others otherwise). A ``once`` fault is a one-off: the right verdict is no straggler. The demo jobs
run with the live view on (``--live-every`` ``LIVE_EVERY``): its detection latency is the steps from the
fault's onset to the end of the window whose alert first names the injected rank (live.json ``alerts``),
and its false alerts are straggler alerts in clean runs.

``--demo-config YAML`` runs the demo jobs with that config, e.g. ``configs/demo_device.yaml``: compute as
a GPU job's host sees it (small matmuls, each followed by a 2 ms wait that uses no CPU), so 4 ranks on a
2-core machine do not slow each other at random and the verdict, not the machine, is what is scored.
``--kernel-ms MS`` does the same for the torch jobs (``_fault_jobs.py --kernel-ms``: small models, an MS ms
wait after every matmul, forward and backward). The scheduler still moves a rank by a few ms a step on
shared cores, whatever the step's length: ``configs/demo_device_8ms.yaml`` with ``--kernel-ms 8`` makes
steps of about 100 ms, where a fault of 10% of the step is above that noise (docs/diagnosis.md).

    python benchmarks/verdict_matrix.py [--quick] [--jobs dp,ddp,tpdp] [--kinds forward,router_skew] [--repeat K]
                                        [--clean N] [--keep DIR] [--json PATH] [--demo-config YAML]
                                        [--kernel-ms MS] [--ranks fsdp=N,moe=N]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DISTPROF = next((str(path) for path in (Path(sys.executable).with_name("distprof"), HERE.parent / ".venv/bin/distprof")
                 if path.exists()), shutil.which("distprof") or "distprof")
DEMO_JOBS = ("dp", "tp2dp2", "pp4", "dp2")
TOPOLOGY = {"dp2": "dp"}  # a demo job's topology where its name is not one (dp2: the dp demo on 2 ranks)
TORCH_JOBS = ("tpdp", "pp", "ddp", "fsdp", "moe")
RANKS = {"dp": 4, "tp2dp2": 4, "pp4": 4, "dp2": 2, "tpdp": 4, "pp": 4, "ddp": 2, "fsdp": 2, "moe": 4}
FREE_RANKS = ("fsdp", "moe")  # jobs whose world size --ranks sets
KINDS = {"demo": ("forward", "data"), "torch": ("forward", "data", "comm", "once"),
         "moe": ("forward", "data", "comm", "once", "router_skew"), "dp2": ("forward", "data", "neighbour")}
ROUTER_SKEW, IMBALANCE = "router_skew", "expert_imbalance"  # the fault kind and the finding that names it
NEIGHBOUR = "neighbour"  # dp2: a CPU-bound process pinned to one rank's core (distprof demo --neighbour RANK)
ALL_KINDS = ("forward", "data", "comm", "once", ROUTER_SKEW, NEIGHBOUR)
SIZES, QUICK_SIZES = (0.05, 0.10, 0.25, 0.50), (0.25,)
ONSETS = ("start", "mid")
RECALL_MIN = 0.10  # recall counts faults of at least this share of the step
LIVE_EVERY = 2  # the demo jobs' live window, in steps
STRAGGLER_NOTE = re.compile(r"straggler|unconfirmed|late rank|transient|rotates|spread|unverified|not matched|"
                            r"no collective matched|process group", re.IGNORECASE)
NOISE_NOTE = re.compile(r"sync/transfer split disagree")  # alignment detail, not why a rank is (not) named
GROUP_WARNING = re.compile(r"process groups? could not|not matched|no collective matched", re.IGNORECASE)


@dataclass
class Run:
    """One run of the matrix and its verdict."""

    job: str
    kind: str  # clean, or a fault kind
    size: float | None = None  # share of the clean step time
    onset: str | None = None
    rank: int | None = None  # the injected rank
    fault_ms: float | None = None
    fault_step: int | None = None
    spec: str | None = None  # the --straggler / --fault text
    expected: int | None = None  # the rank a right verdict names (None: no straggler)
    named: int | None = None
    cost_ns: float | None = None
    unconfirmed: int | None = None  # skew.unconfirmed_straggler's rank: the floor's, not the waits' verdict
    cost_share: float | None = None
    pattern: str | None = None
    onset_step: int | None = None
    step_ns: float | None = None  # median step time of this run (rank files)
    step_times_ns: list[float] = field(default_factory=list)
    clean_step_ns: float | None = None  # the paired clean runs' (see pair)
    measured_ns: float | None = None
    cost_error: float | None = None
    wall_s: float | None = None
    busy_cores: float | None = None  # cores busy with other processes just before the run (other users' jobs)
    commands: list[str] = field(default_factory=list)
    error: str | None = None
    said: list[str] = field(default_factory=list)  # what distprof said when the verdict is wrong
    live_alerts: list[int] = field(default_factory=list)  # demo jobs: ranks of the live view's straggler alerts
    live_latency: int | None = None  # steps from onset to the end of the window alerting the injected rank
    imbalance: list[int] | None = None  # the expert_imbalance finding's ranks (None: no such finding)
    host_busy: bool | None = None  # the straggler's host was busy (skew.straggler.host.busy; None: not said)

    @property
    def faulty(self) -> bool:
        return self.kind not in ("clean", "once")

    @property
    def right(self) -> bool:
        """A router skew: the imbalance finding names the rank first, no straggler but it; any other run: the
        straggler verdict is the expected one and no imbalance finding stands."""
        if self.kind == ROUTER_SKEW:
            return bool(self.imbalance) and self.imbalance[0] == self.expected and self.named in (None, self.expected)
        if self.kind == NEIGHBOUR:  # the rank, and the cause: its host was busy
            return self.named == self.expected and bool(self.host_busy) and self.imbalance is None
        return self.named == self.expected and self.imbalance is None


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(DEMO_JOBS + TORCH_JOBS),
                        help=f"comma-separated, of {', '.join(DEMO_JOBS + TORCH_JOBS)} (default: all)")
    parser.add_argument("--kinds", default=None, metavar="K,K",
                        help=f"only these fault kinds (of {', '.join(ALL_KINDS)}; default: all of each job's)")
    parser.add_argument("--onset-steps", default=None, metavar="K,K",
                        help="mid-run faults from these profiled steps (each 1..steps-2) in place of half-way: "
                             "onsets at any step, e.g. 2,3,4")
    parser.add_argument("--ranks", default="", metavar="JOB=N,JOB=N",
                        help=f"world size of {', '.join(FREE_RANKS)} (default: "
                             f"{', '.join(f'{job}={RANKS[job]}' for job in FREE_RANKS)})")
    parser.add_argument("--quick", action="store_true", help="one size (25%%) per kind, 4 clean runs in all")
    parser.add_argument("--repeat", type=int, default=1, metavar="K", help="run each fault K times")
    parser.add_argument("--clean", type=int, default=None, metavar="N",
                        help="clean runs in all, spread over the jobs (default 20; --quick 4), at least 1 a job")
    parser.add_argument("--steps", type=int, default=8, help="profiled steps a run (mid-run onset: STEPS // 2)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep every run's files here")
    parser.add_argument("--json", default=None, metavar="PATH", help="write every run's raw verdict here")
    parser.add_argument("--demo-config", default=None, metavar="YAML",
                        help="config of the demo jobs (e.g. configs/demo_device.yaml: compute as a GPU's host sees it)")
    parser.add_argument("--kernel-ms", type=float, default=0.0, metavar="MS",
                        help="torch jobs: small models, a wait of MS ms after every matmul (as for a GPU kernel)")
    args = parser.parse_args(argv)
    if args.kernel_ms < 0:
        parser.error(f"--kernel-ms: a wait of at least 0 ms, not {args.kernel_ms:g}")
    args.jobs = [job.strip() for job in args.jobs.split(",") if job.strip()]
    unknown = [job for job in args.jobs if job not in RANKS]
    if unknown:
        parser.error(f"--jobs: unknown {', '.join(unknown)} (known: {', '.join(RANKS)})")
    args.clean = args.clean if args.clean is not None else (4 if args.quick else 20)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()] if args.kinds else None
    try:
        steps_at = [int(k) for k in args.onset_steps.split(",") if k.strip()] if args.onset_steps else []
    except ValueError:
        parser.error(f"--onset-steps: expected K,K, got {args.onset_steps!r}")
    if any(not 1 <= k <= args.steps - 2 for k in steps_at):
        parser.error(f"--onset-steps: each from 1 to {args.steps - 2} (--steps {args.steps})")
    args.onsets = ["start", *(f"step{k}" for k in steps_at)] if steps_at else list(ONSETS)
    if args.kinds and set(args.kinds) - set(ALL_KINDS):
        parser.error(f"--kinds: unknown {', '.join(sorted(set(args.kinds) - set(ALL_KINDS)))} "
                     f"(known: {', '.join(ALL_KINDS)})")
    try:
        args.ranks = {job: int(n) for job, _, n in (item.partition("=") for item in args.ranks.split(",") if item)}
    except ValueError:
        parser.error(f"--ranks: expected JOB=N,JOB=N, got {args.ranks!r}")
    if any(job not in FREE_RANKS or n < 2 for job, n in args.ranks.items()):
        parser.error(f"--ranks: 2 or more ranks, for {' or '.join(FREE_RANKS)} only")
    return args


def demo_has_topology() -> bool:
    """Whether this distprof's demo takes ``--topology`` (another change adds it)."""
    text = subprocess.run([DISTPROF, "demo", "--help"], capture_output=True, text=True).stdout
    return "--topology" in text


def fault_spec(run: Run, demo: bool) -> str:
    """``RANK:MS@STEP`` + the demo's ``:data`` suffix or the torch job's ``:where``; a router skew ``RANK@STEP``."""
    if run.kind == ROUTER_SKEW:
        return f"{run.rank}@{run.fault_step}"
    if run.kind == NEIGHBOUR:
        return str(run.rank)
    spec = f"{run.rank}:{run.fault_ms:g}@{run.fault_step}"
    if demo:
        return spec + (":data" if run.kind == "data" else "")
    return f"{spec}:{run.kind}"


def busy_cores(seconds: float = 0.5) -> float | None:
    """Cores busy over ``seconds`` (/proc/stat), taken between runs: other processes' load on the machine."""

    def sample() -> tuple[int, int]:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    busy = 1.0 - (idle1 - idle0) / max(total1 - total0, 1)
    return busy * (os.cpu_count() or 1)


def execute(command: list[str], label: str, run: Run) -> float:
    """Run one command (noted on ``run``), its output kept out of the table; its wall time (s). Raises with its
    output's tail on failure."""
    run.commands.append(" ".join(command))
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-600:]
        raise RuntimeError(f"{label} failed (exit {done.returncode}): {' '.join(command)}\n{tail}")
    return time.perf_counter() - started


def run_job(run: Run, folder: Path, steps: int, topology_flag: bool,
            demo_config: str | None = None, kernel_ms: float = 0.0) -> tuple[Path, list[Path]]:
    """Run one job (demo, or torch job + merge) into ``folder``: (summary folder, rank files)."""
    folder.mkdir(parents=True, exist_ok=True)
    run.busy_cores = busy_cores()
    if run.job in DEMO_JOBS:
        command = [DISTPROF, "demo", "--ranks", str(RANKS[run.job]), "--steps", str(steps), "--out", str(folder)]
        command += ["--topology", TOPOLOGY.get(run.job, run.job)] if topology_flag else []
        command += [("--neighbour" if run.kind == NEIGHBOUR else "--straggler"), run.spec] if run.spec else []
        command += ["--config", str(demo_config)] if demo_config else []
        run.wall_s = execute(command + ["--live-every", str(LIVE_EVERY)], "demo", run)
        read_live(run, folder / "live.json")
        return folder, sorted(folder.glob("rank*.sqlite"))
    traces = folder / "traces"
    fault = "--router-skew" if run.kind == ROUTER_SKEW else "--fault"
    command = [sys.executable, str(HERE / "_fault_jobs.py"), "--topology", run.job, "--steps", str(steps),
               "--out", str(traces), *([fault, run.spec] if run.spec else []),
               *(["--kernel-ms", f"{kernel_ms:g}"] if kernel_ms else []),
               *(["--ranks", str(RANKS[run.job])] if run.job in FREE_RANKS else [])]
    run.wall_s = execute(command, "torch job", run)
    files = sorted(traces.glob("rank*.pt.trace.json.gz"))
    merged = folder / "merged"
    run.wall_s += execute([DISTPROF, "merge", *map(str, files), "-o", str(merged), "--no-html"], "merge", run)
    return merged, files


def read_live(run: Run, path: Path) -> None:
    """The live view's straggler alerts (ranks, in order) and, for a fault, its detection latency."""
    if not path.exists():
        return
    alerts = [a for a in json.loads(path.read_text()).get("alerts") or [] if a.get("code") == "straggler"]
    run.live_alerts = [int(a["rank"]) for a in alerts]
    hit = next((a for a in alerts if run.faulty and a["rank"] == run.expected), None)
    if hit is not None:
        run.live_latency = int(hit["steps"][1]) - int(run.fault_step or 0) + 1


def step_times(files: list[Path]) -> list[float]:
    """Per profiled step, in order, the median over ranks of its duration (ns), read from the rank files
    themselves: Kineto ``ProfilerStep#N`` events, the demo's ``ProfileStep`` rows."""
    per_rank: list[dict[int, float]] = []
    for path in files:
        if path.suffix == ".sqlite":
            # closed, not only committed; a finished rank file is one file (rollback journal): mode=ro adds nothing
            with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
                rows = db.execute("SELECT r.step, r.end_ns - r.start_ns FROM distprof_ranges r JOIN distprof_names n "
                                  "ON n.id = r.name_id WHERE n.name = 'ProfileStep'").fetchall()
            per_rank.append({int(step): float(ns) for step, ns in rows})
        else:
            with gzip.open(path) as handle:
                events = json.load(handle)["traceEvents"]
            per_rank.append({int(m.group(1)): float(e["dur"]) * 1000 for e in events if e.get("ph") == "X" and
                             (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name"))))})
    common = sorted(set.intersection(*(set(steps) for steps in per_rank))) if per_rank else []
    return [statistics.median(steps[k] for steps in per_rank) for k in common]


def read_imbalance(run: Run, summary: dict) -> str | None:
    """The expert_imbalance finding's ranks into ``run`` (a router skew: its cost too, per profiled step);
    what to say of it when the verdict is wrong (None: nothing)."""
    findings = summary.get("findings") or []
    found = next((f for f in findings if f.get("finding") == IMBALANCE), None)
    run.imbalance = [int(rank) for rank in found.get("ranks") or []] if found else None
    if run.kind == ROUTER_SKEW:
        run.cost_ns, run.cost_share = (found or {}).get("cost_ns"), (found or {}).get("saving_share")
        run.pattern = run.onset_step = None
        if found is None:
            codes = sorted({str(f.get("finding")) for f in findings})
            return f"no {IMBALANCE} finding (findings: {', '.join(codes) or 'none'})"
    return f"{IMBALANCE} finding: ranks {run.imbalance}: {found.get('message')}" if found else None


def read_verdict(run: Run, summary_dir: Path) -> None:
    """The straggler verdict of ``summary.json`` into ``run``; what distprof said when it is wrong."""
    summary = json.loads((summary_dir / "summary.json").read_text())
    skew = summary.get("skew") or {}
    straggler = skew.get("straggler") or {}
    run.named, run.cost_ns = straggler.get("rank"), straggler.get("cost_ns")
    run.cost_share, run.pattern, run.onset_step = (straggler.get("cost_share"), straggler.get("pattern"),
                                                   straggler.get("onset_step"))
    run.host_busy = (straggler.get("host") or {}).get("busy")
    unconfirmed = skew.get("unconfirmed_straggler") or {}
    run.unconfirmed = unconfirmed.get("rank")
    imbalance = read_imbalance(run, summary)
    if run.right:
        return
    notes = [note for note in skew.get("notes") or [] if not NOISE_NOTE.search(note)]
    if unconfirmed:  # the waits pointed at a rank whose fix the replay prices under the floor
        notes.insert(0, f"unconfirmed: rank {unconfirmed['rank']}, replay saving "
                        f"{100 * (unconfirmed.get('share') or 0):.1f}% of the step, under "
                        f"{100 * (unconfirmed.get('floor') or 0):.0f}%")
    said = [note for note in notes if STRAGGLER_NOTE.search(note)] or notes
    said += [f"finding: {f.get('message')}" for f in summary.get("findings") or [] if f.get("finding") == "straggler"]
    said += [f"warning: {w}" for w in (summary.get("warnings") or [])[:4] if GROUP_WARNING.search(w)][:1]
    if not straggler and not said:
        why = next((s.get("why") for s in (summary.get("whatif") or {}).get("scenarios") or []
                    if s.get("name") == "no_straggler"), None)
        said = [f"no straggler: {why or 'no note'}"]
    run.said = ([imbalance] if imbalance else []) + said


def cores_each(job: str) -> bool:
    """Whether every rank of the job has a core of this machine (else a waiting rank frees a core for others)."""
    return RANKS[job] <= (os.cpu_count() or 1)


def measure(run: Run, clean_step_ns: float | None) -> None:
    """For a fault: the measured effect against its paired clean step time and, where the ranks have a core
    each and the right rank is named, the cost's error. A mid-run fault's effect is the one on its steps,
    per step, where the verdict names the straggler "since step" k (its cost_ns is then per step since its
    onset); otherwise times their share of the profiled steps (cost_ns is then per profiled step)."""
    if not run.faulty or clean_step_ns is None or not run.step_times_ns:
        return
    run.clean_step_ns = clean_step_ns
    if run.onset == "start":
        run.measured_ns = run.step_ns - clean_step_ns
    else:
        late = run.step_times_ns[run.fault_step:]
        share = 1.0 if run.pattern == "since step" else len(late) / len(run.step_times_ns)
        run.measured_ns = (statistics.median(late) - clean_step_ns) * share
    if cores_each(run.job) and run.right and run.cost_ns is not None and run.measured_ns > 0:
        run.cost_error = abs(run.cost_ns - run.measured_ns) / run.measured_ns


def pair(runs: list[Run]) -> None:
    """Pair each faulty run of one job with its clean neighbours (the last clean run before it and the first
    after it: the mean of their median step times, which cancels a slow drift of the machine) and measure."""
    clean = [(index, run.step_ns) for index, run in enumerate(runs) if run.kind == "clean" and run.step_ns]
    for index, run in enumerate(runs):
        before = [ns for at, ns in clean if at < index][-1:]
        after = [ns for at, ns in clean if at > index][:1]
        near = before + after
        measure(run, statistics.fmean(near) if near else None)


def onset_step(onset: str, steps: int) -> int:
    """The profiled step a fault starts at: ``start`` 0, ``mid`` half-way, ``stepK`` K (--onset-steps)."""
    return 0 if onset == "start" else steps // 2 if onset == "mid" else int(onset.removeprefix("step"))


def plan(job: str, step_ns: float, args: argparse.Namespace, cleans: int) -> list[Run]:
    """The job's fault runs (kind x size x onset x repeat, the injected rank cycling 1, 2, ..., 0; a router
    skew has no size) with ``cleans`` clean runs spread evenly among them."""
    kinds = KINDS[job if job in KINDS else "demo" if job in DEMO_JOBS else "torch"]
    order = [*range(1, RANKS[job]), 0]
    faults: list[Run] = []
    for kind in [kind for kind in kinds if args.kinds is None or kind in args.kinds]:
        for size in [None] if kind in (ROUTER_SKEW, NEIGHBOUR) else QUICK_SIZES if args.quick else SIZES:
            for onset in ["start"] if kind == NEIGHBOUR else args.onsets:
                for _ in range(args.repeat):
                    rank = order[len(faults) % len(order)]
                    ms = None if size is None else round(size * step_ns / 1e6, 1)
                    run = Run(job, kind, size, onset, rank, ms, onset_step(onset, args.steps),
                              expected=None if kind == "once" else rank)
                    run.spec = fault_spec(run, job in DEMO_JOBS)
                    faults.append(run)
    runs: list[Run] = [Run(job, "clean") for _ in range(0 if faults else cleans)]
    for index, run in enumerate(faults):
        runs.append(run)
        due = (index + 1) * cleans // len(faults) - index * cleans // len(faults)
        runs += [Run(job, "clean") for _ in range(due)]
    return runs


def label(run: Run) -> str:
    """``ddp forward 25% mid (1:9.2@4:forward)``; ``moe router_skew mid (1@4)``."""
    if run.kind == "clean":
        return f"{run.job} clean"
    size = "" if run.size is None else f" {100 * run.size:.0f}%"
    return f"{run.job} {run.kind}{size} {run.onset} ({run.spec})"


def attempt(run: Run, folder: Path, args: argparse.Namespace, topology_flag: bool) -> None:
    """One run: the job, its verdict, its step times; a failure is recorded on the run, not raised."""
    try:
        summary_dir, files = run_job(run, folder, args.steps, topology_flag, args.demo_config, args.kernel_ms)
        read_verdict(run, summary_dir)
        run.step_times_ns = step_times(files)
        run.step_ns = statistics.median(run.step_times_ns) if run.step_times_ns else None
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        run.error = str(error)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    verdict = (f"ERROR {run.error.splitlines()[0][:160]}" if run.error else
               f"named {run.named if run.named is not None else 'none'}"
               + (f" cost {run.cost_ns / 1e6:.1f} ms" if run.cost_ns is not None else "")
               + f" step {run.step_ns / 1e6 if run.step_ns else float('nan'):.1f} ms"
               + ("" if run.right else f"  WRONG (expected {run.expected if run.expected is not None else 'none'})"))
    busy = f"{run.busy_cores:.1f}" if run.busy_cores is not None else "?"
    print(f"  {label(run)}: {verdict} [{run.wall_s or 0:.1f} s; other processes busy on {busy} cores before it]",
          file=sys.stderr, flush=True)


def run_matrix(args: argparse.Namespace, base: Path) -> list[Run]:
    """Every job in turn: its clean calibration run, then its planned runs, one at a time."""
    topology_flag = demo_has_topology()
    runs: list[Run] = []
    jobs = [job for job in args.jobs if TOPOLOGY.get(job, job) == "dp" or job not in DEMO_JOBS or topology_flag]
    for job in sorted(set(args.jobs) - set(jobs)):
        print(f"skipped {job}: this distprof's demo has no --topology", file=sys.stderr)
    for position, job in enumerate(jobs):
        cleans = args.clean // len(jobs) + (position < args.clean % len(jobs))
        calibration = Run(job, "clean")
        print(f"{job}: calibration (clean) run", file=sys.stderr, flush=True)
        attempt(calibration, base / f"{len(runs):03d}_{job}_clean", args, topology_flag)
        runs.append(calibration)
        if calibration.error or not calibration.step_ns:
            print(f"skipped {job}: its clean run failed", file=sys.stderr)
            continue
        planned = plan(job, calibration.step_ns, args, max(cleans - 1, 0))
        print(f"{job}: clean step {calibration.step_ns / 1e6:.1f} ms; {len(planned)} runs", file=sys.stderr)
        unsupported: set[str] = set()
        for number, run in enumerate(planned, start=len(runs)):
            if run.kind in unsupported:
                run.error = f"skipped: the {run.kind} fault failed on this job"
            else:
                name = "_".join([f"{number:03d}", job, run.kind, *([run.onset] if run.onset else [])])
                attempt(run, base / name, args, topology_flag)
                if run.error and run.kind != "clean":
                    unsupported.add(run.kind)
        pair([calibration, *planned])
        runs += planned
    return runs


def share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "-"


def injected_error(run: Run) -> float | None:
    """|cost_ns - the delay injected| / that delay, per step as the cost is (a mid-run fault named persistent:
    times the share of profiled steps it was in), where the ranks have a core each and the verdict is right;
    None otherwise. The injected delay is known exactly; the measured effect compares separate runs."""
    if not (run.faulty and run.right and run.fault_ms and run.cost_ns is not None and cores_each(run.job)
            and run.kind in ("forward", "data", "comm") and run.step_times_ns):
        return None
    steps = len(run.step_times_ns)
    share = 1.0 if run.onset == "start" or run.pattern == "since step" else (steps - (run.fault_step or 0)) / steps
    injected = run.fault_ms * 1e6 * share
    return abs(run.cost_ns - injected) / injected


def within_run_error(run: Run) -> float | None:
    """A mid-run fault's cost error against its own run: the effect is the median of its steps since the
    onset less the median of its steps before it (the same run, so a run-to-run difference of the machine
    cancels), per step since the onset where the verdict says "since step" k as cost_ns then is, else times
    the share of profiled steps since the onset. None for a start fault, a wrong verdict or no effect."""
    if not (run.faulty and run.right and run.onset != "start" and run.cost_ns is not None and cores_each(run.job)
            and run.kind != ROUTER_SKEW and run.step_times_ns and 2 <= (run.fault_step or 0)):
        return None
    before, since = run.step_times_ns[:run.fault_step], run.step_times_ns[run.fault_step:]
    if len(since) < 2:
        return None
    share = 1.0 if run.pattern == "since step" else len(since) / len(run.step_times_ns)
    effect = (statistics.median(since) - statistics.median(before)) * share
    return abs(run.cost_ns - effect) / effect if effect > 0 else None


def effect_per_step(run: Run) -> float | None:
    """What the fault did to the steps it was in, whatever the verdict: the median step (from a mid-run
    fault's onset on) less the paired clean runs' step. None for a clean run or without a pair."""
    if not run.faulty or run.clean_step_ns is None or not run.step_times_ns:
        return None
    steps = run.step_times_ns if run.onset == "start" else run.step_times_ns[run.fault_step:]
    return statistics.median(steps) - run.clean_step_ns if steps else None


def scores(runs: list[Run]) -> dict:
    """Recall (faults >= RECALL_MIN of the step; and faults whose measured effect is), precision, false
    stragglers per clean run, cost errors."""
    done = [run for run in runs if not run.error]
    big = [run for run in done if run.faulty and run.size is not None and run.size >= RECALL_MIN]
    felt = [run for run in done if run.kind != ROUTER_SKEW and
            (effect_per_step(run) or 0) >= RECALL_MIN * (run.clean_step_ns or 0) > 0]
    named = [run for run in done if run.named is not None]
    clean = [run for run in done if run.kind == "clean"]
    errors = sorted(run.cost_error for run in done if run.cost_error is not None and run.kind != ROUTER_SKEW)
    big_errors = sorted(run.cost_error for run in big if run.cost_error is not None and run.kind != ROUTER_SKEW)
    within = sorted(e for e in map(within_run_error, done) if e is not None)
    skews = [run for run in done if run.kind == ROUTER_SKEW]
    injected = sorted(e for e in map(injected_error, done) if e is not None)
    skew_errors = sorted(run.cost_error for run in skews if run.cost_error is not None)
    loads = [run.busy_cores for run in runs if run.busy_cores is not None]
    latencies = [run.live_latency for run in big if run.live_latency is not None]
    return {"recall": [sum(run.right for run in big), len(big)],
            "recall_by_effect": [sum(run.right for run in felt), len(felt)],
            "precision": [sum(run.named == run.expected for run in named), len(named)],
            "false_per_clean": [sum(run.named is not None for run in clean), len(clean)],
            "once_named": [sum(run.named is not None for run in done if run.kind == "once"),
                           sum(run.kind == "once" for run in done)],
            "cost_error_median": statistics.median(errors) if errors else None,
            "cost_error_worst": errors[-1] if errors else None, "cost_errors": len(errors),
            "cost_error_big_median": statistics.median(big_errors) if big_errors else None,
            "cost_errors_big": len(big_errors),
            "cost_error_within_median": statistics.median(within) if within else None,
            "cost_errors_within": len(within),
            "cost_vs_injected_median": statistics.median(injected) if injected else None,
            "cost_vs_injected": len(injected),
            "cost_no_effect": sum(run.right and run.cost_ns is not None and run.measured_ns is not None and
                                  run.measured_ns <= 0 and cores_each(run.job) for run in done),
            "cost_jobs": sorted({run.job for run in done if cores_each(run.job)}),
            "live_detected": [sum(run.live_latency is not None for run in big if run.job in DEMO_JOBS),
                              sum(run.job in DEMO_JOBS for run in big)],
            "live_latency_median": statistics.median(latencies) if latencies else None,
            "live_latency_worst": max(latencies, default=None),
            "live_false_per_clean": [sum(bool(run.live_alerts) for run in clean if run.job in DEMO_JOBS),
                                     sum(run.job in DEMO_JOBS for run in clean)],
            # the replay-confirmed floor (skew.unconfirmed_straggler): right ranks it withheld, wrong ones it stopped
            "floor_withheld": sum(run.named is None and run.unconfirmed is not None and run.unconfirmed == run.expected
                                  for run in done),
            "floor_stopped": sum(run.unconfirmed is not None and run.unconfirmed != run.expected for run in done),
            "router_skew": [sum(run.right for run in skews), len(skews)],
            "neighbour": [sum(run.right for run in done if run.kind == NEIGHBOUR),
                          sum(run.kind == NEIGHBOUR for run in done)],
            "host_busy_elsewhere": [sum(bool(run.host_busy) for run in done if run.kind != NEIGHBOUR),
                                    sum(run.kind != NEIGHBOUR for run in done)],
            "router_skew_cost_error_median": statistics.median(skew_errors) if skew_errors else None,
            "router_skew_cost_errors": len(skew_errors),
            "imbalance_elsewhere": [sum(run.imbalance is not None for run in done if run.kind != ROUTER_SKEW),
                                    sum(run.kind != ROUTER_SKEW for run in done)],
            "failed": sum(run.error is not None for run in runs),
            "busy_median": statistics.median(loads) if loads else None, "busy_max": max(loads, default=None)}


def none_as_dash(value) -> str:
    return "-" if value is None else f"{value:g}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def imbalance_text(group: list[Run]) -> str:
    """``; expert_imbalance 1 x2, none x1`` (its first rank) for a router skew's row or one where it stood."""
    if not any(run.kind == ROUTER_SKEW or run.imbalance is not None for run in group):
        return ""
    firsts: dict[str, int] = {}
    for run in group:
        key = str(run.imbalance[0]) if run.imbalance else "none"
        firsts[key] = firsts.get(key, 0) + 1
    return f"; {IMBALANCE} " + ", ".join(f"{key} x{count}" for key, count in sorted(firsts.items()))


def table(runs: list[Run]) -> str:
    """The Markdown table: one row per (job, fault kind, onset)."""
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        if not run.error:
            groups.setdefault((run.job, run.kind, run.onset or "-"), []).append(run)
    lines = ["| job | ranks | fault | onset | runs | right | right by size | named (rank x runs) | "
             "measured effect (ms, median) | cost err median / worst | s a run |", "|" + "---|" * 11]
    for (job, kind, onset), group in groups.items():
        sizes = sorted({run.size for run in group if run.size is not None})
        by_size = ", ".join(f"{100 * size:.0f}%: {sum(r.right for r in group if r.size == size)}/"
                            f"{sum(r.size == size for r in group)}" for size in sizes) or "-"
        named: dict[str, int] = {}
        for run in group:
            key = "none" if run.named is None else str(run.named)
            named[key] = named.get(key, 0) + 1
        errors = sorted(run.cost_error for run in group if run.cost_error is not None)
        cost = (f"{percent(statistics.median(errors))} / {percent(errors[-1])}" if errors else
                "n/a (ranks share cores)" if not cores_each(job) and kind not in ("clean", "once") else "-")
        wall = statistics.median(run.wall_s or 0.0 for run in group)
        effects = [run.measured_ns / 1e6 for run in group if run.measured_ns is not None]
        effect = f"{statistics.median(effects):+.1f}" if effects else "-"
        right = share(sum(run.right for run in group), len(group))
        named_text = ", ".join(f"{key} x{count}" for key, count in sorted(named.items())) + imbalance_text(group)
        lines.append(f"| {job} | {RANKS[job]} | {kind} | {onset} | {len(group)} | {right} | {by_size} | {named_text} "
                     f"| {effect} | {cost} | {wall:.1f} |")
    return "\n".join(lines)


def router_lines(score: dict) -> list[str]:
    """The router skew's line, where the matrix ran one or an imbalance finding stood elsewhere."""
    skewed, elsewhere = score["router_skew"], score["imbalance_elsewhere"]
    if not skewed[1] and not elsewhere[0]:
        return []
    return [f"- router skew (moe: one rank's expert 2x the tokens of each other's): the {IMBALANCE} finding "
            f"named that rank first in {share(*skewed)}; its cost against the measured effect, over "
            f"{score['router_skew_cost_errors']} right verdict(s) where ranks have a core each: median "
            f"{percent(score['router_skew_cost_error_median'])}; other runs with an {IMBALANCE} finding: "
            f"{elsewhere[0]}/{elsewhere[1]}"]


def report(runs: list[Run]) -> str:
    """The table, the scores and, for every wrong verdict, what distprof said."""
    score = scores(runs)
    jobs = ", ".join(score["cost_jobs"]) or "none of these jobs"
    lines = [table(runs), "",
             f"- recall (faults >= {100 * RECALL_MIN:.0f}% of the step, the injected rank named): "
             f"{share(*score['recall'])}; faults whose measured effect on their steps is >= "
             f"{100 * RECALL_MIN:.0f}% of the clean step: {share(*score['recall_by_effect'])}",
             f"- precision (named ranks that are the injected one / all named, clean and one-off runs included): "
             f"{share(*score['precision'])}",
             f"- false stragglers per clean run: {score['false_per_clean'][0]}/{score['false_per_clean'][1]}"
             f"; one-off (once) pauses named as stragglers: {score['once_named'][0]}/{score['once_named'][1]}",
             f"- the replay-confirmed floor (rule (e): a straggler's fix must save >= straggler_min_step_fraction "
             f"of the step): withheld the injected rank in {score['floor_withheld']} run(s), stopped another "
             f"rank (or one in a clean/one-off run) in {score['floor_stopped']}",
             f"- |cost_ns - measured effect| / measured effect, only where the ranks have a core each "
             f"({jobs}; {os.cpu_count()} cores here), over {score['cost_errors']} right verdicts: median "
             f"{percent(score['cost_error_median'])}, worst {percent(score['cost_error_worst'])}; measured effect = "
             "median step time of the faulty run - its paired clean runs' (the clean runs before and after it; "
             "mid-run faults: the effect on the faulty steps, per step where the verdict names the rank "
             "'since step' k, else x their share of the profiled steps), from the rank files"
             + (f"; {score['cost_no_effect']} right verdict(s) left out: no positive measured effect (noise)"
                if score["cost_no_effect"] else "")
             + f"; over the {score['cost_errors_big']} of faults >= {100 * RECALL_MIN:.0f}% of the step: median "
               f"{percent(score['cost_error_big_median'])}",
             f"- the same error against each mid-run fault's own steps before its onset (the same run: the "
             f"machine's run-to-run noise cancels), over {score['cost_errors_within']} right verdicts: median "
             f"{percent(score['cost_error_within_median'])}",
             f"- |cost_ns - the delay injected| / the delay injected (per step as the cost is; the sleep is known "
             f"exactly, where the measured effect compares separate runs), over {score['cost_vs_injected']} right "
             f"verdicts of forward, data and comm faults: median {percent(score['cost_vs_injected_median'])}",
             f"- live view (demo jobs, a window every {LIVE_EVERY} steps, an alert after 2 windows naming the same "
             f"rank): faults >= {100 * RECALL_MIN:.0f}% alerted with the injected rank {share(*score['live_detected'])}"
             f", {none_as_dash(score['live_latency_median'])} steps from onset to alert (median; worst "
             f"{none_as_dash(score['live_latency_worst'])})"
             f"; clean runs with a straggler alert {score['live_false_per_clean'][0]}/"
             f"{score['live_false_per_clean'][1]}",
             f"- cores busy with other processes just before each run: median {score['busy_median'] or 0:.1f}, max "
             f"{score['busy_max'] or 0:.1f} of {os.cpu_count()} (other users' jobs slow ranks at random: noise in "
             "both the verdicts and the measured effects)",
             *router_lines(score),
             *([f"- noisy neighbour (dp2: a CPU-bound process pinned to one rank's core): the rank named with "
                f"its host busy in {share(*score['neighbour'])}; other runs whose straggler's host was said busy: "
                f"{score['host_busy_elsewhere'][0]}/{score['host_busy_elsewhere'][1]}"] if score["neighbour"][1]
               else []),
             *([f"- runs that failed: {score['failed']} (see the JSON)"] if score["failed"] else [])]
    wrong = [run for run in runs if not run.error and not run.right]
    if wrong:
        lines += ["", "Wrong verdicts:"]
    for run in wrong:
        lines.append(f"- {label(run)}: {wrong_text(run)}")
        lines += [f"    - {text}" for text in run.said]
    return "\n".join(lines)


def wrong_text(run: Run) -> str:
    """``expected rank 1, named none``; a router skew's or a stray imbalance finding's verdict in full."""
    expected = "none" if run.expected is None else f"rank {run.expected}"
    named = "none" if run.named is None else f"rank {run.named}"
    found = f"{IMBALANCE} on ranks {run.imbalance}" if run.imbalance is not None else f"no {IMBALANCE}"
    if run.kind == ROUTER_SKEW:
        return f"expected {IMBALANCE} naming rank {run.expected} first, got {found}; straggler named {named}"
    return f"expected {expected}, named {named}" + (f"; {found}" if run.imbalance is not None else "")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    RANKS.update(args.ranks)
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="verdict_matrix_"))
    base.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        runs = run_matrix(args, base)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(report(runs))
    print(f"\n{len(runs)} runs in {time.perf_counter() - started:.0f} s, {args.steps} profiled steps each "
          f"(mid-run onset at step {args.steps // 2}); jobs: {', '.join(args.jobs)}")
    if args.json:
        record = {"runs": [dict(asdict(run), right=run.right) for run in runs], "scores": scores(runs),
                  "steps": args.steps, "cores": os.cpu_count(), "demo_config": args.demo_config,
                  "kernel_ms": args.kernel_ms, "ranks": {job: RANKS[job] for job in args.jobs}, "kinds": args.kinds}
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
