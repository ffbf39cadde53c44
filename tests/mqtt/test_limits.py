"""Every limit at ``limit`` and ``limit + 1``."""

from __future__ import annotations

import pytest

from broker.mqtt.codec import MAX_PACKET_SIZE, Decoder, encode
from broker.mqtt.connection import Connection, Role
from broker.mqtt.errors import (
    LocalProtocolError,
    MQTTProtocolError,
    PacketOverLimitError,
    PacketTooLargeError,
)
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Puback, Publish, Subscribe, Subscription
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode as RC
from broker.mqtt.wire import MAX_VARINT, encode_varint

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1


def test_remaining_length_limit_is_accepted_and_one_more_byte_is_not() -> None:
    # 268,435,455 in four bytes: the header is accepted and the body awaited.
    decoder = Decoder(V311)
    assert decoder.feed(b"\x30\xff\xff\xff\x7f") == []
    assert decoder._need == MAX_PACKET_SIZE
    # A fifth length byte is malformed as soon as it is seen.
    with pytest.raises(MQTTProtocolError) as info:
        Decoder(V311).feed(b"\x30\xff\xff\xff\xff")
    assert info.value.reason_code is RC.MALFORMED_PACKET


def test_four_byte_varint_property_at_limit_and_beyond() -> None:
    at_limit = Publish(b"t", b"", properties=Properties(subscription_identifiers=(MAX_VARINT,)))
    assert Decoder(V5).feed(encode(at_limit, V5)) == [at_limit]
    with pytest.raises(ValueError, match="exceeds"):
        encode_varint(MAX_VARINT + 1)


def test_property_length_at_limit_and_beyond() -> None:
    props = Properties(content_type="abc")  # 03 0003 'abc' = 6 bytes
    wire = bytearray(encode(Publish(b"t", b"", properties=props), V5))
    assert wire[5] == 6
    assert Decoder(V5).feed(bytes(wire)) == [Publish(b"t", b"", properties=props)]
    wire[5] = 7  # one more than the packet holds
    with pytest.raises(MQTTProtocolError) as info:
        Decoder(V5).feed(bytes(wire))
    assert info.value.reason_code is RC.MALFORMED_PACKET


def test_string_length_at_limit_and_beyond() -> None:
    topic = b"t" * 0xFFFF
    packet = Publish(topic, b"x")
    assert Decoder(V311).feed(encode(packet, V311)) == [packet]
    with pytest.raises(LocalProtocolError):
        encode(Publish(topic + b"t"), V311)
    # A string length one past the packet's end is malformed.
    with pytest.raises(MQTTProtocolError):
        Decoder(V311).feed(b"\x30\x04\x00\x03ab")


@pytest.mark.parametrize("limit", [5, 64, 1000])
def test_maximum_packet_size_at_limit_and_beyond(limit: int) -> None:
    fits = Publish(b"t", b"x" * (limit - 5))  # 1 + 1|2 + 2 + 1 + payload
    data = encode(fits, V311)
    size = len(data)
    decoder = Decoder(V311, max_packet_size=size)
    assert decoder.feed(data) == [fits]
    # One byte larger: refused from the fixed header alone, before the body arrives.
    bigger = encode(Publish(b"t", b"x" * (limit - 4)), V311)
    assert len(bigger) == size + 1
    header = bigger[: 3 if bigger[1] & 0x80 else 2]
    with pytest.raises(PacketOverLimitError) as info:
        Decoder(V311, max_packet_size=size).feed(header)
    assert info.value.reason_code is RC.PACKET_TOO_LARGE
    assert (info.value.size, info.value.limit) == (size + 1, size)  # for the broker's log


def test_peer_maximum_packet_size_at_limit_and_beyond() -> None:
    server = Connection()
    server.receive_data(encode(Connect(V5, "c", properties=Properties(maximum_packet_size=30)), V5))
    server.send(Connack())
    assert len(server.send(Publish(b"t", b"x" * 24))) == 30
    with pytest.raises(PacketTooLargeError):
        server.send(Publish(b"t", b"x" * 25))


def _connected(connack: Properties, connect: Properties | None = None) -> Connection:
    server = Connection()
    server.receive_data(encode(Connect(V5, "c", properties=connect or Properties()), V5))
    server.send(Connack(properties=connack))
    return server


@pytest.mark.parametrize("maximum", [1, 10, 0xFFFF])
def test_topic_alias_maximum_at_limit_and_beyond(maximum: int) -> None:
    server = _connected(Properties(topic_alias_maximum=maximum))
    ok = Publish(b"a", b"", properties=Properties(topic_alias=maximum))
    assert server.receive_data(encode(ok, V5)) == [Publish(b"a", b"")]
    if maximum == 0xFFFF:
        return  # the Two Byte Integer cannot express maximum + 1
    bad = Publish(b"a", b"", properties=Properties(topic_alias=maximum + 1))
    with pytest.raises(MQTTProtocolError) as info:
        server.receive_data(encode(bad, V5))
    assert info.value.reason_code is RC.TOPIC_ALIAS_INVALID


def test_topic_alias_maximum_zero_refuses_every_alias() -> None:
    server = _connected(Properties())
    with pytest.raises(MQTTProtocolError) as info:
        server.receive_data(encode(Publish(b"a", b"", properties=Properties(topic_alias=1)), V5))
    assert info.value.reason_code is RC.TOPIC_ALIAS_INVALID


@pytest.mark.parametrize("maximum", [1, 3])
def test_receive_maximum_at_limit_and_beyond(maximum: int) -> None:
    server = _connected(Properties(receive_maximum=maximum))
    for pid in range(1, maximum + 1):
        server.receive_data(encode(Publish(b"t", b"", 1, packet_id=pid), V5))
    with pytest.raises(MQTTProtocolError) as info:
        server.receive_data(encode(Publish(b"t", b"", 1, packet_id=maximum + 1), V5))
    assert info.value.reason_code is RC.RECEIVE_MAXIMUM_EXCEEDED


@pytest.mark.parametrize("maximum", [1, 3])
def test_peer_receive_maximum_at_limit_and_beyond(maximum: int) -> None:
    server = _connected(Properties(), Properties(receive_maximum=maximum))
    for _ in range(maximum):
        assert server.can_send_qos_message()
        server.send(Publish(b"t", b"", 1, packet_id=server.next_packet_id()))
    assert not server.can_send_qos_message()
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", 2, packet_id=server.next_packet_id()))


def test_peer_topic_alias_maximum_at_limit_and_beyond() -> None:
    server = _connected(Properties(), Properties(topic_alias_maximum=2))
    server.send(Publish(b"t", b"", properties=Properties(topic_alias=2)))
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", properties=Properties(topic_alias=3)))
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", properties=Properties(topic_alias=0)))


def test_packet_identifier_zero_and_one() -> None:
    assert Decoder(V311).feed(b"\x40\x02\x00\x01") == [Puback(1)]
    with pytest.raises(MQTTProtocolError):
        Decoder(V311).feed(b"\x40\x02\x00\x00")
    assert Decoder(V311).feed(b"\x40\x02\xff\xff") == [Puback(0xFFFF)]
    client = Connection(Role.CLIENT)
    client.send(Connect(V311, "c"))
    client.receive_data(encode(Connack(), V311))
    with pytest.raises(LocalProtocolError):
        client.send(Subscribe(0, (Subscription(b"t"),)))
