"""One run per merge (issue 40, point 4): every source states which run a file belongs to
(sources.run_identity: the recorded span on the wall clock, and the launcher's job ids where the source
records them), so that two runs' files in one folder are one error naming files of both (exit 2), in
any mix of nsys exports, native rank files and Kineto traces; one run's files still merge, whether its
ranks run on several hosts or started seconds apart. Real files throughout: the nsys exports and Kineto
traces in tests/data, native files written by the collector itself."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_input_sources import native_file

from distprof import sources

DATA = Path(__file__).resolve().parent / "data"
HOUR_NS = 3600 * 10**9
# 2026-11-23 22:00 UTC: an hour after the Kineto runs of tests/data/torch_ddp were recorded
LATER_NS = 1_795_471_200 * 10**9


def merge(*args: str) -> subprocess.CompletedProcess:
    """`distprof merge ...` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "distprof", "merge", *args, "--no-html"], capture_output=True,
                          text=True, timeout=300)


def refused(result: subprocess.CompletedProcess, *files: Path) -> str:
    """The one-line error of a refused merge, checked to name every file given."""
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for path in files:
        assert str(path) in lines[0], (path, lines[0])
    return lines[0]


def native_run(folder: Path, prefix: str, ranks: list[int], wall_ns: int, world_size: int = 2,
               hosts: list[str] | None = None, started_ns: list[int] | None = None) -> list[Path]:
    """Native files of one run, written by the collector: two steps of 0.9 ms per rank, 1 ms after the
    wall time ``wall_ns`` (the collector's wall_minus_clock_ns, set to put its monotonic times there);
    ``hosts`` per rank; ``started_ns`` per rank: when its collector started, before the first step."""
    paths = []
    for position, rank in enumerate(ranks):
        facts = {"wall_minus_clock_ns": wall_ns, "started_wall_ns": started_ns[position] if started_ns else wall_ns}
        if hosts:
            facts["hostname"] = hosts[position]
        paths.append(native_file(folder / f"{prefix}rank{rank}.sqlite", rank, world_size, **facts))
    return paths


def kineto_run(folder: Path, run: str, prefix: str = "") -> list[Path]:
    """A real 2-rank Kineto run of tests/data/torch_ddp copied into ``folder``."""
    paths = []
    for rank in (0, 1):
        target = folder / f"{prefix}rank{rank}.json.gz"
        shutil.copy(DATA / "torch_ddp" / run / f"rank{rank}.json.gz", target)
        paths.append(target)
    return paths


def nsys_copy(name: str, target: Path, shift_ns: int = 0) -> Path:
    """A real export from tests/data/nsys, its session start moved by ``shift_ns`` (the same program
    recorded again later: an after-run)."""
    from nsys_fixtures import real_export
    shutil.copy(real_export(name), target)
    if shift_ns:
        with sqlite3.connect(target) as db:
            db.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (shift_ns,))
    return target


# ---------------------------------------------------------------- the three cases of the issue

def test_nsys_before_and_after_run_in_one_folder_is_refused_naming_both(tmp_path):
    """Was one world of 4 ranks (FAIL checks, a 'serialized' finding, a clock warning): the same 2-rank
    program recorded twice, an hour apart."""
    before = nsys_copy("nsysai_h100_2gpu_1s.sqlite", tmp_path / "before.sqlite")
    after = nsys_copy("nsysai_h100_2gpu_1s.sqlite", tmp_path / "after.sqlite", HOUR_NS)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), before, after)
    assert "inputs of 2 runs" in line and "2026-05-24 13:40:14" in line and "--allow-duplicate-ranks" in line


@pytest.mark.parametrize("names", [("nsysai_h100_2gpu_1s.sqlite", "nvfuser_report1_nsys2025.1.1.sqlite"),
                                   ("flameox_nsight-2025.5.2.sqlite", "pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite")])
def test_two_different_nsys_exports_are_two_runs(tmp_path, names):
    paths = [nsys_copy(name, tmp_path / name) for name in names]
    assert "inputs of 2 runs" in refused(merge(*map(str, paths), "-o", str(tmp_path / "out")), *paths)


def test_native_files_of_two_runs_are_refused(tmp_path):
    """Was exit 0: rank 0 of one run next to rank 1 of another (no rank claimed twice), an hour apart."""
    first = native_run(tmp_path, "a_", [0], LATER_NS)
    second = native_run(tmp_path, "b_", [1], LATER_NS + HOUR_NS)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), *first, *second)
    assert "inputs of 2 runs" in line and "2026-11-23 22:00:00" in line and "23:00:00" in line


def test_native_files_of_two_runs_claiming_the_same_ranks_are_refused(tmp_path):
    paths = native_run(tmp_path, "a_", [0, 1], LATER_NS) + native_run(tmp_path, "b_", [0, 1], LATER_NS + HOUR_NS)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), paths[0], paths[2])
    assert line.startswith("distprof: error: rank 0 is claimed by two inputs")


def test_kineto_and_native_files_claiming_one_rank_are_refused(tmp_path):
    """Was renumbered without --allow-duplicate-ranks, under "world size 2" above 4 rows: a rank claimed
    by a native file and a Kineto trace is claimed twice, whatever the formats."""
    traces = kineto_run(tmp_path, "healthy", "k_")
    natives = native_run(tmp_path, "n_", [0, 1], LATER_NS)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), traces[0], natives[0])
    assert "rank 0 is claimed by two inputs" in line


def test_kineto_and_native_ranks_of_two_runs_are_refused(tmp_path):
    """Rank 0 from a Kineto run, rank 1 from a native run an hour later: no rank twice, two runs."""
    trace = kineto_run(tmp_path, "healthy", "k_")[0]
    (tmp_path / "k_rank1.json.gz").unlink()
    native = native_run(tmp_path, "n_", [1], LATER_NS)[0]
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), trace, native)
    assert "inputs of 2 runs" in line


def test_two_kineto_runs_are_still_refused(tmp_path):
    """The rule merge had for Kineto alone (issue 29), unchanged."""
    healthy, late = kineto_run(tmp_path, "healthy", "a_"), kineto_run(tmp_path, "late", "b_")
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), healthy[0], late[0])
    assert "rank 0 is claimed by two inputs" in line


def test_allow_duplicate_ranks_merges_two_runs_on_purpose(tmp_path):
    """--allow-duplicate-ranks keeps its meaning: the runs' ranks are renumbered side by side, and the
    header's world is the ranks shown (it said "world size 2" above 4 rows)."""
    kineto_run(tmp_path, "healthy", "k_")
    native_run(tmp_path, "n_", [0, 1], LATER_NS)
    out = tmp_path / "out"
    done = merge(str(tmp_path), "-o", str(out), "--allow-duplicate-ranks")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(r["rank"] for r in summary["ranks"]) == [0, 1, 2, 3] and summary["world_size"] == 4
    assert summary["warnings"][0].startswith("merged anyway (--allow-duplicate-ranks): rank 0 is claimed")


def test_files_stating_two_world_sizes_are_two_runs(tmp_path):
    """A 4-rank run's rank 2 and 3 files left beside a 2-rank run's rank 0 and 1 (issue 59: merged as a
    world of 4, exit 0): their stated worlds differ, whatever their clocks say."""
    small = native_run(tmp_path, "", [0, 1], LATER_NS, world_size=2)
    big = native_run(tmp_path, "", [2, 3], LATER_NS, world_size=4)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), small[0], big[0])
    assert "states a world of 2 ranks" in line and "of 4" in line


def test_files_of_one_host_seconds_apart_are_two_runs(tmp_path):
    """On one host the ranks read one clock: rank 1's recording began 5 s after rank 0's ended, so they
    shared no collective (the 60 s tolerance is for clocks of two hosts)."""
    first = native_run(tmp_path, "", [0], LATER_NS, hosts=["node0"])
    second = native_run(tmp_path, "", [1], LATER_NS + 5 * 10**9, hosts=["node0"])
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), *first, *second)
    assert "inputs of 2 runs" in line and "5.0 s after the first ended" in line


def test_the_same_times_on_two_hosts_still_merge(tmp_path):
    native_run(tmp_path, "", [0], LATER_NS, hosts=["node0"])
    native_run(tmp_path, "", [1], LATER_NS + 5 * 10**9, hosts=["node1"])
    done = merge(str(tmp_path), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_collector_records_the_launchers_run_id(tmp_path, monkeypatch):
    """Open MPI's PMIx namespace (and any launcher id) is written in the rank file and read back as its
    run's launcher id; a damaged value is ignored with a warning naming the file."""
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-node0-123@1")
    path = native_file(tmp_path / "rank0.sqlite")
    trace = sources.read(path, {})[0]
    assert trace.meta["run"]["launcher"] == {"PMIX_NAMESPACE": "prterun-node0-123@1"}
    with sqlite3.connect(path) as db:
        db.execute("UPDATE distprof_meta SET value = '[1]' WHERE key = 'launcher_ids'")
    trace = sources.read(path, {})[0]
    assert trace.meta["run"]["launcher"] == {}
    assert any(str(path) in w and "launcher_ids" in w for w in trace.warnings)


def test_two_demo_runs_into_one_folder_are_refused(tmp_path):
    """Issue 59: `distprof demo --ranks 4 --out reuse` then `--ranks 2 --out reuse`: `merge reuse` was a
    world of 4 (the first run's rank 2 and 3 files), exit 0. Each rank file records its launcher's and
    distprof's run id: refused, naming a file of each run."""
    out = tmp_path / "reuse"
    for ranks in ("4", "2"):
        done = subprocess.run([sys.executable, "-m", "distprof", "demo", "--ranks", ranks, "--steps", "2",
                               "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    line = refused(merge(str(out), "-o", str(tmp_path / "merged")))
    assert "inputs of two runs" in line and "rank0" in line and ("rank2" in line or "rank3" in line)


# ---------------------------------------------------------------- one run still merges

def test_one_run_on_two_hosts_started_seconds_apart_merges(tmp_path):
    """Ranks on two hosts whose clocks differ by 4 s, their collectors started 20 s apart: one run."""
    native_run(tmp_path, "", [0, 1], LATER_NS, hosts=["node0", "node1"],
               started_ns=[LATER_NS - 30 * 10**9, LATER_NS - 10 * 10**9])
    with sqlite3.connect(tmp_path / "rank1.sqlite") as db:
        db.execute("UPDATE distprof_meta SET value = CAST(value AS INTEGER) + 4000000000 "
                   "WHERE key = 'wall_minus_clock_ns'")
    out = tmp_path / "out"
    done = merge(str(tmp_path), "-o", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2


def nsys_rank(folder: Path, rank: int, env: dict[str, str], start_ns: int) -> Path:
    """A one-rank nsys export (the real DDL of nsys 2025.1) with a launcher environment."""
    import nsys_fixtures as fx
    if not fx.ddl_available():
        pytest.skip("nsys DDL folder is absent")
    export = fx.one_step_rank(fx.NsysExport(env={"RANK": str(rank), **env}, session_start_utc_ns=start_ns))
    return export.write(folder / f"rank{rank}.sqlite")


def test_launcher_ids_tell_runs_apart_whatever_the_clocks(tmp_path):
    """Two SLURM jobs recording at the same moment (two jobs on one cluster): two runs by their ids."""
    start = 1_700_000_000 * 10**9
    first = nsys_rank(tmp_path, 0, {"SLURM_JOB_ID": "4811", "SLURM_STEP_ID": "0"}, start)
    second = nsys_rank(tmp_path, 1, {"SLURM_JOB_ID": "4812", "SLURM_STEP_ID": "0"}, start)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), first, second)
    assert "SLURM_JOB_ID=4811.0" in line and "SLURM_JOB_ID=4812.0" in line


def test_one_launcher_id_is_one_run_across_skewed_clocks(tmp_path):
    """One torchrun job whose second node's clock is 10 minutes off: its rendezvous id makes it one run."""
    start = 1_700_000_000 * 10**9
    nsys_rank(tmp_path, 0, {"TORCHELASTIC_RUN_ID": "job7"}, start)
    nsys_rank(tmp_path, 1, {"TORCHELASTIC_RUN_ID": "job7", "HOSTNAME": "node1"}, start + 600 * 10**9)
    done = merge(str(tmp_path), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_files_of_one_host_a_day_apart_are_two_runs(tmp_path):
    """Issue 23 merged them, distrusting the second file's clock; its session start is the host's one
    clock, so a day later is another run. Merged on purpose, the clock is still distrusted (align):
    no straggler is named from a day's offset."""
    start = 1_700_000_000 * 10**9
    first = nsys_rank(tmp_path, 0, {"HOSTNAME": "node0"}, start)
    second = nsys_rank(tmp_path, 1, {"HOSTNAME": "node0"}, start + 86_400 * 10**9)
    line = refused(merge(str(tmp_path), "-o", str(tmp_path / "out")), first, second)
    assert "inputs of 2 runs" in line and "24 h after the first ended" in line
    out = tmp_path / "forced"
    done = merge(str(tmp_path), "-o", str(out), "--allow-duplicate-ranks")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skew"]["straggler"] is None
    assert any("distrusted" in w and str(second) in w for w in summary["warnings"])


def test_identity_of_each_source():
    """What each reader states: the span on the wall clock (nsys: from the session start), launcher ids."""
    from nsys_fixtures import real_export
    nsys = sources.read(real_export("pipit_saxpy-mpi-cuda_perlmutter_rank0.sqlite"), {})[0].meta["run"]
    assert nsys["span_ns"][0] == 1_687_813_257_637_297_504  # TARGET_INFO_SESSION_START_TIME.utcEpochNs
    kineto = sources.read(DATA / "torch_ddp" / "healthy" / "rank0.json.gz", {})[0].meta["run"]
    assert 1_795_467_279 * 10**9 < kineto["span_ns"][0] < kineto["span_ns"][1] < 1_795_467_281 * 10**9
    native = sources.read(DATA / "demo_ranks" / "rank0.sqlite", {})[0].meta["run"]
    assert native["span_ns"] and native["launcher"] == {}
    relative = sources.read(real_export("quasiben_nvtx-examples_cudf-groupby.sqlite"), {})[0].meta["run"]
    assert relative["span_ns"] is None  # no session start: times since the start, of no run in particular
    assert sources.launcher_ids({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2",
                                 "TORCHELASTIC_RESTART_COUNT": "1"}) == {"SLURM_JOB_ID": "9.2"}


def test_one_run_rule():
    """Spans within SAME_RUN_GAP_NS chain into one run; a file without a wall clock is of any run."""
    second = 10**9
    at = 1_795_471_200 * second
    one = {"span_ns": (at, at + second), "launcher": {}}
    chained = {"span_ns": (at + 50 * second, at + 51 * second), "launcher": {}}
    unknown = {"span_ns": None, "launcher": {}}
    assert sources.one_run([("a", one), ("b", chained), ("c", unknown)]) is None
    far = {"span_ns": (at + 200 * second, at + 201 * second), "launcher": {}}
    line = sources.one_run([("a", one), ("b", chained), ("d", far)])
    assert line.startswith("inputs of 2 runs: a (and 1 more) recorded 2026-11-23 22:00:00 to 2026-11-23 22:00:51 "
                           "UTC, d from 2026-11-23 22:03:20 UTC, 2 min after the first ended (the ranks of one run "
                           "overlap in time, within 60 s)")


REAL_RUNS = ["demo_ranks", "torch_cpu", "torch_cpu_nolate", "torch_cpu_whatif/late", "torch_cpu_whatif/clean",
             "torch_flops", "torch_pp/late1", "torch_tpdp/late3", "kineto_h100/gloo_cuda",
             "kineto/hta_trace_filter_2rank", *(f"torch_ddp/{run}" for run in
                                                ("healthy", "late", "nosync", "late_nosync", "onestep_late",
                                                 "manual_sync"))]


@pytest.mark.parametrize("folder", REAL_RUNS)
def test_every_real_multi_rank_set_is_one_run(folder):
    paths = sorted(p for p in (DATA / folder).iterdir() if p.name.endswith((".json.gz", ".sqlite")))
    identities = [(str(path), trace.meta["run"]) for path in paths for trace in sources.read(path, {})]
    assert len(identities) >= 2 and all(identity["span_ns"] for _, identity in identities)
    assert sources.one_run(identities) is None
