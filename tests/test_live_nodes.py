"""The live view across nodes without a shared file system (issue 39): a folder per rank or node
({rank}, {host} in ``out``), each node's side process reducing its own ranks and sending the
compact results to rank 0's view over TCP (signed frames), a node that stops sending named behind.
Real jobs: the mpirun demo and a torchrun job with a folder per rank standing in for nodes."""

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import foreign_cores, machine_clock, run_cli, skip_if_busy

import distprof
from distprof import collector, live, outpaths, transport
from distprof import config as config_mod
from distprof import events as ev
from distprof.events import SourceError


def test_out_takes_rank_and_host_placeholders():
    assert outpaths.expand("o/node{rank}", 3, "h1") == Path("o/node3")
    assert outpaths.expand("o/{host}/r{rank}", 12, "h1") == Path("o/h1/r12")
    assert outpaths.expand("plain", 5) == Path("plain") and not outpaths.has_placeholders("plain")
    with pytest.raises(SourceError, match=r"unknown placeholder \{rnk\} in the output path"):
        outpaths.expand("o/node{rnk}", 0)


def test_profiler_writes_under_its_own_folder_and_knows_the_others(tmp_path):
    with distprof.Profiler(out=str(tmp_path / "node{rank}" / "{host}"), quiet=True) as prof:
        with distprof.phase("forward"):
            sum(range(1000))
        prof.step()
    own = tmp_path / "node0" / outpaths.host_name()
    assert prof.out == own and (own / "rank0.sqlite").exists() and (own / "summary.json").exists()
    assert prof.rank_file(1) == tmp_path / "node1" / outpaths.host_name() / "rank1.sqlite"
    assert not list(tmp_path.glob("node{rank}*"))  # no literal template folder


def test_frames_are_signed_and_anything_else_is_refused():
    token = secrets.token_bytes(32)
    frame = transport.pack_frame({"kind": "hello", "node": "n1"}, token)
    buffer = bytearray(frame + frame[:10])
    messages, good = transport.unpack_frames(buffer, token)
    assert good and [m.as_message() for m, _ in messages] == [{"kind": "hello", "node": "n1"}]
    assert messages[0][1] == len(frame) and bytes(buffer) == frame[:10]  # the partial frame waits
    assert transport.unpack_frames(bytearray(frame), secrets.token_bytes(32)) == ([], False)
    tampered = bytearray(frame)
    tampered[-1] ^= 1
    assert transport.unpack_frames(tampered, token) == ([], False)
    assert transport.unpack_frames(bytearray((1 << 30).to_bytes(4, "big")), token) == ([], False)


def _steps(rec: collector.Collector, steps: range) -> collector.Collector:
    for step in steps:
        rec.step = step
        start = 10_000_000 * step
        rec.record(ev.PROFILE_STEP, ev.PHASE, ev.RANGE, start, start + 9_000_000)
        rec.record("forward", ev.PHASE, ev.RANGE, start + 1_000_000, start + 5_000_000)
        rec.flush()
    return rec


def _rank_file(path: Path, rank: int, node: str, steps: int) -> collector.Collector:
    rec = collector.Collector(path, rank, 2)
    rec.set_meta(live_node=node)
    rec.activate()
    return _steps(rec, range(steps))


def _setups(tmp_path: Path) -> tuple[dict, dict, socket.socket]:
    config = config_mod.load(None, {"live": {"every_steps": 4, "node": "n{rank}"}})
    host, token = outpaths.host_name(), secrets.token_hex(32)
    base = {"template": str(tmp_path / "n{rank}"), "host": host, "world_size": 2, "config": config,
            "started_wall_ns": time.time_ns(), "quiet": True}
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    view = {**base, "role": "view", "out": str(tmp_path / "n0"), "node": "n0", "token": token,
            "listen_fd": listener.detach()}
    sender = {**base, "role": "sender", "out": str(tmp_path / "n1"), "node": "n1",
              "view": {"addresses": ["127.0.0.1"], "port": port, "token": token}}
    return view, sender, port


def _until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_node_sends_its_ranks_results_and_a_lost_node_is_named_behind(tmp_path, capsys):
    """Rank 1's file is in its own folder and names node n1: the view (node n0) does not read it
    although this host sees it; n1's sender reduces it and sends the results over TCP. Then n1
    stops without its "done" (its sender killed): the view names it, and rank 1 behind."""
    view_setup, sender_setup, port = _setups(tmp_path)
    rank0 = _rank_file(tmp_path / "n0" / "rank0.sqlite", 0, "n0", 4)
    rank1 = _rank_file(tmp_path / "n1" / "rank1.sqlite", 1, "n1", 8)
    view = live.View(view_setup, quiet=False)
    stopped = threading.Event()
    sender = threading.Thread(target=live.send_node, args=(sender_setup, stopped), daemon=True)
    sender.start()
    _until(lambda: view.step(False) or len(view.record["windows"]) == 1)  # waits for rank 1's results
    _steps(rank0, range(4, 8))
    _until(lambda: view.step(False) or len(view.record["windows"]) == 2)
    stopped.set()
    sender.join(timeout=30)
    windows = view.record["windows"]
    assert [[(r["rank"], r["sent_bytes"] is not None) for r in w["ranks"]] for w in windows] == \
        [[(0, False), (1, True)]] * 2
    sizes = [r["sent_bytes"] for w in windows for r in w["ranks"] if r["rank"] == 1]
    assert all(500 < size < 20_000 for size in sizes), sizes  # compact results, not events
    _until(lambda: view.step(False) or view.remote.nodes["n1"]["state"] == "done")

    intruder = socket.create_connection(("127.0.0.1", port))  # not signed with the job's token
    intruder.sendall(transport.pack_frame({"kind": "hello", "node": "evil"}, b"x" * 32))
    intruder.settimeout(5)
    assert intruder.recv(1) == b""  # closed unread
    lost = live.NodeLink(sender_setup["view"], "n1")
    assert lost.ready()
    lost.close()  # connected, then gone without "done": what a killed sender leaves
    for rec in (rank0, rank1):
        _steps(rec, range(8, 16))
    _until(lambda: view.step(False) or len(view.record["windows"]) == 3)
    _until(lambda: view.step(True) or len(view.record["windows"]) == 4)
    assert [w["behind"] for w in view.record["windows"][2:]] == [[{"rank": 1, "committed_step": 7}]] * 2
    printed = capsys.readouterr().out
    flowing = " ".join(printed.split())  # live lines break between words to fit the console's width
    assert "[distprof live] steps 12-15 rank 1: behind (at step 7), left out of this window" in flowing
    assert flowing.count("node n1 stopped sending (ranks 1); its ranks are named behind") == 1
    assert view.remote.nodes["n1"]["state"] == "lost" and "evil" not in view.remote.nodes
    rank0.close()
    rank1.close()


def _live_heads(output: str) -> dict[str, list[int]]:
    """{window "A-B": ranks with figures in it (not those named behind)}, from the printed live lines."""
    windows: dict[str, list[int]] = {}
    for line in output.splitlines():  # a few dozen
        if line.startswith("[distprof live] steps "):
            head, rest = line.split(":", 1)
            head = head.split()
            windows.setdefault(head[3], [])
            if len(head) > 4 and head[4] == "rank" and rest.startswith(" step "):
                windows[head[3]].append(int(head[5]))
    return windows


def _check_folders(out: Path) -> dict:
    """Rank 1's file only in its folder; rank 0's folder has the summary with the live windows."""
    assert sorted(str(p.relative_to(out)) for p in out.rglob("rank*.sqlite")) == \
        ["node0/rank0.sqlite", "node1/rank1.sqlite"]
    assert [p.name for p in (out / "node1").iterdir()] == ["rank1.sqlite"]
    summary = json.loads((out / "node0" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    return summary["live"]


@pytest.mark.exclusive
@pytest.mark.slow
@pytest.mark.parametrize("nodes", ["host", "rank"], ids=["node-per-host", "node-per-rank"])
def test_mpirun_demo_with_a_folder_per_rank(tmp_path, nodes):
    """The issue's command; node-per-rank makes rank 1 its own node (a sender over TCP). On 2 shared
    cores a clean window before the onset names rank 0 in about 1 run of 10 (a real late rank there,
    of the machine: 2 of 10 runs on 0746452, 1 of 15 on 1d93707): the run is made once more
    before the alerts fail the test; the folders and windows must be right in every run."""
    extra = []
    if nodes == "rank":
        (tmp_path / "nodes.yaml").write_text('live:\n  node: "n{rank}"\n')
        extra = ["--config", str(tmp_path / "nodes.yaml")]
    for attempt in range(2):
        out = tmp_path / f"o{attempt}"
        before = machine_clock()
        result = run_cli("demo", "--ranks", "2", "--steps", "28", "--live-every", "4", "--straggler", "1:50@12",
                         "--out", f"{out}/node{{rank}}", *extra, timeout=180)
        busy = foreign_cores(before, machine_clock())
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert _live_heads(result.stdout) == {f"{a}-{a + 3}": [0, 1] for a in range(0, 28, 4)}, result.stdout[-3000:]
        record = _check_folders(out)
        assert [sorted(r["rank"] for r in w["ranks"]) for w in record["windows"]] == [[0, 1]] * 7
        if nodes == "rank":
            assert record["nodes"]["n1"]["state"] == "done" and record["nodes"]["n1"]["ranks"] == [1]
            assert all(r["sent_bytes"] for w in record["windows"] for r in w["ranks"] if r["rank"] == 1)
        skip_if_busy(busy, "alert timing")
        alerts = [line for line in result.stdout.splitlines() if line.startswith("[distprof live] ALERT")]
        named = [a["rank"] for a in record["alerts"] if a["code"] == "straggler"]
        if named == [1] or attempt == 1:
            break
    assert any(": straggler rank 1 (" in line for line in alerts), alerts
    assert named == [1]


TORCH_JOB = """
import os, signal, sys, time
import torch
import torch.distributed as dist
import distprof

out, steps, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
w, x = torch.randn(384, 384), torch.randn(256, 384)
with distprof.Profiler(out=out, live={"every_steps": 4, "node": "n{rank}"}) as prof:
    for step in range(steps):
        with distprof.phase("Dataloader"):
            time.sleep(0.01)  # input waits leave a core some idle time, as GPU training does
        with distprof.phase("forward"):
            y = x
            for _ in range(6):
                y = torch.tanh(y @ w)
            if rank == 1 and step >= 12:
                time.sleep(0.05)  # the straggler, from step 12 on
        with distprof.comm("allreduce"):
            dist.all_reduce(y)
        if rank == 1 and step == kill_at:
            os.kill(prof._live.process.pid, signal.SIGKILL)  # its node's sender, killed
        prof.step()
dist.destroy_process_group()
"""


@pytest.mark.exclusive
@pytest.mark.slow
def test_torchrun_job_with_a_folder_per_rank_a_straggler_and_a_killed_sender(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(TORCH_JOB)
    out = tmp_path / "o"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    before = machine_clock()
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(script), f"{out}/node{{rank}}", "40", "32"], capture_output=True, text=True,
                            timeout=240, env=env)
    busy = foreign_cores(before, machine_clock())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    heads = _live_heads(result.stdout)
    assert list(heads) == [f"{a}-{a + 3}" for a in range(0, 40, 4)], result.stdout[-3000:]
    assert heads["36-39"] == [0] and "[distprof live] steps 36-39 rank 1: behind" in result.stdout
    assert "node n1 stopped sending (ranks 1)" in result.stdout  # named once, the view went on
    record = _check_folders(out)
    assert record["nodes"]["n1"]["state"] == "lost"
    # the side processes run on idle CPU time only (live.priority idle): on a machine other jobs keep
    # busy, a starved sender may miss early windows
    skip_if_busy(busy, "which windows rank 1's results reached, alert timing")
    assert all(heads[f"{a}-{a + 3}"] == [0, 1] for a in range(0, 20, 4)), heads
    assert [a["rank"] for a in record["alerts"] if a["code"] == "straggler"] == [1]
    assert not [a for a in record["alerts"] if a["code"] == "straggler_recovered"]  # behind is not recovered


def test_the_view_waits_for_results_on_their_way_but_at_most_lag_s(monkeypatch):
    """A node that said rank 1 committed step 2 and sent no results yet: the view holds window 0-3
    for it (with fast steps its word is a window old when it arrives: rank 1 is not behind for its
    sender's latency), then after LAG_S names it behind and counts it by its deliveries until they
    catch up; a lost node is counted by them at once, and holds nothing."""
    remote = live.Remote()
    remote.take([("message", "n1", {"kind": "progress", "node": "n1", "committed": {1: 2}}, 105)], 0)
    progress = [7, remote.progress(1, 4, False)]
    assert progress == [7, 2] and live.ready_windows(progress, 0, 4, False) == [(0, 3)]
    assert remote.holding((0, 3))  # rank 1's results may be on their way
    monkeypatch.setattr(live.nodes, "LAG_S", 0.0)
    assert not remote.holding((0, 3)) and remote.slow == {1}
    assert remote.progress(1, 4, False) is None  # by its deliveries: none
    window = {"kind": "window", "node": "n1", "rank": 1, "steps": [4, 7], "committed": 7, "result": "r"}
    remote.take([("message", "n1", window, 2400)], 4)
    assert remote.progress(1, 4, False) == 7 and remote.slow == set() and remote.pop(4, 1) == ("r", 2400)
    remote.take([("message", "n1", {"kind": "progress", "node": "n1", "committed": {1: 15}}, 105)], 8)
    assert remote.progress(1, 4, False) == 15
    remote.take([("closed", "n1", None, 0)], 8)
    assert remote.nodes["n1"]["state"] == "lost" and remote.progress(1, 4, False) == 7
    assert not remote.holding((8, 11))
    assert remote.newly_lost == ["n1"] and remote.record()["n1"]["bytes"] == 2610


def test_live_node_and_priority_keys():
    live_config = config_mod.load()["live"]
    assert (live_config["node"], live_config["view_addr"], live_config["priority"]) == ("{host}", None, "idle")
    with pytest.raises(config_mod.ConfigError, match="key 'live.priority' must be one of idle, nice"):
        config_mod.load(None, {"live": {"priority": "fast"}})
    with pytest.raises(config_mod.ConfigError, match="key 'live.node' must not be empty"):
        config_mod.load(None, {"live": {"node": ""}})
