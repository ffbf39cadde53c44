"""MQTT 5.0 reason codes (OASIS MQTT 5.0 §2.4, Table 2-6) and the 3.1.1 return codes.

One IntEnum for the numbers and one table, :data:`REASON_CODE_TABLE`, that gives every
code its meaning in the standard and the packets that may carry it. The value 0x00 has
three names (Success, Normal disconnection, Granted QoS 0), so it appears in three rows;
the enum keeps them as aliases of one value.

MQTT 3.1.1 has no reason codes: CONNACK carries a *return code* 0..5 (§3.2.2.3) and
SUBACK a granted QoS or 0x80. :func:`connack_return_code` maps a reason code onto the
3.1.1 CONNACK return code, and :func:`reason_code_from_connack_return_code` back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from broker.mqtt.packet_types import PacketType

__all__ = [
    "REASON_CODE_TABLE",
    "ReasonCode",
    "ReasonCodeInfo",
    "allowed_reason_codes",
    "connack_return_code",
    "reason_code_from_connack_return_code",
]


class ReasonCode(IntEnum):
    """Every MQTT 5.0 reason code. 0x00, 0x01, 0x02 carry several names (aliases)."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

    @property
    def is_error(self) -> bool:
        """Codes of 0x80 and above report failure (MQTT 5.0 §2.4)."""
        return self >= 0x80


@dataclass(frozen=True, slots=True)
class ReasonCodeInfo:
    """One row of Table 2-6: a code, its name in the standard, the packets that carry it."""

    code: ReasonCode
    meaning: str
    packets: frozenset[PacketType]


_P = PacketType
_CONNACK = _P.CONNACK
_PUBACK = _P.PUBACK
_PUBREC = _P.PUBREC
_PUBREL = _P.PUBREL
_PUBCOMP = _P.PUBCOMP
_SUBACK = _P.SUBACK
_UNSUBACK = _P.UNSUBACK
_DISCONNECT = _P.DISCONNECT
_AUTH = _P.AUTH


def _row(code: int, meaning: str, *packets: PacketType) -> ReasonCodeInfo:
    return ReasonCodeInfo(ReasonCode(code), meaning, frozenset(packets))


#: MQTT 5.0 Table 2-6, in the standard's order.
REASON_CODE_TABLE: tuple[ReasonCodeInfo, ...] = (
    _row(0x00, "Success", _CONNACK, _PUBACK, _PUBREC, _PUBREL, _PUBCOMP, _UNSUBACK, _AUTH),
    _row(0x00, "Normal disconnection", _DISCONNECT),
    _row(0x00, "Granted QoS 0", _SUBACK),
    _row(0x01, "Granted QoS 1", _SUBACK),
    _row(0x02, "Granted QoS 2", _SUBACK),
    _row(0x04, "Disconnect with Will Message", _DISCONNECT),
    _row(0x10, "No matching subscribers", _PUBACK, _PUBREC),
    _row(0x11, "No subscription existed", _UNSUBACK),
    _row(0x18, "Continue authentication", _AUTH),
    _row(0x19, "Re-authenticate", _AUTH),
    _row(0x80, "Unspecified error", _CONNACK, _PUBACK, _PUBREC, _SUBACK, _UNSUBACK, _DISCONNECT),
    _row(0x81, "Malformed Packet", _CONNACK, _DISCONNECT),
    _row(0x82, "Protocol Error", _CONNACK, _DISCONNECT),
    _row(
        0x83,
        "Implementation specific error",
        _CONNACK,
        _PUBACK,
        _PUBREC,
        _SUBACK,
        _UNSUBACK,
        _DISCONNECT,
    ),
    _row(0x84, "Unsupported Protocol Version", _CONNACK),
    _row(0x85, "Client Identifier not valid", _CONNACK),
    _row(0x86, "Bad User Name or Password", _CONNACK),
    _row(0x87, "Not authorized", _CONNACK, _PUBACK, _PUBREC, _SUBACK, _UNSUBACK, _DISCONNECT),
    _row(0x88, "Server unavailable", _CONNACK),
    _row(0x89, "Server busy", _CONNACK, _DISCONNECT),
    _row(0x8A, "Banned", _CONNACK),
    _row(0x8B, "Server shutting down", _DISCONNECT),
    _row(0x8C, "Bad authentication method", _CONNACK, _DISCONNECT),
    _row(0x8D, "Keep Alive timeout", _DISCONNECT),
    _row(0x8E, "Session taken over", _DISCONNECT),
    _row(0x8F, "Topic Filter invalid", _SUBACK, _UNSUBACK, _DISCONNECT),
    _row(0x90, "Topic Name invalid", _CONNACK, _PUBACK, _PUBREC, _DISCONNECT),
    _row(0x91, "Packet Identifier in use", _PUBACK, _PUBREC, _SUBACK, _UNSUBACK),
    _row(0x92, "Packet Identifier not found", _PUBREL, _PUBCOMP),
    _row(0x93, "Receive Maximum exceeded", _DISCONNECT),
    _row(0x94, "Topic Alias invalid", _DISCONNECT),
    _row(0x95, "Packet too large", _CONNACK, _DISCONNECT),
    _row(0x96, "Message rate too high", _DISCONNECT),
    _row(0x97, "Quota exceeded", _CONNACK, _PUBACK, _PUBREC, _SUBACK, _DISCONNECT),
    _row(0x98, "Administrative action", _DISCONNECT),
    _row(0x99, "Payload format invalid", _CONNACK, _PUBACK, _PUBREC, _DISCONNECT),
    _row(0x9A, "Retain not supported", _CONNACK, _DISCONNECT),
    _row(0x9B, "QoS not supported", _CONNACK, _DISCONNECT),
    _row(0x9C, "Use another server", _CONNACK, _DISCONNECT),
    _row(0x9D, "Server moved", _CONNACK, _DISCONNECT),
    _row(0x9E, "Shared Subscriptions not supported", _SUBACK, _DISCONNECT),
    _row(0x9F, "Connection rate exceeded", _CONNACK, _DISCONNECT),
    _row(0xA0, "Maximum connect time", _DISCONNECT),
    _row(0xA1, "Subscription Identifiers not supported", _SUBACK, _DISCONNECT),
    _row(0xA2, "Wildcard Subscriptions not supported", _SUBACK, _DISCONNECT),
)

_ALLOWED: dict[PacketType, frozenset[int]] = {
    ptype: frozenset(int(row.code) for row in REASON_CODE_TABLE if ptype in row.packets)
    for ptype in PacketType
}


def allowed_reason_codes(packet_type: PacketType) -> frozenset[int]:
    """The reason codes a packet of this type may carry in MQTT 5.0 (empty if none)."""
    return _ALLOWED[packet_type]


# MQTT 3.1.1 §3.2.2.3, Table 3.1: CONNACK return codes.
_CONNACK_RETURN_CODES: dict[ReasonCode, int] = {
    ReasonCode.SUCCESS: 0,
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: 1,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: 2,
    ReasonCode.SERVER_UNAVAILABLE: 3,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: 4,
    ReasonCode.NOT_AUTHORIZED: 5,
    # The nearest 3.1.1 meaning for 5.0-only refusals.
    ReasonCode.SERVER_BUSY: 3,
    ReasonCode.USE_ANOTHER_SERVER: 3,
    ReasonCode.SERVER_MOVED: 3,
    ReasonCode.CONNECTION_RATE_EXCEEDED: 3,
    ReasonCode.QUOTA_EXCEEDED: 3,
    ReasonCode.BANNED: 5,
    ReasonCode.BAD_AUTHENTICATION_METHOD: 4,
}

_FROM_CONNACK_RETURN_CODE: dict[int, ReasonCode] = {
    0: ReasonCode.SUCCESS,
    1: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    2: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    3: ReasonCode.SERVER_UNAVAILABLE,
    4: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.NOT_AUTHORIZED,
}


def connack_return_code(code: ReasonCode) -> int | None:
    """The MQTT 3.1.1 CONNACK return code for a reason code, or None when 3.1.1 has none.

    None means: in 3.1.1 the server closes the network connection without a CONNACK
    (e.g. Malformed Packet, Protocol Error: MQTT 3.1.1 §4.8).
    """
    return _CONNACK_RETURN_CODES.get(code)


def reason_code_from_connack_return_code(value: int) -> ReasonCode | None:
    """The reason code for a 3.1.1 CONNACK return code 0..5, or None for reserved values."""
    return _FROM_CONNACK_RETURN_CODE.get(value)
