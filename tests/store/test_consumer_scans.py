"""How a consumer finds and counts its messages without a walk of the whole stream in one
batch.

A consumer with wildcard filters looks for its next message in bounded work per batch:
through the index of the few subjects its filters match, or by a walk of the stream that
goes on in the next batch (``Tick``) when it is long, so other submissions do not wait for
a walk of the whole stream. A no_wait request is answered when the walk ends. num_pending
counted afresh (after a reopen) takes the cheapest way its filters allow and equals a
count by brute force."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from store import (
    DeleteMsg,
    Delivery,
    Event,
    GetConsumerInfo,
    PubAck,
    Publish,
    PullStatus,
    Store,
)
from store.counting import COUNT_AT_ONCE
from store.engine import WALK_PER_REMOVAL
from store.models import format_time
from store.nextmsg import SHORT_WALK, SUBJECT_RECORDS_READ
from store.subjects import subject_matches
from tests.store.conftest import SEC, T0, Events, FakeClock

SLICE = 100  # remove_slice: walks of 2 x 100 records per batch, 100 at least per search
WALK_MIN = min(SHORT_WALK, SLICE)  # walked before the subject index is tried
N = 8 * SUBJECT_RECORDS_READ  # unique subjects: too many to go through the subject index


def _open(path: Path, events: Events, remove_slice: int = SLICE) -> Store:
    s = Store.open(path, clock=FakeClock(), on_event=events, remove_slice=remove_slice)
    s.create_stream({"name": "S", "subjects": ["s.>", "x.>"]})
    for start in range(0, N, 1000):
        ops = [Publish(f"s.u{i}", b"p") for i in range(start, min(N, start + 1000))]
        assert all(type(r) is PubAck for r in s.submit(ops).result(timeout=30))
    return s


def _pull_until_answered(s: Store, events: Events, filter_: str) -> tuple[list[Event], int]:
    """A no_wait pull of one on a new consumer with ``filter_``: its events and the ticks
    it took (ticking whenever the store says something is due)."""
    s.create_consumer(
        "S", {"durable_name": "c", "ack_policy": "explicit", "filter_subject": filter_}
    )
    events.take()
    s.pull("S", "c", "inbox", batch=1, no_wait=True)
    ticks = 0
    got = [e for e in events.take() if getattr(e, "reply", None) == "inbox"]
    while not got:
        due = s.next_deadline()
        assert due is not None, "unanswered, and nothing due"
        assert due <= FakeClock()()
        s.tick().result(timeout=30)
        ticks += 1
        assert ticks < 100
        got = [e for e in events.take() if getattr(e, "reply", None) == "inbox"]
    return got, ticks


@pytest.mark.timeout(60)
@pytest.mark.parametrize("match", [True, False])
def test_a_long_walk_goes_on_in_later_batches(tmp_path: Path, match: bool) -> None:
    """``*.z`` over 8,192 subjects: no subject index; the walk to the end takes several
    batches, and the answer (the match at the end, or 404) comes when it ends."""
    events = Events()
    with _open(tmp_path / "d", events) as s:
        if match:
            assert s.publish("s.z", b"end") == PubAck("S", N + 1)
        got, ticks = _pull_until_answered(s, events, "*.z")
        # A batch walks its budget and WALK_MIN more per search beyond it (a tick makes two).
        assert ticks >= (N - WALK_MIN) // (WALK_PER_REMOVAL * SLICE + 2 * WALK_MIN)
        if match:
            assert [(type(e), e.msg.seq) for e in got if isinstance(e, Delivery)] == [
                (Delivery, N + 1)
            ]
        else:
            assert [(e.code, e.description) for e in got if isinstance(e, PullStatus)] == [
                (404, "No Messages")
            ]
        assert s.consumer_info("S", "c").num_pending == 0
        # The walk is remembered: a second pull answers at once.
        s.pull("S", "c", "inbox2", batch=1, no_wait=True)
        assert [getattr(e, "code", None) for e in events.take()] == [404]


@pytest.mark.timeout(60)
def test_without_bounds_the_walk_ends_in_one_batch(tmp_path: Path) -> None:
    events = Events()
    with _open(tmp_path / "d", events, remove_slice=10 * N) as s:
        s.publish("s.z", b"end")
        got, ticks = _pull_until_answered(s, events, "*.z")
        assert ticks == 0
        assert [e.msg.seq for e in got if isinstance(e, Delivery)] == [N + 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("filter_", "subject"), [("x.*", "x.1"), ("x.>", "x.1.2"), ("x.*", None)])
def test_few_matching_subjects_are_found_through_their_index(
    tmp_path: Path, filter_: str, subject: str | None
) -> None:
    """Past WALK_MIN records, the subjects the filter matches (from the subject records)
    have their next message looked up in the index: answered in the pull's own batch,
    where a walk of the 8,192 records before it would take several."""
    events = Events()
    with _open(tmp_path / "d", events) as s:
        if subject is not None:
            s.publish(subject, b"end")
        got, ticks = _pull_until_answered(s, events, filter_)
        assert ticks == 0
        if subject is not None:
            assert [e.msg.subject for e in got if isinstance(e, Delivery)] == [subject]
        else:
            assert [getattr(e, "code", None) for e in got] == [404]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gaps", ["none", "head", "inside"])
@pytest.mark.parametrize("filter_", [None, "s.*", "s.a"])
def test_num_pending_counted_afresh_equals_brute_force(
    tmp_path: Path, filter_: str | None, gaps: str
) -> None:
    """Consumers starting all along a stream of 300 messages over 21 subjects, reopened
    (nothing cached): unfiltered from the state without gaps or by the keys on the shorter
    side; ``s.*`` by the records after the start when fewer than the subjects, else by
    the subject records."""
    rng = random.Random(f"{filter_}{gaps}")
    subjects = [f"s.{c}" for c in "abcdefghijklmnopqrst"] + ["t.z"]
    published = [rng.choice(subjects) for _ in range(300)]
    gone = {"none": set(), "head": set(range(1, 11)), "inside": set(rng.sample(range(1, 301), 60))}[
        gaps
    ]
    starts = [1, 3, 11, 50, 150, 250, 285, 290, 299, 300, 301]
    path = tmp_path / "d"
    with Store.open(path, clock=FakeClock()) as s:
        s.create_stream({"name": "S", "subjects": ["s.>", "t.>"]})
        s.submit([Publish(x, b"p") for x in published]).result(timeout=30)
        for q in sorted(gone):
            s.delete_msg("S", q)
        for i, start in enumerate(starts):
            cfg: dict[str, object] = {
                "durable_name": f"c{i}",
                "ack_policy": "explicit",
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": start,
            }
            if filter_ is not None:
                cfg["filter_subject"] = filter_
            s.create_consumer("S", cfg)
    with Store.open(path, clock=FakeClock()) as s:
        for i, start in enumerate(starts):
            want = sum(
                1
                for q in range(start, 301)
                if q not in gone and (filter_ is None or subject_matches(filter_, published[q - 1]))
            )
            assert s.consumer_info("S", f"c{i}").num_pending == want, start


@pytest.mark.timeout(60)
def test_by_start_time_finds_the_first_message_at_or_after_by_binary_search(
    tmp_path: Path,
) -> None:
    """deliver_policy by_start_time starts at the first stored message stored at or after
    the time (seeks, no walk): every start time against brute force, with gaps and runs
    of messages sharing a time."""
    rng = random.Random(3)
    clock = FakeClock()
    stored: dict[int, int] = {}  # seq -> time
    with Store.open(tmp_path / "d", clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        for seq in range(1, 201):
            if rng.random() < 0.7:
                clock.advance(rng.choice([1, 5, 1000]) * SEC)
            assert s.publish("s.a", b"") == PubAck("S", seq)
            stored[seq] = clock.now
        for q in rng.sample(range(1, 201), 50):
            s.delete_msg("S", q)
            del stored[q]
        times = sorted({*stored.values(), clock.now + SEC, T0 - SEC})
        for i, t in enumerate([*times, *(t + 1 for t in times)]):
            info = s.create_consumer(
                "S",
                {
                    "durable_name": f"c{i}",
                    "ack_policy": "explicit",
                    "deliver_policy": "by_start_time",
                    "opt_start_time": format_time(t),
                },
            )
            first = min((q for q, qt in stored.items() if qt >= t), default=201)
            assert info.num_pending == sum(1 for q in stored if q >= first), t


# -- num_pending counted in slices -------------------------------------------------------------

BIG = 3 * COUNT_AT_ONCE  # messages: a count from the middle reads more than one call may


def _big_stream(path: Path, events: Events | None = None) -> tuple[list[str], set[int]]:
    """Stream S of BIG messages, every other on s.a and the rest over 300 subjects, 200
    deleted here and there (gaps on both sides of the middle), and consumers from the
    middle: ``all`` (no filter), ``lit`` (s.a), ``wild`` (s.*). Closed: the next open
    counts their num_pending afresh. The subjects published, and the seqs deleted."""
    rng = random.Random(11)
    published = ["s.a" if i % 2 == 0 else f"s.b{rng.randrange(300)}" for i in range(BIG)]
    gone = set(rng.sample(range(2, BIG), 200))
    with Store.open(path, clock=FakeClock(), on_event=events) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        for start in range(0, BIG, 2000):
            s.submit([Publish(x, b"p") for x in published[start : start + 2000]]).result(30)
        for q in sorted(gone):
            s.delete_msg("S", q)
        for name, filter_ in (("all", None), ("lit", "s.a"), ("wild", "s.*")):
            cfg: dict[str, object] = {
                "durable_name": name,
                "ack_policy": "explicit",
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": BIG // 2,
            }
            if filter_:
                cfg["filter_subject"] = filter_
            s.create_consumer("S", cfg)
    return published, gone


def _brute_pending(published: list[str], gone: set[int], name: str, after: int) -> int:
    return sum(
        1
        for q in range(after + 1, len(published) + 1)
        if q not in gone and (name != "lit" or published[q - 1] == "s.a")
    )


@pytest.mark.timeout(120)
def test_a_long_count_of_num_pending_answers_with_its_last_slice(tmp_path: Path) -> None:
    """After a reopen, consumer info of consumers halfway into 12,288 messages with gaps:
    each count reads more than COUNT_AT_ONCE records, so it goes on over several commits
    (other jobs commit between), and the info equals brute force."""
    published, gone = _big_stream(tmp_path / "d")
    with Store.open(tmp_path / "d", clock=FakeClock(), remove_slice=10) as s:
        for name in ("all", "lit", "wild"):
            commits = s.metrics()["commits"]
            info = s.consumer_info("S", name)
            assert s.metrics()["commits"] - commits >= 2, name
            assert info.num_pending == _brute_pending(published, gone, name, BIG // 2 - 1)


@pytest.mark.timeout(120)
def test_deliveries_wait_for_the_count(tmp_path: Path) -> None:
    """A pull after the reopen gets its message once the count is done (ticks), with the
    right num_pending in it."""
    events = Events()
    published, gone = _big_stream(tmp_path / "d")
    with Store.open(tmp_path / "d", clock=FakeClock(), on_event=events, remove_slice=10) as s:
        for name in ("all", "lit", "wild"):
            events.take()
            s.pull("S", name, "inbox", batch=1, no_wait=True)
            assert not events.take()  # counting: nothing goes out yet
            ticks = 0
            got: list[Event] = []
            while not got:
                due = s.next_deadline()
                assert due is not None
                assert due <= FakeClock()()
                s.tick().result(timeout=30)
                ticks += 1
                got = [e for e in events.take() if getattr(e, "reply", None) == "inbox"]
            [d] = got
            assert isinstance(d, Delivery)
            assert d.num_pending == _brute_pending(published, gone, name, d.msg.seq)


@pytest.mark.timeout(120)
def test_removals_while_counting_are_counted(tmp_path: Path) -> None:
    """Deletions land between the count's slices, on both sides of where it stands; the
    count kept up to date afterwards still equals brute force."""
    published, gone = _big_stream(tmp_path / "d")
    rng = random.Random(5)
    more = rng.sample([q for q in range(BIG // 2, BIG) if q not in gone], 300)
    with Store.open(tmp_path / "d", clock=FakeClock(), remove_slice=10) as s:
        counts = [s.submit([GetConsumerInfo("S", name)]) for name in ("all", "lit", "wild")]
        deletions = [s.submit([DeleteMsg("S", q)]) for q in more]
        for f in [*counts, *deletions]:
            f.result(timeout=60)
        gone.update(more)
        for name in ("all", "lit", "wild"):
            info = s.consumer_info("S", name)
            assert info.num_pending == _brute_pending(published, gone, name, BIG // 2 - 1)


@pytest.mark.timeout(60)
def test_a_count_from_the_start_reads_a_bounded_number_of_subject_records(
    tmp_path: Path,
) -> None:
    """From the stream's first message a wildcard consumer's count would add up its
    subjects' records; over more records than the budget (here ``*.z``, whose empty
    literal prefix reads every record, matching none of 300) it counts in slices too."""
    with Store.open(tmp_path / "d", clock=FakeClock(), remove_slice=10) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.submit([Publish(f"s.u{i}", b"p") for i in range(300)]).result(timeout=30)
        commits = s.metrics()["commits"]
        info = s.create_consumer("S", {"durable_name": "z", "filter_subject": "*.z"})
        assert info.num_pending == 0
        assert s.metrics()["commits"] - commits >= 2
