"""Interop: an amqtt client (MQTT 3.1.1, asyncio) and a paho v5 client through the broker."""

from __future__ import annotations

import asyncio

import pytest
from amqtt.client import MQTTClient

from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import Paho

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_amqtt_and_paho_exchange_messages(broker: BrokerThread, qos: int) -> None:
    paho = Paho(broker.port, f"paho-{qos}")
    paho.connect()
    paho.subscribe("interop/to-paho", qos)

    async def amqtt_side() -> list[tuple[str, bytes, int]]:
        client = MQTTClient(client_id=f"amqtt-{qos}", config={"auto_reconnect": False})
        await client.connect(f"mqtt://127.0.0.1:{broker.port}/")
        try:
            await client.subscribe([("interop/to-amqtt", qos)])
            await client.publish("interop/to-paho", b"from amqtt", qos=qos)
            # paho answers once it has the message (the loop thread publishes).
            paho_reply = asyncio.get_running_loop().run_in_executor(None, _reply, paho, qos)
            received = []
            for _ in range(2):
                msg = await client.deliver_message(timeout_duration=10)
                assert msg is not None
                received.append((msg.topic, bytes(msg.data or b""), int(msg.qos or 0)))
            await paho_reply
            return received
        finally:
            await client.disconnect()

    try:
        received = asyncio.run(asyncio.wait_for(amqtt_side(), 60))
    finally:
        paho.disconnect()
    assert received == [
        ("interop/to-amqtt", b"from paho 1", qos),
        ("interop/to-amqtt", b"from paho 2", qos),
    ]


def _reply(paho: Paho, qos: int) -> None:
    msg = paho.get()
    assert (msg.topic, msg.payload, msg.qos) == ("interop/to-paho", b"from amqtt", qos)
    paho.publish("interop/to-amqtt", b"from paho 1", qos)
    paho.publish("interop/to-amqtt", b"from paho 2", qos)
