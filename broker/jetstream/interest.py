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

from typing import Final

import radix
from broker.core.hub import Hub
from broker.persist.client import StoreClient
from store import SetPushInterest, WithdrawPulls

MAX_PULLS_PER_CLIENT: Final = 1024  # inboxes remembered per client (oldest forgotten)


class Interest:
    """Pull inboxes by client and push consumers' bound state (see module docstring)."""

    def __init__(self, hub: Hub, client: StoreClient) -> None:
        self.hub = hub
        self.client = client
        # client number -> {(stream, consumer, inbox): None} (insertion ordered)
        self.pulls: dict[int, dict[tuple[str, str, str], None]] = {}
        # (stream, consumer) -> [deliver topic, bound]
        self.push: dict[tuple[str, str], list[object]] = {}

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

    # -- push -----------------------------------------------------------------------------------

    def set_push(self, consumers: dict[tuple[str, str], str]) -> None:
        """The push consumers now known ((stream, consumer) -> deliver topic): each one's
        interest is reported to the store (a new one, or all after a restart)."""
        old = self.push
        self.push = {}
        ops: list[SetPushInterest] = []
        for key, topic in consumers.items():
            bound = self.anybody_has(topic)
            before = old.get(key)
            if before is None or before[0] != topic or before[1] != bound:
                ops.append(SetPushInterest(key[0], key[1], bound))
            self.push[key] = [topic, bound]
        if ops:
            self.client.fire(ops)

    # -- the watcher ----------------------------------------------------------------------------

    def subscriptions_changed(self, client: int) -> None:
        ops: list[WithdrawPulls | SetPushInterest] = []
        entries = self.pulls.get(client)
        if entries:
            gone = [key for key in entries if not self.client_has(client, key[2])]
            for key in gone:
                del entries[key]
                ops.append(WithdrawPulls(*key))
            if not entries:
                del self.pulls[client]
        for (stream, consumer), state in self.push.items():
            topic = state[0]
            assert isinstance(topic, str)
            bound = self.anybody_has(topic)
            if bound != state[1]:
                state[1] = bound
                ops.append(SetPushInterest(stream, consumer, bound))
        if ops:
            self.client.fire(ops)
