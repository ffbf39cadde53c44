"""Retained messages read from the store at SUBSCRIBE (the broker keeps only their index)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from broker.core.hub import RETAINED_AT_ONCE
from broker.mqtt.packets import Puback
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(120)


def _retain(port: int, items: list[tuple[bytes, bytes]]) -> None:
    with RawClient(port) as pub:
        pub.connect("ret-pub")
        for i, (topic, payload) in enumerate(items, start=1):
            pub.publish(
                topic,
                payload,
                qos=1,
                packet_id=1 + i % 60000,
                retain=True,
                content_type="t/" + topic.decode(),
            )
            pub.expect(Puback)


def _everything(port: int, flt: bytes, count: int) -> dict[bytes, tuple[bytes, int, str | None]]:
    with RawClient(port) as c:
        c.connect("ret-sub")
        c.subscribe((flt, 1))
        got = {}
        for _ in range(count):
            p = c.expect_publish()
            assert p.retain
            got[p.topic] = (p.payload, p.qos, p.properties.content_type)
        assert c.nothing_within(0.3)
        return got


@pytest.mark.parametrize("count", [RETAINED_AT_ONCE, RETAINED_AT_ONCE + 300])
def test_retained_messages_come_from_the_store_before_and_after_a_restart(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path, count: int
) -> None:
    """At most RETAINED_AT_ONCE are read at once, more a chunk at a time as they are paced;
    each as it is when read: replaced ones give the newer payload, deleted ones nothing."""
    data = tmp_path / "d"
    broker = make_broker(data, sessions={"max_queued_messages": 10_000})
    _retain(broker.port, [(b"rs/%04d" % i, b"v1-%d" % i) for i in range(count)])
    _retain(broker.port, [(b"rs/0003", b"v2"), (b"rs/0005", b"")])
    want = {b"rs/%04d" % i: (b"v1-%d" % i, 1, f"t/rs/{i:04d}") for i in range(count)}
    want[b"rs/0003"] = (b"v2", 1, "t/rs/0003")
    del want[b"rs/0005"]
    assert _everything(broker.port, b"rs/#", count - 1) == want
    broker.stop()
    broker = make_broker(data, sessions={"max_queued_messages": 10_000})
    assert _everything(broker.port, b"rs/#", count - 1) == want


def test_a_read_that_partly_overlaps_the_last_one_gets_every_message(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """The messages read last are kept for the next read; one that needs some of them and
    some others gets all of them (the first version returned only the new ones)."""
    broker = make_broker()
    _retain(broker.port, [(b"ov/a/1", b"a1"), (b"ov/a/2", b"a2"), (b"ov/b/1", b"b1")])
    with RawClient(broker.port) as c:
        c.connect("ov-sub")
        c.subscribe((b"ov/a/#", 1))
        assert {c.expect_publish().payload for _ in range(2)} == {b"a1", b"a2"}
        c.subscribe((b"ov/#", 1), packet_id=2)
        assert {c.expect_publish().payload for _ in range(3)} == {b"a1", b"a2", b"b1"}
        assert c.nothing_within(0.3)
