"""A pull consumer's waiting requests (MSG.NEXT) inside the writer: the queue they wait in,
the turn each takes, and the statuses that end them or keep them alive (spec §1.9.3).
Writer thread only; each :class:`store.consumers.ConsumerRt` has one (``c.waiting``).

Memory only: a pull request does not survive a restart, as in nats-server. The engine
copies the queue when a batch starts (:meth:`PullQueue.copy`) and puts the copy back if
the batch aborts. Every rule here was measured against nats-server 2.15.1
(tests/store/test_pull_queue_nats.py, test_against_nats.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from store.ctx import Ctx
from store.ops import PullStatus


@dataclass
class PullRequest:
    reply: str
    batch: int
    expires_at: int  # 0 = never
    no_wait: bool
    max_bytes: int  # remaining; 0 = no limit
    heartbeat: int = 0  # idle_heartbeat (ns); 0 = none
    next_beat: int = 0  # when its next idle heartbeat is due, unless a message comes first
    delivered: int = 0


def status(stream: str, consumer: str, req: PullRequest, code: int, desc: str) -> PullStatus:
    """A status ending ``req``, with what it had yet to take."""
    return PullStatus(
        stream,
        consumer,
        req.reply,
        code,
        desc,
        pending_msgs=max(0, req.batch),
        pending_bytes=max(0, req.max_bytes),
    )


class PullQueue:
    """The waiting requests, the one whose turn it is first."""

    __slots__ = ("reqs",)

    def __init__(self, reqs: Iterable[PullRequest] = ()) -> None:
        self.reqs: deque[PullRequest] = deque(reqs)

    def __len__(self) -> int:
        return len(self.reqs)

    def __iter__(self) -> Iterator[PullRequest]:
        return iter(self.reqs)

    def __getitem__(self, i: int) -> PullRequest:
        return self.reqs[i]

    def append(self, req: PullRequest) -> None:
        self.reqs.append(req)

    def clear(self) -> None:
        self.reqs.clear()

    def copy(self) -> list[PullRequest]:
        """The requests as they are now (their counters are mutated while delivering)."""
        return [replace(r) for r in self.reqs]

    def batches(self) -> int:
        """The messages the waiting requests have yet to take."""
        return sum(r.batch for r in self.reqs)

    def charge(self, ctx: Ctx, req: PullRequest, size: int, stream: str, consumer: str) -> bool:
        """Count a delivery of ``size`` bytes (store.consumers: as nats-server counts it)
        against ``req``'s max_bytes (``req`` is first in the queue). False if it does not
        fit: the request ends with 409, even after other messages."""
        if size > req.max_bytes:
            self.reqs.popleft()
            ctx.events.append(status(stream, consumer, req, 409, "Message Size Exceeds MaxBytes"))
            return False
        req.max_bytes -= size
        if not req.max_bytes:
            req.max_bytes = -1  # used up exactly: it ends after this message
        return True

    def served(self, ctx: Ctx, req: PullRequest) -> None:
        """``req`` (first in the queue) got a message: it leaves when filled, or when its
        max_bytes is used up exactly, without a status; otherwise it goes to the back:
        waiting requests take one message each in turn."""
        req.delivered += 1
        req.batch -= 1
        if req.heartbeat:
            req.next_beat = ctx.now + req.heartbeat
        if req.batch <= 0 or req.max_bytes < 0:
            self.reqs.popleft()
        elif len(self.reqs) > 1:
            self.reqs.rotate(-1)

    def end_no_wait(self, ctx: Ctx, stream: str, consumer: str) -> bool:
        """Nothing more to deliver: no_wait requests end with 404, even after some
        messages; one with ``expires`` that has had none yet waits for its first (or its
        expiry). True if any ended. (One held back by max_ack_pending too: the server
        keeps it waiting without a status until its inbox loses interest, which the store
        cannot see: store/DESIGN.md.)"""
        keep: deque[PullRequest] = deque()
        ended = False
        for req in self.reqs:
            if req.no_wait and (req.delivered or not req.expires_at):
                # (no pending counts: nats-server's 404 carries none, measured)
                ctx.events.append(PullStatus(stream, consumer, req.reply, 404, "No Messages"))
                ended = True
            else:
                keep.append(req)
        self.reqs = keep
        return ended

    def expire(self, ctx: Ctx, stream: str, consumer: str, last_cseq: int, last_sseq: int) -> None:
        """Requests whose ``expires`` passed end with 408; the others that have waited
        ``idle_heartbeat`` since their last message or heartbeat get a heartbeat carrying
        the consumer's last delivery (``last_cseq`` / ``last_sseq``)."""
        keep: deque[PullRequest] = deque()
        for req in self.reqs:
            if req.expires_at and req.expires_at <= ctx.now:
                ctx.events.append(status(stream, consumer, req, 408, "Request Timeout"))
                continue
            if req.heartbeat and req.next_beat <= ctx.now:
                req.next_beat = ctx.now + req.heartbeat
                ctx.events.append(
                    PullStatus(
                        stream,
                        consumer,
                        req.reply,
                        100,
                        "Idle Heartbeat",
                        last_consumer_seq=last_cseq,
                        last_stream_seq=last_sseq,
                    )
                )
            keep.append(req)
        self.reqs = keep

    def withdraw(self, reply: str) -> int:
        """Drop the requests for ``reply`` (no status: nobody listens there); how many."""
        before = len(self.reqs)
        self.reqs = deque(r for r in self.reqs if r.reply != reply)
        return before - len(self.reqs)

    def next_due(self, best: int) -> int:
        """The earliest of ``best`` (0: none) and the requests' expiries and heartbeats."""
        for req in self.reqs:
            for due in (req.expires_at, req.next_beat):
                if due and (not best or due < best):
                    best = due
        return best
