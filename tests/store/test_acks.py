"""Ack reply subjects and payloads (spec §1.9.1-1.9.2)."""

from __future__ import annotations

import pytest

from store import AckKind
from store.acks import ack_from_payload, parse_ack_reply, parse_go_duration


def test_v1_and_v2_reply_subjects() -> None:
    r = parse_ack_reply("$JS.ACK.ORDERS.pull1.1.1.1.1795272158253893959.1")
    assert (r.stream, r.consumer, r.delivered, r.stream_seq, r.consumer_seq, r.pending) == (
        "ORDERS",
        "pull1",
        1,
        1,
        1,
        1,
    )
    r2 = parse_ack_reply("$JS.ACK._.ACC.S.rd.2.1.2.1795272797141470625.0.xyz")
    assert (r2.stream, r2.consumer, r2.delivered, r2.stream_seq) == ("S", "rd", 2, 1)


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.ACK.S.c.1.1.1.1",
        "$JS.ACK.S.c.1.1.1.1.1.1",
        "$JS.NAK.S.c.1.1.1.1.1",
        "$JS.ACK.S.c.x.1.1.1.1",
    ],
)
def test_bad_reply_subjects(subject: str) -> None:
    with pytest.raises(ValueError, match=r"ack|token|numeric"):
        parse_ack_reply(subject)


@pytest.mark.parametrize(
    ("payload", "kind", "delay", "reason", "batch"),
    [
        (b"", AckKind.ACK, 0, "", 1),
        (b"+ACK", AckKind.ACK, 0, "", 1),
        (b"+OK", AckKind.ACK, 0, "", 1),
        (b"-NAK", AckKind.NAK, 0, "", 1),
        (b'-NAK {"delay": 2000000000}', AckKind.NAK, 2_000_000_000, "", 1),
        (b"-NAK 1m30s", AckKind.NAK, 90_000_000_000, "", 1),
        (b"+WPI", AckKind.WPI, 0, "", 1),
        (b"+TERM bad payload", AckKind.TERM, 0, "bad payload", 1),
        (b"+NXT 5", AckKind.NEXT, 0, "", 5),
        (b'+NXT {"batch": 3}', AckKind.NEXT, 0, "", 3),
    ],
)
def test_payloads(payload: bytes, kind: AckKind, delay: int, reason: str, batch: int) -> None:
    reply = parse_ack_reply("$JS.ACK.S.c.1.7.1.0.0")
    ack = ack_from_payload(reply, payload, next_reply="inbox")
    assert (ack.stream, ack.consumer, ack.seq, ack.kind) == ("S", "c", 7, kind)
    assert (ack.delay_ns, ack.reason, ack.next_batch) == (delay, reason, batch)


def test_go_durations() -> None:
    assert parse_go_duration("250ms") == 250_000_000
    assert parse_go_duration("1.5s") == 1_500_000_000
    assert parse_go_duration("1h") == 3600 * 10**9
    for bad in ("", "5", "5x", "s5"):
        with pytest.raises(ValueError, match="duration"):
            parse_go_duration(bad)
    with pytest.raises(ValueError, match="unknown ack"):
        ack_from_payload(parse_ack_reply("$JS.ACK.S.c.1.7.1.0.0"), b"+WHAT")
