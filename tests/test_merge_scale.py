"""The synthetic many-rank nsys job of benchmarks/merge_scale.py, small: what it writes is what the
reader sees, and `mpirun -n 2 distprof merge` gives the same summary.json as one process, with
the injected straggler named and the clock offsets recovered. Its --kineto mode's replicated real
ranks read as the ranks they are renumbered to, and its copied results equal the reduced copies.
Nothing here is timed; nothing needs torch or HTA."""

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, run_mpi
from msgspec.structs import replace
from nsys_fixtures import ddl_available

from distprof import config as config_module
from distprof import events as ev
from distprof import pipeline, sources
from distprof.cli import find_mpirun

needs_ddl = pytest.mark.skipif(not ddl_available(), reason="nsys DDL files absent")
REAL = sorted((ROOT / "tests" / "data" / "torch_ddp" / "late").glob("rank*.json.gz"))  # 2 real gloo ranks


def _benchmark():
    spec = importlib.util.spec_from_file_location("merge_scale", ROOT / "benchmarks" / "merge_scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["merge_scale"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


ms = _benchmark()
JOB = ms.Job(ranks=6, kernels=4_000, steps=4, straggler=2)  # 1000 kernels and 8 allreduces a step


@pytest.fixture(scope="module")
def job_files(tmp_path_factory) -> list[Path]:
    return ms.write_job(tmp_path_factory.mktemp("scale_job"), JOB)


@needs_ddl
def test_reader_sees_the_generated_job(job_files):
    config = config_module.load()
    layout = ms.rank_layout(JOB)
    for where, path in zip(layout, job_files):
        (trace,) = sources.read(path, config)
        assert (trace.rank, trace.rank_from, trace.pid) == (where["rank"], "env RANK", where["pid"])
        assert trace.clock_offset_ns == where["session_start_utc_ns"]
        events = trace.events.to_frame()
        kernels = events[events["kind"] == ev.KERNEL]
        nccl = kernels[kernels["name"].astype(str) == ms.NCCL_NAME]
        assert len(kernels) == JOB.kernels and len(nccl) == JOB.steps * JOB.collectives
        assert set(nccl["lane"]) == {ms.NCCL_STREAM} and ms.NCCL_STREAM not in set(kernels.drop(nccl.index)["lane"])
        assert len(events) == JOB.events_per_rank() + 2  # + the two span marks of the nsys reader (issue 12)
        late = (nccl["start_ns"] - (nccl["end_ns"] - JOB.nccl_ns)).to_numpy()  # arrival after the slot
        if where["rank"] == JOB.straggler_rank:
            assert (late == JOB.late_ns).all()
        else:
            assert late.min() >= 0 and late.max() < JOB.jitter_ns


@needs_ddl
@pytest.mark.slow
def test_two_mpi_workers_equal_one_and_find_the_straggler(job_files, tmp_path):
    inputs = [str(p) for p in job_files]
    single = run_cli("merge", *inputs, "-o", str(tmp_path / "one"), "--no-html")
    assert single.returncode == 0, single.stderr
    command = [find_mpirun(), "-n", "2", "--oversubscribe", "--mca", "btl", "self,sm",
               *(["--allow-run-as-root"] if os.geteuid() == 0 else []),
               sys.executable, "-m", "distprof", "merge", *inputs, "-o", str(tmp_path / "two"), "--no-html"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OMPI_", "PMIX_"))}
    double = run_mpi(command, capture_output=True, text=True, timeout=120, env=env)
    assert double.returncode == 0, double.stderr[-2000:]
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert one == two

    # ranks come from the captured RANK, not from the file order (files are named by pid)
    layout = ms.rank_layout(JOB)
    assert [Path(r["source_file"]) for r in one["ranks"]] == job_files
    assert [r["rank"] for r in one["ranks"]] == list(range(JOB.ranks))

    # clocks: the session starts differ by tens of ms and the host clocks are off by up to
    # 300 us; aligned by the collective ends, every offset is right relative to the reference
    # (the ends coincide exactly in this job)
    true = [ms.JOB_START_UTC_NS + where["started_ns"] for where in layout]
    found = [r["clock_offset_ns"] for r in one["ranks"]]
    reference = one["skew"]["reference_rank"]
    assert [f - found[reference] for f in found] == [t - true[reference] for t in true]

    straggler = one["skew"]["straggler"]
    assert straggler is not None and straggler["rank"] == JOB.straggler_rank
    assert straggler["late_steps"] == straggler["steps"] == JOB.steps
    # late by late_ns at each collective, measured against the median arrival (within the jitter)
    per_step = JOB.collectives * JOB.late_ns
    assert per_step - JOB.collectives * JOB.jitter_ns <= straggler["waits_caused_ns"] <= per_step


def test_replicated_real_ranks_are_renumbered_and_nothing_else(tmp_path):
    counts = ms.copy_real_job(REAL, tmp_path, 5)
    config = config_module.load()
    originals = [gzip.decompress(path.read_bytes()).decode() for path in REAL]
    assert counts == [len(json.loads(originals[r % 2])["traceEvents"]) for r in range(5)]
    for rank in range(5):
        text = gzip.decompress((tmp_path / f"rank{rank}.pt.trace.json.gz").read_bytes()).decode()
        document, original = json.loads(text), json.loads(originals[rank % 2])
        info = document.pop("distributedInfo")
        assert (info["rank"], info["world_size"]) == (rank, 5)
        assert [(g["ranks"], g["pg_size"]) for g in info["pg_config"]] == [(list(range(5)), 5)]
        original.pop("distributedInfo")
        assert document == original  # timestamps, pids, events: as recorded
        (trace,) = sources.read(tmp_path / f"rank{rank}.pt.trace.json.gz", config)
        assert (trace.rank, trace.meta["world_size"], trace.meta["process_groups"]) == (rank, 5, {"0": [0, 1, 2, 3, 4]})


def test_copied_results_equal_the_reduced_copies(tmp_path):
    """The combine estimate's input (a real rank's result renumbered) is what a merge of the
    replicated files would combine, but for the pid and file name."""
    ms.copy_real_job(REAL, tmp_path, 5)
    config = config_module.load()
    for rank in (1, 4):
        (original,) = sources.read(REAL[rank % 2], config)
        (copied,) = sources.read(tmp_path / f"rank{rank}.pt.trace.json.gz", config)
        estimate = ms.copy_result(pipeline.reduce_rank(original, config), rank, 5)
        reduced = pipeline.reduce_rank(copied, config)
        assert replace(estimate, pid=None, source_file=None) == replace(reduced, pid=None, source_file=None)


def test_combine_estimate_children_run_end_to_end(tmp_path):
    """The benchmark's rank-0 estimate as it runs (reduce child, then combine child on renumbered
    copies): a combine that cannot be written (an unworded Summary) fails here, not in a long run."""
    timed, reduced = ms.combines(REAL, [3], tmp_path)
    assert reduced["ranks"] == len(REAL)
    assert timed[3]["ranks"] == 3 and timed[3]["summary_json_mib"] > 0
