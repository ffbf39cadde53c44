"""`$` topics: carried like any topic (``$aws/things/...``), except the prefixes the broker
owns (``$SYS``, ``$JS``, ``$MQTT``), which no client may publish to, by PUBLISH or by will.
Filters starting with a wildcard never match a `$` topic [MQTT-4.7.2-1]."""

from __future__ import annotations

import logging

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Puback, Will
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)

V311 = ProtocolVersion.MQTT_3_1_1
SHADOW = b"$aws/things/lamp-1/shadow/update"


@pytest.mark.parametrize("version", [ProtocolVersion.MQTT_5, V311])
def test_a_dollar_topic_is_carried_to_dollar_filters_only_mqtt_4_7_2_1(
    broker: BrokerThread, version: ProtocolVersion
) -> None:
    with (
        RawClient(broker.port) as aws,
        RawClient(broker.port) as everything,
        RawClient(broker.port) as plus,
        RawClient(broker.port, version=version) as device,
    ):
        aws.connect("aws")
        aws.subscribe((b"$aws/#", 1))
        everything.connect("all")
        everything.subscribe((b"#", 1))
        plus.connect("plus")
        plus.subscribe((b"+/things/#", 1))
        device.connect("lamp-1")
        device.publish(SHADOW, b'{"state":{}}', qos=1, packet_id=1)
        assert device.expect(Puback).reason_code is ReasonCode.SUCCESS
        got = aws.expect_publish()
        assert (got.topic, got.payload) == (SHADOW, b'{"state":{}}')
        assert everything.nothing_within(0.3)
        assert plus.nothing_within(0.1)


def test_a_retained_dollar_topic_reaches_a_later_subscriber(broker: BrokerThread) -> None:
    with RawClient(broker.port) as device:
        device.connect("lamp-2")
        device.publish(b"$aws/things/lamp-2/state", b"on", qos=1, packet_id=1, retain=True)
        device.expect(Puback)
    with RawClient(broker.port) as late, RawClient(broker.port) as wild:
        wild.connect("wild")
        wild.subscribe((b"#", 0))
        late.connect("late")
        late.subscribe((b"$aws/things/+/state", 0))
        got = late.expect_publish()
        assert (got.topic, got.payload, got.retain) == (b"$aws/things/lamp-2/state", b"on", True)
        assert wild.nothing_within(0.3)


# $JS/API/ and $JS/ACK/ are claimed by JetStream (tests/jetstream: 0x83 without a
# Response Topic, 0x90 with [jetstream] enabled = false); the rest of $JS is reserved.
@pytest.mark.parametrize("topic", [b"$SYS/broker/version", b"$JS/EVENT/x", b"$MQTT/sess/x"])
def test_reserved_prefixes_are_refused_with_0x90_and_a_reason(
    broker: BrokerThread, topic: bytes
) -> None:
    with RawClient(broker.port) as watcher, RawClient(broker.port) as c:
        watcher.connect("watch-reserved")
        watcher.subscribe((topic.split(b"/")[0] + b"/#", 0))
        c.connect("reserved-pub")
        c.publish(topic, b"x", qos=1, packet_id=1)
        ack = c.expect(Puback)
        assert ack.reason_code is ReasonCode.TOPIC_NAME_INVALID
        assert ack.properties.reason_string is not None
        assert "reserved" in ack.properties.reason_string
        assert watcher.nothing_within(0.3)


def test_a_prefix_is_reserved_by_whole_level_only(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as c:
        sub.connect("sysx-sub")
        sub.subscribe((b"$SYSTEM/#", 0))
        c.connect("sysx")
        c.publish(b"$SYSTEM/a", b"x", qos=1, packet_id=1)
        assert c.expect(Puback).reason_code is ReasonCode.SUCCESS
        assert sub.expect_publish().topic == b"$SYSTEM/a"


def test_311_publish_to_a_reserved_topic_is_dropped_with_a_log_line(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), RawClient(broker.port, version=V311) as c:
        c.connect("reserved-311")
        c.publish(b"$SYS/fake", b"x", qos=1, packet_id=1)
        assert c.expect(Puback).reason_code is ReasonCode.SUCCESS  # 3.1.1 cannot say why
        c.publish(b"$SYS/fake", b"x", qos=1, packet_id=2)
        c.expect(Puback)
    lines = [r.getMessage() for r in caplog.records if "reserved topic" in r.getMessage()]
    assert len(lines) == 1, lines  # once per connection
    assert "reserved-311" in lines[0]
    assert "$SYS/fake" in lines[0]


@pytest.mark.parametrize("version", [ProtocolVersion.MQTT_5, V311])
def test_a_will_on_a_reserved_topic_is_refused_at_connect(
    broker: BrokerThread, version: ProtocolVersion
) -> None:
    with RawClient(broker.port, version=version) as c:
        connack = c.connect(
            "will-sys", will=Will(b"$SYS/broker/version", b"pwned", qos=1, retain=True)
        )
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.NOT_AUTHORIZED
    with RawClient(broker.port) as late:
        late.connect("sys-reader")
        late.subscribe((b"$SYS/broker/version", 0))
        assert late.nothing_within(0.3)


def test_a_will_on_an_ordinary_dollar_topic_is_published(broker: BrokerThread) -> None:
    with RawClient(broker.port) as watcher:
        watcher.connect("will-watch")
        watcher.subscribe((b"$aws/things/+/lwt", 1))
        with RawClient(broker.port) as c:
            c.connect("will-aws", will=Will(b"$aws/things/w/lwt", b"gone", qos=1))
            c.sock.close()  # no DISCONNECT: the will goes out
        got = watcher.expect_publish()
        assert (got.topic, got.payload) == (b"$aws/things/w/lwt", b"gone")
