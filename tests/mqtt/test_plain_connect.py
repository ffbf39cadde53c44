"""The decoder's one-step CONNECT (``plain_connect``: no will, user name, password or
properties, an ASCII client id ending the packet) gives exactly what the general path
gives, and leaves everything else (errors included) to it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.mqtt.codec import Decoder, encode
from broker.mqtt.connect_decoder import decode_connect, plain_connect
from broker.mqtt.errors import MQTTProtocolError, PacketOverLimitError
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import Connect, Pingreq, Will
from broker.mqtt.properties import Properties
from broker.mqtt.wire import Reader

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1


def _general(wire: bytes) -> Connect:
    """The general path on one CONNECT packet (a 1-byte Remaining Length)."""
    return decode_connect(wire[0] & 0x0F, Reader(wire, 2, len(wire)))


def _plain(wire: bytes) -> Connect | None:
    return plain_connect(wire[0] & 0x0F, wire, 2, len(wire))


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from([V5, V311]),
    client_id=st.text(st.characters(max_codepoint=0x7F, blacklist_characters="\x00"), max_size=40),
    clean=st.booleans(),
    keep_alive=st.integers(0, 0xFFFF),
)
def test_plain_connect_equals_the_general_path(
    version: ProtocolVersion, client_id: str, clean: bool, keep_alive: int
) -> None:
    packet = Connect(version, client_id, clean, keep_alive)
    wire = encode(packet, version)
    plain = _plain(wire)
    assert plain is not None
    assert type(plain) is Connect
    assert plain == packet == _general(wire)
    assert hash(plain) == hash(packet)
    assert repr(plain) == repr(packet)
    assert plain.protocol_version is version
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.keep_alive = 1  # type: ignore[misc]
    assert Decoder().feed(wire) == [packet]


@pytest.mark.parametrize(
    "packet",
    [
        Connect(V5, "c", username="u"),
        Connect(V5, "c", password=b"p"),
        Connect(V311, "c", username="u", password=b"p"),
        Connect(V5, "c", will=Will(b"t", b"m")),
        Connect(V5, "c", properties=Properties(session_expiry_interval=5)),
        Connect(V5, "é"),  # not ASCII
        Connect(ProtocolVersion.MQTT_3_1, "c"),  # MQIsdp
    ],
)
def test_other_connects_take_the_general_path(packet: Connect) -> None:
    wire = encode(packet, packet.protocol_version)
    assert _plain(wire) is None
    assert Decoder().feed(wire) == [packet] == [_general(wire)]


def _v5(body_after_level: bytes) -> bytes:
    body = b"\x00\x04MQTT\x05" + body_after_level
    return b"\x10" + bytes([len(body)]) + body


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"\x11" + encode(Connect(V5, "c"), V5)[1:], "reserved flags"),
        (b"\x10\x0d\x00\x04MQTT\x06\x02\x00\x00\x00\x00\x01c", "unsupported protocol level"),
        (b"\x10\x0d\x00\x04MQTX\x05\x02\x00\x00\x00\x00\x01c", "unknown protocol name"),
        (_v5(b"\x03\x00\x00\x00\x00\x01c"), "reserved flag"),
        (_v5(b"\x02\x00\x00\x00\x00\x02c\x00"), "U\\+0000"),
        (_v5(b"\x02\x00\x00\x00\x00\x05c"), "packet ends inside"),
        (_v5(b"\x02\x00\x00\x00\x00"), "packet ends inside"),
        (_v5(b"\x02\x00\x00\x00"), "packet ends inside"),
        (_v5(b"\x02\x00\x00\x05"), "Property Length runs past"),
    ],
)
def test_bad_connects_get_the_general_paths_errors(wire: bytes, error: str) -> None:
    assert _plain(wire) is None
    with pytest.raises(MQTTProtocolError, match=error):
        Decoder().feed(wire)


def test_bytes_after_the_client_id_take_the_general_path() -> None:
    # The general path reads what the flags announce and ignores the rest: so does the
    # decoder, whichever path it takes.
    wire = _v5(b"\x02\x00\x00\x00\x00\x01cX")
    assert _plain(wire) is None
    assert Decoder().feed(wire) == [Connect(V5, "c")]


def test_a_server_decodes_only_auth_between_connect_and_connack() -> None:
    # Every path: the gate is set once the CONNECT is decoded (the packets behind it wait):
    # a plain or a general CONNECT with a packet behind it in the same chunk (the loop), and
    # a plain one alone in the client's first chunk (decoded before the loop).
    for packet in (Connect(V5, "c"), Connect(V5, "c", username="u")):
        for alone in (False, True):
            decoder = Decoder(gate_after_connect=True)
            before = decoder.gate
            assert before is None
            wire = encode(packet, V5)
            got = (
                decoder.feed(wire) + decoder.feed(b"\xc0\x00")
                if alone
                else decoder.feed(wire + b"\xc0\x00")
            )
            assert got == [packet]
            assert decoder.gate == frozenset({PacketType.AUTH})
            assert decoder.buffered == 2  # the PINGREQ, held


def test_a_plain_connect_over_the_limit_or_with_packets_behind_it() -> None:
    wire = encode(Connect(V5, "client"), V5)
    with pytest.raises(PacketOverLimitError):
        Decoder(max_packet_size=len(wire) - 1).feed(wire)
    decoder = Decoder()
    assert decoder.feed(wire + b"\xc0\x00") == [Connect(V5, "client"), Pingreq()]
    assert decoder.version is V5
    # The same bytes a byte at a time: the general path, the same packet.
    decoder = Decoder()
    got = [p for i in range(len(wire)) for p in decoder.feed(wire[i : i + 1])]
    assert got == [Connect(V5, "client")]
