"""Sequences of packets against a running broker: valid ones, then one mutated, in one read.

The invariant, in one line: whatever a client sends after its CONNECT, the broker answers
with the protocol's own reason codes (never 0x83, never a traceback) and keeps serving
everybody else. Single packets reach the parsers (``tests/mqtt/test_fuzz.py``); sequences
reach the broker's handling of the packets a read held before the bad one: a SUBSCRIBE
over retained messages followed by garbage used to send PUBLISH on a closed exchange.
"""

from __future__ import annotations

import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.mqtt.encoder import encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Publish,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import Closed, RawClient

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

V5 = ProtocolVersion.MQTT_5
TOPICS = (b"f/retained", b"f/a", b"f/b/c", b"$aws/things/x")
FILTERS = (b"f/#", b"f/+", b"#", b"f/retained", b"$aws/#", b"$share/g/f/#")


def _valid(draw: st.DrawFn, pid: int) -> Packet:
    kind = draw(st.sampled_from(("sub", "unsub", "pub0", "pub1", "ping")))
    if kind == "sub":
        flt = draw(st.sampled_from(FILTERS))
        return Subscribe(pid, (Subscription(flt, draw(st.integers(0, 2))),))
    if kind == "unsub":
        return Unsubscribe(pid, (draw(st.sampled_from(FILTERS)),))
    if kind == "ping":
        return Pingreq()
    qos = 1 if kind == "pub1" else 0
    topic = draw(st.sampled_from(TOPICS))
    retain = draw(st.booleans()) and topic != b"f/retained"  # the one checked at the end
    return Publish(topic, draw(st.binary(max_size=8)), qos, retain, False, pid if qos else None)


@st.composite
def sequences(draw: st.DrawFn) -> bytes:
    """Valid packets, then one of them mutated (bytes flipped, cut, or garbage appended)."""
    n = draw(st.integers(0, 5))
    packets = [_valid(draw, i + 1) for i in range(n)]
    prefix = b"".join(encode(p, V5) for p in packets)
    victim = bytearray(encode(_valid(draw, 100), V5))
    how = draw(st.sampled_from(("flip", "cut", "garbage", "splice")))
    if how == "flip":
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(victim) - 1))
            victim[i] = draw(st.integers(0, 255))
    elif how == "cut":
        victim = victim[: draw(st.integers(1, len(victim)))] + bytes([0xE0, 0x00])
    elif how == "garbage":
        victim += draw(st.binary(min_size=1, max_size=16))
    else:
        victim = bytearray(draw(st.binary(min_size=1, max_size=24)))
    return prefix + bytes(victim)


def _drain(c: RawClient) -> Disconnect | None:
    """Read until the broker closes (returning its DISCONNECT) or goes quiet (None)."""
    last: Disconnect | None = None
    try:
        while True:
            packet = c.next(0.3)
            if isinstance(packet, Disconnect):
                last = packet
            elif isinstance(packet, Publish) and packet.qos == 1 and packet.packet_id:
                c.send(Puback(packet.packet_id))
    except (TimeoutError, Closed, OSError):
        return last
    except Exception:  # our own client's machine refusing what the broker sent after close
        return last


def test_packet_sequences_never_hit_an_internal_error(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with RawClient(broker.port) as seed:
        seed.connect("fuzz-seed")
        seed.publish(b"f/retained", b"keep", qos=1, packet_id=1, retain=True)
        seed.expect(Puback)
    counter = iter(range(1_000_000))
    rng = random.Random(7)

    @settings(
        max_examples=120,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(data=sequences())
    def one(data: bytes) -> None:
        with RawClient(broker.port) as c:
            c.connect(f"fuzz-{next(counter)}")
            # Split anywhere, or one write: the broker must not care about chunking.
            if rng.random() < 0.5:
                c.send_raw(data)
            else:
                cut = rng.randrange(len(data) + 1)
                c.send_raw(data[:cut])
                c.send_raw(data[cut:])
            disconnect = _drain(c)
            if disconnect is not None:
                assert disconnect.reason_code is not ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR

    one()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors[0].getMessage()
    # The broker still serves, and the retained message is intact.
    with RawClient(broker.port) as late:
        late.connect("fuzz-late")
        late.subscribe((b"f/retained", 0))
        assert late.expect_publish().payload == b"keep"
