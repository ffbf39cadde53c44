"""The writer-side engine: applies operations inside one write transaction per batch.

Writer thread only. It owns the cached :class:`StreamRt` / :class:`ConsumerRt` objects;
after an aborted batch :meth:`Engine.reset` reloads them from LMDB (keeping the
memory-only parts: waiting pull requests and push interest).

One batch runs in three phases: every operation in order (each gets a result; a
JetStream error is a result, never an abort), then delivery for every stream the batch
touched (push consumers with interest, pull consumers with waiting requests), then
interest/workqueue removal of messages no consumer needs any more. State records of
touched streams and consumers are written last. Events (deliveries, pull statuses,
advisories) are handed to the hook after the commit.
"""

from __future__ import annotations

import secrets
import string
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from store import keys
from store.consumers import ConsumerRt, PullRequest
from store.env import Env
from store.errors import JetStreamError, js_error
from store.models import (
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
    StreamState,
    format_time,
    parse_time,
)
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
    Op,
    OpResult,
    PubAck,
    Publish,
    Pull,
    PullStatus,
    PurgeResult,
    PurgeStream,
    SetPushInterest,
    Tick,
)
from store.streams import Ctx, StreamRt
from store.subjects import is_valid_subject, subject_matches, subjects_overlap
from store.writer import Job

_NAME_ALPHABET = string.ascii_letters + string.digits

# Consumer fields an update may not change (spec §1.6), with nats-server's wording.
_FIXED_CONSUMER_FIELDS = {
    "deliver_policy": "deliver policy can not be updated",
    "opt_start_seq": "start sequence can not be updated",
    "opt_start_time": "start time can not be updated",
    "ack_policy": "ack policy can not be updated",
    "replay_policy": "replay policy can not be updated",
    "idle_heartbeat": "heart beats can not be updated",
    "flow_control": "flow control can not be updated",
    "max_waiting": "max waiting can not be updated",
    "mem_storage": "mem storage can not be updated",
}


class Engine:
    def __init__(self, env: Env, clock: Callable[[], int], node_name: str) -> None:
        self.env = env
        self.clock = clock
        self.node_name = node_name
        self.streams: dict[str, StreamRt] = {}
        self._capture: dict[str, StreamRt | None] = {}
        self.deadlines: dict[str, int] = {}
        self.next_due: int | None = None  # read from any thread (one attribute load)
        self._with_waiting: set[tuple[str, str]] = set()
        self._waiting_snapshot: dict[tuple[str, str], list[PullRequest]] = {}
        with env.read() as txn:
            self._load_all(txn)

    # -- loading -------------------------------------------------------------------------

    def _load_all(self, txn: Any, restore: bool = False) -> None:
        old = self.streams
        self.streams = {}
        self._capture = {}
        dbs = self.env.dbs
        ctx = Ctx(txn, dbs, self.clock())
        cur = txn.cursor(db=dbs[keys.DB_STREAMS])
        for k, v in cur.iternext():
            name = bytes(k).decode()
            sid, created, cfg_json = keys.unpack_named_record(bytes(v), keys.STREAM_RECORD_VERSION)
            st = StreamRt(name, sid, StreamConfig.model_validate_json(cfg_json), created)
            st.on_remove = self._on_msg_removed
            raw = txn.get(keys.u64(sid), db=dbs[keys.DB_SSTATE])
            if raw is not None:
                st.load_state(bytes(raw))
            self.streams[name] = st
            ccur = txn.cursor(db=dbs[keys.DB_CONSUMERS])
            prefix = keys.sid_prefix(sid)
            if ccur.set_range(prefix):
                for ck, cv in ccur.iternext():
                    if not ck.startswith(prefix):
                        break
                    cname = bytes(ck[8:]).decode()
                    cid, ccreated, ccfg = keys.unpack_named_record(
                        bytes(cv), keys.CONSUMER_RECORD_VERSION
                    )
                    c = ConsumerRt(
                        st, cname, cid, ConsumerConfig.model_validate_json(ccfg), ccreated
                    )
                    craw = txn.get(keys.u64(cid), db=dbs[keys.DB_CSTATE])
                    if craw is not None:
                        c.load(ctx, bytes(craw))
                    prev = old.get(name)
                    if prev is not None and prev.sid == sid and cname in prev.consumers:
                        c.push_bound = prev.consumers[cname].push_bound
                        if restore:
                            c.waiting = deque(self._waiting_snapshot.get((name, cname), ()))
                        else:
                            c.waiting = prev.consumers[cname].waiting
                    st.consumers[cname] = c
        for st in self.streams.values():
            self._refresh_deadline(st)
        self._publish_deadline()

    def reset(self) -> None:
        """After an aborted batch: drop every cached object and reload what is committed.

        Pull requests come back as they were when the batch started.
        """
        with self.env.read() as txn:
            self._load_all(txn, restore=True)

    # -- the batch -----------------------------------------------------------------------

    def apply(self, txn: Any, jobs: list[Job]) -> list[Any]:
        ctx = Ctx(txn, self.env.dbs, self.clock())
        # Pull requests live only in memory and are mutated while delivering: keep a copy
        # so an aborted batch restores them exactly (see reset()).
        self._waiting_snapshot = {}
        for key in list(self._with_waiting):
            c = self._find(key)
            if c is None or not c.waiting:
                self._with_waiting.discard(key)
                continue
            self._waiting_snapshot[key] = [replace(r) for r in c.waiting]
        for job in jobs:
            results = job.results
            for op in job.ops:
                try:
                    if type(op) is Publish:  # the hot path skips the dispatch below
                        res: OpResult = self._publish(ctx, op)
                    else:
                        res = self._op(ctx, op)
                except JetStreamError as exc:
                    res = exc
                results.append(res)
        self._finish(ctx)
        return ctx.events

    def _finish(self, ctx: Ctx) -> None:
        for st in list(ctx.touched):
            if st.name not in self.streams:
                continue
            for c in st.consumers.values():
                if c.deliver(ctx):
                    ctx.dirty_consumers.add(c)
        # Interest/workqueue: drop messages no consumer needs any more (acks, deliveries
        # with ack_policy none). Removal never makes anything newly deliverable.
        checks, ctx.retention_check = ctx.retention_check, []
        for st, seq in checks:
            self._retention_remove(ctx, st, seq)
        for c in ctx.dirty_consumers:
            if c.stream.name in self.streams and c.name in c.stream.consumers:
                c.save(ctx)
        for st in ctx.touched:
            if st.name in self.streams:
                st.save_state(ctx)
                self._refresh_deadline(st)
        self._publish_deadline()

    def _publish_deadline(self) -> None:
        vals = list(self.deadlines.values())
        self.next_due = min(vals) if vals else None

    def _refresh_deadline(self, st: StreamRt) -> None:
        best = st.next_expiry()
        for c in st.consumers.values():
            d = c.next_deadline()
            if d and (not best or d < best):
                best = d
        if best:
            self.deadlines[st.name] = best
        else:
            self.deadlines.pop(st.name, None)

    def next_deadline(self) -> int | None:
        return self.next_due

    def _op(self, ctx: Ctx, op: Op) -> OpResult:
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
                return self._create_stream(ctx, op)
            case DeleteStream():
                return self._delete_stream(ctx, op.stream)
            case PurgeStream():
                return self._purge(ctx, op)
            case DeleteMsg():
                return self._delete_msg(ctx, op)
            case CreateConsumer():
                return self._create_consumer(ctx, op)
            case DeleteConsumer():
                return self._delete_consumer(ctx, self._stream(op.stream), op.consumer)
            case SetPushInterest():
                c = self._consumer(op.stream, op.consumer)
                c.push_bound = op.bound
                c.last_activity_ns = ctx.now
                ctx.touched.add(c.stream)
                return None
            case GetStreamInfo():
                return self.stream_info(
                    ctx, self._stream(op.stream), op.subjects_filter, op.deleted_details
                )
            case GetConsumerInfo():
                return self.consumer_info(ctx, self._consumer(op.stream, op.consumer))
        raise TypeError(f"unknown operation {op!r}")

    def _find(self, key: tuple[str, str]) -> ConsumerRt | None:
        st = self.streams.get(key[0])
        return st.consumers.get(key[1]) if st is not None else None

    def _stream(self, name: str) -> StreamRt:
        st = self.streams.get(name)
        if st is None:
            raise js_error("stream_not_found")
        return st

    def _consumer(self, stream: str, name: str) -> ConsumerRt:
        c = self._stream(stream).consumers.get(name)
        if c is None:
            raise js_error("consumer_not_found")
        return c

    def _next_id(self, ctx: Ctx) -> int:
        db = ctx.db(keys.DB_META)
        n = keys.read_u64(ctx.txn.get(keys.META_NEXT_ID, db=db))
        ctx.txn.put(keys.META_NEXT_ID, keys.u64(n + 1), db=db)
        return n

    # -- publish -------------------------------------------------------------------------

    def capture(self, subject: str) -> StreamRt | None:
        try:
            return self._capture[subject]
        except KeyError:
            pass
        found = None
        for st in self.streams.values():
            if any(subject_matches(s, subject) for s in st.config.subjects):
                found = st
                break
        if len(self._capture) > 100_000:
            self._capture.clear()
        self._capture[subject] = found
        return found

    def _publish(self, ctx: Ctx, op: Publish) -> OpResult:
        st = self.capture(op.subject)
        if op.stream is not None:
            named = self.streams.get(op.stream)
            if named is None:
                return js_error("stream_not_found")
            if st is not named:
                return js_error("stream_not_match")
        if st is None:
            return None
        interest = True
        if st.config.retention == "interest":
            interest = any(c.matches(op.subject) for c in st.consumers.values())
        res = st.publish(ctx, op.subject, op.payload, op.headers, interest)
        if isinstance(res, PubAck) and not res.duplicate:
            ctx.touched.add(st)
            for c in st.consumers.values():
                c.on_append(res.seq, op.subject)
        return res

    def _on_msg_removed(self, ctx: Ctx, st: StreamRt, seq: int, subject: str) -> None:
        for c in st.consumers.values():
            c.on_remove(ctx, seq, subject)
            ctx.dirty_consumers.add(c)
        ctx.touched.add(st)

    def _retention_remove(self, ctx: Ctx, st: StreamRt, seq: int) -> None:
        if st.config.retention == "limits":
            return
        rec = st.get_record(ctx, seq)
        if rec is None:
            return
        subject = keys.msg_subject(rec)
        for c in st.consumers.values():
            if c.matches(subject) and c.needs(seq):
                return
        st.remove(ctx, seq)

    # -- acks and pulls ------------------------------------------------------------------

    def _ack(self, ctx: Ctx, op: Ack) -> OpResult:
        c = self._consumer(op.stream, op.consumer)
        ctx.touched.add(c.stream)
        ctx.dirty_consumers.add(c)
        kind = op.kind
        if kind in (AckKind.ACK, AckKind.NEXT, AckKind.TERM):
            released = c.ack(ctx, op.seq, term=kind is AckKind.TERM, reason=op.reason)
            for s in released:
                ctx.retention_check.append((c.stream, s))
            if kind is AckKind.NEXT and op.next_reply:
                self._pull(ctx, Pull(op.stream, op.consumer, op.next_reply, batch=op.next_batch))
        elif kind is AckKind.NAK:
            c.nak(ctx, op.seq, op.delay_ns)
        elif kind is AckKind.WPI:
            c.progress(ctx, op.seq)
        return None

    def _pull(self, ctx: Ctx, op: Pull) -> OpResult:
        c = self._consumer(op.stream, op.consumer)
        cfg = c.config

        def status(code: int, desc: str) -> None:
            ctx.events.append(PullStatus(op.stream, op.consumer, op.reply, code, desc))

        if cfg.is_push:
            status(409, "Consumer is push based")
            return None
        if op.batch < 1:
            status(400, "Bad Request - batch must be > 0")
            return None
        if op.expires_ns < 0 or op.max_bytes < 0:
            status(400, "Bad Request - negative value")
            return None
        if cfg.max_batch and op.batch > cfg.max_batch:
            status(409, f"Exceeded MaxRequestBatch of {cfg.max_batch}")
            return None
        if cfg.max_expires and op.expires_ns > cfg.max_expires:
            status(409, f"Exceeded MaxRequestExpires of {cfg.max_expires}")
            return None
        if cfg.max_bytes and op.max_bytes > cfg.max_bytes:
            status(409, f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}")
            return None
        if cfg.max_waiting and len(c.waiting) >= cfg.max_waiting:
            status(409, "Exceeded MaxWaiting")
            return None
        expires_at = ctx.now + op.expires_ns if op.expires_ns else 0
        c.waiting.append(PullRequest(op.reply, op.batch, expires_at, op.no_wait, op.max_bytes))
        self._with_waiting.add((c.stream.name, c.name))
        c.last_activity_ns = ctx.now
        ctx.touched.add(c.stream)
        ctx.dirty_consumers.add(c)
        return None

    # -- timers --------------------------------------------------------------------------

    def _tick(self, ctx: Ctx, op: Tick) -> OpResult:
        saved = ctx.now
        if op.now is not None:
            ctx.now = op.now
        try:
            for st in list(self.streams.values()):
                st.expire(ctx)
                if st.config.duplicate_window:
                    st.evict_dedupe(ctx)
                for c in list(st.consumers.values()):
                    if c.expire_acks(ctx):
                        ctx.dirty_consumers.add(c)
                    c.expire_requests(ctx)
                    ia = c.inactive_deadline()
                    if ia and ia <= ctx.now:
                        self._delete_consumer(ctx, st, c.name)
                        ctx.events.append(
                            Advisory("consumer_deleted", st.name, c.name, time_ns=ctx.now)
                        )
                ctx.touched.add(st)
            # Deliver now so redeliveries carry this tick's time.
            self._finish_timers(ctx)
        finally:
            ctx.now = saved
        return None

    def _finish_timers(self, ctx: Ctx) -> None:
        for st in list(ctx.touched):
            for c in st.consumers.values():
                if c.deliver(ctx):
                    ctx.dirty_consumers.add(c)

    # -- stream admin --------------------------------------------------------------------

    def _create_stream(self, ctx: Ctx, op: CreateStream) -> OpResult:
        cfg = op.config.normalized()
        existing = self.streams.get(cfg.name)
        if not op.update:
            if existing is not None:
                if existing.config == cfg:
                    return self.stream_info(ctx, existing)
                raise js_error("stream_name_exist")
            if cfg.sealed:
                raise js_error(
                    "stream_invalid_config", err="stream configuration for create can not be sealed"
                )
            self._check_overlap(cfg, None)
            sid = self._next_id(ctx)
            st = StreamRt(cfg.name, sid, cfg, ctx.now)
            st.on_remove = self._on_msg_removed
            if cfg.first_seq:
                st.first_seq = cfg.first_seq
                st.last_seq = cfg.first_seq - 1
            self._write_stream_record(ctx, st)
            st.save_state(ctx)
            self.streams[cfg.name] = st
            self._capture.clear()
            return self.stream_info(ctx, st)
        if existing is None:
            raise js_error("stream_not_found")
        old = existing.config

        def bad(msg: str) -> JetStreamError:
            return js_error("stream_invalid_config", err=msg)

        if cfg.storage != old.storage:
            raise bad("stream configuration update can not change storage type")
        if (cfg.retention == "workqueue") != (old.retention == "workqueue"):
            raise bad(
                "stream configuration update can not change retention policy to/from workqueue"
            )
        if old.sealed and not cfg.sealed:
            raise bad("stream configuration update can not unseal a sealed stream")
        if old.deny_delete and not cfg.deny_delete:
            raise bad("stream configuration update can not cancel deny message deletes")
        if old.deny_purge and not cfg.deny_purge:
            raise bad("stream configuration update can not cancel deny purge")
        if cfg.first_seq != old.first_seq:
            raise bad("stream configuration update can not change first sequence")
        self._check_overlap(cfg, existing)
        existing.config = cfg
        self._write_stream_record(ctx, existing)
        self._capture.clear()
        # Apply tighter limits now.
        if cfg.max_msgs_per_subject > 0:
            for subj in list(existing.subjects(ctx)):
                seqs = list(existing.subject_seqs(ctx, subj))
                for s in seqs[: max(0, len(seqs) - cfg.max_msgs_per_subject)]:
                    existing.remove(ctx, s)
        while cfg.max_msgs > 0 and existing.messages > cfg.max_msgs:
            existing.remove(ctx, existing.first_seq)
        while cfg.max_bytes > 0 and existing.bytes > cfg.max_bytes:
            existing.remove(ctx, existing.first_seq)
        existing.expire(ctx)
        existing.save_state(ctx)
        ctx.touched.add(existing)
        return self.stream_info(ctx, existing)

    def _check_overlap(self, cfg: StreamConfig, me: StreamRt | None) -> None:
        for other in self.streams.values():
            if other is me:
                continue
            for a in cfg.subjects:
                for b in other.config.subjects:
                    if subjects_overlap(a, b):
                        raise js_error("stream_subject_overlap")

    def _write_stream_record(self, ctx: Ctx, st: StreamRt) -> None:
        ctx.txn.put(
            st.name.encode(),
            keys.pack_named_record(
                keys.STREAM_RECORD_VERSION, st.sid, st.created_ns, st.config.to_json()
            ),
            db=ctx.db(keys.DB_STREAMS),
        )

    def _delete_stream(self, ctx: Ctx, name: str) -> OpResult:
        st = self._stream(name)
        for cname in list(st.consumers):
            self._delete_consumer(ctx, st, cname, reevaluate=False)
        prefix = keys.sid_prefix(st.sid)
        for dbname in (
            keys.DB_MSGS,
            keys.DB_SUBJECTS,
            keys.DB_SUBJCOUNT,
            keys.DB_DEDUPE,
            keys.DB_DEDUPESEQ,
        ):
            _delete_prefix(ctx, dbname, prefix)
        ctx.txn.delete(keys.u64(st.sid), db=ctx.db(keys.DB_SSTATE))
        ctx.txn.delete(name.encode(), db=ctx.db(keys.DB_STREAMS))
        del self.streams[name]
        self.deadlines.pop(name, None)
        self._capture.clear()
        ctx.touched.discard(st)
        return True

    def _purge(self, ctx: Ctx, op: PurgeStream) -> OpResult:
        st = self._stream(op.stream)
        if st.config.sealed:
            raise js_error("stream_sealed")
        if st.config.deny_purge:
            raise js_error("purge_failed", err="stream purge not permitted")
        if op.seq is not None and op.keep is not None:
            raise js_error("bad_request")
        if op.filter is not None and not _valid_filter(op.filter):
            raise js_error("bad_request")
        n = st.purge(ctx, op.filter, op.seq, op.keep)
        if not op.filter and op.keep is None:
            # Consumers that had not reached the purge point move past it.
            floor = st.first_seq - 1
            for c in st.consumers.values():
                if c.delivered_sseq < floor:
                    c.delivered_sseq = floor
                    c.num_pending_cache = None
                    if not c.pending:
                        c.update_ack_floor()
                    ctx.dirty_consumers.add(c)
        for c in st.consumers.values():
            c.num_pending_cache = None
        ctx.touched.add(st)
        return PurgeResult(n)

    def _delete_msg(self, ctx: Ctx, op: DeleteMsg) -> OpResult:
        st = self._stream(op.stream)
        if st.config.sealed:
            raise js_error("stream_sealed")
        if st.config.deny_delete:
            raise js_error("msg_delete_failed", err="message delete not permitted")
        if not st.remove(ctx, op.seq):
            raise js_error("sequence_not_found", seq=op.seq)
        st.save_state(ctx)
        ctx.touched.add(st)
        return True

    def stream_info(
        self,
        ctx: Ctx,
        st: StreamRt,
        subjects_filter: str | None = None,
        deleted_details: bool = False,
    ) -> StreamInfo:
        num_deleted = 0
        if st.messages:
            num_deleted = st.last_seq - st.first_seq + 1 - st.messages
        subjects: dict[str, int] | None = None
        if subjects_filter:
            subjects = {}
            cdb = ctx.db(keys.DB_SUBJCOUNT)
            for subj in st.subjects(ctx):
                if subject_matches(subjects_filter, subj):
                    raw = ctx.txn.get(keys.subjcount_key(st.sid, subj), db=cdb)
                    subjects[subj] = keys.read_u64(raw) if raw else 0
        deleted: list[int] | None = None
        if deleted_details and num_deleted:
            deleted = []
            expect = st.first_seq
            for seq, _ in st.seqs_from(ctx, st.first_seq):
                deleted.extend(range(expect, seq))
                expect = seq + 1
        state = StreamState(
            messages=st.messages,
            bytes=st.bytes,
            first_seq=st.first_seq,
            first_ts=format_time(st.first_ts),
            last_seq=st.last_seq,
            last_ts=format_time(st.last_ts),
            num_subjects=st.num_subjects or None,
            subjects=subjects,
            num_deleted=num_deleted or None,
            deleted=deleted,
            consumer_count=len(st.consumers),
        )
        return StreamInfo(
            config=st.config,
            created=format_time(st.created_ns),
            state=state,
            cluster=ClusterInfo(leader=self.node_name),
            ts=format_time(self.clock()),
        )

    # -- consumer admin ------------------------------------------------------------------

    def _create_consumer(self, ctx: Ctx, op: CreateConsumer) -> OpResult:
        st = self._stream(op.stream)
        cfg = op.config.normalized(st.config.consumer_limits)
        name = cfg.name or cfg.durable_name
        existing = st.consumers.get(name) if name else None
        if existing is not None:
            if existing.config == cfg:
                return self.consumer_info(ctx, existing)
            if op.action == "create":
                raise js_error("consumer_already_exists")
            return self._update_consumer(ctx, existing, cfg)
        if op.action == "update":
            raise js_error("consumer_does_not_exist")
        if not name:
            name = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))
            cfg = cfg.model_copy(update={"name": name})
        scfg = st.config
        if scfg.max_consumers > 0 and len(st.consumers) >= scfg.max_consumers:
            raise js_error("maximum_consumers")
        for f in cfg.filters:
            if not any(subjects_overlap(f, s) for s in scfg.subjects):
                raise js_error(
                    "consumer_create",
                    err=f"consumer filter subject is not a valid subset of the interest subjects: {f}",
                )
        if cfg.deliver_subject and any(
            subject_matches(s, cfg.deliver_subject) for s in scfg.subjects
        ):
            raise js_error("deliver_subject_cycle")
        if scfg.retention == "workqueue":
            if cfg.ack_policy != "explicit":
                raise js_error("wq_requires_explicit_ack")
            if cfg.deliver_policy != "all":
                raise js_error("wq_consumer_not_deliver_all")
            if st.consumers:
                if not cfg.filters or any(not o.filters for o in st.consumers.values()):
                    raise js_error("wq_multiple_unfiltered")
                for o in st.consumers.values():
                    if any(subjects_overlap(a, b) for a in cfg.filters for b in o.filters):
                        raise js_error("wq_consumer_not_unique")
        cid = self._next_id(ctx)
        c = ConsumerRt(st, name, cid, cfg, ctx.now)
        self._initial_position(ctx, st, c)
        c.update_ack_floor()
        self._write_consumer_record(ctx, c)
        st.consumers[name] = c
        c.save(ctx)
        ctx.touched.add(st)
        return self.consumer_info(ctx, c)

    def _initial_position(self, ctx: Ctx, st: StreamRt, c: ConsumerRt) -> None:
        cfg = c.config
        dp = cfg.deliver_policy
        start = st.first_seq - 1 if st.first_seq else 0
        if dp == "new":
            start = st.last_seq
        elif dp == "last":
            if c.filters:
                last = max((st.last_seq_of_subject(ctx, f) for f in c.filters), default=0)
            else:
                last = st.last_seq if st.messages else 0
            start = last - 1 if last else st.last_seq
        elif dp == "by_start_sequence":
            start = (cfg.opt_start_seq or 1) - 1
        elif dp == "by_start_time":
            t = parse_time(cfg.opt_start_time or "")
            start = st.last_seq
            for seq, rec in st.seqs_from(ctx, st.first_seq):
                if keys.msg_time(rec) >= t:
                    start = seq - 1
                    break
        elif dp == "last_per_subject":
            lasts = [
                st.last_seq_of_subject(ctx, subj) for subj in st.subjects(ctx) if c.matches(subj)
            ]
            if lasts:
                start = min(lasts) - 1
                c.lps_end = max(lasts)
            else:
                start = st.last_seq
        c.delivered_sseq = max(0, start)

    def _update_consumer(self, ctx: Ctx, c: ConsumerRt, cfg: ConsumerConfig) -> ConsumerInfo:
        old = c.config
        for field, msg in _FIXED_CONSUMER_FIELDS.items():
            if getattr(old, field) != getattr(cfg, field):
                raise js_error("consumer_create", err=msg)
        if old.is_push != cfg.is_push:
            raise js_error(
                "consumer_create",
                err="can not update push consumer to pull based"
                if old.is_push
                else "can not update pull consumer to push based",
            )
        c.config = cfg
        c.filters = cfg.filters
        c.scan_floor = 0
        c.num_pending_cache = None
        self._write_consumer_record(ctx, c)
        ctx.touched.add(c.stream)
        ctx.dirty_consumers.add(c)
        return self.consumer_info(ctx, c)

    def _write_consumer_record(self, ctx: Ctx, c: ConsumerRt) -> None:
        ctx.txn.put(
            keys.consumer_key(c.stream.sid, c.name),
            keys.pack_named_record(
                keys.CONSUMER_RECORD_VERSION, c.cid, c.created_ns, c.config.to_json()
            ),
            db=ctx.db(keys.DB_CONSUMERS),
        )

    def _delete_consumer(
        self, ctx: Ctx, st: StreamRt, name: str, *, reevaluate: bool = True
    ) -> OpResult:
        c = st.consumers.get(name)
        if c is None:
            raise js_error("consumer_not_found")
        for req in c.waiting:
            ctx.events.append(PullStatus(st.name, name, req.reply, 409, "Consumer Deleted"))
        c.waiting.clear()
        _delete_prefix(ctx, keys.DB_PENDING, keys.u64(c.cid))
        ctx.txn.delete(keys.u64(c.cid), db=ctx.db(keys.DB_CSTATE))
        ctx.txn.delete(keys.consumer_key(st.sid, name), db=ctx.db(keys.DB_CONSUMERS))
        del st.consumers[name]
        ctx.dirty_consumers.discard(c)
        if reevaluate and st.config.retention != "limits":
            for seq, _ in list(st.seqs_from(ctx, st.first_seq)):
                ctx.retention_check.append((st, seq))
        ctx.touched.add(st)
        return True

    def consumer_info(self, ctx: Ctx, c: ConsumerRt) -> ConsumerInfo:
        return ConsumerInfo(
            stream_name=c.stream.name,
            name=c.name,
            created=format_time(c.created_ns),
            config=c.config,
            delivered=SequenceInfo(
                consumer_seq=c.delivered_cseq,
                stream_seq=c.delivered_sseq,
                last_active=format_time(c.last_delivered_ns) if c.last_delivered_ns else None,
            ),
            ack_floor=SequenceInfo(
                consumer_seq=c.ack_cseq,
                stream_seq=c.ack_sseq,
                last_active=format_time(c.last_ack_ns) if c.last_ack_ns else None,
            ),
            num_ack_pending=c.num_ack_pending,
            num_redelivered=sum(1 for e in c.pending.values() if e.count > 1),
            num_waiting=len(c.waiting),
            num_pending=c.num_pending(ctx),
            push_bound=True if c.config.is_push and c.push_bound else None,
            ts=format_time(self.clock()),
        )


def _delete_prefix(ctx: Ctx, dbname: bytes, prefix: bytes) -> None:
    cur = ctx.txn.cursor(db=ctx.db(dbname))
    if not cur.set_range(prefix):
        return
    while cur.key().startswith(prefix):
        if not cur.delete():
            break


def _valid_filter(f: str) -> bool:
    return is_valid_subject(f)
