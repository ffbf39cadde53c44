"""The ack topic parser's fast path (a plain ack, read off the topic bytes) gives the
same answer as the full parse for every topic, well-formed or not."""

from __future__ import annotations

import pytest

from broker.jetstream.acks import parse
from store import Ack, AckKind

TOPICS = [
    b"$JS/ACK/CON/C/1/2/3/1764200000123456789/5",
    b"$JS/ACK/CON/C/1/0/3/4/5",  # stream seq 0
    b"$JS/ACK/CON/C/1/18446744073709551615/3/4/5",  # 2**64 - 1: 20 digits
    b"$JS/ACK/CON/C/1/18446744073709551616/3/4/5",  # 2**64
    b"$JS/ACK/CON/C/1/00000000000000000000002/3/4/5",  # leading zeros
    b"$JS/ACK/CON/C/+1/2/3/4/5",  # int() takes a sign
    b"$JS/ACK/CON/C/1/2/3/4/1_0",  # and underscores
    b"$JS/ACK/CON/C/\xd9\xa1/2/3/4/5",  # and non-ASCII digits
    b"$JS/ACK/CON/C/1/2/3/4/",
    b"$JS/ACK/CON/C/1/2/3/4/5/6",
    b"$JS/ACK/a.b/C/1/2/3/4/5",  # a dot makes more tokens
    b"$JS/ACK//C/1/2/3/4/5",
    b"$JS/ACK/CON//1/2/3/4/5",
    b"$JS/ACK/\xff/C/1/2/3/4/5",
    b"$JS/ACK/dom/hash/CON/C/1/2/3/4/5/x",  # v2
    b"$JS/NAK/CON/C/1/2/3/4/5",
]


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("payload", [b"+ACK", b"", b"+OK"])
def test_fast_path_answers_as_the_full_parse(topic: bytes, payload: bytes) -> None:
    # A trailing space keeps the payload off the fast path and means the same ack.
    assert parse(topic, payload, "") == parse(topic, payload + b" ", "")


def test_plain_ack() -> None:
    got = parse(b"$JS/ACK/CON/C/2/7/5/1764200000123456789/9", b"+ACK", "")
    assert got == Ack("CON", "C", 7, AckKind.ACK, cseq=5)
