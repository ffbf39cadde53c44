"""The connection machine, driven by its own client role over bytes (h11's pair style).

Test names carry the MQTT normative statement ids they check.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.mqtt.codec import EncodedPublish, encode
from broker.mqtt.connection import Connection, ConnectionState, DuplicatePublish, Event, Role
from broker.mqtt.encoder import plain_qos0, plain_qos0_prefix
from broker.mqtt.errors import (
    Answer,
    LocalProtocolError,
    MQTTProtocolError,
    PacketTooLargeError,
)
from broker.mqtt.packet_types import ProtocolVersion
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
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode as RC
from broker.mqtt.session import Inflight, SessionState, Stage, pubcomp_for

V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1
V31 = ProtocolVersion.MQTT_3_1


def pair(
    version: ProtocolVersion = V5,
    connect: Properties | None = None,
    connack: Properties | None = None,
    session: SessionState | None = None,
    keep_alive: int = 0,
) -> tuple[Connection, Connection]:
    server = Connection(Role.SERVER, session=session)
    client = Connection(Role.CLIENT)
    hello = Connect(version, "c", True, keep_alive, properties=connect or Properties())
    assert server.receive_data(client.send(hello)) == [hello]
    connecting = server.state
    assert connecting is ConnectionState.CONNECTING
    ack = Connack(properties=connack or Properties())
    assert client.receive_data(server.send(ack)) == [ack]
    assert server.state is client.state is ConnectionState.CONNECTED
    return server, client


def deliver(sender: Connection, receiver: Connection, packet: Packet) -> list[Event]:
    return receiver.receive_data(sender.send(packet))


def refused(receiver: Connection, data: bytes) -> MQTTProtocolError:
    with pytest.raises(MQTTProtocolError) as info:
        receiver.receive_data(data)
    assert receiver.closed
    return info.value


# ---- CONNECT ---------------------------------------------------------------------


def test_mqtt_3_1_0_1_first_packet_must_be_connect() -> None:
    server = Connection()
    error = refused(server, encode(Pingreq(), V311))
    assert error.reason_code is RC.PROTOCOL_ERROR
    assert error.answer is Answer.CLOSE


def test_mqtt_3_1_0_2_second_connect_is_a_protocol_error() -> None:
    server, _ = pair()
    error = refused(server, encode(Connect(V5, "again"), V5))
    assert error.reason_code is RC.PROTOCOL_ERROR
    assert error.answer is Answer.DISCONNECT
    assert error.version is V5


@pytest.mark.parametrize("level", [1, 2, 3, 6, 255])
def test_mqtt_3_1_2_2_unsupported_protocol_level_answers_connack(level: int) -> None:
    raw = bytes([0x10, 10, 0, 4]) + b"MQTT" + bytes([level, 2, 0, 60, 0, 0])
    error = refused(Connection(), raw)
    assert error.reason_code is RC.UNSUPPORTED_PROTOCOL_VERSION
    assert error.answer is Answer.CONNACK
    assert error.version is (V5 if level > 5 else V311)


def test_mqtt_3_1_2_1_unknown_protocol_name_closes() -> None:
    raw = bytes([0x10, 10, 0, 4]) + b"MQTX" + bytes([4, 2, 0, 60, 0, 0])
    error = refused(Connection(), raw)
    assert error.answer is Answer.CLOSE


def test_mqtt_3_1_connect_of_version_3_1_is_accepted() -> None:
    server, client = pair(V31)
    assert server.version is V31
    assert deliver(client, server, Publish(b"t", b"x")) == [Publish(b"t", b"x")]


def test_mqtt_3_1_3_8_empty_client_id_without_clean_session_is_refused() -> None:
    server = Connection()
    error = refused(server, encode(Connect(V311, "", False), V311))
    assert error.reason_code is RC.CLIENT_IDENTIFIER_NOT_VALID
    assert error.answer is Answer.CONNACK


def test_mqtt_3_1_empty_client_id_is_refused() -> None:
    error = refused(Connection(), encode(Connect(V31, "", True), V31))
    assert error.reason_code is RC.CLIENT_IDENTIFIER_NOT_VALID


def test_empty_client_id_with_clean_start_is_accepted() -> None:
    for version in (V311, V5):
        server = Connection()
        assert server.receive_data(encode(Connect(version, "", True), version))


@pytest.mark.parametrize("topic", ["resp/+", "resp/#", "#"])
def test_mqtt_3_3_2_14_response_topic_with_a_wildcard_is_a_protocol_error(topic: str) -> None:
    server, _client = pair()
    publish = Publish(b"req/t", b"x", properties=Properties(response_topic=topic))
    error = refused(server, encode(publish, V5))
    assert error.reason_code is RC.PROTOCOL_ERROR
    assert error.answer is Answer.DISCONNECT
    # A will's Response Topic too: refused with a CONNACK.
    will = Will(b"w", b"x", properties=Properties(response_topic=topic))
    error = refused(Connection(), encode(Connect(V5, "c", will=will), V5))
    assert error.reason_code is RC.PROTOCOL_ERROR
    assert error.answer is Answer.CONNACK


def test_response_topic_without_wildcards_is_accepted() -> None:
    server, client = pair()
    publish = Publish(b"req/t", b"x", properties=Properties(response_topic="resp/a b"))
    assert deliver(client, server, publish) == [publish]
    will = Will(b"w", b"x", properties=Properties(response_topic="resp/w"))
    assert Connection().receive_data(encode(Connect(V5, "c", will=will), V5))


def test_malformed_connect_answers_connack_with_its_version() -> None:
    raw = bytearray(encode(Connect(V5, "c"), V5))
    raw[9] |= 0x01  # reserved Connect Flag [MQTT-3.1.2-3]
    error = refused(Connection(), bytes(raw))
    assert error.reason_code is RC.MALFORMED_PACKET
    assert error.answer is Answer.CONNACK
    assert error.version is V5


def test_mqtt_3_1_4_packets_after_connect_wait_for_connack() -> None:
    server = Connection()
    client = Connection(Role.CLIENT)
    wire = client.send(Connect(V5, "c"))
    pipelined = encode(Publish(b"t", b"early"), V5) + encode(Auth(), V5)
    events = server.receive_data(wire + pipelined)
    assert events == [Connect(V5, "c")]
    # The PUBLISH stays buffered: only AUTH may be processed before CONNACK.
    assert server.receive_data(b"") == []
    assert server.buffered == len(pipelined)
    server.send(Connack())
    assert server.receive_data(b"") == [Publish(b"t", b"early"), Auth()]
    assert server.buffered == 0


def test_auth_exchange_before_connack() -> None:
    server = Connection()
    client = Connection(Role.CLIENT)
    method = Properties(authentication_method="SCRAM-SHA-256")
    server.receive_data(client.send(Connect(V5, "c", properties=method)))
    challenge = Auth(RC.CONTINUE_AUTHENTICATION, method)
    assert deliver(server, client, challenge) == [challenge]
    assert deliver(client, server, challenge) == [challenge]
    assert deliver(server, client, Connack()) == [Connack()]


def test_error_during_connecting_answers_connack() -> None:
    server = Connection()
    server.receive_data(encode(Connect(V5, "c"), V5))
    error = refused(server, encode(Auth(RC.SUCCESS), V5)[:1] + b"\x05\x00\x00\x00\x00\x00")
    assert error.answer is Answer.CONNACK


def test_refusing_connack_closes_both_sides() -> None:
    server = Connection()
    client = Connection(Role.CLIENT)
    server.receive_data(client.send(Connect(V311, "c")))
    refusal = Connack(False, RC.NOT_AUTHORIZED)
    assert client.receive_data(server.send(refusal)) == [refusal]
    assert server.closed
    assert client.closed
    assert client.receive_data(b"\xff\xff") == []


def test_connack_limits_are_ours_and_connect_limits_are_the_peers() -> None:
    server, client = pair(
        connect=Properties(receive_maximum=3, maximum_packet_size=100, topic_alias_maximum=4),
        connack=Properties(
            receive_maximum=5,
            maximum_packet_size=200,
            topic_alias_maximum=6,
            maximum_qos=1,
            retain_available=0,
            server_keep_alive=30,
        ),
        keep_alive=60,
    )
    assert (server.peer_receive_maximum, server.peer_maximum_packet_size) == (3, 100)
    assert server.peer_topic_alias_maximum == 4
    assert (server.receive_maximum, server.max_packet_size, server.topic_alias_maximum) == (
        5,
        200,
        6,
    )
    assert (server.maximum_qos, server.retain_available, server.keep_alive) == (1, False, 30)
    assert (client.peer_receive_maximum, client.peer_maximum_packet_size) == (5, 200)
    assert (client.receive_maximum, client.max_packet_size) == (3, 100)
    assert (client.peer_topic_alias_maximum, client.keep_alive) == (6, 30)


def test_takes_plain_qos0_when_connected_without_topic_aliases() -> None:
    waiting = Connection()
    assert not waiting.takes_plain_qos0()  # no CONNECT yet
    server, _ = pair()
    assert server.takes_plain_qos0()
    wire = server.send_publish(EncodedPublish(Publish(b"t", b"p"), V5), qos=0, retain=False)
    assert wire == plain_qos0(plain_qos0_prefix(b"t", V5), b"p")
    aliased, _ = pair(connect=Properties(topic_alias_maximum=2))
    assert not aliased.takes_plain_qos0()  # its copies may carry an alias
    server.send(Disconnect())
    assert not server.takes_plain_qos0()


def test_keepalive_deadline_is_one_and_a_half_keep_alive() -> None:
    server, _ = pair(keep_alive=10)
    assert server.keepalive_deadline(100.0) == 115.0
    idle, _ = pair(keep_alive=0)
    assert idle.keepalive_deadline(100.0) is None


# ---- PUBLISH flows -----------------------------------------------------------------


def test_qos1_inbound_flow_and_receive_maximum_mqtt_3_3_4_7() -> None:
    server, client = pair(connack=Properties(receive_maximum=2))
    for pid in (1, 2):
        deliver(client, server, Publish(b"t", b"x", 1, packet_id=pid))
    assert server.inbound_inflight_count == 2
    # A retransmission of an unacknowledged id is not a new message.
    server.receive_data(encode(Publish(b"t", b"x", 1, dup=True, packet_id=2), V5))
    with pytest.raises(LocalProtocolError):
        client.send(Publish(b"t", b"x", 1, packet_id=3))  # the client role respects it too
    server.send(Puback(1))
    assert server.inbound_inflight_count == 1
    assert server.receive_data(encode(Publish(b"t", b"y", 1, packet_id=3), V5))
    error = refused(server, encode(Publish(b"t", b"z", 2, packet_id=4), V5))
    assert error.reason_code is RC.RECEIVE_MAXIMUM_EXCEEDED
    assert error.answer is Answer.DISCONNECT


def test_inbound_qos1_ids_are_each_connections_own() -> None:
    """A server connection's QoS 1 ids (and its pending SUBSCRIBE ids, which a server never
    has) start as one shared empty set that is never added to: the first id makes its own."""
    server, client = pair()
    other, other_client = pair()
    fresh, _ = pair()
    deliver(client, server, Publish(b"t", b"x", 1, packet_id=1))
    assert server.inbound_inflight_count == 1
    assert other.inbound_inflight_count == fresh.inbound_inflight_count == 0
    deliver(other_client, other, Publish(b"t", b"x", 1, packet_id=2))
    client.receive_data(server.send_puback(1))
    assert (server.inbound_inflight_count, other.inbound_inflight_count) == (0, 1)
    assert fresh.inbound_inflight_count == 0
    assert deliver(client, server, Publish(b"t", b"y", 1, packet_id=1))  # new again
    with pytest.raises(LocalProtocolError):
        server.send(Subscribe(1, (Subscription(b"t", 0),)))  # nothing pending to record
    assert fresh.next_packet_id() == 1


@pytest.mark.parametrize("version", [V5, V311, V31])
def test_send_puback_is_send_of_a_success_puback(version: ProtocolVersion) -> None:
    server, client = pair(version)
    twin, twin_client = pair(version)
    deliver(client, server, Publish(b"t", b"x", 1, packet_id=9))
    deliver(twin_client, twin, Publish(b"t", b"x", 1, packet_id=9))
    assert server.inbound_inflight_count == 1
    assert server.send_puback(9) == twin.send(Puback(9))
    assert server.inbound_inflight_count == twin.inbound_inflight_count == 0
    assert client.receive_data(server.send_puback(9)) == [Puback(9)]


def test_send_puback_refusals() -> None:
    server, client = pair()
    with pytest.raises(LocalProtocolError, match="packet identifier"):
        server.send_puback(0)
    with pytest.raises(LocalProtocolError, match="cannot send PUBACK"):
        Connection(Role.SERVER).send_puback(1)  # nothing connected yet
    assert client.state is ConnectionState.CONNECTED


def test_receive_maximum_at_limit_and_limit_plus_one() -> None:
    limit = 5
    server, _ = pair(connack=Properties(receive_maximum=limit))
    for pid in range(1, limit + 1):
        server.receive_data(encode(Publish(b"t", b"", 2, packet_id=pid), V5))
    assert server.inbound_inflight_count == limit
    error = refused(server, encode(Publish(b"t", b"", 1, packet_id=limit + 1), V5))
    assert error.reason_code is RC.RECEIVE_MAXIMUM_EXCEEDED


def test_qos2_inbound_flow_with_duplicate_publish() -> None:
    server, client = pair()
    first = Publish(b"t", b"x", 2, packet_id=7)
    assert deliver(client, server, first) == [first]
    assert server.session.inbound_qos2 == {7}
    again = Publish(b"t", b"x", 2, dup=True, packet_id=7)
    assert server.receive_data(encode(again, V5)) == [DuplicatePublish(again)]
    assert server.inbound_inflight_count == 1
    deliver(server, client, Pubrec(7))
    assert client.session.outbound[7].stage is Stage.AWAIT_PUBCOMP
    assert deliver(client, server, Pubrel(7)) == [Pubrel(7)]
    assert pubcomp_for(Pubrel(7), 7 in server.session.inbound_qos2) == Pubcomp(7)
    deliver(server, client, Pubcomp(7))
    assert server.session.inbound_qos2 == set()
    assert client.session.outbound == {}
    assert pubcomp_for(Pubrel(8), False) == Pubcomp(8, RC.PACKET_IDENTIFIER_NOT_FOUND)


def test_sessions_share_no_inbound_qos2_id() -> None:
    """The inbound QoS 2 ids start as one shared empty set, never added to: a session's
    first id gets it a set of its own, which no other session sees."""
    quiet, busy = SessionState(), SessionState()
    assert quiet.inbound_qos2 is busy.inbound_qos2  # shared until the first id
    server, client = pair()
    server.session = busy
    deliver(client, server, Publish(b"t", b"x", 2, packet_id=3))
    assert busy.inbound_qos2 == {3}
    assert quiet.inbound_qos2 == set()
    assert SessionState().inbound_qos2 == set()
    restored = SessionState()
    restored.restore_inbound_qos2(4)
    assert restored.inbound_qos2 == {4}
    assert quiet.inbound_qos2 == set()


def test_qos2_pubrec_error_releases_the_id() -> None:
    server, client = pair()
    deliver(client, server, Publish(b"t", b"x", 2, packet_id=9))
    deliver(server, client, Pubrec(9, RC.QUOTA_EXCEEDED))
    assert server.session.inbound_qos2 == set()
    assert client.session.outbound == {}


def test_outbound_qos1_window_mqtt_3_3_4_9() -> None:
    server, client = pair(connect=Properties(receive_maximum=2))
    for _ in range(2):
        pid = server.next_packet_id()
        deliver(server, client, Publish(b"t", b"x", 1, packet_id=pid))
    assert server.inflight_count == 2
    assert not server.can_send_qos_message()
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"x", 1, packet_id=server.next_packet_id()))
    deliver(client, server, Puback(1))
    assert server.can_send_qos_message()
    # Unknown and repeated acknowledgements change nothing.
    deliver(client, server, Puback(1))
    deliver(client, server, Pubcomp(2))
    deliver(client, server, Pubrec(2))
    assert server.inflight_count == 1


def test_outbound_qos2_flow() -> None:
    server, client = pair()
    pid = server.next_packet_id()
    deliver(server, client, Publish(b"t", b"x", 2, packet_id=pid))
    with pytest.raises(LocalProtocolError):
        server.send(Pubrel(pid))  # before PUBREC
    deliver(client, server, Pubrec(pid))
    assert server.session.outbound[pid].stage is Stage.AWAIT_PUBCOMP
    deliver(server, client, Pubrel(pid))
    deliver(client, server, Pubcomp(pid))
    assert server.inflight_count == 0
    deliver(server, client, Pubrel(99, RC.PACKET_IDENTIFIER_NOT_FOUND))  # unknown id: allowed


def test_packet_id_allocation_never_zero_never_in_use() -> None:
    server, client = pair()
    server._next_id = 0xFFFF
    first = server.next_packet_id()
    assert first == 0xFFFF
    deliver(server, client, Publish(b"t", b"", 1, packet_id=first))
    assert server.next_packet_id() == 1
    deliver(server, client, Publish(b"t", b"", 1, packet_id=2))
    server._next_id = 2
    assert server.next_packet_id() == 3
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", 1, packet_id=2))  # in use, not a DUP resend
    server.send(Publish(b"t", b"", 1, dup=True, packet_id=2))  # resend is fine
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", 1, packet_id=0))


def test_packet_ids_exhausted() -> None:
    server, _ = pair()
    for pid in range(1, 0x10000):
        server.session.restore_outbound(pid, Publish(b"t"), 1, Stage.AWAIT_PUBACK)
    with pytest.raises(LocalProtocolError):
        server.next_packet_id()


def test_client_subscribe_ids_are_tracked() -> None:
    server, client = pair()
    sub = Subscribe(1, (Subscription(b"a/#", 1),))
    assert deliver(client, server, sub) == [sub]
    assert client.next_packet_id() == 2
    with pytest.raises(LocalProtocolError):
        client.send(Unsubscribe(1, (b"a/#",)))
    with pytest.raises(LocalProtocolError):
        client.send(Publish(b"t", b"", 1, packet_id=1))
    deliver(server, client, Suback(1, (RC.GRANTED_QOS_1,)))
    deliver(client, server, Unsubscribe(1, (b"a/#",)))
    deliver(server, client, Unsuback(1, (RC.SUCCESS,)))
    assert client.next_packet_id() == 3
    client.send(Publish(b"t", b"", 1, packet_id=1))
    with pytest.raises(LocalProtocolError):
        client.send(Subscribe(1, (Subscription(b"x"),)))


def test_mqtt_3_8_3_4_no_local_on_shared_subscription_is_a_protocol_error() -> None:
    server, client = pair()
    bad = Subscribe(1, (Subscription(b"$share/g/t", 0, no_local=True),))
    error = refused(server, client.send(bad))
    assert error.reason_code is RC.PROTOCOL_ERROR


def test_ping_and_disconnect() -> None:
    server, client = pair()
    assert deliver(client, server, Pingreq()) == [Pingreq()]
    assert deliver(server, client, Pingresp()) == [Pingresp()]
    # Data after DISCONNECT in the same chunk is ignored.
    data = client.send(Disconnect()) + b"\xff\xff\xff"
    assert server.receive_data(data) == [Disconnect()]
    assert server.closed
    assert client.closed
    with pytest.raises(LocalProtocolError):
        server.send(Pingresp())


def test_server_disconnect_closes_v5_and_is_refused_in_3_1_1() -> None:
    server, client = pair()
    assert deliver(server, client, Disconnect(RC.SESSION_TAKEN_OVER)) == [
        Disconnect(RC.SESSION_TAKEN_OVER)
    ]
    old, _ = pair(V311)
    with pytest.raises(LocalProtocolError):
        old.send(Disconnect())


def test_session_expiry_from_zero_to_nonzero_on_disconnect_is_a_protocol_error() -> None:
    server, _ = pair(connect=Properties(session_expiry_interval=0))
    error = refused(
        server, encode(Disconnect(RC.SUCCESS, Properties(session_expiry_interval=5)), V5)
    )
    assert error.reason_code is RC.PROTOCOL_ERROR
    keeps, _ = pair(connect=Properties(session_expiry_interval=10))
    keeps.receive_data(encode(Disconnect(RC.SUCCESS, Properties(session_expiry_interval=5)), V5))
    assert keeps.closed


def test_mqtt_3_14_2_2_server_must_not_send_session_expiry_on_disconnect() -> None:
    _, client = pair()
    error = refused(
        client, encode(Disconnect(RC.SUCCESS, Properties(session_expiry_interval=5)), V5)
    )
    assert error.reason_code is RC.PROTOCOL_ERROR


def test_packets_the_peer_may_not_send() -> None:
    server, _ = pair()
    assert refused(server, encode(Suback(1, (RC.SUCCESS,)), V5)).reason_code is RC.PROTOCOL_ERROR
    _, client = pair()
    assert refused(client, encode(Pingreq(), V5)).reason_code is RC.PROTOCOL_ERROR
    lonely = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        lonely.send(Pingreq())
    with pytest.raises(LocalProtocolError):
        lonely.next_packet_id() and lonely.send(Publish(b"t"))


def test_error_keeps_events_decoded_before_it() -> None:
    server, _ = pair()
    good = encode(Publish(b"t", b"1"), V5)
    error = refused(server, good + b"\x00\x00")
    assert error.packets == (Publish(b"t", b"1"),)
    assert error.reason_code is RC.MALFORMED_PACKET
    # An error raised by the machine (not the decoder) keeps the earlier events too.
    server2, _ = pair()
    error2 = refused(server2, good + encode(Connect(V5, "x"), V5))
    assert error2.packets == (Publish(b"t", b"1"),)


def test_puback_before_a_decoder_error_still_completes_its_message() -> None:
    server, client = pair()
    message = EncodedPublish(Publish(b"t", b"p"), V5)
    first = server.next_packet_id()
    server.send_publish(message, qos=1, retain=False, packet_id=first)
    second = server.next_packet_id()
    server.send_publish(message, qos=1, retain=False, packet_id=second)
    assert server.receive_data(client.send(Puback(first))) == [Puback(first)]
    assert set(server.session.outbound) == {second}
    error = refused(server, client.send(Puback(second)) + b"\x00\x00")
    assert error.packets == (Puback(second),)
    assert not server.session.outbound


def test_decoder_error_after_packet_the_machine_refuses() -> None:
    server, _ = pair()
    error = refused(server, encode(Connect(V5, "x"), V5) + b"\x00\x00")
    assert error.reason_code is RC.PROTOCOL_ERROR  # the CONNECT, not the garbage


# ---- topic aliases -------------------------------------------------------------------


def test_inbound_topic_alias_mqtt_3_3_2_9() -> None:
    server, client = pair(connack=Properties(topic_alias_maximum=2))
    first = Publish(b"a/b", b"1", properties=Properties(topic_alias=2))
    assert deliver(client, server, first) == [Publish(b"a/b", b"1")]
    short = Publish(b"", b"2", properties=Properties(topic_alias=2))
    assert deliver(client, server, short) == [Publish(b"a/b", b"2")]
    assert server._inbound_aliases == {2: b"a/b"}  # the peer's aliases, as set
    error = refused(server, encode(Publish(b"x", b"", properties=Properties(topic_alias=3)), V5))
    assert error.reason_code is RC.TOPIC_ALIAS_INVALID


def test_mqtt_3_3_2_8_topic_alias_zero_is_invalid() -> None:
    server, _ = pair(connack=Properties(topic_alias_maximum=2))
    error = refused(server, encode(Publish(b"x", b"", properties=Properties(topic_alias=0)), V5))
    assert error.reason_code is RC.TOPIC_ALIAS_INVALID


def test_unknown_alias_with_empty_topic_is_a_protocol_error() -> None:
    server, _ = pair(connack=Properties(topic_alias_maximum=2))
    error = refused(server, encode(Publish(b"", b"", properties=Properties(topic_alias=1)), V5))
    assert error.reason_code is RC.PROTOCOL_ERROR


@pytest.mark.parametrize("version", [V311, V5])
def test_empty_topic_without_alias_is_a_protocol_error(version: ProtocolVersion) -> None:
    server, _ = pair(version)
    error = refused(server, encode(Publish(b"", b"x"), version))
    assert error.reason_code is RC.PROTOCOL_ERROR
    server5, _ = pair()
    error = refused(
        server5, encode(Publish(b"", b"x", properties=Properties(content_type="a")), V5)
    )
    assert error.reason_code is RC.PROTOCOL_ERROR


def test_mqtt_3_3_4_6_client_publish_with_subscription_identifier() -> None:
    server, _ = pair()
    bad = Publish(b"t", b"", properties=Properties(subscription_identifiers=(1,)))
    assert refused(server, encode(bad, V5)).reason_code is RC.PROTOCOL_ERROR


def test_client_accepts_subscription_identifiers_from_the_server() -> None:
    server, client = pair()
    msg = Publish(b"t", b"", properties=Properties(subscription_identifiers=(1, 2)))
    assert deliver(server, client, msg) == [msg]


def test_maximum_qos_and_retain_available_are_enforced() -> None:
    server, _ = pair(connack=Properties(maximum_qos=0, retain_available=0))
    assert (
        refused(server, encode(Publish(b"t", b"", 1, packet_id=1), V5)).reason_code
        is RC.QOS_NOT_SUPPORTED
    )
    server2, _ = pair(connack=Properties(retain_available=0))
    error = refused(server2, encode(Publish(b"t", b"", retain=True), V5))
    assert error.reason_code is RC.RETAIN_NOT_SUPPORTED


def test_outbound_alias_assignment_and_lru_mqtt_3_1_2_26() -> None:
    server, client = pair(connect=Properties(topic_alias_maximum=2))
    assert server.outbound_alias(b"a") == (1, True)
    assert server.outbound_alias(b"b") == (2, True)
    assert server.outbound_alias(b"a") == (1, False)
    assert server.outbound_alias(b"c") == (2, True)  # "b" was least recently used
    assert server.outbound_alias(b"b") == (1, True)
    with pytest.raises(LocalProtocolError):
        server.send(Publish(b"t", b"", properties=Properties(topic_alias=3)))
    ok = Publish(b"t", b"", properties=Properties(topic_alias=2))
    assert deliver(server, client, ok) == [Publish(b"t", b"")]
    none, _ = pair(connect=Properties())
    assert none.outbound_alias(b"a") is None


def test_send_publish_uses_aliases_within_the_peer_maximum() -> None:
    server, client = pair(connect=Properties(topic_alias_maximum=1))
    message = EncodedPublish(Publish(b"long/topic", b"p"), V5)
    first = server.send_publish(message, qos=0, retain=False)
    second = server.send_publish(message, qos=0, retain=False)
    assert len(second) < len(first)
    assert client.receive_data(first + second) == [Publish(b"long/topic", b"p")] * 2
    plain = server.send_publish(message, qos=0, retain=False, use_alias=False)
    assert plain == encode(Publish(b"long/topic", b"p"), V5)


def test_send_publish_common_copies_equal_the_general_encoding() -> None:
    message = EncodedPublish(Publish(b"a/b", b"p", properties=Properties(content_type="c")), V5)
    server, client = pair()
    for qos, retain in ((0, False), (0, True), (1, False), (2, True)):
        pid = server.next_packet_id() if qos else None
        data = server.send_publish(message, qos=qos, retain=retain, packet_id=pid)
        assert data == message.for_recipient(pid, False, qos, retain)
        assert client.receive_data(data) == [
            replace(message.publish, qos=qos, retain=retain, packet_id=pid)
        ]
        if pid is not None:
            assert server.session.outbound[pid].message == replace(
                message.publish, qos=qos, retain=retain, packet_id=pid
            )
    assert server.send_publish(message, qos=0, retain=False) is message.qos0(False)  # shared
    # Refused as before: another version, too large (nothing recorded), not connected.
    with pytest.raises(LocalProtocolError):
        server.send_publish(EncodedPublish(Publish(b"t"), V311), qos=0, retain=False)
    small, _ = pair(connect=Properties(maximum_packet_size=8))
    with pytest.raises(PacketTooLargeError):
        small.send_publish(message, qos=1, retain=False, packet_id=1)
    assert small.inflight_count == 0
    server.send(Disconnect())
    with pytest.raises(LocalProtocolError):
        server.send_publish(message, qos=0, retain=False)
    v311, old_client = pair(V311)
    plain = EncodedPublish(Publish(b"t", b"x"), V311)
    got = old_client.receive_data(v311.send_publish(plain, qos=1, retain=True, packet_id=3))
    assert got == [Publish(b"t", b"x", 1, True, packet_id=3)]


def test_send_publish_qos_and_window() -> None:
    server, client = pair(connect=Properties(receive_maximum=1))
    message = EncodedPublish(
        Publish(b"t", b"p", properties=Properties(user_properties=(("k", "v"),))), V5
    )
    pid = server.next_packet_id()
    data = server.send_publish(
        message, qos=1, retain=True, packet_id=pid, subscription_identifiers=(4,)
    )
    expected = Publish(
        b"t",
        b"p",
        1,
        True,
        False,
        pid,
        Properties(subscription_identifiers=(4,), user_properties=(("k", "v"),)),
    )
    assert client.receive_data(data) == [expected]
    assert server.session.outbound[pid].message == expected
    with pytest.raises(LocalProtocolError):
        server.send_publish(message, qos=1, retain=False, packet_id=server.next_packet_id())
    with pytest.raises(LocalProtocolError):
        server.send_publish(message, qos=1, retain=False)  # no packet id
    resend = server.send_publish(
        message, qos=1, retain=True, packet_id=pid, dup=True, subscription_identifiers=(4,)
    )
    assert client.receive_data(resend)[0] == Publish(
        b"t", b"p", 1, True, True, pid, expected.properties
    )
    old = EncodedPublish(Publish(b"t"), V311)
    with pytest.raises(LocalProtocolError):
        server.send_publish(old, qos=0, retain=False)


def test_mqtt_3_1_2_25_too_large_publish_is_skipped_without_state_change() -> None:
    server, _client = pair(connect=Properties(maximum_packet_size=20, topic_alias_maximum=5))
    fits = Publish(b"t", b"x" * 14)  # 2 + 2 + 1 + 1 + 14 = 20 bytes
    assert len(encode(fits, V5)) == 20
    server.send(fits)
    too_big = Publish(b"t", b"x" * 15, 1, packet_id=server.next_packet_id())
    with pytest.raises(PacketTooLargeError) as info:
        server.send(too_big)
    assert (info.value.size, info.value.limit) == (23, 20)
    assert server.inflight_count == 0
    big = EncodedPublish(Publish(b"some/topic", b"x" * 30), V5)
    with pytest.raises(PacketTooLargeError):
        server.send_publish(big, qos=1, retain=False, packet_id=5)
    assert server.inflight_count == 0
    assert server.outbound_alias(b"some/topic") == (1, True)  # the alias was not committed


def test_diagnostics_are_dropped_to_fit_the_peer_maximum() -> None:
    server, client = pair(connect=Properties(maximum_packet_size=8))
    chatty = Puback(1, RC.QUOTA_EXCEEDED, Properties(reason_string="far too long to fit"))
    assert client.receive_data(server.send(chatty)) == [Puback(1, RC.QUOTA_EXCEEDED)]
    with pytest.raises(PacketTooLargeError):
        server.send(Disconnect(RC.SERVER_MOVED, Properties(server_reference="elsewhere.example")))


def test_pingresp_without_properties_too_large() -> None:
    server, _ = pair()
    server.peer_maximum_packet_size = 1
    with pytest.raises(PacketTooLargeError):
        server.send(Pingresp())


# ---- session state -----------------------------------------------------------------


def test_an_in_flight_entry_needs_its_message_or_how_to_build_it() -> None:
    with pytest.raises(ValueError, match="needs the message"):
        Inflight(1, None, 1, Stage.AWAIT_PUBACK)
    built: list[int] = []

    def build() -> Publish:
        built.append(1)
        return Publish(b"t", b"p", 2, packet_id=3)

    entry = Inflight(3, None, 2, Stage.AWAIT_PUBREC, build)
    later = entry.at_stage(Stage.AWAIT_PUBCOMP)
    assert repr(later) == "Inflight(3, qos=2, AWAIT_PUBCOMP)"
    assert later.message == entry.message == Publish(b"t", b"p", 2, packet_id=3)
    assert len(built) == 2  # each entry builds once, on first use
    assert later.message is later.message
    assert len(built) == 2


def test_session_restore_into_a_fresh_connection() -> None:
    session = SessionState()
    session.restore_outbound(5, Publish(b"t", b"a", 1, packet_id=5), 1, Stage.AWAIT_PUBACK)
    session.restore_outbound(6, Publish(b"t", b"b", 2, packet_id=6), 2, Stage.AWAIT_PUBCOMP)
    session.restore_outbound(7, Publish(b"t", b"c"), 2, Stage.AWAIT_PUBREC)
    session.restore_inbound_qos2(9)
    server, client = pair(session=session)
    assert server.session.pending_retransmissions() == [
        Publish(b"t", b"a", 1, dup=True, packet_id=5),
        Pubrel(6),
        Publish(b"t", b"c", 2, dup=True, packet_id=7),
    ]
    for packet in server.session.pending_retransmissions():
        client.receive_data(server.send(packet))
    assert server.next_packet_id() == 1
    dup = Publish(b"t", b"x", 2, dup=True, packet_id=9)
    assert server.receive_data(encode(dup, V5)) == [DuplicatePublish(dup)]
    client.receive_data(server.send(Pubrec(9)))
    server.receive_data(encode(Pubrel(9), V5))
    server.send(Pubcomp(9))
    assert server.session.inbound_qos2 == set()


@pytest.mark.parametrize(
    ("packet_id", "qos", "stage"),
    [
        (0, 1, Stage.AWAIT_PUBACK),
        (1, 1, Stage.AWAIT_PUBREC),
        (1, 0, Stage.AWAIT_PUBACK),
        (70000, 2, Stage.AWAIT_PUBREC),
    ],
)
def test_session_restore_validates(packet_id: int, qos: int, stage: Stage) -> None:
    with pytest.raises(ValueError, match=r"packet identifier|stage"):
        SessionState().restore_outbound(packet_id, Publish(b"t"), qos, stage)


def test_session_restore_inbound_validates() -> None:
    with pytest.raises(ValueError, match="packet identifier"):
        SessionState().restore_inbound_qos2(0)


def test_max_packet_size_settable_after_connect() -> None:
    server, _ = pair()
    server.max_packet_size = 10
    error = refused(server, encode(Publish(b"t", b"x" * 10), V5))
    assert error.reason_code is RC.PACKET_TOO_LARGE


def test_connect_too_large_before_version_closes() -> None:
    server = Connection(max_packet_size=10)
    error = refused(server, encode(Connect(V5, "a-long-client-id"), V5))
    assert error.reason_code is RC.PACKET_TOO_LARGE
    assert error.answer is Answer.CLOSE


def test_client_role_connack_limits_and_version() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.send_publish(EncodedPublish(Publish(b"t"), V5), qos=0, retain=False)
    client.send(Connect(V5, "c", properties=Properties(maximum_packet_size=50)))
    assert client.max_packet_size == 50
    error = refused(client, encode(Connack(properties=Properties(reason_string="r" * 60)), V5))
    assert error.reason_code is RC.PACKET_TOO_LARGE


def test_a_3_1_1_connack_declares_no_limits() -> None:
    server = Connection()
    server.receive_data(encode(Connect(V311, "c"), V311))
    server.send(Connack(properties=Properties(receive_maximum=1, topic_alias_maximum=3)))
    assert (server.receive_maximum, server.topic_alias_maximum) == (0xFFFF, 0)
    for pid in (1, 2):
        server.receive_data(encode(Publish(b"t", b"", 1, packet_id=pid), V311))
    assert server.inbound_inflight_count == 2


def test_garbage_after_disconnect_in_the_same_chunk_is_ignored() -> None:
    server, client = pair()
    assert server.receive_data(client.send(Disconnect()) + b"\xc1\x00") == [Disconnect()]
    assert server.closed


def test_restored_inflight_counts_against_a_smaller_receive_maximum() -> None:
    session = SessionState()
    for pid in (1, 2, 3):
        session.restore_outbound(pid, Publish(b"t", b"", 1, packet_id=pid), 1, Stage.AWAIT_PUBACK)
    server, client = pair(connect=Properties(receive_maximum=2), session=session)
    assert server.inflight_count == 3
    assert not server.can_send_qos_message()
    # The client's quota is re-initialised on the new connection [MQTT-3.3.4-9]: resend only
    # as many as it allows, the rest as acknowledgements come back.
    first, second, third = server.session.pending_retransmissions()
    for packet in (first, second):
        client.receive_data(server.send(packet))
    for pid in (1, 2):
        server.receive_data(client.send(Puback(pid)))
    assert server.inflight_count == 1
    assert client.receive_data(server.send(third)) == [third]
    assert server.can_send_qos_message()


def test_send_publish_records_the_remaining_lifetime() -> None:
    server, client = pair()
    message = EncodedPublish(
        Publish(b"t", b"p", properties=Properties(message_expiry_interval=60)), V5
    )
    pid = server.next_packet_id()
    data = server.send_publish(
        message, qos=1, retain=False, packet_id=pid, message_expiry_interval=15
    )
    [got] = client.receive_data(data)
    assert isinstance(got, Publish)
    assert got.properties.message_expiry_interval == 15
    assert server.session.outbound[pid].message == got
