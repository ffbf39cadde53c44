"""The connection's inbox: one ``_INBOX/<random>/#`` subscription, routed by exact topic.

API answers, pull deliveries and push deliveries to this client arrive on topics under
the prefix; each open inbox topic has its own :class:`Subscription` buffer. The wildcard
SUBSCRIBE is sent once per connection (again after a reconnect without session).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable

import anyio

from broker.mqtt.packets import Subscription as SubscriptionOption
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from client.message import Message
from client.subscription import Subscription

SubscribePacket = Callable[[tuple[SubscriptionOption, ...], Properties], Awaitable[None]]


class Inbox:
    def __init__(self, subscribe: SubscribePacket, qos: int, max_pending: int) -> None:
        self.prefix = "_INBOX/" + secrets.token_urlsafe(12).replace("-", "x")
        self._subscribe = subscribe
        self._qos = qos
        self._max_pending = max_pending
        self.routes: dict[str, Subscription] = {}
        self.ready = False
        self._lock = anyio.Lock()
        self._ids = itertools.count(1)

    def new_topic(self) -> str:
        return f"{self.prefix}/{next(self._ids)}"

    async def open(self, topic: str | None = None, max_pending: int | None = None) -> Subscription:
        await self.ensure()
        inbox = topic or self.new_topic()
        limit = self._max_pending if max_pending is None else max_pending
        sub = Subscription((inbox,), self._close, limit)
        self.routes[inbox] = sub
        return sub

    async def _close(self, sub: Subscription) -> None:
        if self.routes.get(sub.topic) is sub:
            del self.routes[sub.topic]

    async def ensure(self) -> None:
        if self.ready:
            return
        async with self._lock:
            if not self.ready:  # (another task may have made it meanwhile)
                option = SubscriptionOption(f"{self.prefix}/#".encode(), self._qos)
                await self._subscribe((option,), EMPTY_PROPERTIES)
                self.ready = True

    def route(self, msg: Message) -> bool:
        """Deliver ``msg`` if its topic is under the prefix (True), even when no inbox
        topic is open for it any more (then it is dropped)."""
        if not msg.topic.startswith(self.prefix):
            return False
        sub = self.routes.get(msg.topic)
        if sub is not None:
            sub.deliver(msg)
        return True

    def end_all(self, error: BaseException) -> None:
        for sub in self.routes.values():
            sub.end(error)
