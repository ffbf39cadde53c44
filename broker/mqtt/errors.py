"""The one error type for peer input, and the one for local misuse.

:class:`MQTTProtocolError` is the only exception the decoder and the connection machine
raise for *anything the peer sends* (any bytes). It carries what goes on the wire: the
reason code, a reason string, and which packet to answer with (:class:`Answer`).
:class:`PacketOverLimitError` is the one kind of it with more for the caller: the size
of a packet over our Maximum Packet Size and the limit (the broker logs them).

:class:`LocalProtocolError` is raised when *our own side* asks for something the protocol
forbids (sending a second CONNACK, a packet identifier that is in use, a QoS 1 message
when the peer's Receive Maximum window is full ...). It is a programming error in the
caller, never caused by peer input. :class:`PacketTooLargeError` is the one local error
the broker is expected to catch: the packet would exceed the peer's Maximum Packet Size,
so per MQTT 5.0 §3.1.2.11.4 that message is skipped for that peer.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from broker.mqtt.reason_codes import ReasonCode

if TYPE_CHECKING:
    from broker.mqtt.packet_types import ProtocolVersion

__all__ = [
    "Answer",
    "LocalProtocolError",
    "MQTTProtocolError",
    "PacketOverLimitError",
    "PacketTooLargeError",
]


class Answer(Enum):
    """What the broker sends before closing the network connection."""

    #: Before CONNACK was sent: answer with CONNACK carrying the reason code (MQTT 5.0),
    #: or the 3.1.1 return code from ``connack_return_code`` when there is one; when there
    #: is none (3.1.1 Malformed Packet / Protocol Error), just close.
    CONNACK = "connack"
    #: After CONNACK: DISCONNECT with the reason code in MQTT 5.0; close in 3.1.x.
    DISCONNECT = "disconnect"
    #: Close without sending anything (e.g. the first packet is not CONNECT, MQTT-3.1.0-1).
    CLOSE = "close"


class MQTTProtocolError(Exception):
    """The peer sent something the protocol forbids.

    ``reason_code`` and ``reason`` go on the wire; ``answer`` says which packet carries
    them; ``version`` is the protocol version to encode that answer in (None if unknown).
    ``packets`` holds the valid packets decoded from the same ``receive_data``/``feed``
    call before the bad one, in order, so the caller may still process them: events of
    ``broker.mqtt.connection`` (typed loosely here, as this module sits below every other
    one of the package and imports none of them).
    """

    def __init__(
        self,
        reason_code: ReasonCode,
        reason: str,
        *,
        answer: Answer = Answer.DISCONNECT,
        version: ProtocolVersion | None = None,
    ) -> None:
        super().__init__(f"{reason_code.name} (0x{int(reason_code):02X}): {reason}")
        self.reason_code = reason_code
        self.reason = reason
        self.answer = answer
        self.version = version
        self.packets: tuple[Any, ...] = ()


class PacketOverLimitError(MQTTProtocolError):
    """The peer sent a packet larger than our Maximum Packet Size (0x95 [MQTT-3.2.2-15]);
    ``size`` (its whole length as announced by its fixed header) and ``limit`` are for
    the log, since the packet is refused before its body is read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            ReasonCode.PACKET_TOO_LARGE,
            f"packet of {size} bytes exceeds Maximum Packet Size {limit}",
        )
        self.size = size
        self.limit = limit


class LocalProtocolError(ValueError):
    """Our own side asked for something the protocol forbids (a bug in the caller): a
    value the wire cannot carry, or a packet the state does not allow."""


class PacketTooLargeError(LocalProtocolError):
    """The encoded packet is larger than the peer's Maximum Packet Size; skip it."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"packet of {size} bytes exceeds the peer's Maximum Packet Size {limit}")
        self.size = size
        self.limit = limit


def malformed(reason: str) -> MQTTProtocolError:
    """A Malformed Packet error (0x81)."""
    return MQTTProtocolError(ReasonCode.MALFORMED_PACKET, reason)


def protocol_error(reason: str) -> MQTTProtocolError:
    """A Protocol Error (0x82)."""
    return MQTTProtocolError(ReasonCode.PROTOCOL_ERROR, reason)
