"""What travels between distprof's processes, as data: msgpack through msgspec into the types the
receiver expects, never pickle. A store (torchrun's TCPStore needs no password and listens on every
interface), a socket or an MPI message may carry bytes from anyone who can reach it; decoded into a
fixed type, the worst such bytes can do is be refused or give wrong numbers: they never run code.

* the stop exchange (``transport.stop_exchange``): a message per kind, ``STOP_TYPES``;
* the live view's frames (``transport.pack_frame``): ``Frame``, with the connection's session and a
  sequence number under the MAC, so a captured frame cannot be replayed as a node's.
"""

from __future__ import annotations

import msgspec

from .results import RankResult


class ResultMessage(msgspec.Struct, omit_defaults=True):
    """A rank's payload at the stop: its compact result, or the timer-only benchmark's figures."""

    rank_result: RankResult | None = None
    perf: dict | None = None


# kind of stop message -> the one type its bytes decode into
STOP_TYPES: dict[str, type] = {"status": str | None, "plan": list[int], "result": ResultMessage, "done": bool}


def encode_stop(kind: str, value) -> bytes:
    """A stop message of ``kind`` as bytes (a payload that is not a RankResult is the benchmark's dict)."""
    if kind == "result":
        value = ResultMessage(rank_result=value) if isinstance(value, RankResult) else \
            ResultMessage(perf=value) if isinstance(value, dict) else ResultMessage()
    return msgspec.msgpack.encode(value)


def decode_stop(kind: str, data: bytes):
    """The stop message of ``kind`` in ``data``; raises msgspec.DecodeError/ValidationError where the bytes
    are not that kind's type (the caller treats it as nothing received)."""
    value = msgspec.msgpack.decode(data, type=STOP_TYPES[kind])
    if kind == "result":
        return value.rank_result if value.rank_result is not None else value.perf
    return value


class Frame(msgspec.Struct, omit_defaults=True):
    """One message of a node's sender to the view. ``session`` (random per connection) and ``seq`` (0, 1,
    ... on it) are signed with the rest: the view refuses a session it has seen and a frame out of order."""

    kind: str                   # hello | progress | window | done
    node: str
    session: bytes = b""
    seq: int = 0
    rank: int | None = None
    steps: list[int] | None = None
    committed: int | dict[int, int] | None = None
    result: RankResult | None = None

    def as_message(self) -> dict:
        """The message as the view reads it (its keys; the session and sequence stay with the inbox)."""
        out = {"kind": self.kind, "node": self.node}
        for key in ("rank", "steps", "committed", "result"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


_FRAME_DECODER = msgspec.msgpack.Decoder(Frame)


def encode_frame(frame: Frame) -> bytes:
    return msgspec.msgpack.encode(frame)


def decode_frame(data: bytes) -> Frame:
    """Raises msgspec.DecodeError/ValidationError where ``data`` is not a Frame."""
    return _FRAME_DECODER.decode(data)
