"""A SUBSCRIBE matching more retained messages than the copy limits allow at once.

Sent all at once, the burst was cut short like any other pile of copies (QoS 0 by
``sessions.max_outbound_queue``, QoS 1/2 by ``sessions.max_queued_messages`` — as in
mosquitto, whose users ask why 1,020 of 12,500 retained messages arrive). Paced, every
retained message arrives; and a live message that overtakes a paced retained one on the
same topic is the last value the subscriber sees.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.core.hub import RETAINED_AT_ONCE
from broker.mqtt.packets import Disconnect, Puback, Publish
from broker.mqtt.properties import Properties
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(120)

TOPICS = 1_000  # well above RETAINED_AT_ONCE and the limits below
LIMITS = {"max_outbound_queue": 64, "max_queued_messages": 100}


def topic(i: int) -> bytes:
    return b"ret/%04d" % i


def publish_all(port: int, value: bytes, *, retain: bool, topics: int = TOPICS) -> None:
    """One QoS 1 message per topic, each acknowledged before the next."""
    with RawClient(port) as pub:
        pub.connect("ret-pub")
        for i in range(topics):
            pub.publish(topic(i), value, qos=1, packet_id=i % 0xFFFF + 1, retain=retain)
            pub.expect(Puback)
        pub.send(Disconnect())


def receive_all(sub: RawClient) -> list[Publish]:
    """Every PUBLISH until the broker is quiet (QoS 1 ones acknowledged)."""
    got: list[Publish] = []
    while True:
        try:
            got.append(sub.expect_publish(timeout=1.0))
        except TimeoutError:
            return got


@pytest.mark.parametrize(
    ("qos", "topics"),
    [
        (0, 64),  # max_outbound_queue: at once
        (0, 65),  # one more: paced
        (1, 100),  # max_queued_messages: at once
        (1, 101),
        (0, TOPICS),  # beyond RETAINED_AT_ONCE
        (1, TOPICS),
    ],
)
def test_every_retained_message_arrives_beyond_the_copy_limits(
    make_broker: Callable[..., BrokerThread], qos: int, topics: int
) -> None:
    assert TOPICS > RETAINED_AT_ONCE
    broker = make_broker(sessions=LIMITS)
    publish_all(broker.port, b"v1", retain=True, topics=topics)
    with RawClient(broker.port) as sub:
        sub.connect(f"burst-{qos}")
        sub.subscribe((b"ret/#", qos))
        got = receive_all(sub)
    assert sorted(p.topic for p in got) == [topic(i) for i in range(topics)]
    assert all(p.retain and p.qos == qos and p.payload == b"v1" for p in got)


def test_a_live_message_overtaking_a_paced_retained_one_is_the_last_value(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """The subscriber holds its window (Receive Maximum 5) while new values go out on
    every topic: a retained copy still waiting for that topic must not follow the new
    value (it is skipped), and every topic ends on the new value. Default limits: the
    live copies must all fit in the queue."""
    broker = make_broker()
    publish_all(broker.port, b"v1", retain=True)
    with RawClient(broker.port) as sub:
        sub.connect("burst-live", properties=Properties(receive_maximum=5))
        sub.subscribe((b"ret/#", 1))
        held = [sub.expect_publish(ack=False) for _ in range(5)]
        assert sub.nothing_within(0.3)  # the window is full
        publish_all(broker.port, b"v2", retain=False)
        for p in held:
            assert p.packet_id is not None
            sub.send(Puback(p.packet_id))
        got = held + receive_all(sub)
    last: dict[bytes, bytes] = {}
    for p in got:
        assert not (last.get(p.topic) == b"v2" and p.payload == b"v1"), p.topic
        last[p.topic] = p.payload
    assert last == {topic(i): b"v2" for i in range(TOPICS)}
    retained = sum(1 for p in got if p.payload == b"v1")
    assert retained < TOPICS  # the overtaken ones were skipped, not sent late


def test_a_retained_message_replaced_while_paced_goes_out_as_it_is_now(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """A persistent subscriber goes offline with its burst half paced; the retained
    messages are replaced meanwhile by QoS 0 publishes it is not sent (offline, QoS 0 is
    not queued). Back online, the rest of the burst is the new values, not the ones of
    the SUBSCRIBE; copies queued before the change stay as they were (as for any queued
    copy), and no topic goes from the new value back to the old one."""
    keep = Properties(session_expiry_interval=600)
    broker = make_broker()
    publish_all(broker.port, b"v1", retain=True)
    with RawClient(broker.port) as sub:
        sub.connect(
            "burst-away", properties=Properties(session_expiry_interval=600, receive_maximum=5)
        )
        sub.subscribe((b"ret/#", 1))
        held = [sub.expect_publish(ack=False) for _ in range(5)]
        sub.send(Disconnect())
        sub.wait_closed()  # offline: the session waits with its burst
    with RawClient(broker.port) as pub:
        pub.connect("replacer")
        for i in range(TOPICS):
            pub.publish(topic(i), b"v2", qos=0, retain=True)
        # Answered after every publish before it was applied (one connection, in order).
        pub.publish(b"nobody/listens", b"", qos=1, packet_id=1)
        pub.expect(Puback)
        pub.send(Disconnect())
    with RawClient(broker.port) as sub:
        assert sub.connect("burst-away", clean_start=False, properties=keep).session_present
        got = receive_all(sub)
    assert {p.topic for p in held} <= {p.topic for p in got}  # resent, unacknowledged
    last: dict[bytes, bytes] = {}
    for p in got:
        assert not (last.get(p.topic) == b"v2" and p.payload == b"v1"), p.topic
        last[p.topic] = p.payload
    assert len(last) == TOPICS
    new = sum(1 for v in last.values() if v == b"v2")
    assert new >= TOPICS - 2 * RETAINED_AT_ONCE, new  # all but what was queued already
