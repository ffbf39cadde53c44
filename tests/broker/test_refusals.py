"""The refusals docs/reason-codes.md promises, each through a real socket."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Will,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


def _refused_connect(port: int, connect: Connect) -> Connack:
    with RawClient(port) as c:
        c.send_raw(c.encode(connect))
        answer = c.raw_answer(ProtocolVersion.MQTT_5)
        assert isinstance(answer, Connack)
        c.wait_closed()
        return answer


def test_will_qos_above_maximum_is_0x9b_mqtt_3_2_2_12(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(maximum_qos=1)
    connect = Connect(ProtocolVersion.MQTT_5, "wq", will=Will(b"w/t", b"x", 2))
    assert _refused_connect(broker.port, connect).reason_code is ReasonCode.QOS_NOT_SUPPORTED


def test_retained_will_without_retain_available_is_0x9a_mqtt_3_2_2_13(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(retain_available=False)
    connect = Connect(ProtocolVersion.MQTT_5, "wr", will=Will(b"w/t", b"x", 0, True))
    assert _refused_connect(broker.port, connect).reason_code is ReasonCode.RETAIN_NOT_SUPPORTED


def test_will_topic_with_a_wildcard_is_0x90(broker: BrokerThread) -> None:
    connect = Connect(ProtocolVersion.MQTT_5, "wt", will=Will(b"w/+", b"x"))
    assert _refused_connect(broker.port, connect).reason_code is ReasonCode.TOPIC_NAME_INVALID


def test_auth_without_an_authentication_method_is_0x82_mqtt_4_12_0_7(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("auth-late")
        c.send_raw(c.encode(Auth(ReasonCode.RE_AUTHENTICATE)))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PROTOCOL_ERROR


def test_pubrec_with_an_error_ends_the_exchange_mqtt_4_4_0_2(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("rec-err")
        sub.subscribe((b"re/t", 2))
        pub.connect("rec-err-pub")
        pub.publish(b"re/t", b"x", qos=2, packet_id=1)
        msg = sub.expect(Publish)
        assert msg.packet_id is not None
        sub.send(Pubrec(msg.packet_id, ReasonCode.UNSPECIFIED_ERROR))
        assert sub.nothing_within(0.3)  # no PUBREL, no retransmission


def test_pubrel_for_an_unknown_id_gets_pubcomp_0x92(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("unknown-rel")
        c.send_raw(c.encode(Pubrel(77)))
        assert c.expect(Pubcomp).reason_code is ReasonCode.PACKET_IDENTIFIER_NOT_FOUND


def test_pubrec_for_an_unknown_id_gets_pubrel_0x92(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("unknown-rec")
        c.send_raw(c.encode(Pubrec(78)))
        assert c.expect(Pubrel).reason_code is ReasonCode.PACKET_IDENTIFIER_NOT_FOUND


def test_311_publish_to_a_dollar_topic_is_acknowledged_and_dropped(broker: BrokerThread) -> None:
    with (
        RawClient(broker.port) as watcher,
        RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c,
    ):
        watcher.connect("dollar-watch")
        watcher.subscribe((b"$SYS/#", 0))
        c.connect("dollar-311")
        c.publish(b"$SYS/fake", b"x", qos=1, packet_id=1)
        assert c.expect(Puback).reason_code is ReasonCode.SUCCESS  # 3.1.1 cannot say why
        assert watcher.nothing_within(0.3)


def test_disabled_features_are_refused_per_filter(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(
        shared_subscriptions_available=False, wildcard_subscription_available=False
    )
    with RawClient(broker.port) as c:
        connack = c.connect("features")
        assert connack.properties.shared_subscription_available == 0
        assert connack.properties.wildcard_subscription_available == 0
        c.send(
            Subscribe(
                1,
                (Subscription(b"$share/g/a", 0), Subscription(b"a/+", 0), Subscription(b"a/b", 1)),
            )
        )
        assert c.expect(Suback).reason_codes == (
            ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
            ReasonCode.GRANTED_QOS_1,
        )


def test_subscription_identifier_when_not_available_is_0xa1(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(subscription_identifiers_available=False)
    with RawClient(broker.port) as c:
        c.connect("no-sid")
        c.send(Subscribe(1, (Subscription(b"a", 0),), Properties(subscription_identifiers=(3,))))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED


def test_publish_above_maximum_qos_is_0x9b(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(maximum_qos=1)
    with RawClient(broker.port) as c:
        assert c.connect("max-qos").properties.maximum_qos == 1
        c.send_raw(c.encode(Publish(b"q/t", b"x", 2, packet_id=1)))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.QOS_NOT_SUPPORTED


def test_request_problem_information_0_drops_reason_strings(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("quiet", properties=Properties(request_problem_information=0))
        c.publish(b"$SYS/x", b"x", qos=1, packet_id=1)
        ack = c.expect(Puback)
        assert ack.reason_code is ReasonCode.TOPIC_NAME_INVALID
        assert ack.properties.reason_string is None
