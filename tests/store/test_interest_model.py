"""Stateful Hypothesis test of interest retention with several consumers against a model.

Three durable pull consumers come and go on an interest stream (filters ``s.x``, ``s.y``
and none); messages are published on ``s.x``, ``s.y`` and ``s.z``, pulled and acked out of
order. The model (spec §1.9.6): a message is stored only if a consumer's filter matches
it when it is published; it stays while some consumer whose filter matches it has not
acked it; a consumer created later wants every stored message its filter matches
(``deliver_policy: all``); deleting a consumer drops the messages no one else wants (in
slices of one message here, across batches, answering once done). Reopens in between.

Invariant after every step: the stream holds exactly the model's messages, and each
consumer's num_pending and num_ack_pending are the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test

from store import Delivery
from tests.store.machine import StoreMachine

FILTERS = {"a": "s.x", "b": "s.y", "c": ""}  # consumer -> filter ("": every subject)
NAMES = sorted(FILTERS)


@dataclass
class Wants:
    """What the model knows of one consumer."""

    filter: str
    delivered: int = 0  # the highest stream seq delivered
    pending: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)

    def matches(self, subject: str) -> bool:
        return not self.filter or subject == self.filter

    def needs(self, seq: int, subject: str) -> bool:
        return self.matches(subject) and seq not in self.acked


class InterestModel(StoreMachine):
    remove_slice = 1

    def __init__(self) -> None:
        super().__init__()
        self.consumers: dict[str, Wants] = {}
        self.stored: dict[int, str] = {}  # seq -> subject

    @initialize()
    def create_stream(self) -> None:
        self.store.create_stream({"name": "S", "subjects": ["s.>"], "retention": "interest"})

    def _drop_unwanted(self) -> None:
        for seq, subject in list(self.stored.items()):
            if not any(c.needs(seq, subject) for c in self.consumers.values()):
                del self.stored[seq]

    @rule(name=st.sampled_from(NAMES))
    def create(self, name: str) -> None:
        if name in self.consumers:
            return
        cfg = {"durable_name": name, "ack_policy": "explicit", "ack_wait": 3600 * 10**9}
        if FILTERS[name]:
            cfg["filter_subject"] = FILTERS[name]
        self.store.create_consumer("S", cfg)
        self.consumers[name] = Wants(FILTERS[name])

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        if name not in self.consumers:
            return
        self.store.delete_consumer("S", name)  # answers when its check is done
        del self.consumers[name]
        self._drop_unwanted()

    @rule(n=st.integers(1, 3), subject=st.sampled_from(["s.x", "s.y", "s.z"]))
    def publish(self, n: int, subject: str) -> None:
        for _ in range(n):
            ack = self.store.publish(subject, b"p")
            assert ack is not None
            if any(c.matches(subject) for c in self.consumers.values()):
                self.stored[ack.seq] = subject

    @rule(name=st.sampled_from(NAMES), batch=st.integers(1, 4))
    def pull(self, name: str, batch: int) -> None:
        c = self.consumers.get(name)
        if c is None:
            return
        self.events.take()
        self.store.pull("S", name, "inbox", batch=batch, no_wait=True)
        got = [e.msg.seq for e in self.events.take() if isinstance(e, Delivery)]
        due = sorted(q for q, subj in self.stored.items() if q > c.delivered and c.matches(subj))
        assert got == due[:batch]
        if got:
            c.delivered = got[-1]
            c.pending.update(got)

    @rule(data=st.data(), name=st.sampled_from(NAMES))
    def ack(self, data: st.DataObject, name: str) -> None:
        c = self.consumers.get(name)
        if c is None or not c.pending:
            return
        seq = data.draw(st.sampled_from(sorted(c.pending)))
        self.store.ack("S", name, seq)
        c.pending.discard(seq)
        c.acked.add(seq)
        self._drop_unwanted()

    @invariant()
    def matches_model(self) -> None:
        assert {m.seq: m.subject for m in self.store.iter_msgs("S")} == self.stored
        assert self.store.stream_state("S").messages == len(self.stored)
        for name, c in self.consumers.items():
            info = self.store.consumer_info("S", name)
            assert info.num_ack_pending == len(c.pending)
            assert info.num_pending == sum(
                1 for q, subj in self.stored.items() if q > c.delivered and c.matches(subj)
            )


def test_interest_retention_against_model(tmp_path: Path) -> None:
    InterestModel.root = tmp_path
    run_state_machine_as_test(
        InterestModel,
        settings=settings(max_examples=100, stateful_step_count=40, deadline=None),
    )
