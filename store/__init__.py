"""LMDB storage engine: streams, consumers, acks, sessions and retained messages.

Imports lmdb, pydantic, ``hotpath`` and the standard library only; never ``broker`` or
trio. The public API is :class:`store.api.Store` with the operations of :mod:`store.ops`; see
``store/DESIGN.md``.

This file imports only ``hotpath`` (standard library only), whose guard decides once per
process whether the compiled modules run (``hotpath/__init__.py``); the names below load
their module on first use (PEP 562), so ``import store.keys`` or ``import store.readonly``
(the read side a Spark executor loads) costs only those modules, not pydantic and the
engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import hotpath

hotpath.guard()  # before any compiled module of the store loads

if TYPE_CHECKING:
    from store.api import (
        Store,
    )
    from store.errors import (
        JetStreamError,
    )
    from store.failures import (
        SchemaError,
        StorageFailure,
        StoreClosedError,
        StoreOpenError,
    )
    from store.models import (
        ConsumerConfig,
        ConsumerInfo,
        StreamConfig,
        StreamInfo,
        StreamState,
    )
    from store.ops import (
        Ack,
        AckKind,
        Advisory,
        CreateConsumer,
        CreateStream,
        DeleteConsumer,
        DeleteMsg,
        DeleteStream,
        Delivery,
        Event,
        GetConsumerInfo,
        GetStreamInfo,
        MsgHead,
        Op,
        OpResult,
        PauseConsumer,
        PubAck,
        Publish,
        Pull,
        PullStatus,
        PurgeResult,
        PurgeStream,
        SetPushInterest,
        StoredMsg,
        Tick,
        WithdrawPulls,
    )
    from store.pausestate import PauseState

_WHERE = {
    "Ack": "store.ops",
    "AckKind": "store.ops",
    "Advisory": "store.ops",
    "ConsumerConfig": "store.models",
    "ConsumerInfo": "store.models",
    "CreateConsumer": "store.ops",
    "CreateStream": "store.ops",
    "DeleteConsumer": "store.ops",
    "DeleteMsg": "store.ops",
    "DeleteStream": "store.ops",
    "Delivery": "store.ops",
    "Event": "store.ops",
    "GetConsumerInfo": "store.ops",
    "GetStreamInfo": "store.ops",
    "MsgHead": "store.ops",
    "PauseConsumer": "store.ops",
    "PauseState": "store.pausestate",
    "JetStreamError": "store.errors",
    "Op": "store.ops",
    "OpResult": "store.ops",
    "PubAck": "store.ops",
    "Publish": "store.ops",
    "Pull": "store.ops",
    "PullStatus": "store.ops",
    "PurgeResult": "store.ops",
    "PurgeStream": "store.ops",
    "SchemaError": "store.failures",
    "SetPushInterest": "store.ops",
    "StorageFailure": "store.failures",
    "Store": "store.api",
    "StoreClosedError": "store.failures",
    "StoreOpenError": "store.failures",
    "StoredMsg": "store.ops",
    "StreamConfig": "store.models",
    "StreamInfo": "store.models",
    "StreamState": "store.models",
    "Tick": "store.ops",
    "WithdrawPulls": "store.ops",
}

__all__ = [
    "Ack",
    "AckKind",
    "Advisory",
    "ConsumerConfig",
    "ConsumerInfo",
    "CreateConsumer",
    "CreateStream",
    "DeleteConsumer",
    "DeleteMsg",
    "DeleteStream",
    "Delivery",
    "Event",
    "GetConsumerInfo",
    "GetStreamInfo",
    "JetStreamError",
    "Op",
    "PauseConsumer",
    "PauseState",
    "OpResult",
    "PubAck",
    "Publish",
    "Pull",
    "PullStatus",
    "PurgeResult",
    "PurgeStream",
    "SchemaError",
    "SetPushInterest",
    "StorageFailure",
    "Store",
    "StoreClosedError",
    "StoreOpenError",
    "MsgHead",
    "StoredMsg",
    "StreamConfig",
    "StreamInfo",
    "StreamState",
    "Tick",
    "WithdrawPulls",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
