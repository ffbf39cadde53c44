"""The MQTT control packets as frozen value objects (one class per packet type).

The same classes serve MQTT 5.0, 3.1.1 and 3.1; the protocol version is a property of the
connection, chosen when encoding. Fields that 3.1.x cannot carry (properties, reason codes
other than those with a 3.1.1 equivalent) are dropped when encoding for 3.1.x.

Topics and topic filters are ``bytes``: the decoder has validated them as MQTT UTF-8
strings (§1.5.4), and the radix tree takes bytes. Client identifiers, user names, and the
string properties are ``str``. ``packet_id`` is None where the packet carries none
(QoS 0 PUBLISH).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode

__all__ = [
    "Auth",
    "Connack",
    "Connect",
    "Disconnect",
    "Packet",
    "Pingreq",
    "Pingresp",
    "ProtocolVersion",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "RetainHandling",
    "Suback",
    "Subscribe",
    "Subscription",
    "Unsuback",
    "Unsubscribe",
    "Will",
    "new_publish",
]


class RetainHandling(IntEnum):
    """Subscription option bits 4-5 (MQTT 5.0 §3.8.3.1)."""

    SEND_ON_SUBSCRIBE = 0
    SEND_IF_NEW_SUBSCRIPTION = 1
    DO_NOT_SEND = 2


@dataclass(frozen=True, slots=True)
class Will:
    topic: bytes
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Connect:
    TYPE = PacketType.CONNECT
    protocol_version: ProtocolVersion
    client_id: str
    clean_start: bool = True  # Clean Session in 3.1.x
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY_PROPERTIES


class _ConnectBuilder:
    """The decoder's fast way to make a :class:`Connect` (as :class:`_PublishBuilder`):
    a connect storm decodes one per client."""

    # Must equal Connect.__slots__ (the field order), checked below.
    __slots__ = (  # noqa: RUF023
        "protocol_version",
        "client_id",
        "clean_start",
        "keep_alive",
        "username",
        "password",
        "will",
        "properties",
    )


assert _ConnectBuilder.__slots__ == Connect.__slots__  # the layouts must stay identical


@dataclass(frozen=True, slots=True)
class Connack:
    TYPE = PacketType.CONNACK
    session_present: bool = False
    #: MQTT 5.0 reason code; for 3.1.x mapped to/from the CONNACK return code.
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Publish:
    TYPE = PacketType.PUBLISH
    topic: bytes
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = EMPTY_PROPERTIES


class _PublishBuilder:
    """The decoder's fast way to make a :class:`Publish` (used inline in the decoder).

    A frozen dataclass's ``__init__`` assigns each field through ``object.__setattr__``,
    which costs about 1.5 us for PUBLISH's seven fields on the project machine: most of
    the decode budget. The decoder instead allocates this class, which has the same
    ``__slots__`` layout, assigns the slots directly (about 0.3 us) and then turns the
    object into a real, frozen ``Publish`` by ``__class__`` assignment, which CPython
    allows between classes of identical layout. The result is indistinguishable from
    ``Publish(...)`` (tests/mqtt/test_packets.py checks equality, hashing, immutability).
    """

    # Must equal Publish.__slots__ (the field order), checked below.
    __slots__ = ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties")  # noqa: RUF023
    topic: bytes
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    properties: Properties


assert _PublishBuilder.__slots__ == Publish.__slots__  # the layouts must stay identical


def new_publish(
    topic: bytes,
    payload: bytes,
    qos: int = 0,
    retain: bool = False,
    properties: Properties = EMPTY_PROPERTIES,
) -> Publish:
    """``Publish(topic, payload, qos, retain, properties=properties)`` made the decoder's
    fast way (the broker's own messages: JetStream builds one per delivery)."""
    p: Any = _PublishBuilder.__new__(_PublishBuilder)
    p.topic = topic
    p.payload = payload
    p.qos = qos
    p.retain = retain
    p.dup = False
    p.packet_id = None
    p.properties = properties
    p.__class__ = Publish
    out: Publish = p
    return out


@dataclass(frozen=True, slots=True)
class Puback:
    TYPE = PacketType.PUBACK
    packet_id: int
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


class _PubackBuilder:
    """The decoder's fast way to make a :class:`Puback` (as :class:`_PublishBuilder`): a
    consumer acknowledging QoS 1 deliveries sends one per message."""

    __slots__ = ("packet_id", "reason_code", "properties")  # noqa: RUF023 (Puback's order)
    packet_id: int
    reason_code: ReasonCode
    properties: Properties


assert _PubackBuilder.__slots__ == Puback.__slots__  # the layouts must stay identical


@dataclass(frozen=True, slots=True)
class Pubrec:
    TYPE = PacketType.PUBREC
    packet_id: int
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubrel:
    TYPE = PacketType.PUBREL
    packet_id: int
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pubcomp:
    TYPE = PacketType.PUBCOMP
    packet_id: int
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Subscription:
    """A topic filter and its Subscription Options."""

    filter: bytes
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE


@dataclass(frozen=True, slots=True)
class Subscribe:
    TYPE = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Suback:
    TYPE = PacketType.SUBACK
    packet_id: int
    #: one per subscription; in 3.1.x only 0, 1, 2 and 0x80 (any error) exist
    reason_codes: tuple[ReasonCode, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    TYPE = PacketType.UNSUBSCRIBE
    packet_id: int
    filters: tuple[bytes, ...]
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsuback:
    TYPE = PacketType.UNSUBACK
    packet_id: int
    #: one per filter in MQTT 5.0; empty (and not encoded) in 3.1.x
    reason_codes: tuple[ReasonCode, ...] = ()
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pingreq:
    TYPE = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class Pingresp:
    TYPE = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    TYPE = PacketType.DISCONNECT
    reason_code: ReasonCode = ReasonCode.NORMAL_DISCONNECTION
    properties: Properties = EMPTY_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    TYPE = PacketType.AUTH
    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES


Packet = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)
