"""Durability: kill -9 the broker under QoS 1/2 load, restart it on the same data dir.

Contract (ARCHITECTURE.md §5): every PUBACKed / PUBCOMPed message reaches the
persistent-session subscriber, none twice at QoS 2, and retained messages and
subscriptions survive. The subscriber is a real client with its own QoS 2
receiver state, kept across connections as a client library would.
"""

from __future__ import annotations

import os
import pathlib
import random
import socket
import threading
from dataclasses import dataclass, field

import pytest

from broker.mqtt.packets import (
    Disconnect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Subscription,
)
from broker.mqtt.properties import Properties
from tests.broker.harness import BrokerProcess, refused_at_start, serve_command
from tests.broker.rawclient import Closed, RawClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROUNDS = 4
EXPIRY = Properties(session_expiry_interval=3600)


@dataclass
class Subscriber:
    """Counts deliveries to the application; QoS 2 state survives reconnects."""

    properties: Properties = EXPIRY  # its CONNECT's
    delivered: dict[bytes, int] = field(default_factory=dict)
    awaiting_pubrel: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def run(self, port: int, first: bool) -> None:
        try:
            with RawClient(port) as c:
                connack = c.connect("durable-sub", clean_start=first, properties=self.properties)
                if first:
                    c.send(Subscribe(1, (Subscription(b"load/#", 2),)))
                    c.next()
                else:
                    assert connack.session_present, "the persistent session was lost"
                self.ready.set()
                while not self.stop.is_set():
                    try:
                        packet = c.next(timeout=0.2)
                    except TimeoutError:
                        continue
                    self._handle(c, packet)
        except (Closed, OSError):
            return

    def _handle(self, c: RawClient, packet: object) -> None:
        if isinstance(packet, Publish):
            pid = packet.packet_id
            if packet.qos == 2:
                assert pid is not None
                if pid not in self.awaiting_pubrel:  # a new message (MQTT 4.3.3 method B)
                    self.awaiting_pubrel.add(pid)
                    self._deliver(packet.payload)
                c.send(Pubrec(pid))
            else:
                self._deliver(packet.payload)
                if packet.qos == 1:
                    assert pid is not None
                    c.send(Puback(pid))
        elif isinstance(packet, Pubrel):
            self.awaiting_pubrel.discard(packet.packet_id)
            c.send(Pubcomp(packet.packet_id))

    def _deliver(self, payload: bytes) -> None:
        with self.changed:
            self.delivered[payload] = self.delivered.get(payload, 0) + 1
            self.changed.notify_all()

    def wait_for(self, payloads: set[bytes], timeout: float) -> set[bytes]:
        """Wait until every payload was delivered; return those still missing."""
        with self.changed:
            self.changed.wait_for(lambda: payloads <= self.delivered.keys(), timeout)
            return payloads - self.delivered.keys()


@dataclass
class Publisher:
    levels: tuple[int, ...] = (1, 2)  # the QoS of its messages, taking turns
    window: int = 20  # messages in flight
    acked: dict[bytes, int] = field(default_factory=dict)  # payload -> QoS
    next_n: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, port: int, round_no: int) -> None:
        inflight: dict[int, tuple[bytes, int]] = {}
        try:
            with RawClient(port) as c:
                c.connect(f"load-pub-{round_no}")
                pid = 0
                while not self.stop.is_set():
                    while len(inflight) < self.window and not self.stop.is_set():
                        pid = pid % 65_535 + 1
                        qos = self.levels[self.next_n % len(self.levels)]
                        payload = f"m{self.next_n}".encode()
                        self.next_n += 1
                        inflight[pid] = (payload, qos)
                        c.send(Publish(b"load/t", payload, qos, packet_id=pid))
                    packet = c.next(timeout=5)
                    # Only Success obliges delivery: the subscriber is subscribed before
                    # publishing starts, so 0x10 (no matching subscribers) would be a bug.
                    if isinstance(packet, Puback):
                        payload, qos = inflight.pop(packet.packet_id)
                        assert packet.reason_code == 0, packet
                        self.acked[payload] = qos
                    elif isinstance(packet, Pubrec):
                        assert packet.reason_code == 0, packet
                        c.send(Pubrel(packet.packet_id))
                    elif isinstance(packet, Pubcomp):
                        payload, qos = inflight.pop(packet.packet_id)
                        self.acked[payload] = qos
                c.send(Disconnect())
        except (Closed, OSError, TimeoutError):
            return


@pytest.mark.parametrize(
    ("levels", "window", "receive_maximum"),
    [
        pytest.param((1, 2), 20, None, id="qos1-and-2"),
        # QoS 1 only, 100 in flight: chunks of PUBLISHes to one topic (stored runs); the
        # subscriber takes 5 at a time, so most acknowledged messages wait on disk.
        pytest.param((1,), 100, 5, id="qos1-runs-slow-subscriber"),
    ],
)
def test_kill_9_under_load_loses_nothing_acknowledged(
    tmp_path: pathlib.Path, levels: tuple[int, ...], window: int, receive_maximum: int | None
) -> None:
    rng = random.Random(20261121)
    data = tmp_path / "data"
    sub = Subscriber(Properties(session_expiry_interval=3600, receive_maximum=receive_maximum))
    # A queue long enough for everything the slow subscriber lags behind (the default
    # 1,000 would drop copies, by design).
    config = tmp_path / "jetmq.toml"
    config.write_text("[sessions]\nmax_queued_messages = 1000000\n")
    pub = Publisher(levels, window)
    retained_payload = b"retained-before-crash"
    for round_no in range(ROUNDS):
        broker = BrokerProcess(data, config=config)
        broker.start()
        if round_no == 0:
            with RawClient(broker.port) as r:
                r.connect("retainer")
                r.send(Publish(b"keep/r", retained_payload, 1, True, packet_id=1))
                assert isinstance(r.next(), Puback)
        sub.stop.clear()
        pub.stop.clear()
        sub.ready.clear()
        threads = [
            threading.Thread(target=sub.run, args=(broker.port, round_no == 0)),
            threading.Thread(target=pub.run, args=(broker.port, round_no)),
        ]
        threads[0].start()
        assert sub.ready.wait(30), "the subscriber did not get its session back"
        threads[1].start()
        threading.Event().wait(rng.uniform(0.3, 1.2))  # load for a random while, then crash
        broker.kill9()
        pub.stop.set()
        sub.stop.set()
        for t in threads:
            t.join(timeout=30)
    # Final round: no load; let the subscriber drain what the broker kept.
    broker = BrokerProcess(data, config=config)
    broker.start()
    try:
        sub.stop.clear()
        drain = threading.Thread(target=sub.run, args=(broker.port, False))
        drain.start()
        missing = sub.wait_for(set(pub.acked), timeout=10)
        sub.stop.set()
        drain.join(timeout=30)
        with RawClient(broker.port) as late:
            late.connect("late")
            late.send(Subscribe(1, (Subscription(b"keep/#", 1),)))
            late.next()
            assert late.expect_publish().payload == retained_payload
    finally:
        broker.terminate()
    assert pub.acked, "the publisher never got an acknowledgement"
    assert not missing, (
        f"{len(missing)} acknowledged messages were lost, e.g. {sorted(missing)[:5]}"
    )
    twice = [p for p, n in sub.delivered.items() if n > 1 and pub.acked.get(p) == 2]
    assert not twice, f"QoS 2 messages delivered twice: {twice[:5]}"


@pytest.mark.timeout(60)
def test_sigterm_disconnects_with_0x8b_publishes_wills_and_closes_the_store(
    tmp_path: pathlib.Path,
) -> None:
    from broker.mqtt.packets import Will
    from broker.mqtt.reason_codes import ReasonCode

    data = tmp_path / "data"
    broker = BrokerProcess(data)
    broker.start()
    with RawClient(broker.port) as watcher, RawClient(broker.port) as leaving:
        watcher.connect("shutdown-watcher")
        watcher.send(Subscribe(1, (Subscription(b"bye/#", 1),)))
        watcher.next()
        leaving.connect("shutdown-will", will=Will(b"bye/will", b"server went away", 1, True))
        leaving.send(Publish(b"bye/retained", b"kept", 1, True, packet_id=1))
        assert isinstance(leaving.next(), Puback)
        assert watcher.expect_publish().payload == b"kept"
        assert broker.terminate() == 0
        disconnect = leaving.expect_disconnect()
        assert disconnect is not None
        assert disconnect.reason_code is ReasonCode.SERVER_SHUTTING_DOWN
    # The will was published as a retained message before the store closed.
    broker = BrokerProcess(data)
    broker.start()
    try:
        with RawClient(broker.port) as late:
            late.connect("after-restart")
            late.send(Subscribe(1, (Subscription(b"bye/#", 1),)))
            late.next()
            got = {late.expect_publish().payload for _ in range(2)}
            assert got == {b"kept", b"server went away"}
    finally:
        broker.terminate()


@pytest.mark.timeout(60)
def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: pathlib.Path) -> None:
    """``jetmq serve`` on a port another socket holds: a one-line error naming the cause and
    exit status 1, no traceback (as mosquitto does)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        line = refused_at_start(serve_command(tmp_path / "data", holder.getsockname()[1]))
    assert "Address already in use" in line


@pytest.mark.timeout(60)
def test_a_damaged_store_is_one_line_and_exit_1(tmp_path: pathlib.Path) -> None:
    """A data directory whose data file is cut short, or is not an LMDB file: refused at
    start with the cause in one line and exit status 1 — not a traceback, not SIGBUS."""
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    broker.start()
    assert broker.terminate() == 0
    size = (data / "data.mdb").stat().st_size
    for damage, cause in (
        (lambda f: os.truncate(f, size // 2), "but its committed tree has page"),
        (lambda f: f.write_bytes(b"not a store" * 1000), "MDB_INVALID"),
    ):
        damage(data / "data.mdb")
        assert cause in refused_at_start(serve_command(data))


@pytest.mark.timeout(60)
def test_a_second_broker_on_the_same_data_dir_is_refused(tmp_path: pathlib.Path) -> None:
    """Two brokers writing one store would overwrite each other's messages: the second is
    refused at start (one line, exit 1) while the first serves on."""
    first = BrokerProcess(tmp_path / "data")
    first.start()
    try:
        line = refused_at_start(serve_command(tmp_path / "data"))
        assert line == (
            f"jetmq: cannot start: the store in {tmp_path / 'data'} is in use by another"
            f" process (pid {first.proc.pid if first.proc else 0})"
        )
        with RawClient(first.port) as c:  # the first one is untouched
            c.connect("still-served")
    finally:
        assert first.terminate() == 0
