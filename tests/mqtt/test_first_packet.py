"""The first packet must be CONNECT, decided from its first byte [MQTT-3.1.0-1]."""

from __future__ import annotations

import pytest

from broker.mqtt.connection import Connection, Role
from broker.mqtt.errors import Answer, MQTTProtocolError
from broker.mqtt.reason_codes import ReasonCode


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # announces a 69-byte body it never sends
        bytes([0x30, 0x7F]),  # a PUBLISH header alone
        bytes([0xC0, 0x00]),  # PINGREQ
    ],
)
def test_mqtt_3_1_0_1_non_connect_first_packet_is_refused_at_once(data: bytes) -> None:
    server = Connection(Role.SERVER)
    with pytest.raises(MQTTProtocolError) as info:
        server.receive_data(data)
    assert info.value.reason_code is ReasonCode.PROTOCOL_ERROR
    assert info.value.answer is Answer.CLOSE


def test_a_partial_connect_still_waits_for_more() -> None:
    server = Connection(Role.SERVER)
    assert server.receive_data(bytes([0x10, 0x20, 0x00])) == []
