"""jetmq's Python client: MQTT 5 on ``broker.mqtt``'s codec, on anyio (asyncio and trio),
with a JetStream context shaped like nats-py's and a blocking facade in ``client.sync``.

    async with Client("mqtt://127.0.0.1:1883") as c:
        js = c.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        ack = await js.publish("orders/eu/1", b"hello")
"""

from __future__ import annotations

from broker.mqtt.packets import Will
from client.core import Client
from client.errors import (
    ClientError,
    ConnectError,
    ConnectionClosedError,
    ConsumerNotFoundError,
    JetStreamError,
    NoRespondersError,
    NoStreamResponseError,
    NotFoundError,
    PublishError,
    StreamNotFoundError,
    SubscribeError,
)
from client.jetstream import JetStreamContext, PubAck, RawStreamMsg
from client.jsmsg import JsMsg, MsgMetadata
from client.message import Message, PublishResult
from client.subscription import Subscription

__all__ = [
    "Client",
    "ClientError",
    "ConnectError",
    "ConnectionClosedError",
    "ConsumerNotFoundError",
    "JetStreamContext",
    "JetStreamError",
    "JsMsg",
    "Message",
    "MsgMetadata",
    "NoRespondersError",
    "NoStreamResponseError",
    "NotFoundError",
    "PubAck",
    "PublishError",
    "PublishResult",
    "RawStreamMsg",
    "StreamNotFoundError",
    "SubscribeError",
    "Subscription",
    "Will",
]
