"""jetmq's Python client: MQTT 5 on ``broker.mqtt``'s codec, on anyio (asyncio and trio),
with a JetStream context shaped like nats-py's and a blocking facade in ``client.sync``.

    async with Client("mqtt://127.0.0.1:1883") as c:
        js = c.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        ack = await js.publish("orders/eu/1", b"hello")

This file imports nothing: the names below load their module on first use (PEP 562), so
``jetmq serve`` (which lists the client verbs from ``client.verbs``) and ``import
client.url`` load neither anyio nor the client's modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "Client": "client.core",
    "ClientError": "client.errors",
    "ConnectError": "client.errors",
    "ConnectionClosedError": "client.errors",
    "ConsumerNotFoundError": "client.errors",
    "JetStreamContext": "client.jetstream",
    "JetStreamError": "client.errors",
    "JsMsg": "client.jsmsg",
    "Message": "client.message",
    "MsgMetadata": "client.jsmsg",
    "NoRespondersError": "client.errors",
    "NoStreamResponseError": "client.errors",
    "NotFoundError": "client.errors",
    "PubAck": "client.jetstream",
    "PublishError": "client.errors",
    "PublishResult": "client.message",
    "RawStreamMsg": "client.jetstream",
    "StreamNotFoundError": "client.errors",
    "SubscribeError": "client.errors",
    "Subscription": "client.subscription",
    "Will": "broker.mqtt.packets",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
