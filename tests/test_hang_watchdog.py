"""The hang watchdog (collector.hang_dump_s) and `distprof demo --hang`: files written while a step hangs,
read back by `distprof hang`; the demo ends on its own and names the rank that stopped."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli

import distprof
from distprof import config as config_mod
from distprof.analyses import hang
from distprof.sections.hang import WaitTarget
from distprof.sources import flight_recorder as fr


def run_steps(out: Path, sleeps: list[float], limit_s: float) -> None:
    with distprof.Profiler(out=out, quiet=True, collector={"hang_dump_s": limit_s}) as prof:
        for pause in sleeps:
            with distprof.phase("forward"), distprof.comm("allreduce", group=[0, 1]):
                time.sleep(pause)
            prof.step()


def test_a_long_step_writes_one_file_with_open_ranges_and_stacks(tmp_path):
    run_steps(tmp_path, [0.01, 1.0, 0.01], limit_s=0.3)
    doc = json.loads((tmp_path / "hang_rank0.json").read_text())
    assert doc["step"] == 1 and doc["last_finished_step"] == 0
    assert doc["step_elapsed_ns"] >= 0.3e9
    ranges = [(r["name"], r["category"], r["group"]) for r in doc["open_ranges"]]
    assert ranges == [("forward", "PHASE", None), ("allreduce", "COMMUNICATION", [0, 1])]
    main = next(s for s in doc["stacks"] if s["thread"] == "MainThread")
    assert any("in run_steps" in frame for frame in main["frames"])
    assert doc["flight_recorder"] is None and doc["flight_recorder_missing"]
    assert not any(t.name == "distprof-hang-watchdog" for t in threading.enumerate())  # stopped with the session


def test_no_file_when_steps_stay_short(tmp_path):
    run_steps(tmp_path, [0.01, 0.01], limit_s=5.0)
    assert not (tmp_path / "hang_rank0.json").exists()


@pytest.mark.parametrize("value", [-1, 0, "x", True])
def test_hang_dump_s_is_validated(value):
    with pytest.raises(config_mod.ConfigError, match="collector.hang_dump_s"):
        config_mod.load(None, {"collector": {"hang_dump_s": value}})


def test_off_by_default():
    assert config_mod.load()["collector"]["hang_dump_s"] is None


def watchdog_dump(rank: int, step: int, ranges: list[tuple[str, str, list | None]]) -> fr.RankDump:
    return fr.RankDump(rank, f"hang_rank{rank}.json", "read", (), {}, world_size=4, step=step,
                       open_ranges=tuple(fr.OpenRange(n, c, tuple(g) if g else None, "MainThread", 10**9)
                                         for n, c, g in ranges), has_flight_recorder=False)


def test_watchdog_files_alone_name_the_rank_outside_the_collective():
    inside = [("forward", "PHASE", None), ("allreduce", "COMMUNICATION", None)]
    dumps = [watchdog_dump(r, 3, inside) for r in (0, 1, 3)] + [watchdog_dump(2, 3, [("forward", "PHASE", None)])]
    result = hang.analyse(dumps)
    assert result.root_ranks == [2] and result.source == "distprof_watchdog"
    assert [(c.ranks, c.reason, c.group_name, c.awaited_by) for c in result.culprits] == \
        [([2], "missing", "world", [0, 1, 3])]
    assert [(w.ranks, w.waits_for) for w in result.waiting] == \
        [([0, 1, 3], [WaitTarget(reason="missing", ranks=[2], inferred=False)])]


def test_watchdog_files_with_a_rank_missing_say_not_dumped():
    inside = [("allreduce", "COMMUNICATION", [0, 1])]
    result = hang.analyse([watchdog_dump(0, 7, inside)])
    assert result.root_ranks == [1]
    assert [(c.ranks, c.reason, c.awaited_by) for c in result.culprits] == [([1], "not_dumped", [0])]


FR_JOB = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    import distprof
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
    with distprof.Profiler(out=sys.argv[1], quiet=True, collector={"hang_dump_s": 0.3}) as prof:
        dist.all_reduce(torch.ones(3))
        time.sleep(1.0)
        prof.step()
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_watchdog_file_carries_the_flight_recorder_dump(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(FR_JOB % (29620 + os.getpid() % 200))
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "16", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(distprof.__file__).parents[1])}
    subprocess.run([sys.executable, str(script), str(tmp_path / "out")], env=env, check=True, timeout=120)
    doc = json.loads((tmp_path / "out" / "hang_rank0.json").read_text())
    kinds = [e["profiling_name"] for e in doc["flight_recorder"]["entries"]]
    assert kinds == ["gloo:all_reduce"]
    dump = fr.read(tmp_path / "out" / "hang_rank0.json")
    assert [(e.kind, e.seq, e.completed) for e in dump.entries] == [("all_reduce", 1, True)]
    assert hang.analyse([dump]).root_ranks == []  # the one collective completed: no hang in it


def processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_demo_hang_ends_on_its_own_and_names_the_rank(tmp_path):
    out = tmp_path / "demo_hang"
    started = time.monotonic()
    result = run_cli("demo", "--ranks", "2", "--hang", "1:5", "--out", str(out), timeout=90)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    assert elapsed < 60
    doc = json.loads((out / "hang.json").read_text())
    assert doc["root_ranks"] == [1]
    assert [(c["ranks"], c["reason"], c["seq"]) for c in doc["culprits"]] == [([1], "missing", 5)]
    assert [w["ranks"] for w in doc["waiting"]] == [[0]]
    assert [(g["ranks"], g["root"], g["steps"]) for g in doc["stacks"]][0] == ([1], True, [5])  # rank 1's own stack
    lines = result.stdout.splitlines()
    assert lines[0].startswith("the job was ended after "), result.stdout[:500]  # no empty line first (issue 54)
    assert any(line.startswith("  rank 1: in ") and line.endswith("(step 5; root)") for line in lines)
    assert "root rank 1" in result.stdout
    assert processes_naming(str(out)) == []  # the job's ranks are gone
    assert sorted(p.name for p in out.glob("rank*")) == ["rank0.sqlite", "rank1.sqlite"]  # no -wal/-shm left


@pytest.mark.parametrize("text", ["1", "2:5", "1:99", "a:b"])
def test_demo_rejects_bad_hang(text):
    result = run_cli("demo", "--ranks", "2", "--hang", text, "--dry-run")
    assert result.returncode == 2 and "--hang" in result.stderr and len(result.stderr.strip().splitlines()) == 1
