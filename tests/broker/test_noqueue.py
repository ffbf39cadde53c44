"""Sessions share one empty queue until a copy is queued for them (``NO_QUEUE``)."""

from __future__ import annotations

import pathlib
from collections import deque

import pytest
import trio
import trio.testing

from broker.core.noqueue import NO_QUEUE
from broker.core.sessions import Session
from broker.mqtt.packets import Disconnect, Puback, Publish, Suback, Subscribe, Subscription
from broker.mqtt.properties import Properties
from broker.net.runtime import Broker
from tests.broker.harness import run_with_broker
from tests.broker.memclient import MemClient

pytestmark = pytest.mark.timeout(60)


def test_the_shared_queue_refuses_every_addition_and_stays_empty() -> None:
    with pytest.raises(RuntimeError, match="own_queue"):
        NO_QUEUE.append(1)
    with pytest.raises(RuntimeError, match="own_queue"):
        NO_QUEUE.appendleft(1)
    with pytest.raises(RuntimeError, match="own_queue"):
        NO_QUEUE.extend([1])
    with pytest.raises(RuntimeError, match="own_queue"):
        NO_QUEUE.extendleft([1])
    with pytest.raises(RuntimeError, match="own_queue"):
        NO_QUEUE.insert(0, 1)
    queue = NO_QUEUE
    with pytest.raises(RuntimeError, match="own_queue"):
        queue += [1]
    assert len(NO_QUEUE) == 0
    assert not NO_QUEUE


def test_a_session_gets_its_own_queue_once() -> None:
    a, b = Session("a", 1), Session("b", 2)
    assert a.queue is NO_QUEUE
    assert b.queue is NO_QUEUE
    own = a.own_queue()
    assert type(own) is deque
    assert own is not NO_QUEUE
    assert a.own_queue() is own
    assert a.queue is own
    assert b.queue is NO_QUEUE


def test_copies_queued_behind_a_full_window_go_out_in_order(tmp_path: pathlib.Path) -> None:
    """A subscriber with Receive Maximum 1: the second and third copies wait in its own
    queue; the publisher's session never queues and keeps the shared one."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        sub = await MemClient.connect(broker, "nq-sub", properties=Properties(receive_maximum=1))
        await sub.send(Subscribe(1, (Subscription(b"nq/t", 1),)))
        assert isinstance(await sub.next(), Suback)
        pub = await MemClient.connect(broker, "nq-pub")
        for i in range(3):
            await pub.send(Publish(b"nq/t", b"%d" % i, qos=1, packet_id=i + 1))
            assert isinstance(await pub.next(), Puback)
        sessions = broker.hub.sessions
        queued = sessions.get("nq-sub")
        assert queued is not None
        assert queued.queue is not NO_QUEUE
        assert len(queued.queue) == 2
        assert sessions.get("nq-pub") is not None
        assert sessions.get("nq-pub").queue is NO_QUEUE  # type: ignore[union-attr]
        got = []
        for _ in range(3):
            p = await sub.next()
            assert isinstance(p, Publish)
            assert p.packet_id is not None
            got.append(p.payload)
            await sub.send(Puback(p.packet_id))
        assert got == [b"0", b"1", b"2"]
        assert len(NO_QUEUE) == 0
        await sub.send(Disconnect())
        await pub.send(Disconnect())

    run_with_broker(tmp_path, body)
