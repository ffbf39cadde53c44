"""A subscription's message buffer: bounded, filled by the connection's reader task.

The reader never waits on an application: a full buffer drops the message and counts it
in ``dropped`` (nats-py's "slow consumer"), so one slow iterator cannot stall acks,
API answers and every other subscription of the connection.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

import anyio

from client.errors import ConnectionClosedError
from client.message import Message

DEFAULT_MAX_PENDING = 65536


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic matching (§4.7) for routing when the broker sent no Subscription
    Identifier. ``$share/<group>/`` is stripped; ``$`` topics match no leading wildcard."""
    if topic_filter.startswith("$share/"):
        topic_filter = topic_filter.split("/", 2)[2] if topic_filter.count("/") >= 2 else ""
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    if topic.startswith("$") and f_levels[0] in ("+", "#"):
        return False
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= len(t_levels):
            return False
        if level != "+" and level != t_levels[i]:
            return False
    return len(f_levels) == len(t_levels)


class Subscription:
    """Messages matching ``filters`` (or arriving on one inbox topic), in arrival order.

    Iterate with ``async for msg in sub`` or ``await sub.next(timeout)``; ``unsubscribe()``
    (or leaving ``async with sub``) ends it.
    """

    def __init__(
        self,
        filters: tuple[str, ...],
        on_close: Callable[[Subscription], Awaitable[None]],
        max_pending: int = DEFAULT_MAX_PENDING,
        sid: int = 0,
    ) -> None:
        self.filters = filters
        self.sid = sid
        self.dropped = 0
        self._on_close = on_close
        self.limit = max_pending
        self._max = max_pending if max_pending > 0 else math.inf
        self._buf: deque[Message] = deque()
        self._event = anyio.Event()  # set when a message arrives or the subscription ends
        self._done = False
        self._closed_error: BaseException | None = None

    @property
    def topic(self) -> str:
        return self.filters[0]

    def matches(self, topic: str) -> bool:
        return any(topic_matches(f, topic) for f in self.filters)

    def deliver(self, msg: Message) -> None:
        """Called by the reader task; never blocks."""
        if self._done:
            return
        if len(self._buf) >= self._max:
            self.dropped += 1
            return
        self._buf.append(msg)
        self._event.set()

    def end(self, error: BaseException | None = None) -> None:
        """No more messages (unsubscribed or the connection closed): iterators finish once
        the buffer is drained; ``next`` raises ``error`` (or ConnectionClosedError)."""
        self._done = True
        if error is not None and self._closed_error is None:
            self._closed_error = error
        self._event.set()

    @property
    def pending(self) -> int:
        return len(self._buf)

    async def _receive(self) -> Message | None:
        while not self._buf:
            if self._done:
                return None
            if self._event.is_set():
                self._event = anyio.Event()
            await self._event.wait()
        return self._buf.popleft()

    async def next(self, timeout: float | None = None) -> Message:
        """The next message; TimeoutError after ``timeout`` seconds (None: wait forever)."""
        with anyio.fail_after(timeout):
            msg = await self._receive()
        if msg is None:
            raise self._closed_error or ConnectionClosedError("subscription ended")
        return msg

    def next_nowait(self) -> Message | None:
        return self._buf.popleft() if self._buf else None

    def push_front(self, msgs: list[Message]) -> None:
        """Put messages back at the head of the buffer, in order."""
        self._buf.extendleft(reversed(msgs))
        if msgs:
            self._event.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        msg = await self._receive()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def unsubscribe(self) -> None:
        if not self._done:
            self.end()
            await self._on_close(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(ConnectionClosedError):
            await self.unsubscribe()


class Orphans:
    """Messages that matched no subscription (yet): a resumed session's queued messages
    can arrive before the application has subscribed again. The newest ``limit`` are kept
    for the first subscription that matches them."""

    def __init__(self, limit: int = 1000) -> None:
        self._kept: deque[Message] = deque(maxlen=limit)

    def keep(self, msg: Message) -> None:
        self._kept.append(msg)

    def claim(self, sub: Subscription) -> None:
        if not self._kept:
            return
        rest = [m for m in self._kept if not sub.matches(m.topic)]
        for msg in self._kept:
            if sub.matches(msg.topic):
                sub.deliver(msg)
        self._kept.clear()
        self._kept.extend(rest)
