"""Sessions: what the broker keeps per client id, across network connections.

A ``Session`` holds the subscriptions, the outbound copies not yet acknowledged
(the codec's ``SessionState`` in send order, plus the broker's ``Outgoing`` per
packet id), the copies still waiting to be sent, the inbound QoS 2 packet
identifiers awaiting PUBREL (in ``SessionState``), and the will. The
``SessionManager`` maps client ids to sessions, performs takeover, and owns the
timers for will delay and session expiry (through the ``Timers`` port).

Lifecycle
    CONNECT with Clean Start 1 (or Clean Session 1) discards any existing
    session [MQTT-3.1.2-4]; with 0 it resumes one [MQTT-3.1.2-5] or creates one
    [MQTT-3.1.2-6]. When the connection closes, a session with expiry 0 ends at
    once; otherwise it is kept until the expiry interval passes
    [MQTT-3.1.2-23], [MQTT-4.1.0-2] (0xFFFFFFFF: never). A will is published
    after the connection closes abnormally, when the will delay has passed or
    the session ends, whichever is first, unless a new connection for the
    client id arrives first [MQTT-3.1.2-8], [MQTT-3.1.3-9].

Queued copies
    ``queue`` holds copies in RAM, next to be sent. A persistent session's copies that
    are stored (a ``$MQTT_pend`` entry) wait on disk only once the session is offline
    or its RAM queue is long (``OnDisk`` in ``backlog``, behind ``queue``: the seq,
    the size and the stored message's key, not the message); ``Persistence.page_in``
    reads them back a page at a time as the connection's window drains. Every copy
    queued behind an ``OnDisk`` one goes to the backlog too, so order is kept.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from broker.core.message import AppMessage, Outgoing
from broker.core.noqueue import NO_QUEUE
from broker.mqtt.session import SessionState

if TYPE_CHECKING:
    from broker.core.ports import Access, Peer, TimerHandle, Timers

NEVER_EXPIRES: Final = 0xFFFF_FFFF


@dataclass(slots=True)
class SubscriptionRecord:
    """One subscription as the client sent it (for SUBACK replay, persistence, inversion)."""

    topic_filter: bytes  # as sent, including "$share/<name>/" for shared subscriptions
    qos: int
    no_local: bool
    retain_as_published: bool
    retain_handling: int
    sub_id: int  # 0 = none
    handle: int  # packed options stored in the radix index


@dataclass(slots=True)
class WillRecord:
    message: AppMessage
    delay: int  # Will Delay Interval, seconds


class OnDisk:
    """A queued copy that is only in the store: its ``$MQTT_pend`` entry's seq, the
    payload's size (for ``queued_bytes``), the ``$MQTT_msgs`` key of a message stored for
    several sessions ("" when the entry holds the message), whether it was a shared
    subscription's pick (given to another member if the session ends), and the message's
    expiry deadline on the broker's clock (None: none, or read back at start, when it is
    computed from the stored time)."""

    __slots__ = ("expires_at", "key", "seq", "shared", "size")

    def __init__(
        self, seq: int, size: int, key: str, shared: bool, expires_at: float | None = None
    ) -> None:
        self.seq = seq
        self.size = size
        self.key = key
        self.shared = shared
        self.expires_at = expires_at


# RAM copies a connected persistent session keeps before stored ones wait on disk: a
# slow consumer does not pin what it has not read either.
RAM_QUEUE_MESSAGES: Final = 256
RAM_QUEUE_BYTES: Final = 4 * 1024 * 1024


class RetainedBurst:
    """Retained messages of one SUBSCRIBE that did not go out at once: they join the
    session queue as it drains (``Broker.refill_retained``)."""

    __slots__ = ("messages", "pos", "qos", "sub_ids")

    def __init__(self, messages: Sequence[AppMessage], qos: int, sub_ids: tuple[int, ...]) -> None:
        self.messages = messages
        self.pos = 0  # the next one to queue
        self.qos = qos  # the subscription's granted QoS
        self.sub_ids = sub_ids


class Session:
    """State of one client id (see module docstring)."""

    __slots__ = (
        "access",
        "backlog",
        "backlog_bytes",
        "client_id",
        "conn",
        "expiry_interval",
        "expiry_timer",
        "gone",
        "num",
        "outgoing",
        "overflow_dropped",
        "paging",
        "protocol_version",
        "queue",
        "queued_bytes",
        "retained_backlog",
        "retained_seen",
        "state",
        "stored",
        "subscriptions",
        "token",
        "will",
        "will_timer",
    )

    def __init__(self, client_id: str, num: int) -> None:
        self.client_id = client_id
        self.num = num  # the radix client number of this session
        self.expiry_interval = 0
        self.protocol_version = 5
        self.subscriptions: dict[bytes, SubscriptionRecord] = {}
        # Copies not yet sent (send order); shared and empty until own_queue().
        self.queue: deque[Outgoing] = NO_QUEUE
        self.queued_bytes = 0  # payload bytes of every queued copy: queue, paging, backlog
        # Copies waiting on disk behind ``queue`` (None: none), their bytes (with those of
        # a page being read), and how many copies a page being read holds (0: none).
        self.backlog: deque[OnDisk | Outgoing] | None = None
        self.backlog_bytes = 0
        self.paging = 0
        self.gone = False  # ended: a page read meanwhile is dropped
        self.overflow_dropped = 0  # copies dropped in the current overflow episode
        # Retained messages still to queue for large SUBSCRIBEs, and the topics that live
        # messages took to this session meanwhile (their retained copies are skipped).
        self.retained_backlog: deque[RetainedBurst] | None = None
        self.retained_seen: set[bytes] | None = None
        # The codec's session state: outbound in-flight packets and inbound QoS 2 ids.
        self.state = SessionState()
        self.outgoing: dict[int, Outgoing] = {}  # packet id -> the copy in flight
        self.stored = False  # whether anything of this session may be in the store
        self.token = ""  # its subject token in the store, computed on first use
        self.conn: Peer | None = None
        self.will: WillRecord | None = None
        self.will_timer: TimerHandle | None = None
        self.expiry_timer: TimerHandle | None = None
        # The ACL's decisions for this client (None: no ACL, or not connected since the
        # broker started; then its connection's copies are checked when sent).
        self.access: Access | None = None

    def own_queue(self) -> deque[Outgoing]:
        """``queue``, made the session's own first if it is still the shared empty one:
        what a copy is appended to."""
        queue = self.queue
        if queue is NO_QUEUE:
            queue = self.queue = deque()
        return queue

    @property
    def persistent(self) -> bool:
        """Whether the session outlives its network connection (and so is stored)."""
        return self.expiry_interval > 0

    @property
    def queued(self) -> int:
        """Copies queued: in RAM, in a page being read, and on disk."""
        backlog = self.backlog
        return len(self.queue) + self.paging + (len(backlog) if backlog is not None else 0)

    def spill(self) -> None:
        """The session went offline: its stored queued copies wait on disk only (copies
        that are not stored, QoS 0 ones or retained ones of a SUBSCRIBE, stay in RAM, in
        order). With a page being read it is done when the page is in."""
        if self.paging or not self.queue:
            return
        moved: deque[OnDisk | Outgoing] = deque()
        size = 0
        for og in self.queue:
            n = len(og.message.payload)
            size += n
            msg = og.message
            moved.append(
                OnDisk(og.pend_seq, n, msg.key, og.shared, msg.expires_at) if og.pend_seq else og
            )
        self.queue.clear()
        if self.backlog:
            moved.extend(self.backlog)
        self.backlog = moved
        self.backlog_bytes += size


class SessionManager:
    """Client id -> session, takeover, and the will-delay / expiry timers."""

    def __init__(
        self,
        timers: Timers,
        *,
        publish_will: Callable[[Session, AppMessage], None],
        end_session: Callable[[Session], None],
    ) -> None:
        self._by_id: dict[str, Session] = {}
        self.by_num: dict[int, Session] = {}
        self._nums = itertools.count(1)
        self._publish_will = publish_will
        self._end_session = end_session
        self._timers = timers
        self._assigned = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._by_id.values()))

    def get(self, client_id: str) -> Session | None:
        return self._by_id.get(client_id)

    def is_connected(self, num: int) -> bool:
        session = self.by_num.get(num)
        return session is not None and session.conn is not None

    def assign_client_id(self) -> str:
        """A client id no session uses [MQTT-3.2.2-16]."""
        while True:
            candidate = f"jetmq-{next(self._assigned):08d}-{id(self) & 0xFFFF:04x}"
            if candidate not in self._by_id:
                return candidate

    def new_num(self) -> int:
        """A number no session or internal recipient uses (the radix client id)."""
        return next(self._nums)

    def create(self, client_id: str) -> Session:
        session = Session(client_id, next(self._nums))
        self._by_id[client_id] = session
        self.by_num[session.num] = session
        return session

    def forget(self, session: Session) -> None:
        """Remove an ended session from the maps (the caller cleans the indexes)."""
        self.cancel_timers(session)
        session.gone = True
        if self._by_id.get(session.client_id) is session:
            del self._by_id[session.client_id]
        self.by_num.pop(session.num, None)

    def cancel_timers(self, session: Session) -> None:
        if session.expiry_timer is not None:
            session.expiry_timer.cancel()
            session.expiry_timer = None
        if session.will_timer is not None:
            session.will_timer.cancel()
            session.will_timer = None

    # -- connection closed ------------------------------------------------------------------

    def connection_closed(self, session: Session, *, send_will: bool) -> None:
        """Start the will and expiry clocks for a session whose connection went away.

        The will stays on the session while its delay runs; ``fire_will`` sends it
        when the delay passes or the session ends, whichever comes first.
        """
        if not send_will:
            session.will = None  # [MQTT-3.1.2-10]: discarded on DISCONNECT 0x00
        if session.expiry_interval == 0:
            self._end_session(session)
            return
        session.spill()
        if session.will is not None:
            if session.will.delay == 0:
                self.fire_will(session)
            else:
                session.will_timer = self._timers.call_later(
                    session.will.delay, lambda: self._will_due(session)
                )
        self.start_expiry(session)

    def start_expiry(self, session: Session) -> None:
        """Start the expiry clock of a session without a connection (0xFFFFFFFF: never)."""
        if session.expiry_interval != NEVER_EXPIRES:
            if session.expiry_timer is not None:
                session.expiry_timer.cancel()
            session.expiry_timer = self._timers.call_later(
                session.expiry_interval, lambda: self._expiry_due(session)
            )

    def fire_will(self, session: Session) -> None:
        """Publish the session's pending will, if any (once)."""
        will = session.will
        session.will = None
        if session.will_timer is not None:
            session.will_timer.cancel()
            session.will_timer = None
        if will is not None:
            self._publish_will(session, will.message)

    def _will_due(self, session: Session) -> None:
        session.will_timer = None
        self.fire_will(session)

    def _expiry_due(self, session: Session) -> None:
        session.expiry_timer = None
        if session.conn is None:
            self._end_session(session)
