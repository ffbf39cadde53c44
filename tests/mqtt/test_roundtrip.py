"""Round trips for every packet type and version, and the incremental-decoding invariants:

* decode(encode(p)) == p, and re-encoding gives the same bytes;
* feeding byte by byte gives the same packets as feeding one chunk;
* every proper prefix of a valid packet asks for more data (returns no packet, no error).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.mqtt.codec import Decoder, encode
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Packet, Publish
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode

from .mqtt_strategies import VERSIONS, any_packet, packets_of, type_version_pairs

PAIRS = type_version_pairs()
IDS = [f"{t.name}-{v.name}" for t, v in PAIRS]


def _decoder_for(packet: Packet, version: ProtocolVersion) -> Decoder:
    # CONNECT announces its own version; everything else needs the connection's.
    return Decoder(None if isinstance(packet, Connect) else version)


@pytest.mark.parametrize(("ptype", "version"), PAIRS, ids=IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_round_trip(ptype: PacketType, version: ProtocolVersion, data: st.DataObject) -> None:
    packet = data.draw(packets_of(ptype, version))
    wire = encode(packet, version)
    decoded = _decoder_for(packet, version).feed(wire)
    assert decoded == [packet]
    assert encode(decoded[0], version) == wire


@pytest.mark.parametrize(("ptype", "version"), PAIRS, ids=IDS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_truncated_prefix_asks_for_more_data(
    ptype: PacketType, version: ProtocolVersion, data: st.DataObject
) -> None:
    packet = data.draw(packets_of(ptype, version))
    wire = encode(packet, version)
    for cut in range(len(wire)):
        decoder = _decoder_for(packet, version)
        assert decoder.feed(wire[:cut]) == []
        assert decoder.feed(wire[cut:]) == [packet]


@pytest.mark.parametrize("version", VERSIONS, ids=[v.name for v in VERSIONS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_byte_by_byte_equals_one_chunk(version: ProtocolVersion, data: st.DataObject) -> None:
    packets = data.draw(st.lists(any_packet(version), min_size=1, max_size=6))
    packets = [p for p in packets if not isinstance(p, Connect)]
    wire = b"".join(encode(p, version) for p in packets)
    whole = Decoder(version).feed(wire)
    one_at_a_time = Decoder(version)
    pieces: list[Packet] = []
    for i in range(len(wire)):
        pieces.extend(one_at_a_time.feed(wire[i : i + 1]))
    assert whole == pieces == packets
    assert one_at_a_time.buffered == 0


@pytest.mark.parametrize("version", VERSIONS, ids=[v.name for v in VERSIONS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_chunking_equals_one_chunk(version: ProtocolVersion, data: st.DataObject) -> None:
    packets = [
        p
        for p in data.draw(st.lists(any_packet(version), min_size=1, max_size=8))
        if not isinstance(p, Connect)
    ]
    wire = b"".join(encode(p, version) for p in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = Decoder(version)
    got: list[Packet] = []
    start = 0
    for cut in [*cuts, len(wire)]:
        got.extend(decoder.feed(wire[start:cut]))
        start = cut
    assert got == packets


def test_next_packet_pair_matches_feed() -> None:
    from broker.mqtt.packets import Pingreq, Puback

    version = ProtocolVersion.MQTT_5
    wire = encode(Pingreq(), version) + encode(Puback(3), version) + encode(Pingreq(), version)
    decoder = Decoder(version)
    assert decoder.next_packet() is None
    decoder.receive_data(wire[:3])
    assert decoder.next_packet() == Pingreq()
    assert decoder.next_packet() is None
    decoder.receive_data(wire[3:])
    assert decoder.next_packet() == Puback(3)
    assert decoder.next_packet() == Pingreq()
    assert decoder.next_packet() is None
    # A chunk that completes several packets at once, read through next_packet alone.
    other = Decoder(version)
    other.receive_data(b"")
    other._buf += wire  # bytes buffered but not yet decoded
    assert other.next_packet() == Pingreq()
    assert other.next_packet() == Puback(3)
    assert other.next_packet() == Pingreq()


def test_partial_packet_is_appended_not_copied_per_chunk() -> None:
    """No quadratic copying: while one large packet is incomplete, every feed appends to
    the same buffer (amortised O(1) per byte) instead of rebuilding it."""
    version = ProtocolVersion.MQTT_3_1_1
    big = Publish(b"t", bytes(1 << 20))
    wire = encode(big, version)
    decoder = Decoder(version)
    assert decoder.feed(wire[:1000]) == []
    buffer = decoder._buf
    for start in range(1000, len(wire) - 1000, 4096):
        assert decoder.feed(wire[start : min(start + 4096, len(wire) - 1000)]) == []
        assert decoder._buf is buffer
    assert decoder.feed(wire[len(wire) - 1000 :]) == [big]
    assert decoder.buffered == 0


def test_held_packets_are_not_rescanned_until_the_gate_opens() -> None:
    version = ProtocolVersion.MQTT_5
    from broker.mqtt.packets import Auth
    from broker.mqtt.packets import Connect as C

    decoder = Decoder(gate_after_connect=True)
    held = encode(Publish(b"t", b"x"), version)
    assert decoder.feed(encode(C(version, "c"), version) + held) == [C(version, "c")]
    buffer = decoder._buf
    assert decoder.feed(encode(Auth(), version)) == []  # behind the held PUBLISH: waits
    assert decoder._buf is buffer
    decoder.gate = None
    assert decoder.feed(b"") == [Publish(b"t", b"x"), Auth()]


def test_repeated_topic_in_one_chunk_is_validated_once_and_decoded_each_time() -> None:
    version = ProtocolVersion.MQTT_3_1_1
    packets = [Publish(b"same/topic", bytes([i])) for i in range(3)]
    wire = b"".join(encode(p, version) for p in packets)
    assert Decoder(version).feed(wire) == packets


def test_the_same_connack_object_encodes_once_per_protocol_family() -> None:
    """The broker sends most clients one Connack object: its bytes are kept by identity,
    per MQTT 5 or 3.1.x; another object is encoded afresh."""
    props = Properties(receive_maximum=100, topic_alias_maximum=8)
    connack = Connack(False, ReasonCode.SUCCESS, props)
    v5 = encode(connack, ProtocolVersion.MQTT_5)
    assert encode(connack, ProtocolVersion.MQTT_5) is v5  # kept
    v311 = encode(connack, ProtocolVersion.MQTT_3_1_1)
    assert v311 == b"\x20\x02\x00\x00"  # no properties in 3.1.x
    assert encode(connack, ProtocolVersion.MQTT_3_1) == v311
    assert encode(connack, ProtocolVersion.MQTT_5) == v5
    present = Connack(True, ReasonCode.SUCCESS, props)
    assert encode(present, ProtocolVersion.MQTT_5) == b"\x20" + v5[1:2] + b"\x01" + v5[3:]
    for version in VERSIONS:
        assert Decoder(version).feed(encode(connack, version)) == [
            connack if version is ProtocolVersion.MQTT_5 else Connack(False, ReasonCode.SUCCESS)
        ]
