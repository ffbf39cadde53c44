"""Long operations run in slices: a purge, a stream deletion and max_age expiry of many
messages commit a slice per transaction (``remove_slice``) and other submissions commit
between the slices instead of waiting behind the whole operation. Each one a crash or a
close cuts short goes on when the store opens again (``Store.resumed``). (Lowered limits
of a stream update: test_update_limits.py.)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from store import (
    DeleteConsumer,
    DeleteStream,
    Op,
    OpResult,
    PubAck,
    Publish,
    Pull,
    PurgeResult,
    PurgeStream,
    Store,
    Tick,
    keys,
)
from store.env import Env
from store.slices import SWEEP_KEYS_PER_MSG
from tests.store.conftest import SEC, FakeClock, start_child
from tests.store.sweep_child import N as SWEPT_N

SLICE = 100
EXPLICIT = {"ack_policy": "explicit"}
N = 2_000


def _fill(s: Store, n: int, subjects: tuple[str, ...] = ("s.a", "s.b")) -> None:
    for start in range(0, n, 500):
        ops = [Publish(subjects[i % len(subjects)], b"p") for i in range(start, start + 500)]
        assert all(type(r) is PubAck for r in s.submit(ops).result(timeout=30))


class Order:
    """The order in which jobs complete (their callbacks run on the writer thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[str] = []

    def mark(self, name: str) -> Callable[[Future[list[OpResult]]], None]:
        def cb(_: Future[list[OpResult]]) -> None:
            with self.lock:
                self.done.append(name)

        return cb

    def submit(self, s: Store, name: str, ops: list[Op]) -> Future[list[OpResult]]:
        """``s.submit(ops)``, its completion recorded as ``name``."""
        fut = s.submit(ops)
        fut.add_done_callback(self.mark(name))
        return fut


def _sid(s: Store, name: str) -> int:
    with s.env.read() as txn:
        raw = txn.get(name.encode(), db=s.env.dbs[keys.DB_STREAMS])
        return int(keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)[0])


def _keys_under(env: Env, sid: int) -> int:
    n = 0
    with env.read() as txn:
        for db in (keys.DB_MSGS, keys.DB_SUBJECTS, keys.DB_SUBJCOUNT, keys.DB_DEDUPE):
            cur = txn.cursor(db=env.dbs[db])
            if cur.set_range(keys.sid_prefix(sid)):
                for k in cur.iternext(values=False):
                    if bytes(k)[:8] != keys.sid_prefix(sid):
                        break
                    n += 1
    return n


def _stored(env: Env, sid: int) -> int:
    """Messages of stream ``sid`` as committed (its state record)."""
    with env.read() as txn:
        raw = txn.get(keys.u64(sid), db=env.dbs[keys.DB_SSTATE])
        return keys.unpack_stream_state(bytes(raw))[2]


def test_a_purge_runs_in_slices_with_other_jobs_committing_between(tmp_path: Path) -> None:
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
        _fill(s, N)
        s.submit([Pull("S", "c", "inbox", batch=10)]).result(timeout=30)
        assert s.consumer_info("S", "c").num_ack_pending == 10
        commits = s.metrics()["commits"]
        order = Order()
        purge = order.submit(s, "purge", [PurgeStream("S")])
        publish = order.submit(s, "publish", [Publish("s.a", b"new")])
        res = purge.result(timeout=60)
        assert publish.result(timeout=30)[0] == PubAck("S", N + 1)
        assert order.done == ["publish", "purge"]  # it did not wait for the whole purge
        assert res == [PurgeResult(N)]  # the purge's bound was fixed when it began
        assert s.metrics()["commits"] - commits >= N // SLICE
        state = s.stream_state("S")
        assert (state.messages, state.first_seq, state.last_seq) == (1, N + 1, N + 1)
        info = s.consumer_info("S", "c")
        assert info.num_ack_pending == 0
        assert info.ack_floor.stream_seq == N
        assert info.num_pending == 1


class SubmitInsideBatch(FakeClock):
    """A clock that, once armed, submits a job from inside the ``nth`` batch applied after
    that: the engine reads the clock on the writer thread as it begins applying a batch,
    so the job is queued while that batch runs, every time, with no sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.store: Store | None = None
        self.ops: list[Op] = []
        self.nth = 0
        self.job: Future[list[OpResult]] | None = None
        self.stored_at_submit = -1
        self.stored_at_done = -1
        self.sid = 0

    def __call__(self) -> int:
        if self.nth and threading.current_thread().name == "jetmq-store-writer":
            self.nth -= 1
            if not self.nth:
                assert self.store is not None
                self.stored_at_submit = _stored(self.store.env, self.sid)
                self.job = self.store.submit(self.ops)
                self.job.add_done_callback(self._done)
        return self.now

    def _done(self, _: Future[list[OpResult]]) -> None:
        assert self.store is not None
        self.stored_at_done = _stored(self.store.env, self.sid)


@pytest.mark.timeout(60)
def test_a_job_submitted_during_a_slice_waits_for_that_slice_only(tmp_path: Path) -> None:
    """It commits in a batch of its own before the next slice (joining the next slice's
    batch, it would wait for that whole slice too)."""
    n = 5 * SLICE
    clock = SubmitInsideBatch()
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE, clock=clock) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.create_stream({"name": "T", "subjects": ["t.>"]})
        _fill(s, n)
        clock.store, clock.sid, clock.ops = s, _sid(s, "S"), [Publish("t.x", b"y")]
        clock.nth = 2  # the purge's first slice, then inside its second
        purge = s.submit([PurgeStream("S")])
        assert purge.result(timeout=30) == [PurgeResult(n)]
        assert clock.job is not None
        assert clock.job.result(timeout=30)[0] == PubAck("T", 1)
    # Queued while the second slice ran: committed right after it, before the third.
    assert clock.stored_at_submit == n - SLICE
    assert clock.stored_at_done == n - 2 * SLICE


@pytest.mark.parametrize(
    ("purge", "left"),
    [
        (PurgeStream("S", filter="s.a"), N // 2),
        (PurgeStream("S", filter="s.*", keep=7), 7),
        (PurgeStream("S", filter="*.b"), N // 2),
        (PurgeStream("S", filter="t.*"), N),  # matches nothing: walked in several slices
        (PurgeStream("S", seq=N // 2 + 1), N // 2),
        (PurgeStream("S", seq=N + 50), 0),
    ],
)
def test_each_kind_of_purge_in_slices_equals_one_transaction(
    tmp_path: Path, purge: PurgeStream, left: int
) -> None:
    """The same purge sliced (alone in its job) and whole (with another op in its job)."""
    states = []
    for sliced in (True, False):
        with Store.open(
            tmp_path / f"d{sliced}", sync="batch", clock=FakeClock(), remove_slice=SLICE
        ) as s:
            s.create_stream({"name": "S", "subjects": ["s.>"]})
            _fill(s, N)
            commits = s.metrics()["commits"]
            ops: list[Op] = [purge] if sliced else [purge, Publish("x.none")]
            res = s.submit(ops).result(timeout=60)[0]
            assert res == PurgeResult(N - left)
            assert (s.metrics()["commits"] - commits > 1) == sliced
            state = s.stream_state("S")
            assert state.messages == left
            msgs = [(m.seq, m.subject) for m in s.iter_msgs("S")]
            states.append((state, msgs))
    assert states[0] == states[1]
    if purge.seq == N + 50:  # purged past the end: the stream moved on
        assert (states[0][0].first_seq, states[0][0].last_seq) == (N + 50, N + 49)


@pytest.mark.parametrize("keep", [0, 1, 7, N // 2, N - 3, N, N + 1])
def test_purge_keeping_the_newest_walks_to_its_bound(tmp_path: Path, keep: int) -> None:
    """Without a filter, ``keep`` finds where the newest ``keep`` begin by a walk from the
    nearer end (not a list of every seq); a stream after it holds messages too."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.create_stream({"name": "T", "subjects": ["t.>"]})
        _fill(s, N // 2, ("t.x",))
        _fill(s, N)
        _fill(s, N // 2, ("t.x",))
        s.delete_msg("S", N)  # a gap at the end: the newest is N - 1
        s.delete_msg("S", 5)
        kept = [m.seq for m in s.iter_msgs("S")][-keep:] if keep else []
        assert s.purge_stream("S", keep=keep) == max(0, N - 2 - keep)
        assert [m.seq for m in s.iter_msgs("S")] == kept
        assert s.stream_state("T").messages == N


def test_deleting_a_consumer_of_a_workqueue_keeps_its_messages(tmp_path: Path) -> None:
    """As nats-server 2.15.1 (measured): a workqueue stream keeps the messages only the
    deleted consumer would have taken, for the next consumer on those subjects."""
    with Store.open(tmp_path / "d", sync="batch", clock=FakeClock(), remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "retention": "workqueue"})
        s.create_consumer("S", {"durable_name": "a", "filter_subject": "s.a", **EXPLICIT})
        s.create_consumer("S", {"durable_name": "b", "filter_subject": "s.b", **EXPLICIT})
        _fill(s, N)
        s.delete_consumer("S", "b")
        assert s.stream_state("S").messages == N
        s.create_consumer("S", {"durable_name": "c", "filter_subject": "s.b", **EXPLICIT})
        assert s.consumer_info("S", "c").num_pending == N // 2


@pytest.mark.parametrize("retention", ["interest"])
def test_deleting_a_consumer_drops_what_no_one_needs_in_slices(
    tmp_path: Path, retention: str
) -> None:
    """Interest retention: messages only the deleted consumer wanted go, over several
    slices; the ones another consumer still needs stay; the same as in one transaction."""
    states = []
    for sliced in (True, False):
        with Store.open(
            tmp_path / f"d{sliced}", sync="batch", clock=FakeClock(), remove_slice=SLICE
        ) as s:
            s.create_stream({"name": "S", "subjects": ["s.>"], "retention": retention})
            s.create_consumer("S", {"durable_name": "a", "filter_subject": "s.a", **EXPLICIT})
            s.create_consumer("S", {"durable_name": "b", "filter_subject": "s.b", **EXPLICIT})
            _fill(s, N)
            assert s.stream_state("S").messages == N
            commits = s.metrics()["commits"]
            order = Order()
            ops: list[Op] = [DeleteConsumer("S", "b")]
            if not sliced:
                ops.append(Publish("x.none"))
            deletion = order.submit(s, "delete", ops)
            publish = order.submit(s, "publish", [Publish("s.a", b"new")])
            assert deletion.result(timeout=60)[0] is True
            assert publish.result(timeout=30)[0] == PubAck("S", N + 1)
            assert (s.metrics()["commits"] - commits > 2) == sliced
            if sliced:
                assert order.done == ["publish", "delete"]
            state = s.stream_state("S")
            assert state.messages == N // 2 + 1  # every s.a, and the new one
            states.append([(m.seq, m.subject) for m in s.iter_msgs("S")])
    assert states[0] == states[1]


def test_two_consumer_deletions_in_flight_check_every_message(tmp_path: Path) -> None:
    """The second deletion's check (from the first message) takes over the stream's recheck
    record; the first one's continuation then stops: every message only the two deleted
    consumers wanted goes, the others stay, and no record is left."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "retention": "interest"})
        for c in ("a", "b", "c"):
            s.create_consumer("S", {"durable_name": c, "filter_subject": f"s.{c}", **EXPLICIT})
        _fill(s, 3 * N, ("s.a", "s.b", "s.c"))
        first = s.submit([DeleteConsumer("S", "b")])
        second = s.submit([DeleteConsumer("S", "c")])
        assert first.result(timeout=60) == [True]
        assert second.result(timeout=60) == [True]
        assert {m.subject for m in s.iter_msgs("S")} == {"s.a"}
        assert s.stream_state("S").messages == N
        with s.env.read() as txn:
            assert txn.get(keys.recheck_key(_sid(s, "S")), db=s.env.dbs[keys.DB_META]) is None


def test_a_stream_deleted_in_slices_is_gone_at_once(tmp_path: Path) -> None:
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        order = Order()
        deletion = order.submit(s, "delete", [DeleteStream("S")])
        # Queued behind the deletion, yet done before it: the name is free after the first
        # slice, and the new stream (a new sid) is untouched by the sweep of the old one.
        create = order.submit(s, "publish", [Publish("s.a", b"x", stream="S")])
        assert deletion.result(timeout=60) == [True]
        assert order.done == ["publish", "delete"]
        assert create.result(timeout=30)[0].err_code == 10059  # type: ignore[union-attr]
        assert _keys_under(s.env, sid) == 0
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        assert s.publish("s.a", b"again") == PubAck("S", 1)


def test_expiry_runs_in_slices(tmp_path: Path) -> None:
    clock = FakeClock()
    with Store.open(tmp_path / "d", sync="batch", clock=clock, remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_age": 10 * SEC})
        _fill(s, N)
        now = clock.advance(11 * SEC)
        commits = s.metrics()["commits"]
        order = Order()
        tick = order.submit(s, "tick", [Tick(now)])
        order.submit(s, "publish", [Publish("s.a", b"new")])
        tick.result(timeout=60)
        assert order.done == ["publish", "tick"]
        assert s.metrics()["commits"] - commits >= N // SLICE
        state = s.stream_state("S")
        assert (state.messages, state.first_seq) == (1, N + 1)


def _pending_keys(env: Env) -> int:
    with env.read() as txn:
        return sum(1 for _ in txn.cursor(db=env.dbs[keys.DB_PENDING]).iternext(values=False))


def _with_pending(path: Path, n: int) -> Store:
    """A store with stream S of N messages and consumer c holding ``n`` of them pending."""
    s = Store.open(path, sync="batch", remove_slice=10)
    s.create_stream({"name": "S", "subjects": ["s.>"]})
    _fill(s, N)
    s.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit", "max_ack_pending": -1})
    s.submit([Pull("S", "c", "inbox", batch=n)]).result(timeout=30)
    while s.consumer_info("S", "c").num_ack_pending < n:
        s.tick().result(timeout=30)  # (256 deliveries a batch)
    assert _pending_keys(s.env) == n
    return s


@pytest.mark.timeout(60)
def test_a_deleted_consumers_pending_entries_go_in_slices(tmp_path: Path) -> None:
    """More than remove_slice of them: the deletion answers at once, and they are removed
    in slices of their own (a job nobody waits for); a few go with the deletion."""
    with _with_pending(tmp_path / "d", 1000) as s:
        commits = s.metrics()["commits"]
        s.delete_consumer("S", "c")
        assert s.consumer_names("S") == []
        for _ in range(1000):
            if not _pending_keys(s.env) and not _meta_keys(s.env, keys.META_SWEEP_PREFIX):
                break
            s.submit([Tick()]).result(timeout=30)  # a slice runs between two of these
        assert _pending_keys(s.env) == 0
        assert _meta_keys(s.env, keys.META_SWEEP_PREFIX) == []
        assert s.metrics()["commits"] - commits >= 1000 // (SWEEP_KEYS_PER_MSG * 10)
    with _with_pending(tmp_path / "e", 10) as s:
        commits = s.metrics()["commits"]
        s.delete_consumer("S", "c")
        assert _pending_keys(s.env) == 0
        assert s.metrics()["commits"] - commits == 1


@pytest.mark.timeout(60)
def test_a_deleted_consumers_pending_sweep_resumes_after_a_close(tmp_path: Path) -> None:
    s = _with_pending(tmp_path / "d", 1000)
    try:
        s.delete_consumer("S", "c")
    finally:
        s.close()  # mid-sweep or not: what is left is recorded
    left = Env(tmp_path / "d", sync=True, readonly=True)
    try:
        assert (_pending_keys(left) > 0) == bool(_meta_keys(left, keys.META_SWEEP_PREFIX))
    finally:
        left.close()
    with Store.open(tmp_path / "d") as s:
        for f in s.resumed:
            f.result(timeout=30)
        assert _pending_keys(s.env) == 0
        assert _meta_keys(s.env, keys.META_SWEEP_PREFIX) == []


def test_closing_leaves_a_deleted_streams_data_to_the_next_open(tmp_path: Path) -> None:
    """Close does not wait for the sweep of a deleted stream; the next open finishes it."""
    path = tmp_path / "d"
    s = Store.open(path, sync="batch", remove_slice=10)
    try:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        deletion = s.submit([DeleteStream("S")])
        _first_slice_committed(s)
        assert s.stream_names() == []  # gone in the first transaction
    finally:
        s.close()
    assert deletion.result(timeout=1) == [True]
    env = Env(path, sync=True, readonly=True)
    try:
        assert _keys_under(env, sid) > 0  # 40 keys per slice of ≈4,000: far from done
        with env.read() as txn:
            assert txn.get(keys.sweep_key(sid), db=env.dbs[keys.DB_META]) is not None
    finally:
        env.close()
    with Store.open(path) as s:
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]  # the sweep, resumed
        assert _keys_under(s.env, sid) == 0


def _killed_between_slices(path: Path, mode: str) -> int:
    """Run tests/store/sweep_child.py in ``mode`` and SIGKILL it once its first slice is
    committed; the sid of its stream."""
    proc = start_child("-m", "tests.store.sweep_child", str(path), mode)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.startswith("SID "), line + (proc.stderr.read() if proc.stderr else "")
        sid = int(line.split()[1])
        line = proc.stdout.readline()
        assert line.strip() == "SWEEPING", line
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return sid


@pytest.mark.timeout(120)
def test_a_consumer_deletion_check_cut_short_by_a_crash_goes_on_at_the_next_open(
    tmp_path: Path,
) -> None:
    """Interest retention: after consumer b (on d.b) is deleted, its d.b messages go, in
    slices; killed between two, the next open goes on from the recorded seq."""
    path = tmp_path / "d"
    sid = _killed_between_slices(path, "consumer")
    env = Env(path, sync=True, readonly=True)
    try:
        with env.read() as txn:
            assert txn.get(keys.recheck_key(sid), db=env.dbs[keys.DB_META]) is not None
    finally:
        env.close()
    with Store.open(path) as s:
        assert s.consumer_names("D") == ["a"]
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]  # the check, resumed
        assert s.stream_state("D").messages == 10_000  # every d.a, no d.b
        assert {m.subject for m in s.iter_msgs("D")} == {"d.a"}
        with s.env.read() as txn:
            assert txn.get(keys.recheck_key(sid), db=s.env.dbs[keys.DB_META]) is None


@pytest.mark.timeout(120)
def test_a_deletion_cut_short_by_a_crash_is_finished_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "d"
    sid = _killed_between_slices(path, "stream")
    env = Env(path, sync=True, readonly=True)
    try:
        left = _keys_under(env, sid)
        with env.read() as txn:
            assert txn.get(keys.sweep_key(sid), db=env.dbs[keys.DB_META]) is not None
    finally:
        env.close()
    assert left > 0  # killed mid-sweep: data of the deleted stream is still there
    with Store.open(path) as s:
        assert s.stream_names() == []
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]  # the sweep, resumed
        assert _keys_under(s.env, sid) == 0
        s.create_stream({"name": "D", "subjects": ["d.>"]})
        assert s.publish("d.1") == PubAck("D", 1)
    with Store.open(path) as s, s.env.read() as txn:
        cur = txn.cursor(db=s.env.dbs[keys.DB_META])
        assert not any(keys.read_sweep_key(bytes(k)) for k in cur.iternext(values=False))


@pytest.mark.timeout(120)
def test_a_placing_walk_cut_short_by_a_crash_leaves_no_consumer(tmp_path: Path) -> None:
    """A last_per_subject consumer's creation killed mid-walk: it never existed (the walk
    writes nothing until its last slice); created again, it is placed over every subject."""
    path = tmp_path / "d"
    _killed_between_slices(path, "place")
    with Store.open(path) as s:
        assert s.consumer_names("D") == []
        assert s.resumed == []
        lps = {"durable_name": "l", "deliver_policy": "last_per_subject", "filter_subject": "d.*"}
        assert s.create_consumer("D", lps).num_pending == SWEPT_N


@pytest.mark.timeout(120)
def test_a_pending_sweep_cut_short_by_a_crash_goes_on_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "d"
    _killed_between_slices(path, "pending")
    env = Env(path, sync=True, readonly=True)
    try:
        assert 0 < _pending_keys(env) < SWEPT_N  # killed mid-sweep
        assert len(_meta_keys(env, keys.META_SWEEP_PREFIX)) == 1
    finally:
        env.close()
    with Store.open(path) as s:
        assert s.consumer_names("D") == []
        assert [f.result(timeout=60) for f in s.resumed] == [[True]]  # the sweep, resumed
        assert _pending_keys(s.env) == 0
        assert _meta_keys(s.env, keys.META_SWEEP_PREFIX) == []


def close_during(
    path: Path,
    op: Op,
    marker: Callable[[int], bytes],
    *,
    consumer: bool = False,
    rollups: bool = False,
) -> tuple[Future[list[OpResult]], int]:
    """Stream S of N messages (and an explicit-ack consumer c; ``allow_rollup_hdrs`` with
    ``rollups``), ``op`` submitted with slices of 10, the store closed once the ``meta``
    record ``marker(sid)`` names is written (its first slice committed): the op's future
    and S's sid."""
    s = Store.open(path, sync="batch", clock=FakeClock(), remove_slice=10)
    try:
        s.create_stream({"name": "S", "subjects": ["s.>"], "allow_rollup_hdrs": rollups})
        _fill(s, N)
        if consumer:
            s.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
        sid = _sid(s, "S")
        done = s.submit([op])
        _first_slice_committed(s)
        assert _meta_keys(s.env, marker(sid))
        assert not done.done()
    finally:
        s.close()
    return done, sid


def _first_slice_committed(s: Store) -> None:
    """Return once the first slice of the long operation submitted just before has
    committed: a job submitted now commits with that slice or in the batch after it, which
    comes before the next slice (store.writer)."""
    s.submit([Tick()]).result(timeout=30)


def _meta_keys(env: Env, prefix: bytes) -> list[bytes]:
    with env.read() as txn:
        cur = txn.cursor(db=env.dbs[keys.DB_META])
        out = []
        if cur.set_range(prefix):
            for k in cur.iternext(values=False):
                if not bytes(k).startswith(prefix):
                    break
                out.append(bytes(k))
        return out


@pytest.mark.timeout(120)
def test_a_purge_cut_short_by_a_crash_goes_on_at_the_next_open(tmp_path: Path) -> None:
    """A purge of ``d.*`` keeping the newest 50 (its bound fixed where those begin), killed
    between slices: its ``meta`` record holds the plan and the next open finishes it."""
    path = tmp_path / "d"
    sid = _killed_between_slices(path, "purge")
    env = Env(path, sync=True, readonly=True)
    try:
        assert len(_meta_keys(env, keys.purge_prefix(sid))) == 1
        assert _stored(env, sid) > 50  # killed mid-purge
    finally:
        env.close()
    with Store.open(path) as s:
        [(res,)] = [f.result(timeout=60) for f in s.resumed]
        assert type(res) is PurgeResult  # the number the resumed slices removed
        assert [m.seq for m in s.iter_msgs("D")] == list(range(20_000 - 49, 20_001))
        state = s.stream_state("D")
        assert (state.messages, state.first_seq, state.last_seq) == (50, 19_951, 20_000)
        assert _meta_keys(s.env, keys.purge_prefix(sid)) == []
        assert s.publish("d.1") == PubAck("D", 20_001)


@pytest.mark.parametrize(
    "purge",
    [
        PurgeStream("S"),
        PurgeStream("S", filter="s.a"),
        PurgeStream("S", filter="*.b", keep=9),
        PurgeStream("S", filter="s.a", keep=11),
        PurgeStream("S", keep=13),
        PurgeStream("S", seq=N // 2),
    ],
)
def test_a_purge_cut_short_by_close_goes_on_at_the_next_open(
    tmp_path: Path, purge: PurgeStream
) -> None:
    """Close does not wait for a purge either: its caller gets the number purged so far,
    the record stays, and the next open ends where one uninterrupted purge ends."""
    whole = tmp_path / "whole"
    with Store.open(whole, sync="batch", clock=FakeClock()) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        s.create_consumer("S", {"durable_name": "c", "ack_policy": "explicit"})
        [total] = s.submit([purge]).result(timeout=60)
        assert type(total) is PurgeResult
        assert total.purged > 100
        expected = ([(m.seq, m.subject) for m in s.iter_msgs("S")], s.stream_state("S"))
        expected_c = s.consumer_info("S", "c")
    path = tmp_path / "d"
    done, sid = close_during(path, purge, keys.purge_prefix, consumer=True)
    [part] = done.result(timeout=1)
    assert type(part) is PurgeResult
    assert 10 <= part.purged < total.purged
    with Store.open(path, clock=FakeClock()) as s:
        [(rest,)] = [f.result(timeout=60) for f in s.resumed]
        assert type(rest) is PurgeResult
        assert part.purged + rest.purged == total.purged
        assert ([(m.seq, m.subject) for m in s.iter_msgs("S")], s.stream_state("S")) == expected
        got_c = s.consumer_info("S", "c")
        assert (got_c.num_pending, got_c.delivered, got_c.ack_floor) == (
            expected_c.num_pending,
            expected_c.delivered,
            expected_c.ack_floor,
        )
        assert _meta_keys(s.env, keys.purge_prefix(sid)) == []


def test_a_purge_of_a_stream_deleted_meanwhile_leaves_no_record(tmp_path: Path) -> None:
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        _fill(s, N)
        sid = _sid(s, "S")
        purge = s.submit([PurgeStream("S")])
        deletion = s.submit([DeleteStream("S")])
        assert deletion.result(timeout=30) == [True]
        [res] = purge.result(timeout=30)
        assert type(res) is PurgeResult
        assert res.purged < N
        assert _meta_keys(s.env, keys.purge_prefix(sid)) == []


@pytest.mark.parametrize("plan_filter", [None, "s.a", "s.*", "*.b.>"])
def test_a_purge_record_holds_its_plan(plan_filter: str | None) -> None:
    from store.purgeplan import PurgePlan, plan_of, plan_record

    literal = plan_filter if plan_filter and "*" not in plan_filter else None
    pattern = plan_filter if plan_filter and literal is None else None
    for floor, compact in ((True, 77), (False, 0)):
        plan = PurgePlan(literal, pattern, 12, (1 << 64) - 1, compact, floor)
        assert plan_of(plan_record(plan)) == plan
    with pytest.raises(keys.RecordError):
        plan_of(b"\x02" + plan_record(plan)[1:])


# -- rollups ----------------------------------------------------------------------------------


def _rollup(kind: str) -> Publish:
    return Publish("s.a", b"r", (("Nats-Rollup", kind),))


def _after_rollup(kind: str, *later: tuple[int, str]) -> list[tuple[int, str]]:
    """What a stream filled by :func:`_fill` holds after :func:`_rollup` (seq N + 1) and
    the ``later`` messages: s.a at odd seqs and s.b at even ones before it."""
    kept = [] if kind == "all" else [(q, "s.b") for q in range(2, N + 1, 2)]
    return [*kept, (N + 1, "s.a"), *later]


@pytest.mark.parametrize("kind", ["all", "sub"])
def test_a_rollup_removes_in_slices_and_acknowledges_with_the_last(
    tmp_path: Path, kind: str
) -> None:
    """The messages a rollup replaces go as a purge below its seq, a slice per transaction:
    a publish submitted after it completes first (and is kept); the publisher's PubAck
    comes with the last slice, once the rollup is complete."""
    with Store.open(tmp_path / "d", sync="batch", remove_slice=SLICE) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "allow_rollup_hdrs": True})
        _fill(s, N)
        commits = s.metrics()["commits"]
        order = Order()
        rollup = order.submit(s, "rollup", [_rollup(kind)])
        later = order.submit(s, "later", [Publish("s.b", b"later")])
        assert rollup.result(timeout=60) == [PubAck("S", N + 1)]
        assert later.result(timeout=30) == [PubAck("S", N + 2)]
        assert order.done == ["later", "rollup"]
        assert s.metrics()["commits"] - commits >= N // 2 // SLICE
        assert [(m.seq, m.subject) for m in s.iter_msgs("S")] == _after_rollup(kind, (N + 2, "s.b"))
        assert _meta_keys(s.env, keys.purge_prefix(_sid(s, "S"))) == []


@pytest.mark.parametrize("kind", ["all", "sub"])
def test_a_rollup_in_slices_equals_one_transaction(tmp_path: Path, kind: str) -> None:
    """Sliced (alone in its job) and whole (with another op in its job), the same stream
    and consumer; the consumer's counts, kept up to date through the removals, equal
    those counted afresh after a reopen."""
    outcomes = []
    for sliced in (True, False):
        path = tmp_path / f"d{sliced}"
        with Store.open(path, sync="batch", clock=FakeClock(), remove_slice=SLICE) as s:
            s.create_stream({"name": "S", "subjects": ["s.>"], "allow_rollup_hdrs": True})
            s.create_consumer("S", {"durable_name": "c", "filter_subject": "s.a", **EXPLICIT})
            _fill(s, N)
            s.submit([Pull("S", "c", "inbox", batch=10)]).result(timeout=30)
            commits = s.metrics()["commits"]
            ops: list[Op] = [_rollup(kind)] if sliced else [_rollup(kind), Publish("x.none")]
            assert s.submit(ops).result(timeout=60)[0] == PubAck("S", N + 1)
            assert (s.metrics()["commits"] - commits > 1) == sliced
            info = s.consumer_info("S", "c")
            counts = (info.num_pending, info.num_ack_pending, info.delivered, info.ack_floor)
            assert counts[:2] == (1, 0)  # the pending ten were removed; the rollup is new
            outcomes.append(
                (s.stream_state("S"), [(m.seq, m.subject) for m in s.iter_msgs("S")], counts)
            )
        with Store.open(path, clock=FakeClock()) as s:
            info = s.consumer_info("S", "c")
            assert (info.num_pending, info.num_ack_pending, info.delivered, info.ack_floor) == (
                counts
            )
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] == _after_rollup(kind)


@pytest.mark.parametrize("kind", ["all", "sub"])
def test_a_rollup_cut_short_by_close_goes_on_at_the_next_open(tmp_path: Path, kind: str) -> None:
    """Closed between slices, the publisher still gets its PubAck (the message is stored);
    the purge record stays and the next open removes the rest."""
    path = tmp_path / "d"
    done, sid = close_during(path, _rollup(kind), keys.purge_prefix, rollups=True)
    assert done.result(timeout=1) == [PubAck("S", N + 1)]
    with Store.open(path, clock=FakeClock()) as s:
        [(rest,)] = [f.result(timeout=60) for f in s.resumed]
        assert type(rest) is PurgeResult
        assert rest.purged > 0
        assert [(m.seq, m.subject) for m in s.iter_msgs("S")] == _after_rollup(kind)
        assert _meta_keys(s.env, keys.purge_prefix(sid)) == []
