"""The fuzz invariant, in one line (as h11 states its own):

    For ANY bytes, in ANY chunking, the decoder and the connection machine either return
    packets/events or raise MQTTProtocolError; no other exception ever escapes.

Inputs are arbitrary bytes, and valid packets with bytes flipped, cut or spliced (which
reach far deeper into the parsers than random bytes do).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.mqtt.codec import Decoder, encode
from broker.mqtt.connection import Connection, Role
from broker.mqtt.errors import MQTTProtocolError, PacketTooLargeError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Packet
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.reason_codes import ReasonCode as RC

from .mqtt_strategies import VERSIONS, any_packet, connects

VERSION_OR_NONE = [None, *VERSIONS]


def _decode_all(decoder: Decoder, chunks: list[bytes]) -> list[Packet]:
    out: list[Packet] = []
    error: MQTTProtocolError | None = None
    try:
        for chunk in chunks:
            out.extend(decoder.feed(chunk))
    except MQTTProtocolError as exc:
        error = exc
    if error is not None:
        assert isinstance(error.reason_code, ReasonCode)
        assert error.reason
        # A dead decoder keeps raising the same error.
        with pytest.raises(MQTTProtocolError) as again:
            decoder.feed(b"")
        assert again.value is error
    return out


@st.composite
def mutated(draw: st.DrawFn, version: ProtocolVersion) -> bytes:
    packets = draw(st.lists(any_packet(version), min_size=1, max_size=3))
    wire = bytearray(
        b"".join(
            encode(p, p.protocol_version if isinstance(p, Connect) else version) for p in packets
        )
    )
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        if not wire:
            break
        index = draw(st.integers(0, len(wire) - 1))
        if action == "flip":
            wire[index] ^= 1 << draw(st.integers(0, 7))
        elif action == "cut":
            del wire[index]
        elif action == "insert":
            wire.insert(index, draw(st.integers(0, 255)))
        else:
            wire[index] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
    return bytes(wire)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


@pytest.mark.parametrize("version", VERSION_OR_NONE, ids=lambda v: getattr(v, "name", "none"))
@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 1000), max_size=4))
def test_arbitrary_bytes_decode_or_raise_the_one_error(
    version: ProtocolVersion | None, data: bytes, cuts: list[int]
) -> None:
    _decode_all(Decoder(version), _chunks(data, cuts))


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cuts=st.lists(st.integers(0, 1000), max_size=4))
def test_mutated_packets_decode_or_raise_the_one_error(
    version: ProtocolVersion, data: st.DataObject, cuts: list[int]
) -> None:
    wire = data.draw(mutated(version))
    chunks = _chunks(wire, cuts)
    whole = _decode_all(Decoder(version), [wire])
    pieces = _decode_all(Decoder(version), chunks)
    # Chunking never changes what decodes (up to the error, which both raise).
    assert pieces[: len(whole)] == whole[: len(pieces)]


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_server_connection_survives_any_input(
    version: ProtocolVersion, data: st.DataObject
) -> None:
    server = Connection(Role.SERVER)
    connect = data.draw(connects(version))
    server.receive_data(encode(connect, version))
    try:
        server.send(Connack())
    except PacketTooLargeError:
        return  # the client's Maximum Packet Size is below a CONNACK's 5 bytes
    error: MQTTProtocolError | None = None
    try:
        server.receive_data(b"")
        server.receive_data(data.draw(mutated(version)))
        server.receive_data(data.draw(st.binary(max_size=64)))
    except MQTTProtocolError as exc:
        error = exc
    if error is not None:
        assert isinstance(error.reason_code, ReasonCode)
        assert server.closed


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_client_connection_survives_any_input(
    version: ProtocolVersion, data: st.DataObject
) -> None:
    client = Connection(Role.CLIENT)
    client.send(Connect(version, "c"))
    client.receive_data(encode(Connack(), version))
    error: MQTTProtocolError | None = None
    try:
        client.receive_data(data.draw(mutated(version)))
    except MQTTProtocolError as exc:
        error = exc
    if error is not None:
        assert isinstance(error.reason_code, ReasonCode)
        assert client.closed


def _feed_connection(chunks: list[bytes]) -> tuple[list[object], RC | None, bool]:
    server = Connection(Role.SERVER)
    events: list[object] = []
    code: RC | None = None
    try:
        for chunk in chunks:
            events.extend(server.receive_data(chunk))
            if server.state.name == "CONNECTING":
                server.send(Connack())
                events.extend(server.receive_data(b""))
    except MQTTProtocolError as exc:
        events.extend(exc.packets)
        code = exc.reason_code
    return events, code, server.closed


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: v.name)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_connection_byte_by_byte_equals_one_chunk(
    version: ProtocolVersion, data: st.DataObject
) -> None:
    connect = encode(Connect(version, "c"), version)
    rest = data.draw(mutated(version))
    whole = _feed_connection([connect + rest])
    pieces = _feed_connection([bytes([b]) for b in connect + rest])
    assert whole == pieces
