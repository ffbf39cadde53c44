"""CONNECT (MQTT 5.0 §3.1, 3.1.1 §3.1) from bytes, for :mod:`broker.mqtt.decoder`:
``plain_connect`` reads the CONNECT most clients send in one step, ``decode_connect``
reads any (and refuses a bad one with the reason code and answer it calls for)."""

from __future__ import annotations

from typing import Any, Final, cast

from broker.mqtt.errors import Answer, MQTTProtocolError, malformed
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connect, Will, _ConnectBuilder
from broker.mqtt.properties import EMPTY_PROPERTIES, Context, decode_properties
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.wire import Reader

__all__ = ["decode_connect", "plain_connect"]

_V5: Final = ProtocolVersion.MQTT_5
_V311: Final = ProtocolVersion.MQTT_3_1_1


def plain_connect(flags: int, data: bytes, pos: int, end: int) -> Connect | None:
    """The CONNECT most clients send (MQTT 4 or 5, no will, user name, password or
    properties, an ASCII client id ending the packet) as the general path decodes it;
    None for anything else (the general path decodes it, errors included)."""
    if flags or end - pos < 12 or data[pos : pos + 6] != b"\x00\x04MQTT" or data[pos + 7] & 0xFD:
        return None
    level = data[pos + 6]
    p = pos + 10 + (level == 5)  # the client id's length (after a v5 Property Length 0)
    if level not in (4, 5) or end - p < 2 or (level == 5 and data[pos + 10]):
        return None
    client_id = data[p + 2 : end]
    size = (data[p] << 8) | data[p + 1]
    if p + 2 + size != end or not client_id.isascii() or 0 in client_id:
        return None
    c: Any = object.__new__(_ConnectBuilder)
    c.protocol_version = _V5 if level == 5 else _V311
    c.client_id = client_id.decode("ascii")
    c.clean_start = data[pos + 7] == 2
    c.keep_alive = (data[pos + 8] << 8) | data[pos + 9]
    c.username = c.password = c.will = None
    c.properties = EMPTY_PROPERTIES
    c.__class__ = Connect
    return cast(Connect, c)


def decode_connect(flags: int, r: Reader) -> Connect:
    if flags:
        raise malformed(f"CONNECT with reserved flags 0x{flags:X} [MQTT-2.1.3-1]")
    name = r.binary("the Protocol Name")
    level = r.u8("the Protocol Level")
    if name == b"MQTT" and level in (4, 5):
        version = ProtocolVersion(level)
    elif name == b"MQIsdp" and level == 3:
        version = ProtocolVersion.MQTT_3_1
    elif name in (b"MQTT", b"MQIsdp"):
        raise MQTTProtocolError(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"unsupported protocol level {level} [MQTT-3.1.2-2]",
            answer=Answer.CONNACK,
            version=_V5 if level > 5 else ProtocolVersion.MQTT_3_1_1,
        )
    else:
        raise MQTTProtocolError(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"unknown protocol name {name!r} [MQTT-3.1.2-1]",
            answer=Answer.CLOSE,
        )
    try:
        return _decode_rest(r, version)
    except MQTTProtocolError as exc:
        exc.answer = Answer.CONNACK
        exc.version = version
        raise


def _decode_rest(r: Reader, version: ProtocolVersion) -> Connect:
    v5 = version is _V5
    cflags = r.u8("the Connect Flags")
    if cflags & 0x01:
        raise malformed("CONNECT reserved flag is set [MQTT-3.1.2-3]")
    will_flag = bool(cflags & 0x04)
    will_qos = (cflags >> 3) & 0x03
    will_retain = bool(cflags & 0x20)
    if not will_flag and (will_qos or will_retain):
        raise malformed("Will QoS/Retain set without the Will Flag [MQTT-3.1.2-11] [MQTT-3.1.2-13]")
    if will_qos == 3:
        raise malformed("Will QoS 3 [MQTT-3.1.2-12]")
    has_password = bool(cflags & 0x40)
    has_username = bool(cflags & 0x80)
    if not v5 and has_password and not has_username:
        raise malformed("3.1.1 password without user name [MQTT-3.1.2-22]")
    keep_alive = r.u16("the Keep Alive")
    props = decode_properties(r, Context.CONNECT) if v5 else EMPTY_PROPERTIES
    client_id = r.utf8("the Client Identifier")
    will = None
    if will_flag:
        will_props = decode_properties(r, Context.WILL) if v5 else EMPTY_PROPERTIES
        will_topic = r.utf8_bytes("the Will Topic")
        will_payload = r.binary("the Will Payload")
        will = Will(will_topic, will_payload, will_qos, will_retain, will_props)
    username = r.utf8("the User Name") if has_username else None
    password = r.binary("the Password") if has_password else None
    return Connect(
        version, client_id, bool(cflags & 0x02), keep_alive, username, password, will, props
    )
