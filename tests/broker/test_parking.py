"""The accept loop's early CONNECT and parked connections (connected, silent, no task
of their own), on trio's MockClock.

The broker is real (its LMDB store in a temp dir); each client is one end of a socket
pair whose other end is handed to the broker the way the accept loop does it, with
the CONNECT (or the part of it a test chooses) already written, so what the broker
reads on accept is known exactly.
"""

from __future__ import annotations

import pathlib
import socket

import pytest
import trio
import trio.testing

from broker.mqtt.encoder import encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.net.parking import DEADLINE_GRAIN_SECONDS, Parking
from broker.net.runtime import Broker
from tests.broker.harness import run_with_broker
from tests.broker.memclient import SockClient

pytestmark = pytest.mark.timeout(60)

V5 = ProtocolVersion.MQTT_5


def test_a_connect_split_across_writes_is_answered(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        c = SockClient(broker, "split", written=7)
        assert len(broker.parking) == 1  # half a CONNECT: parked until the rest comes
        await c.sock.send(c.rest)
        with trio.fail_after(5):
            connack = await c.next()
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.SUCCESS
        assert len(broker.parking) == 1  # answered by the watcher, parked
        c.close()

    run_with_broker(tmp_path, body)


def test_no_connect_within_connect_timeout_closes_a_parked_socket_mqtt_3_1_0_1(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        started = trio.current_time()
        c = SockClient(broker, "slow", written=0)
        assert len(broker.parking) == 1
        with trio.fail_after(100):
            assert await c.next() is None  # closed, nothing sent
        assert trio.current_time() - started == pytest.approx(
            broker.config.mqtt.connect_timeout, abs=0.5
        )
        c.close()  # its task lingers until the client closes
        await trio.testing.wait_all_tasks_blocked()
        assert not broker.connections

    run_with_broker(tmp_path, body)


def test_packets_pipelined_behind_the_connect_are_handled_after_the_connack(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        after = encode(Subscribe(1, (Subscription(b"piped/#", 1),)), V5)
        after += encode(Publish(b"piped/x", b"early"), V5)
        c = SockClient(broker, "piped", after=after)
        assert len(broker.parking) == 0  # answered on accept, not parked: more to read
        with trio.fail_after(5):
            connack, suback, publish = [await c.next() for _ in range(3)]
        assert isinstance(connack, Connack)
        assert isinstance(suback, Suback)
        assert suback.reason_codes == (ReasonCode.GRANTED_QOS_1,)
        assert isinstance(publish, Publish)
        assert publish.payload == b"early"
        c.close()

    run_with_broker(tmp_path, body)


def test_a_parked_client_is_served_without_a_task_and_closed_by_its_disconnect(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        c = SockClient(broker, "quiet")
        with trio.fail_after(5):
            connack = await c.next()
        assert isinstance(connack, Connack)
        assert len(broker.parking) == 1
        await c.send(Subscribe(1, (Subscription(b"served/#", 1),)))
        with trio.fail_after(5):
            assert isinstance(await c.next(), Suback)
        assert len(broker.parking) == 1  # served by the watcher: still parked
        await c.send(Disconnect())
        with trio.fail_after(5):
            assert await c.next() is None
        assert len(broker.parking) == 0
        assert not broker.connections  # closed there, without a task
        c.close()

    run_with_broker(tmp_path, body)


def test_a_parked_client_keeps_alive_with_pingreq_and_stays_parked_mqtt_3_12_4_1(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        c = SockClient(broker, "pinger", keep_alive=20)
        with trio.fail_after(5):
            assert isinstance(await c.next(), Connack)
        received = broker.stats.packets_received
        for _ in range(5):  # 5 x 25 s: well past 1.5 x keep alive from the CONNECT
            await trio.sleep(25)
            await c.send(Pingreq())
            with trio.fail_after(5):
                assert isinstance(await c.next(), Pingresp)
            assert len(broker.parking) == 1  # answered without a task
        assert broker.stats.packets_received == received + 5
        last = trio.current_time()
        with trio.fail_after(1000):
            disconnect = await c.next()  # keep alive counts from the last PINGREQ
        assert isinstance(disconnect, Disconnect)
        assert disconnect.reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT
        assert trio.current_time() - last == pytest.approx(30, abs=0.5)
        c.close()

    run_with_broker(tmp_path, body)


def test_a_pingreq_with_more_behind_it_wakes_the_connection(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        c = SockClient(broker, "ping-and-sub")
        with trio.fail_after(5):
            assert isinstance(await c.next(), Connack)
        await c.sock.send(
            encode(Pingreq(), V5) + encode(Subscribe(1, (Subscription(b"more/#", 0),)), V5)
        )
        with trio.fail_after(5):
            assert isinstance(await c.next(), Pingresp)
            assert isinstance(await c.next(), Suback)
        c.close()

    run_with_broker(tmp_path, body)


def test_the_publishes_read_in_one_round_share_one_commit(tmp_path: pathlib.Path) -> None:
    """Four parked publishers whose QoS 1 PUBLISHes (stored for a persistent subscriber)
    are all readable when the watcher looks: one round, one store batch, four PUBACKs."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        keep = Properties(session_expiry_interval=3600)
        sub = SockClient(broker, "keeper", connect=Connect(V5, "keeper", False, 0, properties=keep))
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Connack)
        await sub.send(Subscribe(1, (Subscription(b"round/#", 1),)))
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Suback)
        pubs = [SockClient(broker, f"pub-{i}") for i in range(4)]
        for p in pubs:
            with trio.fail_after(5):
                assert isinstance(await p.next(), Connack)
        await trio.testing.wait_all_tasks_blocked()
        commits = broker.store_client.commit_seconds.count
        for i, p in enumerate(pubs):  # no checkpoint in between: all ready for one round
            p.raw.sendall(encode(Publish(b"round/x", b"%d" % i, qos=1, packet_id=1), V5))
        for p in pubs:
            with trio.fail_after(5):
                ack = await p.next()
            assert isinstance(ack, Puback)
            assert ack.reason_code is ReasonCode.SUCCESS
        with trio.fail_after(5):
            got = {(await sub.next()).payload for _ in pubs}  # type: ignore[union-attr]
        assert got == {b"0", b"1", b"2", b"3"}
        assert broker.store_client.commit_seconds.count - commits == 1
        assert len(broker.parking) == 5  # nobody needed a task
        for c in (sub, *pubs):
            c.close()

    run_with_broker(tmp_path, body)


def test_a_parked_client_is_served_and_keeps_alive_from_its_last_packet(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        sub = SockClient(broker, "sub", keep_alive=20)
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Connack)
        await sub.send(Subscribe(1, (Subscription(b"park/#", 1),)))
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Suback)
        await sub.send(Pingreq())
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Pingresp)
        await trio.testing.wait_all_tasks_blocked()
        assert len(broker.parking) == 1
        # Parked, it gets what is published to it, and its packets are served there.
        pub = SockClient(broker, "pub")
        with trio.fail_after(5):
            assert isinstance(await pub.next(), Connack)
        await pub.send(Publish(b"park/a", b"to a parked client", qos=1, packet_id=7))
        with trio.fail_after(5):
            got = await sub.next()
        assert isinstance(got, Publish)
        assert got.payload == b"to a parked client"
        assert got.packet_id is not None
        await trio.sleep(10)
        await sub.send(Subscribe(2, (Subscription(b"other/#", 0),)))
        with trio.fail_after(5):
            assert isinstance(await sub.next(), Suback)
        assert len(broker.parking) == 2  # the publisher too
        # Keep alive counts from the last packet.
        last = trio.current_time()
        with trio.fail_after(1000):
            disconnect = await sub.next()
        assert isinstance(disconnect, Disconnect)
        assert disconnect.reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT
        assert trio.current_time() - last == pytest.approx(30, abs=0.5)
        sub.close()
        pub.close()

    run_with_broker(tmp_path, body)


def test_keep_alive_runs_out_while_parked_mqtt_3_1_2_22(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        early = SockClient(broker, "ka-20", keep_alive=20)
        late = SockClient(broker, "ka-100", keep_alive=100)
        start = trio.current_time()
        for c in (early, late):
            with trio.fail_after(5):
                assert isinstance(await c.next(), Connack)
        for c, keep_alive in ((early, 20), (late, 100)):
            with trio.fail_after(1000):
                disconnect = await c.next()
            assert isinstance(disconnect, Disconnect)
            assert disconnect.reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT
            assert trio.current_time() - start == pytest.approx(1.5 * keep_alive, abs=0.5)
            c.close()

    run_with_broker(tmp_path, body)


def test_a_parked_connection_is_taken_over_mqtt_3_1_4_3(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        old = SockClient(broker, "same")
        with trio.fail_after(5):
            assert isinstance(await old.next(), Connack)
        new = SockClient(broker, "same")
        with trio.fail_after(5):
            disconnect = await old.next()
            assert isinstance(await new.next(), Connack)
        assert isinstance(disconnect, Disconnect)
        assert disconnect.reason_code is ReasonCode.SESSION_TAKEN_OVER
        old.close()
        new.close()

    run_with_broker(tmp_path, body)


def test_shutdown_wakes_parked_connections_mqtt_server_shutting_down(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        clients = [SockClient(broker, f"idle-{i}") for i in range(3)]
        for c in clients:
            with trio.fail_after(5):
                assert isinstance(await c.next(), Connack)
        assert len(broker.parking) == 3
        with trio.fail_after(10):
            await broker.shutdown()
        for c in clients:
            disconnect = await c.next()
            assert isinstance(disconnect, Disconnect)
            assert disconnect.reason_code is ReasonCode.SERVER_SHUTTING_DOWN
            c.close()
        assert len(broker.parking) == 0

    run_with_broker(tmp_path, body)


class _Conn:
    def __init__(self, until: float | None = None) -> None:
        self.expired: list[bool] = []
        self.started = trio.Event()
        self.until = until

    def unparked(self, expired: bool) -> None:
        self.expired.append(expired)

    def serve(self, now: float) -> int:
        raise RuntimeError("serving failed")  # the watcher wakes the connection

    def deadline(self) -> float | None:
        return self.until

    async def run(self) -> None:
        self.started.set()

    def abandoned(self) -> None:
        self.expired.append(True)


def _nothing() -> None:
    pass


def test_parking_itself_unpark_close_and_sockets_it_cannot_watch() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            parking = Parking(lambda conn: nursery.start_soon(conn.run), _nothing, _nothing)
            a, b = socket.socketpair()
            conn = _Conn()
            assert not parking.park(conn, -1, None)  # not a descriptor
            assert parking.park(conn, a.fileno(), trio.current_time() + 5)
            assert parking.unpark(conn, a.fileno())
            assert not parking.unpark(conn, a.fileno())  # once
            await conn.started.wait()
            assert conn.expired == [False]
            left = _Conn()
            assert parking.park(left, b.fileno(), None)
            parking.close()
            parking.close()
            assert left.expired == [True]  # abandoned: closed without being served
            assert not parking.park(_Conn(), b.fileno(), None)
            a.close()
            b.close()

    trio.run(main)


def test_deadlines_of_unparked_connections_do_not_pile_up() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            parking = Parking(lambda conn: nursery.start_soon(conn.run), _nothing, _nothing)
            nursery.start_soon(parking.run)
            a, b = socket.socketpair()
            keeper = _Conn(trio.current_time() + 50)
            assert parking.park(keeper, b.fileno(), trio.current_time() + 20)  # then moved
            for _ in range(1000):  # parked and woken before their deadline, many times
                conn = _Conn()
                assert parking.park(conn, a.fileno(), trio.current_time() + 10)
                assert parking.unpark(conn, a.fileno())
            assert len(parking._deadlines) <= 2 * len(parking) + 65
            with trio.fail_after(100):
                await keeper.started.wait()  # the live deadline still fires
            assert keeper.expired == [True]
            assert trio.current_time() == pytest.approx(50, abs=0.5)
            nursery.cancel_scope.cancel()
        parking.close()
        a.close()
        b.close()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))


class _Timed(_Conn):
    def __init__(self, until: float) -> None:
        super().__init__(until)
        self.at: list[float] = []

    def unparked(self, expired: bool) -> None:
        super().unparked(expired)
        self.at.append(trio.current_time())


def test_deadlines_within_one_grain_are_handled_in_one_wake_up() -> None:
    grain = DEADLINE_GRAIN_SECONDS

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            parking = Parking(lambda conn: nursery.start_soon(conn.run), _nothing, _nothing)
            nursery.start_soon(parking.run)
            # Twenty deadlines spread inside one grain (40 grains from the start), and one
            # in the grain after it.
            start = 40 * grain
            spread = [start + grain * (i + 1) / 21 for i in range(20)]
            pairs = [socket.socketpair() for _ in range(21)]
            conns = [_Timed(d) for d in [*spread, start + 1.5 * grain]]
            for conn, (a, _b) in zip(conns, pairs, strict=True):
                assert parking.park(conn, a.fileno(), conn.until)
            with trio.fail_after(100):
                for conn in conns:
                    await conn.started.wait()
            assert all(conn.expired == [True] for conn in conns)
            # The twenty at one time: the grain's end, none of them early or a grain late.
            at = {conn.at[0] for conn in conns[:20]}
            assert len(at) == 1  # one wake-up
            assert at.pop() == pytest.approx(start + grain)
            assert conns[20].at == [pytest.approx(start + 2 * grain)]
            nursery.cancel_scope.cancel()
        parking.close()
        for a, b in pairs:
            a.close()
            b.close()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))


class _Broken(_Conn):
    def unparked(self, expired: bool) -> None:
        raise RuntimeError("a bug")


def test_a_bug_waking_one_connection_closes_it_and_spares_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            parking = Parking(lambda conn: nursery.start_soon(conn.run), _nothing, _nothing)
            nursery.start_soon(parking.run)
            a, b = socket.socketpair()
            c, d = socket.socketpair()
            broken, fine = _Broken(), _Conn()
            assert parking.park(broken, a.fileno(), None)
            assert parking.park(fine, c.fileno(), None)
            b.send(b"x")
            await trio.testing.wait_all_tasks_blocked()  # the watcher woke the broken one
            d.send(b"y")
            with trio.fail_after(5):
                await fine.started.wait()
            assert broken.expired == [True]  # abandoned: closed, not served
            assert not broken.started.is_set()
            assert len(parking) == 0
            nursery.cancel_scope.cancel()
        parking.close()
        for s in (a, b, c, d):
            s.close()

    trio.run(main)
    assert "internal error while serving a parked connection" in caplog.text
    assert "internal error while waking a parked connection" in caplog.text
