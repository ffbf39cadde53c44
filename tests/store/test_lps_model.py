"""Stateful Hypothesis test of a ``last_per_subject`` consumer against a small model, with
the smallest slices (its placing walk, its num_pending counted afresh after each reopen,
its searches: all over several batches, driven by ticks as the broker's loop drives them).

The model: created over the stored messages, the consumer's first pass ends at the
highest of its subjects' last messages (``hi``) and starts below the lowest; walking
from its position it skips a message whose subject has a newer one stored up to ``hi``
and delivers the rest, every match after ``hi`` included. num_pending is, while the first
pass lasts, the subjects with a message between the position and ``hi`` plus the matches
after it; then the matches after the position.
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

from store import Delivery, PullStatus
from tests.store.machine import StoreMachine

SUBJECTS = ["s.a", "s.b", "s.c", "s.d", "t.x"]  # t.x: outside the filter
FILTER = "s.*"


def _matches(subject: str) -> bool:
    return subject.startswith("s.")


class LpsModel(StoreMachine):
    remove_slice = 1

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[int, str] = {}
        self.pos = 0  # the consumer's position (the last match it delivered or skipped)
        self.hi = 0  # where its first pass ends

    def _publish(self, subject: str) -> None:
        ack = self.store.publish(subject, b"p")
        assert ack is not None
        self.stored[ack.seq] = subject

    @initialize(first=st.lists(st.sampled_from(SUBJECTS), max_size=12))
    def create(self, first: list[str]) -> None:
        self.store.create_stream({"name": "S", "subjects": ["s.>", "t.>"]})
        for subject in first:
            self._publish(subject)
        lasts = {x: q for q, x in sorted(self.stored.items()) if _matches(x)}
        if lasts:
            self.pos, self.hi = min(lasts.values()) - 1, max(lasts.values())
        else:
            self.pos = max(self.stored, default=0)
        self.store.create_consumer(
            "S",
            {
                "durable_name": "c",
                "ack_policy": "none",
                "deliver_policy": "last_per_subject",
                "filter_subject": FILTER,
            },
        )

    def _superseded(self, seq: int) -> bool:
        subject = self.stored[seq]
        return seq <= self.hi and any(
            self.stored.get(q) == subject for q in range(seq + 1, self.hi + 1)
        )

    @rule(subject=st.sampled_from(SUBJECTS))
    def publish(self, subject: str) -> None:
        self._publish(subject)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if not self.stored:
            return
        seq = data.draw(st.sampled_from(sorted(self.stored)))
        self.store.delete_msg("S", seq)
        del self.stored[seq]

    @rule(batch=st.integers(1, 3))
    def pull(self, batch: int) -> None:
        expected: list[int] = []
        ended = False
        for q in sorted(self.stored):
            if q <= self.pos or not _matches(self.stored[q]):
                continue
            self.pos = q
            if not self._superseded(q):
                expected.append(q)
                if len(expected) == batch:
                    break
        else:
            ended = True  # not filled: the request ends with 404
        self.events.take()
        self.store.pull("S", "c", "inbox", batch=batch, no_wait=True)
        got: list[int] = []
        status: list[int] = []
        for _ in range(1_000):
            for e in self.events.take():
                if isinstance(e, Delivery):
                    got.append(e.msg.seq)
                elif isinstance(e, PullStatus) and e.reply == "inbox":
                    status.append(e.code)
            if len(got) == batch or status:
                break
            self.tick_while_due()
        assert got == expected
        assert status == ([404] if ended else [])

    @invariant()
    def num_pending_matches(self) -> None:
        info = self.store.consumer_info("S", "c")
        after = sum(1 for q, x in self.stored.items() if q > max(self.pos, self.hi) and _matches(x))
        first_pass = {x for q, x in self.stored.items() if self.pos < q <= self.hi and _matches(x)}
        assert info.num_pending == len(first_pass) + after
        assert info.delivered.stream_seq == self.pos


@pytest.mark.timeout(600)
def test_last_per_subject_against_model(tmp_path: Path) -> None:
    LpsModel.root = tmp_path
    run_state_machine_as_test(
        LpsModel, settings=settings(max_examples=60, stateful_step_count=30, deadline=None)
    )
