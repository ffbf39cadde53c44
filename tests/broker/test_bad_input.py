"""Bad input from raw sockets: the right reason code, a closed connection, and nobody else hurt.

Each case runs next to a bystander subscriber that must keep receiving, and a
retained message that must survive.
"""

from __future__ import annotations

import logging
import socket
import struct

import pytest

from broker.mqtt.encoder import encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connect, Disconnect, Puback, Publish, Subscribe, Subscription
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


def _publish_bytes(topic: bytes, payload: bytes = b"x", qos: int = 0, pid: bytes = b"") -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + pid + b"\x00" + payload
    return bytes([0x30 | (qos << 1), len(body)]) + body


CONNECTED_CASES = {
    # name: (bytes after a v5 CONNECT, expected DISCONNECT reason code)
    "reserved flags on SUBSCRIBE [MQTT-3.8.1-1]": (
        bytes([0x80, 6, 0, 1, 0, 0, 1, 0x61]),
        ReasonCode.MALFORMED_PACKET,
    ),
    "invalid UTF-8 in a topic [MQTT-1.5.4-1]": (
        _publish_bytes(b"a/\xff"),
        ReasonCode.MALFORMED_PACKET,
    ),
    "U+0000 in a topic [MQTT-1.5.4-2]": (_publish_bytes(b"a\x00b"), ReasonCode.MALFORMED_PACKET),
    "wildcard in a publish topic [MQTT-3.3.2-2]": (
        _publish_bytes(b"a/+"),
        ReasonCode.TOPIC_NAME_INVALID,
    ),
    "QoS 3 [MQTT-3.3.1-4]": (bytes([0x36, 5, 0, 1, 0x61, 0, 1]), ReasonCode.MALFORMED_PACKET),
    "packet id 0 [MQTT-2.2.1-3]": (
        _publish_bytes(b"t", qos=1, pid=b"\x00\x00"),
        ReasonCode.MALFORMED_PACKET,
    ),
    "remaining length varint of 5 bytes": (
        bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
        ReasonCode.MALFORMED_PACKET,
    ),
    "packet type 0": (bytes([0x00, 0]), ReasonCode.MALFORMED_PACKET),
    "second CONNECT [MQTT-3.1.0-2]": (b"", ReasonCode.PROTOCOL_ERROR),
}


@pytest.mark.parametrize("name", sorted(CONNECTED_CASES))
def test_bad_packet_after_connect_gets_its_reason_code_and_hurts_nobody(
    broker: BrokerThread, name: str
) -> None:
    data, code = CONNECTED_CASES[name]
    with (
        RawClient(broker.port) as bystander,
        RawClient(broker.port) as pub,
        RawClient(broker.port) as bad,
    ):
        bystander.connect("bystander")
        bystander.subscribe((b"ok/#", 1))
        pub.connect("pub")
        pub.publish(b"ok/retained", b"keep", qos=1, packet_id=1, retain=True)
        pub.expect(Puback)
        assert bystander.expect_publish().payload == b"keep"
        bad.connect("bad")
        if not data:
            data = bad.encode(Connect(ProtocolVersion.MQTT_5, "bad"))
        bad.send_raw(data)
        disconnect = bad.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is code, name
        # Everybody else carries on, and the retained message is intact.
        pub.publish(b"ok/after", b"still here", qos=1, packet_id=2)
        pub.expect(Puback)
        assert bystander.expect_publish().payload == b"still here"
        with RawClient(broker.port) as late:
            late.connect("late")
            late.subscribe((b"ok/retained", 0))
            assert late.expect_publish().payload == b"keep"


@pytest.mark.parametrize("name", sorted(CONNECTED_CASES))
def test_bad_packet_in_the_read_of_a_subscribe_over_retained_gets_its_code(
    broker: BrokerThread, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A SUBSCRIBE that matches retained messages and, in the same read, a bad packet:
    the retained copies are not sent on the closed exchange, the client gets the bad
    packet's own reason code (was 0x83 and a traceback per connection)."""
    data, code = CONNECTED_CASES[name]
    with RawClient(broker.port) as pub, RawClient(broker.port) as bad:
        pub.connect("pub-r")
        pub.publish(b"ok/retained", b"keep", qos=1, packet_id=1, retain=True)
        pub.expect(Puback)
        bad.connect("bad-r")
        if not data:
            data = bad.encode(Connect(ProtocolVersion.MQTT_5, "bad-r"))
        subscribe = bad.encode(Subscribe(1, (Subscription(b"ok/#", 0),)))
        bad.send_raw(subscribe + data)
        disconnect = None
        while disconnect is None:
            packet = bad.next()
            if isinstance(packet, Disconnect):
                disconnect = packet
        assert disconnect.reason_code is code, name
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_garbage_before_connect_is_closed_without_answer(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.wait_closed()


def test_truncated_packet_then_close_is_an_abnormal_close(broker: BrokerThread) -> None:
    from broker.mqtt.packets import Will

    with RawClient(broker.port) as watcher:
        watcher.connect("trunc-watch")
        watcher.subscribe((b"trunc/will", 0))
        c = RawClient(broker.port)
        c.connect("trunc", will=Will(b"trunc/will", b"gone"))
        c.send_raw(_publish_bytes(b"trunc/t", b"payload")[:-3])  # cut short
        c.close()
        assert watcher.expect_publish().payload == b"gone"


def test_oversize_packet_is_refused_before_it_is_buffered(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("huge")
        # Announce 200 MB; send only the fixed header. The limit is 16 MiB.
        c.send_raw(bytes([0x30, 0x80, 0x80, 0x80, 0x60]))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PACKET_TOO_LARGE


def test_311_malformed_packet_just_closes(broker: BrokerThread) -> None:
    with RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c:
        c.connect("m311")
        c.send_raw(bytes([0x82, 6, 0, 1, 0, 1, 0x61, 3]))  # SUBSCRIBE with QoS 3
        assert c.expect_disconnect() is None  # 3.1.1 has no DISCONNECT from the server


def test_subscribe_without_filters_is_malformed_mqtt_3_8_3_2(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("nofilter")
        c.send_raw(bytes([0x82, 3, 0, 1, 0]))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code in (ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR)


def test_client_may_publish_after_a_refused_publish(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("refused-then-ok")
        c.send(Subscribe(1, (Subscription(b"fine/t", 0),)))
        c.next()
        c.send(Publish(b"$SYS/x", b"no", 1, packet_id=1))
        assert c.expect(Puback).reason_code is ReasonCode.TOPIC_NAME_INVALID
        c.send(Publish(b"fine/t", b"yes"))
        assert c.expect_publish().payload == b"yes"
        c.send(Disconnect())


def test_clients_that_reset_at_once_leave_the_broker_accepting(broker: BrokerThread) -> None:
    for i in range(50):
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        if i % 2:  # half of them send a CONNECT first
            sock.sendall(
                encode(Connect(ProtocolVersion.MQTT_5, f"gone-{i}"), ProtocolVersion.MQTT_5)
            )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST
    with RawClient(broker.port) as c:
        assert c.connect("after-the-resets").reason_code is ReasonCode.SUCCESS
