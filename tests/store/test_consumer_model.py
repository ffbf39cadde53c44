"""Stateful Hypothesis test of an explicit-ack pull consumer against a small model.

Invariants: new messages go out once each in stream order; an acked message is never
delivered again; redeliveries happen only after ack_wait or a NAK; the consumer's
num_ack_pending, ack floor, delivered position and num_pending match the model, across
reopens of the store and deletions of messages (pending ones among them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from store import AckKind, Delivery, PurgeStream
from tests.store.conftest import SEC
from tests.store.machine import StoreMachine

ACK_WAIT = 10 * SEC


class ConsumerModel(StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stored: set[int] = set()
        self.last = 0
        self.delivered_seq = 0
        self.pending: dict[int, int] = {}  # seq -> deadline
        self.acked: set[int] = set()
        self.others: set[int] = set()  # stored messages the consumer's filter excludes
        self.counts: dict[int, int] = {}  # seq -> deliveries
        self.exhausted: set[int] = set()  # delivered max_deliver times, due again: dropped
        self.queued: set[int] = set()  # NAKed without a delay: due at once, no timer
        self.floor = 0  # the ack floor's stream seq

    retention = "limits"
    filter_subject = "s.x"
    max_deliver = 0
    examples = 50  # runs of the machine
    push = False  # a push consumer (deliver subject d.x), bound as the broker binds it
    ack_policy = "explicit"
    backoff: tuple[int, ...] = ()  # ack waits by delivery count (the last one repeats)

    @initialize()
    def create(self) -> None:
        self.store.create_stream({"name": "S", "subjects": ["s.>"], "retention": self.retention})
        self.store.create_consumer(
            "S",
            {
                "durable_name": "c",
                "ack_policy": self.ack_policy,
                "ack_wait": ACK_WAIT,
                **({"backoff": list(self.backoff)} if self.backoff else {}),
                "filter_subject": self.filter_subject,
                "max_deliver": self.max_deliver or -1,
                **({"deliver_subject": "d.x"} if self.push else {}),
            },
        )
        self._bind()

    def _bind(self) -> None:
        if self.push:
            self.store.set_push_interest("S", "c", True)
            self._check_deliveries()

    def _check_deliveries(self) -> tuple[list[int], list[int]]:
        """Check the deliveries made since the last call: the seqs redelivered, and those
        delivered for the first time."""
        redelivered: list[int] = []
        new: list[int] = []
        for e in self.events.take():
            if not isinstance(e, Delivery):
                continue
            seq = e.msg.seq
            assert seq in self.stored
            assert seq not in self.acked
            assert seq not in self.exhausted
            assert e.delivered_count == self.counts.get(seq, 0) + 1
            self.counts[seq] = e.delivered_count
            if e.delivered_count == 1:
                assert seq > self.delivered_seq
                assert seq not in self.pending
                skipped = [s for s in self.stored if self.delivered_seq < s < seq]
                assert not skipped, "a new message was skipped"
                self.delivered_seq = seq
                new.append(seq)
                if not self.pending and not self.exhausted:
                    self.floor = seq - 1  # (the filtered-out ones below are not needed)
            else:
                assert seq in self.pending
                assert self.pending[seq] <= self.clock.now, "redelivered before its deadline"
                redelivered.append(seq)
                self.queued.discard(seq)
            self.pending[seq] = self.clock.now + self._wait(seq)
        return redelivered, new

    def _wait(self, seq: int) -> int:
        """The ack wait of ``seq``'s latest delivery."""
        if not self.backoff:
            return ACK_WAIT
        return self.backoff[min(self.counts[seq], len(self.backoff)) - 1]

    @rule(n=st.integers(1, 3), subject=st.sampled_from(["s.x", "s.y"]))
    def publish(self, n: int, subject: str) -> None:
        for _ in range(n):
            ack = self.store.publish(subject, b"p")
            assert ack is not None
            self.last = ack.seq
            if subject == "s.x":
                self.stored.add(ack.seq)
            elif self.retention != "interest":
                self.others.add(ack.seq)
        self._check_deliveries()

    @rule(batch=st.integers(1, 4))
    def pull(self, batch: int) -> None:
        if self.push:
            return
        # Redeliveries go first, in stream order (a NAKed message too, after a reopen);
        # one delivered max_deliver times is dropped when its turn comes; then new
        # messages fill the request.
        due: list[int] = []
        dropped: list[int] = []
        for q in sorted(q for q, deadline in self.pending.items() if deadline <= self.clock.now):
            if len(due) == batch:
                break
            if self.max_deliver and self.counts[q] >= self.max_deliver:
                dropped.append(q)
            else:
                due.append(q)
        waiting = sorted(q for q in self.stored if q > self.delivered_seq)
        self.store.pull("S", "c", "inbox", batch=batch, no_wait=True)
        for q in dropped:
            del self.pending[q]
            self.exhausted.add(q)
        redelivered, new = self._check_deliveries()
        assert redelivered == due
        assert new == waiting[: batch - len(redelivered)]

    @rule(data=st.data(), kind=st.sampled_from([AckKind.ACK, AckKind.TERM, AckKind.NAK]))
    def ack(self, data: st.DataObject, kind: AckKind) -> None:
        if not self.pending and not self.exhausted:
            return
        seq = data.draw(st.sampled_from(sorted(self.pending.keys() | self.exhausted)))
        self.store.ack("S", "c", seq, kind)
        if kind is AckKind.NAK:
            if seq in self.pending:  # (an exhausted one stays as it is)
                self.pending[seq] = self.clock.now
                self.queued.add(seq)
        elif self.ack_policy == "all":
            # Everything up to it (a +TERM too, as nats-server 2.15.1).
            for q in [q for q in self.pending.keys() | self.exhausted if q <= seq]:
                self.pending.pop(q, None)
                self.exhausted.discard(q)
                self.acked.add(q)
            self.floor = self._first_floor()
        else:
            self._gone(seq)
            self.acked.add(seq)
        self._check_deliveries()

    def _first_floor(self) -> int:
        """Below the first message the consumer tracks (or its last delivery)."""
        unacked = self.pending.keys() | self.exhausted
        return min(unacked) - 1 if unacked else self.delivered_seq

    def _gone(self, seq: int) -> None:
        """``seq`` acked or deleted: nats-server's ack floor rule (explicit acks). With
        nothing left waiting for an ack the floor is the last delivery; a message just
        above the floor moves it to below the next one waiting for an ack (past messages
        given up on: they wait for none); a message given up on moves nothing."""
        self.exhausted.discard(seq)
        if self.pending.pop(seq, None) is None:
            return
        if not self.pending:
            self.floor = self.delivered_seq
        elif seq == self.floor + 1:
            self.floor = min(q for q in self.pending if q > seq) - 1

    @rule(data=st.data(), delay=st.integers(1, 20))
    def nak_later(self, data: st.DataObject, delay: int) -> None:
        """``-NAK`` with a delay: due again ``delay`` seconds from now."""
        if not self.pending:
            return
        seq = data.draw(st.sampled_from(sorted(self.pending)))
        self.store.ack("S", "c", seq, AckKind.NAK, delay_ns=delay * SEC)
        self.pending[seq] = self.clock.now + delay * SEC
        self.queued.discard(seq)
        self._check_deliveries()

    @rule(data=st.data())
    def in_progress(self, data: st.DataObject) -> None:
        """``+WPI``: the ack wait starts again."""
        if not self.pending:
            return
        seq = data.draw(st.sampled_from(sorted(self.pending)))
        self.store.ack("S", "c", seq, AckKind.WPI)
        self._timers_fire()
        if seq in self.pending and self.pending[seq] > self.clock.now:
            self.pending[seq] = self.clock.now + self._wait(seq)
        # (else due: its ack wait ended or a NAK queued it; it stays due, as nats-server)
        self._check_deliveries()

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """A message deleted from the stream: not delivered any more; one still pending
        (or delivered max_deliver times) leaves the consumer's pending as if acked, as
        nats-server processes it (its ack floor moves past it)."""
        in_stream = sorted(self._in_stream())
        if not in_stream:
            return
        seq = data.draw(st.sampled_from(in_stream))
        self.store.delete_msg("S", seq)
        self.stored.discard(seq)
        self.others.discard(seq)
        self._gone(seq)
        self._check_deliveries()

    @rule(data=st.data(), whole=st.booleans())
    def purge(self, data: st.DataObject, whole: bool) -> None:
        """The stream purged below a seq (or whole): the consumer moves to the stream's
        first seq after it (its delivered position and ack floor), and whatever it had
        pending below that goes, as nats-server's consumer purge. Past the end, the stream
        moves on to the seq purged below."""
        below = self.last + 1 if whole else data.draw(st.integers(1, self.last + 2))
        self.store.submit([PurgeStream("S", seq=None if whole else below)]).result(timeout=30)
        for kept in (self.stored, self.others):
            kept -= {q for q in kept if q < below}
        first = min(self._in_stream(), default=max(self.last + 1, below))
        for q in sorted(q for q in self.pending.keys() | self.exhausted if q < first):
            self._gone(q)  # (each removal, in stream order)
        if self.delivered_seq < first - 1:
            self.delivered_seq = first - 1
            if not self.pending and not self.exhausted:
                self.floor = self.delivered_seq
        self._check_deliveries()

    @rule(secs=st.integers(1, 15))
    def advance(self, secs: int) -> None:
        self.store.tick(self.clock.advance(secs * SEC)).result(timeout=30)
        self._timers_fire()
        self._check_deliveries()

    def _timers_fire(self) -> None:
        """Ack waits (and NAK delays) that ended: with max_deliver 1 the message is dropped
        then, as nats-server 2.15.1; one NAKed without a delay waits for the next pull."""
        if self.max_deliver == 1:
            for q, deadline in list(self.pending.items()):
                if deadline <= self.clock.now and q not in self.queued:
                    del self.pending[q]
                    self.exhausted.add(q)

    @invariant()
    def info_matches(self) -> None:
        info = self.store.consumer_info("S", "c")
        assert info.num_ack_pending == len(self.pending)
        assert info.delivered.stream_seq == self.delivered_seq
        assert info.ack_floor.stream_seq == self.floor
        assert info.num_pending == sum(1 for s in self.stored if s > self.delivered_seq)
        assert {m.seq for m in self.store.iter_msgs("S")} == self._in_stream()

    def _in_stream(self) -> set[int]:
        """The messages the stream holds."""
        if self.retention == "limits":
            return self.stored | self.others
        if self.retention == "workqueue":  # stored regardless; removed on first ack/term
            return (self.stored - self.acked) | self.others
        # interest: s.y has no interest (not stored), acked s.x messages are removed
        return self.stored - self.acked


class PushConsumerModel(ConsumerModel):
    """A bound push consumer: whatever is due goes out in the batch that makes it due
    (an append, a NAK, the Tick that ends an ack wait) — checked after every step. Its
    binding is memory only: after a reopen the broker binds it again."""

    push = True
    bound = True

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open()
        if self.bound:
            self._bind()

    @rule()
    def unbind(self) -> None:
        """The deliver subject's last subscriber goes: nothing goes out meanwhile."""
        self.store.set_push_interest("S", "c", False)
        self.bound = False
        assert self._check_deliveries() == ([], [])

    @rule()
    def bind(self) -> None:
        self.bound = True
        self._bind()

    @invariant()
    def everything_due_went_out(self) -> None:
        if self.bound:
            assert all(deadline > self.clock.now for deadline in self.pending.values())
            assert all(q <= self.delivered_seq for q in self.stored)  # none left to send


class InterestConsumerModel(ConsumerModel):
    retention = "interest"


class WorkQueueConsumerModel(ConsumerModel):
    retention = "workqueue"


class AckAllConsumerModel(ConsumerModel):
    ack_policy = "all"


class BackoffConsumerModel(ConsumerModel):
    backoff = (3 * SEC, 8 * SEC, 20 * SEC)


class MaxDeliverConsumerModel(ConsumerModel):
    """A message is delivered at most twice: due a third time, it is dropped (more runs:
    that takes a few steps to reach)."""

    max_deliver = 2
    examples = 200


class DeliverOnceConsumerModel(MaxDeliverConsumerModel):
    """At most once: an ack wait or a NAK delay that ends drops the message then (the
    Tick), a NAK without a delay at the next pull."""

    max_deliver = 1
    examples = 100


class SlicedConsumerModel(ConsumerModel):
    """The same rules with a wildcard filter (``*.x``: the same messages) and the smallest
    slices: the search for the next message and num_pending counted afresh (after each
    reopen) go on over several batches, driven by ticks whenever something is due, as the
    broker's loop drives them."""

    filter_subject = "*.x"
    remove_slice = 1

    def _check_deliveries(self) -> tuple[list[int], list[int]]:
        self.tick_while_due()
        return super()._check_deliveries()


@pytest.mark.parametrize(
    "machine",
    [
        ConsumerModel,
        InterestConsumerModel,
        WorkQueueConsumerModel,
        PushConsumerModel,
        AckAllConsumerModel,
        BackoffConsumerModel,
        MaxDeliverConsumerModel,
        DeliverOnceConsumerModel,
        SlicedConsumerModel,
    ],
)
def test_consumer_against_model(tmp_path: Path, machine: type[ConsumerModel]) -> None:
    machine.root = tmp_path
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=machine.examples, stateful_step_count=30, deadline=None),
    )
