"""The rolling view while the job trains (config ``live:``): every K committed steps rank 0 prints
a Distributed Summary of the last K steps, alerts when a rank becomes (or stops being) the
straggler or a figure jumps, and exports Prometheus gauges.

Where it runs: side processes (``python -m distprof.live``), at the lowest priority
(training_first), that read the ranks' native files, which every rank commits at each step in WAL
mode (readable while written). Rank 0 starts
the view; on every other node (config ``live.node``: by default one per host) one rank starts a
sender. Each reduces its own node's ranks, window by window, from their local files
(pipeline.reduce_rank, as the final summary does); a sender ships the compact per-rank results
(not events) to the view over TCP, and the view combines them with its own (pipeline.combine).
The view's address and port go out once at the start, through MPI or the torch store, with a
token that signs every frame (frames are msgpack decoded into wire.Frame, never unpickled).

Not threads: the analysis of one window takes 0.2-0.7 s of Python, and a thread would take that
from the training thread through the GIL, making the rank that runs it the straggler it reports.
The training thread sends nothing and waits for nothing after the start; the side processes take
only CPU time no other process wants (SCHED_IDLE). Their stdin is a pipe from their rank: closed
(the stop, or the rank dying) they finish the complete windows and exit; their failures cost a
warning, never the job, and a rank's crash stays that crash. A rank whose results do not reach a
window (its file behind, or its node's sender gone or too slow) is named as behind once another
rank is a whole window past it (a sent rank: after LAG_S at most); it never holds the view longer.

Limits: windows are whole multiples of K from step 0; without MPI or a torch process group the
view sees only rank 0's host.

The package: ``process`` (every rank's side: start, stop, priority), ``windows`` (rank files and the
windows read from them), ``nodes`` (senders, the view's inbox, what each node said), ``metrics``
(Prometheus gauges, /metrics, the textfile), ``sockets`` (the one accept loop of the inbox and /metrics)
and ``view`` (the view's loop and the side process's ``main``; ``python -m distprof.live`` runs it).
"""

from .metrics import Metrics, MetricsServer
from .nodes import (
    AWAKE_S,
    HEARTBEAT_S,
    LAG_S,
    MAX_PENDING,
    SILENT_S,
    STALL_S,
    Inbox,
    NodeLink,
    Remote,
    send_node,
)
from .process import LIVE_FILE, LiveProcess, ended_early, start_rank, stop, stop_priority, training_first
from .view import View, main, watch
from .windows import RankCursor, node_cursors, ready_windows, reduce_window, window_summary

__all__ = ["AWAKE_S", "HEARTBEAT_S", "LAG_S", "LIVE_FILE", "MAX_PENDING", "SILENT_S", "STALL_S", "Inbox",
           "LiveProcess", "Metrics", "MetricsServer", "NodeLink", "RankCursor", "Remote", "View", "ended_early", "main",
           "node_cursors", "ready_windows", "reduce_window", "send_node", "start_rank", "stop", "stop_priority",
           "training_first", "watch", "window_summary"]
