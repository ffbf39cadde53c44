"""Time-dependent broker logic on trio's MockClock (virtual time, no sleeps).

The broker's connection handler takes any trio stream, so these tests drive a
real ``Broker`` (with its LMDB store in a temp dir) through in-memory stream
pairs. ``autojump_threshold`` jumps the virtual clock only after the loop has
been idle for a moment of real time, so store commits finish first and every
timer fires at its exact virtual instant.
"""

from __future__ import annotations

import pathlib

import pytest
import trio
import trio.testing

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Disconnect,
    Packet,
    Publish,
    Will,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.net.runtime import Broker
from tests.broker.harness import run_with_broker
from tests.broker.memclient import MemClient

pytestmark = pytest.mark.timeout(60)

V5 = ProtocolVersion.MQTT_5


def test_will_delay_is_honoured_to_the_second_mqtt_3_1_2_8(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        watcher = await MemClient.connect(broker, "watcher")
        await watcher.subscribe(b"will/t")
        will = Will(b"will/t", b"late", 0, False, Properties(will_delay_interval=60))
        client = await MemClient.connect(
            broker, "delayed", will=will, properties=Properties(session_expiry_interval=3600)
        )
        await client.abort()
        gone_at = trio.current_time()
        with trio.fail_after(600):
            msg = await watcher.next()
        assert isinstance(msg, Publish)
        assert msg.payload == b"late"
        assert trio.current_time() - gone_at == pytest.approx(60, abs=0.5)

    run_with_broker(tmp_path, body)


def test_will_sent_when_session_expires_before_the_delay(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        watcher = await MemClient.connect(broker, "watcher")
        await watcher.subscribe(b"will/t")
        will = Will(b"will/t", b"at-expiry", 0, False, Properties(will_delay_interval=600))
        client = await MemClient.connect(
            broker, "short", will=will, properties=Properties(session_expiry_interval=30)
        )
        await client.abort()
        gone_at = trio.current_time()
        with trio.fail_after(3600):
            msg = await watcher.next()
        assert isinstance(msg, Publish)
        assert trio.current_time() - gone_at == pytest.approx(30, abs=0.5)
        assert broker.hub.sessions.get("short") is None  # the session ended with it

    run_with_broker(tmp_path, body)


def test_reconnect_within_will_delay_cancels_the_will_mqtt_3_1_3_9(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        watcher = await MemClient.connect(broker, "watcher")
        await watcher.subscribe(b"will/t")
        will = Will(b"will/t", b"never", 0, False, Properties(will_delay_interval=60))
        expiry = Properties(session_expiry_interval=3600)
        client = await MemClient.connect(broker, "back", will=will, properties=expiry)
        await client.abort()
        await trio.sleep(59)
        await MemClient.connect(broker, "back", clean_start=False, properties=expiry)
        with trio.move_on_after(3600) as waited:
            await watcher.next()
        assert waited.cancelled_caught  # nothing arrived in an hour of virtual time

    run_with_broker(tmp_path, body)


def test_session_expiry_ends_the_session_mqtt_4_1_0_2(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        expiry = Properties(session_expiry_interval=120)
        client = await MemClient.connect(broker, "exp", properties=expiry)
        await client.subscribe(b"x/#")
        await client.send(Disconnect())
        await trio.sleep(119)
        assert broker.hub.sessions.get("exp") is not None
        await trio.sleep(2)
        assert broker.hub.sessions.get("exp") is None
        assert broker.hub.router.index.subscriptions == 0

    run_with_broker(tmp_path, body)


def test_keep_alive_allows_one_and_a_half_times_the_interval_mqtt_3_1_2_22(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        client = await MemClient.connect(broker, "ka", keep_alive=10)
        start = trio.current_time()
        with trio.fail_after(600):
            packet = await client.next()
        assert isinstance(packet, Disconnect)
        assert packet.reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT
        assert trio.current_time() - start == pytest.approx(15, abs=0.5)

    run_with_broker(tmp_path, body)


def test_a_packet_trickled_byte_by_byte_does_not_keep_alive_mqtt_3_1_2_22(
    tmp_path: pathlib.Path,
) -> None:
    """Only complete packets count: a byte every second of a PUBLISH that never ends is
    disconnected 1.5 x keep alive after the last complete packet."""

    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        client = await MemClient.connect(broker, "trickle", keep_alive=10)
        start = trio.current_time()
        # A PUBLISH announcing 100 bytes, sent one byte a second.
        data = bytes([0x30, 100, 0, 1, 0x74]) + b"x" * 97
        got: list[Packet] = []

        async def read() -> None:
            got.append(await client.next())

        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                for byte in data:
                    if got:
                        break
                    await client.stream.send_all(bytes([byte]))
                    await trio.sleep(1)
        assert isinstance(got[0], Disconnect)
        assert got[0].reason_code is ReasonCode.KEEP_ALIVE_TIMEOUT
        assert trio.current_time() - start == pytest.approx(15, abs=1.5)

    run_with_broker(tmp_path, body)


def test_connect_timeout_closes_a_silent_connection(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        client_side, server_side = trio.testing.memory_stream_pair()
        broker.spawn_connection(server_side)
        start = trio.current_time()
        with trio.fail_after(600):
            assert await client_side.receive_some(10) == b""
        assert trio.current_time() - start == pytest.approx(10, abs=0.5)

    run_with_broker(tmp_path, body)


def test_expiry_raised_on_disconnect_keeps_the_session(tmp_path: pathlib.Path) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        client = await MemClient.connect(
            broker, "chg", properties=Properties(session_expiry_interval=10)
        )
        await client.send(Disconnect(properties=Properties(session_expiry_interval=300)))
        await trio.sleep(299)
        assert broker.hub.sessions.get("chg") is not None
        await trio.sleep(2)
        assert broker.hub.sessions.get("chg") is None

    run_with_broker(tmp_path, body)


def test_expired_messages_are_never_delivered_and_lifetime_is_forwarded_mqtt_3_3_2_5_6(
    tmp_path: pathlib.Path,
) -> None:
    async def body(broker: Broker, clock: trio.testing.MockClock) -> None:
        pub = await MemClient.connect(broker, "exp-pub")
        for topic, lifetime in ((b"exp/short", 10), (b"exp/long", 100)):
            await pub.send(
                Publish(
                    topic, b"x", 0, True, properties=Properties(message_expiry_interval=lifetime)
                )
            )
        await trio.sleep(30)
        sub = await MemClient.connect(broker, "exp-sub")
        await sub.subscribe(b"exp/#")
        msg = await sub.next()
        assert isinstance(msg, Publish)
        assert msg.topic == b"exp/long"
        assert msg.properties.message_expiry_interval == 70  # 100 s minus 30 s waited
        with trio.move_on_after(3600) as waited:
            await sub.next()
        assert waited.cancelled_caught  # the expired one never comes

    run_with_broker(tmp_path, body)
