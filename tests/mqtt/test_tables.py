"""The property table and the reason-code table against MQTT 5.0 §2.2.2.2 and §2.4,
and the fast PUBLISH construction against the frozen dataclass."""

from __future__ import annotations

import dataclasses

import pytest

from broker.mqtt.codec import Decoder, encode
from broker.mqtt.errors import MQTTProtocolError
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import Puback, Publish, new_publish
from broker.mqtt.properties import PROPERTY_TABLE, Context, Properties, PropertyId, WireType
from broker.mqtt.reason_codes import (
    REASON_CODE_TABLE,
    ReasonCode,
    allowed_reason_codes,
    connack_return_code,
    reason_code_from_connack_return_code,
)


def test_property_table_has_every_property_once() -> None:
    assert [row.id for row in PROPERTY_TABLE] == sorted(PropertyId)
    assert len(PROPERTY_TABLE) == 27


@pytest.mark.parametrize(
    ("pid", "wire", "contexts"),
    [
        (PropertyId.PAYLOAD_FORMAT_INDICATOR, WireType.BYTE, {Context.PUBLISH, Context.WILL}),
        (PropertyId.SUBSCRIPTION_IDENTIFIER, WireType.VARIABLE_BYTE_INTEGER, {Context.PUBLISH, Context.SUBSCRIBE}),
        (PropertyId.SESSION_EXPIRY_INTERVAL, WireType.FOUR_BYTE_INTEGER, {Context.CONNECT, Context.CONNACK, Context.DISCONNECT}),
        (PropertyId.WILL_DELAY_INTERVAL, WireType.FOUR_BYTE_INTEGER, {Context.WILL}),
        (PropertyId.SERVER_REFERENCE, WireType.UTF8_STRING, {Context.CONNACK, Context.DISCONNECT}),
        (PropertyId.TOPIC_ALIAS, WireType.TWO_BYTE_INTEGER, {Context.PUBLISH}),
        (PropertyId.CORRELATION_DATA, WireType.BINARY_DATA, {Context.PUBLISH, Context.WILL}),
        (PropertyId.USER_PROPERTY, WireType.UTF8_STRING_PAIR, set(Context)),
    ],
)  # fmt: skip
def test_property_rows(pid: PropertyId, wire: WireType, contexts: set[Context]) -> None:
    row = next(r for r in PROPERTY_TABLE if r.id is pid)
    assert row.wire_type is wire
    assert row.contexts == contexts - {Context.PUBREL} | (
        {Context.PUBREL} if Context.PUBREL in contexts else set()
    )


def test_only_user_property_and_subscription_identifier_repeat() -> None:
    repeating = {row.id for row in PROPERTY_TABLE if row.repeatable_in}
    assert repeating == {PropertyId.USER_PROPERTY, PropertyId.SUBSCRIPTION_IDENTIFIER}
    sub_id = next(r for r in PROPERTY_TABLE if r.id is PropertyId.SUBSCRIPTION_IDENTIFIER)
    assert sub_id.repeatable_in == {Context.PUBLISH}


def test_reason_code_table() -> None:
    assert {row.code for row in REASON_CODE_TABLE} == set(ReasonCode)
    assert allowed_reason_codes(PacketType.PUBREL) == {0x00, 0x92}
    assert allowed_reason_codes(PacketType.PINGREQ) == frozenset()
    assert 0x93 in allowed_reason_codes(PacketType.DISCONNECT)
    assert 0x84 in allowed_reason_codes(PacketType.CONNACK)
    names = {row.meaning for row in REASON_CODE_TABLE if row.code == 0}
    assert names == {"Success", "Normal disconnection", "Granted QoS 0"}
    assert ReasonCode.PACKET_TOO_LARGE.is_error
    assert not ReasonCode.NO_MATCHING_SUBSCRIBERS.is_error


def test_connack_return_codes_of_3_1_1() -> None:
    for value in range(6):
        code = reason_code_from_connack_return_code(value)
        assert code is not None
        assert connack_return_code(code) == value
    assert reason_code_from_connack_return_code(6) is None
    assert connack_return_code(ReasonCode.MALFORMED_PACKET) is None
    assert connack_return_code(ReasonCode.BANNED) == 5


def test_fast_publish_is_a_real_frozen_publish() -> None:
    made = Publish(b"t", b"p", 1, True, False, 4)
    decoded = Decoder(ProtocolVersion.MQTT_5).feed(encode(made, ProtocolVersion.MQTT_5))[0]
    assert type(decoded) is Publish
    assert decoded == made
    assert hash(decoded) == hash(made)
    assert repr(decoded) == repr(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.qos = 2  # type: ignore[misc]
    assert dataclasses.replace(decoded, qos=0, packet_id=None) == Publish(b"t", b"p", 0, True)


@pytest.mark.parametrize("version", [ProtocolVersion.MQTT_5, ProtocolVersion.MQTT_3_1_1])
def test_fast_puback_is_a_real_frozen_puback(version: ProtocolVersion) -> None:
    decoded = Decoder(version).feed(b"\x40\x02\x01\x02" + encode(Puback(7), version))
    assert decoded == [Puback(0x102), Puback(7)]
    assert [type(p) for p in decoded] == [Puback, Puback]
    first = decoded[0]
    assert isinstance(first, Puback)
    assert hash(first) == hash(Puback(0x102))
    assert repr(first) == repr(Puback(0x102))
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.packet_id = 2  # type: ignore[misc]
    with pytest.raises(MQTTProtocolError, match="Packet Identifier 0"):
        Decoder(version).feed(b"\x40\x02\x00\x00")
    with pytest.raises(MQTTProtocolError, match="reserved flags"):
        Decoder(version).feed(b"\x41\x02\x00\x01")


def test_new_publish_is_a_real_frozen_publish() -> None:
    props = Properties(response_topic="r")
    made = new_publish(b"t", b"p", 1, True, props)
    expected = Publish(b"t", b"p", 1, True, properties=props)
    assert type(made) is Publish
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert new_publish(b"t", b"") == Publish(b"t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.qos = 2  # type: ignore[misc]


def test_properties_repr_shows_only_what_is_set() -> None:
    from broker.mqtt.properties import Properties

    assert repr(Properties()) == "Properties()"
    assert repr(Properties(topic_alias=3, user_properties=(("k", "v"),))) == (
        "Properties(topic_alias=3, user_properties=(('k', 'v'),))"
    )
