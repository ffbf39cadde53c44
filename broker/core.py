"""The broker: sessions, routing, retained messages and the publish path, on the trio thread.

``Broker`` is what every connection task talks to. It never does socket I/O
itself: deliveries go into the recipient session's queue and its connection's
writer task sends them (``ClientConnection.wake``). Storage goes through
``broker.persist.Persistence``; the caller of ``publish`` decides whether to
wait for the commit before acknowledging (a PUBACK means stored).
"""

from __future__ import annotations

import functools
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from broker import handles
from broker.config import BrokerConfig
from broker.message import AppMessage, Outgoing
from broker.mqtt.properties import Properties
from broker.parking import Parkable, Parking
from broker.persist import Persistence, PublishPlan, StorageError
from broker.queues import SessionQueues
from broker.router import Delivery, RetainedMessages, Router
from broker.sessions import RetainedBurst, Session, SessionManager, SubscriptionRecord

if TYPE_CHECKING:
    from broker.client import ClientConnection
    from broker.output import Output


@functools.cache
def _connection_class() -> type[ClientConnection]:
    # broker.client imports this module; resolved once, not per connection.
    from broker.client import ClientConnection

    return ClientConnection


log = logging.getLogger("jetmq.broker")

RETAINED_AT_ONCE = 256  # retained messages of one SUBSCRIBE sent at once; more are paced
RETAINED_REFILL = 256  # paced retained copies are queued while the queue is shorter


class Broker:
    """Shared state of one broker process (see module docstring)."""

    def __init__(self, config: BrokerConfig, persistence: Persistence) -> None:
        self.config = config
        self.router = Router()
        self.persist = persistence
        self.queues = SessionQueues(persistence, config.sessions)
        self.sessions = SessionManager(
            publish_will=self._publish_will, end_session=self.end_session
        )
        # Retained messages: the index in RAM, the messages read from the store.
        self.retained = RetainedMessages(self.router.retained, persistence.read_retained)
        persistence.retained = self.retained
        self._nursery: trio.Nursery | None = None
        self.connections: set[ClientConnection] = set()
        self._all_closed = trio.Event()
        # Connections that got output while a reader handles one input chunk; the reader
        # sends it at the end of the chunk (see ClientConnection.output_ready).
        self.batch: list[Output] | None = None
        # Connected clients that have sent nothing since their CONNECT (no task yet).
        self.parking = Parking(self._start_parked)
        # The CONNACK properties of an MQTT 5 client that asked for nothing special.
        self.connack_properties: Properties | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: BrokerConfig) -> Broker:
        persistence = await Persistence.open(config.storage)
        broker = cls(config, persistence)
        try:
            await persistence.load_into(broker)
        except BaseException:
            with trio.CancelScope(shield=True):
                await persistence.close()
            raise
        return broker

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self.persist.attach(nursery)
        nursery.start_soon(self.parking.run)
        self.sessions.attach_nursery(nursery)
        for session in self.sessions:
            if session.conn is None:  # restored from the store: its expiry clock restarts now
                self.sessions.start_expiry(session)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task owned by the broker (outlives the connection that started it)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def spawn_connection(self, transport: socket.socket | trio.abc.Stream) -> None:
        """Serve one accepted connection (a socket from ``client.prepare_socket``, or a
        trio stream in tests)."""
        cls = _connection_class()
        assert self._nursery is not None
        conn = cls(self, transport)
        self.connection_started(conn)
        if not conn.connect_now():  # True: connected and parked, no task until needed
            self._nursery.start_soon(conn.run)

    def _start_parked(self, conn: Parkable) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(conn.run)

    def flush_batch(self) -> None:
        """Send what the current input chunk produced, one write per connection."""
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        for conn in batch:
            conn.flush_direct()

    def connection_started(self, conn: ClientConnection) -> None:
        self.connections.add(conn)

    def connection_ended(self, conn: ClientConnection) -> None:
        self.connections.discard(conn)
        if not self.connections:
            self._all_closed.set()
            self._all_closed = trio.Event()

    async def shutdown(self) -> None:
        """Graceful stop: DISCONNECT 0x8B to every client, wills published, connections
        flushed and closed, store writes committed. The caller bounds the time."""
        for conn in list(self.connections):
            conn.server_shutdown()
        for session in self.sessions:
            # The broker is going away: a pending will cannot wait for its delay.
            self.sessions.fire_will(session)
        if self.connections:
            await self._all_closed.wait()
        await self.persist.flush()

    async def close(self) -> None:
        self.parking.close()
        await self.persist.close()
        self.router.close()

    def log_warning(self, fmt: str, *args: Any) -> None:
        log.warning(fmt, *args)

    def log_exception(self, message: str) -> None:
        log.exception(message)

    # -- sessions --------------------------------------------------------------------------------

    def end_session(self, session: Session) -> None:
        """The session is over: will, subscriptions, queued copies and stored state go."""
        self.sessions.fire_will(session)
        self._redispatch_shared(session)
        self.router.unsubscribe_all(session.num)
        self.sessions.forget(session)
        dropped = [*session.outgoing.values(), *session.queue]
        session.outgoing.clear()
        session.queue.clear()
        session.retained_backlog = session.retained_seen = None
        self.queues.session_ended(session)
        self.persist.session_ended(session, dropped)

    def _redispatch_shared(self, session: Session) -> None:
        """Give a departed member's shared copies to another member (MQTT 5 §4.8.2):
        copies never sent, and QoS 1 copies in flight; a QoS 2 copy already sent must
        not go to anybody else [MQTT-4.8.2-5]."""
        in_flight = [og for og in session.outgoing.values() if og.shared and og.qos == 1]
        waiting = [og for og in session.queue if og.shared]
        waiting += self.queues.shared_waiting(session)  # (read back from disk)
        for og in (*in_flight, *waiting):
            d = self.router.redispatch(og.message.topic, session.num, self.sessions.is_connected)
            if d is None:
                continue
            target = self.sessions.by_num.get(d.client)
            if target is None:
                continue
            qos = min(og.message.qos, d.qos)
            retain = og.message.retain and d.retain_as_published
            self.queue_copy(target, Outgoing(og.message, qos, retain, d.sub_ids, shared=True))

    # -- subscriptions -----------------------------------------------------------------------

    def subscribe(self, session: Session, record: SubscriptionRecord) -> bool:
        """Add or replace a subscription; True when it did not exist before."""
        is_new = self.router.subscribe(session.num, record.topic_filter, record.handle)
        session.subscriptions[record.topic_filter] = record
        return is_new

    def unsubscribe(self, session: Session, topic_filter: bytes) -> bool:
        found = self.router.unsubscribe(session.num, topic_filter)
        session.subscriptions.pop(topic_filter, None)
        return found

    def pace_retained(
        self,
        session: Session,
        messages: Sequence[AppMessage],
        qos: int,
        sub_ids: tuple[int, ...],
    ) -> None:
        """Retained messages for a SUBSCRIBE that cannot go out at once (more than
        ``RETAINED_AT_ONCE``, or more than a copy limit leaves room for): they join the
        session queue as it drains, at most ``RETAINED_REFILL`` (and half the session's
        queue limits) at a time, so the limits (``max_outbound_queue`` for QoS 0,
        ``max_queued_messages`` / ``max_queued_bytes`` for QoS 1/2) do not cut the burst
        short and live copies still fit beside it. The caller wakes the connection."""
        if session.retained_backlog is None:
            session.retained_backlog = deque()
            session.retained_seen = set()
        session.retained_backlog.append(RetainedBurst(messages, qos, sub_ids))
        self.refill_retained(session)

    def refill_retained(self, session: Session) -> None:
        """Queue paced retained copies while the queue is short: for each topic of the
        burst, its retained message as it is now (a newer one if it was replaced since
        the SUBSCRIBE; none if deleted or expired), unless a live message on the topic
        reached the session since — the subscriber would otherwise get the older value
        last."""
        backlog, seen = session.retained_backlog, session.retained_seen
        if backlog is None or seen is None:
            return
        queue = session.queue
        current = self.retained
        now = trio.current_time()
        # Half the session's own limits at most, so live copies still fit beside them.
        limits = self.config.sessions
        most = RETAINED_REFILL
        if limits.max_queued_messages:
            most = min(most, max(1, limits.max_queued_messages // 2))
        most_bytes = limits.max_queued_bytes // 2 if limits.max_queued_bytes else 0
        while backlog and len(queue) < most:
            if most_bytes and session.queued_bytes >= most_bytes and queue:
                break
            burst = backlog[0]
            if burst.pos == len(burst.messages):
                backlog.popleft()
                continue
            topic = burst.messages[burst.pos].topic
            burst.pos += 1
            msg = current.get(topic)  # the topic's retained message now (replaced: the new one)
            if msg is None or topic in seen:
                continue
            if msg.expires_at is not None and msg.expires_at <= now:
                continue
            queue.append(Outgoing(msg, min(msg.qos, burst.qos), True, burst.sub_ids))
            session.queued_bytes += len(msg.payload)
        if not backlog:
            session.retained_backlog = session.retained_seen = None

    def retained_for(self, topic_filter: bytes) -> Sequence[AppMessage]:
        """Retained messages matching a (non-shared) filter, expired ones dropped; more
        than ``RETAINED_AT_ONCE`` come as a sequence read from the store as it is walked
        (``router.RetainedMatch``)."""
        return self.retained.match(topic_filter, trio.current_time(), RETAINED_AT_ONCE)

    # -- publish ---------------------------------------------------------------------------------

    def plan_publish(
        self, msg: AppMessage, extra: Sequence[Any] = ()
    ) -> tuple[list[Delivery], PublishPlan]:
        """Route ``msg`` and work out what must be stored before it is acknowledged.

        ``extra`` store operations (inbound QoS 2 state) join the same commit.
        """
        deliveries = self.router.route(msg.topic, msg.origin, self.sessions.is_connected)
        plan = self.persist.plan(self, msg, deliveries, extra)
        return deliveries, plan

    def apply_publish(
        self, msg: AppMessage, deliveries: Sequence[Delivery], plan: PublishPlan
    ) -> None:
        """After the plan's commit (or at once when nothing was stored): retain and deliver."""
        if msg.retain:
            self._set_retained(msg)
        by_num = self.sessions.by_num
        now = trio.current_time()
        for index, d in enumerate(deliveries):
            session = by_num.get(d.client)
            if session is None:
                continue
            qos = msg.qos if msg.qos < d.qos else d.qos
            retain = msg.retain and d.retain_as_published
            if qos == 0:
                conn = session.conn
                if conn is not None:
                    conn.send_qos0(msg, retain, d.sub_ids, now)
                elif self.config.sessions.queue_qos0 and session.persistent:
                    self.queue_copy(session, Outgoing(msg, 0, retain, d.sub_ids, shared=d.shared))
                else:
                    continue  # not delivered: a paced retained copy of its topic still counts
                if session.retained_seen is not None:  # its paced retained copy is older
                    session.retained_seen.add(msg.topic)
                continue
            if session.retained_seen is not None:
                session.retained_seen.add(msg.topic)
            og = Outgoing(msg, qos, retain, d.sub_ids, plan.pend_seq(index), d.shared)
            self.queue_copy(session, og)

    def publish_now(self, msg: AppMessage) -> None:
        """Publish without an acknowledgement to wait for (wills, broker messages)."""
        deliveries, plan = self.plan_publish(msg)
        if plan.empty:
            self.apply_publish(msg, deliveries, plan)
            return
        assert self._nursery is not None
        self._nursery.start_soon(self._publish_after_commit, msg, deliveries, plan)

    async def _publish_after_commit(
        self, msg: AppMessage, deliveries: Sequence[Delivery], plan: PublishPlan
    ) -> None:
        try:
            await plan.wait()
        except StorageError:
            return  # not stored, so not published (broker.persist logs the failure)
        self.persist.after_commit(msg, plan)
        self.apply_publish(msg, deliveries, plan)

    def queue_copy(self, session: Session, og: Outgoing) -> None:
        """Queue a copy for a session (bounded; the overflow policy picks the victim; a
        stored copy may wait on disk: ``broker.queues``)."""
        if self.queues.enqueue(session, og):
            conn = session.conn
            if conn is not None:
                conn.wake()

    def _publish_will(self, session: Session, msg: AppMessage) -> None:
        self.publish_now(msg)

    # -- retained ----------------------------------------------------------------------------

    def _set_retained(self, msg: AppMessage) -> None:
        if not msg.payload:
            # [MQTT-3.3.1-6], [MQTT-3.3.1-7]: an empty retained payload deletes and is not stored.
            self._drop_retained(msg.topic)
            return
        self.retained.set(msg)

    def _drop_retained(self, topic: bytes) -> None:
        self.retained.drop(topic)


def make_handle(sub: Any, qos: int, sub_id: int) -> int:
    """Pack a codec ``Subscription`` (with its granted QoS) and identifier into a radix handle."""
    return handles.pack(
        qos,
        no_local=sub.no_local,
        retain_as_published=sub.retain_as_published,
        retain_handling=int(sub.retain_handling),
        sub_id=sub_id,
    )
