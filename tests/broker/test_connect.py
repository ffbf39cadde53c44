"""CONNECT, CONNACK and protocol versions, through real sockets."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.mqtt.decoder import Decoder
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Disconnect
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import V5, V31, V311, Paho, Protocol
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("pub_version", [V5, V311, V31])
@pytest.mark.parametrize("sub_version", [V5, V311, V31])
def test_messages_flow_between_protocol_versions(
    broker: BrokerThread, pub_version: Protocol, sub_version: Protocol
) -> None:
    sub = Paho(broker.port, "sub", protocol=sub_version)
    pub = Paho(broker.port, "pub", protocol=pub_version)
    try:
        sub.connect()
        sub.subscribe("v/#", 1)
        pub.connect()
        pub.publish("v/x", b"hello", 1)
        msg = sub.get()
        assert (msg.topic, msg.payload, msg.qos) == ("v/x", b"hello", 1)
    finally:
        pub.disconnect()
        sub.disconnect()


def test_connack_properties_mqtt_3_2_2(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        connack = c.connect("props", properties=Properties(request_response_information=1))
        p = connack.properties
        assert connack.reason_code is ReasonCode.SUCCESS
        assert not connack.session_present
        assert p.receive_maximum == 1024
        assert p.maximum_packet_size == 16_777_216
        assert p.topic_alias_maximum == 64
        assert p.retain_available == 1
        assert p.wildcard_subscription_available == 1
        assert p.subscription_identifier_available == 1
        assert p.shared_subscription_available == 1
        assert p.maximum_qos is None  # QoS 2 supported: the property must be absent
        assert p.response_information == "$response/props"


def test_server_keep_alive_when_a_maximum_is_configured_mqtt_3_2_2_21(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(max_keepalive=30)
    with RawClient(broker.port) as c:
        assert c.connect("ka", keep_alive=600).properties.server_keep_alive == 30
    with RawClient(broker.port) as c:
        assert c.connect("ka0", keep_alive=0).properties.server_keep_alive == 30
    with RawClient(broker.port) as c:
        assert c.connect("ka10", keep_alive=10).properties.server_keep_alive is None


def test_empty_client_id_is_assigned_mqtt_3_2_2_16(broker: BrokerThread) -> None:
    ids = set()
    for _ in range(2):
        with RawClient(broker.port) as c:
            connack = c.connect("")
            assert connack.reason_code is ReasonCode.SUCCESS
            assigned = connack.properties.assigned_client_identifier
            assert assigned
            ids.add(assigned)
    assert len(ids) == 2


def test_empty_client_id_with_persistent_session_refused_in_311_mqtt_3_1_3_8(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c:
        c.send_raw(c.encode(Connect(ProtocolVersion.MQTT_3_1_1, "", clean_start=False)))
        connack = c.raw_answer(ProtocolVersion.MQTT_3_1_1)
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.CLIENT_IDENTIFIER_NOT_VALID  # return code 2
        c.wait_closed()


def test_unsupported_protocol_level_gets_0x84_mqtt_3_1_2_2(broker: BrokerThread) -> None:
    # CONNECT, protocol name "MQTT", level 6.
    packet = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([6, 2, 0, 60, 0, 0])
    with RawClient(broker.port) as c:
        c.send_raw(packet)
        connack = c.raw_answer(ProtocolVersion.MQTT_5)
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
        c.wait_closed()


def test_unsupported_protocol_level_gets_return_code_1_for_311(broker: BrokerThread) -> None:
    # A 3.1.1-shaped CONNECT with level 2: the answer must be a 3.1.1 CONNACK, return code 1.
    packet = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([2, 2, 0, 60, 0, 0])
    with RawClient(broker.port) as c:
        c.send_raw(packet)
        connack = c.raw_answer(ProtocolVersion.MQTT_3_1_1)
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.UNSUPPORTED_PROTOCOL_VERSION  # return code 1
        c.wait_closed()


def test_second_connect_is_a_protocol_error_mqtt_3_1_0_2(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("twice")
        c.send_raw(c.encode(Connect(ProtocolVersion.MQTT_5, "twice")))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PROTOCOL_ERROR


def test_session_takeover_disconnects_the_old_connection_with_0x8e_mqtt_3_1_4_3(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as old, RawClient(broker.port) as new:
        old.connect("same")
        new.connect("same")
        disconnect = old.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.SESSION_TAKEN_OVER
        new.send(Disconnect())


def test_client_ids_with_spaces_and_non_ascii_are_accepted(broker: BrokerThread) -> None:
    for client_id in ("with space", "clé-酒", "a.b*c>d"):
        with RawClient(broker.port) as c:
            assert c.connect(client_id).reason_code is ReasonCode.SUCCESS


def test_too_long_client_id_is_refused_with_0x85(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_client_id_length=23)
    with RawClient(broker.port) as c:
        assert c.connect("x" * 23).reason_code is ReasonCode.SUCCESS
    with RawClient(broker.port) as c:
        connack = c.connect("x" * 24)
        assert connack.reason_code is ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        c.wait_closed()


def test_enhanced_authentication_is_refused_with_0x8c_mqtt_4_12_0_1(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        connack = c.connect("auth", properties=Properties(authentication_method="SCRAM-SHA-256"))
        assert connack.reason_code is ReasonCode.BAD_AUTHENTICATION_METHOD
        c.wait_closed()


def test_connect_timeout_closes_a_silent_socket(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(connect_timeout=0.3)
    with RawClient(broker.port) as c:
        c.wait_closed(timeout=10)


def test_pingreq_gets_pingresp_mqtt_3_12_4_1(broker: BrokerThread) -> None:
    from broker.mqtt.packets import Pingreq, Pingresp

    with RawClient(broker.port) as c:
        c.connect("ping")
        c.send(Pingreq())
        c.expect(Pingresp)


def test_keep_alive_timeout_closes_with_0x8d_mqtt_3_1_2_22(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("idle", keep_alive=1)
        disconnect = c.expect_disconnect(timeout=10)
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT


@pytest.mark.parametrize(
    "auth", [bytes([0xF0, 0]), bytes([0xF0, 2, 0x18, 0])], ids=["bare", "continue-no-props"]
)
@pytest.mark.parametrize("pipelined", [True, False], ids=["with-connect", "after-connack"])
def test_auth_without_an_authentication_method_is_0x82_mqtt_4_12_0_7(
    broker: BrokerThread, auth: bytes, pipelined: bool
) -> None:
    """A client whose CONNECT had no Authentication Method must not send AUTH: 0x82, whether
    the AUTH came in the CONNECT's write (it was dropped) or after the CONNACK."""
    with RawClient(broker.port) as c:
        connect = c.encode(Connect(ProtocolVersion.MQTT_5, "auth-less"))
        decoder = Decoder(ProtocolVersion.MQTT_5)
        got: list[object] = []
        if pipelined:
            c.send_raw(connect + auth)
        else:
            c.send_raw(connect)
        c.sock.settimeout(10)
        while not got:
            got.extend(decoder.feed(c.sock.recv(65536)))
        assert isinstance(got[0], Connack)
        if not pipelined:
            c.send_raw(auth)
        while len(got) < 2:
            data = c.sock.recv(65536)
            assert data, "closed without DISCONNECT"
            got.extend(decoder.feed(data))
        assert isinstance(got[1], Disconnect)
        assert got[1].reason_code is ReasonCode.PROTOCOL_ERROR
