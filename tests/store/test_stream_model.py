"""Stateful Hypothesis test: a stream against a plain in-memory model, with reopen steps.

The store removes at most two messages per transaction (``remove_slice=2``), so purges,
the deletion of the stream, updates that lower its limits and their continuations across
batches are part of every run. A second machine lets time pass (``max_age`` and
``duplicate_window`` of a few seconds, an injected clock).

Invariant after every step: the stored messages (seq, subject, payload), the state
counters (messages, bytes, first/last seq, num_deleted, num_subjects) and
last-by-subject all equal the model's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from store import JetStreamError, PubAck, Publish, keys
from store.subjects import subject_matches
from tests.store.conftest import SEC
from tests.store.machine import StoreMachine

SUBJECTS = ["s.a", "s.b", "s.c.d"]


class StreamModel(StoreMachine):
    remove_slice = 2
    duplicate_window = 120 * SEC  # the default (this model's clock stands still)

    def __init__(self) -> None:
        super().__init__()
        self.msgs: dict[int, tuple[str, bytes]] = {}
        self.last = 0
        self.whole_purged = False
        self.dedupe: dict[str, tuple[int, int]] = {}  # msg id -> (seq, time)
        self.times: dict[int, int] = {}  # seq -> time stored
        self.hlen: dict[int, int] = {}
        self.max_msgs = -1
        self.mmps = -1

    @initialize(max_msgs=st.sampled_from([-1, 3, 6]), mmps=st.sampled_from([-1, 1, 2]))
    def create(self, max_msgs: int, mmps: int) -> None:
        self.max_msgs, self.mmps = max_msgs, mmps
        self._create()

    def _config(self) -> dict[str, object]:
        return {
            "name": "S",
            "subjects": ["s.>"],
            "max_msgs": self.max_msgs,
            "max_msgs_per_subject": self.mmps,
            "allow_rollup_hdrs": True,
        }

    def _create(self) -> None:
        self.store.create_stream(self._config())

    def _stored(self, seq: int, subject: str, payload: bytes, hlen: int) -> None:
        self.msgs[seq] = (subject, payload)
        self.hlen[seq] = hlen
        self.times[seq] = self.clock.now

    def _remove_oldest_of(self, subject: str, keep: int) -> None:
        seqs = sorted(s for s, (subj, _) in self.msgs.items() if subj == subject)
        for s in seqs[: max(0, len(seqs) - keep)]:
            del self.msgs[s]

    @rule(
        subject=st.sampled_from(SUBJECTS),
        payload=st.binary(max_size=20),
        msg_id=st.none() | st.sampled_from(["m1", "m2", "m3"]),
        rollup=st.none() | st.sampled_from(["sub", "all"]),
    )
    def publish(self, subject: str, payload: bytes, msg_id: str | None, rollup: str | None) -> None:
        headers: list[tuple[str, str]] = []
        if msg_id:
            headers.append(("Nats-Msg-Id", msg_id))
        if rollup:
            headers.append(("Nats-Rollup", rollup))
        ack = self.store.publish(subject, payload, tuple(headers))
        assert isinstance(ack, PubAck)
        original = self.dedupe.get(msg_id or "")
        if original is not None and original[1] + self.duplicate_window > self.clock.now:
            assert (ack.seq, ack.duplicate) == (original[0], True)
            return
        self.last += 1
        assert (ack.seq, ack.duplicate) == (self.last, False)
        self._stored(self.last, subject, payload, len(keys.encode_headers(tuple(headers))))
        if msg_id:
            self.dedupe[msg_id] = (self.last, self.clock.now)
        if self.mmps > 0:
            self._remove_oldest_of(subject, self.mmps)
        while self.max_msgs > 0 and len(self.msgs) > self.max_msgs:
            del self.msgs[min(self.msgs)]
        if rollup == "sub":
            self._remove_oldest_of(subject, 1)
        elif rollup == "all":
            for s in [s for s in self.msgs if s < self.last]:
                del self.msgs[s]

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        seq = data.draw(st.integers(1, self.last + 1))
        if seq in self.msgs:
            self.store.delete_msg("S", seq)
            del self.msgs[seq]
        else:
            with pytest.raises(JetStreamError) as ei:
                self.store.delete_msg("S", seq)
            # nats-server 2.15.1's answers (measured): a gap inside the stream is 10043,
            # past either end its file store's error as 10057.
            e = ei.value
            first = min(self.msgs) if self.msgs else self.last + 1
            if seq > self.last:
                assert (e.code, e.err_code, e.description) == (500, 10057, "stream store EOF")
            elif seq < first:
                assert (e.code, e.err_code, e.description) == (500, 10057, "no message found")
            else:
                assert (e.code, e.err_code) == (400, 10043)

    @rule(
        subject=st.none() | st.sampled_from([*SUBJECTS, "s.*", "s.c.>", ">"]),
        keep=st.none() | st.integers(0, 2),
        below=st.none() | st.integers(0, 30),
    )
    def purge(self, subject: str | None, keep: int | None, below: int | None) -> None:
        if keep is not None and below is not None:
            below = None  # both at once is a bad request (tests/store/test_streams.py)
        n = self.store.purge_stream("S", filter=subject, keep=keep, seq=below)
        victims = sorted(
            s
            for s, (subj, _) in self.msgs.items()
            if (subject is None or subject_matches(subject, subj)) and (not below or s < below)
        )
        if keep is not None:
            victims = victims[: max(0, len(victims) - keep)]
        assert n == len(victims)
        for s in victims:
            del self.msgs[s]
        # As nats-server: filter ">" is every subject, seq 0 no bound, keep 0 all of it.
        if subject in (None, ">") and not keep and below != 1:
            self.whole_purged = True  # an empty stream's first seq is last + 1 from now on
            if below and below > self.last + 1:
                self.last = below - 1  # purged past the end: the stream moves on

    @rule()
    def delete_and_recreate(self) -> None:
        env = self.store.env
        with env.read() as txn:
            record = txn.get(b"S", db=env.dbs[keys.DB_STREAMS])
            sid = keys.unpack_named_record(bytes(record), keys.STREAM_RECORD_VERSION)[0]
        self.store.delete_stream("S")
        assert self.store.stream_names() == []
        with env.read() as txn:  # every slice of the deletion ran before it returned
            for db in (keys.DB_MSGS, keys.DB_SUBJECTS, keys.DB_SUBJCOUNT, keys.DB_DEDUPE):
                cur = txn.cursor(db=env.dbs[db])
                assert not cur.set_range(keys.sid_prefix(sid)) or cur.key()[:8] != keys.u64(sid)
            assert txn.get(keys.sweep_key(sid), db=env.dbs[keys.DB_META]) is None
        self._create()
        self.msgs.clear()
        self.dedupe.clear()
        self.last = 0
        self.whole_purged = False

    @precondition(lambda self: self.last > 0)
    @rule()
    def batch_of_three(self) -> None:
        res = self.store.submit([Publish("s.a", b"1"), Publish("x.none"), Publish("s.b", b"2")])
        out = res.result(timeout=30)
        assert out[1] is None
        for subj, payload, r in (("s.a", b"1", out[0]), ("s.b", b"2", out[2])):
            assert isinstance(r, PubAck)
            self.last += 1
            assert r.seq == self.last
            self._stored(self.last, subj, payload, 0)
            if self.mmps > 0:
                self._remove_oldest_of(subj, self.mmps)
            while self.max_msgs > 0 and len(self.msgs) > self.max_msgs:
                del self.msgs[min(self.msgs)]

    @rule(max_msgs=st.sampled_from([-1, 1, 3, 6]), mmps=st.sampled_from([-1, 1, 2, 4]))
    def update_limits(self, max_msgs: int, mmps: int) -> None:
        """A stream update: the excess goes (two messages per slice) before it answers."""
        self.max_msgs, self.mmps = max_msgs, mmps
        info = self.store.update_stream(self._config())
        if mmps > 0:
            for subject in SUBJECTS:
                self._remove_oldest_of(subject, mmps)
        while max_msgs > 0 and len(self.msgs) > max_msgs:
            del self.msgs[min(self.msgs)]
        self._expire()  # an update enforces every limit, max_age too
        assert info.state.messages == len(self.msgs)

    def _expire(self) -> None:
        """Remove the messages older than max_age (none here: no max_age)."""

    @invariant()
    def matches_model(self) -> None:
        stored = {m.seq: (m.subject, m.payload) for m in self.store.iter_msgs("S")}
        assert stored == self.msgs
        state = self.store.stream_state("S")
        assert state.messages == len(self.msgs)
        assert state.last_seq == self.last
        if self.msgs:
            first = min(self.msgs)
        else:
            first = self.last + 1 if self.last or self.whole_purged else 0
        assert state.first_seq == first
        span = self.last - first + 1 if self.msgs else 0
        assert (state.num_deleted or 0) == span - len(self.msgs)
        assert state.bytes == sum(
            keys.msg_bytes(len(subj), self.hlen[seq], len(p))
            for seq, (subj, p) in self.msgs.items()
        )
        subjects = {s for s, _ in self.msgs.values()}
        assert (state.num_subjects or 0) == len(subjects)
        for subj in subjects:
            want = max(s for s, (x, _) in self.msgs.items() if x == subj)
            assert self.store.last_by_subject("S", subj).seq == want


class TimedStreamModel(StreamModel):
    """The same with time passing in steps of about the limits' size, so their
    boundaries are met: ``max_age`` expires the oldest messages when the store is ticked
    (in slices of two, ticking while something is due, as the broker's loop does; a late
    tick expires nothing meanwhile) and when the stream is updated and a msg id is a duplicate only within
    ``duplicate_window`` of its first publish, ticked or not."""

    max_age = 4 * SEC
    duplicate_window = 2 * SEC

    def _config(self) -> dict[str, object]:
        return {
            **super()._config(),
            "max_age": self.max_age,
            "duplicate_window": self.duplicate_window,
        }

    @rule(
        n=st.integers(1, 3),
        subject=st.sampled_from(SUBJECTS),
        msg_id=st.none() | st.sampled_from(["m1", "m2", "m3"]),
    )
    def publish_some(self, n: int, subject: str, msg_id: str | None) -> None:
        """More publishes per step, so the limits have messages to expire and ids to match."""
        for i in range(n):
            self.publish(subject, bytes([i]), msg_id, None)

    @rule(secs=st.integers(1, 3), tick=st.booleans())
    def advance(self, secs: int, tick: bool) -> None:
        self.clock.advance(secs * SEC)
        if tick:
            self.tick_while_due()
            self._expire()

    def _expire(self) -> None:
        now = self.clock.now
        for seq in [q for q in self.msgs if self.times[q] + self.max_age <= now]:
            del self.msgs[seq]


def test_stream_against_model(tmp_path: Path) -> None:
    StreamModel.root = tmp_path
    run_state_machine_as_test(
        StreamModel, settings=settings(max_examples=100, stateful_step_count=25, deadline=None)
    )


def test_stream_with_time_against_model(tmp_path: Path) -> None:
    TimedStreamModel.root = tmp_path
    run_state_machine_as_test(
        TimedStreamModel,
        settings=settings(max_examples=150, stateful_step_count=40, deadline=None),
    )
