"""A host's usable cores: the machine's, capped by the cgroup's cpuset and CPU quota, never one
rank's affinity (issue 40 point 3: Open MPI binds 2 ranks to one core each, and rank 0 read that
as "2 ranks on vm with 1 cores", leaving every saving unpriced). The cgroup files are made in
tmp_path: a /proc/self (mountinfo, cgroup) and the cgroup folders it points at."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_mpi

from distprof import collector
from distprof.analyses import cost, machine
from distprof.cli import find_mpirun
from distprof.sections.machine import CrowdedHost

V1_CPU = ("cgroup", "rw,cpu,cpuacct")
V1_CPUSET = ("cgroup", "rw,cpuset")
V2 = ("cgroup2", "rw")


def fake_proc(tmp_path: Path, mounts: dict[str, tuple[str, str, str]], cgroup: str,
              files: dict[str, str]) -> Path:
    """A /proc/self whose mountinfo mounts ``{name: (cgroup root, fstype, super options)}`` at
    tmp_path/name, whose cgroup file is ``cgroup``, and the files ``{relative path: text}``."""
    proc = tmp_path / "proc"
    proc.mkdir()
    lines = ["31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755"]
    for k, (name, (root, fstype, options)) in enumerate(mounts.items()):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
        lines.append(f"{40 + k} 31 0:{40 + k} {root} {tmp_path / name} rw,relatime - {fstype} {fstype} {options}")
    (proc / "mountinfo").write_text("\n".join(lines) + "\n")
    (proc / "cgroup").write_text(cgroup)
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text + "\n")
    return proc


@pytest.fixture
def eight_cores(monkeypatch):
    """A machine of 8 cores whose rank is bound to one of them."""
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)


def test_v2_quota_and_cpuset_cap_the_machine(tmp_path, eight_cores):
    """cgroup v2: 1.5 cores of quota cannot run 2 busy ranks (counts as 1); a cpuset of 0-2,5 is 4."""
    proc = fake_proc(tmp_path, {"v2": ("/", *V2)}, "0::/job\n",
                     {"v2/job/cpu.max": "150000 100000", "v2/job/cpuset.cpus.effective": "0-2,5"})
    assert collector.cgroup_cores(proc) == (1.5, 4)
    assert collector.usable_cpus(proc) == 1
    (tmp_path / "v2/job/cpu.max").write_text("max 100000\n")
    assert collector.cgroup_cores(proc) == (None, 4) and collector.usable_cpus(proc) == 4


def test_v2_quota_on_a_parent_applies(tmp_path, eight_cores):
    """A batch job's quota sits on the job; the process is in a step below it."""
    proc = fake_proc(tmp_path, {"v2": ("/", *V2)}, "0::/job/step\n",
                     {"v2/job/cpu.max": "400000 100000", "v2/job/step/cpu.max": "max 100000",
                      "v2/cpu.max": "garbage"})
    assert collector.cgroup_cores(proc) == (4.0, None) and collector.usable_cpus(proc) == 4


def test_v1_quota_and_cpuset(tmp_path, eight_cores):
    """cgroup v1 (hybrid, as on this machine: v2 mounted without controllers): cfs quota 200000 over
    a 100000 period is 2 cores, -1 is none; cpuset.effective_cpus 0-5 is 6."""
    proc = fake_proc(tmp_path, {"cpu": ("/", *V1_CPU), "cpuset": ("/", *V1_CPUSET), "unified": ("/", *V2)},
                     "4:cpuset:/\n3:cpu,cpuacct:/job\n0::/\n",
                     {"cpu/job/cpu.cfs_quota_us": "200000", "cpu/job/cpu.cfs_period_us": "100000",
                      "cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                      "cpuset/cpuset.effective_cpus": "0-5"})
    assert collector.cgroup_cores(proc) == (2.0, 6) and collector.usable_cpus(proc) == 2
    (tmp_path / "cpu/job/cpu.cfs_quota_us").write_text("-1\n")
    assert collector.cgroup_cores(proc) == (None, 6) and collector.usable_cpus(proc) == 6


def test_a_container_sees_its_cgroup_at_the_mount(tmp_path, eight_cores):
    """Without a cgroup namespace the mount's root is the container's cgroup, and /proc/self/cgroup
    names it in full: the limits are read at the mount point itself."""
    proc = fake_proc(tmp_path, {"v2": ("/docker/abc", *V2)}, "0::/docker/abc\n", {"v2/cpu.max": "300000 100000"})
    assert collector.cgroup_cores(proc) == (3.0, None) and collector.usable_cpus(proc) == 3


def test_no_cgroup_or_unreadable_files_give_the_machine_not_the_affinity(tmp_path, eight_cores):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert collector.cgroup_cores(empty) == (None, None)
    assert collector.usable_cpus(empty) == 8 and collector.affinity_cpus() == 1
    proc = fake_proc(tmp_path, {"v2": ("/", *V2)}, "0::/a/b\n",
                     {"v2/a/b/cpu.max": "12 x", "v2/a/cpu.max": "100 0", "v2/cpu.max": "",
                      "v2/a/b/cpuset.cpus.effective": "5-3"})
    assert collector.cgroup_cores(proc) == (None, None) and collector.usable_cpus(proc) == 8
    (tmp_path / "v2/a/b/cpu.max").write_text("250000\n")   # the period left out: 100000
    assert collector.cgroup_cores(proc) == (2.5, None) and collector.usable_cpus(proc) == 2


def test_cpu_list_size():
    assert [collector._cpu_list_size(text) for text in ("0-3,8", "7", "0-1,4-5", "", "3-1", "a-b")] == \
        [5, 1, 4, None, None, None]


def test_collector_records_the_host_and_the_rank(tmp_path):
    """The rank file's ``cpus`` is the host's usable cores, ``affinity`` the rank's own."""
    rank_file = collector.Collector(tmp_path / "rank0.sqlite", 0, 1)
    rank_file.close()
    meta = dict(sqlite3.connect(tmp_path / "rank0.sqlite").execute("SELECT key, value FROM distprof_meta"))
    assert int(meta["cpus"]) == collector.usable_cpus()
    assert int(meta["affinity"]) == len(os.sched_getaffinity(0))


def rank(host: str, cpus: int) -> SimpleNamespace:
    return SimpleNamespace(host=host, meta={"cpus": cpus})


def test_oversubscribed_hosts_compare_ranks_with_the_hosts_cores():
    assert cost.oversubscribed_hosts([rank("vm", 2), rank("vm", 2)]) == []
    assert cost.oversubscribed_hosts([rank("vm", 2)] * 3) == [CrowdedHost(host="vm", ranks=3, cpus=2)]
    # a file from before (its rank's affinity, 1) next to one recording the host's 2 cores: the host has 2
    assert cost.oversubscribed_hosts([rank("vm", 1), rank("vm", 2)]) == []
    assert [(h.host, h.cpus) for h in machine.facts([rank("vm", 1), rank("vm", 2)])] == [("vm", 2)]
    assert cost.oversubscribed_hosts([rank("a", 1), rank("b", 1)]) == []   # one rank per host


def test_launcher_binds_nothing_unless_asked():
    def words(*args: str) -> list[str]:
        result = subprocess.run(["bash", str(ROOT / "launch" / "mpirun.sh"), *args, "--dry-run", "--", "x"],
                                capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    plain = words("-n", "2")
    assert plain[plain.index("--bind-to") + 1] == "none" and "--oversubscribe" not in plain
    bound = words("-n", "2", "--bind-to", "core")
    assert bound[bound.index("--bind-to") + 1] == "core" and bound.count("--bind-to") == 1


@pytest.mark.slow
def test_ranks_bound_to_a_core_each_are_priced(tmp_path):
    """The real thing: ``launch/mpirun.sh -n 2 --bind-to core`` of the demo with rank 1 sleeping
    60 ms a step. Each rank may run on one core (affinity 1), the host has 2: no oversubscription,
    and the straggler comes with its saving (before: "2 ranks on vm with 1 cores", unpriced)."""
    if find_mpirun() is None or collector.usable_cpus() < 2 or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs mpirun and 2 usable cores")
    out = tmp_path / "out"
    command = ["bash", str(ROOT / "launch" / "mpirun.sh"), "-n", "2", "--bind-to", "core", "--", "python", "-m",
               "distprof.demo.job", "--out", str(out), "--straggler", "1:60", "--steps", "10"]
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("OMPI_COMM_WORLD_SIZE", None)
    result = run_mpi(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for r in (0, 1):
        meta = dict(sqlite3.connect(out / f"rank{r}.sqlite").execute("SELECT key, value FROM distprof_meta"))
        assert (int(meta["affinity"]), int(meta["cpus"])) == (1, collector.usable_cpus())
    summary = json.loads((out / "summary.json").read_text())
    assert not any("outnumber" in w for w in summary["warnings"])
    assert summary["machine"][0]["cpus"] == collector.usable_cpus()
    straggler = summary["skew"]["straggler"]
    assert straggler is not None and straggler["rank"] == 1 and straggler["cost_ns"] is not None
    [finding] = [f for f in summary["findings"] if f["finding"] == "straggler"]
    assert finding["predicted_saving_ns"] == straggler["cost_ns"] and finding["severity"] != cost.UNPRICED
