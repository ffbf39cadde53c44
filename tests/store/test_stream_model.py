"""Stateful Hypothesis test: a stream against a plain in-memory model, with reopen steps.

The stream's limits are drawn at creation and by each update: ``max_msgs``, ``max_bytes``,
``max_msgs_per_subject``, ``max_msg_size``, ``discard`` old or new and
``discard_new_per_subject``; every publish's answer (a PubAck, a duplicate's, or the
JetStream error refusing it) is the model's.

The store removes at most two messages per transaction (``remove_slice=2``), so purges,
the deletion of the stream, updates that lower its limits and their continuations across
batches are part of every run. A second machine lets time pass (``max_age`` and
``duplicate_window`` of a few seconds, an injected clock).

Invariant after every step: the stored messages (seq, subject, payload), the state
counters (messages, bytes, first/last seq, num_deleted, num_subjects) and
last-by-subject all equal the model's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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
from store.ops import Headers
from store.subjects import subject_matches
from tests.store.conftest import SEC
from tests.store.machine import StoreMachine

SUBJECTS = ["s.a", "s.b", "s.c.d"]
# STREAM_MODEL_EXAMPLES raises both tests' bounds for a long local run.
EXAMPLES = int(os.environ.get("STREAM_MODEL_EXAMPLES", "0"))

# The store's refusals of a publish (spec §1.3: 10054, 10077 with its three reasons).
TOO_BIG = JetStreamError(10054, 400, "message size exceeds maximum allowed")
MAX_MSGS = JetStreamError(10077, 503, "maximum messages exceeded")
MAX_BYTES = JetStreamError(10077, 503, "maximum bytes exceeded")
MAX_PER_SUBJECT = JetStreamError(10077, 503, "maximum messages per subject exceeded")


@dataclass(frozen=True)
class Limits:
    """The limits of the stream's config the model follows (-1: none)."""

    max_msgs: int = -1
    max_bytes: int = -1
    mmps: int = -1  # max_msgs_per_subject
    max_msg_size: int = -1
    discard_new: bool = False
    dnps: bool = False  # discard_new_per_subject (needs discard new and mmps > 0)

    def config(self) -> dict[str, object]:
        return {
            "max_msgs": self.max_msgs,
            "max_bytes": self.max_bytes,
            "max_msgs_per_subject": self.mmps,
            "max_msg_size": self.max_msg_size,
            "discard": "new" if self.discard_new else "old",
            "discard_new_per_subject": self.dnps,
        }


@st.composite
def limits(draw: st.DrawFn) -> Limits:
    """Limits about the size of what the rules publish: a message counts 33 to about 110
    bytes (``keys.msg_bytes``), its headers and payload 0 to about 70."""
    discard_new = draw(st.booleans())
    mmps = draw(st.sampled_from([-1, 1, 2, 4]))
    return Limits(
        max_msgs=draw(st.sampled_from([-1, 1, 3, 6])),
        max_bytes=draw(st.just(-1) | st.integers(30, 300)),
        mmps=mmps,
        max_msg_size=draw(st.just(-1) | st.integers(1, 60)),
        discard_new=discard_new,
        dnps=discard_new and mmps > 0 and draw(st.booleans()),
    )


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
        self.limits = Limits()

    @initialize(lim=limits())
    def create(self, lim: Limits) -> None:
        self.limits = lim
        self._create()

    def _config(self) -> dict[str, object]:
        return {"name": "S", "subjects": ["s.>"], **self.limits.config(), "allow_rollup_hdrs": True}

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

    def _size(self, seq: int) -> int:
        subject, payload = self.msgs[seq]
        return keys.msg_bytes(len(subject), self.hlen[seq], len(payload))

    def _bytes(self) -> int:
        return sum(self._size(seq) for seq in self.msgs)

    def _trim_oldest(self) -> None:
        """With discard old: the oldest messages go while over ``max_msgs`` or
        ``max_bytes`` (with discard new those limits refuse instead)."""
        lim = self.limits
        if not lim.discard_new:
            while 0 < lim.max_msgs < len(self.msgs):
                del self.msgs[min(self.msgs)]
            while 0 < lim.max_bytes < self._bytes():
                del self.msgs[min(self.msgs)]

    def _published(self, subject: str, payload: bytes, headers: Headers) -> PubAck | JetStreamError:
        """The store's answer to a publish, the model updated with it. The checks in the
        store's order (store/streams.py, as nats-server 2.15.1 answers: store/DESIGN.md):
        the size (headers + payload), a duplicate id, then with discard new the limits
        that refuse; stored, the limits that remove (per subject, then with discard old
        the oldest while over ``max_msgs`` or ``max_bytes``: a message bigger than
        ``max_bytes`` is acknowledged and gone), then the rollup."""
        lim = self.limits
        hdrs = dict(headers)
        msg_id, rollup = hdrs.get("Nats-Msg-Id"), hdrs.get("Nats-Rollup")
        hlen = len(keys.encode_headers(headers))
        if lim.max_msg_size >= 0 and hlen + len(payload) > lim.max_msg_size:
            return TOO_BIG
        original = self.dedupe.get(msg_id or "")
        if original is not None and original[1] + self.duplicate_window > self.clock.now:
            return PubAck("S", original[0], duplicate=True)
        size = keys.msg_bytes(len(subject), hlen, len(payload))
        if lim.discard_new:
            # At the per-subject limit the message replaces the subject's oldest (so the
            # stream does not grow), unless discard_new_per_subject refuses it; a rollup
            # passes that.
            of_subject = sorted(q for q, (subj, _) in self.msgs.items() if subj == subject)
            replaces = 0 < lim.mmps <= len(of_subject)
            if replaces and lim.dnps and rollup is None:
                return MAX_PER_SUBJECT
            if 0 < lim.max_msgs <= len(self.msgs) and not replaces:
                return MAX_MSGS
            if 0 < lim.max_bytes < self._bytes() + size and not (
                replaces and self._size(of_subject[0]) >= size
            ):
                return MAX_BYTES
        self.last += 1
        self._stored(self.last, subject, payload, hlen)
        if msg_id:
            self.dedupe[msg_id] = (self.last, self.clock.now)
        if lim.mmps > 0:
            self._remove_oldest_of(subject, lim.mmps)
        self._trim_oldest()
        if rollup == "sub":
            self._remove_oldest_of(subject, 1)
        elif rollup == "all":
            for s in [s for s in self.msgs if s < self.last]:
                del self.msgs[s]
        return PubAck("S", self.last)

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
        want = self._published(subject, payload, tuple(headers))
        try:
            got: PubAck | JetStreamError | None = self.store.publish(
                subject, payload, tuple(headers)
            )
        except JetStreamError as e:
            got = e
        assert got == want

    @rule(
        subject=st.sampled_from(SUBJECTS),
        limit=st.sampled_from(["max_bytes", "max_msg_size", "oldest"]),
        off=st.sampled_from([-1, 0, 1]),
    )
    def publish_at_a_limit(self, subject: str, limit: str, off: int) -> None:
        """A payload sized so that the message meets ``limit`` exactly, or misses it by a
        byte either way: what is left of ``max_bytes``, ``max_msg_size``, or the size of
        the subject's oldest message (the one it replaces with discard new)."""
        empty = keys.msg_bytes(len(subject), 0, 0)
        of_subject = [q for q, (subj, _) in self.msgs.items() if subj == subject]
        if limit == "max_bytes":
            n = self.limits.max_bytes - self._bytes() - empty
        elif limit == "max_msg_size":
            n = self.limits.max_msg_size
        else:
            n = self._size(min(of_subject)) - empty if of_subject else 0
        self.publish(subject, bytes(max(0, n + off)), None, None)

    @precondition(lambda self: self.last > 0)
    @rule()
    def batch_of_three(self) -> None:
        """Three publishes in one job: one no stream captures, two the limits apply to in
        turn (each answered on its own: a refused one does not fail the others)."""
        res = self.store.submit([Publish("s.a", b"1"), Publish("x.none"), Publish("s.b", b"2")])
        out = res.result(timeout=30)
        assert out[1] is None
        assert out[0] == self._published("s.a", b"1", ())
        assert out[2] == self._published("s.b", b"2", ())

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

    @rule(lim=limits())
    def update_limits(self, lim: Limits) -> None:
        """A stream update: the excess goes (two messages per slice) before it answers.
        With discard new a lower ``max_msgs`` or ``max_bytes`` removes nothing (appends are
        refused until the stream is under it again); a lower per-subject limit does."""
        self.limits = lim
        info = self.store.update_stream(self._config())
        if lim.mmps > 0:
            for subject in SUBJECTS:
                self._remove_oldest_of(subject, lim.mmps)
        self._trim_oldest()
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
        assert state.bytes == self._bytes()
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


@pytest.mark.timeout(120 + EXAMPLES)
def test_stream_against_model(tmp_path: Path) -> None:
    StreamModel.root = tmp_path
    run_state_machine_as_test(
        StreamModel,
        settings=settings(max_examples=max(150, EXAMPLES), stateful_step_count=25, deadline=None),
    )


@pytest.mark.timeout(120 + EXAMPLES)
def test_stream_with_time_against_model(tmp_path: Path) -> None:
    TimedStreamModel.root = tmp_path
    run_state_machine_as_test(
        TimedStreamModel,
        settings=settings(max_examples=max(150, EXAMPLES), stateful_step_count=40, deadline=None),
    )
