"""The encoder: packet objects to exact bytes, and :class:`EncodedPublish` for fan-out.

``encode(packet, version)`` produces the bytes of one packet for a connection of that
protocol version (CONNECT always uses its own ``protocol_version``). Asking for something
the protocol cannot express (QoS 0 with DUP, a QoS > 0 PUBLISH without a packet
identifier, AUTH in 3.1.1, a reason code not allowed in that packet, a 5.0-only CONNACK
refusal with no 3.1.1 return code) raises :class:`LocalProtocolError`; these are bugs in
the caller, never peer input.

For MQTT 5.0 acknowledgements the short forms are used: Reason Code and Property Length
omitted when the code is 0x00 and there are no properties (§3.4.2.1), Property Length
omitted when there are none (§3.4.2.2); DISCONNECT and AUTH likewise (§3.14.2.1, §3.15.2.1).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from broker.mqtt.errors import LocalProtocolError
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
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from broker.mqtt.properties import (
    EMPTY_PROPERTIES,
    PROPERTY_TABLE,
    Context,
    Properties,
    PropertyId,
    encode_properties,
    encode_property_items,
)
from broker.mqtt.reason_codes import ReasonCode, allowed_reason_codes, connack_return_code
from broker.mqtt.wire import encode_binary, encode_string, encode_string_bytes, encode_varint

__all__ = ["EncodedPublish", "encode", "plain_qos0", "plain_qos0_prefix"]

_V5: Final = ProtocolVersion.MQTT_5
_USER_ID: Final = encode_varint(int(PropertyId.USER_PROPERTY))
_BYTE: Final[tuple[bytes, ...]] = tuple(bytes((i,)) for i in range(256))
_PUBLISH_CLASS: Final = Publish  # (C statics when compiled)
_CONNACK_CLASS: Final = Connack


# The last CONNACK encoded, whether for MQTT 5, and its bytes: the broker sends most
# clients the same Connack object (found by identity; the pair is replaced whole).
_last_connack_bytes: list[tuple[Connack | None, bool, bytes]] = [(None, False, b"")]


def encode(packet: Packet, version: ProtocolVersion) -> bytes:
    """The exact bytes of ``packet`` on a connection speaking ``version``."""
    v5 = version is _V5
    if type(packet) is _PUBLISH_CLASS:
        return _encode_publish(packet, v5)
    if type(packet) is _CONNACK_CLASS:
        last = _last_connack_bytes[0]
        if last[0] is packet and last[1] is v5:
            return last[2]
        first, body = _connack(packet, v5)
        data = b"".join((_BYTE[first], encode_varint(len(body)), body))
        _last_connack_bytes[0] = (packet, v5, data)
        return data
    first, body = _ENCODERS[type(packet)](packet, v5)
    return b"".join((_BYTE[first], encode_varint(len(body)), body))


def _check_qos_flags(qos: int, dup: bool, packet_id: int | None) -> None:
    if qos not in (0, 1, 2):
        raise LocalProtocolError(f"QoS {qos} does not exist")
    if qos and not packet_id:
        raise LocalProtocolError("a QoS > 0 PUBLISH needs a non-zero packet identifier")
    if not qos and dup:
        raise LocalProtocolError("DUP must be 0 on a QoS 0 PUBLISH [MQTT-3.3.1-2]")


def _encode_publish(p: Publish, v5: bool) -> bytes:
    qos = p.qos
    topic = p.topic
    if qos or p.dup or len(topic) > 0xFFFF:
        _check_qos_flags(qos, p.dup, p.packet_id)
        if len(topic) > 0xFFFF:
            raise LocalProtocolError(f"topic of {len(topic)} bytes exceeds 65535")
    head = len(topic).to_bytes(2, "big") + topic
    if qos:
        head += p.packet_id.to_bytes(2, "big")  # type: ignore[union-attr]
    if v5:
        props = p.properties
        head += b"\x00" if props is EMPTY_PROPERTIES else encode_properties(props, Context.PUBLISH)
    payload = p.payload
    first = 0x30 | (qos << 1) | (0x08 if p.dup else 0) | (0x01 if p.retain else 0)
    return b"".join((_BYTE[first], encode_varint(len(head) + len(payload)), head, payload))


def _empty(props: Properties) -> bool:
    return props is EMPTY_PROPERTIES or props == EMPTY_PROPERTIES


def _reason(code: ReasonCode, ptype: PacketType) -> bytes:
    if int(code) not in allowed_reason_codes(ptype):
        raise LocalProtocolError(f"reason code 0x{int(code):02X} is not allowed in {ptype.name}")
    return _BYTE[code]


def _connect(p: Connect, _v5: bool) -> tuple[int, bytes]:
    version = p.protocol_version
    v5 = version is _V5
    name = b"\x00\x06MQIsdp" if version is ProtocolVersion.MQTT_3_1 else b"\x00\x04MQTT"
    flags = 0
    if p.clean_start:
        flags |= 0x02
    will = p.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"Will QoS {will.qos} does not exist")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if p.password is not None:
        if p.username is None and not v5:
            raise LocalProtocolError("3.1.1 forbids a password without a user name")
        flags |= 0x40
    if p.username is not None:
        flags |= 0x80
    parts = [name, _BYTE[version], _BYTE[flags], p.keep_alive.to_bytes(2, "big")]
    if v5:
        parts.append(encode_properties(p.properties, Context.CONNECT))
    parts.append(encode_string(p.client_id))
    if will is not None:
        if v5:
            parts.append(encode_properties(will.properties, Context.WILL))
        parts.append(encode_string_bytes(will.topic))
        parts.append(encode_binary(will.payload))
    if p.username is not None:
        parts.append(encode_string(p.username))
    if p.password is not None:
        parts.append(encode_binary(p.password))
    return 0x10, b"".join(parts)


@functools.lru_cache(maxsize=16)
def _connack_properties(props: Properties) -> bytes:
    # A server sends most clients the same CONNACK properties: encoded once.
    return encode_properties(props, Context.CONNACK)


# The properties object of the last common CONNACK and its bytes: the broker passes the
# same object to most clients (found by identity, without hashing the properties).
_last_connack: list[tuple[Properties | None, bytes]] = [(None, b"")]


def _connack(p: Connack, v5: bool) -> tuple[int, bytes]:
    flags = _BYTE[1 if p.session_present else 0]
    if v5:
        props = p.properties
        last = _last_connack[0]
        if props is last[0]:
            encoded = last[1]
        elif props.assigned_client_identifier is None:  # not one client's own
            encoded = _connack_properties(props)
            _last_connack[0] = (props, encoded)  # one store: a pair other threads agree on
        else:
            encoded = encode_properties(props, Context.CONNACK)
        rc = p.reason_code
        reason = b"\x00" if rc is ReasonCode.SUCCESS else _reason(rc, PacketType.CONNACK)
        return 0x20, flags + reason + encoded
    code = connack_return_code(p.reason_code)
    if code is None:
        raise LocalProtocolError(
            f"{p.reason_code.name} has no MQTT 3.1.1 CONNACK return code; close instead"
        )
    return 0x20, flags + _BYTE[code]


def _ack(first: int, ptype: PacketType) -> Callable[[Any, bool], tuple[int, bytes]]:
    context = Context(ptype)

    def encode_ack(p: Puback | Pubrec | Pubrel | Pubcomp, v5: bool) -> tuple[int, bytes]:
        if not p.packet_id:
            raise LocalProtocolError(f"{ptype.name} needs a non-zero packet identifier")
        pid = p.packet_id.to_bytes(2, "big")
        if not v5:
            return first, pid
        props = p.properties
        if _empty(props):
            if p.reason_code == ReasonCode.SUCCESS:
                return first, pid
            return first, pid + _reason(p.reason_code, ptype)
        return first, pid + _reason(p.reason_code, ptype) + encode_properties(props, context)

    return encode_ack


def _subscribe(p: Subscribe, v5: bool) -> tuple[int, bytes]:
    if not p.packet_id or not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs a packet identifier and a subscription")
    parts = [p.packet_id.to_bytes(2, "big")]
    if v5:
        parts.append(encode_properties(p.properties, Context.SUBSCRIBE))
    for sub in p.subscriptions:
        if sub.qos not in (0, 1, 2):
            raise LocalProtocolError(f"QoS {sub.qos} does not exist")
        options = sub.qos
        if v5:
            options |= (
                (0x04 if sub.no_local else 0)
                | (0x08 if sub.retain_as_published else 0)
                | (int(sub.retain_handling) << 4)
            )
        parts.append(encode_string_bytes(sub.filter))
        parts.append(_BYTE[options])
    return 0x82, b"".join(parts)


def _suback(p: Suback, v5: bool) -> tuple[int, bytes]:
    parts = [p.packet_id.to_bytes(2, "big")]
    if v5:
        parts.append(encode_properties(p.properties, Context.SUBACK))
        parts.extend(_reason(code, PacketType.SUBACK) for code in p.reason_codes)
    else:
        parts.extend(_BYTE[code if code < 0x80 else 0x80] for code in p.reason_codes)
    return 0x90, b"".join(parts)


def _unsubscribe(p: Unsubscribe, v5: bool) -> tuple[int, bytes]:
    if not p.packet_id or not p.filters:
        raise LocalProtocolError("UNSUBSCRIBE needs a packet identifier and a filter")
    parts = [p.packet_id.to_bytes(2, "big")]
    if v5:
        parts.append(encode_properties(p.properties, Context.UNSUBSCRIBE))
    parts.extend(encode_string_bytes(f) for f in p.filters)
    return 0xA2, b"".join(parts)


def _unsuback(p: Unsuback, v5: bool) -> tuple[int, bytes]:
    pid = p.packet_id.to_bytes(2, "big")
    if not v5:
        return 0xB0, pid
    codes = b"".join(_reason(code, PacketType.UNSUBACK) for code in p.reason_codes)
    return 0xB0, pid + encode_properties(p.properties, Context.UNSUBACK) + codes


def _pingreq(p: Pingreq, v5: bool) -> tuple[int, bytes]:
    return 0xC0, b""


def _pingresp(p: Pingresp, v5: bool) -> tuple[int, bytes]:
    return 0xD0, b""


def _disconnect(p: Disconnect, v5: bool) -> tuple[int, bytes]:
    if not v5:
        return 0xE0, b""
    if _empty(p.properties):
        if p.reason_code == ReasonCode.NORMAL_DISCONNECTION:
            return 0xE0, b""
        return 0xE0, _reason(p.reason_code, PacketType.DISCONNECT)
    return 0xE0, _reason(p.reason_code, PacketType.DISCONNECT) + encode_properties(
        p.properties, Context.DISCONNECT
    )


def _auth(p: Auth, v5: bool) -> tuple[int, bytes]:
    if not v5:
        raise LocalProtocolError("AUTH exists only in MQTT 5.0")
    if _empty(p.properties) and p.reason_code == ReasonCode.SUCCESS:
        return 0xF0, b""
    return 0xF0, _reason(p.reason_code, PacketType.AUTH) + encode_properties(
        p.properties, Context.AUTH
    )


_ENCODERS: Final[dict[type, Callable[[Any, bool], tuple[int, bytes]]]] = {
    Connect: _connect,
    Connack: _connack,
    Puback: _ack(0x40, PacketType.PUBACK),
    Pubrec: _ack(0x50, PacketType.PUBREC),
    Pubrel: _ack(0x62, PacketType.PUBREL),
    Pubcomp: _ack(0x70, PacketType.PUBCOMP),
    Subscribe: _subscribe,
    Suback: _suback,
    Unsubscribe: _unsubscribe,
    Unsuback: _unsuback,
    Pingreq: _pingreq,
    Pingresp: _pingresp,
    Disconnect: _disconnect,
    Auth: _auth,
}

_PER_RECIPIENT: Final = frozenset({"topic_alias", "subscription_identifiers", "user_properties"})
_NOT_HEAD: Final = _PER_RECIPIENT | {
    "message_expiry_interval",
    "content_type",
    "response_topic",
    "correlation_data",
}
_NOT_TAIL: Final = _PER_RECIPIENT | {"payload_format_indicator", "message_expiry_interval"}
_EXPIRY_ID: Final = encode_varint(PropertyId.MESSAGE_EXPIRY_INTERVAL)


def _expiry(seconds: int) -> bytes:
    return _EXPIRY_ID + seconds.to_bytes(4, "big")


_ALIAS_ID: Final = encode_varint(PropertyId.TOPIC_ALIAS)
_SUB_ID: Final = encode_varint(PropertyId.SUBSCRIPTION_IDENTIFIER)
_FORMAT_ID: Final = encode_varint(PropertyId.PAYLOAD_FORMAT_INDICATOR)
_CTYPE_ID: Final = encode_varint(PropertyId.CONTENT_TYPE)
_RTOPIC_ID: Final = encode_varint(PropertyId.RESPONSE_TOPIC)
_CORR_ID: Final = encode_varint(PropertyId.CORRELATION_DATA)
# The properties a PUBLISH carries that are not per recipient, in table order, and all the
# others (which a PUBLISH may not carry, or which for_recipient adds), read in one C call.
_PUBLISH_VALUES: Final = operator.attrgetter(
    "payload_format_indicator",
    "message_expiry_interval",
    "content_type",
    "response_topic",
    "correlation_data",
    "user_properties",
)
_NOT_PUBLISH: Final = operator.attrgetter(
    *(
        row.name
        for row in PROPERTY_TABLE
        if row.id
        not in (
            PropertyId.PAYLOAD_FORMAT_INDICATOR,
            PropertyId.MESSAGE_EXPIRY_INTERVAL,
            PropertyId.CONTENT_TYPE,
            PropertyId.RESPONSE_TOPIC,
            PropertyId.CORRELATION_DATA,
            PropertyId.USER_PROPERTY,
        )
    )
)
_ABSENT: Final = _NOT_PUBLISH(EMPTY_PROPERTIES)
# The last user properties encoded, and their bytes: JetStream's deliveries of one subject
# share one tuple (held here, so its identity cannot be reused while it is the key).
_last_user: tuple[tuple[tuple[str, str], ...], bytes] = ((), b"")


def _user_items(user: tuple[tuple[str, str], ...]) -> bytes:
    """What encode_property_items gives for the user properties alone."""
    global _last_user
    last = _last_user
    if last[0] is user:
        return last[1]
    out = b"".join([_USER_ID + encode_string(k) + encode_string(v) for k, v in user])
    _last_user = (user, out)
    return out


class EncodedPublish:
    """A PUBLISH encoded once, patched per recipient without re-encoding the payload.

    Built from a :class:`Publish` (its qos, dup, retain, packet_id and topic alias are
    ignored: they are per recipient). The other properties are encoded once, in order.
    :meth:`for_recipient` assembles fixed header + topic (or an empty topic with an
    alias) + packet id + property block + payload. For QoS 0 with no alias and no
    subscription identifiers the result is cached per retain flag, so every such
    recipient gets the *same* bytes object.
    """

    __slots__ = (
        "_head",
        "_items",
        "_low",
        "_payload",
        "_props",
        "_shared",
        "_shared_retained",
        "_tail",
        "_topic",
        "_user",
        "publish",
        "version",
    )

    def __init__(self, publish: Publish, version: ProtocolVersion) -> None:
        self.publish = publish
        self.version = version
        if len(publish.topic) > 0xFFFF:
            raise LocalProtocolError(f"topic of {len(publish.topic)} bytes exceeds 65535")
        self._topic = len(publish.topic).to_bytes(2, "big") + publish.topic
        self._payload = publish.payload
        # The properties in table order, split around the per-recipient ones so that the
        # result is byte-identical to encode():
        #   [01 format] [02 expiry] [03 08 09] [0B sub ids] [23 alias] [26 user properties]
        #    _head                   _tail                               _user
        props = publish.properties
        if version is _V5 and props is not EMPTY_PROPERTIES:
            if _NOT_PUBLISH(props) == _ABSENT:
                # Only PUBLISH properties (the rule): what encode_property_items gives,
                # without two walks of the whole table.
                fmt, expiry, ctype, rtopic, corr, user = _PUBLISH_VALUES(props)
                self._head = b"" if fmt is None else _FORMAT_ID + bytes((fmt,))
                tail = b"" if ctype is None else _CTYPE_ID + encode_string(ctype)
                if rtopic is not None:
                    tail += _RTOPIC_ID + encode_string(rtopic)
                if corr is not None:
                    tail += _CORR_ID + encode_binary(corr)
                self._tail = tail
            else:  # encode_property_items names the one not allowed in a PUBLISH
                self._head = encode_property_items(props, Context.PUBLISH, skip=_NOT_HEAD)
                self._tail = encode_property_items(props, Context.PUBLISH, skip=_NOT_TAIL)
                user = props.user_properties
                expiry = props.message_expiry_interval
            self._user = _user_items(user)
            self._low = self._head + (b"" if expiry is None else _expiry(expiry)) + self._tail
        else:
            self._head = self._tail = self._low = self._user = b""
        self._items = self._low + self._user
        # The common copy's properties as sent: their length, then the items (none before 5.0).
        self._props = encode_varint(len(self._items)) + self._items if version is _V5 else b""
        # The QoS 0 copies every plain recipient shares, per retain flag (built on first use).
        self._shared: bytes | None = None
        self._shared_retained: bytes | None = None

    def qos0(self, retain: bool) -> bytes:
        """``for_recipient(retain=retain)``: the QoS 0 copy without topic alias, subscription
        identifiers or a new expiry, built once per retain flag and shared by every such
        recipient."""
        if retain:
            cached = self._shared_retained
            if cached is None:
                cached = self._shared_retained = self._copy(0x31, b"")
            return cached
        cached = self._shared
        if cached is None:
            cached = self._shared = self._copy(0x30, b"")
        return cached

    def copy(self, qos: int, retain: bool, packet_id: int) -> bytes:
        """``for_recipient(packet_id, False, qos, retain)`` for QoS 1 or 2: the copy
        without topic alias, subscription identifiers or a new expiry."""
        if qos not in (1, 2) or not packet_id:
            _check_qos_flags(qos, False, packet_id)
            raise LocalProtocolError("copy() is for QoS 1 and 2")
        return self._copy(0x30 | qos << 1 | retain, packet_id.to_bytes(2, "big"))

    def _copy(self, first: int, packet_id: bytes) -> bytes:
        topic, props, payload = self._topic, self._props, self._payload
        length = len(topic) + len(packet_id) + len(props) + len(payload)
        return b"".join((_BYTE[first], encode_varint(length), topic, packet_id, props, payload))

    def for_recipient(
        self,
        packet_id: int | None = None,
        dup: bool = False,
        qos: int = 0,
        retain: bool = False,
        topic_alias: int | None = None,
        omit_topic: bool = False,
        subscription_identifiers: tuple[int, ...] = (),
        message_expiry_interval: int | None = None,
    ) -> bytes:
        """The bytes for one recipient. ``omit_topic`` sends an empty topic name and
        needs ``topic_alias`` (the alias is already known to the recipient).
        ``message_expiry_interval``, when given, replaces the original's (the remaining
        lifetime of a forwarded message, MQTT 5.0 §3.3.2.3.3)."""
        v5 = self.version is _V5
        shared = (
            not qos
            and topic_alias is None
            and ((not subscription_identifiers and message_expiry_interval is None) or not v5)
        )
        if shared and not omit_topic:
            cached = self._shared_retained if retain else self._shared
            if cached is not None:
                return cached
        if qos or dup:
            _check_qos_flags(qos, dup, packet_id)
        if omit_topic and (topic_alias is None or not v5):
            raise LocalProtocolError("an empty topic name needs a topic alias (MQTT 5.0)")
        head = [b"\x00\x00" if omit_topic else self._topic]
        if qos:
            head.append(packet_id.to_bytes(2, "big"))  # type: ignore[union-attr]
        if v5:
            items = self._items
            if (
                topic_alias is not None
                or subscription_identifiers
                or message_expiry_interval is not None
            ):
                low = self._low
                if message_expiry_interval is not None:
                    low = self._head + _expiry(message_expiry_interval) + self._tail
                parts = [low]
                parts.extend(_SUB_ID + encode_varint(i) for i in subscription_identifiers)
                if topic_alias is not None:
                    parts.append(_ALIAS_ID + topic_alias.to_bytes(2, "big"))
                parts.append(self._user)
                items = b"".join(parts)
            head.append(encode_varint(len(items)))
            head.append(items)
        body = b"".join(head)
        first = 0x30 | (qos << 1) | (0x08 if dup else 0) | (0x01 if retain else 0)
        out = b"".join(
            (_BYTE[first], encode_varint(len(body) + len(self._payload)), body, self._payload)
        )
        if shared and not omit_topic:
            if retain:
                self._shared_retained = out
            else:
                self._shared = out
        return out

    def as_publish(
        self,
        packet_id: int | None,
        qos: int,
        retain: bool,
        dup: bool = False,
        subscription_identifiers: tuple[int, ...] = (),
        message_expiry_interval: int | None = None,
    ) -> Publish:
        """The :class:`Publish` a recipient receives (for in-flight bookkeeping)."""
        props = self.publish.properties
        expiry = props.message_expiry_interval
        if message_expiry_interval is not None:
            expiry = message_expiry_interval
        if (
            props.topic_alias is not None
            or props.subscription_identifiers != subscription_identifiers
            or props.message_expiry_interval != expiry
        ):
            props = replace(
                props,
                topic_alias=None,
                subscription_identifiers=subscription_identifiers,
                message_expiry_interval=expiry,
            )
        return Publish(self.publish.topic, self._payload, qos, retain, dup, packet_id, props)


def plain_qos0_prefix(topic: bytes, version: ProtocolVersion) -> bytes:
    """The part after the fixed header of a plain QoS 0 copy: a PUBLISH without
    properties sent without retain, topic alias or subscription identifier (the Topic
    Name, then in 5.0 a Property Length of 0). ``plain_qos0(prefix, payload)`` is then
    ``EncodedPublish(Publish(topic, payload), version).qos0(False)``, without the object:
    a run of such PUBLISHes to one topic encodes the prefix once."""
    if len(topic) > 0xFFFF:
        raise LocalProtocolError(f"topic of {len(topic)} bytes exceeds 65535")
    head = len(topic).to_bytes(2, "big") + topic
    return head + b"\x00" if version is _V5 else head


def plain_qos0(prefix: bytes, payload: bytes) -> bytes:
    """The plain QoS 0 copy of ``payload`` (see ``plain_qos0_prefix``)."""
    return b"".join((b"\x30", encode_varint(len(prefix) + len(payload)), prefix, payload))


def strip_diagnostics(props: Properties) -> Properties:
    """Properties without Reason String and User Properties (what the sender may drop to
    stay under the peer's Maximum Packet Size, e.g. [MQTT-3.14.2-3])."""
    if props.reason_string is None and not props.user_properties:
        return props
    return replace(props, reason_string=None, user_properties=())
