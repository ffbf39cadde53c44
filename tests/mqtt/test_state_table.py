"""Every (role, state, packet type) pair, h2-style: feeding any valid packet of any type
to a connection in any state lands in an expected state, or raises MQTTProtocolError with
an expected reason code. The expectations below are written from the standard (who may
send what, §3.1.4 for the CONNECT stage), independently of the machine's own tables.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.mqtt.codec import encode
from broker.mqtt.connection import Connection, ConnectionState, Role
from broker.mqtt.errors import MQTTProtocolError
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Disconnect
from broker.mqtt.reason_codes import ReasonCode as RC

from .mqtt_strategies import packets_of

S = ConnectionState
P = PacketType
V5 = ProtocolVersion.MQTT_5
V311 = ProtocolVersion.MQTT_3_1_1

FROM_CLIENT = {
    P.CONNECT, P.PUBLISH, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP,
    P.SUBSCRIBE, P.UNSUBSCRIBE, P.PINGREQ, P.DISCONNECT, P.AUTH,
}  # fmt: skip
FROM_SERVER = {
    P.CONNACK, P.PUBLISH, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP,
    P.SUBACK, P.UNSUBACK, P.PINGRESP, P.DISCONNECT, P.AUTH,
}  # fmt: skip

#: Reason codes a valid-looking packet of a permitted type may still earn (its content).
CONTENT_ERRORS = {
    P.PUBLISH: {RC.TOPIC_ALIAS_INVALID, RC.PROTOCOL_ERROR},
    P.SUBSCRIBE: {RC.PROTOCOL_ERROR},  # No Local on a shared subscription
    P.DISCONNECT: {RC.PROTOCOL_ERROR},  # Session Expiry Interval rules
}


def _at(role: Role, state: ConnectionState, version: ProtocolVersion) -> Connection:
    conn = Connection(role)
    if state is S.AWAIT_CONNECT:
        return conn
    if role is Role.SERVER:
        conn.receive_data(encode(Connect(version, "c"), version))
        if state is not S.CONNECTING:
            conn.send(Connack())
    else:
        conn.send(Connect(version, "c"))
        if state is not S.CONNECTING:
            conn.receive_data(encode(Connack(), version))
    if state is S.CLOSED:
        conn.receive_data(encode(Disconnect(), version))
    assert _state(conn) is state
    return conn


def _state(conn: Connection) -> ConnectionState:
    return conn.state  # (a call, so that mypy does not carry a narrowed state across)


CASES = [
    (role, state, version) for role in Role for state in ConnectionState for version in (V311, V5)
]


@pytest.mark.parametrize(
    ("role", "state", "version"),
    CASES,
    ids=[f"{r.name}-{s.name}-{v.name}" for r, s, v in CASES],
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_state_packet_pair(
    role: Role, state: ConnectionState, version: ProtocolVersion, data: st.DataObject
) -> None:
    types = [t for t in PacketType if t is not P.AUTH or version is V5]
    ptype = data.draw(st.sampled_from(types))
    packet = data.draw(packets_of(ptype, version))
    conn = _at(role, state, version)
    wire = encode(packet, packet.protocol_version if isinstance(packet, Connect) else version)
    events: list[object] = []
    error: MQTTProtocolError | None = None
    try:
        events = list(conn.receive_data(wire))
    except MQTTProtocolError as exc:
        error = exc
    after = _state(conn)

    if state is S.CLOSED:
        assert error is None
        assert events == []
        assert after is S.CLOSED
        return
    if error is not None:
        assert after is S.CLOSED
    if role is Role.SERVER:
        if state is S.AWAIT_CONNECT:
            if ptype is P.CONNECT:
                assert error is None
                assert after is S.CONNECTING
            else:
                assert error is not None
                assert error.reason_code is RC.PROTOCOL_ERROR  # [MQTT-3.1.0-1]
            return
        if state is S.CONNECTING:
            assert error is None
            assert after is S.CONNECTING
            assert events == ([packet] if ptype is P.AUTH else [])  # the rest waits
            return
        allowed = FROM_CLIENT - {P.CONNECT}  # a second CONNECT: [MQTT-3.1.0-2]
    else:
        if state is S.AWAIT_CONNECT:
            assert error is not None
            assert error.reason_code is RC.PROTOCOL_ERROR
            return
        if state is S.CONNECTING:
            allowed = {P.CONNACK, P.AUTH, P.DISCONNECT}
        else:
            allowed = FROM_SERVER - {P.CONNACK}

    if ptype not in allowed:
        assert error is not None
        assert error.reason_code is RC.PROTOCOL_ERROR
        return
    if error is not None:
        assert error.reason_code in CONTENT_ERRORS.get(ptype, set()), error
        return
    assert len(events) == 1
    if ptype is P.DISCONNECT or (
        ptype is P.CONNACK and isinstance(packet, Connack) and packet.reason_code.is_error
    ):
        assert after is S.CLOSED
    elif ptype is P.CONNACK or state is S.CONNECTED:
        assert after is S.CONNECTED
    else:
        assert after is state
