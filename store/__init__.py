"""LMDB storage engine: streams, consumers, acks, sessions and retained messages.

Imports lmdb, pydantic and the standard library only; never ``broker`` or trio.
The public API is :class:`store.api.Store` with the operations of :mod:`store.ops`;
see ``store/DESIGN.md``.
"""

from store.api import Store
from store.env import SchemaError, StorageFailure, StoreClosedError, StoreOpenError
from store.errors import JetStreamError
from store.models import ConsumerConfig, ConsumerInfo, StreamConfig, StreamInfo, StreamState
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
