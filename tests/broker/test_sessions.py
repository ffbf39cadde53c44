"""Sessions, queued messages, resend on resume, and wills, through real sockets."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Disconnect, Puback, Publish, Subscribe, Subscription, Will
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import V311, Paho
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


def _publish_qos1(port: int, topic: bytes, payloads: list[bytes]) -> None:
    with RawClient(port) as pub:
        pub.connect("session-pub")
        for i, payload in enumerate(payloads, start=1):
            pub.publish(topic, payload, qos=1, packet_id=i)
            pub.expect(Puback)
        pub.send(Disconnect())


def test_clean_start_discards_the_session_mqtt_3_1_2_4(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("cs", properties=Properties(session_expiry_interval=100))
        c.subscribe((b"cs/t", 1))
        c.send(Disconnect())
    with RawClient(broker.port) as c:
        assert c.connect("cs", clean_start=True).session_present is False
        _publish_qos1(broker.port, b"cs/t", [b"lost"])
        assert c.nothing_within(0.3)


def test_queued_messages_are_delivered_on_resume_mqtt_3_1_2_5(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("resume", properties=Properties(session_expiry_interval=100))
        c.subscribe((b"q/t", 1))
        c.send(Disconnect())
    _publish_qos1(broker.port, b"q/t", [b"1", b"2", b"3"])
    with RawClient(broker.port) as c:
        connack = c.connect(
            "resume", clean_start=False, properties=Properties(session_expiry_interval=100)
        )
        assert connack.session_present is True
        assert [c.expect_publish().payload for _ in range(3)] == [b"1", b"2", b"3"]


def test_311_persistent_session_queues_while_offline(broker: BrokerThread) -> None:
    sub = Paho(broker.port, "p311", protocol=V311, clean_session=False)
    sub.connect()
    sub.subscribe("p311/t", 1)
    sub.disconnect()
    _publish_qos1(broker.port, b"p311/t", [b"while-offline"])
    sub = Paho(broker.port, "p311", protocol=V311, clean_session=False)
    flags, _rc, _props = sub.connect()
    try:
        assert flags.session_present
        assert sub.get().payload == b"while-offline"
    finally:
        sub.disconnect()


def test_expiry_cannot_go_from_zero_to_non_zero_on_disconnect(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("z2nz")
        c.send_raw(c.encode(Disconnect(properties=Properties(session_expiry_interval=30))))
        disconnect = c.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.PROTOCOL_ERROR


def test_inflight_resent_with_dup_in_order_before_new_ones_mqtt_4_4_0_1(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as c:
        c.connect("dup", properties=Properties(session_expiry_interval=100))
        c.subscribe((b"dup/t", 1))
        _publish_qos1(broker.port, b"dup/t", [b"a", b"b"])
        first = [c.expect_publish(ack=False) for _ in range(2)]
        assert not any(m.dup for m in first)
    _publish_qos1(broker.port, b"dup/t", [b"c"])
    with RawClient(broker.port) as c:
        c.connect("dup", clean_start=False, properties=Properties(session_expiry_interval=100))
        again = [c.expect_publish() for _ in range(3)]
        assert [(m.payload, m.dup) for m in again] == [(b"a", True), (b"b", True), (b"c", False)]
        assert [m.packet_id for m in again[:2]] == [m.packet_id for m in first]


def test_offline_queue_limit_drops_oldest(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(sessions={"max_queued_messages": 3, "overflow": "drop_oldest"})
    with RawClient(broker.port) as c:
        c.connect("lim", properties=Properties(session_expiry_interval=100))
        c.subscribe((b"lim/t", 1))
        c.send(Disconnect())
    _publish_qos1(broker.port, b"lim/t", [b"1", b"2", b"3", b"4", b"5"])
    with RawClient(broker.port) as c:
        c.connect("lim", clean_start=False, properties=Properties(session_expiry_interval=100))
        assert [c.expect_publish().payload for _ in range(3)] == [b"3", b"4", b"5"]
        assert c.nothing_within(0.3)


# -- wills ----------------------------------------------------------------------------------


def _watch(port: int, topic: bytes) -> RawClient:
    c = RawClient(port)
    c.connect(f"watch-{topic.decode()}")
    c.subscribe((topic, 1))
    return c


def _will_client(port: int, client_id: str, topic: bytes) -> RawClient:
    c = RawClient(port)
    c.connect(client_id, will=Will(topic, b"gone", 1, False))
    return c


def test_will_published_on_abnormal_close_mqtt_3_1_2_8(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/a") as w:
        c = _will_client(broker.port, "wa", b"will/a")
        c.close()  # no DISCONNECT
        assert w.expect_publish().payload == b"gone"


def test_no_will_on_normal_disconnect_mqtt_3_14_4_3(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/b") as w:
        c = _will_client(broker.port, "wb", b"will/b")
        c.send(Disconnect())
        c.wait_closed()
        c.close()
        assert w.nothing_within(0.5)


def test_will_on_disconnect_with_will_message_0x04(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/c") as w:
        c = _will_client(broker.port, "wc", b"will/c")
        c.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE))
        c.wait_closed()
        c.close()
        assert w.expect_publish().payload == b"gone"


def test_will_sent_at_once_when_session_expiry_is_shorter_than_will_delay(
    broker: BrokerThread,
) -> None:
    with _watch(broker.port, b"will/e") as w:
        c = RawClient(broker.port)
        c.connect(
            "we", will=Will(b"will/e", b"gone", 1, False, Properties(will_delay_interval=100))
        )
        c.close()  # session expiry 0: the session ends now, and so the will goes now
        assert w.expect_publish(timeout=2).payload == b"gone"


def test_will_on_session_takeover(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/f") as w, _will_client(broker.port, "wf", b"will/f") as old:
        with RawClient(broker.port) as new:
            new.connect("wf")
            assert w.expect_publish().payload == b"gone"
        assert old.expect_disconnect() is not None


def test_will_properties_are_forwarded(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/g") as w:
        c = RawClient(broker.port)
        will_props = Properties(content_type="text/plain", user_properties=(("k", "v"),))
        c.connect("wg", will=Will(b"will/g", b"gone", 1, False, will_props))
        c.close()
        got = w.expect_publish()
        assert got.properties.content_type == "text/plain"
        assert got.properties.user_properties == (("k", "v"),)


def test_311_will_on_abnormal_close(broker: BrokerThread) -> None:
    with _watch(broker.port, b"will/h") as w:
        c = Paho(broker.port, "wh", protocol=V311)
        c.connect(will=("will/h", b"gone311", 1, False, None))
        c.kill()
        assert w.expect_publish().payload == b"gone311"


def test_subscription_identifier_kept_across_resume(broker: BrokerThread) -> None:
    with RawClient(broker.port) as c:
        c.connect("sid", properties=Properties(session_expiry_interval=100))
        c.send(
            Subscribe(1, (Subscription(b"sid/t", 1),), Properties(subscription_identifiers=(42,)))
        )
        c.next()
        c.send(Disconnect())
    with RawClient(broker.port) as c:
        c.connect("sid", clean_start=False, properties=Properties(session_expiry_interval=100))
        _publish_qos1(broker.port, b"sid/t", [b"x"])
        assert c.expect_publish().properties.subscription_identifiers == (42,)


def test_publish_from_311_reaches_v5_with_properties_dropped_and_back(broker: BrokerThread) -> None:
    v311 = ProtocolVersion.MQTT_3_1_1
    with (
        RawClient(broker.port, version=v311) as old_sub,
        RawClient(broker.port) as new_sub,
        RawClient(broker.port, version=v311) as old_pub,
        RawClient(broker.port) as new_pub,
    ):
        old_sub.connect("old-sub")
        old_sub.subscribe((b"mix/#", 1))
        new_sub.connect("new-sub")
        new_sub.subscribe((b"mix/#", 1))
        new_pub.connect("new-pub")
        props = Properties(user_properties=(("a", "b"),), content_type="x")
        new_pub.send(Publish(b"mix/a", b"from5", 1, False, False, 1, props))
        new_pub.expect(Puback)
        to_old = old_sub.expect_publish()
        assert (to_old.payload, to_old.properties) == (b"from5", Properties())
        assert new_sub.expect_publish().properties.user_properties == (("a", "b"),)
        old_pub.connect("old-pub")
        old_pub.publish(b"mix/b", b"from311", qos=1, packet_id=1)
        old_pub.expect(Puback)
        assert new_sub.expect_publish().payload == b"from311"
        assert old_sub.expect_publish().payload == b"from311"
