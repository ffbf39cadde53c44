"""The seams later features plug into, through a real broker and real clients: internal
recipients subscribing through the radix index, system-topic handlers seeing a PUBLISH
(and a will) before routing, and the configuration swapped while running."""

from __future__ import annotations

import pathlib

import pytest
import trio
import trio.testing

from broker.config import load_config
from broker.core.message import AppMessage
from broker.core.sessions import Session
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    Will,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.net.runtime import Broker
from broker.security.auth import PeerInfo
from tests.broker.harness import make_config, run_with_broker
from tests.broker.memclient import MemClient, SockClient

pytestmark = pytest.mark.timeout(60)

V5 = ProtocolVersion.MQTT_5


class Collector:
    """An internal recipient, or a system-topic handler, that keeps what it gets."""

    def __init__(self, answer: ReasonCode = ReasonCode.SUCCESS) -> None:
        self.got: list[tuple[bytes, bytes, int, tuple[int, ...]]] = []
        self.publishers: list[str | None] = []
        self.answer = answer
        self.arrived = trio.Event()

    def deliver(self, msg: AppMessage, qos: int, retain: bool, sub_ids: tuple[int, ...]) -> None:
        self.got.append((msg.topic, msg.payload, qos, sub_ids))
        self.arrived.set()

    def publish(self, msg: AppMessage, session: Session | None) -> ReasonCode:
        self.got.append((msg.topic, msg.payload, msg.qos, ()))
        self.arrived.set()
        self.publishers.append(session.client_id if session is not None else None)
        return self.answer


def test_an_internal_recipient_gets_what_matches_its_filters(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        hub = broker.hub
        inside = Collector()
        num = hub.add_recipient(inside)
        assert hub.subscribe_internal(num, b"sensors/#", 1, sub_id=7)
        assert hub.subscribe_internal(num, b"sensors/+/t", 0)
        pub = await MemClient.connect(broker, "rcp-pub")
        await pub.send(Publish(b"sensors/a/t", b"21.5", 1, packet_id=1))
        ack = await pub.next()
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.SUCCESS  # a matching subscriber, not 0x10
        await pub.send(Publish(b"other/x", b"no"))
        with trio.fail_after(30):
            await inside.arrived.wait()
        # One delivery for two overlapping filters: max QoS, the identifier once.
        assert inside.got == [(b"sensors/a/t", b"21.5", 1, (7,))]
        hub.remove_recipient(num)
        await pub.send(Publish(b"sensors/a/t", b"again", 1, packet_id=2))
        ack = await pub.next()
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS
        assert len(inside.got) == 1

    run_with_broker(tmp_path, body)


def test_a_system_topic_handler_sees_publishes_before_routing(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        handler = Collector(ReasonCode.QUOTA_EXCEEDED)
        broker.hub.systopics.register(b"$JS/API/", handler)
        watcher = await MemClient.connect(broker, "sys-watch")
        await watcher.subscribe(b"#")
        await watcher.subscribe(b"$JS/#")
        pub = await MemClient.connect(broker, "sys-pub")
        await pub.send(Publish(b"$JS/API/INFO", b"{}", 1, packet_id=1))
        ack = await pub.next()
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.QUOTA_EXCEEDED  # the handler's answer
        assert handler.got == [(b"$JS/API/INFO", b"{}", 1, ())]
        assert handler.publishers == ["sys-pub"]
        # A reserved topic no handler claims is still refused.
        await pub.send(Publish(b"$JS/OTHER", b"x", 1, packet_id=2))
        ack = await pub.next()
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.TOPIC_NAME_INVALID
        # Nothing reached the subscribers: a marker published after arrives first.
        await pub.send(Publish(b"plain/marker", b"m"))
        got = await watcher.next()
        assert isinstance(got, Publish)
        assert got.topic == b"plain/marker"

    run_with_broker(tmp_path, body)


def test_a_will_on_a_claimed_system_topic_goes_to_its_handler(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        handler = Collector()
        broker.hub.systopics.register(b"$SYS/lwt/", handler)
        client = await MemClient.connect(broker, "sys-will", will=Will(b"$SYS/lwt/x", b"gone"))
        await client.abort()
        with trio.fail_after(30):
            await handler.arrived.wait()
        assert handler.got == [(b"$SYS/lwt/x", b"gone", 0, ())]
        assert handler.publishers == [None]

    run_with_broker(tmp_path, body)


def test_system_topic_prefixes_start_with_a_dollar(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        with pytest.raises(ValueError, match="start with"):
            broker.hub.systopics.register(b"JS/API/", Collector())

    run_with_broker(tmp_path, body)


def test_a_new_configuration_applies_to_what_comes_next(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        before = await MemClient.connect(broker, "cfg-before")
        new = make_config(tmp_path / "data", receive_maximum=7)
        not_applied = broker.apply_config(new)
        assert not_applied == []
        assert broker.hub.config is new
        after = await MemClient.connect(broker, "cfg-after")
        assert after.connack_properties.receive_maximum == 7
        assert before.connack_properties.receive_maximum != 7
        # What only a restart can change is named, and kept.
        moved = load_config(
            None,
            {"listener": {"listen": ["127.0.0.1:1"]}, "storage": {"data_dir": str(tmp_path / "x")}},
        )
        assert sorted(broker.apply_config(moved)) == ["listener", "storage"]
        assert broker.config.storage.data_dir == new.storage.data_dir
        await before.send(Disconnect())

    run_with_broker(tmp_path, body)


def test_a_reload_applies_the_queue_limits(tmp_path: pathlib.Path) -> None:
    """``[sessions]`` limits read per queued copy follow a reload: a lower
    ``max_queued_messages`` drops the oldest copies beyond it for an offline session."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        keep = Properties(session_expiry_interval=3600)
        sub = await MemClient.connect(broker, "q-reload", properties=keep)
        await sub.send(Subscribe(1, (Subscription(b"q/r", 1),)))
        assert isinstance(await sub.next(), Suback)
        await sub.send(Disconnect())
        new = make_config(
            tmp_path / "data", sessions={"max_queued_messages": 2, "max_outbound_queue": 99}
        )
        assert broker.apply_config(new) == []
        assert broker.settings.max_outbound_queue == 99
        pub = await MemClient.connect(broker, "q-pub")
        for i in range(5):
            await pub.send(Publish(b"q/r", b"%d" % i, qos=1, packet_id=i + 1))
            assert isinstance(await pub.next(), Puback)
        back = await MemClient.connect(broker, "q-reload", clean_start=False, properties=keep)
        got = []
        for _ in range(2):
            p = await back.next()
            assert isinstance(p, Publish)
            got.append(p.payload)
            assert p.packet_id is not None
            await back.send(Puback(p.packet_id))
        assert got == [b"3", b"4"]
        assert broker.hub.queues.dropped == 3
        await back.send(Disconnect())
        await pub.send(Disconnect())

    run_with_broker(tmp_path, body)


class SlowAuth:
    """Accepts user ``ok`` at once; holds everyone else until ``release`` is set, then
    refuses them (a password check that takes its time)."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.asked: list[str | None] = []

    async def authenticate(self, connect: Connect, peer: PeerInfo) -> tuple[ReasonCode, str] | None:
        self.asked.append(connect.username)
        if connect.username == "ok":
            return None
        await self.release.wait()
        return ReasonCode.BAD_USER_NAME_OR_PASSWORD, "no such user"

    def access_for(self, client_id: str, username: str | None) -> None:
        return None  # no ACL


def test_authentication_runs_off_the_accept_loop(tmp_path: pathlib.Path) -> None:
    """A CONNECT whose check takes its time holds only its own connection: another client
    accepted meanwhile gets its CONNACK (the check runs in the connection's task)."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        auth = SlowAuth()
        broker.authenticator = auth
        slow = SockClient(broker, "slow", connect=Connect(V5, "slow", username="who"))
        fast = SockClient(broker, "fast", connect=Connect(V5, "fast", username="ok"))
        with trio.fail_after(30):
            connack = await fast.next()
            assert isinstance(connack, Connack)
            assert connack.reason_code is ReasonCode.SUCCESS
            with trio.move_on_after(5) as waited:  # virtual time: jumps once all is idle
                await slow.next()
            assert waited.cancelled_caught  # the slow check still holds its client
            auth.release.set()
            refused = await slow.next()
        assert isinstance(refused, Connack)
        assert refused.reason_code is ReasonCode.BAD_USER_NAME_OR_PASSWORD
        assert sorted(auth.asked, key=str) == ["ok", "who"]
        fast.close()
        slow.close()

    run_with_broker(tmp_path, body)
