"""The parking watcher waiting for its next round in place (broker.net.idlewait), on the
system clock (with MockClock it always waits through trio): whatever else trio has to
do must still happen on time — tasks reading their sockets, sleeps, calls from other
threads, new connections.

A stall would show as a wait of up to ``MAX_WAIT_SECONDS`` (1 s); the bounds below sit
well under it and well over what a loaded machine adds.
"""

from __future__ import annotations

import math
import pathlib
import select
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import trio
import trio.testing
from paho.mqtt.enums import CallbackAPIVersion

from broker.mqtt.connection import Connection, Role
from broker.mqtt.encoder import encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from broker.net.idlewait import MAX_WAIT_SECONDS, IdleWait
from broker.net.parking import IDLE_QUIET_SECONDS
from broker.net.runtime import Broker
from broker.net.transport import prepare_socket
from tests.broker.harness import make_config, running_broker
from tests.broker.memclient import SockClient, tcp_pair

pytestmark = pytest.mark.timeout(60)

STALL = MAX_WAIT_SECONDS / 2
V5 = ProtocolVersion.MQTT_5


async def _with_broker(tmp_path: pathlib.Path) -> Broker:
    return await Broker.open(make_config(tmp_path / "data"))


async def _in_place(broker: Broker) -> IdleWait:
    """The watcher's IdleWait, once the watcher task has started."""
    await trio.testing.wait_all_tasks_blocked()
    in_place = broker.parking.in_place
    assert in_place is not None  # the system clock: the watcher may wait in place
    return in_place


async def _connected(broker: Broker, client_id: str) -> SockClient:
    c = SockClient(broker, client_id)
    with trio.fail_after(5):
        assert isinstance(await c.next(), Connack)
    return c


def _run(tmp_path: pathlib.Path, body: Callable[[Broker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = await _with_broker(tmp_path)
        try:
            async with trio.open_nursery() as nursery:
                broker.attach(nursery)
                await body(broker)
                nursery.cancel_scope.cancel()
        finally:
            await broker.close()

    trio.run(main)


class _ThreadClient:
    """A client on a blocking socket, driven from a worker thread: the broker's loop has
    nothing else to do while it talks, so the watcher serves it from its in-place waits."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self.sock, theirs = tcp_pair()
        self.sock.settimeout(5)
        self.proto = Connection(Role.CLIENT)
        self.sock.sendall(self.proto.send(Connect(V5, client_id, True, 0)))
        self.inbox: list[Packet] = []
        broker.spawn_connection(prepare_socket(theirs))

    def send(self, packet: Packet) -> None:
        self.sock.sendall(self.proto.send(packet))

    def next(self) -> Packet:
        while not self.inbox:
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.inbox.extend(p for p in self.proto.receive_data(data) if isinstance(p, Packet))
        return self.inbox.pop(0)


def test_clients_outside_the_loop_are_served_from_in_place_waits(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker) -> None:
        sub = _ThreadClient(broker, "sub")
        pub = _ThreadClient(broker, "pub")

        def talk() -> None:
            assert isinstance(sub.next(), Connack)
            assert isinstance(pub.next(), Connack)
            sub.send(Subscribe(1, (Subscription(b"t/#", 1),)))
            assert isinstance(sub.next(), Suback)
            for i in range(200):
                started = time.monotonic()
                pub.send(Publish(b"t/x", b"%d" % i, qos=1, packet_id=1 + i % 100))
                assert isinstance(pub.next(), Puback)
                got = sub.next()
                assert isinstance(got, Publish)
                assert got.payload == b"%d" % i
                assert got.packet_id is not None
                sub.send(Puback(got.packet_id))
                assert time.monotonic() - started < STALL

        with trio.fail_after(30):
            await trio.to_thread.run_sync(talk)
        in_place = await _in_place(broker)
        assert in_place.rounds > 0  # the watcher waited in place, and was woken there
        sub.sock.close()
        pub.sock.close()

    _run(tmp_path, body)


def test_round_trips_with_the_clients_in_the_same_loop_never_stall(
    tmp_path: pathlib.Path,
) -> None:
    """The test's clients are trio tasks of the broker's own loop: each waits on its
    socket through trio while the watcher waits in place between rounds."""

    async def body(broker: Broker) -> None:
        sub = await _connected(broker, "sub")
        pub = await _connected(broker, "pub")
        await sub.send(Subscribe(1, (Subscription(b"t/#", 1),)))
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Suback)
        for i in range(100):
            started = trio.current_time()
            await pub.send(Publish(b"t/x", b"%d" % i, qos=1, packet_id=1 + i % 100))
            with trio.fail_after(5):
                ack = await pub.next()
                got = await sub.next()
            assert isinstance(ack, Puback)
            assert isinstance(got, Publish)
            assert got.payload == b"%d" % i
            assert got.packet_id is not None
            await sub.send(Puback(got.packet_id))
            assert trio.current_time() - started < STALL
        pub.close()
        sub.close()

    _run(tmp_path, body)


def test_a_sleep_ends_on_time_while_the_watcher_waits_in_place(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker) -> None:
        c = await _connected(broker, "quiet")
        in_place = await _in_place(broker)
        for _ in range(5):
            woke: list[float] = []

            async def sleeper(woke: list[float] = woke) -> None:
                started = trio.current_time()
                await trio.sleep(0.05)
                woke.append(trio.current_time() - started)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper)
                await trio.testing.wait_all_tasks_blocked()
                waits = in_place.waits
                # A packet that needs no answer, written without a checkpoint: the watcher
                # serves it with every task blocked, then waits in place with trio's next
                # deadline, the sleeper's, as its bound.
                c.raw.sendall(encode(Publish(b"nobody/listens", b"x"), V5))
            assert in_place.waits > waits
            assert woke[0] < STALL
        c.close()

    _run(tmp_path, body)


def test_a_call_from_another_thread_is_run_while_the_watcher_waits_in_place(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker) -> None:
        c = await _connected(broker, "quiet")
        in_place = await _in_place(broker)
        token = trio.lowlevel.current_trio_token()
        for _ in range(5):
            done = trio.Event()
            called_at: list[float] = []

            def call(done: trio.Event = done, called_at: list[float] = called_at) -> None:
                called_at.append(trio.current_time())
                done.set()

            await trio.testing.wait_all_tasks_blocked()
            waits = in_place.waits
            started = trio.current_time()
            c.raw.sendall(encode(Publish(b"nobody/listens", b"x"), V5))

            def call_in(waits: int = waits, call: Callable[[], None] = call) -> None:
                # The watcher, blocked in poll(), can signal nothing: its count of waits
                # begun is watched instead (bounded), then the thread calls in. Only
                # trio's wake-up socket can end that wait before its bound (1 s).
                give_up = time.monotonic() + 5
                while in_place.waits == waits and time.monotonic() < give_up:
                    time.sleep(0.001)
                token.run_sync_soon(call)

            threading.Thread(target=call_in).start()
            with trio.fail_after(5):
                await done.wait()
            assert called_at[0] - started < STALL
            assert in_place.waits > waits
        c.close()

    _run(tmp_path, body)


def test_new_clients_are_accepted_while_the_watcher_waits_in_place(
    tmp_path: pathlib.Path,
) -> None:
    """The broker in its own thread, as deployed: connections accepted and served while
    earlier ones are parked."""
    with running_broker(tmp_path / "data") as broker:
        clients: list[mqtt.Client] = []
        try:
            for i in range(10):
                c = mqtt.Client(CallbackAPIVersion.VERSION2, f"c{i}", protocol=mqtt.MQTTv5)
                connected = threading.Event()

                def on_connect(*_args: Any, connected: threading.Event = connected) -> None:
                    connected.set()

                c.on_connect = on_connect
                started = time.monotonic()
                c.connect(broker.host, broker.port, keepalive=60)
                c.loop_start()
                clients.append(c)
                assert connected.wait(5), "no CONNACK"
                assert time.monotonic() - started < STALL
                # Traffic from the parked ones keeps the watcher waiting in place.
                info = clients[0].publish("nobody/listens", b"x", qos=1)
                info.wait_for_publish(timeout=5)
                assert info.is_published()
        finally:
            for c in clients:
                c.disconnect()
                c.loop_stop()


def test_pingreqs_gather_in_place_and_trio_work_is_on_time(tmp_path: pathlib.Path) -> None:
    """A broker doing nothing but answering PINGREQs lets them gather between rounds
    (``IDLE_GATHER_SECONDS``), paused in place: PINGRESPs still come within a gathering,
    and a sleep of another task, a call from another thread and a new client's CONNECT
    are handled on time during the pauses."""

    async def body(broker: Broker) -> None:
        pinger = _ThreadClient(broker, "pinger")
        in_place = await _in_place(broker)
        gathering = threading.Event()  # the broker has served only PINGREQs long enough
        stop = threading.Event()
        slowest: list[float] = [0.0]

        def ping() -> None:
            assert isinstance(pinger.next(), Connack)
            quiet_from = time.monotonic()
            while not stop.is_set():
                started = time.monotonic()
                pinger.send(Pingreq())
                assert isinstance(pinger.next(), Pingresp)
                took = time.monotonic() - started
                if started - quiet_from > IDLE_QUIET_SECONDS:
                    slowest[0] = max(slowest[0], took)
                    if in_place.pauses:
                        gathering.set()
                time.sleep(0.005)  # faster than one round per gathering: they gather

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, ping)
            with trio.fail_after(10):
                await trio.to_thread.run_sync(gathering.wait)
            # A sleep ends on time.
            started = trio.current_time()
            await trio.sleep(0.05)
            assert trio.current_time() - started < STALL
            # A call from another thread runs on time.
            token = trio.lowlevel.current_trio_token()
            done = trio.Event()
            called: list[float] = []

            def call() -> None:
                called.append(time.monotonic())
                done.set()

            asked = time.monotonic()
            threading.Thread(target=token.run_sync_soon, args=(call,)).start()
            with trio.fail_after(5):
                await done.wait()
            assert called[0] - asked < STALL
            # A new client is answered on time.
            started = trio.current_time()
            late = await _connected(broker, "late")
            assert trio.current_time() - started < STALL
            late.close()
            stop.set()
        assert in_place.pauses > 0
        assert slowest[0] < STALL  # each PINGRESP within a gathering, and some slack
        pinger.sock.close()

    _run(tmp_path, body)


def test_the_next_deadline_is_trios_with_stale_heap_entries() -> None:
    """The wait's bound, read from trio's deadline heap, is what trio's own method gives:
    with no deadline, with a current one first, and with a stale one first (a cancel
    scope whose deadline moved later leaves its earlier entry behind)."""

    async def main() -> None:
        with select.epoll() as parked:
            idle = IdleWait.open(parked.fileno())
            assert idle is not None
            try:
                now = trio.current_time()
                with trio.CancelScope(deadline=now + 100) as far:
                    assert idle._deadline() == now + 100
                    with trio.CancelScope(deadline=now + 10) as near:
                        assert idle._deadline() == now + 10
                        near.deadline = now + 50  # the entry at +10 is stale now
                        assert idle._deadline() == now + 50
                        await trio.lowlevel.checkpoint()
                    assert idle._deadline() == now + 100
                    far.deadline = math.inf
                    assert idle._deadline() == math.inf
                    await trio.lowlevel.checkpoint()
                # Enough stale entries that trio prunes its heap (it makes a new list).
                with trio.CancelScope(deadline=now + 100) as moved:
                    for i in range(3_001):  # (the last one: back to +100)
                        moved.deadline = now + 100 + i % 2
                    await trio.lowlevel.checkpoint()  # trio's loop runs: it prunes
                    assert idle._deadline() == now + 100
                    with trio.CancelScope(deadline=now + 5):  # (in the new list)
                        assert idle._deadline() == now + 5
                        await trio.lowlevel.checkpoint()
            finally:
                idle.close()

    trio.run(main)
