"""`distprof demo --topology tp2dp2|pp4` (issue 36): real 4-rank MPI jobs whose merge must show the
process groups of a TP x DP job and the matched send/recv pairs of a pipeline, and the plumbing of
``--topology`` and ``--straggler RANK:MS[@STEP]:data`` (dry runs: the mpirun command, one-line errors).

Each real run carries a small straggler (in forward for tp2dp2, in the dataloader for pp4); only the
lower bound a sleep guarantees is asserted (the phase holds at least the injected milliseconds), never
which rank distprof names: that depends on the machine's load.
"""

import json
from collections import Counter

import pytest
from conftest import run_cli, shared_demo

import distprof

MS = 1_000_000
STEPS = 6  # conftest.shared_demo's run length
DEMO = distprof.config.load(None)["demo"]
LAYERS, WIDTH, BATCH = DEMO["layers"], DEMO["width"], DEMO["batch"]


@pytest.fixture(scope="module")
def tp2dp2(request, tmp_path_factory):
    """TP pairs {0,1},{2,3} x DP pairs {0,2},{1,3}; rank 3 sleeps 20 ms in every forward."""
    out = shared_demo(request, tmp_path_factory, "demo_tp2dp2", "--topology", "tp2dp2", "--straggler", "3:20")
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def pp4(request, tmp_path_factory):
    """A 4-stage pipeline; stage 1's dataloader sleeps 20 ms before every batch."""
    out = shared_demo(request, tmp_path_factory, "demo_pp4", "--topology", "pp4", "--straggler", "1:20:data")
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def pp4_device(request, tmp_path_factory):
    """The pipeline as a GPU job's host sees it (configs/demo_device.yaml: 2 ms kernel waits, no CPU
    to share); the last stage's dataloader sleeps 12 ms before every batch."""
    from conftest import ROOT
    out = shared_demo(request, tmp_path_factory, "pp4_device", "--topology", "pp4", "--straggler", "3:12:data",
                      "--config", str(ROOT / "configs" / "demo_device.yaml"))
    return out, json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def pp4_device_clean(request, tmp_path_factory):
    """The same pipeline without the sleep."""
    from conftest import ROOT
    out = shared_demo(request, tmp_path_factory, "pp4_device_clean", "--topology", "pp4",
                      "--config", str(ROOT / "configs" / "demo_device.yaml"))
    return out, json.loads((out / "summary.json").read_text())


def phase_busy_ns(summary: dict, name: str, rank: int) -> int:
    (phase,) = [p for p in summary["skew"]["phases"] if p["name"] == name]
    return phase["busy_ns_by_rank"][str(rank)]


@pytest.mark.slow
def test_tp2dp2_shows_tp_allreduce_and_dp_allgather_groups(tp2dp2):
    assert [rank["steps"] for rank in tp2dp2["ranks"]] == [STEPS] * 4
    rows = {(row["kind"], row["group"]): row for row in tp2dp2["collectives"]["rows"]}
    assert set(rows) == {("allreduce", "ranks 0,1"), ("allreduce", "ranks 2,3"),
                         ("allgather", "ranks 0,2"), ("allgather", "ranks 1,3")}
    for (kind, _), row in rows.items():  # one op per layer per step in each group, every one matched
        assert row["count"] == row["matched"] == STEPS * LAYERS, row
        # TP: a layer's output (batch x width); DP allgather: the whole output, both ranks' gradients
        assert row["bytes_median"] == (BATCH * WIDTH * 8 if kind == "allreduce" else 2 * WIDTH * WIDTH * 8), row
    assert tp2dp2["collectives"]["single_rank"] == 0
    members = {(op["kind"], tuple(op["group_ranks"])) for op in tp2dp2["skew"]["collectives"]}
    assert members == {("allreduce", (0, 1)), ("allreduce", (2, 3)), ("allgather", (0, 2)), ("allgather", (1, 3))}
    assert all(kind["ranks"] == 2 and kind["unmatched_steps"] == 0 for kind in tp2dp2["skew"]["kinds"])
    assert phase_busy_ns(tp2dp2, "forward", 3) >= STEPS * 20 * MS  # the straggler's sleep is in its forward


@pytest.mark.slow
def test_pp4_matches_every_send_with_its_recv(pp4):
    assert [rank["steps"] for rank in pp4["ranks"]] == [STEPS] * 4
    (row,) = pp4["collectives"]["rows"]
    per_step = 3 * 2 * 2  # 3 links (stage r -> r+1) x 2 micro-batches x (forward activations, backward gradients)
    assert (row["kind"], row["group"]) == ("p2p", "ranks 0,1,2,3")
    assert row["count"] == row["matched"] == STEPS * per_step, row
    assert row["bytes_median"] == BATCH // 2 * WIDTH * 8  # one micro-batch's activations (or gradients)
    (kind,) = pp4["skew"]["kinds"]
    assert (kind["name"], kind["matched"], kind["unmatched_steps"]) == ("p2p", STEPS * per_step, 0)
    assert pp4["skew"]["collectives_shown"] == pp4["skew"]["collectives_total"] == STEPS * per_step
    pairs = Counter(tuple(op["group_ranks"]) for op in pp4["skew"]["collectives"])
    assert pairs == {(0, 1): STEPS * 4, (1, 2): STEPS * 4, (2, 3): STEPS * 4}  # neighbours only
    assert not [w for w in pp4["warnings"] if "counts differ" in w]
    assert phase_busy_ns(pp4, "Dataloader", 1) >= STEPS * 20 * MS  # the :data sleep is in the dataloader


def dry_run(*args: str) -> list[str]:
    result = run_cli("demo", *args, "--dry-run")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_topology_reaches_the_ranks_and_dp_stays_as_it_was():
    plain = dry_run("--steps", "3")
    assert "--topology" not in plain  # not given: the command of before, byte for byte
    with_dp = dry_run("--steps", "3", "--topology", "dp")
    at = with_dp.index("--topology")
    assert with_dp[at + 1] == "dp" and with_dp[:at] + with_dp[at + 2:] == plain
    command = dry_run("--topology", "pp4", "--straggler", "1:30@2:data", "--out", "x")
    assert command[command.index("-n") + 1] == "4"
    assert command[command.index("--topology") + 1] == "pp4"
    assert command[command.index("--straggler") + 1] == "1:30@2:data"
    assert "--topology" in dry_run("--topology", "tp2dp2", "--ranks", "4", "--straggler", "3:20:data")


@pytest.mark.parametrize(("args", "expected"), [
    (["--topology", "tp2dp2", "--ranks", "2"], "--topology tp2dp2 needs --ranks 4"),
    (["--topology", "pp4", "--ranks", "8"], "--topology pp4 needs --ranks 4"),
    (["--topology", "pp4", "--comm", "serial"], "--comm applies to --topology dp only"),
    (["--straggler", "1:30:disk"], "the only suffix is :data"),
    (["--straggler", "1:30@x:data"], "STEP must be a step number"),
    (["--straggler", "7:30:data"], "RANK must be 0..3"),
    (["--straggler", "1:data"], "expected RANK:MS"),
])
def test_bad_topology_or_straggler_is_one_line(args, expected):
    result = run_cli("demo", *args, "--dry-run")
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.slow
def test_demo_kernel_waits_and_a_slow_last_pipeline_stage(pp4_device, pp4_device_clean):
    """demo.kernel_ms: every matmul is followed by its kernel wait (the pipeline's stage holds one of the
    4 layers: a forward matmul and two backward ones a micro-batch). The last stage runs a micro-batch's
    forward and backward before its first backward send, so what its neighbour waits there is no
    measure of its delay: it is charged by its time outside send/recv against the median stage's (the
    rule before named nobody here: "rank 1 is late only in step(s) 0: transient"). Its 12 ms
    dataloader sleep a step runs while the last stage would wait for the first micro-batch anyway:
    the same demo without it (run here too) is about as fast (0.4-0.6 ms apart in quiet runs, 3.7 and
    5.9 ms in two full suites: separate runs on shared cores), far less than the 12 ms of waits it causes;
    the replay prices the fix under the floor (0.3-0.9% of the step in quiet runs, 4.3% in that
    suite), so rank 3 is held unconfirmed, not named; near the floor, noise may tip it, so only the
    charge is asserted here (on 2 cores the replay gives no cost but its floor applies: test_blame
    pins that rule)."""
    from conftest import skip_if_busy
    out, summary = pp4_device
    for rank in range(4):
        assert phase_busy_ns(summary, "forward", rank) >= STEPS * 2 * 2 * MS
        assert phase_busy_ns(summary, "backward", rank) >= STEPS * 2 * 2 * 2 * MS
    assert phase_busy_ns(summary, "Dataloader", 3) >= STEPS * 12 * MS
    clean_out, clean = pp4_device_clean
    for folder in (out, clean_out):
        skip_if_busy(float((folder / "foreign_cores.txt").read_text()), "straggler timing")
    charged = summary["skew"]["straggler"] or summary["skew"]["unconfirmed_straggler"]
    assert charged is not None and charged["rank"] == 3, summary["skew"]["notes"]
    # the 12 ms sleep, give or take the noise of shared cores: up to a tenth of the step either way (a full
    # suite once ran these steps at 63 ms instead of 34 and charged 16.8 ms; another charged 7.9 ms)
    noise = 0.1 * summary["whatif"]["measured_step_ns"]
    assert min(10 * MS, 12 * MS - noise) <= charged["waits_caused_ns"] <= 12 * MS + noise
    # about as fast without the sleep: two separate runs on shared cores, so the same noise either way (a fresh
    # clone's suite once ran them 5.9 ms apart at a 45 ms step); the sleep's whole 12 ms would not pass
    slower = summary["whatif"]["measured_step_ns"] - clean["whatif"]["measured_step_ns"]
    assert slower < charged["waits_caused_ns"] / 2 + noise
