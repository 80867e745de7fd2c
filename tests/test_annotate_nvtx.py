"""distprof ranges make the NVTX calls a tool (nsys) sees, with the real nvtx package and a real NVTX
tool attached: tests/nvtx_recorder.c, an injection library built here that logs every push/pop
(domain, message, colour, category, payload, thread). Each distprof range is compared with the same
range pushed through nvtx's own API in the same process. No tool is needed for the last tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import ROOT

import distprof
from distprof import annotate

# One distprof range and what nvtx itself pushes for it: distprof's documented colour and NVTX category
# (PHASE 1, COMMUNICATION 2, USER 3) in the "distprof" domain; a known nbytes rides as an int64 payload.
PROGRAM = textwrap.dedent("""
    import sys, tempfile, threading
    import nvtx
    import distprof
    assert type(nvtx.get_domain("distprof")).__name__ == "Domain", "no NVTX tool attached"

    def expect(message, color, category, payload=None):
        nvtx.push_range(message, color, domain="distprof", category=category, payload=payload)
        nvtx.pop_range(domain="distprof")

    def worker():
        with distprof.comm("broadcast"):
            pass

    with tempfile.TemporaryDirectory() as out:
        with distprof.Profiler(out=out, quiet=True, collector={"nvtx": sys.argv[1] == "on"}) as prof:
            expect("forward", "green", 1)
            with distprof.phase("forward"):
                pass
            expect("allreduce", "red", 2)
            with distprof.comm("allreduce"):
                pass
            expect("allreduce", "red", 2, 4096)
            with distprof.comm("allreduce", group=[0], nbytes=4096):
                pass
            expect("mine", "purple", 3)
            with distprof.range("mine"):
                pass
            expect("loss", "cyan", 1)
            distprof.phase("loss")(lambda: None)()
            print("nested", flush=True)
            with distprof.phase("forward"):
                with distprof.phase("forward"):
                    pass
            print("thread", flush=True)
            thread = threading.Thread(target=worker)
            thread.start()
            thread.join()
            prof.step()
        from distprof.sources import native
        events = native.read(f"{out}/rank0.sqlite", distprof.config.load())[0].events.to_frame()
        print("rows", {name: int(n) for name, n in events.groupby("name", observed=True).size().items()})
""")


@pytest.fixture(scope="module")
def nvtx_tool(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the NVTX recording tool")
    library = tmp_path_factory.mktemp("nvtx_tool") / "libnvtx_recorder.so"
    built = subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library),
                            str(ROOT / "tests" / "nvtx_recorder.c"), "-lpthread"], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"the NVTX recording tool did not build: {built.stderr[-500:]}")
    return library


def run_with_tool(library: Path, tmp_path: Path, nvtx: str) -> tuple[list[list[str]], str]:
    """(the tool's log lines split into fields, the program's stdout)."""
    log = tmp_path / f"nvtx_{nvtx}.log"
    env = dict(os.environ, NVTX_INJECTION64_PATH=str(library), NVTX_RECORDER_LOG=str(log))
    done = subprocess.run([sys.executable, "-c", PROGRAM, nvtx], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line.split("\t") for line in log.read_text().splitlines()], done.stdout


def test_each_range_pushes_and_pops_what_nvtx_itself_would(nvtx_tool, tmp_path):
    calls, stdout = run_with_tool(nvtx_tool, tmp_path, "on")
    main_tid = calls[0][1]
    distprof_calls = [c for c in calls if c[0] in ("push", "pop") and c[2] == "distprof"]  # not ProfileStep
    pairs = distprof_calls[:20]  # 5 x (nvtx push, nvtx pop, distprof push, distprof pop)
    for index in range(0, 20, 4):
        expected_push, expected_pop, push, pop = pairs[index:index + 4]
        assert push == expected_push and pop == expected_pop and push[0] == "push" and pop[0] == "pop"
    assert [c[3] for c in pairs[::4]] == ["forward", "allreduce", "allreduce", "mine", "loss"]
    assert pairs[8][-1] == "payload=2:4096"  # int64 payload: the message size
    nested, threaded = distprof_calls[20:24], distprof_calls[24:26]
    assert [c[0] for c in nested] == ["push", "push", "pop", "pop"] and nested[0] == nested[1]
    assert nested[0][3] == "forward" and {c[1] for c in nested} == {main_tid}
    assert [(c[0], c[3] if c[0] == "push" else "") for c in threaded] == [("push", "broadcast"), ("pop", "")]
    assert threaded[0][1] == threaded[1][1] != main_tid  # pushed and popped on the thread that ran it
    assert "'forward': 3" in stdout and "'allreduce': 2" in stdout and "'broadcast': 1" in stdout


def test_nvtx_off_makes_no_distprof_calls_but_records(nvtx_tool, tmp_path):
    calls, stdout = run_with_tool(nvtx_tool, tmp_path, "off")
    pushed = [c[3] for c in calls if c[0] == "push" and c[2] == "distprof"]
    assert pushed == ["forward", "allreduce", "allreduce", "mine", "loss"]  # the expect() calls only
    assert not [c for c in calls if c[0] == "start"]  # no ProfileStep range either
    assert "'forward': 3" in stdout and "'mine': 1" in stdout and "'broadcast': 1" in stdout


def test_a_range_is_its_own_with_target_and_records_through_an_exception(tmp_path):
    with distprof.Profiler(out=tmp_path, quiet=True) as prof:
        forward = distprof.phase("forward")
        with forward as entered:
            with pytest.raises(ValueError), distprof.phase("forward"):
                raise ValueError("inside the nested use")
            assert forward._start[0] is not None and not forward._outer
        assert entered is forward and forward._start[0] is None
        assert distprof.phase("forward") is forward  # one object per thread and name
        other = []
        thread = threading.Thread(target=lambda: other.append(distprof.phase("forward")))
        thread.start()
        thread.join()
        assert other[0] is not forward and other[0]._thread != forward._thread
        prof.step()
    from distprof.sources import native
    events = native.read(tmp_path / "rank0.sqlite", distprof.config.load())[0].events.to_frame()
    forward_rows = events[events["name"] == "forward"].sort_values("start_ns")
    assert len(forward_rows) == 2
    outer, inner = forward_rows.iloc[0], forward_rows.iloc[1]
    assert outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]


def test_ranges_made_while_nvtx_is_off_make_no_nvtx_calls():
    annotate.set_nvtx(False)
    try:
        assert distprof.phase("forward")._nvtx_calls is False
    finally:
        annotate.set_nvtx(True)
    assert distprof.phase("forward")._nvtx_calls is (annotate.nvtx_domain() is not None)
