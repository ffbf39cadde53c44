"""The per-subject index with epochs (schema 2) and the subject records in ``subjcount``.

Invariant checked after every step (``_check``): the ``subjects`` index of a stream holds
exactly one key per stored message, in the epoch of its seq; ``subjcount`` holds, per
subject with stored messages, their count and the first and last stored seq; and every
reader of the index (last-by-subject, next-by-subject, the subjects of stream info, a
filtered consumer's num_pending) agrees with a brute-force answer over the stored
messages. The streams used span many epochs (256 sequences each), so first/last moves
and scans cross epoch boundaries.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    DeleteMsg,
    Delivery,
    JetStreamError,
    OpResult,
    PubAck,
    Publish,
    PurgeStream,
    Store,
    keys,
    subjindex,
    subjrecs,
)
from store.env import MIGRATIONS, _rebuild_subject_index
from tests.store.conftest import SEC, Events, FakeClock

EPOCH = 1 << keys.EPOCH_SHIFT


@pytest.fixture(autouse=True, params=[subjrecs.SMALL_SUBJECT, 0], ids=["seq-lists", "no-lists"])
def _small_subjects(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs twice: with the in-memory seq lists of small subjects, and without
    them (as after a restart), when first seqs are found through the index."""
    monkeypatch.setattr(subjrecs, "SMALL_SUBJECT", request.param)


def _sid(s: Store, name: str) -> int:
    with s.env.read() as txn:
        raw = txn.get(name.encode(), db=s.env.dbs[keys.DB_STREAMS])
        return keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)[0]


def _prefixed(txn: Any, db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    cur = txn.cursor(db=db)
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            if not bytes(k).startswith(prefix):
                return
            yield bytes(k), bytes(v)


def _raw_index(s: Store, name: str) -> tuple[set[tuple[str, int]], dict[str, tuple[int, ...]]]:
    """The committed ``subjects`` keys as (subject, seq) and ``subjcount`` records."""
    sid = _sid(s, name)
    prefix = keys.sid_prefix(sid)
    index: set[tuple[str, int]] = set()
    records: dict[str, tuple[int, ...]] = {}
    with s.env.read() as txn:
        for k, _ in _prefixed(txn, s.env.dbs[keys.DB_SUBJECTS], prefix):
            ksid, subj, seq = keys.split_subject_key(k)
            assert ksid == sid
            assert keys.read_u64(k, 8) == keys.epoch_of(seq)  # the key's epoch field
            assert k == keys.subject_key(sid, subj, seq)
            index.add((subj, seq))
        for k, v in _prefixed(txn, s.env.dbs[keys.DB_SUBJCOUNT], prefix):
            records[keys.subjcount_subject(k)] = keys.unpack_subject_record(v)
    return index, records


def _check(s: Store, name: str = "S", probes: int = 3) -> dict[int, str]:
    """Check the invariant of the module docstring; returns the stored seq -> subject."""
    stored = {m.seq: m.subject for m in s.iter_msgs(name)}
    index, records = _raw_index(s, name)
    assert index == {(subj, seq) for seq, subj in stored.items()}
    by_subject: dict[str, list[int]] = {}
    for seq in sorted(stored):
        by_subject.setdefault(stored[seq], []).append(seq)
    assert records == {subj: (len(q), q[0], q[-1]) for subj, q in by_subject.items()}
    info = s.stream_info(name, subjects_filter=">").state
    assert (info.subjects or {}) == {subj: len(q) for subj, q in by_subject.items()}
    assert (info.num_subjects or 0) == len(by_subject)
    for subj, q in by_subject.items():
        assert s.last_by_subject(name, subj).seq == q[-1]
        # next-by-subject from the first seq, from just after it, and from a few points.
        lo, hi = q[0], q[-1]
        points = {0, lo, lo + 1, (lo + hi) // 2, hi, hi + 1}
        for start in points | set(range(lo, hi, max(1, (hi - lo) // probes))):
            want = next((x for x in q if x >= start), None)
            if want is None:
                with pytest.raises(JetStreamError):
                    s.next_by_subject(name, subj, start)
            else:
                assert s.next_by_subject(name, subj, start).seq == want
    for missing in ("s.none", "s.none.>"):
        with pytest.raises(JetStreamError):
            s.last_by_subject(name, missing)
    wild = [subj for subj in by_subject if subj.startswith("s.x.")]
    if wild:
        want = max(by_subject[subj][-1] for subj in wild)
        assert s.last_by_subject(name, "s.x.*").seq == want
    return stored


def _fill(s: Store, n: int, subjects: tuple[str, ...] = ("s.f0", "s.f1", "s.f2")) -> None:
    """``n`` filler messages in one submission (they commit together)."""
    ops = [Publish(subjects[i % len(subjects)], b"f") for i in range(n)]
    assert all(r is not None for r in s.submit(ops).result(timeout=60))


def _records(s: Store, name: str = "S") -> dict[str, tuple[int, ...]]:
    return _raw_index(s, name)[1]


# -- layout ----------------------------------------------------------------------------------


def test_index_keys_order_by_epoch_then_subject_then_seq() -> None:
    a1 = keys.subject_key(1, "b", 5)
    b1 = keys.subject_key(1, "a", EPOCH + 1)
    b2 = keys.subject_key(1, "a", EPOCH + 2)
    c1 = keys.subject_key(1, "b", EPOCH + 3)
    assert a1 < b1 < b2 < c1  # the epoch first: "b" of epoch 0 sorts before "a" of epoch 1
    assert keys.epoch_of(EPOCH - 1) == 0
    assert keys.epoch_of(EPOCH) == 1
    assert b1.startswith(keys.subject_prefix(1, "a", 1))
    assert not b1.startswith(keys.subject_prefix(1, "a", 0))
    assert keys.subject_index_key(1, b"a", EPOCH + 1) == b1
    assert keys.subject_key_seq(b2) == EPOCH + 2
    assert keys.unpack_subject_record(keys.pack_subject_record(3, 7, 9)) == (3, 7, 9)
    with pytest.raises(keys.RecordError):
        keys.unpack_subject_record(keys.u64(3))


def test_one_commit_with_many_subjects_lands_in_one_or_two_epochs(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    _fill(store, EPOCH - 10)
    store.submit([Publish(f"s.k{i}", b"x") for i in range(64)]).result(timeout=30)
    index, _ = _raw_index(store, "S")
    epochs = {keys.epoch_of(seq) for subj, seq in index if subj.startswith("s.k")}
    assert epochs == {0, 1}


# -- first / last maintenance ----------------------------------------------------------------


def test_first_and_last_move_across_epochs_on_delete(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    seqs = []
    for _ in range(4):
        ack = store.publish("s.a", b"a")
        assert ack is not None
        seqs.append(ack.seq)
        _fill(store, 3 * EPOCH + 17)  # the next s.a is three epochs later
    assert _records(store)["s.a"] == (4, seqs[0], seqs[3])
    store.delete_msg("S", seqs[0])  # the first: the next one is 3 epochs on
    assert _records(store)["s.a"] == (3, seqs[1], seqs[3])
    store.delete_msg("S", seqs[3])  # the last: the previous one is 3 epochs back
    assert _records(store)["s.a"] == (2, seqs[1], seqs[2])
    _check(store)
    store.delete_msg("S", seqs[2])  # one left: both first and last
    assert _records(store)["s.a"] == (1, seqs[1], seqs[1])
    store.delete_msg("S", seqs[1])
    assert "s.a" not in _records(store)
    assert store.stream_state("S").num_subjects == 3
    ack = store.publish("s.a", b"again")
    assert ack is not None
    assert _records(store)["s.a"] == (1, ack.seq, ack.seq)
    _check(store)


def test_first_and_last_move_to_neighbours_in_the_same_epoch(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    _fill(store, 10)
    a = []
    for subj in ("s.a", "s.a", "s.b", "s.a", "s.a", "s.a"):
        ack = store.publish(subj)
        assert ack is not None
        if subj == "s.a":
            a.append(ack.seq)
    store.delete_msg("S", a[4])  # the last; the previous one is adjacent
    assert _records(store)["s.a"] == (4, a[0], a[3])
    store.delete_msg("S", a[0])  # the first; the next one is adjacent
    assert _records(store)["s.a"] == (3, a[1], a[3])
    store.delete_msg("S", a[1])  # the first; the next one is two seqs on (s.b between)
    assert _records(store)["s.a"] == (2, a[2], a[3])
    _check(store)


def test_deleting_an_interior_message_keeps_first_and_last(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    seqs = []
    for _ in range(5):
        ack = store.publish("s.a", b"a")
        assert ack is not None
        seqs.append(ack.seq)
        _fill(store, EPOCH)
    store.delete_msg("S", seqs[2])
    assert _records(store)["s.a"] == (4, seqs[0], seqs[4])
    store.delete_msg("S", seqs[1])
    store.delete_msg("S", seqs[0])  # the next, seqs[3], lies two epochs later
    assert _records(store)["s.a"] == (2, seqs[3], seqs[4])
    _check(store)


def test_max_msgs_per_subject_removes_the_oldest_across_epochs(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 3})
    want = []
    for i in range(8):
        ack = store.publish("s.a", bytes([i]))
        assert ack is not None
        want.append(ack.seq)
        _fill(store, EPOCH + 5, tuple(f"s.f{j}" for j in range(EPOCH + 5)))  # each once
        assert _records(store)["s.a"] == (min(i + 1, 3), want[max(0, i - 2)], want[i])
    assert [m.seq for m in store.iter_msgs("S") if m.subject == "s.a"] == want[-3:]
    _check(store, probes=1)


def test_discard_new_per_subject_counts_across_epochs(store: Store) -> None:
    store.create_stream(
        {
            "name": "S",
            "subjects": ["s.>"],
            "max_msgs_per_subject": 2,
            "discard": "new",
            "discard_new_per_subject": True,
        }
    )
    assert store.publish("s.a") is not None
    _fill(store, 2 * EPOCH, tuple(f"s.u{i}" for i in range(2 * EPOCH)))
    assert store.publish("s.a") is not None
    with pytest.raises(JetStreamError) as ei:
        store.publish("s.a")
    assert ei.value.err_code == 10077
    first = store.next_by_subject("S", "s.a").seq
    store.delete_msg("S", first)
    assert store.publish("s.a") is not None
    _check(store, probes=1)


def test_max_msgs_and_max_age_move_first_of_each_subject(tmp_path: Path, clock: FakeClock) -> None:
    with Store.open(tmp_path / "d", clock=clock, map_size=1 << 24) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs": 3 * EPOCH})
        for _ in range(5):
            s.publish("s.a")
            _fill(s, EPOCH - 1)  # s.f0..2
        _check(s)
        assert _records(s)["s.a"][0] == 3  # the two oldest s.a went with the stream's head
        s.update_stream({"name": "S", "subjects": ["s.>"], "max_age": 10 * SEC})
        clock.advance(5 * SEC)
        s.publish("s.a")
        s.publish("s.f1")
        s.tick(clock.advance(6 * SEC)).result(timeout=30)
        _check(s)
        state = s.stream_state("S")
        assert state.messages == 2
        assert _records(s) == {
            "s.a": (1, state.first_seq, state.first_seq),
            "s.f1": (1, state.last_seq, state.last_seq),
        }


# -- sparse subjects and the readers ---------------------------------------------------------


def test_sparse_subject_spanning_many_epochs(store: Store, events: Events) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"], "allow_rollup_hdrs": True})
    sparse = []
    for i in range(12):
        ack = store.publish("s.x.sparse", bytes([i]))
        assert ack is not None
        sparse.append(ack.seq)
        _fill(store, 2 * EPOCH + 100)
    store.publish("s.x.other")
    _check(store, probes=12)
    assert store.stream_state("S").last_seq > 12 * 2 * EPOCH  # about 24 epochs

    # A filtered consumer sees exactly the sparse subject, in order; num_pending agrees.
    store.create_consumer(
        "S", {"durable_name": "c", "ack_policy": "explicit", "filter_subject": "s.x.sparse"}
    )
    assert store.consumer_info("S", "c").num_pending == 12
    store.pull("S", "c", "inbox", batch=5)
    got = [e.msg.seq for e in events.take() if isinstance(e, Delivery)]
    assert got == sparse[:5]
    assert store.consumer_info("S", "c").num_pending == 7
    # A wildcard filter counts per subject (from a start between first and last).
    store.create_consumer(
        "S",
        {
            "durable_name": "w",
            "ack_policy": "none",
            "filter_subject": "s.x.*",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": sparse[6] + 1,
        },
    )
    assert store.consumer_info("S", "w").num_pending == 5 + 1
    # last_per_subject starts at the oldest of the last messages.
    store.create_consumer(
        "S",
        {
            "durable_name": "l",
            "ack_policy": "none",
            "filter_subject": "s.x.*",
            "deliver_policy": "last_per_subject",
        },
    )
    store.pull("S", "l", "inbox", batch=10)
    got = [e.msg.seq for e in events.take() if isinstance(e, Delivery)]
    assert got == [sparse[-1], store.last_by_subject("S", "s.x.other").seq]

    # Purge by subject with keep, then below a seq, then a rollup of the subject.
    assert store.purge_stream("S", filter="s.x.sparse", keep=9) == 3
    assert store.purge_stream("S", filter="s.x.sparse", seq=sparse[5]) == 2
    _check(store, probes=12)
    assert store.purge_stream("S", filter="s.x.*", seq=sparse[7]) == 2
    assert _records(store)["s.x.sparse"] == (5, sparse[7], sparse[11])
    ack = store.publish("s.x.sparse", b"r", (("Nats-Rollup", "sub"),))
    assert ack is not None
    assert _records(store)["s.x.sparse"] == (1, ack.seq, ack.seq)
    _check(store)


@pytest.mark.parametrize("n_subjects", [2, 300])
def test_wildcard_purge_scans_subjects_or_sweeps_epochs(
    store: Store, monkeypatch: pytest.MonkeyPatch, n_subjects: int
) -> None:
    """Two subjects spanning the stream are scanned one by one; 300 subjects each with a
    message every 300 seqs (so in about every epoch) are found by one sweep."""
    swept: list[int] = []
    real_sweep = subjindex.sweep

    def counting_sweep(*args: Any) -> list[int]:
        out = real_sweep(*args)
        swept.append(len(out))
        return out

    monkeypatch.setattr(subjindex, "sweep", counting_sweep)
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    # Named so that an epoch's key order (by subject) is the reverse of its seq order.
    names = tuple(f"s.{'xy'[i % 2]}.{999 - i}" for i in range(n_subjects))
    for _ in range(10):
        _fill(store, n_subjects, names)
        _fill(store, EPOCH // 2)
    stored = _check(store, probes=1)
    last = store.stream_state("S").last_seq
    below = last // 2
    # A wildcard consumer starting mid-stream counts the straddling subjects the same way.
    for filters in (["s.x.*"], ["s.x.*", "s.f0"]):
        store.create_consumer(
            "S",
            {
                "durable_name": "c",
                "ack_policy": "none",
                "filter_subjects": filters,
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": below + 1,
            },
        )
        want_pending = sum(
            1 for q, x in stored.items() if q > below and (x.startswith("s.x.") or x in filters)
        )
        assert store.consumer_info("S", "c").num_pending == want_pending
        store.delete_consumer("S", "c")
    assert bool(swept) == (n_subjects == 300)
    swept.clear()
    want = [q for q, subj in stored.items() if subj.startswith("s.x.") and q < below]
    assert store.purge_stream("S", filter="s.x.*", seq=below) == len(want)
    for q in want:
        del stored[q]
    assert _check(store, probes=1) == stored
    want = [q for q, subj in stored.items() if subj.startswith("s.x.")]
    assert store.purge_stream("S", filter="s.x.*", keep=3) == len(want) - 3
    assert [m.seq for m in store.iter_msgs("S") if m.subject.startswith("s.x.")] == want[-3:]
    # Wildcard purges walk the stream (keep: from the nearer end to where the kept begin),
    # in slices; they list no seqs.
    assert not swept
    _check(store, probes=1)


def test_update_to_max_msgs_per_subject_trims_across_epochs(store: Store) -> None:
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    for _ in range(6):
        store.publish("s.a")
        store.publish("s.b")
        _fill(store, EPOCH)
    store.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 2})
    recs = _records(store)
    assert recs["s.a"][0] == recs["s.b"][0] == 2
    assert all(n == 2 for n, _, _ in recs.values())
    _check(store, probes=1)


# -- differential: random operations over many epochs against a plain model -----------------

SUBJ = ("s.a", "s.b", "s.x.c", "s.x.d")

op_strategy = st.one_of(
    st.tuples(st.just("pub"), st.sampled_from(SUBJ), st.integers(1, 3)),
    st.tuples(st.just("fill"), st.integers(1, 2 * EPOCH), st.integers(0, 2)),
    st.tuples(st.just("del"), st.integers(0, 10_000)),
    st.tuples(st.just("delsubj"), st.sampled_from(SUBJ), st.sampled_from((0, 1, -2, -1))),
    st.tuples(
        st.just("purge"),
        st.sampled_from((*SUBJ, "s.x.*", None)),
        st.sampled_from(("keep", "seq", "all")),
        st.integers(0, 3),
    ),
    st.tuples(st.just("rollup"), st.sampled_from(SUBJ)),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op_strategy, min_size=1, max_size=14), mmps=st.sampled_from([-1, 3]))
def test_random_operations_over_many_epochs(
    tmp_path: Path, ops: list[tuple[Any, ...]], mmps: int
) -> None:
    d = tmp_path / "model"
    shutil.rmtree(d, ignore_errors=True)
    model: dict[int, str] = {}
    last = 0
    with Store.open(d, clock=FakeClock(), map_size=1 << 24, sync="batch") as s:
        s.create_stream(
            {
                "name": "S",
                "subjects": ["s.>"],
                "max_msgs_per_subject": mmps,
                "allow_rollup_hdrs": True,
            }
        )

        def added(subj: str) -> None:
            nonlocal last
            last += 1
            model[last] = subj
            if mmps > 0:
                mine = sorted(q for q, x in model.items() if x == subj)
                for q in mine[: max(0, len(mine) - mmps)]:
                    del model[q]

        for op in ops:
            if op[0] == "pub":
                _, subj, n = op
                s.submit([Publish(subj, b"p") for _ in range(n)]).result(timeout=60)
                for _ in range(n):
                    added(subj)
            elif op[0] == "fill":
                _, n, k = op
                subjects = tuple(f"s.f{j}" for j in range(k + 1))
                _fill(s, n, subjects)
                for i in range(n):
                    added(subjects[i % len(subjects)])
            elif op[0] == "del":
                if model:
                    seq = sorted(model)[op[1] % len(model)]
                    s.delete_msg("S", seq)
                    del model[seq]
            elif op[0] == "delsubj":
                _, subj, which = op
                mine = sorted(q for q, x in model.items() if x == subj)
                if len(mine) > max(which, -which - 1):
                    s.delete_msg("S", mine[which])
                    del model[mine[which]]
            elif op[0] == "purge":
                _, filt, mode, k = op
                keep = k if mode == "keep" else None
                below_seq = (last * k) // 3 + 1 if mode == "seq" else None
                n = s.purge_stream("S", filter=filt, seq=below_seq, keep=keep)
                victims = sorted(
                    q
                    for q, x in model.items()
                    if filt is None
                    or x == filt
                    or (filt == "s.x.*" and x.startswith("s.x.") and x.count(".") == 2)
                )
                if below_seq is not None:
                    victims = [q for q in victims if q < below_seq]
                if keep is not None:
                    victims = victims[: max(0, len(victims) - keep)]
                assert n == len(victims)
                for q in victims:
                    del model[q]
                if filt is None and keep is None and below_seq is not None:
                    last = max(last, below_seq - 1)
            else:
                _, subj = op
                s.publish(subj, b"r", (("Nats-Rollup", "sub"),))
                added(subj)
                for q in [q for q, x in model.items() if x == subj and q < last]:
                    del model[q]
            assert _check(s, probes=2) == model
        s.close()
        with Store.open(d, clock=FakeClock(), map_size=1 << 24) as again:
            assert _check(again, probes=1) == model


# -- migration from schema 1 -----------------------------------------------------------------

# The schema-1 layout, frozen here (keys.py describes only the current one): ``subjects``
# keyed u64 sid, subject, 0x00, u64 seq with empty values; ``subjcount`` keyed u64 sid,
# subject with the count alone (u64).
_V1_U64 = struct.Struct(">Q")


def _downgrade_to_schema_1(path: Path) -> int:
    """Rewrite a closed environment's subject index and records in the schema-1 layout and
    mark it schema 1. Returns the number of index keys written."""
    from store.env import Env

    env = Env(path, map_size=1 << 26)
    dbs = env.dbs
    txn = env.begin_write()
    counts: dict[bytes, int] = {}
    v1_index: list[bytes] = []
    for k, v in txn.cursor(db=dbs[keys.DB_MSGS]).iternext():
        sid, seq = keys.split_msg_key(bytes(k))
        subj = keys.msg_subject_bytes(bytes(v))
        v1_index.append(_V1_U64.pack(sid) + subj + b"\x00" + _V1_U64.pack(seq))
        counts[_V1_U64.pack(sid) + subj] = counts.get(_V1_U64.pack(sid) + subj, 0) + 1
    txn.drop(dbs[keys.DB_SUBJECTS], delete=False)
    txn.drop(dbs[keys.DB_SUBJCOUNT], delete=False)
    for key in v1_index:
        txn.put(key, b"", db=dbs[keys.DB_SUBJECTS])
    for key, n in counts.items():
        txn.put(key, _V1_U64.pack(n), db=dbs[keys.DB_SUBJCOUNT])
    txn.put(keys.META_SCHEMA, struct.pack(">I", 1), db=dbs[keys.DB_META])
    txn.commit()
    env.close()
    return len(v1_index)


def test_schema_1_environment_is_migrated(tmp_path: Path, clock: FakeClock) -> None:
    assert MIGRATIONS[1] is _rebuild_subject_index  # the registered migration is the real one
    path = tmp_path / "old"
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"]})
        s.create_stream({"name": "T", "subjects": ["t.>"], "max_msgs_per_subject": 2})
        for i in range(5):
            s.publish("s.a", bytes([i]))
            s.publish("t.a", bytes([i]))
            _fill(s, EPOCH + 3)
        s.publish("t.b")
        s.delete_msg("S", 1)
        s.purge_stream("S", filter="s.f1", keep=10)
        before = {n: (s.stream_info(n, subjects_filter=">").state, _raw_index(s, n)) for n in "ST"}
        msgs = {n: [(m.seq, m.subject, m.payload) for m in s.iter_msgs(n)] for n in "ST"}
    assert _downgrade_to_schema_1(path) > 0
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        assert s.env.schema_version == keys.SCHEMA_VERSION == 2
        for n in "ST":
            assert (s.stream_info(n, subjects_filter=">").state, _raw_index(s, n)) == before[n]
            assert [(m.seq, m.subject, m.payload) for m in s.iter_msgs(n)] == msgs[n]
            _check(s, n, probes=2)
        # The migrated stores go on working: limits, deletes and appends keep first/last.
        s.publish("t.a", b"new")
        s.delete_msg("S", s.last_by_subject("S", "s.a").seq)
        _check(s, "S", probes=2)
        _check(s, "T", probes=2)


# -- first seqs found again at the flush (stale firsts) --------------------------------------


@pytest.mark.parametrize("n_subjects", [10, 100])
def test_head_removal_over_many_sparse_subjects(
    store: Store, monkeypatch: pytest.MonkeyPatch, n_subjects: int
) -> None:
    """Purging the head removes many subjects' first messages in one batch; with 100 of
    them the flush finds their new first seqs by one sweep, with 10 by a scan each."""
    swept: list[int] = []
    real = subjindex.sweep_firsts

    def counting(*args: Any) -> subjindex.Swept:
        swept.append(1)
        return real(*args)

    monkeypatch.setattr(subjindex, "sweep_firsts", counting)
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    names = tuple(f"s.{999 - i}" for i in range(n_subjects))
    for _ in range(3):
        _fill(store, 7 * n_subjects, names)
        _fill(store, EPOCH, ("s.dense",))
    last = store.stream_state("S").last_seq
    store.purge_stream("S", seq=last // 3)
    _check(store, probes=1)
    assert bool(swept) == (n_subjects == 100)
    swept.clear()
    store.update_stream({"name": "S", "subjects": ["s.>"], "max_msgs": last // 3})
    _check(store, probes=1)
    assert bool(swept) == (n_subjects == 100)


def test_history_limit_over_many_keys_in_one_batch(store: Store) -> None:
    """A key-value pattern: max_msgs_per_subject 3, 300 keys updated round robin, 300
    updates per submission (each removes its key's oldest, whose successor is epochs on)."""
    store.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 3})
    names = tuple(f"s.k{i}" for i in range(300))
    for _ in range(6):
        _fill(store, 300, names)
        _check(store, probes=1)
    recs = _records(store)
    assert all(n == 3 for n, _, _ in recs.values())


@pytest.mark.parametrize("keys_per_batch", [300, 100, 30])
def test_history_limit_after_a_restart_builds_seq_lists(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, keys_per_batch: int
) -> None:
    """After a restart no subject has its in-memory seq list. The flush that finds a
    removed first's successor builds the list of a small subject while at it (by the sweep
    for 300 or 100 subjects in a batch, by a scan each for 30), so later removals on those
    subjects scan nothing; a sweep also gives their lists to the other small subjects it
    meets whole (with 100 per batch: the first sweep serves all 300 keys). What is stored
    stays exact either way."""
    path = tmp_path / "db"
    names = tuple(f"s.k{i}" for i in range(300))
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 5})
        for _ in range(6):
            _fill(s, 300, names)
    scans: list[str] = []
    for fn in ("seqs", "sweep_firsts", "next_seq"):
        real = getattr(subjindex, fn)

        def counting(*args: Any, _real: Any = real, _fn: str = fn) -> Any:
            scans.append(_fn)
            return _real(*args)

        monkeypatch.setattr(subjindex, fn, counting)
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        for rnd in range(3):
            scans.clear()
            for start in range(0, 300, keys_per_batch):
                _fill(s, keys_per_batch, names[start : start + keys_per_batch])
            if rnd and subjrecs.SMALL_SUBJECT:  # the first round after the restart built them
                assert scans == []
            elif subjrecs.SMALL_SUBJECT:
                sweeps = 1 if keys_per_batch >= subjrecs.SWEEP_STALE_FIRSTS else 0
                assert scans.count("sweep_firsts") == sweeps
                assert "next_seq" not in scans
            _check(s, probes=1)
        recs = _records(s)
        assert len(recs) == 300
        assert all(n == 5 for n, _, _ in recs.values())


def test_head_removal_after_a_restart_adopts_lists_and_stays_exact(
    tmp_path: Path, clock: FakeClock
) -> None:
    """After a restart, removals of many subjects' first messages (a purge, a lowered
    max_msgs, per-subject limits) resolve the new firsts by sweeps that also hand seq lists
    to the other small subjects they meet; subjects of every size (1 to 12 messages) are
    mixed and later appends and removals go through those lists. Exact at every step."""
    path = tmp_path / "db"
    names = tuple(f"s.k{i}" for i in range(240))
    # Subject i gets a message in round r when r < 2 + i % 11: 2 to 12 messages each.
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 9})
        for r in range(12):
            _fill(s, EPOCH // 2, ("s.dense",))
            _fill(s, 240, tuple(n for i, n in enumerate(names) if r < 2 + i % 11))
        _check(s, probes=1)
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        last = s.stream_state("S").last_seq
        s.purge_stream("S", seq=last // 4)
        _check(s, probes=1)
        for _ in range(3):
            _fill(s, 240, names)  # each subject over the limit loses its oldest
            _check(s, probes=1)
    with Store.open(path, clock=clock, map_size=1 << 26) as s:
        state = s.stream_state("S")
        s.update_stream(
            {
                "name": "S",
                "subjects": ["s.>"],
                "max_msgs_per_subject": 9,
                "max_msgs": state.messages - 400,
            }
        )
        _check(s, probes=1)
        for _ in range(2):
            _fill(s, 240, names)
            _check(s, probes=1)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sizes=st.lists(st.integers(4, 12), min_size=90, max_size=130),
    touched=st.integers(70, 90),
    mmps=st.sampled_from([3, 4]),
    head=st.integers(1, 3),
)
def test_many_subjects_after_a_restart_stay_exact(
    tmp_path: Path, sizes: list[int], touched: int, mmps: int, head: int
) -> None:
    """Many subjects of random sizes under a per-subject limit, reopened; then a batch that
    appends to 64 or more of them (each loses its oldest, whose successor is epochs on),
    then to all, then a head purge. The sweeps that find the new firsts build seq lists
    and adopt those of the other subjects they saw whole; every reader stays exact."""
    d = tmp_path / "many"
    shutil.rmtree(d, ignore_errors=True)
    names = tuple(f"s.k{i}" for i in range(len(sizes)))
    clock = FakeClock()
    with Store.open(d, clock=clock, map_size=1 << 26) as s:
        s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": mmps})
        for r in range(max(sizes)):
            _fill(s, EPOCH, ("s.dense",))  # so a subject's messages lie epochs apart
            active = tuple(n for n, k in zip(names, sizes, strict=True) if r < k)
            _fill(s, len(active), active)  # one message each
    with Store.open(d, clock=clock, map_size=1 << 26) as s:
        _fill(s, touched, names[:touched])
        _check(s, probes=1)
        _fill(s, len(names), names)
        _check(s, probes=1)
        s.purge_stream("S", seq=s.stream_state("S").last_seq * head // 5)
        _check(s, probes=1)
        _fill(s, len(names), names)
        _check(s, probes=1)


# A batch must give what its operations give one per commit, also when removals leave
# first seqs to be found at the flush and later operations of the batch read them.
batch_op = st.one_of(
    st.tuples(st.just("pub"), st.sampled_from(SUBJ)),
    st.tuples(st.just("fill"), st.integers(1, EPOCH), st.integers(0, 70)),
    st.tuples(st.just("del"), st.integers(1, 2000)),
    st.tuples(st.just("purge"), st.sampled_from((*SUBJ, "s.x.*", None)), st.integers(1, 2000)),
    st.tuples(st.just("keep"), st.sampled_from((*SUBJ, "s.x.*")), st.integers(0, 2)),
)


def _norm(res: OpResult) -> object:
    if isinstance(res, JetStreamError):
        return ("error", res.err_code)
    if isinstance(res, PubAck):
        return tuple(res)
    return getattr(res, "purged", res)


def _ops(spec: list[tuple[Any, ...]]) -> list[Any]:
    out: list[Any] = []
    for op in spec:
        if op[0] == "pub":
            out.append(Publish(op[1], b"p"))
        elif op[0] == "fill":
            out.extend(Publish(f"s.f{i % (op[2] + 1)}", b"f") for i in range(op[1]))
        elif op[0] == "del":
            out.append(DeleteMsg("S", op[1]))
        elif op[0] == "purge":
            out.append(PurgeStream("S", op[1], seq=op[2]))
        else:
            out.append(PurgeStream("S", op[1], keep=op[2]))
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=st.lists(batch_op, min_size=1, max_size=25), mmps=st.sampled_from([-1, 2]))
def test_one_batch_equals_one_commit_per_operation(
    tmp_path: Path, spec: list[tuple[Any, ...]], mmps: int
) -> None:
    ops = _ops(spec)
    outcomes = []
    for mode in ("single", "batch"):
        d = tmp_path / mode
        shutil.rmtree(d, ignore_errors=True)
        with Store.open(d, clock=FakeClock(), map_size=1 << 24, sync="batch") as s:
            s.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": mmps})
            if mode == "single":
                results = [s.submit([op]).result(timeout=60)[0] for op in ops]
            else:
                results = s.submit(ops).result(timeout=60)
            stored = _check(s, probes=1)
            norm = [_norm(r) for r in results]
            outcomes.append((norm, stored, s.stream_info("S", subjects_filter=">").state))
    assert outcomes[0] == outcomes[1]


def test_batch_reads_a_first_seq_left_to_the_flush(store: Store) -> None:
    """Within one batch, after a subject's first went (its successor epochs away): removing
    its last leaves the successor as first and last; a history limit removes the successor
    as the oldest; the committed records are exact."""
    store.create_stream({"name": "S", "subjects": ["s.>"], "max_msgs_per_subject": 3})
    a = []
    for subj in ("s.a", "s.b", "s.b"):
        for _ in range(3):
            ack = store.publish(subj)
            assert ack is not None
            a.append(ack.seq)
            _fill(store, 2 * EPOCH, tuple(f"s.f{i}" for i in range(2 * EPOCH)))
    sa = a[:3]
    sb = [m.seq for m in store.iter_msgs("S") if m.subject == "s.b"]  # the newest 3 of 6
    res = store.submit([DeleteMsg("S", sa[0]), DeleteMsg("S", sa[2])]).result(timeout=30)
    assert res == [True, True]
    assert _records(store)["s.a"] == (1, sa[1], sa[1])
    res = store.submit(
        [DeleteMsg("S", sb[0]), Publish("s.b", b"n1"), Publish("s.b", b"n2")]
    ).result(timeout=30)
    n1, n2 = res[1], res[2]
    assert isinstance(n1, PubAck)
    assert isinstance(n2, PubAck)
    assert [m.seq for m in store.iter_msgs("S") if m.subject == "s.b"] == [sb[2], n1.seq, n2.seq]
    assert _records(store)["s.b"] == (3, sb[2], n2.seq)
    _check(store, probes=1)


def test_filtered_consumer_on_a_small_subject_across_epochs(store: Store, events: Events) -> None:
    """A literal filter on a subject of 5 messages (in the seq lists, or not): delivery one
    by one in order, and num_pending from a start that is exactly one of its seqs."""
    store.create_stream({"name": "S", "subjects": ["s.>"]})
    seqs = []
    for _ in range(5):
        ack = store.publish("s.a")
        assert ack is not None
        seqs.append(ack.seq)
        _fill(store, EPOCH + 7)
    store.create_consumer(
        "S", {"durable_name": "c", "ack_policy": "explicit", "filter_subject": "s.a"}
    )
    for i, want in enumerate(seqs):
        assert store.consumer_info("S", "c").num_pending == 5 - i
        store.pull("S", "c", "inbox", batch=1)
        assert [e.msg.seq for e in events.take() if isinstance(e, Delivery)] == [want]
    store.create_consumer(
        "S",
        {
            "durable_name": "d",
            "ack_policy": "none",
            "filter_subject": "s.a",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": seqs[2],
        },
    )
    assert store.consumer_info("S", "d").num_pending == 3
    store.delete_msg("S", seqs[0])  # the first, from the list or found at the flush
    assert _records(store)["s.a"] == (4, seqs[1], seqs[4])
    _check(store)
