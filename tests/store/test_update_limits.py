"""A stream update that lowers its limits removes the excess in slices (``remove_slice``
messages per transaction), other submissions committing between them; the update's reply
(the stream info) comes with the last slice. Meanwhile an append to the stream removes at
most one message per limit, so it does not do the whole removal at once either. A crash
or a close between slices: the next open goes on (``meta`` trim record, store.slices).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from store import (
    CreateStream,
    DeleteStream,
    JetStreamError,
    Op,
    PubAck,
    Publish,
    Store,
    StreamConfig,
    StreamInfo,
    Tick,
    keys,
    subjrecs,
)
from store.env import Env
from tests.store.conftest import SEC, FakeClock
from tests.store.test_long_ops import (
    _killed_between_slices,
    _meta_keys,
    _sid,
    _stored,
    close_during,
)

SLICE = 50
N = 2_000
SUBJECTS = tuple(f"s.{i:03}" for i in range(100))


def _fill(s: Store, n: int, clock: FakeClock | None = None) -> None:
    for start in range(0, n, 500):
        ops = [Publish(SUBJECTS[i % len(SUBJECTS)], b"p" * 20) for i in range(start, start + 500)]
        assert all(type(r) is PubAck for r in s.submit(ops).result(timeout=30))
        if clock is not None:
            clock.advance(SEC)


def _update(**limits: Any) -> CreateStream:
    return CreateStream(StreamConfig.from_wire({"name": "S", "subjects": ["s.>"], **limits}), True)


def _contents(s: Store) -> list[tuple[int, str]]:
    return [(m.seq, m.subject) for m in s.iter_msgs("S")]


@pytest.mark.parametrize(
    ("limits", "left"),
    [
        ({"max_msgs": 100}, 100),
        ({"max_bytes": 100 * 60}, None),
        ({"max_msgs_per_subject": 3}, 300),
        ({"max_msgs_per_subject": 4, "max_msgs": 150}, 150),
        ({"max_age": 2 * SEC}, 500),  # filled at 0, 1, 2, 3 s of the fake clock, now 4 s
        ({"max_msgs_per_subject": 1, "max_bytes": 10_000, "max_age": 3 * SEC}, None),
    ],
)
def test_lowered_limits_in_slices_equal_one_transaction(
    tmp_path: Path, limits: dict[str, Any], left: int | None
) -> None:
    """The same update sliced (alone in its job) and whole (with another op in its job)."""
    outcomes = []
    for sliced in (True, False):
        clock = FakeClock()
        with Store.open(
            tmp_path / f"d{sliced}", sync="batch", clock=clock, remove_slice=SLICE
        ) as s:
            s.create_stream({"name": "S", "subjects": ["s.>"]})
            s.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
            _fill(s, N, clock)
            commits = s.metrics()["commits"]
            ops: list[Op] = [_update(**limits)] if sliced else [_update(**limits), Publish("x")]
            info = s.submit(ops).result(timeout=60)[0]
            assert type(info) is StreamInfo
            assert (s.metrics()["commits"] - commits > 2) == sliced
            state = s.stream_state("S")
            assert info.state == state  # the reply comes when the excess is gone
            if left is not None:
                assert state.messages == left
            per_subject: dict[str, int] = {}
            for _, subj in _contents(s):
                per_subject[subj] = per_subject.get(subj, 0) + 1
            assert max(per_subject.values()) <= limits.get("max_msgs_per_subject", N)
            assert state.bytes <= limits.get("max_bytes", N * 100)
            c = s.consumer_info("S", "c")
            outcomes.append((_contents(s), state, c.num_pending, c.ack_floor))
            assert _meta_keys(s.env, keys.META_TRIM_PREFIX) == []
    assert outcomes[0] == outcomes[1]


def test_appends_meanwhile_remove_one_message_per_limit(tmp_path: Path) -> None:
    """An append committed while the excess is removed in slices does not remove it all
    (it would stall everyone as long); at the end every limit holds, the subjects
    appended to meanwhile included."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        done_order: list[str] = []
        seen: list[int] = []
        lock = threading.Lock()

        def mark(name: str) -> Any:
            def cb(_: object) -> None:
                with lock:
                    done_order.append(name)
                    if name == "publish":
                        seen.append(_stored(s.env, sid))  # as committed

            return cb

        update = s.submit([_update(max_msgs_per_subject=5, max_msgs=200)])
        update.add_done_callback(mark("update"))
        appends = []
        for subj in ("s.000", "s.099", "s.050"):
            fut = s.submit([Publish(subj, b"new")])
            fut.add_done_callback(mark("publish"))
            appends.append(fut)
        [info] = update.result(timeout=60)
        assert [f.result(timeout=30)[0] for f in appends] == [
            PubAck("S", N + 1),
            PubAck("S", N + 2),
            PubAck("S", N + 3),
        ]
        assert done_order[-1] == "update"  # the appends did not wait for it
        assert min(seen) > 500  # each one removed no more than a message per limit
        assert type(info) is StreamInfo
        assert info.state.messages == 200
        per_subject: dict[str, int] = {}
        for _, subj in _contents(s):
            per_subject[subj] = per_subject.get(subj, 0) + 1
        assert max(per_subject.values()) <= 5
        assert _contents(s)[-3:] == [(N + 1, "s.000"), (N + 2, "s.099"), (N + 3, "s.050")]


def test_a_stream_deleted_while_its_excess_goes_answers_the_update_not_found(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        update = s.submit([_update(max_msgs=10)])
        deletion = s.submit([DeleteStream("S")])
        assert deletion.result(timeout=30) == [True]
        [res] = update.result(timeout=30)
        assert isinstance(res, JetStreamError)
        assert res.err_code == 10059
        assert _meta_keys(s.env, keys.trim_key(sid)) == []


def test_closing_leaves_the_excess_to_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "d"
    update, sid = close_during(path, _update(max_msgs=10), keys.trim_key)
    [info] = update.result(timeout=1)
    assert type(info) is StreamInfo
    assert info.config.max_msgs == 10
    assert info.state.messages > 10  # stopped between slices
    with Store.open(path) as s:
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]
        state = s.stream_state("S")
        assert (state.messages, state.first_seq, state.last_seq) == (10, N - 9, N)
        assert _meta_keys(s.env, keys.trim_key(sid)) == []


@pytest.mark.timeout(120)
def test_an_update_cut_short_by_a_crash_goes_on_at_the_next_open(tmp_path: Path) -> None:
    """tests/store/sweep_child.py: 20,000 messages on d.0 … d.49, updated to
    max_msgs_per_subject 2 and max_msgs 50 with slices of 5, killed between slices."""
    path = tmp_path / "d"
    sid = _killed_between_slices(path, "trim")
    env = Env(path, sync=True, readonly=True)
    try:
        assert _meta_keys(env, keys.trim_key(sid)) == [keys.trim_key(sid)]
        assert _stored(env, sid) > 50  # killed mid-removal
    finally:
        env.close()
    with Store.open(path) as s:
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]
        assert [m.seq for m in s.iter_msgs("D")] == list(range(20_000 - 49, 20_001))
        assert _meta_keys(s.env, keys.trim_key(sid)) == []


@pytest.mark.parametrize(
    "limits",
    [
        {"description": "only that"},
        {"max_msgs_per_subject": 50},  # raised from 20
        {"max_msgs_per_subject": 20, "max_msgs": N},  # at the limit: nothing over
    ],
)
def test_an_update_that_tightens_nothing_commits_once(
    tmp_path: Path, limits: dict[str, Any]
) -> None:
    """No walk of the stream unless the per-subject limit went down."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 20})
        _fill(s, N)
        before = _contents(s)
        commits = s.metrics()["commits"]
        [info] = s.submit([_update(**limits)]).result(timeout=30)
        assert type(info) is StreamInfo
        assert s.metrics()["commits"] - commits == 1
        assert _contents(s) == before
        assert _meta_keys(s.env, keys.META_TRIM_PREFIX) == []


@pytest.mark.parametrize("second", [3, 50])
def test_a_second_update_while_the_first_ones_excess_goes(tmp_path: Path, second: int) -> None:
    """10 subjects of 200 messages; an update to max_msgs_per_subject 10, and before its
    excess is gone one to ``second``: the second supersedes the first (which answers as
    it stands) and walks the whole stream, so every subject ends within ``second`` keeping
    its newest — also those the first had not reached when the limit went up."""
    subjects = [f"s.{i}" for i in range(10)]
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        for start in range(0, N, 500):
            s.submit([Publish(subjects[i % 10], b"p") for i in range(start, start + 500)]).result(
                timeout=30
            )
        first = s.submit([_update(max_msgs_per_subject=10)])
        second_done = s.submit([_update(max_msgs_per_subject=second)])
        [a] = first.result(timeout=60)
        [b] = second_done.result(timeout=60)
        assert type(a) is StreamInfo
        assert type(b) is StreamInfo
        assert b.config.max_msgs_per_subject == second
        assert b.state == s.stream_state("S")
        by_subject: dict[str, list[int]] = {}
        for seq, subj in _contents(s):
            by_subject.setdefault(subj, []).append(seq)
        for subj, seqs in by_subject.items():
            newest = list(range(N - 10 + subjects.index(subj) + 1, 0, -10))
            assert len(seqs) <= second
            assert seqs == sorted(newest[: len(seqs)])  # its newest, nothing in between
        if second == 3:
            assert b.state.messages == 30
        assert _meta_keys(s.env, keys.META_TRIM_PREFIX) == []
        # Nothing in flight any more: an append removes all of its subject's excess.
        s.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 1})
        assert s.publish("s.0") == PubAck("S", N + 1)
        assert [q for q, subj in _contents(s) if subj == "s.0"] == [N + 1]


def test_the_removal_goes_on_after_an_aborted_batch(tmp_path: Path) -> None:
    """A batch aborted meanwhile (an append too big for the map: MapFull, the engine
    reloads from LMDB, the map grows, the batch runs again) does not make the removal in
    flight look superseded: it is the stream's second one, and its number survives the
    reload."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=5, map_size=1 << 21) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        s.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs": N - 20})  # the first
        update = s.submit([_update(max_msgs=100)])
        s.submit([Tick()]).result(timeout=30)  # commits before the update's next slice
        assert _meta_keys(s.env, keys.trim_key(sid))  # its first slice committed
        assert not update.done()
        size = s.env.map_size
        [ack] = s.submit([Publish("s.big", bytes(4 << 20))]).result(timeout=30)
        assert ack == PubAck("S", N + 1)
        assert s.env.map_size > size
        [info] = update.result(timeout=60)
        assert type(info) is StreamInfo
        assert info.state.messages == 100
        assert _contents(s)[-1] == (N + 1, "s.big")
        assert _meta_keys(s.env, keys.META_TRIM_PREFIX) == []


@pytest.mark.timeout(60)
def test_the_subject_record_cache_stays_bounded_when_only_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update to max_msgs_per_subject 1 over subjects of one message each reads every
    subject's record and changes none: the writer's cache of them is still dropped when
    it outgrows MAX_CACHED_COUNTS (it grew to every subject: 1,000,000 lists on a big
    stream, and Python's full collections with them to 0.1 s)."""
    monkeypatch.setattr(subjrecs, "MAX_CACHED_COUNTS", 100)
    with Store.open(tmp_path / "d", sync="batch", remove_slice=50) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.submit([Publish(f"s.{i}", b"p") for i in range(2000)]).result(timeout=30)
        info = s.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 1})
        assert info.state.messages == 2000
        assert len(s._engine.streams["S"].subj._subj) <= 100 + 2 * 50
