"""Session queues bounded by configuration: what is queued where, overflow, paging.

A session's queued copies are ``Session.queue`` (in RAM, sent next) followed by
``Session.backlog``: copies whose ``$MQTT_pend`` entry holds them on disk, known in
RAM only by an ``OnDisk`` (seq, size, message key), plus any copy that is not stored
(QoS 0, retained at SUBSCRIBE) queued behind them, which stays in RAM to keep the
order. A stored copy goes to the backlog when its session is offline, when the
backlog is not empty (order), or when the RAM queue already holds
``RAM_QUEUE_MESSAGES`` copies or ``RAM_QUEUE_BYTES``. When a session goes offline
its RAM queue moves to the backlog (``Session.spill``).

A connected session's backlog comes back a page at a time (``PAGE_MESSAGES``,
``PAGE_BYTES``) when fewer than ``PAGE_LOW`` copies are left in RAM: the store side
(``QueueStore.page_in``: a task reading in a worker thread, one read transaction per
stream) reads the page, ``page_read`` appends it to the RAM queue, and the connection
is woken. The writer sends from RAM
meanwhile, so order is kept: the page is the backlog's head, and every copy queued
while it is read goes behind it.

Limits (``sessions.max_queued_messages`` / ``max_queued_bytes``) count all three parts.
An overflow is logged once per episode: a warning with the client id when the first
copy is dropped, a line with the number dropped when a copy fits again or the
session ends; ``dropped`` counts them for the whole broker.

Runs on the trio thread and imports no trio (it belongs with a trio-free core); nothing here
blocks it (except ``shared_waiting``: a rare, bounded read when a session with shared
copies on disk ends).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any, Final, Protocol

from broker.config import SessionConfig
from broker.core.message import Outgoing
from broker.core.sessions import RAM_QUEUE_BYTES, RAM_QUEUE_MESSAGES, OnDisk, Session

# What QueueStore.read_copies returns and QueueStore.copies takes back: opaque here.
Page = Any

# A page of copies read back from disk for a connected session: at most this many, and no
# more bytes than this unless a single copy is larger; read when fewer than PAGE_LOW
# copies are left in RAM.
PAGE_MESSAGES: Final = 256
PAGE_BYTES: Final = 4 * 1024 * 1024
PAGE_LOW: Final = 64

log = logging.getLogger("jetmq.queues")


class QueueStore(Protocol):
    """What the queues need from the store side (``broker.persist.state.Persistence``)."""

    def copy_done(self, session: Session, og: Outgoing) -> None: ...

    def drop_on_disk(self, items: Sequence[OnDisk], *, purged: bool = False) -> None: ...

    def read_copies(self, items: Sequence[OnDisk]) -> Page: ...

    def copies(self, items: Sequence[OnDisk], page: Page) -> dict[int, Outgoing]: ...

    def page_in(
        self, queues: SessionQueues, session: Session, items: list[OnDisk | Outgoing], size: int
    ) -> None:
        """Read ``items`` back (a task), then :meth:`SessionQueues.page_read`."""


class SessionQueues:
    """Queueing, overflow and paging for every session of one broker."""

    def __init__(self, persist: QueueStore, limits: SessionConfig) -> None:
        self.persist = persist
        self.dropped = 0  # copies dropped because their session's queue was full
        self.max_messages = 0
        self.max_bytes = 0
        self.drop_oldest = True
        self.set_limits(limits)

    def set_limits(self, limits: SessionConfig) -> None:
        """Take ``[sessions]`` limits (at start and at every reload) as plain values: a
        pydantic field read costs several plain reads, and ``enqueue`` runs per copy."""
        self.max_messages = int(limits.max_queued_messages)
        self.max_bytes = int(limits.max_queued_bytes)
        self.drop_oldest = limits.overflow == "drop_oldest"

    # -- queueing ------------------------------------------------------------------------

    def enqueue(self, session: Session, og: Outgoing) -> bool:
        """Queue a copy within the session's limits (the overflow policy picks the
        victim); False when the copy itself was dropped. Per recipient: no allocation
        beyond the copy's place in the queue."""
        size = len(og.message.payload)
        queue = session.queue
        backlog = session.backlog
        most = self.max_messages
        most_bytes = self.max_bytes
        if (
            most
            and len(queue) + session.paging + (len(backlog) if backlog is not None else 0) >= most
        ) or (most_bytes and session.queued_bytes + size > most_bytes):
            if not self._overflow(session, og):
                return False
            backlog = session.backlog
        elif session.overflow_dropped:
            self._overflow_over(session, "it has room again")
        if (
            backlog
            or session.paging
            or (
                og.pend_seq
                and (
                    session.conn is None
                    or len(queue) >= RAM_QUEUE_MESSAGES
                    or session.queued_bytes - session.backlog_bytes >= RAM_QUEUE_BYTES
                )
            )
        ):
            if backlog is None:
                backlog = session.backlog = deque()
            backlog.append(
                OnDisk(og.pend_seq, size, og.message.key, og.shared, og.message.expires_at)
                if og.pend_seq
                else og
            )
            session.backlog_bytes += size
        else:
            session.own_queue().append(og)
        session.queued_bytes += size
        return True

    def _overflow(self, session: Session, og: Outgoing) -> bool:
        """The queue is full: drop the oldest copy (True: ``og`` may be queued) or ``og``."""
        if session.overflow_dropped == 0:
            log.warning(
                "the queue of client %r is full (max_queued_messages %d, max_queued_bytes %d):"
                " dropping the %s copies until it has room",
                session.client_id,
                self.max_messages,
                self.max_bytes,
                "oldest" if self.drop_oldest else "newest",
            )
        session.overflow_dropped += 1
        self.dropped += 1
        persist = self.persist
        if self.drop_oldest:
            if session.queue:
                old = session.queue.popleft()
                session.queued_bytes -= len(old.message.payload)
                persist.copy_done(session, old)
                return True
            backlog = session.backlog
            if backlog:  # (a page being read holds older ones: they are kept)
                item = backlog.popleft()
                if isinstance(item, OnDisk):
                    persist.drop_on_disk([item])
                    n = item.size
                else:
                    persist.copy_done(session, item)
                    n = len(item.message.payload)
                session.queued_bytes -= n
                session.backlog_bytes -= n
                return True
        persist.copy_done(session, og)
        return False

    @staticmethod
    def _overflow_over(session: Session, why: str) -> None:
        log.warning(
            "client %r: %d queued copies were dropped while its queue was full; %s",
            session.client_id,
            session.overflow_dropped,
            why,
        )
        session.overflow_dropped = 0

    def session_ended(self, session: Session) -> None:
        """The session is over: end its overflow episode; release what waits on disk
        (the caller purges its pending entries)."""
        if session.overflow_dropped:
            self._overflow_over(session, "the session ended")
        backlog = session.backlog
        session.backlog = None
        session.backlog_bytes = 0
        if backlog:
            self.persist.drop_on_disk([i for i in backlog if isinstance(i, OnDisk)], purged=True)

    def shared_waiting(self, session: Session) -> list[Outgoing]:
        """The backlog's copies picked for a shared subscription, as messages (read now, on
        this thread): an ended session's are given to another member of the group."""
        backlog = session.backlog
        if not backlog:
            return []
        found = [i for i in backlog if i.shared]
        on_disk = [i for i in found if isinstance(i, OnDisk)]
        persist = self.persist
        read = persist.copies(on_disk, persist.read_copies(on_disk)) if on_disk else {}
        out: list[Outgoing] = []
        for i in found:
            if isinstance(i, Outgoing):
                out.append(i)
            elif (og := read.get(i.seq)) is not None:
                out.append(Outgoing(og.message, og.qos, og.retain, og.sub_ids, shared=True))
        return out

    # -- paging ----------------------------------------------------------------------------

    def page_soon(self, session: Session) -> None:
        """Read the backlog's next page if the RAM queue runs short (the connection's
        writer calls this after each move into the window)."""
        if session.backlog and not session.paging and len(session.queue) < PAGE_LOW:
            page, size = self.take_page(session)
            self.persist.page_in(self, session, page, size)

    @staticmethod
    def take_page(session: Session) -> tuple[list[OnDisk | Outgoing], int]:
        """The backlog's head, as a page: it counts in ``paging`` until it is in RAM."""
        backlog = session.backlog
        assert backlog
        items: list[OnDisk | Outgoing] = []
        size = 0
        while backlog and len(items) < PAGE_MESSAGES and (not items or size < PAGE_BYTES):
            item = backlog.popleft()
            items.append(item)
            size += item.size if isinstance(item, OnDisk) else len(item.message.payload)
        session.paging = len(items)
        return items, size

    @staticmethod
    def page_failed(session: Session, items: list[OnDisk | Outgoing]) -> None:
        """A page could not be read: its copies wait on disk again, in order."""
        session.paging = 0
        if not session.gone:
            if session.backlog is None:
                session.backlog = deque()
            session.backlog.extendleft(reversed(items))

    def page_read(
        self,
        session: Session,
        items: list[OnDisk | Outgoing],
        size: int,
        found: dict[int, Outgoing],
    ) -> bool:
        """A page is read (``found``: its copies still stored, by pending seq): they join
        the RAM queue in order. True when the next page should be read now."""
        session.paging = 0
        queue = session.own_queue()
        session.backlog_bytes -= size
        for item in items:
            if isinstance(item, OnDisk):
                og = found.get(item.seq)
                if og is None:  # gone from the store
                    session.queued_bytes -= item.size
                    continue
                queue.append(og)
            else:
                queue.append(item)
        if not session.backlog:
            session.backlog = None
        if session.conn is None:
            session.spill()  # went offline meanwhile
            return False
        return bool(session.backlog) and len(queue) < PAGE_LOW
