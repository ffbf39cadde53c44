"""The rules of the per-connection protocol machine as data: roles, states, the packets
each side may receive and send in each state, and the events the machine yields.

States::

    AWAIT_CONNECT --CONNECT--> CONNECTING --CONNACK 0x00--> CONNECTED --DISCONNECT--> CLOSED
                                   |                            (sent or received)
                                   +--CONNACK >= 0x80--> CLOSED;   any MQTTProtocolError -> CLOSED

A server in CONNECTING decodes only AUTH; packets the client pipelined after CONNECT stay
buffered until CONNACK is sent (§3.1.4; and nothing after a refusing CONNACK,
[MQTT-3.1.4-5] in 3.1.1). A packet outside ``INBOUND`` is a Protocol Error; outside
``OUTBOUND``, a LocalProtocolError (``broker.mqtt.connection``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from broker.mqtt.packet_types import PacketType
from broker.mqtt.packets import Packet, Publish

__all__ = ["INBOUND", "OUTBOUND", "ConnectionState", "DuplicatePublish", "Event", "Role"]

_P = PacketType


class Role(Enum):
    SERVER = "server"
    CLIENT = "client"

    # Members are singletons compared by identity: identity hashing keeps the per-packet
    # table lookups keyed by (role, state) in C (Enum's own __hash__ is Python code).
    __hash__ = object.__hash__


class ConnectionState(Enum):
    __hash__ = object.__hash__

    AWAIT_CONNECT = "await_connect"
    CONNECTING = "connecting"  # CONNECT seen, CONNACK not yet
    CONNECTED = "connected"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class DuplicatePublish:
    """A QoS 2 PUBLISH whose packet id still awaits PUBREL: not a new message. Answer it
    with PUBREC again and do not deliver it (MQTT 5.0 §4.3.3)."""

    publish: Publish


Event = Packet | DuplicatePublish

_S = ConnectionState
_SERVER, _CLIENT = Role.SERVER, Role.CLIENT
_NOTHING: frozenset[PacketType] = frozenset()

#: (role, state) -> packet types the peer may send us.
INBOUND: Final[dict[tuple[Role, ConnectionState], frozenset[PacketType]]] = {
    (_SERVER, _S.AWAIT_CONNECT): frozenset({_P.CONNECT}),
    (_SERVER, _S.CONNECTING): frozenset({_P.AUTH}),
    (_SERVER, _S.CONNECTED): frozenset(
        {_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBSCRIBE}
        | {_P.UNSUBSCRIBE, _P.PINGREQ, _P.DISCONNECT, _P.AUTH}
    ),
    (_SERVER, _S.CLOSED): _NOTHING,
    (_CLIENT, _S.AWAIT_CONNECT): _NOTHING,
    (_CLIENT, _S.CONNECTING): frozenset({_P.CONNACK, _P.AUTH, _P.DISCONNECT}),
    (_CLIENT, _S.CONNECTED): frozenset(
        {_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK}
        | {_P.UNSUBACK, _P.PINGRESP, _P.DISCONNECT, _P.AUTH}
    ),
    (_CLIENT, _S.CLOSED): _NOTHING,
}

#: (role, state) -> packet types we may send.
OUTBOUND: Final[dict[tuple[Role, ConnectionState], frozenset[PacketType]]] = {
    (_SERVER, _S.AWAIT_CONNECT): _NOTHING,
    (_SERVER, _S.CONNECTING): frozenset({_P.CONNACK, _P.AUTH}),
    (_SERVER, _S.CONNECTED): frozenset(
        {_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK}
        | {_P.UNSUBACK, _P.PINGRESP, _P.DISCONNECT, _P.AUTH}
    ),
    (_SERVER, _S.CLOSED): _NOTHING,
    (_CLIENT, _S.AWAIT_CONNECT): frozenset({_P.CONNECT}),
    (_CLIENT, _S.CONNECTING): frozenset({_P.AUTH, _P.DISCONNECT}),
    (_CLIENT, _S.CONNECTED): frozenset(
        {_P.PUBLISH, _P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBSCRIBE}
        | {_P.UNSUBSCRIBE, _P.PINGREQ, _P.DISCONNECT, _P.AUTH}
    ),
    (_CLIENT, _S.CLOSED): _NOTHING,
}
