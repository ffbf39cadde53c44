"""Publish and delivery: MQTT 5 features through paho and the codec-based raw client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes

from broker.mqtt.decoder import Decoder
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Disconnect,
    Puback,
    Publish,
    Pubrec,
    RetainHandling,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import Paho, props
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


def _pair(broker: BrokerThread) -> tuple[Paho, Paho]:
    sub = Paho(broker.port, "sub")
    pub = Paho(broker.port, "pub")
    sub.connect()
    pub.connect()
    return sub, pub


def test_properties_are_forwarded_unchanged_and_in_order_mqtt_3_3_2_17_18(
    broker: BrokerThread,
) -> None:
    sub, pub = _pair(broker)
    try:
        sub.subscribe("p/t", 1)
        user = [("b", "2"), ("a", "1"), ("b", "1"), ("clé", "välue")]
        p = props(
            PacketTypes.PUBLISH,
            UserProperty=user,
            ContentType="application/json",
            ResponseTopic="reply/here",
            CorrelationData=b"\x00\x01corr",
            PayloadFormatIndicator=1,
        )
        pub.publish("p/t", b'{"x": 1}', 1, properties=p)
        msg = sub.get()
        got: Any = msg.properties
        assert got.UserProperty == user
        assert got.ContentType == "application/json"
        assert got.ResponseTopic == "reply/here"
        assert got.CorrelationData == b"\x00\x01corr"
        assert got.PayloadFormatIndicator == 1
    finally:
        pub.disconnect()
        sub.disconnect()


def test_overlapping_subscriptions_give_one_copy_with_max_qos_and_every_identifier_mqtt_3_3_4_2_3(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("ovl")
        assert isinstance(
            sub.subscribe((b"o/#", 0), packet_id=1, subscription_identifiers=(7,)), Suback
        )
        assert isinstance(
            sub.subscribe((b"o/+", 2), packet_id=2, subscription_identifiers=(9,)), Suback
        )
        assert isinstance(sub.subscribe((b"o/x", 1), packet_id=3), Suback)
        pub.connect("ovl-pub")
        pub.publish(b"o/x", b"one", qos=2, packet_id=5)
        assert pub.expect(Pubrec).reason_code is ReasonCode.SUCCESS
        msg = sub.expect_publish()
        assert msg.qos == 2
        assert sorted(msg.properties.subscription_identifiers) == [7, 9]
        assert sub.nothing_within(0.3)


def test_one_identifier_on_two_overlapping_filters_is_sent_once_mqtt_3_3_4_3(
    broker: BrokerThread,
) -> None:
    """One SUBSCRIBE with identifier 2333 over ``s/+`` and ``s/#``: a message matching both
    carries [2333], not [2333, 2333] (found by the EMQX suite)."""
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("ovl-one-id")
        sub.send(
            Subscribe(
                1,
                (Subscription(b"s/+", 1), Subscription(b"s/#", 1)),
                Properties(subscription_identifiers=(2333,)),
            )
        )
        sub.expect(Suback)
        pub.connect("ovl-one-id-pub")
        pub.publish(b"s/x", b"one", qos=1, packet_id=1)
        pub.expect(Puback)
        assert sub.expect_publish().properties.subscription_identifiers == (2333,)


def test_no_local_mqtt_3_8_3_3(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c, RawClient(broker.port) as other:
        c.connect("nl")
        c.send(Subscribe(1, (Subscription(b"nl/t", 0, no_local=True),)))
        c.expect(Suback)
        other.connect("nl-other")
        other.send(Subscribe(1, (Subscription(b"nl/t", 0),)))
        other.expect(Suback)
        c.publish(b"nl/t", b"mine")
        assert other.expect_publish().payload == b"mine"
        assert c.nothing_within(0.3)


def test_retained_message_stored_replaced_and_deleted_mqtt_3_3_1_5_6(broker: BrokerThread) -> None:
    pub = Paho(broker.port, "rpub")
    pub.connect()
    try:
        pub.publish("r/a", b"first", 1, retain=True)
        pub.publish("r/a", b"second", 1, retain=True)
        pub.publish("r/b", b"bee", 1, retain=True)
        s1 = Paho(broker.port, "r1")
        s1.connect()
        s1.subscribe("r/#", 1)
        got = {m.topic: m for m in (s1.get(), s1.get())}
        assert {t: m.payload for t, m in got.items()} == {"r/a": b"second", "r/b": b"bee"}
        assert all(m.retain for m in got.values())
        s1.disconnect()
        pub.publish("r/a", b"", 1, retain=True)  # empty payload deletes [MQTT-3.3.1-6]
        s2 = Paho(broker.port, "r2")
        s2.connect()
        s2.subscribe("r/#", 1)
        assert s2.get().topic == "r/b"
        assert s2.none_within(0.3)
        s2.disconnect()
    finally:
        pub.disconnect()


def test_retain_handling_0_1_2_mqtt_3_3_1_9_10_11(broker: BrokerThread) -> None:
    pub = Paho(broker.port, "rh-pub")
    pub.connect()
    pub.publish("rh/t", b"kept", 1, retain=True)
    pub.disconnect()
    with RawClient(broker.port) as c:
        c.connect("rh")
        cases = (
            (b"rh/t", RetainHandling.SEND_ON_SUBSCRIBE, True, True),
            (b"rh/+", RetainHandling.SEND_IF_NEW_SUBSCRIPTION, True, False),
            (b"rh/#", RetainHandling.DO_NOT_SEND, False, False),
        )
        for pid, (flt, rh, on_new, on_again) in enumerate(cases, start=1):
            for expected in (on_new, on_again):
                c.send(Subscribe(pid, (Subscription(flt, 0, retain_handling=rh),)))
                c.expect(Suback)
                assert (not c.nothing_within(0.3)) is expected
                c.inbox.clear()


def test_retain_as_published_mqtt_3_3_1_12_13(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c, RawClient(broker.port) as pub:
        c.connect("rap")
        c.send(
            Subscribe(
                1,
                (
                    Subscription(b"rap/1", 0, retain_as_published=True),
                    Subscription(b"rap/0", 0, retain_as_published=False),
                ),
            )
        )
        c.expect(Suback)
        pub.connect("rap-pub")
        pub.publish(b"rap/1", b"x", retain=True)
        assert c.expect_publish().retain is True
        pub.publish(b"rap/0", b"y", retain=True)
        assert c.expect_publish().retain is False


def test_inbound_topic_alias_mqtt_3_3_2_12(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("alias-sub")
        sub.subscribe((b"al/#", 0))
        pub.connect("alias-pub")
        pub.publish(b"al/long/topic", b"1", topic_alias=3)
        pub.publish(b"", b"2", topic_alias=3)
        assert [sub.expect_publish().topic for _ in range(2)] == [b"al/long/topic"] * 2


@pytest.mark.parametrize("alias", [0, 65])
def test_topic_alias_out_of_range_is_0x94_mqtt_3_3_2_8_9(broker: BrokerThread, alias: int) -> None:
    with RawClient(broker.port) as c:
        c.connect("alias-bad")
        c.send_raw(c.encode(Publish(b"t", b"x", properties=Properties(topic_alias=alias))))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.TOPIC_ALIAS_INVALID


def test_unknown_alias_with_empty_topic_is_a_protocol_error(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("alias-unknown")
        c.send_raw(c.encode(Publish(b"", b"x", properties=Properties(topic_alias=5))))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PROTOCOL_ERROR


def test_outbound_topic_aliases_when_the_client_allows_them_mqtt_3_3_2_11(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("oa-sub", properties=Properties(topic_alias_maximum=2))
        sub.subscribe((b"oa/#", 0))
        pub.connect("oa-pub")
        for topic in (b"oa/a", b"oa/a", b"oa/b", b"oa/a"):
            pub.publish(topic, b"p")
        got = [sub.expect_publish() for _ in range(4)]
        # The client machine resolved the aliases: topics come out whole.
        assert [m.topic for m in got] == [b"oa/a", b"oa/a", b"oa/b", b"oa/a"]
        assert sub.proto.topic_alias_maximum == 2
        assert len(sub.proto._inbound_aliases) == 2  # the broker did use aliases


def test_client_exceeding_our_receive_maximum_gets_0x93_mqtt_3_3_4_7(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(receive_maximum=2)
    with RawClient(broker.port) as c:
        c.connect("rm")
        burst = b"".join(c.encode(Publish(b"rm/t", b"x", 1, packet_id=i)) for i in (1, 2, 3))
        c.send_raw(burst)
        packets = []
        while True:
            packet = c.next()
            packets.append(packet)
            if not isinstance(packet, Puback):
                break
        assert packets[-1].reason_code is ReasonCode.RECEIVE_MAXIMUM_EXCEEDED  # type: ignore[union-attr]


def test_broker_respects_the_client_receive_maximum_mqtt_3_3_4_9(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("win", properties=Properties(receive_maximum=2))
        sub.subscribe((b"w/t", 1))
        pub.connect("win-pub")
        for i in range(5):
            pub.publish(b"w/t", str(i).encode(), qos=1, packet_id=i + 1)
        first = [sub.expect_publish(ack=False) for _ in range(2)]
        assert sub.nothing_within(0.3)  # the window is full
        for m in first:
            assert m.packet_id is not None
            sub.send(Puback(m.packet_id))
        rest = [sub.expect_publish() for _ in range(3)]
        assert [m.payload for m in first + rest] == [b"0", b"1", b"2", b"3", b"4"]


def test_messages_larger_than_the_client_maximum_packet_size_are_skipped_mqtt_3_1_2_25(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("mps", properties=Properties(maximum_packet_size=64))
        sub.subscribe((b"m/t", 1))
        pub.connect("mps-pub")
        pub.publish(b"m/t", b"x" * 100, qos=1, packet_id=1)
        pub.publish(b"m/t", b"small", qos=1, packet_id=2)
        assert sub.expect_publish().payload == b"small"


def test_packet_larger_than_our_maximum_is_0x95(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_packet_size=128)
    with RawClient(broker.port) as c:
        c.connect("big")
        c.send_raw(c.encode(Publish(b"t", b"y" * 200)))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PACKET_TOO_LARGE


def test_shared_subscription_delivers_to_one_member_mqtt_4_8_2(broker: BrokerThread) -> None:
    with RawClient(broker.port) as a, RawClient(broker.port) as b, RawClient(broker.port) as pub:
        a.connect("sh2-a")
        a.subscribe((b"$share/g2/s2/t", 0))
        b.connect("sh2-b")
        b.subscribe((b"$share/g2/s2/t", 0))
        pub.connect("sh2-pub")
        for i in range(10):
            pub.publish(b"s2/t", str(i).encode())
        counts = {}
        for name, client in (("a", a), ("b", b)):
            n = 0
            try:
                while True:
                    client.expect_publish(timeout=0.5)
                    n += 1
            except TimeoutError:
                pass
            counts[name] = n
        assert counts["a"] + counts["b"] == 10
        assert counts["a"] > 0
        assert counts["b"] > 0


def test_no_local_on_a_shared_subscription_is_a_protocol_error_mqtt_3_8_3_4(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as c:
        c.connect("sh-nl")
        c.send_raw(c.encode(Subscribe(1, (Subscription(b"$share/g/x", 0, no_local=True),))))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PROTOCOL_ERROR


def test_bad_filter_fails_alone_mqtt_3_8_4_6(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("badf")
        c.send(
            Subscribe(
                1,
                (
                    Subscription(b"ok/+", 1),
                    Subscription(b"bad/#/x", 1),
                    Subscription(b"$share//x", 0),
                    Subscription(b"fine", 2),
                ),
            )
        )
        suback = c.expect(Suback)
        assert suback.reason_codes == (
            ReasonCode.GRANTED_QOS_1,
            ReasonCode.TOPIC_FILTER_INVALID,
            ReasonCode.TOPIC_FILTER_INVALID,
            ReasonCode.GRANTED_QOS_2,
        )


def test_unsuback_0x11_when_no_subscription_existed(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("unsub")
        c.subscribe((b"u/a", 0))
        c.send(Unsubscribe(2, (b"u/a", b"u/b")))
        assert c.expect(Unsuback).reason_codes == (
            ReasonCode.SUCCESS,
            ReasonCode.NO_SUBSCRIPTION_EXISTED,
        )


def test_311_subscriber_gets_0x80_for_a_bad_filter(broker: BrokerThread) -> None:
    with RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c:
        c.connect("bad311")
        c.send(Subscribe(1, (Subscription(b"a/#/b", 0), Subscription(b"a/b", 1))))
        suback = c.expect(Suback)
        assert [int(code) for code in suback.reason_codes] == [0x80, 1]


def test_wildcard_and_dollar_topics_are_not_delivered(broker: BrokerThread) -> None:
    with RawClient(broker.port) as sub, RawClient(broker.port) as pub:
        sub.connect("dollar-sub")
        sub.subscribe((b"#", 0))
        pub.connect("dollar-pub")
        pub.publish(b"$SYS/fake", b"x", qos=1, packet_id=1)
        ack = pub.expect(Puback)
        assert ack.reason_code is ReasonCode.TOPIC_NAME_INVALID
        assert sub.nothing_within(0.3)


def test_payload_format_indicator_with_invalid_utf8_is_0x99(broker: BrokerThread) -> None:
    with RawClient(broker.port) as pub:
        pub.connect("pfi")
        pub.publish(b"pfi/t", b"\xff\xfe", qos=1, packet_id=1, payload_format_indicator=1)
        assert pub.expect(Puback).reason_code is ReasonCode.PAYLOAD_FORMAT_INVALID


def test_puback_0x10_when_nobody_subscribes(broker: BrokerThread) -> None:
    with RawClient(broker.port) as pub:
        pub.connect("nomatch")
        pub.publish(b"nobody/here", b"x", qos=1, packet_id=1)
        assert pub.expect(Puback).reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS


@pytest.mark.parametrize("qos", [1, 2])
def test_departed_shared_member_messages_go_to_another_member_mqtt_4_8_2_5(
    broker: BrokerThread, qos: int
) -> None:
    with RawClient(broker.port) as b, RawClient(broker.port) as pub:
        a = RawClient(broker.port)
        a.connect("sd-a")
        a.subscribe((b"$share/g/sd/t", 2))
        b.connect("sd-b")
        b.subscribe((b"$share/g/sd/t", 2))
        pub.connect("sd-pub")
        for i in range(2):
            pub.publish(b"sd/t", f"m{i}".encode(), qos=qos, packet_id=i + 1)
        kept = a.expect_publish(ack=False).payload  # A holds its copy without acknowledging
        other = b.expect_publish(ack=False).payload
        assert {kept, other} == {b"m0", b"m1"}
        a.close()  # A's session (expiry 0) ends with its connection
        if qos == 1:
            assert b.expect_publish().payload == kept  # QoS 1: re-dispatched to B
        else:
            assert b.nothing_within(0.5)  # QoS 2 already sent to A: never to anyone else


def test_a_disconnect_reaches_a_client_that_is_still_writing(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """The broker shuts its write side and reads what the client still sends before it
    closes: closing with unread input sends an RST, and the client died on a broken pipe
    before it could read the 0x93 saying why (Paho's test_flow_control2)."""
    broker = make_broker(receive_maximum=2)
    with RawClient(broker.port) as c:
        c.connect("still-writing")
        burst = b"".join(c.encode(Publish(b"rm/t", b"x", 1, packet_id=i)) for i in (1, 2, 3))
        tail = c.encode(Publish(b"rm/t", b"y" * 1000)) * 300  # ~300 KB the broker never reads
        c.send_raw(burst + tail)
        decoder = Decoder(ProtocolVersion.MQTT_5)
        got: list[object] = []
        c.sock.settimeout(10)
        while True:
            data = c.sock.recv(65536)  # an RST here raises ConnectionResetError
            if not data:
                break
            got.extend(decoder.feed(data))
        assert isinstance(got[-1], Disconnect)
        assert got[-1].reason_code is ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
