#!/usr/bin/env python3
"""Benchmark of the store's write path, consumer cycle, recovery and disk use.

Reports the median of 5 runs of each measurement:

- durable appends/s of 100-byte messages with ``sync="always"`` from 1, 8 and 64
  concurrent submitters. A submitter is one outstanding request, like a trio task in the
  broker: when its commit completes (the ``Store.submit_then`` callback; once more at 64
  through futures and their done callbacks), it submits the next message. Compared in the
  same run with (a) the same store and 64 submitters with group commit off (each message
  committed and fsynced in its own transaction), (b) a raw py-lmdb loop of one write
  transaction + fsync per message, and (c) a raw py-lmdb ``put`` loop without fsync (the
  ceiling); and a bare Python writer making only the store's LMDB writes with the same
  64 submitters, grouped and one transaction per message (what any Python engine on this
  disk can reach: the store's share of it is the cost of its checks and bookkeeping);
- appends/s under a limit that removes a sparse subject's first message per append
  (10,000 subjects; ``max_msgs_per_subject`` and ``max_msgs``; ``sync="batch"``), also
  with the store reopened halfway (a restart: nothing cached);
- explicit-ack consumer deliver+ack cycles/s (pull batches of 100, acks submitted in one
  operation list together with the next pull request);
- reopen time of a stream holding 1,000,000 messages (``--recovery-msgs``), and in it
  last-by-subject / next-by-subject of a subject stored only as its first and last message;
- bytes on disk per stored 100-byte message.

Usage: ``.venv/bin/python scripts/bench_store.py [--quick]``; ``--ratio-pairs N`` runs only
the 64-submitter rows with group commit off and on, N alternating pairs;
``--consumer-cycles`` only the consumer row; ``--engine-cpu`` only the engine's CPU time
(``time.process_time``, best of 5) per 100-byte append (64 per batch, one filtered consumer)
and per deliver+ack cycle, and (median of 5) per broker pending entry's append and its
deletion with the deletions in runs of 1, 8 and 64 per job, applying batches directly (no
writer thread, no fsync): on a busy machine it compares two commits where wall-clock rates
drift.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final, NamedTuple

import lmdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from store import (
    Ack,
    ConsumerConfig,
    ConsumerInfo,
    CreateConsumer,
    CreateStream,
    DeleteMsg,
    DeleteStream,
    Delivery,
    Event,
    Op,
    OpResult,
    PubAck,
    Publish,
    Pull,
    PullStatus,
    PurgeResult,
    PurgeStream,
    Store,
    StreamConfig,
    StreamInfo,
)
from store import keys as keys_mod
from store.engine import REMOVE_SLICE, Engine
from store.env import Env
from store.writer import Job

PAYLOAD = bytes(100)
RUNS = 5


def median_of(fn: Callable[[], float], runs: int = RUNS) -> float:
    return statistics.median(fn() for _ in range(runs))


class Run(NamedTuple):
    """One closed-loop run: its rate and where the writer thread spent its time."""

    rate: float
    jobs_per_commit: float
    commit_ms: float  # per commit (LMDB commit: page writes + data fsync + meta fsync)
    apply_us: float  # per job: applying its operations
    complete_us: float  # per job: its future and the submitter's done callback (next submit)
    kib_per_commit: float  # bytes the process wrote (LMDB's page writes) per commit

    @classmethod
    def of(cls, rate: float, m: dict[str, int]) -> Run:
        # .get: stores older than the writer time split report 0 (before/after runs).
        commits, jobs = max(1, m["commits"]), max(1, m["jobs_committed"])
        return cls(
            rate,
            jobs / commits,
            m.get("commit_us", 0) / commits / 1000,
            m.get("apply_us", 0) / jobs,
            m.get("complete_us", 0) / jobs,
            m.get("written", 0) / commits / 1024,
        )

    def split(self) -> str:
        return (
            f"[{self.jobs_per_commit:.0f} jobs/commit; writer per job: apply"
            f" {self.apply_us:.1f} us, future+callback {self.complete_us:.1f} us;"
            f" commit {self.commit_ms:.2f} ms, {self.kib_per_commit:.0f} KiB written]"
        )


def bytes_written() -> int:
    """Bytes this process has passed to write(2)/pwrite(2) (Linux ``/proc/self/io``
    ``wchar``; 0 elsewhere). During a run only the writer thread writes: LMDB's dirty
    pages and meta page, so per commit this counts the pages a commit copies and fsyncs,
    a number that, unlike the commit time, does not move with the disk's latency."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def median_run(fn: Callable[[], Run], runs: int) -> Run:
    """The run with the median rate (its own time split, not a mix of runs)."""
    results = sorted((fn() for _ in range(runs)), key=lambda r: r.rate)
    return results[len(results) // 2]


def _fresh_dir() -> str:
    return tempfile.mkdtemp(prefix="jetmq-bench-", dir=os.environ.get("BENCH_DIR"))


def _drive(
    s: Store, chains: list[Callable[[], None]], done: threading.Event, seconds: float
) -> tuple[float, dict[str, int]]:
    """Start every chain, wait until the last one stops; elapsed time and the metrics' change."""
    before = s.metrics()
    written = bytes_written()
    t0 = time.perf_counter()
    for start in chains:
        start()
    done.wait(seconds + 30)
    elapsed = time.perf_counter() - t0
    m = {k: v - before[k] for k, v in s.metrics().items()}
    m["written"] = bytes_written() - written
    return elapsed, m


def appends_per_s(
    submitters: int,
    seconds: float,
    shared_subject: bool = False,
    futures: bool = False,
    max_batch_jobs: int = 4096,
) -> Run:
    """Closed loop: each submitter submits one ``Publish`` and, once it is durable, the next.

    Completion through ``Store.submit_then`` (a callback), or with ``futures`` through
    ``Store.submit`` and the future's done callback."""
    d = _fresh_dir()
    try:
        with Store.open(d, sync="always", max_batch_jobs=max_batch_jobs) as s:
            s.create_stream({"name": "B", "subjects": ["b.>"]})
            done = threading.Event()
            lock = threading.Lock()
            counts = [0] * submitters
            live = [submitters]
            errors: list[str] = []
            stop_at = time.perf_counter() + seconds

            def chain(i: int) -> Callable[[], None]:
                subject = "b.all" if shared_subject else f"b.{i}"

                def next_one(res: list[OpResult] | BaseException | None = None) -> None:
                    if res is not None:
                        if type(res) is not list or type(res[0]) is not PubAck:
                            errors.append(repr(res))
                        counts[i] += 1  # only this chain's callbacks touch counts[i]
                    if errors or time.perf_counter() >= stop_at:
                        with lock:
                            live[0] -= 1
                            if not live[0]:
                                done.set()
                        return
                    if futures:
                        s.submit([Publish(subject, PAYLOAD)]).add_done_callback(by_future)
                    else:
                        s.submit_then([Publish(subject, PAYLOAD)], next_one)

                def by_future(fut: Future[list[OpResult]]) -> None:
                    next_one(fut.result())

                return next_one

            elapsed, m = _drive(s, [chain(i) for i in range(submitters)], done, seconds)
            if errors:
                raise RuntimeError(f"appends: unexpected results {errors[:3]}")
            return Run.of(sum(counts) / elapsed, m)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def appends_one_txn_each(submitters: int, seconds: float) -> Run:
    """:func:`appends_per_s` with group commit switched off (``max_batch_jobs=1``): the
    writer commits (and fsyncs) every submission in a transaction of its own, as a store
    without group commit would. The baseline group commit is measured against."""
    run = appends_per_s(submitters, seconds, max_batch_jobs=1)
    assert run.jobs_per_commit == 1
    return run


def bare_writer_per_s(submitters: int, seconds: float, group: bool) -> float:
    """The floor of any Python writer on this disk: a bare writer thread that makes only the
    LMDB writes the store makes for a plain append — the message record, its ``subjects``
    index key, once per commit each touched subject's ``subjcount`` record and the stream
    state (keys.py's bytes, one stream) — with none of the engine's checks or bookkeeping,
    fsyncing every commit. Closed loop as in :func:`appends_per_s` (callback submitters);
    ``group=False`` commits every message alone. Appends per second."""
    d = _fresh_dir()
    try:
        env = lmdb.open(d, map_size=1 << 30, max_dbs=16, sync=True, metasync=True)
        msgs, index, counts, state = (
            env.open_db(name)
            for name in (
                keys_mod.DB_MSGS,
                keys_mod.DB_SUBJECTS,
                keys_mod.DB_SUBJCOUNT,
                keys_mod.DB_SSTATE,
            )
        )
        jobs: queue.SimpleQueue[tuple[str, Callable[[int], None]] | None] = queue.SimpleQueue()
        done = threading.Event()
        lock = threading.Lock()
        live = [submitters]
        total = [0]
        stop_at = time.perf_counter() + seconds
        max_jobs = 4096 if group else 1

        def writer() -> None:
            seq = 0
            records: dict[str, list[int]] = {}
            while True:
                item = jobs.get()
                if item is None:
                    return
                batch = [item]
                while len(batch) < max_jobs and not jobs.empty():
                    nxt = jobs.get_nowait()
                    if nxt is None:
                        return
                    batch.append(nxt)
                with env.begin(write=True) as txn:
                    mcur, icur, ccur = txn.cursor(msgs), txn.cursor(index), txn.cursor(counts)
                    now = time.time_ns()
                    touched = set()
                    for subject, _ in batch:
                        seq += 1
                        mcur.put(
                            keys_mod.msg_key(1, seq), keys_mod.pack_msg(now, subject, b"", PAYLOAD)
                        )
                        icur.put(keys_mod.subject_index_key(1, subject.encode(), seq), b"")
                        rec = records.setdefault(subject, [0, seq, seq])
                        rec[0] += 1
                        rec[2] = seq
                        touched.add(subject)
                    for subject in touched:
                        ccur.put(
                            keys_mod.subjcount_key(1, subject),
                            keys_mod.pack_subject_counts(*records[subject]),
                        )
                    txn.put(
                        keys_mod.u64(1),
                        keys_mod.pack_stream_state(1, seq, seq, seq * 160, now, now, len(records)),
                        db=state,
                    )
                for _, on_done in batch:
                    on_done(seq)

        def chain(i: int) -> Callable[[int], None]:
            subject = f"b.{i}"

            def next_one(seq: int = 0) -> None:
                if seq:
                    total[0] += 1  # the writer thread runs every callback
                if time.perf_counter() >= stop_at:
                    with lock:
                        live[0] -= 1
                        if not live[0]:
                            done.set()
                    return
                jobs.put((subject, next_one))

            return next_one

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        for start in [chain(i) for i in range(submitters)]:
            start(0)
        done.wait(seconds + 30)
        elapsed = time.perf_counter() - t0
        jobs.put(None)
        thread.join()
        env.close()
        return total[0] / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


# The broker's records (broker/persist/records.py): a stored message with its four headers, and a
# pending entry of about 60 bytes per subscriber.
_BROKER_HEADERS = (
    ("Mqtt-Topic", '"sensors/room-1/temperature"'),
    ("Mqtt-Qos", "1"),
    ("Mqtt-Retain", "0"),
    ("Mqtt-Props", "{}"),
)
_PENDING = b'{"m":"1a2b3c4d-12345","p":0,"q":1,"r":0,"s":[],"st":0}'
# A single recipient's pending entry holds the message: its headers and the entry's record.
_INLINE_HEADERS = (*_BROKER_HEADERS, ("Mqtt-Pend", '{"p":0,"q":1,"r":0,"s":[],"st":0}'))


def broker_pattern_per_s(submitters: int, seconds: float, inline: bool = False) -> Run:
    """The broker's QoS 1 shapes (``broker/persist/records.py``). By default a message stored once
    and referenced by a pending entry (what the broker writes per message and recipient
    when a message has several persistent recipients): per MQTT message one job of two
    ``Publish`` (the message in ``$MQTT_msgs``, the pending entry in ``$MQTT_pend``), then,
    once that is durable, one job of two ``DeleteMsg`` (the PUBACK) — 2 appends + 2
    deletes in 2 commits. With ``inline`` the single-recipient shape: the pending entry
    holds the message (its headers plus ``Mqtt-Pend``), one append and one delete.
    Returns messages per second."""
    d = _fresh_dir()
    try:
        with Store.open(d, sync="always") as s:
            s.create_stream({"name": "$MQTT_msgs", "subjects": ["$MQTT.msgs.>"]})
            s.create_stream({"name": "$MQTT_pend", "subjects": ["$MQTT.pend.>"]})
            done = threading.Event()
            lock = threading.Lock()
            counts = [0] * submitters
            live = [submitters]
            stop_at = time.perf_counter() + seconds
            keys = itertools.count()
            errors: list[str] = []
            want_deleted = [True] if inline else [True, True]

            def chain(i: int) -> Callable[[], None]:
                pend_subject = f"$MQTT.pend.client{i:04d}"

                def deleted(fut: Future[list[OpResult]] | None = None) -> None:
                    if fut is not None:
                        if fut.result() != want_deleted:
                            errors.append(repr(fut.result()))
                        counts[i] += 1
                    if errors or time.perf_counter() >= stop_at:
                        with lock:
                            live[0] -= 1
                            if not live[0]:
                                done.set()
                        return
                    if inline:
                        ops = [Publish(pend_subject, PAYLOAD, _INLINE_HEADERS, stream="$MQTT_pend")]
                    else:
                        ops = [
                            Publish(
                                f"$MQTT.msgs.boot-{next(keys)}",
                                PAYLOAD,
                                _BROKER_HEADERS,
                                stream="$MQTT_msgs",
                            ),
                            Publish(pend_subject, _PENDING, stream="$MQTT_pend"),
                        ]
                    s.submit(ops).add_done_callback(stored)

                def stored(fut: Future[list[OpResult]]) -> None:
                    res = fut.result()
                    acks = [r for r in res if isinstance(r, PubAck)]
                    if len(acks) != len(res):
                        errors.append(repr(res))
                        return deleted()
                    streams = ("$MQTT_pend",) if inline else ("$MQTT_msgs", "$MQTT_pend")
                    ops = [DeleteMsg(st, ack.seq) for st, ack in zip(streams, acks, strict=True)]
                    s.submit(ops).add_done_callback(deleted)

                return deleted

            elapsed, m = _drive(s, [chain(i) for i in range(submitters)], done, seconds)
            if errors:
                raise RuntimeError(f"broker pattern: unexpected results {errors[:3]}")
            assert s.stream_state("$MQTT_msgs").messages <= submitters
            assert s.stream_state("$MQTT_pend").messages <= submitters
            return Run.of(sum(counts) / elapsed, m)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sparse_limit_per_s(
    limit: dict[str, int], n: int, keys: int = 10_000, reopen: bool = False
) -> float:
    """Appends/s (``sync="batch"``, 1,000 per submission, second half of ``n``) on
    ``keys`` subjects updated round robin, so each subject has a message every ``keys``
    sequences, under a limit that removes a message per append: ``max_msgs_per_subject``
    (a key-value history: each append removes its subject's oldest) or ``max_msgs`` (each
    append removes the stream's head). Every removal takes a subject's first message whose
    successor lies ``keys`` sequences later. With ``reopen`` the store is closed and opened
    again after the first half (a restart: nothing cached from the appends before)."""
    d = _fresh_dir()
    try:
        s = Store.open(d, sync="batch")
        try:
            s.create_stream({"name": "K", "subjects": ["k.>"], **limit})
            t_half = 0.0
            for start in range(0, n, 1000):
                if start == n // 2:
                    if reopen:
                        s.close()
                        s = Store.open(d, sync="batch")
                    t_half = time.perf_counter()
                ops = [Publish(f"k.{i % keys}", PAYLOAD) for i in range(start, start + 1000)]
                s.submit(ops).result()
            return (n - n // 2) / (time.perf_counter() - t_half)
        finally:
            s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


class LongOp(NamedTuple):
    """A purge or stream deletion of a big stream while publishers keep appending."""

    seconds: float  # the operation, submitted to completed
    commits: int  # transactions it took
    appends: int  # other appends completed while it ran
    wait_max_ms: float  # the longest any append waited (submit to durable) meanwhile


BIG_CONFIG: Final = {"name": "BIG", "subjects": ["big.>"], "allow_rollup_hdrs": True}
_LPS: Final = {
    "durable_name": "lps",
    "ack_policy": "none",
    "deliver_policy": "last_per_subject",
    "filter_subject": "big.*",
}
# Each an operation submitted as it is, or a call of the Store's API (which may read on
# the caller's thread before it submits).
LONG_OPS: dict[str, Op | Callable[[Store], object]] = {
    "purge": PurgeStream("BIG"),
    "purge keeping 1,000 of big.*": PurgeStream("BIG", filter="big.*", keep=1000),
    "purge keeping half of big.* (Store.purge_stream)": lambda s: s.purge_stream(
        "BIG", filter="big.*", keep=s.stream_state("BIG").messages // 2
    ),
    "create a last_per_subject consumer on big.*": CreateConsumer(
        "BIG", ConsumerConfig.from_wire(_LPS)
    ),
    "update to max_msgs 1,000": CreateStream(
        StreamConfig.from_wire({**BIG_CONFIG, "max_msgs": 1000}), True
    ),
    "update to max_msgs_per_subject 10": CreateStream(
        StreamConfig.from_wire({**BIG_CONFIG, "max_msgs_per_subject": 10}), True
    ),
    "publish with Nats-Rollup: all": Publish("big.0", PAYLOAD, (("Nats-Rollup", "all"),)),
    "delete": DeleteStream("BIG"),
}

# The LONG_OPS also measured on the stream whose messages each have a subject of their own.
UNIQUE_LONG_OPS: Final = (
    "purge keeping half of big.* (Store.purge_stream)",
    "create a last_per_subject consumer on big.*",
)


class _AppendLoad:
    """8 callback submitters appending to stream L (created here) until :meth:`stop`;
    :meth:`during` summarises the appends that overlapped an interval."""

    def __init__(self, s: Store) -> None:
        s.create_stream({"name": "L", "subjects": ["load.>"]})
        self.waits: list[tuple[float, float]] = []  # (submitted, waited)
        self._stop = threading.Event()
        self._live = [8]
        self._lock = threading.Lock()
        self._all_stopped = threading.Event()
        for i in range(8):
            self._chain(s, i)()
        time.sleep(0.3)

    def _chain(self, s: Store, i: int) -> Callable[[], None]:
        sent = [0.0]

        def next_one(res: list[OpResult] | BaseException | None = None) -> None:
            now = time.perf_counter()
            if res is not None:
                self.waits.append((sent[0], now - sent[0]))  # on the writer thread only
            if self._stop.is_set():
                with self._lock:
                    self._live[0] -= 1
                    if not self._live[0]:
                        self._all_stopped.set()
                return
            sent[0] = now
            s.submit_then([Publish(f"load.{i}", PAYLOAD)], next_one)

        return next_one

    def stop(self) -> None:
        time.sleep(0.1)
        self._stop.set()
        self._all_stopped.wait(30)

    def during(self, t0: float, t1: float, commits: int) -> LongOp:
        # Appends in flight at any moment in [t0, t1] (completed after it began).
        overlapping = [w for sent, w in self.waits if t0 - w <= sent <= t1]
        completed = sum(1 for sent, w in self.waits if t0 <= sent + w <= t1)
        return LongOp(t1 - t0, commits, completed, max(overlapping, default=0) * 1000)


def _copy(built: str) -> str:
    d = _fresh_dir()
    shutil.rmtree(d)
    shutil.copytree(built, d)
    os.sync()  # else the first fsynced commit writes the whole copy back
    return d


def long_op_under_load(built: str, op: str, remove_slice: int) -> LongOp:
    """A copy of ``built`` (:func:`build_big_stream`), then ``op`` (a key of LONG_OPS) on
    stream BIG while 8 callback submitters append to another stream (``sync=always``):
    how long the operation takes and how long each append waited meanwhile. A
    ``remove_slice`` beyond the stream's size is the operation in one transaction."""
    d = _copy(built)
    try:
        with Store.open(d, remove_slice=remove_slice) as s:
            load = _AppendLoad(s)
            commits = s.metrics()["commits"]
            t0 = time.perf_counter()
            call = LONG_OPS[op]
            if callable(call):
                res: Any = call(s)
            else:
                res = s.submit([call]).result(timeout=600)[0]
            t1 = time.perf_counter()
            op_commits = s.metrics()["commits"] - commits
            load.stop()
            if op.startswith("purge keeping half"):
                assert isinstance(res, int), res
                assert res > 0, res
            elif op.startswith("purge"):
                assert type(res) is PurgeResult, res
                assert res.purged > 0, res
            elif op.startswith("create"):
                assert type(res) is ConsumerInfo, res
                assert res.num_pending == s.stream_state("BIG").num_subjects, res
            elif op.startswith("publish"):
                assert type(res) is PubAck, res
                assert s.stream_state("BIG").messages == 1
            elif op.startswith("update"):
                assert type(res) is StreamInfo, res
                assert res.state.messages in (1000, 1002), res  # 10 of 100 subjects, big.sparse 2
            else:
                assert res is True, res
            return load.during(t0, t1, op_commits)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# A no_wait pull of one by a new consumer of BIG with this config, on the stream of
# build_big_stream (100 subjects) or with unique subjects (build_big_stream(unique=True):
# too many to go through the subject index), and whether it finds the stream's last
# message (big.sparse) or gets 404 No Messages.
PULLS: dict[str, tuple[dict[str, Any], bool, bool]] = {
    "no_wait pull, filter *.none (no such subject)": ({"filter_subject": "*.none"}, False, False),
    "no_wait pull, filter *.sparse from seq 2": (
        {"filter_subject": "*.sparse", "deliver_policy": "by_start_sequence", "opt_start_seq": 2},
        False,
        True,
    ),
    "no_wait pull, filter *.none, unique subjects": ({"filter_subject": "*.none"}, True, False),
    "no_wait pull, filter *.sparse from seq 2, unique subjects": (
        {"filter_subject": "*.sparse", "deliver_policy": "by_start_sequence", "opt_start_seq": 2},
        True,
        True,
    ),
}


def pull_under_load(built: str, pull: str) -> LongOp:
    """:func:`long_op_under_load` for a pull of PULLS on a copy of ``built`` (BIG), answered
    by an event; ticks are submitted whenever the store says something is due, as the
    broker's loop does. How long it took and how long each append waited meanwhile."""
    d = _copy(built)
    cfg, _, found = PULLS[pull]
    answered = threading.Event()
    answer: list[Any] = []

    def on_event(events: Sequence[Any]) -> None:
        for e in events:
            if getattr(e, "reply", None) == "inbox":
                answer.append(e)
                answered.set()

    try:
        with Store.open(d, on_event=on_event) as s:
            s.create_consumer("BIG", {"durable_name": "p", "ack_policy": "explicit", **cfg})
            load = _AppendLoad(s)
            commits = s.metrics()["commits"]
            t0 = time.perf_counter()
            s.submit([Pull("BIG", "p", "inbox", no_wait=True)]).result(timeout=60)
            while not answered.is_set():
                due = s.next_deadline()
                if due is not None and due <= time.time_ns():
                    s.tick().result(timeout=60)
                else:
                    answered.wait(0.001)
            t1 = time.perf_counter()
            op_commits = s.metrics()["commits"] - commits
            load.stop()
            if found:
                assert [type(e) for e in answer] == [Delivery], answer
                assert answer[0].msg.subject == "big.sparse", answer
            else:
                assert [(type(e), e.code) for e in answer] == [(PullStatus, 404)], answer
            return load.during(t0, t1, op_commits)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def txn_per_message(n: int) -> float:
    d = _fresh_dir()
    try:
        env = lmdb.open(d, map_size=1 << 28, sync=True, metasync=True)
        t0 = time.perf_counter()
        for i in range(n):
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, "big"), PAYLOAD)
        elapsed = time.perf_counter() - t0
        env.close()
        return n / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


def raw_commit_ms(scattered: bool, rounds: int) -> float:
    """Median time of one fsynced transaction of 64 puts into a 60,000-key table, the keys
    either appended at its end or each in a different place (raw py-lmdb, one database).

    This is what separates "one subject per submitter" from "one shared subject": each
    stored message adds a key to its subject's run in the per-subject index, so a batch
    with 64 distinct subjects dirties (copies, writes, fsyncs) about 64 index pages.
    """
    d = _fresh_dir()
    try:
        env = lmdb.open(d, map_size=1 << 30, sync=True, metasync=True)
        with env.begin(write=True) as txn:
            for i in range(60_000):
                txn.put(b"%06d" % i + bytes(20), b"")
        times = []
        seq = 1 << 40
        for r in range(rounds):
            t0 = time.perf_counter()
            with env.begin(write=True) as txn:
                for i in range(64):
                    seq += 1
                    head = b"%06d" % ((r * 64 + i) * 937 % 60_000) if scattered else b"999999"
                    txn.put(head + seq.to_bytes(8, "big"), b"")
            times.append(time.perf_counter() - t0)
        env.close()
        return statistics.median(times) * 1000
    finally:
        shutil.rmtree(d, ignore_errors=True)


def raw_put_ceiling(n: int) -> float:
    d = _fresh_dir()
    try:
        env = lmdb.open(d, map_size=1 << 30, sync=False, metasync=False)
        t0 = time.perf_counter()
        with env.begin(write=True) as txn:
            for i in range(n):
                txn.put(i.to_bytes(8, "big"), PAYLOAD)
        elapsed = time.perf_counter() - t0
        env.close()
        return n / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


def consumer_cycles_per_s(n: int) -> float:
    d = _fresh_dir()
    try:
        with Store.open(d, sync="always") as s:
            s.create_stream({"name": "B", "subjects": ["b.>"]})
            for start in range(0, n, 1000):
                s.submit([Publish("b.x", PAYLOAD) for _ in range(min(1000, n - start))]).result()
            s.create_consumer("B", {"durable_name": "c", "ack_policy": "explicit"})
            acked = 0
            done = threading.Event()

            def hook(events: Sequence[Event]) -> None:
                nonlocal acked
                seqs = [e.msg.seq for e in events if isinstance(e, Delivery)]
                if not seqs:
                    return
                acked += len(seqs)
                ops: list[Ack | Pull] = [Ack("B", "c", q) for q in seqs]
                if acked >= n:
                    done.set()
                else:
                    ops.append(Pull("B", "c", "inbox", batch=100))
                s.submit(ops)

            s.set_event_hook(hook)
            t0 = time.perf_counter()
            s.pull("B", "c", "inbox", batch=100)
            done.wait(120)
            elapsed = time.perf_counter() - t0
            return acked / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _engine_cpu_us(n: int, cycles: bool) -> float:
    """CPU µs per append (``cycles``: per deliver+ack cycle) of Engine.apply alone."""
    d = _fresh_dir()
    env = Env(d, sync=False)
    try:
        eng = Engine(env, time.time_ns, "bench")

        def apply(*jobs: list[Any]) -> list[Any]:
            txn = env.begin_write()
            events = eng.apply(txn, [Job(ops) for ops in jobs])
            txn.commit()
            return events

        apply([CreateStream(StreamConfig.from_wire({"name": "S", "subjects": ["s.>"]}))])
        cfg: dict[str, Any] = {"durable_name": "c", "ack_policy": "explicit"}
        if cycles:
            for _ in range(0, n, 1000):
                apply([Publish("s.x", PAYLOAD) for _ in range(1000)])
        else:
            cfg["filter_subject"] = "s.>"
        apply([CreateConsumer("S", ConsumerConfig.from_wire(cfg))])
        t0 = time.process_time()
        if cycles:
            done = 0
            events = apply([Pull("S", "c", "inbox", batch=100)])
            while done < n:
                seqs = [e.msg.seq for e in events if isinstance(e, Delivery)]
                done += len(seqs)
                ops: list[Any] = [Ack("S", "c", q) for q in seqs]
                if done < n:
                    ops.append(Pull("S", "c", "inbox", batch=100))
                events = apply(ops)
        else:
            for i in range(0, n, 64):
                apply(*([Publish(f"s.{(i + k) % 1000}", PAYLOAD)] for k in range(64)))
        return (time.process_time() - t0) / n * 1e6
    finally:
        env.close()
        shutil.rmtree(d, ignore_errors=True)


# The header block of a broker's pending entry holding its message (broker/persist/records.py
# ``message_block`` with ``Mqtt-Pend``; the store must not import the broker).
PEND_BLOCK: Final = (
    b'NATS/1.0\r\nMqtt-Topic: "bench/t"\r\nMqtt-Qos: 1\r\nMqtt-Retain: 0\r\n'
    b'Mqtt-Props: {}\r\nMqtt-Pend: {"p":0,"q":1,"r":0,"s":[],"st":0}\r\n\r\n'
)


def _pend_cpu_us(n: int, run: int, sessions: int = 16) -> tuple[float, float]:
    """CPU µs of Engine.apply (and its commit) per pending entry's append and per its
    deletion, the broker's pattern on a ``$MQTT_pend``-like stream (no consumer): each
    round appends 64 entries (one Publish per job, 100-byte payload and the broker's header
    block), ``run`` consecutive ones per session's subject, then deletes them in jobs of
    ``run`` DeleteMsg ops (a session's acks, in order), all in one batch."""
    d = _fresh_dir()
    env = Env(d, sync=False)
    try:
        eng = Engine(env, time.time_ns, "bench")

        def apply(jobs: list[Job]) -> float:
            t0 = time.process_time()
            txn = env.begin_write()
            eng.apply(txn, jobs)
            txn.commit()
            return time.process_time() - t0

        subjects = [f"$MQTT.pend.{i:024x}" for i in range(sessions)]
        apply(
            [
                Job(
                    [
                        CreateStream(
                            StreamConfig.from_wire({"name": "P", "subjects": ["$MQTT.pend.>"]})
                        )
                    ]
                )
            ]
        )
        t_pub = t_del = 0.0
        seq = 1
        for r in range(n // 64):
            t_pub += apply(
                [
                    Job(
                        [
                            Publish(
                                subjects[(r * 64 + k) // run % sessions], PAYLOAD, PEND_BLOCK, "P"
                            )
                        ]
                    )
                    for k in range(64)
                ]
            )
            t_del += apply(
                [Job([DeleteMsg("P", seq + k + j) for j in range(run)]) for k in range(0, 64, run)]
            )
            seq += 64
        return t_pub / n * 1e6, t_del / n * 1e6
    finally:
        env.close()
        shutil.rmtree(d, ignore_errors=True)


def engine_cpu() -> int:
    pub = min(_engine_cpu_us(19_200, False) for _ in range(5))
    cyc = min(_engine_cpu_us(20_000, True) for _ in range(5))
    print(
        f"  engine CPU (best of 5): {pub:6.2f} us per append (64 per batch, one filtered"
        f" consumer); {cyc:6.2f} us per explicit-ack deliver+ack cycle (pulls of 100)"
    )
    for run in (1, 8, 64):
        pairs = [_pend_cpu_us(19_200, run) for _ in range(RUNS)]
        app = statistics.median(a for a, _ in pairs)
        dele = statistics.median(b for _, b in pairs)
        print(
            f"  engine CPU (median of {RUNS}) per pending entry, deleted in runs of {run:2}:"
            f" append {app:5.2f} us, deletion {dele:5.2f} us"
        )
    return 0


def build_big_stream(path: str, n: int, unique: bool = False) -> None:
    """``n`` messages on ``big.0`` ... ``big.99`` (with ``unique``, each on a subject of its
    own), except the first and the last, which are on ``big.sparse`` (a subject whose scan
    spans the whole stream)."""
    with Store.open(path, sync="batch") as s:
        s.create_stream(BIG_CONFIG)
        futs = []
        for start in range(0, n, 2000):
            futs.append(
                s.submit(
                    [
                        Publish(
                            "big.sparse"
                            if i in (0, n - 1)
                            else f"big.u{i}"
                            if unique
                            else f"big.{i % 100}",
                            PAYLOAD,
                        )
                        for i in range(start, min(n, start + 2000))
                    ]
                )
            )
            if len(futs) > 8:
                futs.pop(0).result()
        for f in futs:
            f.result()
        assert s.stream_state("BIG").messages == n


def reopen_seconds(path: str) -> float:
    t0 = time.perf_counter()
    with Store.open(path) as s:
        st = s.stream_state("BIG")
        elapsed = time.perf_counter() - t0
        assert st.messages > 0
    return elapsed


def sparse_lookups_ms(path: str, n: int) -> tuple[float, float]:
    """Median ms of last-by-subject and of next-by-subject from seq 2 on ``big.sparse``
    (the second lookup finds seq ``n`` after skipping everything in between)."""
    with Store.open(path) as s:
        last, nxt = [], []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            assert s.last_by_subject("BIG", "big.sparse").seq == n
            t1 = time.perf_counter()
            assert s.next_by_subject("BIG", "big.sparse", 2).seq == n
            t2 = time.perf_counter()
            last.append(t1 - t0)
            nxt.append(t2 - t1)
    return statistics.median(last) * 1000, statistics.median(nxt) * 1000


def disk_bytes_per_msg(path: str, n: int) -> float:
    env = lmdb.open(path, readonly=True, max_dbs=32, lock=False)
    info = env.info()
    used = (info["last_pgno"] + 1) * env.stat()["psize"]
    env.close()
    return used / n


def _print_long_op(what: str, lo: LongOp) -> None:
    print(
        f"  {what}, while 8 submitters append to another stream: {lo.seconds:6.2f} s,"
        f" {lo.commits:,} commits; {lo.appends:,} appends completed meanwhile, the longest"
        f" waited {lo.wait_max_ms:8.1f} ms"
    )


def ratio_pairs(pairs: int, seconds: float) -> int:
    """The issue's ratio alone: group commit off and on at 64 submitters, alternating, so
    both sides see the same minutes of the disk."""
    off: list[float] = []
    on: list[float] = []
    for _ in range(pairs):
        base = appends_one_txn_each(64, seconds)
        grouped = appends_per_s(64, seconds)
        off.append(base.rate)
        on.append(grouped.rate)
        print(f"  group commit off {base.rate:10,.0f} appends/s  {base.split()}")
        print(f"  group commit on  {grouped.rate:10,.0f} appends/s  {grouped.split()}")
    lo, hi = statistics.median(off), statistics.median(on)
    print(
        f"  median of {pairs}: off {lo:,.0f} /s, on {hi:,.0f} /s = {hi / lo:.1f}x"
        f" (per pair {min(h / o for h, o in zip(on, off, strict=True)):.1f}x"
        f" to {max(h / o for h, o in zip(on, off, strict=True)):.1f}x)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each append run")
    ap.add_argument("--recovery-msgs", type=int, default=1_000_000)
    ap.add_argument(
        "--ratio-pairs",
        type=int,
        metavar="N",
        help="only the group-commit ratio: N alternating runs of the 64-submitter rows,"
        " group commit off and on, then their medians",
    )
    ap.add_argument("--consumer-cycles", action="store_true", help="only the consumer row")
    ap.add_argument(
        "--engine-cpu", action="store_true", help="only the engine's CPU time per operation"
    )
    args = ap.parse_args(argv)
    if args.ratio_pairs:
        return ratio_pairs(args.ratio_pairs, args.seconds)
    if args.engine_cpu:
        return engine_cpu()
    if args.consumer_cycles:
        cyc = statistics.median(consumer_cycles_per_s(20_000) for _ in range(RUNS))
        print(f"  explicit-ack consumer deliver+ack: {cyc:12,.0f} cycles/s (median of {RUNS})")
        return 0
    secs = 0.3 if args.quick else args.seconds
    rec_n = 20_000 if args.quick else args.recovery_msgs
    runs = 1 if args.quick else RUNS

    print(f"jetmq store benchmark (median of {runs}; 100-byte payloads)")
    per_txn = statistics.median(txn_per_message(100 if args.quick else 300) for _ in range(runs))
    ceiling = statistics.median(raw_put_ceiling(100_000) for _ in range(runs))
    print(f"  one txn + fsync per message (baseline): {per_txn:12,.0f} msgs/s")
    print(f"  raw py-lmdb put loop, no fsync (ceiling): {ceiling:10,.0f} msgs/s")
    rounds = 50 if args.quick else 300
    print(
        "  raw py-lmdb txn of 64 puts + fsync, keys appended:"
        f" {raw_commit_ms(False, rounds):6.2f} ms; 64 keys scattered over a 60,000-key table:"
        f" {raw_commit_ms(True, rounds):6.2f} ms"
    )
    unbatched = median_run(functools.partial(appends_one_txn_each, 64, secs), runs).rate
    print(
        f"  store, one transaction per message (group commit off), 64 submitters:"
        f" {unbatched:10,.0f} appends/s (baseline)"
    )
    one = 0.0
    for k in (1, 8, 64):
        run = median_run(functools.partial(appends_per_s, k, secs), runs)
        r = run.rate
        one = one or r
        print(
            f"  group commit, sync=always, {k:2d} submitters: {r:10,.0f} appends/s"
            f"  ({r / unbatched:5.1f}x store txn-per-msg, {r / per_txn:5.1f}x raw txn-per-msg,"
            f" {r / one:5.1f}x store at 1 submitter, {100 * r / ceiling:4.1f}% of ceiling)"
        )
        if k == 64:
            print(f"    {run.split()}")
    bare_one = statistics.median(bare_writer_per_s(64, secs, group=False) for _ in range(runs))
    bare = statistics.median(bare_writer_per_s(64, secs, group=True) for _ in range(runs))
    print(
        f"  bare Python writer (only the store's LMDB writes, no engine), 64 submitters:"
        f" {bare:10,.0f} appends/s grouped, {bare_one:8,.0f} /s one txn per message"
        f" ({bare / bare_one:5.1f}x; the store reaches {100 * r / bare:4.1f}% of it)"
    )
    run = median_run(lambda: appends_per_s(64, secs, futures=True), runs)
    print(
        f"  group commit, sync=always, 64 submitters completing through futures:"
        f" {run.rate:10,.0f} appends/s  ({run.rate / unbatched:5.1f}x store txn-per-msg)\n"
        f"    {run.split()}"
    )
    run = median_run(lambda: appends_per_s(64, secs, shared_subject=True), runs)
    print(
        f"  group commit, sync=always, 64 submitters, one shared subject: {run.rate:10,.0f}"
        f" appends/s  ({run.rate / per_txn:5.1f}x raw txn-per-msg)\n    {run.split()}"
    )
    run = median_run(lambda: broker_pattern_per_s(64, secs), runs)
    r = run.rate
    print(
        f"  broker pattern, 64 submitters (publish msg + pending entry, then delete both):"
        f" {r:10,.0f} msgs/s = {2 * r:,.0f} appends/s + {2 * r:,.0f} deletes/s\n"
        f"    {run.split()}"
    )
    run = median_run(lambda: broker_pattern_per_s(64, secs, inline=True), runs)
    print(
        f"  broker pattern, single recipient, 64 submitters (the pending entry holds the"
        f" message; publish it, then delete it): {run.rate:10,.0f} msgs/s\n    {run.split()}"
    )
    per_txn_after = statistics.median(
        txn_per_message(100 if args.quick else 300) for _ in range(runs)
    )
    print(
        f"  one txn + fsync per message (baseline, again at the end): {per_txn_after:8,.0f}"
        " msgs/s (the disk's fsync latency drifts: compare ratios only within a steady run)"
    )
    n = 20_000 if args.quick else 120_000
    for reopen in (False, True):
        hist = statistics.median(
            sparse_limit_per_s({"max_msgs_per_subject": 5}, n, reopen=reopen) for _ in range(runs)
        )
        head = statistics.median(
            sparse_limit_per_s({"max_msgs": n * 5 // 12}, n, reopen=reopen) for _ in range(runs)
        )
        print(
            "  sync=batch, 10,000 subjects round robin, each append removes a subject's first"
            f" message{', store reopened at half time' if reopen else ''}:"
            f" max_msgs_per_subject=5 {hist:10,.0f} appends/s;"
            f" max_msgs={n * 5 // 12:,} {head:10,.0f} appends/s"
        )
    cyc = statistics.median(
        consumer_cycles_per_s(2_000 if args.quick else 20_000) for _ in range(runs)
    )
    print(f"  explicit-ack consumer deliver+ack: {cyc:12,.0f} cycles/s")
    d = _fresh_dir()
    try:
        t0 = time.perf_counter()
        build_big_stream(d, rec_n)
        print(f"  built {rec_n:,} message stream in {time.perf_counter() - t0:.1f} s (sync=batch)")
        rt = statistics.median(reopen_seconds(d) for _ in range(runs))
        print(f"  reopen + stream info with {rec_n:,} messages: {rt * 1000:8.1f} ms")
        last_ms, next_ms = sparse_lookups_ms(d, rec_n)
        print(
            f"  subject on the first and last of {rec_n:,} messages: last-by-subject"
            f" {last_ms:.3f} ms, next-by-subject from seq 2 {next_ms:.1f} ms"
        )
        print(f"  disk per stored 100-byte message: {disk_bytes_per_msg(d, rec_n):8.1f} bytes")
        for op in LONG_OPS:
            for slice_ in (REMOVE_SLICE, rec_n * 10):
                lo = long_op_under_load(d, op, slice_)
                how = f"slices of {slice_:,}" if slice_ < rec_n else "one transaction"
                _print_long_op(f"{op} of the {rec_n:,} message stream, {how}", lo)
        for pull, (_, unique, _) in PULLS.items():
            if unique:
                continue
            _print_long_op(f"{pull} on the {rec_n:,} message stream", pull_under_load(d, pull))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    d = _fresh_dir()
    try:
        build_big_stream(d, rec_n, unique=True)
        for pull, (_, unique, _) in PULLS.items():
            if unique:
                lo = pull_under_load(d, pull)
                _print_long_op(f"{pull} on the {rec_n:,} message stream", lo)
        for op in UNIQUE_LONG_OPS:
            for slice_ in (REMOVE_SLICE, rec_n * 10):
                lo = long_op_under_load(d, op, slice_)
                how = f"slices of {slice_:,}" if slice_ < rec_n else "one transaction"
                _print_long_op(f"{op}, unique subjects, {how}", lo)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
