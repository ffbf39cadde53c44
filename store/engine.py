"""The writer-side engine: applies operations inside one write transaction per batch.

Writer thread only. It owns the catalog (store.catalog) of cached streams and consumers;
after an aborted batch :meth:`Engine.reset` reloads them from LMDB (restoring the
memory-only parts: waiting pull requests and push interest). Admin operations live in
:mod:`store.admin`, long ones in :mod:`store.slices`; both get the catalog, not the engine.

One batch runs in three phases: every operation in order (each gets a result; a
JetStream error is a result, never an abort), then delivery for every stream the batch
touched (push consumers with interest, pull consumers with waiting requests), then
interest/workqueue removal of messages no consumer needs any more. State records of
touched streams and consumers are written last. Events (deliveries, pull statuses,
advisories) are handed to the hook after the commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from store import admin, keys, slices
from store.catalog import Catalog
from store.consumers import ConsumerRt, Stream
from store.continuations import (
    AnyOp,
    CreateConsumerMore,
    EnforceLimits,
    PurgeMore,
    Reevaluate,
    SweepStream,
)
from store.counting import COUNT_AT_ONCE
from store.ctx import Ctx
from store.env import Env
from store.errors import JetStreamError, js_error
from store.models import (
    ConsumerConfig,
    StreamConfig,
    go_duration,
)
from store.nextmsg import SHORT_WALK
from store.ops import (
    Ack,
    AckKind,
    Advisory,
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteMsg,
    DeleteStream,
    GetConsumerInfo,
    GetStreamInfo,
    OpResult,
    PauseConsumer,
    PubAck,
    Publish,
    Pull,
    PullStatus,
    PurgeStream,
    SetPushInterest,
    Tick,
    WithdrawPulls,
)
from store.pulls import PullQueue, PullRequest
from store.purgeplan import plan_of
from store.rundelete import delete_run
from store.streams import Rollup, StreamRt
from store.writer import AnyJob

_K = TypeVar("_K")

# About 30 ms of the writer's time per slice of a whole-stream purge (≈170,000 removals/s
# on the reference machine), about 115 ms when the messages are scattered (a subject's).
REMOVE_SLICE: Final = 5_000
# Consumers whose wildcard filters match no message nearby walk at most this many records
# per message a slice may remove, per batch (store.consumers; two records walked cost
# about as much as a removal with its bookkeeping: ≈3 µs each).
WALK_PER_REMOVAL: Final = 2


class Engine:
    def __init__(
        self,
        env: Env,
        clock: Callable[[], int],
        node_name: str,
        remove_slice: int = REMOVE_SLICE,
    ) -> None:
        self.env = env
        self.remove_slice = remove_slice
        self.clock = clock
        # The streams and what admin and slice operations need around them.
        self.catalog = Catalog(clock, node_name, remove_slice)
        self.batch = self.catalog.batch  # what the batch touched (cleared as it starts)
        self._with_waiting: set[tuple[str, str]] = set()
        self._waiting_snapshot: dict[tuple[str, str], list[PullRequest]] = {}
        self._unfinished: list[tuple[AnyJob, AnyOp]] = []
        self.sweeps: list[int] = []  # ids of deleted streams / consumers with data left (at load)
        self.rechecks: list[Reevaluate] = []  # consumer-deletion checks to go on with
        self.purges: list[PurgeMore] = []  # purges to go on with
        self.trims: list[EnforceLimits] = []  # excess over lowered limits to go on removing
        with env.read() as txn:
            self._load_all(txn)

    @property
    def streams(self) -> dict[str, Stream]:
        return self.catalog.streams

    # -- loading -------------------------------------------------------------------------

    def _load_all(self, txn: Any, restore: bool = False) -> None:
        old = self.catalog.streams
        self.catalog.clear()
        dbs = self.env.dbs
        ctx = Ctx(txn, dbs, self.clock())
        cur = txn.cursor(db=dbs[keys.DB_STREAMS])
        for k, v in cur.iternext():
            name = bytes(k).decode()
            sid, created, cfg_json = keys.unpack_named_record(bytes(v), keys.STREAM_RECORD_VERSION)
            st: Stream = StreamRt(
                name, sid, StreamConfig.model_validate(json.loads(cfg_json)), created
            )
            raw = txn.get(keys.u64(sid), db=dbs[keys.DB_SSTATE])
            if raw is not None:
                st.load_state(bytes(raw))
            self.catalog.add_stream(st)
            ccur = txn.cursor(db=dbs[keys.DB_CONSUMERS])
            prefix = keys.sid_prefix(sid)
            if ccur.set_range(prefix):
                for ck, cv in ccur.iternext():
                    if not ck.startswith(prefix):
                        break
                    cname = keys.consumer_key_name(ck)
                    cid, ccreated, ccfg = keys.unpack_named_record(
                        bytes(cv), keys.CONSUMER_RECORD_VERSION
                    )
                    c = ConsumerRt(
                        st, cname, cid, ConsumerConfig.model_validate(json.loads(ccfg)), ccreated
                    )
                    craw = txn.get(keys.u64(cid), db=dbs[keys.DB_CSTATE])
                    if craw is not None:
                        c.load(ctx, bytes(craw))
                    prev = old.get(name)
                    if prev is not None and prev.sid == sid and cname in prev.consumers:
                        c.push_bound = prev.consumers[cname].push_bound
                        if restore:
                            c.waiting = PullQueue(self._waiting_snapshot.get((name, cname), ()))
                        else:
                            c.waiting = prev.consumers[cname].waiting
                    st.consumers[cname] = c
        for st in self.catalog.streams.values():
            self.catalog.refresh_deadline(st)
        self.catalog.publish_deadline()
        self._load_unfinished(txn.cursor(db=dbs[keys.DB_META]), old)

    def _load_unfinished(self, mcur: Any, old: dict[str, Stream]) -> None:
        """The long operations a crash or a close cut short (store.slices), from their
        ``meta`` records: Store.open goes on with each."""
        by_sid = {st.sid: st for st in self.catalog.streams.values()}
        self.sweeps = [
            sid for sid, _ in _meta_records(mcur, keys.META_SWEEP_PREFIX, keys.read_sweep_key)
        ]
        self.rechecks = []
        for sid, v in _meta_records(mcur, keys.META_RECHECK_PREFIX, keys.read_recheck_key):
            st = by_sid.get(sid)
            self.rechecks.append(Reevaluate(st.name if st else "", sid, keys.read_u64(v)))
        self.purges = []
        for (sid, rid), v in _meta_records(mcur, keys.META_PURGE_PREFIX, keys.read_purge_key):
            st = by_sid.get(sid)
            self.purges.append(PurgeMore(st.name if st else "", sid, plan_of(v), 0, rid))
        self.trims = []
        for sid, v in _meta_records(mcur, keys.META_TRIM_PREFIX, keys.read_trim_key):
            st = by_sid.get(sid)
            if st is None:
                continue  # a deleted stream's: its sweep drops it
            # Kept across a reload after an aborted batch: the continuation in flight
            # carries its number.
            prev = old.get(st.name)
            st.trim_gen = max(prev.trim_gen if prev is not None and prev.sid == sid else 1, 1)
            st.trimming = True
            self.trims.append(EnforceLimits(st.name, sid, keys.read_u64(v), st.trim_gen, False))

    def reset(self) -> None:
        """After an aborted batch: drop every cached object and reload what is committed.

        Pull requests come back as they were when the batch started.
        """
        self._unfinished = []
        with self.env.read() as txn:
            self._load_all(txn, restore=True)

    # -- the batch -----------------------------------------------------------------------

    def apply(self, txn: Any, jobs: list[AnyJob]) -> list[Any]:
        ctx = Ctx(txn, self.env.dbs, self.clock())
        self.batch.clear()
        ctx.walk_left = WALK_PER_REMOVAL * self.remove_slice
        ctx.walk_min = min(SHORT_WALK, self.remove_slice)
        ctx.count_min = min(COUNT_AT_ONCE, ctx.walk_left)
        # Pull requests live only in memory and are mutated while delivering: keep a copy
        # so an aborted batch restores them exactly (see reset()).
        self._waiting_snapshot = {}
        for key in list(self._with_waiting):
            c = self.catalog.find(key)
            if c is None or not c.waiting:
                self._with_waiting.discard(key)
                continue
            self._waiting_snapshot[key] = c.waiting.copy()
        publish = self._publish
        catalog = self.catalog
        for job in jobs:
            results = job.results
            ctx.job = job
            ops = job.ops
            n = len(ops)
            i = 0
            while i < n:
                op = ops[i]
                i += 1
                try:
                    # The hot paths skip the dispatch below.
                    if type(op) is Publish:
                        res: OpResult = publish(ctx, op)
                        if i < n and type(res) is PubAck and type(ops[i]) is Publish:
                            results.append(res)
                            i = self._publish_alike(ctx, ops, i, op, results)
                            continue
                    elif type(op) is DeleteMsg:
                        if i < n and type(ops[i]) is DeleteMsg:
                            # With the deletions after it, a walk per stream (their
                            # results appended there: store.rundelete).
                            i = delete_run(catalog, ctx, ops, i - 1, results)
                            continue
                        res = admin.delete_msg(catalog, ctx, op)
                    else:
                        res = self._op(ctx, op)
                except JetStreamError as exc:
                    res = exc
                results.append(res)
        self._finish(ctx)
        self._unfinished = ctx.unfinished
        return ctx.events

    def take_unfinished(self) -> list[tuple[AnyJob, AnyOp]]:
        """After a commit: the jobs the batch left to go on with (see store.writer)."""
        out, self._unfinished = self._unfinished, []
        return out

    def _finish(self, ctx: Ctx) -> None:
        for st in list(self.batch.streams):
            if st.name not in self.catalog.streams:
                continue
            for c in st.consumers.values():
                if c.deliver(ctx):
                    self.batch.consumers.add(c)
        # Interest/workqueue: drop messages no consumer needs any more (acks, deliveries
        # with ack_policy none). Removal never makes anything newly deliverable.
        checks = list(self.batch.retention)
        self.batch.retention.clear()
        for st, seq in checks:
            self._retention_remove(ctx, st, seq)
        for c in self.batch.consumers:
            if c.stream.name in self.catalog.streams and c.name in c.stream.consumers:
                c.save(ctx)
        for key in self._waiting_snapshot:
            left = self.catalog.find(key)
            if left is not None and not left.waiting:
                # Its last pull request left (filled, ended or expired): the time without
                # one starts now, so the next request has time to come (inactive_threshold).
                left.last_activity_ns = max(left.last_activity_ns, ctx.now)
                self.batch.streams.add(left.stream)
        streams = self.catalog.streams
        for st in self.batch.streams:
            if streams.get(st.name) is st:  # not deleted (nor deleted and re-created)
                st.flush_counts(ctx)
                st.save_state(ctx)
                self.catalog.refresh_deadline(st)
        for recs in ctx.cached:
            recs.bound_cache()
        self.catalog.publish_deadline()

    def next_deadline(self) -> int | None:
        return self.catalog.next_due

    def _op(self, ctx: Ctx, op: AnyOp) -> OpResult:
        match op:
            case Publish():
                return self._publish(ctx, op)
            case Ack():
                return self._ack(ctx, op)
            case Pull():
                return self._pull(ctx, op)
            case Tick():
                return self._tick(ctx, op)
            case CreateStream():
                return admin.create_stream(self.catalog, ctx, op)
            case DeleteStream():
                return admin.delete_stream(self.catalog, ctx, op.stream)
            case PurgeStream():
                return admin.purge(self.catalog, ctx, op)
            case DeleteMsg():
                return admin.delete_msg(self.catalog, ctx, op)
            case CreateConsumer():
                return admin.create_consumer(self.catalog, ctx, op)
            case DeleteConsumer():
                return admin.delete_consumer(
                    self.catalog, ctx, self.catalog.stream(op.stream), op.consumer
                )
            case WithdrawPulls():
                return self.catalog.consumer(op.stream, op.consumer).waiting.withdraw(op.reply)
            case SetPushInterest():
                c = self.catalog.consumer(op.stream, op.consumer)
                c.push_bound = op.bound
                c.last_activity_ns = ctx.now
                self.batch.streams.add(c.stream)
                return None
            case GetStreamInfo():
                return admin.stream_info(self.catalog, ctx, self.catalog.stream(op.stream))
            case GetConsumerInfo():
                return admin.consumer_info(
                    self.catalog, ctx, self.catalog.consumer(op.stream, op.consumer)
                )
            case PauseConsumer():
                return admin.pause_consumer(self.catalog, ctx, op)
            case PurgeMore():
                return slices.purge_more(self.catalog, ctx, op)
            case CreateConsumerMore():
                return admin.create_consumer_more(self.catalog, ctx, op)
            case EnforceLimits():
                return admin.enforce_more(self.catalog, ctx, op)
            case SweepStream():
                return slices.sweep(self.catalog, ctx, op.sid)
            case Reevaluate():
                return slices.reevaluate_more(self.catalog, ctx, op)
        raise TypeError(f"unknown operation {op!r}")

    # -- publish -------------------------------------------------------------------------

    def _publish(self, ctx: Ctx, op: Publish) -> OpResult:
        if op.stream is not None:
            named = self.catalog.streams.get(op.stream)
            if named is None:
                return js_error("stream_not_found")
            # Stream subjects never overlap, so a stream whose subjects match is the one
            # that captures the subject (no capture lookup: the broker's are mostly unique).
            st: Stream | None = named
            if not named.accepts(op.subject):
                return js_error("stream_not_match")
        else:
            st = self.catalog.capture(op.subject)
        if st is None:
            return None
        interest = True
        if st.config.retention == "interest":
            interest = any(c.counts.matches(op.subject) for c in st.consumers.values())
        res = st.publish(ctx, op.subject, op.payload, op.headers, interest)
        if type(res) is PubAck and not res.duplicate:
            self.batch.streams.add(st)
            if st.consumers:
                for c in st.consumers.values():
                    c.counts.on_append(res.seq, op.subject)
        elif isinstance(res, Rollup):
            self.batch.streams.add(st)
            for c in st.consumers.values():
                c.counts.on_append(res.ack.seq, op.subject)
            return slices.rollup(self.catalog, ctx, st, res.plan, res.ack)
        return res

    def _publish_alike(
        self, ctx: Ctx, ops: Sequence[Any], i: int, first: Publish, results: list[Any]
    ) -> int:
        """After ``first`` was stored as a new message: the ``Publish`` operations from
        ``ops[i]`` on to its stream and subject with its header block (the same bytes
        object: the broker's records of one run), appended without the checks that held
        for it when none depends on the message or the stream's state
        (``StreamRt.takes_as_is``), their results appended; where they end."""
        headers = first.headers
        if type(headers) is not bytes or b"Nats-" in headers:
            return i
        subject = first.subject
        stream = first.stream
        st = self.catalog.capture(subject) if stream is None else self.catalog.streams.get(stream)
        if st is None or not st.takes_as_is():
            return i
        n = len(ops)
        while i < n:
            op = ops[i]
            if (
                type(op) is not Publish
                or op.headers is not headers
                or op.subject != subject
                or op.stream != stream
            ):
                break
            res = st.append_as_is(ctx, subject, headers, op.payload)
            if res is None:
                break
            results.append(res)
            i += 1
        return i

    def _retention_remove(self, ctx: Ctx, st: Stream, seq: int) -> None:
        if st.config.retention == "limits":
            return
        rec = st.get_record(ctx, seq)
        if rec is None:
            return
        subject = keys.msg_subject(rec)
        for c in st.consumers.values():
            if c.counts.matches(subject) and c.needs(seq):
                return
        st.remove(ctx, seq)

    # -- acks and pulls ------------------------------------------------------------------

    def _ack(self, ctx: Ctx, op: Ack) -> OpResult:
        c = self.catalog.consumer(op.stream, op.consumer)
        self.batch.streams.add(c.stream)
        self.batch.consumers.add(c)
        kind = op.kind
        if kind in (AckKind.ACK, AckKind.NEXT, AckKind.TERM):
            released = c.ack(ctx, op.seq, op.cseq, term=kind is AckKind.TERM, reason=op.reason)
            for s in released:
                self.batch.retention.append((c.stream, s))
            if kind is AckKind.NEXT and op.next_reply:
                self._pull(ctx, Pull(op.stream, op.consumer, op.next_reply, batch=op.next_batch))
        elif kind is AckKind.NAK:
            c.nak(ctx, op.seq, op.delay_ns)
        elif kind is AckKind.WPI:
            c.progress(ctx, op.seq)
        return None

    def _pull(self, ctx: Ctx, op: Pull) -> OpResult:
        c = self.catalog.consumer(op.stream, op.consumer)
        cfg = c.config

        def status(code: int, desc: str) -> None:
            ctx.events.append(PullStatus(op.stream, op.consumer, op.reply, code, desc))

        if cfg.is_push:
            status(409, "Consumer is push based")
            return None
        batch = max(op.batch, 1)  # as nats-server 2.15.1 (measured): no batch is one
        if op.expires_ns < 0 or op.max_bytes < 0 or op.idle_heartbeat_ns < 0:
            status(400, "Bad Request - negative value")
            return None
        if op.idle_heartbeat_ns and 2 * op.idle_heartbeat_ns > op.expires_ns:
            # Measured against nats-server 2.15.1: no expires at all is "too large" too.
            status(400, "Bad Request - heartbeat value too large")
            return None
        if cfg.max_batch and batch > cfg.max_batch:
            status(409, f"Exceeded MaxRequestBatch of {cfg.max_batch}")
            return None
        if cfg.max_expires and op.expires_ns > cfg.max_expires:
            status(409, f"Exceeded MaxRequestExpires of {go_duration(cfg.max_expires)}")
            return None
        if cfg.max_bytes and op.max_bytes > cfg.max_bytes:
            status(409, f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}")
            return None
        if op.no_wait:
            refusal = c.no_wait_refusal(ctx, op.expires_ns > 0)
            if refusal is not None:
                c.last_activity_ns = ctx.now  # it still counts against inactive_threshold
                status(*refusal)
                return None
        if cfg.max_waiting and len(c.waiting) >= cfg.max_waiting:
            status(409, "Exceeded MaxWaiting")
            return None
        expires_at = ctx.now + op.expires_ns if op.expires_ns else 0
        hb = op.idle_heartbeat_ns
        c.waiting.append(
            PullRequest(
                op.reply, batch, expires_at, op.no_wait, op.max_bytes, hb, ctx.now + hb if hb else 0
            )
        )
        self._with_waiting.add((c.stream.name, c.name))
        c.last_activity_ns = ctx.now
        self.batch.streams.add(c.stream)
        self.batch.consumers.add(c)
        return None

    # -- timers --------------------------------------------------------------------------

    def _tick(self, ctx: Ctx, op: Tick) -> OpResult:
        saved = ctx.now
        if op.now is not None:
            ctx.now = op.now
        limit = slices.slice_limit(self.catalog, ctx)
        more = False
        try:
            for st in list(self.catalog.streams.values()):
                # A slice at most: the job goes on with the rest (other jobs commit between).
                if st.expire(ctx, limit):
                    more = True
                if st.config.duplicate_window:
                    st.dedupe.evict(ctx, st.config.duplicate_window)
                for c in list(st.consumers.values()):
                    if c.expire_acks(ctx):
                        self.batch.consumers.add(c)
                    waited = bool(c.waiting)
                    c.expire_requests(ctx)
                    if waited and not c.waiting:  # as in _finish: the time without starts
                        c.last_activity_ns = max(c.last_activity_ns, ctx.now)
                    ia = c.inactive_deadline()
                    if ia and ia <= ctx.now:
                        admin.delete_consumer(self.catalog, ctx, st, c.name)
                        ctx.events.append(
                            Advisory("consumer_deleted", st.name, c.name, time_ns=ctx.now)
                        )
                self.batch.streams.add(st)
            # Deliver now so redeliveries carry this tick's time.
            self._finish_timers(ctx)
        finally:
            ctx.now = saved
        if more:
            ctx.go_on(op)
        return None

    def _finish_timers(self, ctx: Ctx) -> None:
        for st in list(self.batch.streams):
            for c in st.consumers.values():
                if c.deliver(ctx):
                    self.batch.consumers.add(c)


def _meta_records(
    cur: Any, prefix: bytes, read_key: Callable[[bytes], _K | None]
) -> Iterator[tuple[_K, bytes]]:
    """``(parsed key, value)`` of the ``meta`` records whose keys start with ``prefix``,
    ``read_key`` parsing each key (None: past them)."""
    if not cur.set_range(prefix):
        return
    for k, v in cur.iternext():
        found = read_key(bytes(k))
        if found is None:
            return
        yield found, bytes(v)
