"""``JetStream``: the JetStream service of one broker, composed of its parts.

``Broker.open`` makes it when ``[jetstream] enabled`` (the default) and ``start`` hands
it the nursery. It registers the ``$JS/API/`` and ``$JS/ACK/`` handlers with the hub's
system topics, watches subscriptions (``Interest``), takes the store's events (the
writer thread hands them to the trio thread in one ``run_sync_soon`` per commit) and
runs the store's timers: one task sleeps until ``Store.next_deadline`` (or until woken
by a request that may have made an earlier one) and submits ``Tick``.

What streams and consumers exist is read in a worker thread at start and after every
API change, before that change is answered (:meth:`JetStream.refresh`): the stream
subjects for capture, the push consumers' deliver topics for delivery and interest.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Final

import trio

from broker.core.hub import Hub
from broker.core.systopics import Outcome
from broker.jetstream import acks, api
from broker.jetstream.capture import Capture, outcome, pub_ack_json
from broker.jetstream.commit import commit
from broker.jetstream.flow import FC_PREFIX, PushFlow, PushSettings
from broker.jetstream.headers import HeaderError
from broker.jetstream.interest import Interest
from broker.jetstream.outbox import Outbox
from broker.jetstream.requests import INTERNAL_PREFIX, Requests
from broker.mqtt.packets import Publish
from broker.persist.client import StorageError, StoreClient
from store import Event, JetStreamError, PubAck, Store, Tick
from store.ops import OpResult
from store.topics import subject_to_topic

log = logging.getLogger("jetmq.jetstream")

MAX_TICK_SLEEP_S: Final = 1.0  # the timer task looks again at least this often
TICK_AGAIN_S: Final = 0.01  # a deadline a Tick left where it was is tried again after this

Snapshot = tuple[tuple[tuple[str, str], ...], dict[tuple[str, str], PushSettings], int, int]


def read_snapshot(st: Store) -> Snapshot:
    """((user stream subject, its stream)..., push consumers -> deliver topic, user
    streams, their consumers); worker thread."""
    subjects: list[tuple[str, str]] = []
    push: dict[tuple[str, str], PushSettings] = {}
    streams = consumers = 0
    for name in st.stream_names():
        if name.startswith(INTERNAL_PREFIX):
            continue
        try:
            info = st.stream_info(name)
            subjects.extend((subject, name) for subject in info.config.subjects or ())
            streams += 1
            for consumer in st.consumer_names(name):
                consumers += 1
                cfg = st.consumer_info(name, consumer).config
                if cfg.deliver_subject:
                    push[(name, consumer)] = PushSettings(
                        subject_to_topic(cfg.deliver_subject),
                        cfg.idle_heartbeat or 0,
                        bool(cfg.flow_control),
                    )
        except JetStreamError:
            continue  # deleted meanwhile
    return tuple(subjects), push, streams, consumers


class JetStream:
    """The JetStream service (see module docstring)."""

    def __init__(self, hub: Hub, client: StoreClient) -> None:
        self.hub = hub
        self.client = client
        self.store = client.store
        self.capture = Capture()
        self.outbox = Outbox(hub)
        self.interest = Interest(hub, client)
        self.requests = Requests(self.store, lambda: self.hub.config.jetstream)
        self.api = api.ApiHandler(
            client, self.requests, self.outbox, self.interest, self.refresh, self.wake
        )
        self.acks = acks.AckHandler(client, self.outbox, self.interest, self.wake)
        self.flow = PushFlow(self.outbox, self.interest, client.spawn)
        self.outbox.on_push = self.flow.delivered
        self._wakeup = trio.Event()
        self._refreshing = trio.Lock()
        self._token: trio.lowlevel.TrioToken | None = None
        self._push: dict[tuple[str, str], PushSettings] = {}
        # User streams and their consumers, as of the last refresh ($SYS, /metrics).
        self.streams = 0
        self.consumers = 0
        self._started = False  # the nursery is there (heartbeat tasks can start)

    # -- lifecycle ------------------------------------------------------------------------------

    async def load(self) -> None:
        """Learn the streams and push consumers (before the broker listens)."""
        await self.refresh()

    def start(self, nursery: trio.Nursery) -> None:
        """Take the store's events, claim the ``$JS`` topics, run the timers."""
        self._token = trio.lowlevel.current_trio_token()
        self._started = True
        self.store.set_event_hook(self._on_events)
        self.hub.systopics.register(api.TOPIC_PREFIX, self.api)
        self.hub.systopics.register(acks.TOPIC_PREFIX, self.acks)
        self.hub.systopics.register(FC_PREFIX, self.flow)
        self.hub.watchers.append(self.interest)
        self.interest.set_push(self.outbox.push_topics)
        self.flow.set_consumers(self._push)
        nursery.start_soon(self._timers)

    def stop(self) -> None:
        self.store.set_event_hook(None)
        self.hub.systopics.unregister(api.TOPIC_PREFIX)
        self.hub.systopics.unregister(acks.TOPIC_PREFIX)
        self.hub.systopics.unregister(FC_PREFIX)
        self.flow.set_consumers({})
        if self.interest in self.hub.watchers:
            self.hub.watchers.remove(self.interest)

    async def refresh(self) -> None:
        """Read what streams and push consumers exist now and apply it (in order)."""
        async with self._refreshing:
            self.client.submit_open()
            subjects, push, self.streams, self.consumers = await trio.to_thread.run_sync(
                read_snapshot, self.store
            )
            self.capture.set_subjects(subjects)
            self._push = push
            self.outbox.push_topics = {key: p.topic for key, p in push.items()}
            self.interest.set_push(self.outbox.push_topics)
            if self._started:
                self.flow.set_consumers(push)

    # -- capture -------------------------------------------------------------------------------

    def captured(self, p: Publish, result: OpResult | HeaderError) -> Outcome:
        """A captured PUBLISH was committed: the JSON PubAck to its Response Topic, if it
        has one, and what its PUBACK/PUBREC says."""
        reply = p.properties.response_topic
        if reply is not None and api.valid_reply(reply) is None:
            stream = "" if isinstance(result, PubAck) else self.capture.stream_for(p.topic)
            doc = pub_ack_json(result, stream)
            if doc is not None:
                self.outbox.answer(reply, doc, p.properties.correlation_data)
        self.wake()
        return outcome(result)

    # -- store events and timers ------------------------------------------------------------------

    def _on_events(self, events: Sequence[Event]) -> None:
        """(writer thread) Hand the events of one commit to the trio thread."""
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._events, events)

    def _events(self, events: Sequence[Event]) -> None:
        self.outbox.events(events)
        self.wake()

    def wake(self) -> None:
        """The store may have an earlier deadline now."""
        self._wakeup.set()

    async def _timers(self) -> None:
        while True:
            self._wakeup = trio.Event()
            deadline = self.store.next_deadline()
            now = time.time_ns()
            if deadline is not None and deadline <= now:
                try:
                    await commit(self.client, [Tick(None)])
                except StorageError:
                    await trio.sleep(MAX_TICK_SLEEP_S)  # (logged by the client)
                if self.store.next_deadline() == deadline:
                    await trio.sleep(TICK_AGAIN_S)  # nothing moved: no busy loop
                continue
            if deadline is None:  # nothing due until a request or a commit wakes us
                await self._wakeup.wait()
                continue
            with trio.move_on_after(min(MAX_TICK_SLEEP_S, (deadline - now) / 1e9)):
                await self._wakeup.wait()
