"""Group commit must not change semantics: a batch equals its operations one by one.

The writer aggregates inside a batch (per-subject counts and the stream state record are
written once per stream per transaction), so a differential test runs the same operation
list twice — once as one submission per operation, once split into a few multi-operation
submissions that commit together — over several streams with per-subject limits, discard
new, max_msgs and purges, and compares every result, every stored message, the stream
states and the per-subject counts, before and after reopening.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    DeleteMsg,
    Event,
    JetStreamError,
    Op,
    OpResult,
    PubAck,
    Publish,
    Pull,
    PurgeStream,
    Store,
    keys,
)
from tests.store.conftest import FakeClock

STREAMS: tuple[dict[str, Any], ...] = (
    {"name": "A", "subjects": ["a.>"], "max_msgs_per_subject": 2},
    {
        "name": "N",
        "subjects": ["n.>"],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "discard_new_per_subject": True,
    },
    {"name": "L", "subjects": ["l.>"], "max_msgs": 4},
    {"name": "M", "subjects": ["m.>"], "max_msgs": 3, "discard": "new"},
)
SUBJECTS = ["a.1", "a.2", "n.1", "n.2", "l.1", "l.2", "m.1", "m.2", "zz"]
NAMES = [s["name"] for s in STREAMS]

ops_strategy = st.lists(
    st.one_of(
        # ``stream`` explicitly: left to inference, builds() filled it with any text, once
        # with "G", the stream only the batched store has (_hold_writer).
        # ``headers`` explicitly too: any name/value pairs (inference would also give raw
        # header blocks, which only the broker's own records use: test_header_blocks).
        st.builds(
            Publish,
            st.sampled_from(SUBJECTS),
            st.binary(max_size=8),
            headers=st.lists(st.tuples(st.text(), st.text()), max_size=3).map(tuple),
            stream=st.none() | st.sampled_from(NAMES),
        ),
        st.builds(
            Publish,
            st.sampled_from(SUBJECTS),
            st.just(b"h"),
            st.just((("X-K", "v"),)),
            stream=st.none() | st.sampled_from(NAMES),
        ),
        st.builds(DeleteMsg, st.sampled_from(NAMES), st.integers(1, 12)),
        st.builds(PurgeStream, st.sampled_from(NAMES), st.none() | st.sampled_from(SUBJECTS[:8])),
    ),
    min_size=1,
    max_size=40,
)


def _norm(res: OpResult) -> object:
    if isinstance(res, JetStreamError):
        return ("error", res.err_code, str(res))
    if isinstance(res, PubAck):
        return tuple(res)
    return getattr(res, "purged", res)


def _committed(s: Store, name: str) -> tuple[dict[str, int], tuple[int, ...]]:
    """The per-subject counts and the state record as committed (read straight from LMDB)."""
    dbs = s.env.dbs
    counts: dict[str, int] = {}
    with s.env.read() as txn:
        raw = txn.get(name.encode(), db=dbs[keys.DB_STREAMS])
        sid = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)[0]
        prefix = keys.sid_prefix(sid)
        cur = txn.cursor(db=dbs[keys.DB_SUBJCOUNT])
        if cur.set_range(prefix):
            for k, v in cur.iternext():
                if not bytes(k).startswith(prefix):
                    break
                counts[bytes(k[8:]).decode()] = keys.read_u64(bytes(v))
        state = keys.unpack_stream_state(bytes(txn.get(keys.u64(sid), db=dbs[keys.DB_SSTATE])))
    return counts, state


def _snapshot(s: Store) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in NAMES:
        msgs = [(m.seq, m.subject, m.headers, m.payload) for m in s.iter_msgs(name)]
        counts: dict[str, int] = {}
        for _, subj, _, _ in msgs:
            counts[subj] = counts.get(subj, 0) + 1
        stored_counts, stored_state = _committed(s, name)
        assert stored_counts == counts
        info = s.stream_info(name, subjects_filter=">")
        assert (info.state.subjects or {}) == counts  # the subjcount table is exact
        assert (info.state.num_subjects or 0) == len(counts)
        st = info.state
        assert stored_state[:4] == (st.first_seq, st.last_seq, st.messages, st.bytes)
        assert stored_state[6] == len(counts)
        out[name] = (st.model_dump(), msgs)
    return out


def _hold_writer(s: Store) -> threading.Event:
    """Block the writer thread (in the event hook of a pull request) until the returned
    event is set; whatever is submitted meanwhile commits as one batch."""
    held, release = threading.Event(), threading.Event()

    def hold(events: Sequence[Event]) -> None:
        held.set()
        release.wait(30)

    if "G" not in s.stream_names():
        s.create_stream({"name": "G", "subjects": ["g.>"]})
        s.create_consumer("G", {"durable_name": "g", "ack_policy": "explicit"})
    s.set_event_hook(hold)
    s.submit([Pull("G", "g", "inbox", no_wait=True)])
    assert held.wait(30)
    return release


def test_cancelled_future_neither_stops_the_writer_nor_withdraws_its_ops(store: Store) -> None:
    store.create_stream({"name": "A", "subjects": ["a.>"]})
    release = _hold_writer(store)
    fut = store.submit([Publish("a.1", b"x")])
    assert fut.cancel()
    release.set()
    store.set_event_hook(None)
    assert store.publish("a.2", b"y") == PubAck("A", 2)
    assert store.get_msg("A", 1).payload == b"x"


_runs = itertools.count()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=ops_strategy, cuts=st.lists(st.integers(0, 40), max_size=4))
def test_batched_equals_one_by_one(tmp_path: Path, ops: list[Op], cuts: list[int]) -> None:
    n = next(_runs)
    one_dir, batch_dir = tmp_path / f"one{n}", tmp_path / f"batch{n}"
    clock = FakeClock()
    one = Store.open(one_dir, clock=clock, sync="batch", map_size=1 << 22)
    batch = Store.open(batch_dir, clock=clock, sync="batch", map_size=1 << 22)
    try:
        for s in (one, batch):
            for cfg in STREAMS:
                s.create_stream(cfg)
        singles = [_norm(one.submit([op]).result(timeout=30)[0]) for op in ops]
        # Hold the writer (in the event hook of a pull request) while every chunk is
        # submitted, so they commit as one transaction of several multi-operation jobs.
        bounds = sorted({0, len(ops), *(c for c in cuts if c < len(ops))})
        chunks = [ops[a:b] for a, b in itertools.pairwise(bounds)]
        release = _hold_writer(batch)
        commits = batch.metrics()["commits"]
        futs = [batch.submit(chunk) for chunk in chunks]
        release.set()
        batched = [_norm(r) for f in futs for r in f.result(timeout=30)]
        assert batch.metrics()["commits"] - commits == 1
        batch.set_event_hook(None)
        assert batched == singles
        assert _snapshot(batch) == _snapshot(one)
        one.close()
        batch.close()
        one = Store.open(one_dir, clock=clock, sync="batch", map_size=1 << 22)
        batch = Store.open(batch_dir, clock=clock, sync="batch", map_size=1 << 22)
        assert _snapshot(batch) == _snapshot(one)
    finally:
        one.close()
        batch.close()
        shutil.rmtree(one_dir, ignore_errors=True)
        shutil.rmtree(batch_dir, ignore_errors=True)
