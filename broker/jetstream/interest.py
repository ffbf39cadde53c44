"""Interest: a pull request lives while its requester has a subscription matching its
inbox, and a push consumer is bound while its deliver topic has a subscriber
(nats-server's interest rules, with MQTT subscriptions as the interest).

:class:`Interest` is a ``SubscriptionWatcher`` of the hub: after a client's
subscriptions change (UNSUBSCRIBE, session end, SUBSCRIBE) it withdraws the pull
requests of that client whose inbox no subscription of it matches any more
(``WithdrawPulls``), and re-checks whether each push consumer's deliver topic has a
subscriber (``SetPushInterest`` when that changed). A persistent session that is offline
keeps its subscriptions, so its interest too. Trio thread only; the store operations go
into the open write batch without waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import radix
from broker.core.hub import Hub
from broker.persist.client import StoreClient
from store import SetPushInterest, WithdrawPulls

MAX_PULLS_PER_CLIENT: Final = 1024  # inboxes remembered per client (oldest forgotten)

Op = WithdrawPulls | SetPushInterest


@dataclass(slots=True)
class _Push:
    topic: str  # the deliver topic (MQTT form)
    subscribed: bool  # a subscription matches it
    bound: bool  # what the store was told (subscribed and not stalled)


class Interest:
    """Pull inboxes by client and push consumers' bound state (see module docstring)."""

    def __init__(self, hub: Hub, client: StoreClient) -> None:
        self.hub = hub
        self.client = client
        # client number -> {(stream, consumer, inbox): None} (insertion ordered)
        self.pulls: dict[int, dict[tuple[str, str, str], None]] = {}
        # (stream, consumer) -> its deliver topic and interest
        self.push: dict[tuple[str, str], _Push] = {}
        self.stalled: set[tuple[str, str]] = set()  # flow control: waiting for an answer

    # -- checks ---------------------------------------------------------------------------------

    def client_has(self, client: int, topic: str) -> bool:
        """Whether a subscription of ``client`` matches ``topic``."""
        try:
            found = self.hub.router.index.match_detailed(topic.encode())
        except radix.TopicError:
            return False
        return client in found.clients

    def anybody_has(self, topic: str) -> bool:
        try:
            return len(self.hub.router.index.match_detailed(topic.encode())) > 0
        except radix.TopicError:
            return False

    # -- pulls ----------------------------------------------------------------------------------

    def add_pull(self, client: int, stream: str, consumer: str, inbox: str) -> None:
        entries = self.pulls.setdefault(client, {})
        entries[(stream, consumer, inbox)] = None
        if len(entries) > MAX_PULLS_PER_CLIENT:
            del entries[next(iter(entries))]

    # -- push ---------------------------------------------------------------------------------

    def set_push(self, consumers: dict[tuple[str, str], str]) -> None:
        """The push consumers now known ((stream, consumer) -> deliver topic): each one's
        interest is reported to the store (a new one, or all after a restart)."""
        old = self.push
        self.push = {}
        ops: list[SetPushInterest] = []
        for key, topic in consumers.items():
            subscribed = self.anybody_has(topic)
            bound = subscribed and key not in self.stalled
            before = old.get(key)
            if before is None or before.topic != topic or before.bound != bound:
                ops.append(SetPushInterest(key[0], key[1], bound))
            self.push[key] = _Push(topic, subscribed, bound)
        self.stalled &= set(consumers)
        if ops:
            self.client.fire(ops)

    def push_subscribed(self, key: tuple[str, str]) -> bool:
        state = self.push.get(key)
        return state is not None and state.subscribed

    def set_stalled(self, key: tuple[str, str], stalled: bool) -> None:
        """Flow control: a stalled push consumer is reported without interest (the store
        stops delivering) until its flow control request is answered."""
        if stalled:
            self.stalled.add(key)
        else:
            self.stalled.discard(key)
        state = self.push.get(key)
        if state is not None:
            ops: list[Op] = []
            self._report(key, state, ops)
            self.client.fire(ops)

    def _report(self, key: tuple[str, str], state: _Push, ops: list[Op]) -> None:
        """Add the ``SetPushInterest`` to ``ops`` if the consumer's interest changed."""
        bound = state.subscribed and key not in self.stalled
        if bound != state.bound:
            state.bound = bound
            ops.append(SetPushInterest(key[0], key[1], bound))

    # -- the watcher ----------------------------------------------------------------------------

    def subscriptions_changed(self, client: int) -> None:
        if not self.push and client not in self.pulls:
            return  # nothing to check (every session end of a broker without consumers)
        ops: list[Op] = []
        entries = self.pulls.get(client)
        if entries:
            gone = [pull for pull in entries if not self.client_has(client, pull[2])]
            for pull in gone:
                del entries[pull]
                ops.append(WithdrawPulls(*pull))
            if not entries:
                del self.pulls[client]
        for key, state in self.push.items():
            state.subscribed = self.anybody_has(state.topic)
            self._report(key, state, ops)
        if ops:
            self.client.fire(ops)
