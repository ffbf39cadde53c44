"""Subscription routing: the radix topic index, the retained index, and fan-out decisions.

Owned by the trio thread (cffi releases the GIL around every radix call, so no
other thread may touch these indexes).

``route`` turns one ``match_detailed`` result into deliveries:

* non-shared entries of one client collapse into one delivery with the highest
  granted QoS, every Subscription Identifier [MQTT-3.3.4-3], [MQTT-3.3.4-4] and
  the Retain As Published of any matching subscription; No Local entries of the
  publishing client are dropped [MQTT-3.8.3-3];
* each matching shared group (share name, filter) delivers to exactly one
  member, preferring connected members, round robin among them; the copy is
  separate from the client's non-shared copy (MQTT 5 §4.8.2 allows two).

The deliveries of a topic are cached until the next subscription change, unless
they depend on the publisher (No Local) or on a pick (shared groups): a topic
published again costs a dictionary lookup instead of a match and its collapse.
The cached list is shared; callers only read it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import radix
from broker.core import handles

ROUTE_CACHE_SIZE = 16_384  # topics; the cache starts over when full


class Delivery(NamedTuple):
    """One copy of a message for one session."""

    client: int
    qos: int  # granted QoS of the subscription(s); the sender takes min with the message QoS
    retain_as_published: bool
    sub_ids: tuple[int, ...]
    shared: bool = False  # picked as one member of a shared group


class Router:
    """The subscription index and the retained-message index of one broker."""

    def __init__(self, *, seed: int = 0, route_cache_size: int = ROUTE_CACHE_SIZE) -> None:
        self.index = radix.TopicIndex(seed)
        self.retained = radix.RetainedIndex()
        self._turn = 0  # rotating start for shared-group picks (bounded state, fair)
        self._routes: dict[bytes, list[Delivery]] = {}
        self._route_cache_size = route_cache_size

    def close(self) -> None:
        self.index.close()
        self.retained.close()

    # -- subscriptions -------------------------------------------------------------------------

    def subscribe(self, client: int, topic_filter: bytes, handle: int) -> bool:
        """Add or replace ``client``'s subscription; True when it is new."""
        self._routes.clear()
        return self.index.subscribe(topic_filter, client, handle)

    def unsubscribe(self, client: int, topic_filter: bytes) -> bool:
        self._routes.clear()
        return self.index.unsubscribe(topic_filter, client)

    def unsubscribe_all(self, client: int) -> int:
        self._routes.clear()
        return self.index.unsubscribe_all(client)

    # -- publish ---------------------------------------------------------------------------------

    def route(
        self, topic: bytes, publisher: int, is_connected: Callable[[int], bool]
    ) -> list[Delivery]:
        """Every delivery a PUBLISH on ``topic`` from client ``publisher`` produces."""
        cached = self._routes.get(topic)
        if cached is not None:
            return cached
        found = self.index.match_detailed(topic)
        clients = found.clients
        hs = found.handles
        gs = found.groups
        n = len(clients)
        if n == 1 and not gs[0]:  # one subscriber, one subscription: the common case
            h = hs[0]
            client = clients[0]
            if h & handles.NO_LOCAL and client == publisher:
                return []
            sid = h >> handles.SUB_ID_SHIFT
            one = [
                Delivery(
                    client,
                    h & handles.QOS_MASK,
                    bool(h & handles.RETAIN_AS_PUBLISHED),
                    (sid,) if sid else (),
                )
            ]
            if not h & handles.NO_LOCAL:
                self._remember(topic, one)
            return one
        direct: dict[int, list[int]] = {}
        groups: dict[int, list[tuple[int, int]]] = {}
        cacheable = True
        for i in range(n):
            client = clients[i]
            h = hs[i]
            group = gs[i]
            if group:
                groups.setdefault(group, []).append((client, h))
                cacheable = False
            elif h & handles.NO_LOCAL:
                cacheable = False
                if client != publisher:
                    direct.setdefault(client, []).append(h)
            else:
                direct.setdefault(client, []).append(h)
        out: list[Delivery] = []
        for client, hlist in direct.items():
            qos = 0
            rap = False
            sids: list[int] = []
            for h in hlist:
                qos = max(qos, h & handles.QOS_MASK)
                rap = rap or bool(h & handles.RETAIN_AS_PUBLISHED)
                sid = h >> handles.SUB_ID_SHIFT
                if sid and sid not in sids:  # one SUBSCRIBE's identifier on two filters: once
                    sids.append(sid)
            out.append(Delivery(client, qos, rap, tuple(sids)))
        for members in groups.values():
            out.append(self._pick(members, is_connected))
        if cacheable:
            self._remember(topic, out)
        return out

    def _remember(self, topic: bytes, deliveries: list[Delivery]) -> None:
        routes = self._routes
        if len(routes) >= self._route_cache_size:
            routes.clear()
        routes[topic] = deliveries

    def _pick(
        self, members: list[tuple[int, int]], is_connected: Callable[[int], bool]
    ) -> Delivery:
        # Rotate the starting member on every pick and take the first connected one from
        # there; if none is connected the message waits in the session of the member in
        # turn (a shared member's session persists like any other).
        self._turn += 1
        n = len(members)
        chosen = members[self._turn % n]
        for step in range(n):
            candidate = members[(self._turn + step) % n]
            if is_connected(candidate[0]):
                chosen = candidate
                break
        client, h = chosen
        sid = h >> handles.SUB_ID_SHIFT
        return Delivery(
            client,
            h & handles.QOS_MASK,
            bool(h & handles.RETAIN_AS_PUBLISHED),
            (sid,) if sid else (),
            shared=True,
        )

    def redispatch(
        self, topic: bytes, departed: int, is_connected: Callable[[int], bool]
    ) -> Delivery | None:
        """Another member of a shared group ``departed`` belongs to, for a message on
        ``topic`` that member can no longer take (MQTT 5 §4.8.2). Connected members only."""
        groups: dict[int, list[tuple[int, int]]] = {}
        mine: set[int] = set()
        for client, handle, group in self.index.match_detailed(topic):
            if group:
                groups.setdefault(group, []).append((client, handle))
                if client == departed:
                    mine.add(group)
        for group in sorted(mine):
            others = [m for m in groups[group] if m[0] != departed and is_connected(m[0])]
            if others:
                return self._pick(others, is_connected)
        return None
