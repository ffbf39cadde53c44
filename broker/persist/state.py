"""The MQTT state in the store: what a PUBLISH, an acknowledgement, a SUBSCRIBE or a
session's end writes, and what is read back while the broker runs (pages of queued
copies, retained messages). Record formats: ``records.py``; start-up: ``recovery.py``.

:class:`Persistence` implements the core's ``hub.MqttStore``. It writes through the
broker's :class:`~broker.persist.client.StoreClient` (batches, futures to trio, failure
reports), which it is given, not which it is: the client is shared with any other part
of the broker that writes. Everything here runs on the trio thread, except
:meth:`Persistence.read_copies` (a worker thread).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, cast

import trio

import store
from broker.core.message import AppMessage, Outgoing
from broker.core.router import Delivery, RetainedMessages
from broker.core.sessions import OnDisk, Session, SubscriptionRecord
from broker.persist.client import EMPTY_PLAN, PublishPlan, StoreClient, StoreFuture
from broker.persist.records import (
    MSGS,
    PEND,
    PEND_HEADER,
    QOS2IN,
    RMSGS,
    SESS,
    SUBS,
    SYS_TOPIC_PREFIX,
    dump_record,
    message_block,
    message_from_stored,
    pend_op,
    session_token,
    subscription_op,
    token,
)

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.ports import Plan
    from broker.core.queues import SessionQueues

# Reads of queued copies release the store's mapped pages from the RSS (Store.release_pages)
# each time they have read this much: the copies are in Python bytes by then.
RELEASE_PAGES_AFTER: Final = 64 * 1024 * 1024

log = logging.getLogger("jetmq.persist")

# A page of copies read back: their pending entries, and the messages those reference.
Page = tuple[list[store.StoredMsg | None], list[store.StoredMsg | None]]


class Persistence:
    """The broker's MQTT state in the store (one instance per broker)."""

    def __init__(self, client: StoreClient) -> None:
        self.client = client
        self.store = client.store  # (reads: queued copies, retained messages)
        self._keys = itertools.count(1)
        self._boot = f"{os.getpid():x}{time.time_ns() & 0xFFFFFFFF:08x}"
        # $MQTT_msgs key -> [its seq (0 until committed), pending entries referencing it]:
        # the message goes with its last entry. Kept here, not on the message, because a
        # copy waiting on disk has no message in memory.
        self.refs: dict[str, list[int]] = {}
        self._read_bytes = 0  # read back since the store's pages were last released
        self.retained: RetainedMessages | None = None  # the broker's retained index

    # -- queued copies on disk (broker/queues.py decides when) -----------------------------------

    def page_in(
        self, queues: SessionQueues, session: Session, items: list[OnDisk | Outgoing], size: int
    ) -> None:
        """Read a page of ``session``'s backlog back (``SessionQueues.page_soon`` took it)."""
        self.client.spawn(self._page_in, queues, session, items, size)

    async def _page_in(
        self, queues: SessionQueues, session: Session, items: list[OnDisk | Outgoing], size: int
    ) -> None:
        """Pages until the RAM queue is long enough, the backlog empty or the session
        offline (``SessionQueues.page_read`` says); then wakes the connection."""
        while True:
            on_disk = [i for i in items if isinstance(i, OnDisk)]
            read: Page | None = None
            try:
                if on_disk:
                    read = await trio.to_thread.run_sync(self.read_copies, on_disk)
            except (Exception, trio.Cancelled) as exc:
                queues.page_failed(session, items)
                if isinstance(exc, trio.Cancelled):
                    raise
                if not isinstance(exc, store.StoreClosedError):  # (closed: shutting down)
                    log.exception("client %r: reading queued copies back failed", session.client_id)
                return
            if session.gone:  # its entries are purged with it
                session.paging = 0
                self.drop_on_disk(on_disk, purged=True)
                return
            found = self.copies(on_disk, read) if read is not None else {}
            if not queues.page_read(session, items, size, found):
                break
            items, size = queues.take_page(session)
        conn = session.conn
        if conn is not None:
            conn.wake()

    def drop_on_disk(self, items: Sequence[OnDisk], *, purged: bool = False) -> None:
        """Forget copies waiting on disk: delete their pending entries (unless ``purged``
        with their session's) and release the messages they reference."""
        ops: list[store.DeleteMsg] = []
        for item in items:
            self._release(item.seq, item.key, ops)
        if purged:
            ops = [op for op in ops if op.stream != PEND]
        self.client.fire_deletes(ops)

    def read_retained(self, seqs: Sequence[int]) -> list[AppMessage | None]:
        """Retained messages by seq in ``$MQTT_rmsgs`` (one short read transaction on this
        thread: a SUBSCRIBE's at-once batch, or a chunk of a paced one)."""
        now_wall = time.time_ns()
        now = trio.current_time()
        out: list[AppMessage | None] = []
        for stored in self.store.get_msgs(RMSGS, seqs):
            msg = None if stored is None else message_from_stored(stored, now_wall, now)
            if msg is not None and stored is not None:
                msg.retained_seq = stored.seq
            out.append(msg)
        return out

    def read_copies(self, items: Sequence[OnDisk]) -> Page:
        """(any thread) The pending entries of ``items`` and the messages they reference,
        one read transaction each."""
        refs = self.refs
        msg_seqs = sorted({ref[0] for i in items if i.key and (ref := refs.get(i.key))})
        st = self.store
        page = st.get_msgs(PEND, [i.seq for i in items]), st.get_msgs(MSGS, msg_seqs)
        self._read_bytes += sum(i.size for i in items)  # (a race between pages: harmless)
        if self._read_bytes >= RELEASE_PAGES_AFTER:
            self._read_bytes = 0
            st.release_pages()
        return page

    def copies(self, items: Sequence[OnDisk], page: Page) -> dict[int, Outgoing]:
        """The copies of a page read by :meth:`read_copies`, by pending seq; one whose
        entry or message is gone is left out (and its entry deleted)."""
        pend, msgs = page
        now_wall = time.time_ns()
        now = trio.current_time()
        by_key: dict[str, AppMessage | None] = {}
        stored_by_seq = {m.seq: m for m in msgs if m is not None}
        refs = self.refs
        out: dict[int, Outgoing] = {}
        lost: list[OnDisk] = []
        for item, stored in zip(items, pend, strict=True):
            if stored is None:
                continue  # purged with its session
            inline = stored.header(PEND_HEADER)
            msg: AppMessage | None
            if inline is not None:
                rec = json.loads(inline)
                msg = message_from_stored(stored, now_wall, now)
            else:
                rec = json.loads(stored.payload)
                key = rec["m"]
                if key in by_key:
                    msg = by_key[key]
                else:
                    ref = refs.get(key)
                    held = stored_by_seq.get(ref[0]) if ref is not None else None
                    msg = by_key[key] = (
                        message_from_stored(held, now_wall, now) if held is not None else None
                    )
                    if msg is not None:
                        msg.key = key
            if msg is None:
                lost.append(item)
                continue
            og = Outgoing(msg, int(rec["q"]), bool(rec["r"]), tuple(rec["s"]), item.seq)
            og.order = int(rec.get("o", 0)) or item.seq
            og.shared = item.shared
            if item.expires_at is not None:  # (the stored time is wall-clock time)
                msg.expires_at = item.expires_at
            out[item.seq] = og
        if lost:
            self.drop_on_disk(lost)
        return out

    # -- publish -----------------------------------------------------------------------------

    def plan(
        self,
        broker: Hub,
        msg: AppMessage,
        deliveries: Sequence[Delivery],
        extra: Sequence[store.Op] = (),
    ) -> PublishPlan:
        """The store operations a PUBLISH needs: retained update, stored copy, pending entries.

        ``extra`` (inbound QoS 2 state) commits in the same batch.
        """
        targets: Sequence[tuple[int, Delivery, Session]] = ()  # QoS 0: nothing made
        if msg.qos:
            by_num = broker.sessions.by_num
            found: list[tuple[int, Delivery, Session]] = []
            for index, d in enumerate(deliveries):
                if d.qos == 0:
                    continue
                session = by_num.get(d.client)
                if session is not None and session.persistent:
                    found.append((index, d, session))
            targets = found
        retain = (
            msg.retain
            and broker.config.mqtt.retain_available
            and not (msg.origin == 0 and msg.topic.startswith(SYS_TOPIC_PREFIX))
        )
        if not (targets or extra or retain):
            return EMPTY_PLAN  # the common case: nothing made for it
        ops: list[store.Op] = list(extra)
        retained_op = -1
        if retain:
            subject = f"$MQTT.rmsgs.{token(msg.topic)}"
            if msg.payload:
                retained_op = len(ops)
                ops.append(store.Publish(subject, msg.payload, message_block(msg), RMSGS))
            else:
                ops.append(store.PurgeStream(RMSGS, filter=subject))
        pend_index: dict[int, int] = {}
        msg_op = -1
        if len(targets) > 1:
            # Stored once, referenced by one pending entry per session.
            msg.key = f"{self._boot}-{next(self._keys)}"
            self.refs[msg.key] = [0, len(targets)]
            msg_op = len(ops)
            ops.append(
                store.Publish(f"$MQTT.msgs.{msg.key}", msg.payload, message_block(msg), MSGS)
            )
        for index, d, session in targets:
            session.stored = True
            pend_index[index] = len(ops)
            qos = msg.qos if msg.qos < d.qos else d.qos
            ops.append(pend_op(session, msg, qos, msg.retain and d.retain_as_published, d.sub_ids))
        batch = self.client.open_batch()
        plan = PublishPlan(batch, len(batch.ops), len(ops), pend_index, msg_op, retained_op)
        batch.ops.extend(ops)
        batch.awaited = True
        return plan

    def entry_record(
        self, session: Session, msg: AppMessage, qos: int, sub_ids: Sequence[int]
    ) -> tuple[str, bytes]:
        """The subject and header block of the pending entry that holds ``msg`` for
        ``session``, its only persistent recipient, as :meth:`plan` writes it. For a plain
        message (no retain, no properties) they are the same for every message of its topic
        and QoS: a stored run (``broker.net.runs``) makes them once, then
        :meth:`plan_entry` per message. The session counts as stored from here."""
        session.stored = True
        op = pend_op(session, msg, qos, False, sub_ids)
        headers = op.headers
        assert isinstance(headers, bytes)
        return op.subject, headers

    def plan_entry(
        self, subject: str, block: bytes, payload: bytes, pend_index: dict[int, int]
    ) -> PublishPlan:
        """:meth:`plan` for a message of a stored run: its pending entry (subject and block
        from :meth:`entry_record`) in the open batch; ``pend_index`` maps the persistent
        session's delivery to it (operation 0 of the plan)."""
        batch = self.client.open_batch()
        ops = batch.ops
        plan = PublishPlan(batch, len(ops), 1, pend_index)
        ops.append(store.Publish(subject, payload, block, PEND))
        batch.awaited = True
        return plan

    def after_commit(self, msg: AppMessage, plan: Plan) -> None:
        """The plan's commit is done: a retained update and a message stored once for
        several sessions learn their sequences (its last acknowledgement deletes it)."""
        plan = cast(PublishPlan, plan)  # the only kind plan() makes
        if plan.retained_op >= 0:
            msg.retained_seq = plan.seq_of(plan.retained_op)
            if self.retained is not None:
                self.retained.committed(msg)
        if plan.msg_op >= 0:
            ref = self.refs.get(msg.key)
            if ref is not None:
                ref[0] = plan.seq_of(plan.msg_op)

    # -- acknowledgements of outbound copies -------------------------------------------------------

    def _release_copy(self, og: Outgoing, ops: list[store.DeleteMsg]) -> None:
        if og.pend_seq:
            self._release(og.pend_seq, og.message.key, ops)
            og.pend_seq = 0

    def _release(self, pend_seq: int, key: str, ops: list[store.DeleteMsg]) -> None:
        """Delete a copy's pending entry, and the message it references once no other
        entry does (``key`` "": the entry held the message itself)."""
        ops.append(store.DeleteMsg(PEND, pend_seq))
        if not key:
            return
        ref = self.refs.get(key)
        if ref is None:
            return
        ref[1] -= 1
        if ref[1] <= 0:
            del self.refs[key]
            if ref[0]:
                ops.append(store.DeleteMsg(MSGS, ref[0]))

    def copy_done(self, session: Session, og: Outgoing) -> None:
        """PUBACK / PUBCOMP (or a copy skipped or expired): forget its pending entry."""
        pend_seq = og.pend_seq
        if not pend_seq:
            return
        og.pend_seq = 0
        key = og.message.key
        if key:
            ops: list[store.DeleteMsg] = []
            self._release(pend_seq, key, ops)
            self.client.fire_deletes(ops)
        else:  # (the common case: the entry held the message; per acknowledged copy)
            self.client.fire_delete(store.DeleteMsg(PEND, pend_seq))

    def stage_copies(
        self, session: Session, entries: Sequence[tuple[Outgoing, int, int]]
    ) -> StoreFuture | None:
        """Record QoS 2 copies' packet ids (stage 0) or PUBRECs (stage 2) in one commit.

        A restart must resend a QoS 2 PUBLISH with its original packet id, and must send
        PUBREL rather than the PUBLISH once PUBREC was received [MQTT-4.3.3-6]. Each
        entry's pending record is rewritten (new record, old one deleted); the caller
        awaits the future and then calls :meth:`stages_committed`.
        """
        ops: list[store.Op] = []
        for og, packet_id, stage in entries:
            og.order = og.order or og.pend_seq
            ops.append(
                pend_op(
                    session, og.message, og.qos, og.retain, og.sub_ids, packet_id, stage, og.order
                )
            )
            ops.append(store.DeleteMsg(PEND, og.pend_seq))
        return self.client.submit(ops) if ops else None

    @staticmethod
    def stages_committed(
        entries: Sequence[tuple[Outgoing, int, int]], results: Sequence[store.OpResult]
    ) -> None:
        for i, (og, _pid, _stage) in enumerate(entries):
            res = results[2 * i]
            og.pend_seq = res.seq if isinstance(res, store.PubAck) else 0

    # -- sessions ----------------------------------------------------------------------------

    def save_session(self, session: Session) -> StoreFuture:
        """The session record (client id, expiry, protocol version); the first time the
        session is stored, every subscription it has as well (it may have subscribed
        before it became persistent, with a DISCONNECT that set an expiry)."""
        first = not session.stored
        session.stored = True
        record = {
            "id": session.client_id,
            "expiry": session.expiry_interval,
            "version": session.protocol_version,
        }
        ops: list[store.Op] = [
            store.Publish(f"$MQTT.sess.{session_token(session)}", dump_record(record), stream=SESS)
        ]
        if first:
            ops.extend(subscription_op(session, r) for r in session.subscriptions.values())
        return self.client.submit(ops)

    def save_subscriptions(
        self, session: Session, records: Sequence[SubscriptionRecord]
    ) -> StoreFuture | None:
        """SUBSCRIBE of a stored session: one record per subscription it adds or replaces."""
        if not records:
            return None
        return self.client.submit([subscription_op(session, r) for r in records])

    def remove_subscriptions(
        self, session: Session, filters: Sequence[bytes]
    ) -> StoreFuture | None:
        """UNSUBSCRIBE of a stored session: the records of the filters it removed."""
        if not filters:
            return None
        tok = session_token(session)
        return self.client.submit(
            [store.PurgeStream(SUBS, filter=f"$MQTT.subs.{tok}.{token(f)}") for f in filters]
        )

    def session_ended(self, session: Session, dropped: Sequence[Outgoing]) -> None:
        """The session is over (or was cleaned): remove its stored state, if it has any."""
        if not session.stored:
            return
        session.stored = False
        if not session.gone and session.backlog:
            # It goes on without being stored (expiry now 0): what waits on disk comes
            # back to RAM before its entries are purged (bounded by the queue limits).
            self._keep_backlog(session)
        deletes: list[store.DeleteMsg] = []
        for og in dropped:
            self._release_copy(og, deletes)
        self.client.fire_deletes(deletes)
        tok = session_token(session)
        self.client.fire(
            [
                store.PurgeStream(SESS, filter=f"$MQTT.sess.{tok}"),
                store.PurgeStream(SUBS, filter=f"$MQTT.subs.{tok}.*"),
                store.PurgeStream(PEND, filter=f"$MQTT.pend.{tok}"),
                store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{tok}.*"),
            ]
        )

    def _keep_backlog(self, session: Session) -> None:
        backlog = session.backlog
        assert backlog is not None
        on_disk = [i for i in backlog if isinstance(i, OnDisk)]
        found = self.copies(on_disk, self.read_copies(on_disk))
        kept: deque[OnDisk | Outgoing] = deque()
        for item in backlog:
            if isinstance(item, OnDisk):
                og = found.get(item.seq)
                if og is None:
                    session.queued_bytes -= item.size
                    session.backlog_bytes -= item.size
                    continue
                item = og
            kept.append(item)
        session.backlog = kept

    def qos2_received(self, session: Session, packet_id: int) -> list[store.Op]:
        """Ops recording an inbound QoS 2 packet id (exactly once across restarts)."""
        if not session.persistent:
            return []
        session.stored = True
        return [
            store.Publish(
                f"$MQTT.qos2.{session_token(session)}.{packet_id}",
                b"",
                (("Mqtt-Client", json.dumps(session.client_id, ensure_ascii=True)),),
                stream=QOS2IN,
            )
        ]

    def qos2_released(self, session: Session, packet_id: int) -> StoreFuture | None:
        if not session.persistent:
            return None
        return self.client.submit(
            [store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{session_token(session)}.{packet_id}")]
        )
