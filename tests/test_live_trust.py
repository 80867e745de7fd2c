"""The live view's trust boundary (issue 57): what travels between the job's processes is data decoded
into fixed types, never unpickled, whoever wrote it; unsigned connections hold little memory; a frame
captured and sent again never speaks for a node."""

import os
import pickle
import re
import socket
import time
import zlib
from pathlib import Path

import pytest

from distprof import live, transport, wire

PACKAGE = Path(__file__).resolve().parents[1] / "distprof"


class _Payload:
    """What an attacker's pickle does when loaded: create a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _signed(payload: bytes, token: bytes) -> bytes:
    import hashlib
    import hmac
    return (transport.FRAME_MAC + len(payload)).to_bytes(transport.FRAME_LENGTH, "big") + \
        hmac.new(token, payload, hashlib.sha256).digest() + payload


def test_nothing_read_from_a_socket_or_a_store_is_unpickled():
    """Only the Flight Recorder reader unpickles, from files the user names, with an unpickler that builds
    builtins only (sources/flight_recorder.py)."""
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if path.name != "flight_recorder.py":
            assert not re.search(r"\bpickle\.(loads?|Unpickler)\b|\bimport pickle\b", text), path


def test_a_signed_pickle_frame_runs_nothing_in_the_view(tmp_path):
    """A reader of the job's store learns the token: a pickle it signs is refused, not loaded."""
    marker = tmp_path / "ran"
    token = os.urandom(32)
    frame = _signed(zlib.compress(pickle.dumps(_Payload(marker))), token)
    assert transport.unpack_frames(bytearray(frame), token) == ([], False)
    assert not marker.exists()


def test_a_pickle_in_the_torch_store_runs_nothing(tmp_path):
    """Under torchrun the stop exchange goes through the job's TCPStore, which any client can write: a
    crafted value under the key rank 0 reads is as nothing received, and runs nothing."""
    torch_distributed = pytest.importorskip("torch.distributed")
    marker = tmp_path / "ran"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = torch_distributed.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)
    attacker = torch_distributed.TCPStore("127.0.0.1", port, 2, False)
    link = transport.StoreLink(store, 0)
    attacker.set(f"{link.prefix}/status/1-0", pickle.dumps(_Payload(marker)))
    assert link.take("status", 1, time.monotonic() + 0.2) is transport.MISSING
    assert not marker.exists()
    sender = transport.StoreLink.__new__(transport.StoreLink)
    sender.store, sender.prefix, sender.rank = attacker, link.prefix, 1
    sender.put("plan", [1, 2], 0)
    assert link.take("plan", 1, time.monotonic() + 1.0) == [1, 2]  # what the job sends still arrives


def test_stop_messages_round_trip_in_their_types():
    assert wire.decode_stop("status", wire.encode_stop("status", None)) is None
    assert wire.decode_stop("status", wire.encode_stop("status", "rank 1 failed")) == "rank 1 failed"
    assert wire.decode_stop("result", wire.encode_stop("result", {"rank": 1, "batches": 3})) == \
        {"rank": 1, "batches": 3}
    assert wire.decode_stop("done", wire.encode_stop("done", True)) is True


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _inbox(token: bytes, limit: int = 16):
    listener = socket.create_server(("127.0.0.1", 0))
    return live.Inbox(listener, token, limit), listener.getsockname()[1]


def test_unsigned_connections_hold_little_memory():
    """Twelve connections that each announce a 64 MiB frame and send it: the inbox buffers at most a first
    frame's bound of each before it closes them, so the view's memory stays where it was."""
    inbox, port = _inbox(os.urandom(32))
    before = _rss_bytes()
    chunk = b"\0" * (1 << 20)
    clients = []
    for _ in range(12):
        client = socket.create_connection(("127.0.0.1", port))
        client.settimeout(2)
        clients.append(client)
        try:
            client.sendall((64 << 20).to_bytes(4, "big"))
            for _ in range(64):
                client.sendall(chunk)
        except OSError:
            pass  # closed by the view: what should happen
    time.sleep(0.5)
    assert _rss_bytes() - before < 20 << 20
    assert not inbox.conns
    inbox.stopped = True
    for client in clients:
        client.close()


def _connect_and_send(port: int, frames: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as client:
        for frame in frames:
            client.sendall(frame)
        time.sleep(0.3)


def _taken(inbox, seconds: float = 1.0) -> list:
    deadline, out = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        out += inbox.drain()
        time.sleep(0.05)
    return out


def test_a_replayed_connection_never_speaks_for_a_node(capsys):
    """Frames of node n1 captured on the wire and sent again on a new connection: refused at the first
    frame, so the view never takes them, and never says that n1 stopped sending."""
    token = os.urandom(32)
    inbox, port = _inbox(token)
    session = os.urandom(16)
    frames = [transport.pack_frame(wire.Frame(kind="hello", node="n1", session=session, seq=0), token),
              transport.pack_frame(wire.Frame(kind="progress", node="n1", session=session, seq=1,
                                              committed={1: 7}), token)]
    _connect_and_send(port, frames)
    first = _taken(inbox)
    assert [(kind, node, message["kind"]) for kind, node, message, _ in first if kind == "message"] == \
        [("message", "n1", "hello"), ("message", "n1", "progress")]
    _connect_and_send(port, frames)  # the capture, replayed
    again = _taken(inbox)
    assert again == []  # no message, and no "closed" for n1
    assert "replayed or out of order" in capsys.readouterr().err
    out_of_order = [transport.pack_frame(wire.Frame(kind="hello", node="n2", session=os.urandom(16), seq=0),
                                         token), frames[1]]
    _connect_and_send(port, out_of_order)  # a frame of another connection spliced in: the connection closes
    spliced = _taken(inbox)
    assert [(kind, node) for kind, node, _, _ in spliced] == [("message", "n2"), ("closed", "n2")]
    inbox.stopped = True
