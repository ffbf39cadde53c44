"""Read-after-write for retained messages: once the broker has read a retained PUBLISH,
a later SUBSCRIBE (from any client) gets it — the mosquitto_pub-then-mosquitto_sub case.

The retained record is committed before the message becomes the topic's retained value
(a retained message the store refused must not be handed out), so a SUBSCRIBE that
arrives while such a commit is in flight waits for it."""

from __future__ import annotations

import pytest

from broker.mqtt.packets import Disconnect, Pingreq, Pingresp, Puback
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("qos", [0, 1])
def test_a_subscribe_after_a_retained_publish_was_read_gets_it(
    broker: BrokerThread, qos: int
) -> None:
    misses = []
    for i in range(40):
        topic = f"raw/{qos}/{i}".encode()
        with RawClient(broker.port) as pub:
            pub.connect(f"raw-pub-{qos}-{i}")
            # Publish, DISCONNECT and close without waiting for anything (QoS 1: the PUBACK
            # is not awaited either), as mosquitto_pub -r does for QoS 0.
            pub.publish(topic, b"v%d" % i, qos=qos, packet_id=1 if qos else None, retain=True)
            pub.send(Disconnect())
        with RawClient(broker.port) as sub:
            sub.connect(f"raw-sub-{qos}-{i}")
            sub.subscribe((topic, 0))
            try:
                got = sub.expect_publish(timeout=2.0)
            except TimeoutError:
                misses.append(i)
                continue
            # Retained, or live when the broker read the SUBSCRIBE first (both sockets were
            # readable at once): either way the subscriber has the value.
            assert got.payload == b"v%d" % i
    assert not misses, f"{len(misses)} of 40 subscribers missed the retained message"


def test_a_retained_replacement_read_before_a_subscribe_is_what_it_gets(
    broker: BrokerThread,
) -> None:
    with RawClient(broker.port) as pub:
        pub.connect("replace-pub")
        pub.publish(b"rep/t", b"old", qos=1, packet_id=1, retain=True)
        pub.expect(Puback)
        for n in range(20):
            pub.publish(b"rep/t", b"new%d" % n, qos=0, retain=True)
            pub.send(Pingreq())
            pub.expect(Pingresp)  # the broker has read the PUBLISH (same connection, in order)
            with RawClient(broker.port) as sub:
                sub.connect(f"replace-sub-{n}")
                sub.subscribe((b"rep/t", 0))
                got = sub.expect_publish()
                assert (got.payload, got.retain) == (b"new%d" % n, True)
                assert sub.nothing_within(0.05)
