"""Consumers inside a write transaction: delivery, acks, redelivery, pull requests (spec §1.6-1.9).

Writer thread only. A :class:`ConsumerRt` is the writer's copy of one consumer: its config,
delivered / ack-floor positions, the pending map ``stream seq -> (first delivery's cseq,
delivery count, ack deadline, exhausted)`` (mirrored in the ``pending`` database), the
redelivery queue (a heap of stream seqs: in stream order, before new messages), the
waiting pull requests (store.pulls) and its pause (store.pausing).

``pending`` is a dict whose insertion order is stream order: a new delivery always has a
higher stream seq than anything pending, and a redelivery updates its entry in place. So
the first key is the lowest pending seq, which gives the ack floor in O(1).
"""

from __future__ import annotations

import heapq
from typing import TypeAlias

from store import keys
from store.counting import PendingCounts
from store.ctx import Ctx
from store.headerblock import decode_headers_shared
from store.models import ConsumerConfig
from store.nextmsg import NextMessage
from store.ops import Advisory, Delivery, StoredMsg, ack_subject
from store.pausing import Pause
from store.pulls import PullQueue, PullRequest
from store.streams import StreamRt

Stream: TypeAlias = "StreamRt[ConsumerRt]"  # a stream as the writer keeps it

NEVER = keys.MAX_U64
UNACKED_DELETED = "Unacknowledged message was deleted"  # nats-server's +TERM reason
MAX_DELIVERIES_PER_BATCH = 256


def _ack_wait(cfg: ConsumerConfig, count: int) -> int:
    """The ack wait of a message's ``count``-th delivery."""
    if cfg.backoff:
        return cfg.backoff[min(count - 1, len(cfg.backoff) - 1)]
    return cfg.ack_wait or 0


class PendingEntry:
    __slots__ = ("count", "cseq", "deadline", "exhausted")

    def __init__(self, cseq: int, count: int, deadline: int, exhausted: bool) -> None:
        self.cseq = cseq
        self.count = count
        self.deadline = deadline
        self.exhausted = exhausted


class ConsumerRt:
    """The writer's copy of one consumer, composed of its num_pending (``counts``,
    store.counting), its next-message search (``finder``, store.nextmsg) and its waiting
    pull requests (``waiting``, store.pulls)."""

    def __init__(
        self, stream: Stream, name: str, cid: int, config: ConsumerConfig, created_ns: int
    ) -> None:
        self.stream = stream
        self.name = name
        self.cid = cid
        self.config = config
        self.created_ns = created_ns
        self.delivered_cseq = 0
        self.delivered_sseq = 0
        self.ack_cseq = 0
        self.ack_sseq = 0
        self.last_delivered_ns = 0
        self.last_ack_ns = 0
        self.lps_end = 0
        self.pending: dict[int, PendingEntry] = {}
        self.num_ack_pending = 0
        self.redeliver: list[int] = []
        self.deadlines: list[tuple[int, int]] = []
        self.waiting = PullQueue()  # pull requests (store.pulls)
        self.push_bound = False
        self.last_activity_ns = created_ns
        # The latest ack deadline set while messages are pending (0: none pending): until
        # then the consumer is busy, not inactive (memory only, rebuilt by load()).
        self.acks_due_until = 0
        self.more = False  # the last deliver() stopped at its budget with work left
        self.counts = PendingCounts(stream, self, config.filters)
        self.finder = NextMessage(stream, self.counts)  # the next new message to deliver
        self.pause = Pause(config, created_ns)  # until when it delivers nothing (store.pausing)

    def pending_known(self, ctx: Ctx) -> bool:
        """Whether num_pending is known (else counted on: the consumer is due now)."""
        if self.counts.pending_known(ctx):
            return True
        self.more = True
        return False

    # -- persistence ---------------------------------------------------------------------

    def load(self, ctx: Ctx, state: bytes) -> None:
        (
            self.delivered_cseq,
            self.delivered_sseq,
            self.ack_cseq,
            self.ack_sseq,
            self.last_delivered_ns,
            self.last_ack_ns,
            self.lps_end,
        ) = keys.unpack_consumer_state(state)
        self.last_activity_ns = max(self.last_activity_ns, self.last_delivered_ns, self.last_ack_ns)
        prefix = keys.u64(self.cid)
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_PENDING))
        if cur.set_range(prefix):
            for k, v in cur.iternext():
                if not k.startswith(prefix):
                    break
                cseq, count, deadline, flags = keys.unpack_pending(v)
                e = PendingEntry(cseq, count, deadline, bool(flags & keys.PENDING_EXHAUSTED))
                seq = keys.read_u64(k, 8)
                self.pending[seq] = e
                if not e.exhausted:
                    self.num_ack_pending += 1
                    if deadline == NEVER:  # NAKed: it was queued for redelivery
                        heapq.heappush(self.redeliver, seq)
                    else:
                        heapq.heappush(self.deadlines, (deadline, seq))
                        self.acks_due_until = max(self.acks_due_until, deadline)

    def save(self, ctx: Ctx) -> None:
        ctx.txn.put(
            keys.u64(self.cid),
            keys.pack_consumer_state(
                self.delivered_cseq,
                self.delivered_sseq,
                self.ack_cseq,
                self.ack_sseq,
                self.last_delivered_ns,
                self.last_ack_ns,
                self.lps_end,
            ),
            db=ctx.db(keys.DB_CSTATE),
        )

    def _put_pending(self, ctx: Ctx, seq: int, e: PendingEntry) -> None:
        flags = keys.PENDING_EXHAUSTED if e.exhausted else 0
        value = keys.pack_pending(e.cseq, e.count, e.deadline, flags)
        ctx.pending_cur.put(keys.pending_key(self.cid, seq), value)

    def _drop_pending(self, ctx: Ctx, seq: int) -> PendingEntry | None:
        e = self.pending.pop(seq, None)
        if e is None:
            return None
        ctx.txn.delete(keys.pending_key(self.cid, seq), db=ctx.db(keys.DB_PENDING))
        if not e.exhausted:
            self.num_ack_pending -= 1
        if not self.pending:
            self.acks_due_until = 0
        return e

    # -- positions -----------------------------------------------------------------------

    def needs(self, seq: int) -> bool:
        """Interest/workqueue retention: does this consumer still need stream seq ``seq``?"""
        if seq <= self.ack_sseq:
            return False
        return seq > self.delivered_sseq or seq in self.pending

    def update_ack_floor(self) -> None:
        if self.pending:
            first = next(iter(self.pending))
            self.ack_sseq = first - 1
            self.ack_cseq = max(0, self.pending[first].cseq - 1)
        else:
            self.ack_sseq = self.delivered_sseq
            self.ack_cseq = self.delivered_cseq

    def _push_deadline(self, deadline: int, seq: int) -> None:
        """Schedule ``seq``'s ack deadline. Entries of messages acked or re-timed since are
        dropped lazily (when they reach the top), so behind one message left unacked they
        pile up — one per delivery for its whole ack wait: when they outnumber the live
        ones, the heap is rebuilt from the pending entries (amortised O(1) a push)."""
        heap = self.deadlines
        heapq.heappush(heap, (deadline, seq))
        if deadline > self.acks_due_until:
            self.acks_due_until = deadline
        if len(heap) > 2 * len(self.pending) + 1024:
            heap = [(e.deadline, q) for q, e in self.pending.items() if e.deadline != NEVER]
            heapq.heapify(heap)
            self.deadlines = heap

    def ack_deadline(self, now: int, count: int) -> int:
        return now + _ack_wait(self.config, count)

    def retime_ack_waits(self, ctx: Ctx, old: ConsumerConfig) -> None:
        """After an update of ``ack_wait`` or ``backoff``: every running ack wait (and
        NAK delay) ends as if the new ones had been in force from its start, as
        nats-server 2.15.1 times its pending messages (measured). O(pending), in the
        update's batch."""
        for seq, e in self.pending.items():
            if e.exhausted or e.deadline == NEVER:
                continue
            shifted = e.deadline + _ack_wait(self.config, e.count) - _ack_wait(old, e.count)
            e.deadline = min(max(shifted, 0), NEVER - 1)  # NEVER means queued
            self._push_deadline(e.deadline, seq)
            self._put_pending(ctx, seq, e)

    def on_remove(self, ctx: Ctx, seq: int, subject: str, purged: bool = False) -> None:
        if seq > self.delivered_sseq:
            self.counts.uncount(ctx, seq, subject)
        elif seq in self.pending:
            e = self._drop_pending(ctx, seq)
            if e is not None and not e.exhausted:
                self._floor_after(seq, e)  # (processed as an ack, as nats-server does)
            if e is not None and not e.exhausted and not purged:
                # Deleted, dropped by a limit or expired while waiting for its ack: a
                # terminated advisory, as nats-server 2.15.1 sends (measured; not for a
                # purge or a rollup), whose deliveries are the redeliveries (at least 1).
                self._terminated(ctx, seq, max(1, e.count - 1), UNACKED_DELETED)

    def _terminated(self, ctx: Ctx, seq: int, deliveries: int, reason: str) -> None:
        ctx.events.append(
            Advisory("terminated", self.stream.name, self.name, seq, deliveries, reason, ctx.now)
        )

    def _next_new(self, ctx: Ctx) -> tuple[int, bytes] | None:
        """The next message after the last new delivery that the filters match."""
        finder = self.finder
        found = finder.next_new(ctx, self.delivered_sseq + 1)
        if finder.stopped:  # the walk goes on in the next batch: "due now"
            finder.stopped, self.more = False, True
        return found

    # -- delivery ------------------------------------------------------------------------

    def deliver(self, ctx: Ctx) -> bool:
        """Deliver as much as targets and limits allow. True if anything changed."""
        changed = False
        cfg = self.config
        explicit = cfg.ack_policy != "none"
        max_ap = cfg.max_ack_pending or -1
        md = cfg.max_deliver
        budget = MAX_DELIVERIES_PER_BATCH
        waiting = self.waiting
        finder = self.finder
        self.more = False
        if self.pause.until and self.pause.holds(ctx, self.stream.name, self.name):
            return False
        self._expire_overdue_acks(ctx)
        if (
            self.counts.num_pending_cache is None
            and (self.waiting if not cfg.is_push else self.push_bound)
            and not self.pending_known(ctx)
        ):
            return False  # every delivery carries num_pending: they wait for the count
        while True:
            if budget <= 0:
                # Bounded work per batch: the engine reports "due now" so the caller ticks again.
                self.more = True
                break
            budget -= 1
            req: PullRequest | None = None
            if cfg.is_push:
                if not self.push_bound:
                    break
                reply = cfg.deliver_subject or ""
            else:
                if not waiting.reqs:
                    break
                req = waiting.reqs[0]
                reply = req.reply
            seq = 0
            rec: bytes | None = None
            redelivery = False
            while self.redeliver:
                s = heapq.heappop(self.redeliver)
                e = self.pending.get(s)
                # Valid only while queued (deadline NEVER): a stale or duplicate heap entry
                # (NAK of an already queued message, NAK with delay) is skipped.
                if e is None or e.exhausted or e.deadline != NEVER:
                    continue
                if md > 0 and e.count >= md:
                    # Due again after max_deliver deliveries: dropped here, when the next
                    # delivery would go out (as nats-server 2.15.1, measured).
                    self._exhaust(ctx, s, e)
                    changed = True
                    continue
                r = self.stream.get_record(ctx, s)
                if r is None:
                    self._drop_pending(ctx, s)
                    self.update_ack_floor()
                    continue
                seq, rec, redelivery = s, r, True
                break
            if rec is None:
                if explicit and max_ap > 0 and self.num_ack_pending >= max_ap:
                    break
                found = finder.next_new(ctx, self.delivered_sseq + 1)
                if found is None:
                    if finder.stopped:  # as in _next_new
                        finder.stopped, self.more = False, True
                    break
                seq, rec = found
                if self.lps_end and finder.superseded(ctx, seq, rec, self.lps_end):
                    self.delivered_sseq = seq  # (never counted pending: superseded)
                    if not explicit or not self.pending:
                        self.update_ack_floor()
                    changed = True
                    continue
            if req is not None and req.max_bytes:
                size = self._pull_size(ctx, seq, rec, redelivery)
                if not waiting.charge(ctx, req, size, self.stream.name, self.name):
                    if redelivery:
                        heapq.heappush(self.redeliver, seq)
                    changed = True
                    continue
            self.delivered_cseq += 1
            cseq = self.delivered_cseq
            self.last_delivered_ns = ctx.now
            if redelivery:
                e = self.pending[seq]
                e.count += 1  # (its cseq stays the first delivery's, as nats-server's)
                count = e.count
                e.deadline = self.ack_deadline(ctx.now, count)
                self._push_deadline(e.deadline, seq)
                self._put_pending(ctx, seq, e)
            else:
                count = 1
                self.delivered_sseq = seq
                if self.counts.num_pending_cache is not None:
                    self.counts.num_pending_cache -= 1
                if explicit:
                    e = PendingEntry(cseq, 1, self.ack_deadline(ctx.now, 1), False)
                    self.pending[seq] = e
                    self.num_ack_pending += 1
                    self._push_deadline(e.deadline, seq)
                    self._put_pending(ctx, seq, e)
                    if len(self.pending) == 1:
                        # Filtered-out sequences below it are "not needed": the floor
                        # moves up to just below the first pending message.
                        self.update_ack_floor()
                else:
                    self.update_ack_floor()
            t, subj, hdr, payload = keys.unpack_msg(rec)
            headers = decode_headers_shared(hdr)
            if cfg.headers_only:
                headers = (*headers, ("Nats-Msg-Size", str(len(payload))))
                payload = b""
            msg = StoredMsg(seq, t, subj, headers, payload)
            ctx.events.append(
                Delivery(
                    self.stream.name,
                    self.name,
                    reply,
                    msg,
                    count,
                    cseq,
                    self.counts.num_pending(ctx),
                )
            )
            changed = True
            if not explicit and self.stream.config.retention != "limits":
                self.stream.release(seq)
            if req is not None:
                waiting.served(ctx, req)
        # no_wait requests that could not be filled end now (store.pulls).
        if (
            any(r.no_wait for r in waiting.reqs)
            and not self._has_work(ctx)
            and waiting.end_no_wait(ctx, self.stream.name, self.name)
        ):
            changed = True
        return changed

    def _pull_size(self, ctx: Ctx, seq: int, rec: bytes, redelivery: bool) -> int:
        """What nats-server counts of this delivery against a pull request's max_bytes
        (measured): subject, headers and payload, and its ack reply subject (whose tokens
        are the delivery count, stream seq, consumer seq, time and pending after it)."""
        if redelivery:
            count, pending = self.pending[seq].count + 1, self.counts.num_pending(ctx)
        else:
            count, pending = 1, self.counts.num_pending(ctx) - 1
        reply = ack_subject(
            self.stream.name,
            self.name,
            count,
            seq,
            self.delivered_cseq + 1,
            keys.msg_time(rec),
            max(0, pending),
        )
        # nats-server's count against a pull's max_bytes: the contents and the reply
        return len(rec) - keys.MSG_RECORD_OVERHEAD + len(reply)

    def _queued_for_redelivery(self) -> set[int]:
        """The seqs waiting in the redelivery queue (skipping its stale entries)."""
        out = set()
        for s in self.redeliver:
            e = self.pending.get(s)
            if e is not None and not e.exhausted and e.deadline == NEVER:
                out.add(s)
        return out

    def no_wait_refusal(self, ctx: Ctx, expires: bool) -> tuple[int, str] | None:
        """nats-server's answer to a ``no_wait`` pull before it queues it (measured against
        2.15.1): 404 when there is nothing to deliver (with ``expires``, it waits for the
        first message instead); 408 "Requests Pending" when the requests already waiting
        would take everything there is. None: it is queued. (While num_pending is being
        counted in slices, there is taken to be enough for it.)"""
        if self.pause.until and self.pause.holds(ctx, self.stream.name, self.name):
            return None if expires else (404, "No Messages")  # (as nats-server, measured)
        self._expire_overdue_acks(ctx)
        queued = len(self._queued_for_redelivery())
        if not queued and self._next_new(ctx) is None and not self.more:
            return None if expires else (404, "No Messages")
        known = self.counts.num_pending_cache
        if self.waiting and known is not None and known + queued < self.waiting.batches():
            return 408, "Requests Pending"
        return None

    def _has_work(self, ctx: Ctx) -> bool:
        if self._queued_for_redelivery():
            return True
        if self.config.ack_policy != "none":
            max_ap = self.config.max_ack_pending or -1
            if max_ap > 0 and self.num_ack_pending >= max_ap:
                return False
        if self.more:  # deliver() stopped with work left (or the walk for it unfinished)
            return True
        return self._next_new(ctx) is not None

    # -- acks ----------------------------------------------------------------------------

    def ack(
        self, ctx: Ctx, seq: int, cseq: int = 0, term: bool = False, reason: str = ""
    ) -> list[int]:
        """``+ACK`` / ``+TERM`` of stream seq ``seq`` (``cseq``: the consumer seq of the
        delivery acked, 0 if not known): returns the stream seqs released (for retention)."""
        self.last_ack_ns = ctx.now
        self.last_activity_ns = ctx.now
        released: list[int] = []
        if self.config.ack_policy == "none":
            return released
        if self.config.ack_policy == "all":
            if cseq and (cseq <= self.ack_cseq or seq <= self.ack_sseq):
                # From a delivery at or below the floor (an earlier delivery of a message
                # redelivered since): nothing, as nats-server 2.15.1 (measured).
                return released
            # Everything up to seq, a +TERM too (as nats-server 2.15.1 does, measured).
            term_entry = self.pending.get(seq) if term else None
            for s in self.pending:  # in stream order: up to seq only
                if s > seq:
                    break
                released.append(s)
            for s in released:
                self._drop_pending(ctx, s)
            if term_entry is not None:
                self._terminated(ctx, seq, term_entry.count, reason)
            if cseq and self.pending:
                # The floor is the acked delivery's, as nats-server's (after redeliveries
                # it is not the one below the first pending message).
                self.ack_cseq, self.ack_sseq = cseq, seq
                return released
            if released:
                self.update_ack_floor()
        else:
            e = self._drop_pending(ctx, seq)
            if e is not None:
                released.append(seq)
                if term:
                    self._terminated(ctx, seq, e.count, reason)
                if not e.exhausted:
                    self._floor_after(seq, e)
        return released

    def _floor_after(self, seq: int, e: PendingEntry) -> None:
        """nats-server's ack floor rule once pending message ``seq`` is acked (or removed):
        with nothing left waiting for an ack, the floor is the last delivery; if ``seq``
        was just above the floor (by its first delivery's consumer seq), the floor moves to
        just below the next message waiting for an ack — past messages given up on
        (max_deliver), which wait for none; otherwise it stays."""
        if not self.num_ack_pending:
            self.ack_sseq, self.ack_cseq = self.delivered_sseq, self.delivered_cseq
        elif e.cseq == self.ack_cseq + 1:
            nxt = self.pending.get(seq + 1)  # acks in order: no walk over the dict's empty front
            if nxt is not None and not nxt.exhausted:
                self.ack_cseq, self.ack_sseq = max(0, nxt.cseq - 1), seq
                return
            self.ack_cseq, self.ack_sseq = e.cseq, seq
            for q, p in self.pending.items():  # in stream order
                if q > seq and not p.exhausted:
                    self.ack_cseq, self.ack_sseq = max(0, p.cseq - 1), q - 1
                    break

    def nak(self, ctx: Ctx, seq: int, delay_ns: int) -> None:
        self.last_activity_ns = ctx.now
        e = self.pending.get(seq)
        if e is None or e.exhausted:
            return
        # (Delivered max_deliver times already: queued all the same, and dropped as
        # exhausted by the next delivery, which does not send it.)
        if delay_ns > 0:
            e.deadline = ctx.now + delay_ns
            self._push_deadline(e.deadline, seq)
        else:
            e.deadline = NEVER
            heapq.heappush(self.redeliver, seq)
        self._put_pending(ctx, seq, e)

    def progress(self, ctx: Ctx, seq: int) -> None:
        """``+WPI``: restart the ack-wait timer of ``seq`` — unless its ack wait already
        ended (or a NAK queued it): then it stays queued for redelivery, as nats-server
        2.15.1 keeps it (measured, test_redelivery_nats.py)."""
        self.last_activity_ns = ctx.now
        self._expire_overdue_acks(ctx)  # (ended before the Tick came: queued all the same)
        e = self.pending.get(seq)
        if e is None or e.exhausted or e.deadline == NEVER:
            return
        e.deadline = self.ack_deadline(ctx.now, e.count)
        self._push_deadline(e.deadline, seq)
        self._put_pending(ctx, seq, e)

    # -- timers --------------------------------------------------------------------------

    def _expire_overdue_acks(self, ctx: Ctx) -> None:
        """Ack waits that ended before the timer's Tick came: queued for redelivery all the
        same (a pull racing the Tick would otherwise get newer messages ahead, or a no_wait
        one a 404)."""
        if self.deadlines and self.deadlines[0][0] <= ctx.now:
            self.expire_acks(ctx)

    def expire_acks(self, ctx: Ctx) -> bool:
        """Move pending messages whose ack deadline passed to the redelivery queue (those
        delivered max_deliver times too: :meth:`deliver` drops them, as nats-server does)
        — but with ``max_deliver`` 1 one is dropped here, as its ack wait ends (as
        nats-server 2.15.1: measured, test_redelivery_nats.py)."""
        changed = False
        drop_now = self.config.max_deliver == 1
        while self.deadlines and self.deadlines[0][0] <= ctx.now:
            deadline, seq = heapq.heappop(self.deadlines)
            e = self.pending.get(seq)
            if e is None or e.exhausted or e.deadline != deadline:
                continue
            changed = True
            if drop_now:
                self._exhaust(ctx, seq, e)
                continue
            e.deadline = NEVER
            heapq.heappush(self.redeliver, seq)
        return changed

    def _exhaust(self, ctx: Ctx, seq: int, e: PendingEntry) -> None:
        """``seq`` was delivered ``max_deliver`` times and is due again: it leaves the ack
        pending count and stays in ``pending`` flagged (never redelivered; interest and
        workqueue retention keep the message), with the max-deliveries advisory."""
        e.exhausted = True
        e.deadline = NEVER
        self.num_ack_pending -= 1
        self._put_pending(ctx, seq, e)
        ctx.events.append(
            Advisory("max_deliver", self.stream.name, self.name, seq, e.count, "", ctx.now)
        )

    def expire_requests(self, ctx: Ctx) -> None:
        """Pull requests that expired end; waiting ones get their idle heartbeats."""
        w = self.waiting
        w.expire(ctx, self.stream.name, self.name, self.delivered_cseq, self.delivered_sseq)

    def inactive_deadline(self) -> int:
        """When it is deleted for inactivity (0 = never): ``inactive_threshold`` after its
        last activity (creation, a pull request or the end of the last one waiting, an ack)
        or its pending messages' last ack wait's end, whichever is later; never while a pull
        waits or a push consumer is bound (nats-server 2.15.1, measured)."""
        th = self.config.inactive_threshold or 0
        if th <= 0:
            return 0
        if self.config.is_push and self.push_bound:
            return 0
        if not self.config.is_push and self.waiting:
            return 0
        since = self.last_activity_ns
        if self.pending and self.acks_due_until > since:
            since = self.acks_due_until
        return since + th

    def next_deadline(self) -> int:
        if self.more:
            return 1  # due immediately
        best = 0
        while self.deadlines:
            d, s = self.deadlines[0]
            e = self.pending.get(s)
            if e is None or e.exhausted or e.deadline != d:
                heapq.heappop(self.deadlines)
                continue
            best = d
            break
        if self.waiting:
            best = self.waiting.next_due(best)
        for due in (self.inactive_deadline(), self.pause.until):
            if due and (not best or due < best):
                best = due
        return best
