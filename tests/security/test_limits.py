"""[limits]: max_connections (broker-wide and per listener) refused with 0x97 (3.1.1:
return code 3), max_publish_rate (PUBACK 0x97, QoS 0: DISCONNECT 0x96),
max_subscriptions_per_client (SUBACK 0x97)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connect, Puback, Publish, Suback
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)
LISTEN = '[[listeners]]\nbind = "127.0.0.1:0"\n'


def connect_eventually(port: int, client_id: str) -> RawClient:
    """A client's CONNECT once a slot is free again (the broker counts a connection until
    its socket is closed, a moment after the client sees the close)."""
    deadline = time.monotonic() + 10
    while True:
        raw = RawClient(port)
        if raw.connect(client_id).reason_code is ReasonCode.SUCCESS:
            return raw
        raw.close()
        assert time.monotonic() < deadline, "no slot freed"


def test_max_connections(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(LISTEN + "[limits]\nmax_connections = 2\n")
    a, b = RawClient(broker.port), RawClient(broker.port)
    try:
        assert a.connect("a").reason_code is ReasonCode.SUCCESS
        assert b.connect("b").reason_code is ReasonCode.SUCCESS
        with RawClient(broker.port) as c:
            assert c.connect("c").reason_code is ReasonCode.QUOTA_EXCEEDED
        with RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as old:
            old.send(Connect(ProtocolVersion.MQTT_3_1_1, "old"))
            old.sock.settimeout(10)
            assert old.sock.recv(10) == b"\x20\x02\x00\x03"  # server unavailable
        b.close()
        connect_eventually(broker.port, "d").close()
    finally:
        a.close()
        b.close()


def test_max_connections_per_listener(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(LISTEN + "max_connections = 1\n" + LISTEN)
    limited, free = (port for _host, port in broker.addresses)
    with RawClient(limited) as first, RawClient(limited) as second:
        assert first.connect("first").reason_code is ReasonCode.SUCCESS
        assert second.connect("second").reason_code is ReasonCode.QUOTA_EXCEEDED
        with RawClient(free) as other:
            assert other.connect("other").reason_code is ReasonCode.SUCCESS


def test_max_publish_rate(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(LISTEN + "[limits]\nmax_publish_rate = 5\n")
    with RawClient(broker.port) as raw:
        raw.connect("fast")
        codes = []
        for pid in range(1, 21):
            raw.publish(b"rate/x", b"m", qos=1, packet_id=pid)
            codes.append(raw.expect(Puback).reason_code)
        refused = codes.count(ReasonCode.QUOTA_EXCEEDED)
        assert codes[0] is ReasonCode.NO_MATCHING_SUBSCRIBERS
        assert 10 <= refused <= 16  # ≈5 pass per second of burst, the rest are refused
    with RawClient(broker.port) as flood:
        flood.connect("flood")
        flood.send_raw(b"".join(flood.encode(Publish(b"rate/y", b"q0")) for _ in range(100)))
        packet = flood.expect_disconnect()  # then the close
        assert packet is not None
        assert packet.reason_code is ReasonCode.MESSAGE_RATE_TOO_HIGH


def test_max_subscriptions_per_client(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(LISTEN + "[limits]\nmax_subscriptions_per_client = 2\n")
    with RawClient(broker.port) as raw:
        raw.connect("subs")
        suback = raw.subscribe((b"a", 0), (b"b", 0), (b"c", 0))
        assert isinstance(suback, Suback)
        assert suback.reason_codes == (
            ReasonCode.GRANTED_QOS_0,
            ReasonCode.GRANTED_QOS_0,
            ReasonCode.QUOTA_EXCEEDED,
        )
        again = raw.subscribe((b"a", 1), packet_id=2)  # replacing one is not a new one
        assert isinstance(again, Suback)
        assert again.reason_codes == (ReasonCode.GRANTED_QOS_1,)
