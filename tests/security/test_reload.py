"""Reloading [auth] through ``Broker.apply_config`` (what SIGHUP calls): the password and
ACL files are read again atomically; a broken file keeps the old state; connected and
offline sessions lose what the new ACL no longer grants from their next operation,
including copies queued before the change (session resume after the ACL was tightened)."""

from __future__ import annotations

import logging
import pathlib
from dataclasses import replace

import pytest
import trio

from broker.config import BrokerConfig, load_config
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Packet,
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
from broker.security.passwords import hash_password
from tests.broker.memclient import SockClient

pytestmark = pytest.mark.timeout(60)
V5 = ProtocolVersion.MQTT_5


def write_config(tmp_path: pathlib.Path) -> BrokerConfig:
    cfg = tmp_path / "jetmq.toml"
    cfg.write_text(
        '[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'[storage]\ndata_dir = "{tmp_path / "data"}"\n'
        f'[auth]\npassword_file = "{tmp_path / "passwd"}"\nacl_file = "{tmp_path / "acl"}"\n'
    )
    return load_config(cfg)


def users(tmp_path: pathlib.Path, *names: str) -> None:
    (tmp_path / "passwd").write_text(
        "".join(f"{n}:{hash_password(n + '-pw', iterations=1000)}\n" for n in names)
    )


def hello(client_id: str, user: str, *, clean: bool = True) -> Connect:
    return Connect(
        V5,
        client_id,
        clean,
        0,
        username=user,
        password=f"{user}-pw".encode(),
        properties=Properties(session_expiry_interval=3600),
    )


async def packet(client: SockClient, seconds: float = 10) -> Packet | None:
    with trio.fail_after(seconds):
        return await client.next()


async def nothing(client: SockClient, seconds: float = 0.3) -> bool:
    with trio.move_on_after(seconds):
        await client.next()
        return False
    return True


def test_reload_tightens_the_acl_for_connected_and_resumed_sessions(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    users(tmp_path, "sub", "pub", "watch")
    acl = tmp_path / "acl"
    watch = "user watch\ntopic read #\n"
    acl.write_text("user sub\ntopic read feed/#\nuser pub\ntopic write feed/#\n" + watch)
    config = write_config(tmp_path)

    async def main() -> None:
        broker = await Broker.open(config)
        try:
            async with trio.open_nursery() as nursery:
                broker.attach(nursery)
                await scenario(broker)
                nursery.cancel_scope.cancel()
        finally:
            await broker.close()

    async def scenario(broker: Broker) -> None:
        sub = SockClient(broker, "sub-1", connect=hello("sub-1", "sub", clean=True))
        assert isinstance(connack := await packet(sub), Connack), connack
        assert connack.reason_code is ReasonCode.SUCCESS
        await sub.send(Subscribe(1, (Subscription(b"feed/#", 1),)))
        assert isinstance(suback := await packet(sub), Suback)
        assert suback.reason_codes == (ReasonCode.GRANTED_QOS_1,)
        pub = SockClient(broker, "pub-1", connect=hello("pub-1", "pub"))
        assert isinstance(await packet(pub), Connack)
        await pub.send(Publish(b"feed/a", b"before", 1, packet_id=1))
        assert isinstance(await packet(pub), Puback)
        got = await packet(sub)
        assert isinstance(got, Publish)
        assert got.payload == b"before"
        await sub.send(Puback(got.packet_id or 0))
        sub.close()  # offline; the session stays (expiry 3600)
        await pub.send(Publish(b"feed/b", b"queued while away", 1, packet_id=2))
        assert isinstance(await packet(pub), Puback)

        # A client whose will is on feed/... connects while that is allowed.
        will = Will(b"feed/will", b"gone", 0, False)
        willer = SockClient(broker, "willer", connect=replace(hello("willer", "pub"), will=will))
        assert isinstance(await packet(willer), Connack)
        watcher = SockClient(broker, "watcher", connect=hello("watcher", "watch"))
        assert isinstance(await packet(watcher), Connack)
        await watcher.send(Subscribe(1, (Subscription(b"#", 0),)))
        assert isinstance(await packet(watcher), Suback)

        # Tighten: sub may no longer read feed/#, pub may write only other/#.
        acl.write_text("user sub\ntopic read other/#\nuser pub\ntopic write other/#\n" + watch)
        assert broker.apply_config(load_config_again(broker)) == []
        willer.close()  # its will may no longer be published
        assert await nothing(watcher, 0.5)
        await pub.send(Publish(b"feed/c", b"after", 1, packet_id=3))
        ack = await packet(pub)
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.NOT_AUTHORIZED  # from its next operation

        again = SockClient(broker, "sub-1", connect=hello("sub-1", "sub", clean=False))
        resumed = await packet(again)
        assert isinstance(resumed, Connack)
        assert resumed.session_present
        assert await nothing(again)  # the copy queued before the change is not sent

        # A broken ACL file: the old one stays, the reason is logged.
        acl.write_text("grant everything\n")
        with caplog.at_level(logging.ERROR, logger="jetmq.auth"):
            broker.apply_config(load_config_again(broker))
        assert "line 1: unknown keyword 'grant'" in caplog.text
        await pub.send(Publish(b"other/x", b"still allowed", 1, packet_id=4))
        ack = await packet(pub)
        assert isinstance(ack, Puback)
        assert ack.reason_code is ReasonCode.SUCCESS
        seen = await packet(watcher)
        assert isinstance(seen, Publish)
        assert seen.payload == b"still allowed"

        # The password file is read again too: a user added is let in.
        with trio.fail_after(10):
            refused = SockClient(broker, "new-1", connect=hello("new-1", "newcomer"))
            got = await packet(refused)
            assert isinstance(got, Connack)
            assert got.reason_code is ReasonCode.BAD_USER_NAME_OR_PASSWORD
            users(tmp_path, "sub", "pub", "newcomer")
            acl.write_text("user newcomer\ntopic read x\n" + watch)
            broker.apply_config(load_config_again(broker))
            welcome = SockClient(broker, "new-2", connect=hello("new-2", "newcomer"))
            got = await packet(welcome)
            assert isinstance(got, Connack)
            assert got.reason_code is ReasonCode.SUCCESS
        for client in (again, pub, refused, welcome, watcher):
            client.close()

    def load_config_again(broker: Broker) -> BrokerConfig:
        return load_config(tmp_path / "jetmq.toml")

    trio.run(main)
