"""A ``last_per_subject`` consumer over more subjects than one batch may read.

Its creation reads the records of every subject its filters match (each subject's last
message is what it delivers of it) and so does a count of its num_pending during its first
pass (after a reopen); both go on over several batches when the records are many, so other
submissions do not wait for all of them. So does the creation of a ``last`` consumer with
wildcard filters whose last match is not among the stream's newest records. Sliced, the consumer is placed exactly as in one
transaction; appends and removals landing between the slices are counted; every count
equals what the consumer then delivers.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from store import (
    ConsumerInfo,
    CreateConsumer,
    DeleteMsg,
    DeleteStream,
    Delivery,
    GetConsumerInfo,
    JetStreamError,
    OpResult,
    PubAck,
    Publish,
    PullStatus,
    Store,
)
from store.counting import COUNT_AT_ONCE
from store.models import ConsumerConfig
from store.subjects import matches_any
from tests.store.conftest import Events, FakeClock

SLICE = 10  # remove_slice: 20 records a batch, COUNT_AT_ONCE at least per call
UNIQUE = 2 * COUNT_AT_ONCE  # s.u0 ... : more subject records than one call reads
FILTERS: list[tuple[str, ...]] = [(">",), ("s.*",), ("t.*", "s.a"), ("t.7",), ("*.none",)]


def _published() -> list[str]:
    """Unique subjects, with t.0 ... t.49 (several messages each) and s.a among them."""
    rng = random.Random(3)
    out = []
    for i in range(UNIQUE):
        out.append(f"s.u{i}")
        if i % 40 == 0:
            out.append(rng.choice(["s.a", f"t.{rng.randrange(50)}"]))
    return out


def _open(path: Path, events: Events | None = None, remove_slice: int = SLICE) -> Store:
    return Store.open(path, clock=FakeClock(), on_event=events, remove_slice=remove_slice)


def _fill(s: Store, subjects: Sequence[str]) -> None:
    s.create_stream({"name": "S", "subjects": ["s.>", "t.>"]})
    for start in range(0, len(subjects), 2000):
        s.submit([Publish(x, b"p") for x in subjects[start : start + 2000]]).result(timeout=30)


def _config(
    name: str, filters: tuple[str, ...], policy: str = "last_per_subject"
) -> ConsumerConfig:
    return ConsumerConfig.from_wire(
        {
            "durable_name": name,
            "ack_policy": "none",
            "deliver_policy": policy,
            "filter_subjects": list(filters),
        }
    )


def _drain(s: Store, events: Events, name: str) -> list[Delivery]:
    """Every message the consumer delivers now (one pull, ticks while something is due)."""
    events.take()
    s.pull("S", name, "inbox", batch=1_000_000, no_wait=True)
    got: list[Delivery] = []
    for _ in range(10_000):
        for e in events.take():
            if isinstance(e, Delivery):
                got.append(e)
            elif isinstance(e, PullStatus) and e.reply == "inbox":
                assert e.code == 404, e
                return got
        due = s.next_deadline()
        assert due is not None, "unanswered, and nothing due"
        s.tick().result(timeout=30)
    raise AssertionError("the pull never ended")


def _expected(stored: dict[int, str], filters: tuple[str, ...]) -> list[int]:
    """What a last_per_subject consumer created over ``stored`` delivers: each matching
    subject's last message, in stream order."""
    last: dict[str, int] = {}
    for q, subject in sorted(stored.items()):
        if matches_any(filters, subject):
            last[subject] = q
    return sorted(last.values())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", FILTERS)
def test_placed_in_slices_as_in_one_transaction(tmp_path: Path, filters: tuple[str, ...]) -> None:
    """Created over several commits (other jobs commit between), the consumer's num_pending
    and what it delivers equal the consumer created in one transaction, and brute force."""
    subjects = _published()
    stored = dict(enumerate(subjects, 1))
    events = Events()
    results = []
    for remove_slice in (SLICE, 100 * UNIQUE):
        with _open(tmp_path / str(remove_slice), events, remove_slice) as s:
            _fill(s, subjects)
            commits = s.metrics()["commits"]
            info = s.create_consumer("S", _config("c", filters))
            took = s.metrics()["commits"] - commits
            delivered = [d.msg.seq for d in _drain(s, events, "c")]
            results.append((info.num_pending, info.delivered.stream_seq, delivered))
            if remove_slice == SLICE and filters == (">",):
                assert took >= UNIQUE // COUNT_AT_ONCE
            else:
                assert took >= 1
    sliced, whole = results
    assert sliced == whole
    expected = _expected(stored, filters)
    assert sliced[2] == expected
    assert sliced[0] == len(expected)


class _Chain:
    """``ops`` submitted one after another, each when the one before it has committed (as a
    client waiting for each answer): they land between the slices of a long job."""

    def __init__(self, s: Store, ops: list[Any]) -> None:
        self.results: list[OpResult] = []
        self.finished = threading.Event()
        self._s = s
        self._ops = ops
        self._next(None)

    def _next(self, res: list[OpResult] | BaseException | None) -> None:
        if isinstance(res, list):
            self.results.extend(res)
        elif res is not None:
            raise res
        if len(self.results) == len(self._ops):
            self.finished.set()
        else:
            self._s.submit_then([self._ops[len(self.results)]], self._next)

    def wait(self) -> list[OpResult]:
        assert self.finished.wait(60)
        return self.results


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", FILTERS[:3])
@pytest.mark.parametrize("removals", [True, False])
def test_appends_and_removals_during_the_walk_are_counted(
    tmp_path: Path, filters: tuple[str, ...], removals: bool
) -> None:
    """Appends (new subjects and old ones) and deletions (of subjects' last messages on
    both sides of where the walk stands, and of superseded ones) land between the slices
    of the creation (and go on after it). Its num_pending equals what it then delivers; each subject it
    delivers from before the creation is delivered once, as its last message; every
    match stored after the creation began is delivered; a subject nothing touched is
    delivered as it would have been."""
    subjects = _published()
    stored = dict(enumerate(subjects, 1))
    cap = len(subjects)
    rng = random.Random(9)
    lasts = {x: q for q, x in stored.items()}
    gone = set(rng.sample(sorted(lasts.values()), 300)) | set(rng.sample(range(1, cap), 300))
    if not removals:  # (then the count goes on from the subjects found, not afresh)
        gone = set()
    new = [
        rng.choice([f"s.n{i}", "s.a", f"t.{i % 50}", f"s.u{rng.randrange(UNIQUE)}"])
        for i in range(300)
    ]
    ops: list[Any] = [DeleteMsg("S", q) for q in sorted(gone)] + [Publish(x, b"n") for x in new]
    rng.shuffle(ops)
    appended = [op.subject for op in ops if isinstance(op, Publish)]
    events = Events()
    with _open(tmp_path / "d", events) as s:
        _fill(s, subjects)
        create = s.submit([CreateConsumer("S", _config("c", filters))])
        chain = _Chain(s, ops)
        [info] = create.result(timeout=60)
        assert isinstance(info, ConsumerInfo)
        assert chain.results  # some landed during the walk
        assert all(r is True or isinstance(r, PubAck) for r in chain.wait())
        for q in gone:
            del stored[q]
        stored.update({cap + 1 + i: x for i, x in enumerate(appended)})
        pending = s.consumer_info("S", "c").num_pending
        delivered = _drain(s, events, "c")
        assert pending == len(delivered)
        seqs = [d.msg.seq for d in delivered]
        assert seqs == sorted(seqs)
        assert all(q in stored and matches_any(filters, stored[q]) for q in seqs)
        old = [q for q in seqs if q <= cap]
        newest = {x: q for q, x in sorted(stored.items()) if q <= cap}
        assert len({stored[q] for q in old}) == len(old)
        assert all(newest[stored[q]] == q for q in old)
        assert [q for q in seqs if q > cap] == [
            q for q in sorted(stored) if q > cap and matches_any(filters, stored[q])
        ]
        touched = {subjects[q - 1] for q in gone} | set(appended)
        untouched = [q for q in _expected(stored, filters) if stored[q] not in touched]
        assert untouched
        assert set(untouched) <= set(old)
        assert s.consumer_info("S", "c").num_pending == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", FILTERS[:3])
def test_first_pass_counted_in_slices_after_a_reopen(
    tmp_path: Path, filters: tuple[str, ...]
) -> None:
    """After a reopen the count goes over the subject records again, in slices, while a
    key-value stream (one message per subject) keeps being written: every append removes
    the message of its subject the first pass would deliver. The count finishes while the
    writes go on, and equals brute force and what the consumer delivers."""
    subjects = [f"s.u{i}" for i in range(UNIQUE)] + [f"t.{i}" for i in range(50)] + ["s.a"]
    events = Events()
    with _open(tmp_path / "d", events) as s:
        s.create_stream({"name": "S", "subjects": ["s.>", "t.>"], "max_msgs_per_subject": 1})
        for start in range(0, len(subjects), 2000):
            s.submit([Publish(x, b"p") for x in subjects[start : start + 2000]]).result(30)
        s.create_consumer("S", _config("c", filters))
        s.publish("s.after", b"p")  # after the first pass
    rng = random.Random(4)
    rewritten = rng.sample(subjects, 1000)
    with _open(tmp_path / "d", events) as s:
        commits = s.metrics()["commits"]
        count = s.submit([GetConsumerInfo("S", "c")])
        chain = _Chain(s, [Publish(x, b"v2") for x in rewritten])
        [info] = count.result(timeout=60)
        assert isinstance(info, ConsumerInfo)
        if filters != ("t.*", "s.a"):  # (51 subject records: counted at once)
            assert s.metrics()["commits"] - commits >= UNIQUE // (2 * SLICE)  # in slices
        assert not chain.finished.is_set()
        chain.wait()
        matching = [x for x in [*subjects, "s.after"] if matches_any(filters, x)]
        assert s.consumer_info("S", "c").num_pending == len(matching)
        delivered = _drain(s, events, "c")
        assert sorted(d.msg.subject for d in delivered) == sorted(matching)
        assert {d.msg.subject for d in delivered if d.msg.payload == b"v2"} == {
            x for x in rewritten if x in matching
        }


def _error(f: Future[list[OpResult]]) -> int:
    [res] = f.result(timeout=60)
    assert isinstance(res, JetStreamError), res
    return res.err_code


@pytest.mark.timeout(120)
def test_a_consumer_being_placed_does_not_exist_yet(tmp_path: Path) -> None:
    """While the walk goes on the consumer is not there (its info: not found); deleting
    the stream meanwhile ends the creation with stream not found."""
    with _open(tmp_path / "d") as s:
        _fill(s, _published())
        create = s.submit([CreateConsumer("S", _config("c", (">",)))])
        assert _error(s.submit([GetConsumerInfo("S", "c")])) == 10014
        [made] = create.result(timeout=60)
        assert isinstance(made, ConsumerInfo)
        assert s.consumer_names("S") == ["c"]
        create = s.submit([CreateConsumer("S", _config("d", ("s.*",)))])
        assert s.submit([DeleteStream("S")]).result(timeout=60) == [True]
        assert _error(create) == 10059


@pytest.mark.timeout(120)
def test_closing_finishes_the_walk(tmp_path: Path) -> None:
    """A creation still walking when the store closes is finished by the close, and the
    consumer is there after a reopen, placed as usual."""
    subjects = _published()
    s = _open(tmp_path / "d")
    _fill(s, subjects)
    create = s.submit([CreateConsumer("S", _config("c", (">",)))])
    s.close()
    [info] = create.result(timeout=60)
    assert isinstance(info, ConsumerInfo)
    expected = _expected(dict(enumerate(subjects, 1)), (">",))
    assert info.num_pending == len(expected)
    with _open(tmp_path / "d") as s:
        assert s.consumer_info("S", "c").num_pending == len(expected)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", [("t.*",), ("t.*", "s.a"), ("*.none",), ("s.*",)])
def test_deliver_last_with_wildcard_filters(tmp_path: Path, filters: tuple[str, ...]) -> None:
    """deliver_policy ``last``: the last match, found among the newest records or by the
    walk of the subject records in slices, as in one transaction; appends and removals
    during the walk are counted (num_pending equals what it then delivers)."""
    subjects = _published()
    stored = dict(enumerate(subjects, 1))
    matching = [q for q, x in stored.items() if matches_any(filters, x)]
    events = Events()
    for remove_slice in (SLICE, 100 * UNIQUE):
        with _open(tmp_path / str(remove_slice), events, remove_slice) as s:
            _fill(s, subjects)
            commits = s.metrics()["commits"]
            made = s.create_consumer("S", _config("c", filters, "last"))
            if remove_slice == SLICE and filters == ("*.none",):  # no match: the walk
                assert s.metrics()["commits"] - commits >= UNIQUE // (2 * SLICE)
            seqs = [d.msg.seq for d in _drain(s, events, "c")]
            assert seqs == matching[-1:]
            assert made.num_pending == len(seqs)
            assert made.delivered.stream_seq == (matching[-1] - 1 if matching else len(stored))
    rng = random.Random(2)
    ops: list[Any] = [DeleteMsg("S", q) for q in rng.sample(matching, min(5, len(matching)))]
    ops += [Publish(rng.choice(["t.1", "s.a", "s.b", "x.y"]), b"n") for _ in range(100)]
    rng.shuffle(ops)
    with _open(tmp_path / "race", events) as s:
        _fill(s, subjects)
        create = s.submit([CreateConsumer("S", _config("c", filters, "last"))])
        chain = _Chain(s, ops)
        [info] = create.result(timeout=60)
        assert isinstance(info, ConsumerInfo)
        chain.wait()
        pending = s.consumer_info("S", "c").num_pending
        msgs = [d.msg for d in _drain(s, events, "c")]
        assert pending == len(msgs)
        assert all(matches_any(filters, m.subject) for m in msgs)
        assert len([m for m in msgs if m.seq <= len(subjects)]) <= 1
        assert [m.seq for m in msgs if m.seq > len(subjects)] == [
            q
            for q in range(len(subjects) + 1, s.stream_state("S").last_seq + 1)
            if matches_any(filters, s.get_msg("S", q).subject)
        ]
