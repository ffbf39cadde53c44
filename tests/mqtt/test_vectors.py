"""Byte-exact vectors, written by hand from the field layouts of the OASIS standards
(MQTT 5.0 chapter 3, MQTT 3.1.1 chapter 3, MQTT 3.1 for CONNECT). Each vector is checked
both ways: encode(packet) == bytes and decode(bytes) == packet.
"""

from __future__ import annotations

import pytest

from broker.mqtt.codec import Decoder, encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode as RC
from broker.mqtt.wire import encode_varint

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1
V31 = ProtocolVersion.MQTT_3_1


def h(text: str) -> bytes:
    """Hex with spaces, and 'quoted' ASCII runs."""
    out = bytearray()
    for token in text.split():
        if token.startswith("'"):
            out += token.strip("'").encode()
        else:
            out += bytes.fromhex(token)
    return bytes(out)


VECTORS: list[tuple[str, ProtocolVersion, Packet, str]] = [
    # ---- CONNECT (3.1 §3.1, 3.1.1 §3.1, 5.0 §3.1) ----
    ("connect-3.1", V31, Connect(V31, "abc", True, 60), "10 11 00 06 'MQIsdp' 03 02 00 3C 00 03 'abc'"),
    ("connect-3.1.1", V311, Connect(V311, "abc", True, 60), "10 0F 00 04 'MQTT' 04 02 00 3C 00 03 'abc'"),
    ("connect-3.1.1-empty-id-persistent-flags", V311, Connect(V311, "", False, 0), "10 0C 00 04 'MQTT' 04 00 00 00 00 00"),
    (
        "connect-3.1.1-will-user-password",
        V311,
        Connect(V311, "c", False, 10, "u", b"pw", Will(b"w/t", b"bye", 1, True)),
        # flags: user 80 | password 40 | will retain 20 | will QoS 1 08 | will 04 = EC
        "10 1E 00 04 'MQTT' 04 EC 00 0A 00 01 'c' 00 03 'w/t' 00 03 'bye' 00 01 'u' 00 02 'pw'",
    ),
    ("connect-5", V5, Connect(V5, "abc", True, 60), "10 10 00 04 'MQTT' 05 02 00 3C 00 00 03 'abc'"),
    (
        "connect-5-properties-will-password-only",
        V5,
        Connect(
            V5,
            "c",
            True,
            30,
            None,
            b"p",
            Will(b"t", b"x", 2, False, Properties(will_delay_interval=5)),
            Properties(session_expiry_interval=0xFFFFFFFF, receive_maximum=20),
        ),
        # flags: password 40 | will QoS 2 10 | will 04 | clean 02 = 56
        # props: 11 FFFFFFFF (5) + 21 0014 (3) = 8; will props: 18 00000005 = 5
        "10 25 00 04 'MQTT' 05 56 00 1E 08 11 FF FF FF FF 21 00 14 00 01 'c'"
        " 05 18 00 00 00 05 00 01 't' 00 01 'x' 00 01 'p'",
    ),
    # ---- CONNACK ----
    ("connack-3.1.1", V311, Connack(), "20 02 00 00"),
    ("connack-3.1.1-session-present", V311, Connack(True), "20 02 01 00"),
    ("connack-3.1.1-not-authorized", V311, Connack(False, RC.NOT_AUTHORIZED), "20 02 00 05"),
    ("connack-3.1.1-bad-version", V311, Connack(False, RC.UNSUPPORTED_PROTOCOL_VERSION), "20 02 00 01"),
    ("connack-5", V5, Connack(), "20 03 00 00 00"),
    ("connack-5-refused", V5, Connack(False, RC.UNSUPPORTED_PROTOCOL_VERSION), "20 03 00 84 00"),
    (
        "connack-5-properties",
        V5,
        Connack(True, RC.SUCCESS, Properties(receive_maximum=20, topic_alias_maximum=10, assigned_client_identifier="id")),
        # 12 0002 'id' (5) + 21 0014 (3) + 22 000A (3) = 11, in table order
        "20 0E 01 00 0B 12 00 02 'id' 21 00 14 22 00 0A",
    ),
    # ---- PUBLISH ----
    ("publish-3.1.1-qos0", V311, Publish(b"a/b", b"hi"), "30 07 00 03 'a/b' 'hi'"),
    ("publish-3.1.1-qos1", V311, Publish(b"a/b", b"hi", 1, packet_id=10), "32 09 00 03 'a/b' 00 0A 'hi'"),
    ("publish-3.1.1-qos2-dup-retain", V311, Publish(b"a", b"", 2, True, True, 0xFFFF), "3D 05 00 01 'a' FF FF"),
    ("publish-3.1-qos0-retain", V31, Publish(b"t", b"x", retain=True), "31 04 00 01 't' 'x'"),
    ("publish-5-qos0", V5, Publish(b"a/b", b"hi"), "30 08 00 03 'a/b' 00 'hi'"),
    (
        "publish-5-qos1-properties",
        V5,
        Publish(
            b"a/b",
            b"hi",
            1,
            True,
            True,
            1,
            Properties(
                payload_format_indicator=1,
                message_expiry_interval=60,
                subscription_identifiers=(1, 200),
                topic_alias=3,
                user_properties=(("k", "v"), ("k", "w")),
            ),
        ),
        # props: 01 01 (2) + 02 0000003C (5) + 0B 01 (2) + 0B C8 01 (3) + 23 0003 (3)
        #        + 26 0001 'k' 0001 'v' (7) + 26 0001 'k' 0001 'w' (7) = 29 = 0x1D
        "3B 27 00 03 'a/b' 00 01 1D 01 01 02 00 00 00 3C 0B 01 0B C8 01 23 00 03"
        " 26 00 01 'k' 00 01 'v' 26 00 01 'k' 00 01 'w' 'hi'",
    ),
    (
        "publish-5-alias-only",
        V5,
        Publish(b"", b"p", properties=Properties(topic_alias=1)),
        "30 07 00 00 03 23 00 01 'p'",
    ),
    # ---- PUBACK / PUBREC / PUBREL / PUBCOMP ----
    ("puback-3.1.1", V311, Puback(10), "40 02 00 0A"),
    ("pubrec-3.1.1", V311, Pubrec(10), "50 02 00 0A"),
    ("pubrel-3.1.1", V311, Pubrel(10), "62 02 00 0A"),
    ("pubcomp-3.1.1", V311, Pubcomp(10), "70 02 00 0A"),
    ("puback-5-short", V5, Puback(10), "40 02 00 0A"),
    ("puback-5-code", V5, Puback(10, RC.NO_MATCHING_SUBSCRIBERS), "40 03 00 0A 10"),
    (
        "puback-5-reason-string",
        V5,
        Puback(10, RC.QUOTA_EXCEEDED, Properties(reason_string="x")),
        "40 08 00 0A 97 04 1F 00 01 'x'",
    ),
    ("pubrec-5-code", V5, Pubrec(1, RC.NOT_AUTHORIZED), "50 03 00 01 87"),
    ("pubrel-5-not-found", V5, Pubrel(2, RC.PACKET_IDENTIFIER_NOT_FOUND), "62 03 00 02 92"),
    ("pubcomp-5-short", V5, Pubcomp(3), "70 02 00 03"),
    # ---- SUBSCRIBE / SUBACK ----
    ("subscribe-3.1.1", V311, Subscribe(1, (Subscription(b"a/b", 1),)), "82 08 00 01 00 03 'a/b' 01"),
    (
        "subscribe-3.1.1-two",
        V311,
        Subscribe(2, (Subscription(b"a/#", 0), Subscription(b"+/c", 2))),
        "82 0E 00 02 00 03 'a/#' 00 00 03 '+/c' 02",
    ),
    (
        "subscribe-5-options",
        V5,
        Subscribe(1, (Subscription(b"a/b", 1, True, True, RetainHandling.DO_NOT_SEND),)),
        # options: QoS 1 | No Local 04 | Retain As Published 08 | Retain Handling 2 << 4 = 2D
        "82 09 00 01 00 00 03 'a/b' 2D",
    ),
    (
        "subscribe-5-identifier",
        V5,
        Subscribe(1, (Subscription(b"x", 0),), Properties(subscription_identifiers=(5,))),
        "82 09 00 01 02 0B 05 00 01 'x' 00",
    ),
    ("suback-3.1.1", V311, Suback(1, (RC.GRANTED_QOS_0, RC.UNSPECIFIED_ERROR)), "90 04 00 01 00 80"),
    ("suback-5", V5, Suback(1, (RC.GRANTED_QOS_2, RC.TOPIC_FILTER_INVALID)), "90 05 00 01 00 02 8F"),
    # ---- UNSUBSCRIBE / UNSUBACK ----
    ("unsubscribe-3.1.1", V311, Unsubscribe(2, (b"a/b",)), "A2 07 00 02 00 03 'a/b'"),
    ("unsubscribe-5", V5, Unsubscribe(2, (b"a/b",)), "A2 08 00 02 00 00 03 'a/b'"),
    ("unsuback-3.1.1", V311, Unsuback(2), "B0 02 00 02"),
    ("unsuback-5", V5, Unsuback(2, (RC.NO_SUBSCRIPTION_EXISTED,)), "B0 04 00 02 00 11"),
    # ---- PINGREQ / PINGRESP ----
    ("pingreq-3.1.1", V311, Pingreq(), "C0 00"),
    ("pingresp-3.1.1", V311, Pingresp(), "D0 00"),
    ("pingreq-5", V5, Pingreq(), "C0 00"),
    ("pingresp-5", V5, Pingresp(), "D0 00"),
    # ---- DISCONNECT ----
    ("disconnect-3.1.1", V311, Disconnect(), "E0 00"),
    ("disconnect-5-normal", V5, Disconnect(), "E0 00"),
    ("disconnect-5-will", V5, Disconnect(RC.DISCONNECT_WITH_WILL_MESSAGE), "E0 01 04"),
    (
        "disconnect-5-session-expiry",
        V5,
        Disconnect(RC.NORMAL_DISCONNECTION, Properties(session_expiry_interval=60)),
        "E0 07 00 05 11 00 00 00 3C",
    ),
    # ---- AUTH (5.0 only) ----
    ("auth-5-success", V5, Auth(), "F0 00"),
    (
        "auth-5-continue",
        V5,
        Auth(RC.CONTINUE_AUTHENTICATION, Properties(authentication_method="SCRAM")),
        "F0 0A 18 08 15 00 05 'SCRAM'",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "version", "packet", "wire"), VECTORS, ids=[v[0] for v in VECTORS]
)
def test_vector_encodes_exactly(
    name: str, version: ProtocolVersion, packet: Packet, wire: str
) -> None:
    assert encode(packet, version) == h(wire)


@pytest.mark.parametrize(
    ("name", "version", "packet", "wire"), VECTORS, ids=[v[0] for v in VECTORS]
)
def test_vector_decodes_exactly(
    name: str, version: ProtocolVersion, packet: Packet, wire: str
) -> None:
    decoder = Decoder(None if isinstance(packet, Connect) else version)
    assert decoder.feed(h(wire)) == [packet]
    assert decoder.version is version


# MQTT 5.0 §1.5.5 Table 1-1 (and 3.1.1 §2.2.3 Table 2.4): Variable Byte Integer sizes.
VARINTS = [
    (0, "00"),
    (127, "7F"),
    (128, "80 01"),
    (16_383, "FF 7F"),
    (16_384, "80 80 01"),
    (2_097_151, "FF FF 7F"),
    (2_097_152, "80 80 80 01"),
    (268_435_455, "FF FF FF 7F"),
]


@pytest.mark.parametrize(("value", "wire"), VARINTS)
def test_mqtt_1_5_5_1_variable_byte_integer_table(value: int, wire: str) -> None:
    assert encode_varint(value) == h(wire)


@pytest.mark.parametrize(("value", "wire"), VARINTS[:6])
def test_remaining_length_sizes_decode(value: int, wire: str) -> None:
    # A PUBLISH (3.1.1, QoS 0, topic "t") whose Remaining Length is ``value``.
    if value < 3:
        return
    packet = Publish(b"t", b"z" * (value - 3))
    data = encode(packet, V311)
    assert data[1 : 1 + len(h(wire))] == h(wire)
    assert Decoder(V311).feed(data) == [packet]
