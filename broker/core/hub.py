"""The hub: sessions, routing, retained messages and the publish path — the broker's
state, with no I/O and no trio.

``Hub`` is what every connection talks to. Deliveries go into the recipient session's
queue, or straight to its connection for QoS 0 (``Peer.send_qos0``), and the connection
sends them. Storage goes through the ``MqttStore`` port (``broker.persist``); the caller
of ``plan_publish`` decides whether to wait for the commit before acknowledging (a
PUBACK means stored). Time comes from the clock function handed in.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from broker.config import BrokerConfig
from broker.core import handles
from broker.core.message import RETAIN_PENDING, RETAIN_SETTLED, AppMessage, Outgoing
from broker.core.ports import Clock, Plan, Recipient, SubscriptionWatcher, Timers
from broker.core.queues import QueueStore, SessionQueues
from broker.core.router import Delivery, RetainedMessages, Router
from broker.core.sessions import RetainedBurst, Session, SessionManager, SubscriptionRecord
from broker.core.stats import Stats
from broker.core.systopics import SystemTopics

log = logging.getLogger("jetmq.broker")

RETAINED_AT_ONCE: Final = 256  # retained messages of one SUBSCRIBE sent at once; more are paced
RETAINED_REFILL: Final = 256  # paced retained copies are queued while the queue is shorter


class MqttStore(QueueStore, Protocol):
    """The MQTT state in the store (``broker.persist.state.Persistence``): the queues' side
    (``QueueStore``), the publish plan and the retained messages' reads."""

    retained: RetainedMessages | None  # told when a retained update's commit is known

    def plan(
        self, hub: Hub, msg: AppMessage, deliveries: Sequence[Delivery], extra: Sequence[Any]
    ) -> Plan: ...

    def after_commit(self, msg: AppMessage, plan: Plan) -> None: ...

    def session_ended(self, session: Session, dropped: Sequence[Outgoing]) -> None: ...

    def read_retained(self, seqs: Sequence[int]) -> list[AppMessage | None]: ...


class Hub:
    """Shared state of one broker process (see module docstring)."""

    def __init__(
        self, config: BrokerConfig, persistence: MqttStore, *, clock: Clock, timers: Timers
    ) -> None:
        self.config = config
        self.now = clock
        self.router = Router()
        self.persist = persistence
        self.queues = SessionQueues(persistence, config.sessions)
        self.sessions = SessionManager(
            timers, publish_will=self._publish_will, end_session=self.end_session
        )
        # Retained messages: the index in RAM, the messages read from the store.
        self.retained = RetainedMessages(self.router.retained, persistence.read_retained)
        persistence.retained = self.retained
        # Retained updates read but not yet applied (their commit is in flight), in
        # submission order, which is commit order (see ``settle_retained``).
        self._retained_pending: deque[tuple[AppMessage, Plan]] = deque()
        # Receivers other than sessions, by their number in the radix index.
        self._recipients: dict[int, Recipient] = {}
        # Handlers of system topics ($JS/API/...), seen before routing.
        self.systopics = SystemTopics()
        # Told after a client's subscriptions change (subscribe, unsubscribe, session end).
        self.watchers: list[SubscriptionWatcher] = []
        # An ACL is in force: deliveries are checked against each session's ``access``.
        self.acl_active = False
        # Store operations another part adds to a PUBLISH's commit, so its acknowledgement
        # waits for them too (the NATS bridge's outbox): given the message and its
        # deliveries, returns the operations (usually none).
        self.capture: Callable[[AppMessage, Sequence[Delivery]], Sequence[Any]] | None = None
        # Counters for $SYS and /metrics (broker.ops), bumped where the work happens.
        self.stats = Stats()

    def start(self) -> None:
        """The clock runs: sessions restored from the store start their expiry."""
        for session in self.sessions:
            if session.conn is None:
                self.sessions.start_expiry(session)

    def reconfigure(self, config: BrokerConfig) -> None:
        """A reload's configuration: what is read from here on, and the queue limits."""
        self.config = config
        self.queues.set_limits(config.sessions)

    def fire_all_wills(self) -> None:
        """The broker is going away: a pending will cannot wait for its delay."""
        for session in self.sessions:
            self.sessions.fire_will(session)

    def close(self) -> None:
        self.router.close()

    # -- sessions --------------------------------------------------------------------------------

    def end_session(self, session: Session) -> None:
        """The session is over: will, subscriptions, queued copies and stored state go."""
        self.sessions.fire_will(session)
        self._redispatch_shared(session)
        if session.subscriptions:  # (it also empties the route cache)
            self.router.unsubscribe_all(session.num)
        self.sessions.forget(session)
        dropped: Sequence[Outgoing] = ()
        if session.outgoing or session.queue:  # (most sessions end with neither)
            dropped = [*session.outgoing.values(), *session.queue]
            session.outgoing.clear()
            session.queue.clear()
        session.retained_backlog = session.retained_seen = None
        self.queues.session_ended(session)
        self.persist.session_ended(session, dropped)
        for watcher in self.watchers:
            watcher.subscriptions_changed(session.num)

    def _redispatch_shared(self, session: Session) -> None:
        """Give a departed member's shared copies to another member (MQTT 5 §4.8.2):
        copies never sent, and QoS 1 copies in flight; a QoS 2 copy already sent must
        not go to anybody else [MQTT-4.8.2-5]."""
        if not (session.outgoing or session.queue or session.backlog):
            return  # nothing to give (most sessions: no per-connect scans)
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
            if target.access is not None and not target.access.may_read(og.message.topic):
                continue
            qos = min(og.message.qos, d.qos)
            retain = og.message.retain and d.retain_as_published
            self.queue_copy(target, Outgoing(og.message, qos, retain, d.sub_ids, shared=True))

    # -- subscriptions -----------------------------------------------------------------------

    def subscribe(self, session: Session, record: SubscriptionRecord) -> bool:
        """Add or replace a subscription; True when it did not exist before."""
        is_new = self.router.subscribe(session.num, record.topic_filter, record.handle)
        session.subscriptions[record.topic_filter] = record
        if is_new:
            for watcher in self.watchers:
                watcher.subscriptions_changed(session.num)
        return is_new

    def unsubscribe(self, session: Session, topic_filter: bytes) -> bool:
        found = self.router.unsubscribe(session.num, topic_filter)
        session.subscriptions.pop(topic_filter, None)
        if found:
            for watcher in self.watchers:
                watcher.subscriptions_changed(session.num)
        return found

    def add_recipient(self, recipient: Recipient) -> int:
        """Register an internal recipient; its number is its identity in the radix index."""
        num = self.sessions.new_num()
        self._recipients[num] = recipient
        return num

    def subscribe_internal(
        self, num: int, topic_filter: bytes, qos: int, *, sub_id: int = 0
    ) -> bool:
        """Subscribe internal recipient ``num`` (True when the subscription is new)."""
        handle = handles.pack(
            qos, no_local=False, retain_as_published=True, retain_handling=0, sub_id=sub_id
        )
        return self.router.subscribe(num, topic_filter, handle)

    def remove_recipient(self, num: int) -> None:
        if self._recipients.pop(num, None) is not None:
            self.router.unsubscribe_all(num)

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
        queue = session.own_queue()
        current = self.retained
        now = self.now()
        # Half the session's own limits at most, so live copies still fit beside them.
        queues = self.queues
        most = RETAINED_REFILL
        if queues.max_messages:
            most = min(most, max(1, queues.max_messages // 2))
        most_bytes = queues.max_bytes // 2
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

    def last_retained_plan(self) -> Plan | None:
        """The commit of the last retained update read, while one is in flight: a SUBSCRIBE
        after a retained PUBLISH was read waits for it (read-after-write: the
        mosquitto_pub-then-mosquitto_sub case; a retained value becomes visible only once
        stored), then reads the set (``retained_for`` settles)."""
        pending = self._retained_pending
        return pending[-1][1] if pending else None

    def settle_retained(self, upto: AppMessage | None = None) -> None:
        """Apply the pending retained updates whose commit is done, in order, through
        ``upto`` (whose commit is done, so every earlier one's is too). Whoever comes
        first applies them — the publisher after its commit or a subscriber about to
        read the retained set — and each exactly once; one whose commit failed is not
        applied."""
        pending = self._retained_pending
        while pending:
            msg, plan = pending[0]
            ok = plan.committed()
            if ok is None:
                break
            pending.popleft()
            msg.retain_state = RETAIN_SETTLED
            if ok:
                self._set_retained(msg)
            if msg is upto:
                break

    def retained_for(self, topic_filter: bytes) -> Sequence[AppMessage]:
        """Retained messages matching a (non-shared) filter, expired ones dropped; more
        than ``RETAINED_AT_ONCE`` come as a sequence read from the store as it is walked
        (``router.RetainedMatch``). Updates whose commit is done are applied first."""
        if self._retained_pending:
            self.settle_retained()
        return self.retained.match(topic_filter, self.now(), RETAINED_AT_ONCE)

    # -- publish ---------------------------------------------------------------------------------

    def plan_publish(
        self, msg: AppMessage, extra: Sequence[Any] = ()
    ) -> tuple[list[Delivery], Plan]:
        """Route ``msg`` and work out what must be stored before it is acknowledged.

        ``extra`` store operations (inbound QoS 2 state) join the same commit.
        """
        deliveries = self.router.route(msg.topic, msg.origin, self.sessions.is_connected)
        if self.acl_active:
            deliveries = self._readable(msg.topic, deliveries)
        capture = self.capture
        if capture is not None:
            more = capture(msg, deliveries)
            if more:
                extra = [*extra, *more]
        plan = self.persist.plan(self, msg, deliveries, extra)
        if msg.retain and not plan.empty:
            msg.retain_state = RETAIN_PENDING
            self._retained_pending.append((msg, plan))
        return deliveries, plan

    def plain_route(self, topic: bytes) -> list[Delivery] | None:
        """The deliveries of a message on ``topic`` without retain or properties, when no
        decision is made per message: no capture hook (the bridge) sees messages and the
        route is cached (``Router.cached_route``); None otherwise (``broker.net.runs``).
        ``plan_publish`` would give these deliveries, and an empty plan at QoS 0 and at
        QoS 1 unless a persistent session takes a QoS 1 copy (``Persistence.plan``)."""
        if self.capture is not None:
            return None
        deliveries = self.router.cached_route(topic)
        if deliveries is not None and self.acl_active:
            deliveries = self._readable(topic, deliveries)
        return deliveries

    def _readable(self, topic: bytes, deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries whose session may read ``topic`` (the ACL, cached per client and
        topic: one dictionary lookup per recipient). The route list is shared, so a new
        list is made only when someone is left out. Sessions not connected since start
        (no ``access`` yet) are checked when their copies are sent."""
        by_num = self.sessions.by_num
        out: list[Delivery] | None = None
        for i, d in enumerate(deliveries):
            session = by_num.get(d.client)
            access = session.access if session is not None else None
            if access is None or access.may_read(topic):
                if out is not None:
                    out.append(d)
            elif out is None:
                out = list(deliveries[:i])
        return deliveries if out is None else out

    def apply_publish(self, msg: AppMessage, deliveries: Sequence[Delivery], plan: Plan) -> None:
        """After the plan's commit (or at once when nothing was stored): retain and deliver."""
        if msg.retain:
            if msg.retain_state == RETAIN_PENDING:
                self.settle_retained(msg)
            elif msg.retain_state == 0:
                self._set_retained(msg)
        by_num = self.sessions.by_num
        # The clock matters only to a message that expires (its copies' remaining lifetime).
        now = 0.0 if msg.expires_at is None else self.now()
        for index, d in enumerate(deliveries):
            session = by_num.get(d.client)
            if session is None:
                recipient = self._recipients.get(d.client)
                if recipient is not None:
                    qos = msg.qos if msg.qos < d.qos else d.qos
                    recipient.deliver(msg, qos, msg.retain and d.retain_as_published, d.sub_ids)
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
        if msg.topic[:1] == b"$":
            handler = self.systopics.handler_for(msg.topic)
            if handler is not None:
                handler.publish(msg, None)
                return
        deliveries, plan = self.plan_publish(msg)
        if plan.empty:
            self.apply_publish(msg, deliveries, plan)
            return

        def committed(ok: bool) -> None:
            if not ok:
                return  # not stored, so not published (broker.persist logs the failure)
            self.persist.after_commit(msg, plan)
            self.apply_publish(msg, deliveries, plan)

        plan.when_committed(committed)

    def queue_copy(self, session: Session, og: Outgoing) -> None:
        """Queue a copy for a session (bounded; the overflow policy picks the victim; a
        stored copy may wait on disk: ``broker.queues``)."""
        if self.queues.enqueue(session, og):
            conn = session.conn
            if conn is not None:
                conn.wake()

    def _publish_will(self, session: Session, msg: AppMessage) -> None:
        access = session.access
        if access is not None and not access.may_write(msg.topic):
            return  # the ACL was tightened since its CONNECT: the will is not published
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
