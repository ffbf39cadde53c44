"""Bad input, one case per rule: the decoder raises MQTTProtocolError with the reason code
the broker must send. And bad local requests: the encoder raises LocalProtocolError.
"""

from __future__ import annotations

import pytest

from broker.mqtt.codec import Decoder, EncodedPublish, encode
from broker.mqtt.errors import LocalProtocolError, MQTTProtocolError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Packet,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
)
from broker.mqtt.properties import Context, Properties, encode_property_items
from broker.mqtt.reason_codes import ReasonCode as RC
from broker.mqtt.wire import check_utf8, encode_string_bytes, encode_varint

from .test_vectors import h

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1
MAL = RC.MALFORMED_PACKET
PROTO = RC.PROTOCOL_ERROR

BAD: list[tuple[str, ProtocolVersion | None, str, RC]] = [
    # fixed header
    ("reserved-type-0", V311, "00 00", MAL),
    ("auth-in-3.1.1", V311, "F0 00", MAL),
    ("mqtt-2.1.3-1-reserved-flags", V311, "C1 00", MAL),
    ("mqtt-2.1.3-1-pubrel-flags", V311, "60 02 00 01", MAL),
    ("mqtt-1.5.5-1-remaining-length-not-shortest", V311, "C0 80 00", MAL),
    ("remaining-length-five-bytes", V311, "30 FF FF FF FF 01", MAL),
    ("trailing-bytes", V311, "C0 01 00", MAL),
    # PUBLISH
    ("publish-topic-length-cut", V311, "30 01 00", MAL),
    ("publish-topic-overrun", V311, "30 03 00 05 74", MAL),
    ("mqtt-3.3.1-4-qos-3", V311, "36 05 00 01 74 00 01", MAL),
    ("publish-packet-id-cut", V311, "32 04 00 01 74 00", MAL),
    ("mqtt-2.2.1-3-publish-packet-id-0", V311, "32 05 00 01 74 00 00", MAL),
    ("mqtt-3.3.1-2-qos0-dup", V311, "38 03 00 01 74", MAL),
    ("publish-5-no-property-length", V5, "30 03 00 01 74", MAL),
    ("mqtt-1.5.4-2-null-in-ascii-topic", V311, "30 04 00 02 74 00", MAL),
    ("mqtt-1.5.4-1-ill-formed-topic", V311, "30 04 00 02 C3 28", MAL),
    ("mqtt-1.5.4-1-surrogate-topic", V311, "30 05 00 03 ED A0 80", MAL),
    ("mqtt-1.5.4-2-null-in-utf8-topic", V311, "30 05 00 03 C3 A9 00", MAL),
    ("publish-5-property-not-allowed", V5, "30 06 00 01 74 02 24 01", MAL),
    ("publish-5-unknown-property", V5, "30 06 00 01 74 02 7F 01", MAL),
    ("publish-5-payload-format-2", V5, "30 06 00 01 74 02 01 02", PROTO),
    ("publish-5-duplicate-topic-alias", V5, "30 0A 00 01 74 06 23 00 01 23 00 01", PROTO),
    ("publish-5-property-length-overrun", V5, "30 05 00 01 74 05 01", MAL),
    ("publish-5-subscription-identifier-0", V5, "30 06 00 01 74 02 0B 00", PROTO),
    ("property-identifier-not-shortest", V5, "30 07 00 01 74 03 81 00 01", MAL),
    ("property-varint-too-long", V5, "30 09 00 01 74 05 0B FF FF FF FF", MAL),
    # CONNECT
    ("connect-reserved-fixed-flags", None, "11 0C 00 04 'MQTT' 04 02 00 3C 00 00", MAL),
    ("mqtt-3.1.2-3-reserved-connect-flag", None, "10 0C 00 04 'MQTT' 04 03 00 3C 00 00", MAL),
    ("mqtt-3.1.2-11-will-qos-without-will", None, "10 0C 00 04 'MQTT' 04 0A 00 3C 00 00", MAL),
    ("mqtt-3.1.2-13-will-retain-without-will", None, "10 0C 00 04 'MQTT' 04 22 00 3C 00 00", MAL),
    ("mqtt-3.1.2-12-will-qos-3", None, "10 11 00 04 'MQTT' 04 1E 00 3C 00 00 00 01 74 00 00", MAL),
    ("mqtt-3.1.2-22-password-without-user", None, "10 0E 00 04 'MQTT' 04 42 00 3C 00 00 00 00", MAL),
    ("connect-cut-in-client-id", None, "10 0C 00 04 'MQTT' 04 02 00 3C 00 05", MAL),
    ("connect-5-will-property-not-allowed", None, "10 13 00 04 'MQTT' 05 06 00 3C 00 00 00 02 11 00 00 01 74 00 00", MAL),
    ("mqtt-3.1.2-2-mqisdp-level-4", None, "10 0E 00 06 'MQIsdp' 04 02 00 3C 00 00", RC.UNSUPPORTED_PROTOCOL_VERSION),
    # CONNACK
    ("connack-reserved-flags", V311, "20 02 02 00", MAL),
    ("connack-3.1.1-reserved-return-code", V311, "20 02 00 06", MAL),
    ("connack-5-code-not-allowed", V5, "20 03 00 04 00", MAL),
    # acknowledgements
    ("puback-packet-id-0", V311, "40 02 00 00", MAL),
    ("puback-5-code-not-allowed", V5, "40 03 00 01 8E", MAL),
    ("puback-3.1.1-trailing", V311, "40 03 00 01 00", MAL),
    # SUBSCRIBE
    ("mqtt-3.8.3-2-subscribe-5-without-filter", V5, "82 03 00 01 00", PROTO),
    ("subscribe-3.1.1-without-filter", V311, "82 02 00 01", PROTO),
    ("subscribe-qos-3", V311, "82 06 00 01 00 01 74 03", MAL),
    ("mqtt-3.8.3-4-subscribe-3.1.1-reserved-bits", V311, "82 06 00 01 00 01 74 04", MAL),
    ("mqtt-3.8.3-5-subscribe-5-reserved-bits", V5, "82 07 00 01 00 00 01 74 C0", MAL),
    ("subscribe-5-retain-handling-3", V5, "82 07 00 01 00 00 01 74 30", PROTO),
    ("subscribe-5-two-subscription-identifiers", V5, "82 0B 00 01 04 0B 01 0B 02 00 01 74 00", PROTO),
    ("subscribe-options-cut", V311, "82 05 00 01 00 01 74", MAL),
    # SUBACK / UNSUBSCRIBE / UNSUBACK
    ("suback-3.1.1-reserved-code", V311, "90 03 00 01 03", MAL),
    ("suback-without-codes", V311, "90 02 00 01", PROTO),
    ("suback-5-code-not-allowed", V5, "90 04 00 01 00 92", MAL),
    ("mqtt-3.10.3-2-unsubscribe-without-filter", V311, "A2 02 00 01", PROTO),
    ("unsuback-5-without-codes", V5, "B0 03 00 01 00", PROTO),
    ("unsuback-5-code-not-allowed", V5, "B0 04 00 01 00 01", MAL),
    # PING / DISCONNECT / AUTH
    ("pingreq-with-body", V311, "C0 01 00", MAL),
    ("disconnect-3.1.1-with-body", V311, "E0 01 00", MAL),
    ("disconnect-5-code-not-allowed", V5, "E0 01 01", MAL),
    ("disconnect-5-property-not-allowed", V5, "E0 04 00 02 23 00", MAL),
    ("auth-5-code-not-allowed", V5, "F0 02 04 00", MAL),
    ("auth-5-code-cut-properties", V5, "F0 01 18", MAL),
]  # fmt: skip


@pytest.mark.parametrize(("name", "version", "wire", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_the_one_error(
    name: str, version: ProtocolVersion | None, wire: str, code: RC
) -> None:
    decoder = Decoder(version)
    with pytest.raises(MQTTProtocolError) as info:
        decoder.feed(h(wire))
    assert info.value.reason_code is code, info.value.reason
    # The same bytes one at a time give the same error.
    slow = Decoder(version)
    raw = h(wire)
    for byte in raw[:-1]:
        try:
            slow.feed(bytes([byte]))
        except MQTTProtocolError as exc:
            assert exc.reason_code is code  # noqa: PT017 (raised before the last byte)
            return
    with pytest.raises(MQTTProtocolError) as again:
        slow.feed(raw[-1:])
    assert again.value.reason_code is code


def test_first_packet_not_connect_without_version() -> None:
    with pytest.raises(MQTTProtocolError) as info:
        Decoder().feed(h("30 03 00 01 74"))
    assert info.value.reason_code is PROTO


def test_utf8_rules() -> None:
    assert check_utf8("\ufeffé".encode()) == "\ufeffé"  # [MQTT-1.5.4-3] BOM kept
    with pytest.raises(MQTTProtocolError):
        check_utf8(b"\xc0\x80")  # overlong NUL


BAD_LOCAL: list[tuple[str, ProtocolVersion, Packet]] = [
    ("publish-qos-3", V311, Publish(b"t", b"", 3, packet_id=1)),
    ("publish-qos1-without-id", V311, Publish(b"t", b"", 1)),
    ("publish-qos0-dup", V311, Publish(b"t", b"", dup=True)),
    ("publish-topic-too-long", V311, Publish(b"t" * 0x10000)),
    ("puback-code-not-allowed", V5, Puback(1, RC.GRANTED_QOS_1)),
    ("puback-packet-id-0", V5, Puback(0)),
    ("connect-will-qos-3", V311, Connect(V311, "c", will=Will(b"t", b"", 3))),
    ("connect-3.1.1-password-only", V311, Connect(V311, "c", password=b"p")),
    ("connack-3.1.1-malformed-has-no-return-code", V311, Connack(False, RC.MALFORMED_PACKET)),
    ("subscribe-without-subscriptions", V311, Subscribe(1, ())),
    ("subscribe-packet-id-0", V311, Subscribe(0, (Subscription(b"t"),))),
    ("subscribe-qos-3", V311, Subscribe(1, (Subscription(b"t", 3),))),
    ("unsubscribe-without-filters", V311, Unsubscribe(1, ())),
    ("auth-in-3.1.1", V311, Auth()),
    ("suback-5-code-not-allowed", V5, Suback(1, (RC.PACKET_IDENTIFIER_NOT_FOUND,))),
]


@pytest.mark.parametrize(("name", "version", "packet"), BAD_LOCAL, ids=[b[0] for b in BAD_LOCAL])
def test_encoder_refuses_what_the_protocol_cannot_express(
    name: str, version: ProtocolVersion, packet: Packet
) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet, version)


def test_encoder_value_errors() -> None:
    with pytest.raises(ValueError, match="negative"):
        encode_varint(-1)
    with pytest.raises(ValueError, match="exceeds"):
        encode_varint(268_435_456)
    with pytest.raises(ValueError, match="exceeds 65535"):
        encode_string_bytes(b"x" * 0x10000)
    with pytest.raises(ValueError, match="not allowed"):
        encode_property_items(Properties(topic_alias=1), Context.CONNECT)
    with pytest.raises(ValueError, match="REASON_STRING is not allowed in SUBSCRIBE"):
        encode_property_items(Properties(reason_string="r"), Context.SUBSCRIBE)
    only_user = Properties(user_properties=(("k", "v"),))
    assert encode_property_items(only_user, Context.SUBSCRIBE) == b"\x26\x00\x01k\x00\x01v"
    with pytest.raises(ValueError, match="only once"):
        encode_property_items(Properties(subscription_identifiers=(1, 2)), Context.SUBSCRIBE)


def test_encoded_publish_refusals() -> None:
    with pytest.raises(LocalProtocolError):
        EncodedPublish(Publish(b"t" * 0x10000), V5)
    message = EncodedPublish(Publish(b"t"), V5)
    with pytest.raises(LocalProtocolError):
        message.for_recipient(qos=1)  # no packet id
    with pytest.raises(LocalProtocolError):
        message.for_recipient(dup=True)  # DUP on QoS 0
    with pytest.raises(LocalProtocolError):
        message.for_recipient(omit_topic=True)  # no alias
    with pytest.raises(LocalProtocolError):
        EncodedPublish(Publish(b"t"), V311).for_recipient(topic_alias=1, omit_topic=True)
