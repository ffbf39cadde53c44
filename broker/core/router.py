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

``RetainedMessages`` keeps the retained messages' index only: the radix retained index
maps a topic to a number of its own, an array maps that number to the message's seq in
``$MQTT_rmsgs``, and the message is read from the store when a SUBSCRIBE needs it (a
message whose commit is not known yet stays in RAM until it is).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Final, NamedTuple, overload

import radix
from broker.core import handles
from broker.core.message import AppMessage
from broker.mqtt.packets import Publish

# Reads the retained messages stored at these seqs (None: no longer stored).
ReadRetained = Callable[[Sequence[int]], list[AppMessage | None]]
MATCH_CHUNK: Final = 256  # retained messages of a paced SUBSCRIBE read per store transaction

ROUTE_CACHE_SIZE: Final = 16_384  # topics; the cache starts over when full
# Longer topics are matched every time, not cached: a topic may be 65,535 bytes, and a full
# cache of such keys would hold a GiB a client could fill with PUBLISHes to fresh topics.
CACHED_TOPIC_MAX: Final = 1024


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

    def cached_route(self, topic: bytes) -> list[Delivery] | None:
        """``route``'s deliveries for ``topic`` when they are cached, which they are only
        when they depend neither on the publisher (No Local) nor on a shared group's pick;
        None otherwise."""
        return self._routes.get(topic)

    def _remember(self, topic: bytes, deliveries: list[Delivery]) -> None:
        if len(topic) > CACHED_TOPIC_MAX:
            return
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


class RetainedMessages:
    """Retained messages: the topic index in RAM, the messages in the store.

    Per topic: its radix entry (topic -> number, ~37 bytes) and 8 bytes in ``_seqs``
    (number -> seq in ``$MQTT_rmsgs``, 0 while the message is in ``_ram``, waiting for its
    commit to be known). A number is never given to another topic: a paced SUBSCRIBE
    holds numbers, and a number must keep naming its topic (8 bytes per topic that ever
    had a retained message).
    """

    def __init__(self, index: radix.RetainedIndex, read: ReadRetained) -> None:
        self.index = index
        self._read = read
        self._seqs = array("Q", [0])  # number -> seq (number 0 is not used)
        self._ram: dict[int, AppMessage] = {}
        # Expiry deadlines (on the broker's clock) of the messages that have one: a message
        # read back keeps the deadline it had when it was published (the store's
        # timestamps are wall-clock time).
        self._expires: dict[int, float] = {}
        self._cache: dict[int, AppMessage | None] = {}  # the last chunk read, by seq

    def __len__(self) -> int:
        return len(self.index)

    def set(self, msg: AppMessage) -> None:
        """``msg`` is its topic's retained message (``msg.retained_seq``: its seq in the store,
        0 if not known yet)."""
        topic = msg.topic
        num = self.index.get(topic)
        if num is None:
            num = len(self._seqs)
            self._seqs.append(0)
            self.index.set(topic, num)
        seq = msg.retained_seq
        self._seqs[num] = seq
        if msg.expires_at is not None:
            self._expires[num] = msg.expires_at
        elif self._expires:
            self._expires.pop(num, None)
        if seq:
            self._ram.pop(num, None)
        else:
            self._ram[num] = msg

    def committed(self, msg: AppMessage) -> None:
        """``msg``'s commit is known (its ``retained_seq``): if it is still its topic's
        retained message, it is read from the store from now on."""
        if not self._ram:
            return  # (the usual case: the message was set after its commit)
        num = self.index.get(msg.topic)
        if num is not None and self._ram.get(num) is msg:
            self._seqs[num] = msg.retained_seq
            del self._ram[num]

    def load(self, topic: bytes, seq: int, expires_at: float | None = None) -> None:
        """Start-up: the retained message of ``topic`` is stored at ``seq``."""
        num = len(self._seqs)
        self._seqs.append(seq)
        self.index.set(topic, num)
        if expires_at is not None:
            self._expires[num] = expires_at

    def drop(self, topic: bytes) -> None:
        num = self.index.get(topic)
        if num is not None:
            self.index.remove(topic)
            self._seqs[num] = 0
            self._ram.pop(num, None)
            self._expires.pop(num, None)

    def get(self, topic: bytes) -> AppMessage | None:
        """The topic's retained message now (read from the store; expired ones included)."""
        if not topic:
            return None
        num = self.index.get(topic)
        if num is None:
            return None
        seq = self._seqs[num]
        if not seq:
            return self._ram.get(num)
        if seq in self._cache:  # (a paced burst's chunk was just read)
            return self._with_expiry(num, self._cache[seq])
        return self._messages([num])[0]

    def match(self, topic_filter: bytes, now: float, at_once: int) -> Sequence[AppMessage]:
        """Retained messages matching a (non-shared) filter. At most ``at_once`` of them
        are read now (expired ones left out and dropped); more come as a sequence that
        reads them a chunk at a time as it is walked (a paced SUBSCRIBE), each as it is
        then."""
        if not len(self.index):
            return []  # nothing retained: no match to run (a subscription storm's case)
        nums = self.index.match(topic_filter)
        if len(nums) > at_once:
            return RetainedMatch(self, nums)
        out = []
        for msg in self._messages(nums):
            if msg is None:
                continue
            if msg.expires_at is not None and msg.expires_at <= now:
                self.drop(msg.topic)
                continue
            out.append(msg)
        return out

    def _messages(self, nums: Sequence[int]) -> list[AppMessage | None]:
        """The current messages of topic numbers, in order (one store read for them all)."""
        seqs = self._seqs
        ram = self._ram
        wanted = [seqs[n] for n in nums]
        cache = self._cache
        missing = [s for s in wanted if s and s not in cache]
        if missing:  # the cache becomes these messages (bounded by one read's size)
            got = dict(zip(missing, self._read(missing), strict=True))
            for s in wanted:
                if s and s not in got:
                    got[s] = cache[s]
            cache = self._cache = got
        out = [cache.get(s) if s else ram.get(n) for n, s in zip(nums, wanted, strict=True)]
        if self._expires:
            out = [self._with_expiry(n, m) for n, m in zip(nums, out, strict=True)]
        return out

    def _with_expiry(self, num: int, msg: AppMessage | None) -> AppMessage | None:
        if msg is not None:
            deadline = self._expires.get(num)
            if deadline is not None:
                msg.expires_at = deadline
        return msg


class RetainedMatch(Sequence[AppMessage]):
    """The retained messages of a large SUBSCRIBE, read a chunk at a time as the burst is
    walked in order: each one is its topic's message when it is read (a newer one if it
    was replaced since the SUBSCRIBE). One that is gone by then reads as a message on no
    topic (an empty topic has no retained message: ``RetainedMessages.get`` says None)."""

    def __init__(self, owner: RetainedMessages, nums: list[int]) -> None:
        self._owner = owner
        self._nums = nums
        self._start = -1  # position of the chunk read last
        self._chunk: list[AppMessage | None] = []

    def __len__(self) -> int:
        return len(self._nums)

    @overload
    def __getitem__(self, i: int) -> AppMessage: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[AppMessage]: ...

    def __getitem__(self, i: int | slice) -> AppMessage | Sequence[AppMessage]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self._nums)
        if not 0 <= i < len(self._nums):
            raise IndexError(i)
        start = i - i % MATCH_CHUNK
        if start != self._start:
            self._chunk = self._owner._messages(self._nums[start : start + MATCH_CHUNK])
            self._start = start
        msg = self._chunk[i - start]
        return _GONE if msg is None else msg

    def __iter__(self) -> Iterator[AppMessage]:
        for i in range(len(self._nums)):
            yield self[i]


_GONE: Final = AppMessage(Publish(b"", b"", 0, True), None, 0)
