"""``reconnect=True``: the client outlives a broker restart; without it, the loss ends it."""

from __future__ import annotations

import pathlib
import socket
import threading

import anyio
import pytest

from broker.config import load_config
from broker.mqtt.reason_codes import ReasonCode
from client import Client
from client.errors import ConnectionClosedError
from tests.broker.harness import BrokerThread

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Restartable:
    """A broker in a thread on a fixed port, stopped and started again over one data dir."""

    def __init__(self, data_dir: pathlib.Path) -> None:
        self.port = _free_port()
        self.data_dir = data_dir
        self.broker: BrokerThread | None = None

    def start(self) -> None:
        config = load_config(
            None,
            {
                "listener": {"listen": [f"127.0.0.1:{self.port}"]},
                "storage": {"data_dir": str(self.data_dir)},
            },
        )
        self.broker = BrokerThread(config)
        self.broker.start()

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None


async def test_reconnects_and_subscribes_again(tmp_path: pathlib.Path) -> None:
    b = Restartable(tmp_path / "data")
    b.start()
    server = f"mqtt://127.0.0.1:{b.port}"
    try:
        with anyio.fail_after(45):
            async with Client(server, reconnect=True, reconnect_wait=0.05) as c:
                sub = await c.subscribe("r/#", qos=1)
                await anyio.to_thread.run_sync(b.stop)
                await anyio.to_thread.run_sync(b.start)
                async with Client(server) as p:
                    # Ready when the reconnected client has subscribed again (no 0x10):
                    # each try waits for its PUBACK, a round trip through the broker.
                    no_one = ReasonCode.NO_MATCHING_SUBSCRIBERS
                    while (await p.publish("r/1", b"back", 1)).reason_code is no_one:
                        pass
                msg = await sub.next(10)
                assert msg.payload == b"back"
                assert c.reconnects == 1
                assert c.is_connected
                await c.publish("r/2", b"own", 1)  # calls work on the new connection
                assert (await sub.next(10)).payload == b"own"
    finally:
        b.stop()


async def test_without_reconnect_a_lost_broker_ends_the_client(tmp_path: pathlib.Path) -> None:
    b = Restartable(tmp_path / "data")
    b.start()
    try:
        with anyio.fail_after(30):
            async with Client(f"mqtt://127.0.0.1:{b.port}") as c:
                sub = await c.subscribe("x")
                stopper = threading.Thread(target=b.stop)
                stopper.start()
                with pytest.raises(ConnectionClosedError):
                    await sub.next(20)
                assert await c.wait_closed() is not None
                assert not c.is_connected
                await anyio.to_thread.run_sync(stopper.join)
    finally:
        b.stop()
