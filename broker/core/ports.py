"""The narrow interfaces through which ``broker.core`` reaches what it does not own: the
clock and timers (trio, in ``broker.net.runtime``), a connected client's output
(``broker.net.connection``) and a store commit (``broker.persist``); the store itself is
``hub.MqttStore``.

``core`` never imports trio, ``net`` or ``persist``: those implement these protocols and
are handed in. Time is an argument or a clock function; effects go out through the
objects below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.core.message import AppMessage

Clock = Callable[[], float]


class Access(Protocol):
    """One client's ACL decisions (``broker.security.acl.ClientAccess``), cached per topic."""

    def may_read(self, topic: bytes) -> bool: ...

    def may_write(self, topic: bytes) -> bool: ...

    def may_subscribe(self, topic_filter: bytes) -> bool: ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """Calls ``fn`` once ``delay`` seconds have passed on the broker's clock, unless the
    handle is cancelled first."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> TimerHandle: ...


class Peer(Protocol):
    """A session's live network connection, as the core sees it."""

    def send_qos0(
        self, msg: AppMessage, retain: bool, sub_ids: tuple[int, ...], now: float
    ) -> None: ...

    def wake(self) -> None: ...

    def taken_over(self) -> None: ...


class Recipient(Protocol):
    """Something inside the broker that receives messages through the radix index like a
    session does (the bridge's export, JetStream push, ``$SYS`` listeners, tests): it
    subscribes with ``Hub.subscribe_internal`` and gets each matching message once, with
    the QoS and identifiers of its subscriptions, after the message's commit."""

    def deliver(
        self, msg: AppMessage, qos: int, retain: bool, sub_ids: tuple[int, ...]
    ) -> None: ...


class Plan(Protocol):
    """What one PUBLISH stores before it is acknowledged (``broker.persist.client.PublishPlan``)."""

    @property
    def empty(self) -> bool: ...

    def committed(self) -> bool | None: ...

    def pend_seq(self, delivery_index: int) -> int: ...

    def result(self, op_index: int) -> Any:
        """The store's result for the plan's operation ``op_index`` (once committed)."""

    def when_committed(self, fn: Callable[[bool], None]) -> None: ...

    def settled(self) -> bool | None:
        """``committed()``, with the results in place once the commit succeeded."""

    def on_finish(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(ok)`` on the trio thread when the commit's outcome arrives, without
        submitting the open batch (the reader's chunk end does). Only while in flight."""

    async def wait(self) -> None:
        """Until committed; raises the store client's error if the commit failed."""


class SubscriptionWatcher(Protocol):
    """Told when a client's subscriptions change (JetStream: pull requests live while
    their inbox has a subscriber, push consumers are bound while theirs has one)."""

    def subscriptions_changed(self, client: int) -> None: ...
