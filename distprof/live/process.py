"""Every rank's side of the live view: start its side process (the view on rank 0, a sender on one
rank of every other node), stop it, and set the priority it runs at (training first)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from .. import outpaths, transport

LIVE_FILE = "live.json"
STOP_WAIT_S = 10.0      # at the stop, how long rank 0 waits for the view's last windows
SENDER_STOP_WAIT_S = 5.0  # at the stop, how long a node's leading rank waits for its sender's last windows
START_WAIT_S = 60.0     # at the start (torch store), how long a rank waits for rank 0's view address


class LiveProcess:
    """A running side process: the view (rank 0) or its node's sender."""

    def __init__(self, process: subprocess.Popen, out: Path, role: str = "view") -> None:
        self.process, self.out, self.role = process, out, role


def _env() -> dict:
    package_parent = str(Path(__file__).resolve().parents[2])  # the folder holding distprof/
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])),
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _spawn(setup: dict, listener: socket.socket | None = None) -> LiveProcess | None:
    """Start ``python -m distprof.live`` with ``setup`` on its stdin (and ``listener``, the view's
    socket for the senders, passed open); None, with one line on stderr, when it cannot start."""
    role = setup.get("role", "view")
    fds = () if listener is None else (listener.fileno(),)
    if listener is not None:
        setup = {**setup, "listen_fd": listener.fileno()}
    try:
        process = subprocess.Popen([sys.executable, "-m", "distprof.live"], stdin=subprocess.PIPE, env=_env(),
                                   close_fds=True, pass_fds=fds,
                                   stdout=subprocess.DEVNULL if role == "sender" else None)
        process.stdin.write((json.dumps(setup) + "\n").encode())
        process.stdin.flush()
    except (OSError, ValueError) as error:
        sys.stderr.write(f"distprof: live {role} not started ({error}); training goes on without it\n")
        return None
    finally:
        if listener is not None:
            listener.close()  # the view holds its own copy
    return LiveProcess(process, Path(setup["out"]), role)


def _listen() -> socket.socket | None:
    """The view's socket for the other nodes' senders: every interface, a port the system picks
    (frames are signed; anything else is closed unread)."""
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=64)
        return socket.create_server(("", 0), backlog=64)
    except OSError:
        return None


def start_rank(rank: int, world_size: int, node: str, template: str, out: Path, config: dict, comm=None,
               quiet: bool = False) -> LiveProcess | None:
    """Every rank at the start of a live session: rank 0 starts the view, the leading rank of each
    other node its sender, the rest nothing. The one exchange (transport.live_rendezvous) happens
    here, at the start; nothing after it runs on the training thread."""
    import secrets
    base = {"out": str(out), "template": str(template), "host": outpaths.host_name(), "node": node,
            "world_size": world_size, "config": config, "started_wall_ns": time.time_ns(), "quiet": quiet}
    views: list[LiveProcess | None] = []

    def offer(remote: bool | None) -> dict:
        listener = _listen() if remote is not False else None
        token = secrets.token_hex(32)
        port = listener.getsockname()[1] if listener is not None else None
        views.append(_spawn({**base, "role": "view", "token": token}, listener))  # closes the listener here
        if views[0] is None or port is None:
            return {"node": node}
        return {"node": node, "addresses": transport.view_addresses(config["live"]["view_addr"]), "port": port,
                "token": token}
    timeout = min(START_WAIT_S, float(config["collector"]["merge_timeout_s"]))
    try:
        view, leads = transport.live_rendezvous(comm, rank, world_size, node, offer, timeout)
    except (OSError, RuntimeError, ValueError) as error:  # the store failing: no live view across nodes
        sys.stderr.write(f"distprof: warning: live view: no address exchange ({error}); this node is not sent\n")
        view, leads = None, False
    if rank == 0:
        return views[0] if views else None
    if leads and view and view.get("port"):
        return _spawn({**base, "role": "sender", "view": view})
    return None


def stop(live: LiveProcess | None, wait_s: float | None = None) -> dict | None:
    """Close the side process's pipe, let it finish its complete windows (bounded), return the
    view's record (summary.json's ``live``) or None (a sender, or no record). A view that ended
    before the stop (killed, failed) or had to be ended is said in one warning line and its record
    says how (``ended``): its last live.json showed its nodes still open, as if nothing had happened."""
    if live is None:
        return None
    if wait_s is None:
        wait_s = STOP_WAIT_S if live.role == "view" else SENDER_STOP_WAIT_S
    before = live.process.poll()  # not None: it ended before its stop
    try:
        live.process.stdin.close()
    except OSError:
        pass
    cut = False
    try:
        live.process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        cut = True
        live.process.terminate()
        try:
            live.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            live.process.kill()
    if live.role != "view":
        return None
    try:
        record = json.loads((live.out / LIVE_FILE).read_text())
    except (OSError, ValueError):
        record = None
    ended = None if cut else ended_early(live.process.returncode, before is not None)  # cut: ended here, bounded
    if ended is not None:
        last = (record or {}).get("windows") or [{}]
        seen = f"its last window steps {last[-1]['steps'][0]}-{last[-1]['steps'][1]}" if last[-1] else "no window"
        sys.stderr.write(f"distprof: warning: the live view ended early ({ended}): {seen} in summary.json's "
                         "live, which says so (live.ended); training was not affected\n")
        if isinstance(record, dict):
            record = {**record, "ended": ended}
    return record


def ended_early(returncode: int | None, before_stop: bool) -> str | None:
    """How the view ended where it did not end by its stop (None where it did): killed by a signal
    (before the stop, or while finishing its last windows), or failed."""
    import signal
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}" + ("" if before_stop else " at the stop")
    if returncode:
        return f"failed, exit status {returncode}"
    return None



def training_first(priority: str = "idle") -> None:
    """Where the side processes run (config ``live.priority``): ``idle``, SCHED_IDLE (Linux; else
    nice 19), they take only CPU time no other process wants; ``nice``, nice 5, they compete for a
    core at a lower priority. Measured (benchmarks/live_overhead.py, 2 ranks busy on 2 cores, a
    window every 4 steps of 50 ms): nice 5 cost training +3.4%, nice 19 +1.0%, SCHED_IDLE +0.15%.
    Where training keeps every core busy, ``idle`` makes the view lag (windows late or skipped, a
    starved node's ranks named behind) instead of slowing training; on GPU nodes the cores it needs
    are idle anyway."""
    try:
        os.nice(5)  # the nice value the stop goes back to (stop_priority)
        if priority == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(14)
        except OSError:
            pass


def stop_priority() -> None:
    """At the stop its rank's training is over: every thread of the side process back to the
    normal scheduler (still niced), where the system allows it, so the last windows do not wait
    for idle time."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:  # a handful
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass
