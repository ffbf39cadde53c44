"""An ended connection is freed by reference counting, not left to the cycle collector.

A connection and its parts (``Output``, ``Inbound``, the handshake) refer to each other;
``ClientConnection._release`` breaks that when the connection is over. Without it every
connection became ~14-24 objects of cyclic garbage (socket, session, codec machine...),
kept until a full collection: memory and collector time a reconnect storm pays.

Each test runs its clients with the collector off, so what is alive afterwards is what
reference counting left: no ``ClientConnection`` may be.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator

import pytest

from broker.mqtt.packets import Publish
from broker.mqtt.reason_codes import ReasonCode
from broker.net.connection import ClientConnection
from broker.net.output import Output
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)

WAIT_SECONDS = 10.0


def _alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is ClientConnection or type(o) is Output)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _all_freed(broker: BrokerThread) -> None:
    """Wait (bounded) until the broker ended every connection and nothing of them is alive."""
    deadline = time.monotonic() + WAIT_SECONDS
    while _alive():
        assert time.monotonic() < deadline, f"{_alive()} connection objects still alive"
        time.sleep(0.01)


def _disconnect(port: int) -> None:
    with RawClient(port) as c:
        c.connect("bye")
        c.send_raw(b"\xe0\x00")  # DISCONNECT 0x00
        c.wait_closed()


def _eof(port: int) -> None:
    with RawClient(port) as c:
        c.connect("eof")


def _qos1_in_flight(port: int) -> None:
    with RawClient(port) as sub:
        sub.connect("sub")
        sub.subscribe((b"t/1", 1))
        with RawClient(port) as pub:
            pub.connect("pub")
            pub.publish(b"t/1", b"x", qos=1, packet_id=1)
            pub.next()  # PUBACK
            assert isinstance(sub.expect_publish(ack=False), Publish)  # left unacknowledged


def _taken_over(port: int) -> None:
    with RawClient(port) as first:
        first.connect("same")
        with RawClient(port) as second:
            second.connect("same")
            d = first.expect_disconnect()
            assert d is not None
            assert d.reason_code is ReasonCode.SESSION_TAKEN_OVER


@pytest.mark.parametrize(
    "clients",
    [_disconnect, _eof, _qos1_in_flight, _taken_over],
    ids=["disconnect", "closed-without-disconnect", "qos1-in-flight", "taken-over"],
)
def test_an_ended_connection_leaves_no_cyclic_garbage(
    broker: BrokerThread, collector_off: None, clients: Callable[[int], None]
) -> None:
    for _ in range(3):
        clients(broker.port)
    _all_freed(broker)
