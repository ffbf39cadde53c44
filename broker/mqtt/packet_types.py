"""Control packet types (MQTT 5.0 §2.1.2, 3.1.1 §2.2.1) and protocol levels."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["PacketType", "ProtocolVersion"]


class PacketType(IntEnum):
    """The 4-bit packet type in the first byte of the fixed header. 0 is reserved."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5.0 only; reserved in 3.1.1


class ProtocolVersion(IntEnum):
    """The Protocol Level byte of CONNECT."""

    MQTT_3_1 = 3  # protocol name "MQIsdp"
    MQTT_3_1_1 = 4  # protocol name "MQTT"
    MQTT_5 = 5  # protocol name "MQTT"
