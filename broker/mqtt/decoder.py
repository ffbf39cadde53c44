"""The incremental decoder: bytes in (chunks of any size), complete packets out.

Buffering (no quadratic copying)
--------------------------------
A chunk is decoded in place when nothing is pending. Only the tail of a chunk that holds
an incomplete packet is copied into a ``bytearray``; later chunks are appended to it
(amortised O(1) per byte) and the buffer is decoded only once it holds the whole packet,
whose size the fixed header told us (``_need``). A 1 MiB packet fed one byte at a time
is therefore copied a constant number of times, not once per byte.

Limits checked from the fixed header, before the body is buffered
-----------------------------------------------------------------
* Remaining Length longer than 4 bytes, or not in its shortest form -> 0x81.
* Whole packet larger than ``max_packet_size`` -> 0x95 Packet Too Large.

Invariant (stated again in tests/mqtt/test_fuzz.py): for any sequence of chunks, ``feed``
returns packets or raises :class:`MQTTProtocolError`; no other exception escapes. Once it
has raised, the decoder is dead and raises the same error again.

PUBLISH is decoded by a tight special case inside the loop (it is the hot path); every
other packet goes through :func:`_decode_other`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from broker.mqtt.connect_decoder import decode_connect, plain_connect
from broker.mqtt.errors import (
    Answer,
    MQTTProtocolError,
    PacketOverLimitError,
    malformed,
    protocol_error,
)
from broker.mqtt.packet_types import PacketType, ProtocolVersion
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
    _PubackBuilder,
    _PublishBuilder,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Context, Properties, decode_properties
from broker.mqtt.reason_codes import (
    ReasonCode,
    allowed_reason_codes,
    reason_code_from_connack_return_code,
)
from broker.mqtt.wire import Reader, check_utf8

__all__ = ["MAX_PACKET_SIZE", "Decoder"]

#: The largest packet MQTT can express: 1 + 4 + 268,435,455 bytes.
MAX_PACKET_SIZE: Final = 1 + 4 + 268_435_455

_V5: Final = ProtocolVersion.MQTT_5
_PUBLISH: Final = PacketType.PUBLISH
_CONNECT_TYPE: Final[int] = int(PacketType.CONNECT)  # compared with a first byte's type
_AUTH_TYPE: Final[int] = int(PacketType.AUTH)
_SUCCESS: Final = ReasonCode.SUCCESS
# Read per packet: Final, so that compiled (hotpath) each is a C static, not a dict lookup.
_EMPTY: Final = EMPTY_PROPERTIES
_NEW: Final = object.__new__
_PUBLISH_CLASS: Final = Publish
_PUBACK_CLASS: Final = Puback
_PUBLISH_BUILDER: Final = _PublishBuilder
_PUBACK_BUILDER: Final = _PubackBuilder


class Decoder:
    """Incremental MQTT decoder for one direction of one connection.

    ``version`` is None until a CONNECT is decoded (which sets it); before that only
    CONNECT is accepted [MQTT-3.1.0-1]. ``max_packet_size`` may be changed at any time
    (e.g. after CONNACK declared ours). ``gate``, when not None, is the set of packet
    types that may be decoded now; decoding stops (the bytes stay buffered) before any
    other type. ``gate_after_connect`` installs ``{AUTH}`` as the gate right after a
    CONNECT is decoded, so a server processes nothing but AUTH until it sends CONNACK.
    """

    __slots__ = (
        "_buf",
        "_error",
        "_gate",
        "_need",
        "_queue",
        "gate_after_connect",
        "max_packet_size",
        "version",
    )

    def __init__(
        self,
        version: ProtocolVersion | None = None,
        max_packet_size: int = MAX_PACKET_SIZE,
        *,
        gate_after_connect: bool = False,
    ) -> None:
        self.version = version
        self.max_packet_size = max_packet_size
        self._gate: frozenset[int] | None = None
        self.gate_after_connect = gate_after_connect
        self._buf = bytearray()
        self._need = 0
        self._error: MQTTProtocolError | None = None
        # The h11-style pair's packets (made on first use: the broker only feeds).
        self._queue: deque[Packet] | None = None

    @property
    def gate(self) -> frozenset[int] | None:
        return self._gate

    @gate.setter
    def gate(self, value: frozenset[int] | None) -> None:
        self._gate = value
        self._need = 0  # decode again at the next feed(), even feed(b"")

    @property
    def buffered(self) -> int:
        """Bytes received but not yet decoded into packets."""
        return len(self._buf)

    # -- h11-style pair -------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """Buffer ``data``; decode with :meth:`next_packet`. Raises like :meth:`feed`
        (the packets before the bad one are then in the error's ``packets``)."""
        self._pending().extend(self.feed(data))

    def next_packet(self) -> Packet | None:
        """The next complete packet, or None when more data is needed."""
        if self._queue:
            return self._queue.popleft()
        packets = self.feed(b"")
        if not packets:
            return None
        self._pending().extend(packets[1:])
        return packets[0]

    def _pending(self) -> deque[Packet]:
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        return queue

    # -- the loop -------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Packet]:
        """Decode every complete packet in the buffer plus ``data``.

        Raises :class:`MQTTProtocolError`; its ``packets`` holds the packets decoded by
        this call before the bad one.
        """
        if self._error is not None:
            raise self._error
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return []
            data = bytes(self._buf)
            self._buf = bytearray()
        elif not data:
            return []
        elif (
            self.version is None
            and self._gate is None
            and 1 < len(data) <= self.max_packet_size
            and data[0] == 0x10
            and data[1] < 0x80
            and len(data) == 2 + data[1]
        ):
            # A client's first chunk holding one CONNECT and nothing else: the common
            # CONNECT is decoded in one step, with what the loop would do after it.
            connect = plain_connect(0, data, 2, len(data))
            if connect is not None:
                self._connected(connect)
                return [connect]
        out: list[Packet] = []
        try:
            pos = self._decode(data, out)
        except MQTTProtocolError as exc:
            exc.packets = tuple(out)
            if exc.version is None:
                exc.version = self.version
            self._error = exc
            raise
        if pos < len(data):
            self._buf = bytearray(memoryview(data)[pos:])
        return out

    def _decode(self, data: bytes, out: list[Packet]) -> int:
        n = len(data)
        pos = 0
        self._need = 0
        append = out.append
        max_size = self.max_packet_size
        version = self.version
        gate = self._gate
        v5 = version is _V5
        new_builder = _NEW
        builder = _PUBLISH_BUILDER
        # Topics repeat: validate each distinct one once per call (bounded by the chunk).
        valid_topics: set[bytes] = set()
        while pos + 1 < n:
            first = data[pos]
            if version is None and first >> 4 != _CONNECT_TYPE:
                # Decided from the first byte: a non-MQTT peer (say, an HTTP request) is
                # refused at once instead of waiting for the body it seems to announce.
                raise MQTTProtocolError(
                    ReasonCode.PROTOCOL_ERROR,
                    "the first packet must be CONNECT [MQTT-3.1.0-1]",
                    answer=Answer.CLOSE,
                )
            byte = data[pos + 1]
            if byte < 0x80:
                end = pos + 2 + byte
                p = pos + 2
            elif pos + 2 < n and 0 < data[pos + 2] < 0x80:
                # Two-byte Remaining Length (128..16383): the common case, inlined.
                end = pos + 3 + ((byte & 0x7F) | (data[pos + 2] << 7))
                p = pos + 3
            else:
                length, header = _remaining_length(data, pos, n)
                if not header:
                    break
                end = pos + header + length
                p = pos + header
            if end - pos > max_size:
                raise PacketOverLimitError(end - pos, max_size)
            if end > n:
                self._need = end - pos
                break
            ptype = first >> 4
            if gate is not None and ptype not in gate:
                # Held until the gate changes: later feeds only append (no re-scan, no
                # copy) because no packet can complete before that.
                self._need = MAX_PACKET_SIZE + 1
                break
            if ptype == 3 and version is not None:
                # ---- PUBLISH fast path (MQTT 5.0 §3.3) ----
                if p + 2 > end:
                    raise malformed("PUBLISH ends inside the Topic Name")
                tend = p + 2 + ((data[p] << 8) | data[p + 1])
                if tend > end:
                    raise malformed("PUBLISH ends inside the Topic Name")
                topic = data[p + 2 : tend]
                if topic not in valid_topics:
                    # (0 in, not b"\x00" in: a bytes needle is tried as an int first)
                    if not topic.isascii() or 0 in topic:
                        check_utf8(topic)
                    valid_topics.add(topic)
                p = tend
                qos = (first >> 1) & 3
                if qos:
                    if qos == 3:
                        raise malformed("PUBLISH with both QoS bits set [MQTT-3.3.1-4]")
                    if p + 2 > end:
                        raise malformed("PUBLISH ends inside the Packet Identifier")
                    packet_id: int | None = (data[p] << 8) | data[p + 1]
                    if not packet_id:
                        raise malformed("PUBLISH QoS > 0 with Packet Identifier 0 [MQTT-2.2.1-3]")
                    p += 2
                else:
                    if first & 0x08:
                        raise malformed("QoS 0 PUBLISH with DUP set [MQTT-3.3.1-2]")
                    packet_id = None
                if v5:
                    if p >= end:
                        raise malformed("PUBLISH ends before the Property Length")
                    if data[p] == 0:
                        props = _EMPTY
                        p += 1
                    else:
                        reader = Reader(data, p, end)
                        props = decode_properties(reader, Context.PUBLISH)
                        p = reader.pos
                else:
                    props = _EMPTY
                # Inlined new_publish() (see packets._PublishBuilder): a real, frozen Publish.
                packet = new_builder(builder)
                packet.topic = topic
                packet.payload = data[p:end]
                packet.qos = qos
                packet.retain = first & 0x01 == 1
                packet.dup = first & 0x08 == 8
                packet.packet_id = packet_id
                packet.properties = props
                packet.__class__ = _PUBLISH_CLASS  # type: ignore[assignment]
                append(packet)  # type: ignore[arg-type]
            elif first == 0x40 and end - p == 2 and (data[p] or data[p + 1]):
                # ---- PUBACK, Success and no properties (§3.4.2.1's short form): inlined,
                # a real, frozen Puback made as the Publish above ----
                ack = new_builder(_PUBACK_BUILDER)
                ack.packet_id = (data[p] << 8) | data[p + 1]
                ack.reason_code = _SUCCESS
                ack.properties = _EMPTY
                ack.__class__ = _PUBACK_CLASS  # type: ignore[assignment]
                append(ack)  # type: ignore[arg-type]
            else:
                append(self._decode_other(ptype, first & 0x0F, data, p, end))
                # A CONNECT may have set the version or the gate.
                version = self.version
                gate = self._gate
                v5 = version is _V5
            pos = end
        return pos

    def _connected(self, packet: Connect) -> None:
        """A CONNECT was decoded: it sets the version (the first one only), and a server
        decodes nothing but AUTH until its CONNACK is sent (``gate_after_connect``)."""
        if self.version is None:
            self.version = packet.protocol_version
        if self.gate_after_connect:
            self.gate = _AUTH_ONLY

    def _decode_other(self, ptype: int, flags: int, data: bytes, pos: int, end: int) -> Packet:
        version = self.version
        if ptype == _CONNECT_TYPE:
            packet = plain_connect(flags, data, pos, end) or decode_connect(
                flags, Reader(data, pos, end)
            )
            self._connected(packet)
            return packet
        assert version is not None  # _decode refuses anything but CONNECT before it
        if ptype == 0 or (ptype == _AUTH_TYPE and version is not _V5):
            raise malformed(f"reserved packet type {ptype}")
        expected = 0x02 if ptype in _FLAGS_0010 else 0x00
        if flags != expected:
            raise malformed(
                f"{PacketType(ptype).name} with reserved flags 0x{flags:X} [MQTT-2.1.3-1]"
            )
        reader = Reader(data, pos, end)
        decoded = _DECODERS[ptype](reader, version is _V5)
        if reader.pos != end:
            raise malformed(f"{PacketType(ptype).name} has {end - reader.pos} trailing bytes")
        return decoded


_FLAGS_0010: Final = frozenset({PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE})
# What a server decodes between CONNECT and CONNACK.
_AUTH_ONLY: Final = frozenset({PacketType.AUTH})


def _remaining_length(data: bytes, pos: int, n: int) -> tuple[int, int]:
    """(value, header size) of the fixed header at ``pos``; header size 0 = incomplete."""
    value = 0
    shift = 0
    i = pos + 1
    for count in range(4):
        if i >= n:
            return 0, 0
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            if byte == 0 and count:
                raise malformed("Remaining Length not in its shortest form [MQTT-1.5.5-1]")
            return value, i - pos
        shift += 7
    raise malformed("Remaining Length longer than 4 bytes")


# ---- the other packets ---------------------------------------------------------------


def _props(r: Reader, v5: bool, context: Context) -> Properties:
    return decode_properties(r, context) if v5 else EMPTY_PROPERTIES


def _reason(r: Reader, ptype: PacketType) -> ReasonCode:
    value = r.u8("a Reason Code")
    if value not in allowed_reason_codes(ptype):
        raise malformed(f"reason code 0x{value:02X} is not valid in {ptype.name}")
    return ReasonCode(value)


def _packet_id(r: Reader, ptype: PacketType) -> int:
    value = r.u16("the Packet Identifier")
    if not value:
        raise malformed(f"{ptype.name} with Packet Identifier 0 [MQTT-2.2.1-3]")
    return value


def _decode_connack(r: Reader, v5: bool) -> Connack:
    ack_flags = r.u8("the Connect Acknowledge Flags")
    if ack_flags & 0xFE:
        raise malformed("CONNACK reserved flags set [MQTT-3.2.2-1]")
    if v5:
        code = _reason(r, PacketType.CONNACK)
    else:
        value = r.u8("the return code")
        mapped = reason_code_from_connack_return_code(value)
        if mapped is None:
            raise malformed(f"reserved CONNACK return code {value}")
        code = mapped
    return Connack(bool(ack_flags), code, _props(r, v5, Context.CONNACK))


def _ack_decoder(
    ptype: PacketType, cls: type[Puback] | type[Pubrec] | type[Pubrel] | type[Pubcomp]
) -> Callable[[Reader, bool], Packet]:
    context = Context(ptype)

    def decode(r: Reader, v5: bool) -> Packet:
        packet_id = _packet_id(r, ptype)
        if not v5 or not r.remaining():
            return cls(packet_id)
        code = _reason(r, ptype)
        if not r.remaining():
            return cls(packet_id, code)
        return cls(packet_id, code, decode_properties(r, context))

    return decode


def _decode_subscribe(r: Reader, v5: bool) -> Subscribe:
    packet_id = _packet_id(r, PacketType.SUBSCRIBE)
    props = _props(r, v5, Context.SUBSCRIBE)
    subs: list[Subscription] = []
    while r.remaining():
        topic_filter = r.utf8_bytes("a Topic Filter")
        options = r.u8("the Subscription Options")
        qos = options & 0x03
        if qos == 3:
            raise malformed("Subscription with QoS 3")
        if v5:
            if options & 0xC0:
                raise malformed("Subscription Options reserved bits set [MQTT-3.8.3-5]")
            handling = (options >> 4) & 0x03
            if handling == 3:
                raise protocol_error("Retain Handling 3")
            subs.append(
                Subscription(
                    topic_filter,
                    qos,
                    bool(options & 0x04),
                    bool(options & 0x08),
                    RetainHandling(handling),
                )
            )
        else:
            if options & 0xFC:
                raise malformed("3.1.1 requested QoS reserved bits set [MQTT-3.8.3-4]")
            subs.append(Subscription(topic_filter, qos))
    if not subs:
        raise protocol_error("SUBSCRIBE without a Topic Filter [MQTT-3.8.3-2]")
    return Subscribe(packet_id, tuple(subs), props)


def _decode_suback(r: Reader, v5: bool) -> Suback:
    packet_id = _packet_id(r, PacketType.SUBACK)
    props = _props(r, v5, Context.SUBACK)
    codes: list[ReasonCode] = []
    while r.remaining():
        if v5:
            codes.append(_reason(r, PacketType.SUBACK))
        else:
            value = r.u8("a return code")
            if value not in (0, 1, 2, 0x80):
                raise malformed(f"reserved SUBACK return code 0x{value:02X}")
            codes.append(ReasonCode(value))
    if not codes:
        raise protocol_error("SUBACK without a reason code")
    return Suback(packet_id, tuple(codes), props)


def _decode_unsubscribe(r: Reader, v5: bool) -> Unsubscribe:
    packet_id = _packet_id(r, PacketType.UNSUBSCRIBE)
    props = _props(r, v5, Context.UNSUBSCRIBE)
    filters: list[bytes] = []
    while r.remaining():
        filters.append(r.utf8_bytes("a Topic Filter"))
    if not filters:
        raise protocol_error("UNSUBSCRIBE without a Topic Filter [MQTT-3.10.3-2]")
    return Unsubscribe(packet_id, tuple(filters), props)


def _decode_unsuback(r: Reader, v5: bool) -> Unsuback:
    packet_id = _packet_id(r, PacketType.UNSUBACK)
    if not v5:
        return Unsuback(packet_id)
    props = decode_properties(r, Context.UNSUBACK)
    codes: list[ReasonCode] = []
    while r.remaining():
        codes.append(_reason(r, PacketType.UNSUBACK))
    if not codes:
        raise protocol_error("UNSUBACK without a reason code")
    return Unsuback(packet_id, tuple(codes), props)


def _decode_pingreq(r: Reader, v5: bool) -> Pingreq:
    return Pingreq()


def _decode_pingresp(r: Reader, v5: bool) -> Pingresp:
    return Pingresp()


# The DISCONNECT nearly every client sends (0x00, no properties): one frozen value for all.
_NORMAL_DISCONNECT: Final = Disconnect()


def _decode_disconnect(r: Reader, v5: bool) -> Disconnect:
    if not v5 or not r.remaining():
        return _NORMAL_DISCONNECT
    code = _reason(r, PacketType.DISCONNECT)
    if not r.remaining():
        return Disconnect(code)
    return Disconnect(code, decode_properties(r, Context.DISCONNECT))


def _decode_auth(r: Reader, v5: bool) -> Auth:
    if not r.remaining():
        return Auth()
    code = _reason(r, PacketType.AUTH)
    return Auth(code, decode_properties(r, Context.AUTH))


_DECODERS: Final[dict[int, Callable[[Reader, bool], Packet]]] = {
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBACK: _ack_decoder(PacketType.PUBACK, Puback),
    PacketType.PUBREC: _ack_decoder(PacketType.PUBREC, Pubrec),
    PacketType.PUBREL: _ack_decoder(PacketType.PUBREL, Pubrel),
    PacketType.PUBCOMP: _ack_decoder(PacketType.PUBCOMP, Pubcomp),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.PINGREQ: _decode_pingreq,
    PacketType.PINGRESP: _decode_pingresp,
    PacketType.DISCONNECT: _decode_disconnect,
    PacketType.AUTH: _decode_auth,
}
