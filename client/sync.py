"""The blocking facade: the async client run on an event loop in a background thread
(anyio's blocking portal), for scripts, the CLI and (later) Spark executors.

    with Client("mqtt://127.0.0.1:1883") as c:
        c.publish("a/b", b"x", qos=1)
        js = c.jetstream()
        js.add_stream(name="S", subjects=["s.>"])
        for msg in js.pull_subscribe("s.>", durable="d").fetch(10, timeout=1):
            msg.ack()

Threads: one portal thread per client; every call blocks the caller until the coroutine
finished there. Objects may be used from any thread (calls are serialised by the loop).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from client.core import Client as AsyncClient
from client.jetstream import JetStreamContext, PubAck, RawStreamMsg
from client.jsmsg import JsMsg as AsyncJsMsg
from client.jsmsg import MsgMetadata
from client.message import Message, PublishResult
from client.pull import PullSubscription as AsyncPull
from client.push import PushSubscription as AsyncPush
from client.subscription import Subscription as AsyncSubscription
from client.url import DEFAULT_SERVER
from store.models import ConsumerConfig, ConsumerInfo, StreamConfig, StreamInfo

P = ParamSpec("P")
T = TypeVar("T")


class _Runner:
    def __init__(self, portal: BlockingPortal) -> None:
        self.portal = portal

    def __call__(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        return self.portal.call(functools.partial(fn, *args, **kwargs))


class Subscription:
    def __init__(self, run: _Runner, sub: AsyncSubscription) -> None:
        self._run = run
        self._sub = sub

    @property
    def dropped(self) -> int:
        return self._sub.dropped

    def next(self, timeout: float | None = None) -> Message:
        return self._run(self._sub.next, timeout)

    def __iter__(self) -> Iterator[Message]:
        while True:
            msg = self._run(self._sub._receive)
            if msg is None:
                return
            yield msg

    def unsubscribe(self) -> None:
        self._run(self._sub.unsubscribe)


class JsMsg:
    """A delivered stream message with blocking acks."""

    def __init__(self, run: _Runner, msg: AsyncJsMsg) -> None:
        self._run = run
        self._msg = msg
        self.subject = msg.subject
        self.topic = msg.topic
        self.data = msg.data
        self.headers = msg.headers
        self.reply = msg.reply
        self.metadata: MsgMetadata | None = msg.metadata

    def header(self, name: str) -> str | None:
        return self._msg.header(name)

    def __repr__(self) -> str:
        return repr(self._msg)

    def ack(self) -> None:
        self._run(self._msg.ack)

    def ack_sync(self, timeout: float = 5.0) -> None:
        self._run(self._msg.ack_sync, timeout)

    def nak(self, delay: float | None = None) -> None:
        self._run(self._msg.nak, delay)

    def in_progress(self) -> None:
        self._run(self._msg.in_progress)

    def term(self, reason: str | None = None) -> None:
        self._run(self._msg.term, reason)


class PullSubscription:
    def __init__(self, run: _Runner, sub: AsyncPull) -> None:
        self._run = run
        self._sub = sub
        self.stream, self.consumer = sub.stream, sub.consumer

    def fetch(
        self, batch: int = 1, timeout: float | None = 5.0, *, heartbeat: float | None = None
    ) -> list[JsMsg]:
        got = self._run(self._sub.fetch, batch, timeout, heartbeat=heartbeat)
        return [JsMsg(self._run, m) for m in got]

    def consumer_info(self) -> ConsumerInfo:
        return self._run(self._sub.consumer_info)

    def unsubscribe(self) -> None:
        self._run(self._sub.unsubscribe)


class PushSubscription:
    def __init__(self, run: _Runner, sub: AsyncPush) -> None:
        self._run = run
        self._sub = sub
        self.stream = sub.stream

    @property
    def consumer(self) -> str:
        return self._sub.consumer

    def next_msg(self, timeout: float | None = 5.0) -> JsMsg:
        return JsMsg(self._run, self._run(self._sub.next_msg, timeout))

    def consumer_info(self) -> ConsumerInfo:
        return self._run(self._sub.consumer_info)

    def unsubscribe(self) -> None:
        self._run(self._sub.unsubscribe)


class JetStream:
    """``JetStreamContext`` with blocking methods (same names and arguments)."""

    def __init__(self, run: _Runner, js: JetStreamContext) -> None:
        self._run = run
        self._js = js

    def account_info(self) -> dict[str, Any]:
        return self._run(self._js.account_info)

    def add_stream(self, config: StreamConfig | None = None, **params: Any) -> StreamInfo:
        return self._run(self._js.add_stream, config, **params)

    def update_stream(self, config: StreamConfig | None = None, **params: Any) -> StreamInfo:
        return self._run(self._js.update_stream, config, **params)

    def delete_stream(self, name: str) -> bool:
        return self._run(self._js.delete_stream, name)

    def stream_info(self, name: str, subjects_filter: str | None = None) -> StreamInfo:
        return self._run(self._js.stream_info, name, subjects_filter)

    def stream_names(self, subject: str | None = None) -> list[str]:
        return self._run(self._js.stream_names, subject)

    def streams_info(self, subject: str | None = None) -> list[StreamInfo]:
        return self._run(self._js.streams_info, subject)

    def purge_stream(
        self, name: str, subject: str | None = None, seq: int | None = None, keep: int | None = None
    ) -> int:
        return self._run(self._js.purge_stream, name, subject, seq, keep)

    def get_msg(
        self,
        name: str,
        seq: int | None = None,
        subject: str | None = None,
        next: bool = False,
        direct: bool = False,
    ) -> RawStreamMsg:
        return self._run(self._js.get_msg, name, seq, subject, next, direct)

    def delete_msg(self, name: str, seq: int, erase: bool = False) -> bool:
        return self._run(self._js.delete_msg, name, seq, erase)

    def add_consumer(
        self, stream: str, config: ConsumerConfig | None = None, **params: Any
    ) -> ConsumerInfo:
        return self._run(self._js.add_consumer, stream, config, **params)

    def update_consumer(
        self, stream: str, config: ConsumerConfig | None = None, **params: Any
    ) -> ConsumerInfo:
        return self._run(self._js.update_consumer, stream, config, **params)

    def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return self._run(self._js.consumer_info, stream, consumer)

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        return self._run(self._js.delete_consumer, stream, consumer)

    def consumer_names(self, stream: str) -> list[str]:
        return self._run(self._js.consumer_names, stream)

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        return self._run(self._js.consumers_info, stream)

    def publish(self, topic: str, payload: bytes | str = b"", **kwargs: Any) -> PubAck:
        return self._run(self._js.publish, topic, payload, **kwargs)

    def pull_subscribe(
        self,
        subject: str | None = None,
        durable: str | None = None,
        stream: str | None = None,
        config: ConsumerConfig | None = None,
    ) -> PullSubscription:
        sub = self._run(self._js.pull_subscribe, subject, durable, stream, config)
        return PullSubscription(self._run, sub)

    def subscribe(
        self, subject: str | None = None, queue: str | None = None, **kwargs: Any
    ) -> PushSubscription:
        return PushSubscription(self._run, self._run(self._js.subscribe, subject, queue, **kwargs))


class Client:
    """The blocking client; the keyword arguments are :class:`client.core.Client`'s.
    ``backend`` picks the event loop run in the portal thread (``asyncio`` or ``trio``)."""

    def __init__(self, server: str = DEFAULT_SERVER, *, backend: str = "asyncio", **kwargs: Any):
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(backend)
        portal = self._portal_cm.__enter__()
        self._run = _Runner(portal)
        try:

            async def make() -> AsyncClient:
                return AsyncClient(server, **kwargs)

            self.aclient = portal.call(make)
            self._ctx = portal.wrap_async_context_manager(self.aclient)
            self._ctx.__enter__()
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise
        self._open = True

    @property
    def client_id(self) -> str:
        return self.aclient.client_id

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._ctx.__exit__(None, None, None)
            finally:
                self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        qos: int = 0,
        retain: bool = False,
        **kwargs: Any,
    ) -> PublishResult:
        return self._run(self.aclient.publish, topic, payload, qos, retain, **kwargs)

    def subscribe(self, *filters: str, qos: int = 0, **kwargs: Any) -> Subscription:
        return Subscription(
            self._run, self._run(self.aclient.subscribe, *filters, qos=qos, **kwargs)
        )

    def request(
        self, topic: str, payload: bytes | str = b"", timeout: float = 5.0, **kwargs: Any
    ) -> Message:
        return self._run(self.aclient.request, topic, payload, timeout, **kwargs)

    def jetstream(self, timeout: float = 5.0) -> JetStream:
        return JetStream(self._run, self.aclient.jetstream(timeout))
