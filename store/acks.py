"""Ack reply subjects and ack payloads (spec §1.9.1, §1.9.2), parsed into store operations.

``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (v1, 9 tokens) and
``$JS.ACK.<domain>.<acc hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[...]``
(v2, at least 11 tokens) are accepted; anything else is refused with ``ValueError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from store.ops import Ack, AckKind

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}


@dataclass(frozen=True, slots=True)
class AckReply:
    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    pending: int


def parse_ack_reply(subject: str) -> AckReply:
    """Parse a ``$JS.ACK...`` reply subject (v1 or v2)."""
    t = subject.split(".")
    if len(t) < 2 or t[0] != "$JS" or t[1] != "ACK":
        raise ValueError("not an ack subject")
    if len(t) == 9:
        rest = t[2:]
    elif len(t) >= 11:
        rest = t[4:11]
    else:
        raise ValueError(f"ack subject has {len(t)} tokens")
    stream, consumer, *nums = rest
    try:
        d, s, c, ts, p = (int(x) for x in nums)
    except ValueError:
        raise ValueError("ack subject has non-numeric fields") from None
    if not stream or not consumer:
        raise ValueError("ack subject without stream or consumer")
    return AckReply(stream, consumer, d, s, c, ts, p)


def parse_go_duration(text: str) -> int:
    """A Go duration (``"5s"``, ``"1m30s"``, ``"250ms"``) in nanoseconds."""
    text = text.strip()
    if not text:
        raise ValueError("empty duration")
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(f"invalid duration {text!r}")
    return int(total)


def _nak_delay(arg: str) -> int:
    """A NAK's delay: ``{"delay": ns}`` or a Go duration. One the server cannot read (not
    JSON, not an int64 of nanoseconds, not a duration) makes a plain NAK, as there."""
    if not arg:
        return 0
    try:
        if arg.startswith("{"):
            body = json.loads(arg)
            delay = body.get("delay", 0) if isinstance(body, dict) else None
            if delay is None:
                return 0
            if type(delay) is not int:
                raise ValueError("delay is not an integer")
        else:
            delay = parse_go_duration(arg)
    except ValueError:
        return 0
    return delay if -(1 << 63) <= delay < 1 << 63 else 0


def ack_from_payload(reply: AckReply, payload: bytes, next_reply: str = "") -> Ack:
    """The :class:`Ack` operation for an ack ``payload`` published to ``reply``.

    Empty, ``+ACK`` and ``+OK`` ack; ``-NAK`` [``{"delay": ns}`` | Go duration];
    ``+WPI``; ``+TERM`` [reason]; ``+NXT`` [batch number or ``{"batch": n}``], whose
    further messages go to ``next_reply``. Unknown payloads raise ``ValueError``.
    """
    text = payload.decode("utf-8", "replace").strip()
    head, _, arg = text.partition(" ")
    arg = arg.strip()

    def mk(kind: AckKind, **kw: Any) -> Ack:
        return Ack(
            reply.stream, reply.consumer, reply.stream_seq, kind, cseq=reply.consumer_seq, **kw
        )

    if head in ("", "+ACK", "+OK"):
        return mk(AckKind.ACK)
    if head == "-NAK":
        return mk(AckKind.NAK, delay_ns=max(0, _nak_delay(arg)))
    if head == "+WPI":
        return mk(AckKind.WPI)
    if head == "+TERM":
        return mk(AckKind.TERM, reason=arg)
    if head == "+NXT":
        batch = 1
        if arg.startswith("{"):
            body = json.loads(arg)
            given: object = body.get("batch", 1) if isinstance(body, dict) else None
            if type(given) is not int:
                raise ValueError(f"+NXT batch is not an integer: {arg[:32]!r}")
            batch = given
        elif arg:
            batch = int(arg)
        return mk(AckKind.NEXT, next_reply=next_reply, next_batch=batch)
    raise ValueError(f"unknown ack payload {text[:32]!r}")
