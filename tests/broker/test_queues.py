"""Queued copies waiting on disk: many of them, across a restart, a slow consumer, overflow.

The queue is read back a page at a time (``broker.core.queues``); these queue several pages
and check order, QoS 2, acknowledgements, and that nothing is left in the store.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable

import pytest
import trio
import trio.testing

import store
from broker.config import BrokerConfig
from broker.core.queues import PAGE_MESSAGES
from broker.core.sessions import RAM_QUEUE_MESSAGES, OnDisk
from broker.mqtt.packets import (
    Disconnect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
)
from broker.mqtt.properties import Properties
from broker.net.runtime import Broker
from broker.persist import records as persist
from tests.broker.harness import BrokerThread, clock_held, run_with_broker
from tests.broker.memclient import MemClient
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(120)

KEEP = Properties(session_expiry_interval=3600)
MANY = 3 * PAGE_MESSAGES + 17  # several pages and a partial one
ROOMY = {"max_queued_messages": 10_000, "max_queued_bytes": 0}


def _offline_subscriber(port: int, client_id: str, flt: bytes, qos: int) -> None:
    with RawClient(port) as c:
        c.connect(client_id, properties=KEEP)
        c.subscribe((flt, qos))
        c.send(Disconnect())


def _publish(port: int, topic: bytes, count: int, *, qos_of: Callable[[int], int]) -> None:
    """``count`` messages numbered in their payload, each QoS 1/2 one acknowledged."""
    with RawClient(port) as pub:
        pub.connect("q-pub")
        for i in range(count):
            qos = qos_of(i)
            pub.publish(topic, b"%06d" % i + b"." * 500, qos=qos, packet_id=1 if qos else None)
            if qos == 1:
                pub.expect(Puback)
            elif qos == 2:
                pub.expect(Pubrec)
                pub.send(Pubrel(1))
                pub.expect(Pubcomp)
        pub.send(Disconnect())


def _receive(c: RawClient, count: int) -> list[tuple[int, int]]:
    """(number, qos) of ``count`` messages, acknowledging each (QoS 2 up to PUBCOMP; the
    broker goes on sending while a PUBREL is on its way)."""
    got: list[tuple[int, int]] = []
    open_qos2 = 0
    while len(got) < count or open_qos2:
        p = c.next()
        if isinstance(p, Pubrel):
            c.send(Pubcomp(p.packet_id))
            open_qos2 -= 1
            continue
        assert isinstance(p, Publish), p
        assert p.packet_id is not None
        if p.qos == 2:
            c.send(Pubrec(p.packet_id))
            open_qos2 += 1
        else:
            c.send(Puback(p.packet_id))
        got.append((int(p.payload[:6]), p.qos))
    return got


def _stored(data: pathlib.Path, stream: str) -> int:
    with store.Store.open(data) as st:
        return st.stream_state(stream).messages


def test_many_queued_copies_reach_the_reconnecting_session_in_order(
    make_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_broker(sessions=ROOMY)
    _offline_subscriber(broker.port, "many", b"many/t", 2)
    _publish(broker.port, b"many/t", MANY, qos_of=lambda i: 1 + i % 2)
    with RawClient(broker.port) as c:
        assert c.connect("many", clean_start=False, properties=KEEP).session_present
        got = _receive(c, MANY)
        assert got == [(i, 1 + i % 2) for i in range(MANY)]
        assert c.nothing_within(0.3)


def test_queued_copies_survive_a_restart_and_leave_nothing_behind(
    make_broker: Callable[..., BrokerThread], tmp_path: pathlib.Path
) -> None:
    """Copies for one session (the message in its pending entry) and for two (stored once
    and referenced) come back after a restart, page by page, in order; acknowledging them
    all removes every record."""
    data = tmp_path / "d"
    broker = make_broker(data, sessions=ROOMY)
    _offline_subscriber(broker.port, "r-one", b"r/#", 1)
    _offline_subscriber(broker.port, "r-two", b"r/both", 1)
    _publish(broker.port, b"r/one", MANY, qos_of=lambda i: 1)
    _publish(broker.port, b"r/both", PAGE_MESSAGES + 5, qos_of=lambda i: 1)
    broker.stop()
    broker = make_broker(data, sessions=ROOMY)
    with RawClient(broker.port) as c:
        assert c.connect("r-one", clean_start=False, properties=KEEP).session_present
        one = [(p.topic, int(p.payload[:6])) for p in (c.expect_publish() for _ in range(MANY))]
        assert one == [(b"r/one", i) for i in range(MANY)]
        both = [int(c.expect_publish().payload[:6]) for _ in range(PAGE_MESSAGES + 5)]
        assert both == list(range(PAGE_MESSAGES + 5))
        assert c.nothing_within(0.3)
        c.send(Disconnect())
    broker.stop()  # the shared copies are still referenced by r-two's entries
    assert _stored(data, persist.MSGS) == PAGE_MESSAGES + 5
    broker = make_broker(data, sessions=ROOMY)
    with RawClient(broker.port) as c:
        assert c.connect("r-two", clean_start=False, properties=KEEP).session_present
        both = [int(c.expect_publish().payload[:6]) for _ in range(PAGE_MESSAGES + 5)]
        assert both == list(range(PAGE_MESSAGES + 5))
        assert c.nothing_within(0.3)
        c.send(Disconnect())
    broker.stop()
    assert _stored(data, persist.MSGS) == 0
    assert _stored(data, persist.PEND) == 0


def test_a_slow_consumer_gets_everything_in_order_after_its_queue_spilled(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """A connected client that does not acknowledge (Receive Maximum 5) while far more
    than ``RAM_QUEUE_MESSAGES`` copies arrive: the rest wait on disk, in order."""
    count = RAM_QUEUE_MESSAGES + PAGE_MESSAGES + 40
    broker = make_broker(sessions=ROOMY)
    with RawClient(broker.port) as c:
        c.connect("slow", properties=Properties(session_expiry_interval=3600, receive_maximum=5))
        c.subscribe((b"slow/t", 1))
        _publish(broker.port, b"slow/t", count, qos_of=lambda i: 1)
        held = [c.expect_publish(ack=False) for _ in range(5)]
        assert c.nothing_within(0.2)  # the window is full
        got = [int(p.payload[:6]) for p in held]
        for p in held:
            assert p.packet_id is not None
            c.send(Puback(p.packet_id))
        got += [int(c.expect_publish().payload[:6]) for _ in range(count - 5)]
        assert got == list(range(count))


def test_a_queue_overflow_is_logged_once_per_episode_with_the_client_id(
    make_broker: Callable[..., BrokerThread], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(sessions={"max_queued_messages": 3, "overflow": "drop_oldest"})
    _offline_subscriber(broker.port, "full-client", b"full/t", 1)
    with caplog.at_level(logging.WARNING, logger="jetmq.queues"):
        _publish(broker.port, b"full/t", 10, qos_of=lambda i: 1)
        lines = [r.getMessage() for r in caplog.records if r.name == "jetmq.queues"]
        assert len(lines) == 1
        assert "'full-client'" in lines[0]
        assert "is full" in lines[0]
        with RawClient(broker.port) as c:
            c.connect("full-client", clean_start=False, properties=KEEP)
            assert [int(c.expect_publish().payload[:6]) for _ in range(3)] == [7, 8, 9]
            c.send(Disconnect())
        _publish(broker.port, b"full/t", 1, qos_of=lambda i: 1)  # fits: the episode ends
        lines = [r.getMessage() for r in caplog.records if r.name == "jetmq.queues"]
        assert len(lines) == 2
        assert "'full-client': 7 queued copies were dropped" in lines[1]
        _publish(broker.port, b"full/t", 5, qos_of=lambda i: 1)  # a second episode
        lines = [r.getMessage() for r in caplog.records if r.name == "jetmq.queues"]
        assert len(lines) == 3
        assert "is full" in lines[2]


def test_a_session_that_stops_being_stored_keeps_its_queue(
    make_broker: Callable[..., BrokerThread],
) -> None:
    """Resumed with a Session Expiry Interval of 0, the session is no longer stored: the
    copies that waited on disk are still delivered."""
    broker = make_broker(sessions=ROOMY)
    _offline_subscriber(broker.port, "unstored", b"un/t", 1)
    _publish(broker.port, b"un/t", PAGE_MESSAGES + 3, qos_of=lambda i: 1)
    with RawClient(broker.port) as c:
        assert c.connect("unstored", clean_start=False).session_present
        got = [int(c.expect_publish().payload[:6]) for _ in range(PAGE_MESSAGES + 3)]
        assert got == list(range(PAGE_MESSAGES + 3))
        assert c.nothing_within(0.3)


def test_queue_limits_default_to_1000_messages_and_100_mib() -> None:
    limits = BrokerConfig().sessions
    assert (limits.max_queued_messages, limits.max_queued_bytes) == (1000, 100 * 1024 * 1024)


@pytest.mark.parametrize(("limit", "kept"), [(3 * 506, [0, 1, 2]), (3 * 506 - 1, [1, 2])])
def test_max_queued_bytes_at_the_limit_and_one_below(
    make_broker: Callable[..., BrokerThread], limit: int, kept: list[int]
) -> None:
    """Three 506-byte payloads fit in exactly 3 x 506 bytes; one byte less drops the oldest."""
    broker = make_broker(sessions={"max_queued_bytes": limit, "overflow": "drop_oldest"})
    _offline_subscriber(broker.port, "bytes", b"bytes/t", 1)
    _publish(broker.port, b"bytes/t", 3, qos_of=lambda i: 1)
    with RawClient(broker.port) as c:
        c.connect("bytes", clean_start=False, properties=KEEP)
        assert [int(c.expect_publish().payload[:6]) for _ in kept] == kept
        assert c.nothing_within(0.3)


def test_an_offline_session_keeps_no_message_in_ram_and_expiry_holds(
    tmp_path: pathlib.Path,
) -> None:
    """In-process (trio's MockClock): while the session is offline its copies are only
    ``OnDisk`` entries (seq, size, key; no message); read back after 30 s they carry the
    lifetime left on the broker's clock [MQTT-3.3.2-6], and an expired one is not sent."""
    count = PAGE_MESSAGES + 10

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        with clock_held(clock):  # virtual time moves only in the test's two timed waits
            sub = await MemClient.connect(broker, "mem-sub", properties=KEEP)
            await sub.send(Subscribe(1, (Subscription(b"mem/t", 1),)))
            assert isinstance(await sub.next(), Suback)
            await sub.send(Disconnect())
            pub = await MemClient.connect(broker, "mem-pub")
            for i in range(count):
                lifetime = 10 if i == 0 else 100  # the first one expires while offline
                props = Properties(message_expiry_interval=lifetime)
                await pub.send(
                    Publish(b"mem/t", b"%06d" % i, 1, False, packet_id=1, properties=props)
                )
                assert isinstance(await pub.next(), Puback)
            session = broker.hub.sessions.get("mem-sub")
            assert session is not None
            assert session.conn is None
            assert not session.queue
            assert session.backlog is not None
            assert session.queued == count
            assert all(isinstance(item, OnDisk) for item in session.backlog)
        await trio.sleep(30)
        with clock_held(clock):
            sub = await MemClient.connect(broker, "mem-sub", clean_start=False, properties=KEEP)
            for i in range(1, count):
                p = await sub.next()
                assert isinstance(p, Publish)
                assert (p.payload, p.properties.message_expiry_interval) == (b"%06d" % i, 70)
                assert p.packet_id is not None
                await sub.send(Puback(p.packet_id))
        with trio.move_on_after(5) as waited:
            await sub.next()
        assert waited.cancelled_caught
        assert session.queued == 0

    run_with_broker(tmp_path, body)
