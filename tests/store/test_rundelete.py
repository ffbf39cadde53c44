"""Deletions in runs (store.rundelete) and publishes in runs (``Engine._publish_alike``)
equal the same operations one by one.

The engine removes a run of ``DeleteMsg`` operations within one job's operation list in
one walk per stream. A differential test applies the same batches to two stores
through the engine: as drawn (jobs of several operations: runs) and with every operation
a job of its own in the same batch (no run is longer than one: the one-by-one path).
Operations mix publishes and deletions — consecutive runs, gaps, descending steps,
repeats, seqs not stored, zero, beyond the last, out of uint64 — over several subjects and
streams: without limits (the broker's ``$MQTT_pend``), ``max_msgs_per_subject``,
``max_msgs``, workqueue retention, a stream with a consumer, one denying deletion, and a
missing one; some subjects grow past an index epoch (256 seqs). After every batch both
stores must have given the same results and events, hold the same raw contents in every
database, and the same cached stream and subject-record state; after a reopen, the same
stream infos with subject counts and last-by-subject answers.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    ConsumerConfig,
    CreateConsumer,
    CreateStream,
    DeleteMsg,
    GetConsumerInfo,
    GetStreamInfo,
    JetStreamError,
    Publish,
    Pull,
    PurgeStream,
    Store,
    StreamConfig,
    keys,
)
from store.engine import Engine
from store.env import Env
from store.ops import Headers
from store.writer import AnyJob, Job
from tests.store.conftest import FakeClock

STREAMS: tuple[dict[str, Any], ...] = (
    {"name": "P", "subjects": ["p.>"]},  # as the broker's $MQTT_pend
    {"name": "L", "subjects": ["l.>"], "max_msgs_per_subject": 3},
    {"name": "M", "subjects": ["m.>"], "max_msgs": 6},
    {"name": "W", "subjects": ["w.>"], "retention": "workqueue"},
    {"name": "C", "subjects": ["c.>"]},  # with a consumer (below)
    {"name": "D", "subjects": ["d.>"], "deny_delete": True},
)
NAMES = [cfg["name"] for cfg in STREAMS]
SUBJECTS = ["p.1", "p.2", "p.3", "l.1", "l.2", "m.1", "m.2", "w.1", "c.1", "d.1"]
# A message of the broker's: its header block as the broker encodes it.
BLOCK = b'NATS/1.0\r\nMqtt-Topic: "t"\r\nMqtt-Qos: 1\r\nMqtt-Retain: 0\r\nMqtt-Props: {}\r\n\r\n'


class Side:
    """A store driven through the engine, a batch per transaction (as the writer does)."""

    def __init__(self, path: Path, clock: FakeClock) -> None:
        self.path = path
        self.env = Env(path, sync=False, map_size=1 << 24)
        self.engine = Engine(self.env, clock, "test")

    def apply(self, jobs: list[list[Any]]) -> tuple[list[Any], str]:
        made: list[AnyJob] = [Job(ops) for ops in jobs]
        txn = self.env.begin_write()
        try:
            events = self.engine.apply(txn, made)
        except BaseException:
            txn.abort()
            raise
        txn.commit()
        assert not self.engine.take_unfinished()
        return [_norm(r) for job in made for r in job.results], repr(events)

    def raw(self) -> dict[bytes, list[tuple[bytes, bytes]]]:
        out = {}
        with self.env.read() as txn:
            for name in keys.ALL_DBS:
                out[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(self.env.dbs[name])]
        return out

    def cached(self) -> dict[str, object]:
        """The engine's cached streams and subject records (memory only)."""
        out: dict[str, object] = {}
        for name, s in self.engine.streams.items():
            subj = s.subj
            out[name] = (
                (s.first_seq, s.last_seq, s.messages, s.bytes, s.first_ts, s.last_ts),
                s.removals,
                subj.num_subjects,
                dict(subj._subj),
                sorted(subj._stale),
                dict(subj._seqs),
                sorted(subj._dirty),
            )
        return out

    def close(self) -> None:
        self.env.close()


def _norm(res: Any) -> object:
    if isinstance(res, JetStreamError):
        return ("error", res.err_code, str(res))
    if hasattr(res, "model_dump"):
        return res.model_dump()
    return res


def _setup(side: Side) -> None:
    side.apply([[CreateStream(StreamConfig.from_wire(cfg))] for cfg in STREAMS])
    cons = ConsumerConfig.from_wire({"durable_name": "c", "ack_policy": "explicit"})
    side.apply([[CreateConsumer("C", cons)]])


def _publishes(data: st.DataObject) -> list[Any]:
    count = data.draw(st.sampled_from([1, 1, 1, 2, 3, 5, 40, 130]), label="count")
    subjects = data.draw(
        st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3), label="subjects"
    )
    size = data.draw(st.integers(0, 120), label="payload size")
    choices: list[Headers | bytes] = [(), BLOCK]
    block = data.draw(st.sampled_from(choices), label="headers")
    return [Publish(subjects[i % len(subjects)], bytes(size), block) for i in range(count)]


def _deletions(data: st.DataObject, side: Side) -> list[Any]:
    name = data.draw(st.sampled_from([*NAMES, "P", "P", "X"]), label="stream")
    s = side.engine.streams.get(name)
    first, last = (s.first_seq, s.last_seq) if s is not None else (1, 10)
    start = data.draw(
        st.sampled_from([first, first, first + 1, first + 3, last, 0]) | st.integers(0, last + 3),
        label="start",
    )
    length = data.draw(st.integers(1, 24), label="length")
    step = data.draw(st.sampled_from([1, 1, 1, 2, 3, -1, 0]), label="step")
    seqs = [start + k * step for k in range(length)]
    for _ in range(data.draw(st.integers(0, 2), label="odd ones")):
        odd = data.draw(
            st.sampled_from([0, -1, last + 1, last + 50, 1 << 64, first, first - 1]),
            label="odd seq",
        )
        seqs.insert(data.draw(st.integers(0, len(seqs)), label="at"), odd)
    return [DeleteMsg(name, q) for q in seqs]


def _other(data: st.DataObject) -> list[Any]:
    return [
        data.draw(
            st.sampled_from(
                [
                    Pull("C", "c", "inbox", batch=3, no_wait=True),
                    PurgeStream("P", "p.2"),
                    PurgeStream("L", None, keep=1),
                    GetStreamInfo("P"),
                ]
            ),
            label="other",
        )
    ]


_runs = itertools.count()


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_runs_equal_one_by_one(tmp_path: Path, data: st.DataObject) -> None:
    n = next(_runs)
    clock = FakeClock()
    runs, single = Side(tmp_path / f"runs{n}", clock), Side(tmp_path / f"one{n}", clock)
    try:
        for side in (runs, single):
            _setup(side)
        for _ in range(data.draw(st.integers(1, 6), label="batches")):
            jobs: list[list[Any]] = []
            for _ in range(data.draw(st.integers(1, 4), label="jobs")):
                ops: list[Any] = []
                for _ in range(data.draw(st.integers(1, 5), label="items")):
                    kind = data.draw(st.sampled_from("ppdddo"), label="kind")
                    if kind == "p":
                        ops += _publishes(data)
                    elif kind == "d":
                        ops += _deletions(data, runs)
                    else:
                        ops += _other(data)
                jobs.append(ops)
            clock.advance(1000)
            got = runs.apply(jobs)
            want = single.apply([[op] for ops in jobs for op in ops])
            assert got == want
            assert runs.raw() == single.raw()
            assert runs.cached() == single.cached()
    finally:
        runs.close()
        single.close()
    _same_after_reopen(runs.path, single.path)


def _same_after_reopen(a: Path, b: Path) -> None:
    """Opened again (nothing cached): the same stream infos, subject counts and lasts."""
    answers = []
    for path in (a, b):
        with Store.open(path, sync="batch", clock=FakeClock(), map_size=1 << 24) as s:
            got: list[object] = []
            for name in NAMES:
                info = s.stream_info(name, subjects_filter=">")
                got.append(info.state.model_dump())
                for subject in sorted(info.state.subjects or {}):
                    got.append(s.last_by_subject(name, subject).seq)
                    got.append(s.next_by_subject(name, subject).seq)
            answers.append(got)
    assert answers[0] == answers[1]


def _pair(tmp_path: Path) -> tuple[Side, Side, FakeClock]:
    clock = FakeClock()
    runs, single = Side(tmp_path / "runs", clock), Side(tmp_path / "one", clock)
    for side in (runs, single):
        _setup(side)
    return runs, single, clock


def _both(runs: Side, single: Side, jobs: list[list[Any]]) -> list[Any]:
    got = runs.apply(jobs)
    assert got == single.apply([[op] for ops in jobs for op in ops])
    assert runs.raw() == single.raw()
    assert runs.cached() == single.cached()
    return got[0]


@pytest.mark.parametrize("per_subject", [1, 4, 8, 64])
def test_acks_in_order_across_epochs(tmp_path: Path, per_subject: int) -> None:
    """The broker's pattern over 600 seqs (three index epochs): each subject's entries
    stored in a row of ``per_subject``, deleted in order in runs of 50 (a subject's chain
    of firsts, its small seq list, or both; a run crossing subjects and epochs)."""
    runs, single, _ = _pair(tmp_path)
    try:
        pubs = [Publish(f"p.{i // per_subject % 5}", b"x" * (i % 7), BLOCK) for i in range(600)]
        _both(runs, single, [pubs[:300], pubs[300:]])
        for lo in range(1, 601, 150):
            jobs = [[DeleteMsg("P", q) for q in range(a, a + 50)] for a in range(lo, lo + 150, 50)]
            results = _both(runs, single, jobs)
            assert results == [True] * 150
        assert runs.engine.streams["P"].messages == 0
    finally:
        runs.close()
        single.close()
    _same_after_reopen(runs.path, single.path)


def test_a_run_with_every_kind_of_failure(tmp_path: Path) -> None:
    """Each failing deletion in a run gets the one-by-one path's exact error, in order,
    and the deletions around it still go."""
    runs, single, _ = _pair(tmp_path)
    try:
        _both(runs, single, [[Publish(f"p.{i % 2}", b"x") for i in range(10)]])
        seqs = [1, 2, 2, 0, 3, 99, 5, -1, 4, 1 << 64, 6, 6, 10, 8, 7, 1]
        got = runs.apply([[DeleteMsg("P", q) for q in seqs]])[0]
        assert got == single.apply([[DeleteMsg("P", q)] for q in seqs])[0]
        assert [r is True for r in got] == [
            q in (1, 2, 3, 4, 5, 6, 7, 8, 10) and seqs.index(q) == i for i, q in enumerate(seqs)
        ]
        assert runs.raw() == single.raw()
        assert runs.cached() == single.cached()
    finally:
        runs.close()
        single.close()


def test_a_seq_of_the_wrong_type_fails_the_job_as_one_by_one(tmp_path: Path) -> None:
    """A caller's bug (a seq that is not an int) raises out of the batch as before, even
    in the middle of a run: the writer aborts the transaction and fails the job."""
    with Store.open(tmp_path / "s", sync="batch", clock=FakeClock()) as s:
        s.create_stream({"name": "P", "subjects": ["p.>"]})
        for _ in range(3):
            s.publish("p.1", b"x")
        bad: Any = "2"
        fut = s.submit([DeleteMsg("P", 1), DeleteMsg("P", bad), DeleteMsg("P", 3)])
        with pytest.raises(TypeError, match="must be an int"):
            fut.result(timeout=30)
        assert s.stream_info("P").state.messages == 3
        assert s.submit([DeleteMsg("P", 1), DeleteMsg("P", 3)]).result(timeout=30) == [True] * 2
        assert s.stream_info("P").state.first_seq == 2


@pytest.mark.parametrize(
    ("layout", "deleted"),
    [
        # p.1 from seq 250 to 265, over the boundary of index epochs 0 and 1 (seq 256):
        # its first goes stale at the boundary, then is exact again; 5 are left (a subject
        # whose first the flush finds gets a seq list: the cached state shows it).
        ([("p.0", 249), ("p.1", 16)], [*range(250, 261)]),
        # p.2 is the last subject of epoch 0 and, after p.3's 256, the first of epoch 1: the
        # key after its 255 is its 257, yet 257 is not its first (256 is a lower bound).
        ([("p.1", 249), ("p.2", 6), ("p.3", 1), ("p.2", 6)], [*range(250, 256), 257, 258]),
    ],
)
def test_a_subject_over_an_epoch_boundary(
    tmp_path: Path, layout: list[tuple[str, int]], deleted: list[int]
) -> None:
    runs, single, _ = _pair(tmp_path)
    try:
        _both(runs, single, [[Publish(subj, b"x") for subj, n in layout for _ in range(n)]])
        assert _both(runs, single, [[DeleteMsg("P", q) for q in deleted]]) == [True] * len(deleted)
    finally:
        runs.close()
        single.close()
    _same_after_reopen(runs.path, single.path)


def test_a_stream_with_a_consumer_tells_it_of_every_deletion(tmp_path: Path) -> None:
    """The consumer hears of each deleted message (pending ones leave its pending map with
    a terminated advisory; undelivered ones leave num_pending), as one by one."""
    runs, single, _ = _pair(tmp_path)
    try:
        _both(runs, single, [[Publish("c.1", b"x") for _ in range(10)]])
        _both(runs, single, [[Pull("C", "c", "inbox", batch=4, no_wait=True)]])
        got = runs.apply([[DeleteMsg("C", q) for q in range(2, 9)], [GetConsumerInfo("C", "c")]])
        want = single.apply(
            [[DeleteMsg("C", q)] for q in range(2, 9)] + [[GetConsumerInfo("C", "c")]]
        )
        assert got == want
        assert "terminated" in got[1]
        assert runs.raw() == single.raw()
    finally:
        runs.close()
        single.close()


def test_a_run_over_several_streams(tmp_path: Path) -> None:
    """Deletions alternating between streams (a pending entry's, then the message it
    referenced, as the broker's ``$MQTT_pend`` and ``$MQTT_msgs``), with deletions on a
    stream with a consumer (an advisory each), on one denying deletion, on a missing
    stream and failing ones between: the one-by-one results, events and state."""
    runs, single, _ = _pair(tmp_path)
    try:
        pubs = [Publish(s, b"x") for i in range(10) for s in ("p.1", f"w.{i}", "c.1", "d.1")]
        _both(runs, single, [pubs, [Pull("C", "c", "inbox", batch=10, no_wait=True)]])
        seqs = {"P": iter(range(1, 11)), "W": iter(range(1, 11)), "C": iter(range(1, 11))}
        ops: list[Any] = []
        for k in range(10):
            ops += [DeleteMsg("P", next(seqs["P"])), DeleteMsg("W", next(seqs["W"]))]
            if k % 3 == 1:
                ops += [DeleteMsg("C", next(seqs["C"])), DeleteMsg("P", 1), DeleteMsg("W", 99)]
            if k % 4 == 2:
                ops += [DeleteMsg("D", k), DeleteMsg("X", 1), DeleteMsg("W", 0)]
        results = _both(runs, single, [ops])
        assert results.count(True) == 23
        for name in ("P", "W"):
            assert runs.engine.streams[name].messages == 0
    finally:
        runs.close()
        single.close()
    _same_after_reopen(runs.path, single.path)
