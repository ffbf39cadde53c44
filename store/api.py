"""The public face of the store: :class:`Store`.

Write path: :meth:`Store.submit` takes a list of operations (:mod:`store.ops`) and returns
a ``concurrent.futures.Future`` of one result per operation, completed on the writer
thread once the group commit holding them is durable; :meth:`Store.submit_then` does the
same with a callback instead of a future. The ``*_sync`` style helpers
(``create_stream``, ``publish``...) submit one operation and wait; they raise the
operation's :class:`JetStreamError`. They must not be called from the writer thread (a
future callback or the event hook): that would wait for itself.

Read path (any thread): ``get_msg``, ``last_by_subject``, ``next_by_subject``,
``iter_msgs``, ``stream_names`` read committed data in short read transactions.
``stream_info`` and ``consumer_info`` go through the writer (cheap, no fsync) so they
see the exact in-memory state (waiting pull requests, push interest); a stream info's
subject counts and deleted seqs are then read here, off the writer (store.details).

Timers: the engine owns no timer thread. :meth:`next_deadline` says when something is due
(ack-wait redelivery, ``max_age`` expiry, pull request expiry, inactivity); the caller
submits :class:`Tick` (or calls :meth:`tick`) at or after that time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Literal, Self

from store import admin, details, gojson, keepbound, keys, subjindex
from store.continuations import SweepStream
from store.details import Paged
from store.engine import REMOVE_SLICE, Engine
from store.env import DEFAULT_MAP_SIZE, Env
from store.errors import JetStreamError, js_error
from store.models import ConsumerConfig, ConsumerInfo, StreamConfig, StreamInfo, StreamState
from store.ops import (
    Ack,
    AckKind,
    CreateConsumer,
    CreateStream,
    DeleteConsumer,
    DeleteMsg,
    DeleteStream,
    Event,
    GetConsumerInfo,
    GetStreamInfo,
    Headers,
    MsgHead,
    Op,
    OpResult,
    PauseConsumer,
    PubAck,
    Publish,
    Pull,
    PurgeResult,
    PurgeStream,
    SetPushInterest,
    StoredMsg,
    Tick,
    WithdrawPulls,
)
from store.pausestate import PauseState
from store.subjects import is_literal, literal_prefix, subject_matches, subjects_overlap
from store.writer import MAX_BATCH_JOBS, GroupCommitWriter

log = logging.getLogger("jetmq.store")

EventHook = Callable[[Sequence[Event]], None]


def _resumed_done(fut: Future[list[OpResult]]) -> None:
    """Completion of the work a crash cut short, resumed at open (store.slices)."""
    if not fut.cancelled() and fut.exception() is not None:
        log.error(
            "resuming interrupted store work failed: %s (retried at the next start)",
            fut.exception(),
        )


class Store:
    """An open jetmq store: one LMDB environment, one writer thread."""

    def __init__(
        self,
        env: Env,
        *,
        sync: Literal["always", "batch"],
        clock: Callable[[], int],
        on_event: EventHook | None,
        node_name: str,
        max_batch_jobs: int = MAX_BATCH_JOBS,
        remove_slice: int = REMOVE_SLICE,
    ) -> None:
        self.env = env
        self.sync = sync
        self.clock = clock
        self._hook = on_event
        self._engine = Engine(env, clock, node_name, remove_slice)
        self._writer = GroupCommitWriter(
            env,
            self._engine.apply,
            on_abort=self._engine.reset,
            after_commit=self._after_commit,
            unfinished=self._engine.take_unfinished,
            sync_always=sync == "always",
            max_batch_jobs=max_batch_jobs,
        )
        self._closed = False
        # Long operations a crash or a close cut short (store.slices), going on now: before
        # anything submitted after open, each a job of its own (so in slices).
        eng = self._engine
        self.resumed: list[Future[list[OpResult]]] = []
        for op in (*map(SweepStream, eng.sweeps), *eng.rechecks, *eng.purges, *eng.trims):
            fut = self._writer.submit([op])
            fut.add_done_callback(_resumed_done)
            self.resumed.append(fut)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: Literal["always", "batch"] = "always",
        clock: Callable[[], int] = time.time_ns,
        map_size: int = DEFAULT_MAP_SIZE,
        on_event: EventHook | None = None,
        node_name: str = "jetmq",
        max_batch_jobs: int = MAX_BATCH_JOBS,
        remove_slice: int = REMOVE_SLICE,
    ) -> Store:
        """Open (creating if needed) the store at directory ``path``.

        ``sync="always"`` fsyncs every group commit; ``"batch"`` commits without fsync
        and syncs at most 50 ms after the first unsynced commit (and on close): a crash of
        the machine (not of the process) may lose up to that window of acknowledged writes.
        ``max_batch_jobs`` caps the submissions one group commit takes (1: every
        submission committed alone, i.e. no group commit — the benchmark's baseline).
        ``remove_slice`` caps the messages one transaction removes for a purge, a stream
        deletion or ``max_age`` expiry (the rest follows in later transactions, with other
        submissions committing in between).
        """
        if sync not in ("always", "batch"):
            raise ValueError("sync must be 'always' or 'batch'")
        if max_batch_jobs < 1:
            raise ValueError("max_batch_jobs must be at least 1")
        if remove_slice < 1:
            raise ValueError("remove_slice must be at least 1")
        env = Env(path, sync=sync == "always", map_size=map_size)
        return cls(
            env,
            sync=sync,
            clock=clock,
            on_event=on_event,
            node_name=node_name,
            max_batch_jobs=max_batch_jobs,
            remove_slice=remove_slice,
        )

    def set_event_hook(self, hook: EventHook | None) -> None:
        """Where deliveries, pull statuses and advisories go (called on the writer thread)."""
        self._hook = hook

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Finish queued batches, stop the writer, close LMDB. Idempotent.

        Long operations in progress (store.slices) stop after their current slice and the
        next open goes on with them: a stream deletion's caller already has its answer,
        a purge's gets the number purged so far, a stream update's its stream info."""
        if self._closed:
            return
        self._closed = True
        self._engine.catalog.closing = True
        self._writer.close()
        self.env.close()

    # -- write path ----------------------------------------------------------------------

    def submit(self, ops: Iterable[Op]) -> Future[list[OpResult]]:
        """Queue ``ops`` for the next group commit; the future gets one result per op."""
        return self._writer.submit(ops)

    def submit_then(
        self, ops: Iterable[Op], on_done: Callable[[list[OpResult] | BaseException], None]
    ) -> None:
        """Queue ``ops`` for the next group commit; once it is durable, ``on_done`` is called
        on the writer thread with one result per op (or the exception that failed the job).

        The callback form of :meth:`submit` (no future is made): for callers that complete
        many small jobs, such as one request per client. ``on_done`` must be quick and
        thread-safe; an exception it raises is logged.
        """
        self._writer.submit_then(ops, on_done)

    def _after_commit(self, events: list[Event]) -> None:
        if events and self._hook is not None:
            try:
                self._hook(events)
            except Exception:
                log.exception("store event hook failed")

    def _call(self, op: Op) -> Any:
        if self._writer.on_writer_thread:
            raise RuntimeError("synchronous store calls cannot be made from the writer thread")
        res = self.submit([op]).result()[0]
        if isinstance(res, JetStreamError):
            raise res
        return res

    def metrics(self) -> dict[str, int]:
        """Counters for ``$SYS`` / Prometheus: commits, submissions, operations, map, and the
        writer's time (µs) applying operations, committing (fsync), completing futures."""
        w = self._writer
        return {
            "commits": w.commits,
            "jobs_committed": w.jobs_committed,
            "ops_committed": w.ops_committed,
            "map_growths": w.map_growths,
            "apply_us": w.apply_ns // 1000,
            "commit_us": w.commit_ns // 1000,
            "complete_us": w.complete_ns // 1000,
            "map_size": self.env.map_size,
            "streams": len(self._engine.streams),
        }

    def next_deadline(self) -> int | None:
        """The earliest clock time (ns) at which :meth:`tick` has work, or None."""
        return self._engine.next_deadline()

    def tick(self, now: int | None = None) -> Future[list[OpResult]]:
        return self.submit([Tick(now)])

    def create_stream(self, config: StreamConfig | dict[str, Any]) -> StreamInfo:
        cfg = config if isinstance(config, StreamConfig) else StreamConfig.from_wire(config)
        info: StreamInfo = self._call(CreateStream(cfg))
        return info

    def update_stream(self, config: StreamConfig | dict[str, Any]) -> StreamInfo:
        cfg = config if isinstance(config, StreamConfig) else StreamConfig.from_wire(config)
        info: StreamInfo = self._call(CreateStream(cfg, update=True))
        return info

    def delete_stream(self, name: str) -> None:
        self._call(DeleteStream(name))

    def purge_stream(
        self,
        name: str,
        *,
        filter: str | None = None,
        seq: int | None = None,
        keep: int | None = None,
    ) -> int:
        """STREAM.PURGE. With ``keep``, where the kept messages begin is found here, from a
        snapshot, so the writer does not walk for it (store.keepbound)."""
        admin.check_purge_request(seq, keep)
        keep_from = None
        if keep is not None and keepbound.keeps(filter, seq, keep):
            keep_from = self.keep_bound(name, filter, keep)
        res: PurgeResult = self._call(PurgeStream(name, filter, seq, keep, keep_from))
        return res.purged

    def keep_bound(self, name: str, filter: str | None, keep: int) -> tuple[int, int] | None:
        """``(sid, seq)``: the stream's id and where its ``keep`` newest messages matching
        ``filter`` begin, from committed data (``PurgeStream.keep_from``); None for a
        stream that has stored nothing yet."""
        with self.env.read() as txn:
            sid = self._sid(txn, name)
            raw = txn.get(keys.u64(sid), db=self.env.dbs[keys.DB_SSTATE])
            if raw is None:
                return None
            first, last, messages, *_ = keys.unpack_stream_state(bytes(raw))
            state = (first, last, messages)
            return sid, keepbound.keep_from(txn, self.env.dbs, sid, state, filter, keep)

    def delete_msg(self, stream: str, seq: int) -> None:
        self._call(DeleteMsg(stream, seq))

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Headers = (),
        *,
        stream: str | None = None,
    ) -> PubAck | None:
        """Store one message and wait for its commit; None when no stream captures it."""
        res: PubAck | None = self._call(Publish(subject, payload, headers, stream))
        return res

    def create_consumer(
        self, stream: str, config: ConsumerConfig | dict[str, Any], action: str = ""
    ) -> ConsumerInfo:
        cfg = config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_wire(config)
        if action not in ("", "create", "update"):
            raise js_error("bad_request")
        info: ConsumerInfo = self._call(CreateConsumer(stream, cfg, action))
        return info

    def delete_consumer(self, stream: str, name: str) -> None:
        self._call(DeleteConsumer(stream, name))

    def ack(
        self, stream: str, consumer: str, seq: int, kind: AckKind = AckKind.ACK, **kw: Any
    ) -> None:
        self._call(Ack(stream, consumer, seq, kind, **kw))

    def pull(
        self,
        stream: str,
        consumer: str,
        reply: str,
        *,
        batch: int = 1,
        expires_ns: int = 0,
        no_wait: bool = False,
        max_bytes: int = 0,
        idle_heartbeat_ns: int = 0,
    ) -> None:
        self._call(
            Pull(stream, consumer, reply, batch, expires_ns, no_wait, max_bytes, idle_heartbeat_ns)
        )

    def withdraw_pulls(self, stream: str, consumer: str, reply: str) -> int:
        """The pull requests waiting for ``reply`` leave (its client went away)."""
        n: int = self._call(WithdrawPulls(stream, consumer, reply))
        return n

    def set_push_interest(self, stream: str, consumer: str, bound: bool) -> None:
        self._call(SetPushInterest(stream, consumer, bound))

    def stream_info(
        self,
        name: str,
        *,
        subjects_filter: str | None = None,
        deleted_details: bool = False,
        offset: int = 0,
    ) -> StreamInfo:
        """STREAM.INFO; with ``subjects_filter`` one page of the subject counts (see
        :meth:`stream_info_paged` for the paging)."""
        return self.stream_info_paged(
            name, subjects_filter=subjects_filter, deleted_details=deleted_details, offset=offset
        )[0]

    def stream_info_paged(
        self,
        name: str,
        *,
        subjects_filter: str | None = None,
        deleted_details: bool = False,
        offset: int = 0,
    ) -> tuple[StreamInfo, Paged]:
        """STREAM.INFO and the ``total`` / ``offset`` / ``limit`` of its subjects page.

        The state comes from the writer; the details (store.details) are read here, in a
        read transaction, so the writer does not wait for them."""
        info: StreamInfo = self._call(GetStreamInfo(name))
        state = info.state
        want_deleted = deleted_details and bool(state.num_deleted)
        if not subjects_filter and not want_deleted:
            return info, Paged()
        update: dict[str, Any] = {}
        paged = Paged()
        with self.env.read() as txn:
            sid = self._sid(txn, name)
            if subjects_filter:
                update["subjects"], paged = details.subjects_page(
                    txn, self.env.dbs, sid, subjects_filter, offset, state.num_subjects or 0
                )
            if want_deleted:
                update["deleted"] = details.deleted_seqs(
                    txn, self.env.dbs, sid, state.first_seq, state.last_seq
                )
        return info.model_copy(update={"state": state.model_copy(update=update)}), paged

    def stream_state(self, name: str) -> StreamState:
        return self.stream_info(name).state

    def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        info: ConsumerInfo = self._call(GetConsumerInfo(stream, consumer))
        return info

    def pause_consumer(self, stream: str, consumer: str, until: str) -> PauseState:
        """Pause until ``until`` (RFC 3339); the zero time or a past one resumes."""
        state: PauseState = self._call(PauseConsumer(stream, consumer, until))
        return state

    # -- read path (any thread) ----------------------------------------------------------

    def _sid(self, txn: Any, stream: str) -> int:
        if not stream:  # (LMDB refuses an empty key)
            raise js_error("stream_not_found")
        raw = txn.get(stream.encode(), db=self.env.dbs[keys.DB_STREAMS])
        if raw is None:
            raise js_error("stream_not_found")
        sid, _, _ = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)
        return sid

    @staticmethod
    def _msg(seq: int, record: bytes) -> StoredMsg:
        t, subj, hdr, payload = keys.unpack_msg(bytes(record))
        return StoredMsg(seq, t, subj, keys.decode_headers(hdr), payload)

    def get_msg(self, stream: str, seq: int) -> StoredMsg:
        """Message ``seq`` of ``stream``; JetStreamError 10037 if not stored (10003 for
        seq 0, which names no message, as nats-server answers)."""
        if seq is None:
            raise TypeError("seq must be an int, not None")
        gojson.check_uint64(seq, "JSApiMsgGetRequest.seq")
        if seq == 0:
            raise js_error("bad_request")
        with self.env.read() as txn:
            sid = self._sid(txn, stream)
            rec = txn.get(keys.msg_key(sid, seq), db=self.env.dbs[keys.DB_MSGS])
            if rec is None:
                raise js_error("no_message_found")
            return self._msg(seq, rec)

    def release_pages(self) -> bool:
        """After reads that touched much of the data file (a scan, many large messages):
        drop its pages from this process's RSS (:meth:`Env.release_mapped_pages`)."""
        return self.env.release_mapped_pages()

    def get_msgs(self, stream: str, seqs: Iterable[int]) -> list[StoredMsg | None]:
        """Messages ``seqs`` of ``stream`` read in one transaction, None for each one not
        stored (a reader of many known seqs: one transaction instead of one each)."""
        out: list[StoredMsg | None] = []
        with self.env.read() as txn:
            sid = self._sid(txn, stream)
            db = self.env.dbs[keys.DB_MSGS]
            for seq in seqs:
                rec = txn.get(keys.msg_key(sid, seq), db=db) if 0 < seq <= keys.MAX_U64 else None
                out.append(None if rec is None else self._msg(seq, rec))
        return out

    def iter_heads(
        self,
        stream: str,
        start: int = 0,
        end: int | None = None,
        chunk: int = 1024,
        payload_upto: int = 0,
    ) -> Iterator[MsgHead]:
        """:meth:`iter_msgs` without the payloads: each message's time, subject, headers
        and payload length, and the payload itself only when at most ``payload_upto``
        bytes. Only the pages holding the heads are read (a start-up index of large
        messages without reading them)."""
        if start > keys.MAX_U64:
            return
        nxt = max(start, 0)
        while True:
            batch: list[MsgHead] = []
            with self.env.read(buffers=True) as txn:
                sid = self._sid(txn, stream)
                cur = txn.cursor(db=self.env.dbs[keys.DB_MSGS])
                prefix = keys.sid_prefix(sid)
                if cur.set_range(keys.msg_key(sid, nxt)):
                    for k, v in cur.iternext():
                        if bytes(k[:8]) != prefix:
                            break
                        seq = keys.read_u64(bytes(k), 8)
                        if end is not None and seq > end:
                            break
                        t, subj, hdr, size = keys.unpack_msg_head(v)
                        payload = bytes(v[len(v) - size :]) if 0 < size <= payload_upto else b""
                        batch.append(MsgHead(seq, t, subj, keys.decode_headers(hdr), size, payload))
                        if len(batch) >= chunk:
                            break
            yield from batch
            if len(batch) < chunk:
                return
            nxt = batch[-1].seq + 1

    def last_by_subject(self, stream: str, subject: str) -> StoredMsg:
        """The newest message on ``subject`` (wildcards allowed); 10037 if none."""
        with self.env.read() as txn:
            sid = self._sid(txn, stream)
            cur = txn.cursor(db=self.env.dbs[keys.DB_SUBJCOUNT])
            if is_literal(subject):
                best = subjindex.record(cur, sid, subject)[2]
            else:
                prefix = literal_prefix(subject)
                best = max(
                    (
                        last
                        for subj, _, _, last in subjindex.records(cur, sid, prefix)
                        if subject_matches(subject, subj)
                    ),
                    default=0,
                )
            if not best:
                raise js_error("no_message_found")
            rec = txn.get(keys.msg_key(sid, best), db=self.env.dbs[keys.DB_MSGS])
            if rec is None:
                raise js_error("no_message_found")
            return self._msg(best, rec)

    def next_by_subject(self, stream: str, subject: str, seq: int = 0) -> StoredMsg:
        """The first message with sequence >= ``seq`` whose subject matches; 10037 if none."""
        gojson.check_uint64(seq, "JSApiMsgGetRequest.seq")
        if is_literal(subject):
            with self.env.read() as txn:
                sid = self._sid(txn, stream)
                n, first, last = subjindex.record(
                    txn.cursor(db=self.env.dbs[keys.DB_SUBJCOUNT]), sid, subject
                )
                if n and seq <= last:
                    icur = txn.cursor(db=self.env.dbs[keys.DB_SUBJECTS])
                    sid_b = keys.sid_prefix(sid)
                    for found in subjindex.seqs(
                        icur, sid_b, subject.encode(), max(seq, first), last
                    ):
                        rec = txn.get(keys.msg_key(sid, found), db=self.env.dbs[keys.DB_MSGS])
                        if rec is not None:
                            return self._msg(found, rec)
            raise js_error("no_message_found")
        for msg in self.iter_msgs(stream, start=seq):
            if subject_matches(subject, msg.subject):
                return msg
        raise js_error("no_message_found")

    def iter_msgs(
        self, stream: str, start: int = 0, end: int | None = None, chunk: int = 1024
    ) -> Iterator[StoredMsg]:
        """Messages with ``start <= seq <= end`` in order, read in chunks of short transactions."""
        if start > keys.MAX_U64:
            return
        nxt = max(start, 0)
        while True:
            batch: list[StoredMsg] = []
            with self.env.read() as txn:
                sid = self._sid(txn, stream)
                cur = txn.cursor(db=self.env.dbs[keys.DB_MSGS])
                prefix = keys.sid_prefix(sid)
                if cur.set_range(keys.msg_key(sid, nxt)):
                    for k, v in cur.iternext():
                        if not k.startswith(prefix):
                            break
                        seq = keys.read_u64(k, 8)
                        if end is not None and seq > end:
                            break
                        batch.append(self._msg(seq, v))
                        if len(batch) >= chunk:
                            break
            yield from batch
            if len(batch) < chunk:
                return
            nxt = batch[-1].seq + 1

    def stream_names(self, subject: str | None = None) -> list[str]:
        """Stream names, sorted; with ``subject``, only streams whose subjects intersect it."""
        out: list[str] = []
        with self.env.read() as txn:
            for k, v in txn.cursor(db=self.env.dbs[keys.DB_STREAMS]).iternext():
                if subject:
                    _, _, cfg_json = keys.unpack_named_record(bytes(v), keys.STREAM_RECORD_VERSION)
                    cfg = StreamConfig.model_validate(json.loads(cfg_json))
                    if not any(subjects_overlap(subject, s) for s in cfg.subjects):
                        continue
                out.append(bytes(k).decode())
        return sorted(out)

    def stream_list(self, subject: str | None = None) -> list[StreamInfo]:
        return [self.stream_info(n) for n in self.stream_names(subject)]

    def consumer_names(self, stream: str) -> list[str]:
        with self.env.read() as txn:
            sid = self._sid(txn, stream)
            prefix = keys.sid_prefix(sid)
            cur = txn.cursor(db=self.env.dbs[keys.DB_CONSUMERS])
            out: list[str] = []
            if cur.set_range(prefix):
                for k in cur.iternext(keys=True, values=False):
                    if not k.startswith(prefix):
                        break
                    out.append(keys.consumer_key_name(k))
        return sorted(out)

    def consumer_list(self, stream: str) -> list[ConsumerInfo]:
        return [self.consumer_info(stream, n) for n in self.consumer_names(stream)]
