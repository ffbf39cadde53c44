"""Stream and consumer administration inside a batch: create, update, delete, purge, info.

Writer thread only; called by :class:`store.engine.Engine` with its
:class:`store.catalog.Catalog`. Every check happens before the first write, so a refused
request changes nothing.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import replace
from typing import TYPE_CHECKING

from store import gojson, keys, purges, slices
from store.consumers import ConsumerRt, Stream
from store.continuations import CreateConsumerMore, EnforceLimits
from store.counting import EVERY_SUBJECT, LPS_START, lps_slice
from store.ctx import Ctx
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
    CreateConsumer,
    CreateStream,
    DeleteMsg,
    GetConsumerInfo,
    OpResult,
    PauseConsumer,
    PullStatus,
    PurgeStream,
)
from store.pausestate import PauseState
from store.pausing import Pause, advisory, normalized_until
from store.streams import StreamRt
from store.subjects import (
    is_literal,
    is_valid_subject,
    matcher,
    subject_matches,
    subjects_overlap,
)

if TYPE_CHECKING:
    from store.catalog import Catalog

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
    "mem_storage": "storage type can not be updated",
}


# -- stream admin --------------------------------------------------------------------


def create_stream(cat: Catalog, ctx: Ctx, op: CreateStream) -> OpResult:
    cfg = op.config.normalized()
    existing = cat.streams.get(cfg.name)
    if not op.update:
        if existing is not None:
            if existing.config == cfg:
                return stream_info(cat, ctx, existing)
            raise js_error("stream_name_exist")
        if cfg.sealed:
            raise js_error(
                "stream_invalid_config", err="stream configuration for create can not be sealed"
            )
        check_overlap(cat, cfg, None)
        sid = cat.next_id(ctx)
        st: Stream = StreamRt(cfg.name, sid, cfg, ctx.now)
        if cfg.first_seq:
            st.first_seq = cfg.first_seq
            st.last_seq = cfg.first_seq - 1
        write_stream_record(cat, ctx, st)
        st.save_state(ctx)
        cat.add_stream(st)
        return stream_info(cat, ctx, st)
    if existing is None:
        raise js_error("stream_not_found")
    old = existing.config

    def bad(msg: str) -> JetStreamError:
        return js_error("stream_invalid_config", err=msg)

    if cfg.storage != old.storage:
        raise bad("stream configuration update can not change storage type")
    if (cfg.retention == "workqueue") != (old.retention == "workqueue"):
        raise bad("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not cfg.sealed:
        raise bad("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not cfg.deny_delete:
        raise bad("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not cfg.deny_purge:
        raise bad("stream configuration update can not cancel deny purge")
    # (first_seq may change: kept in the config, no effect on the stored messages.)
    check_overlap(cat, cfg, existing)
    if cfg.sealed:
        # As nats-server 2.15.1 (measured): a sealed stream keeps everything as it is.
        cfg = cfg.model_copy(
            update={
                "max_age": 0,
                "discard": "new",
                "deny_delete": True,
                "deny_purge": True,
                "allow_rollup_hdrs": False,
            }
        )
    existing.config = cfg
    write_stream_record(cat, ctx, existing)
    cat.subjects_changed()
    # Tighter limits: the excess goes now, in slices; the reply comes with the last one.
    # A lower per-subject limit walks the stream (the others remove from its head); so
    # does any while an earlier update's removal is in flight (this one supersedes it).
    mmps, was = cfg.max_msgs_per_subject, old.max_msgs_per_subject
    lower = was <= 0 or mmps < was or existing.trimming
    walk = existing.first_seq if mmps > 0 and lower else 0
    if not slices.enforce(cat, ctx, existing, walk, True):
        return None  # the job is continued, not completed: this result is dropped
    return stream_info(cat, ctx, existing)


def enforce_more(cat: Catalog, ctx: Ctx, op: EnforceLimits) -> OpResult:
    """The next slice of the excess a stream update's lower limits left."""
    st = cat.streams.get(op.stream)
    if st is None or st.sid != op.sid:  # deleted meanwhile (its record with it)
        return js_error("stream_not_found") if op.info else True
    if not slices.enforce(cat, ctx, st, op.start, op.info, op.gen):
        return None
    return stream_info(cat, ctx, st) if op.info else True


def check_overlap(cat: Catalog, cfg: StreamConfig, me: Stream | None) -> None:
    for other in cat.streams.values():
        if other is me:
            continue
        for a in cfg.subjects:
            for b in other.config.subjects:
                if subjects_overlap(a, b):
                    raise js_error("stream_subject_overlap")


def write_stream_record(cat: Catalog, ctx: Ctx, st: Stream) -> None:
    ctx.txn.put(
        st.name.encode(),
        keys.pack_named_record(
            keys.STREAM_RECORD_VERSION, st.sid, st.created_ns, st.config.to_json()
        ),
        db=ctx.db(keys.DB_STREAMS),
    )


def delete_stream(cat: Catalog, ctx: Ctx, name: str) -> OpResult:
    """The stream is gone in this transaction; its messages, index and dedupe records (by
    its sid, which is never reused) are removed in slices, recorded by a ``meta`` sweep
    record so that a restart finishes the removal."""
    st = cat.stream(name)
    for cname in list(st.consumers):
        delete_consumer(cat, ctx, st, cname, reevaluate=False)
    ctx.txn.delete(keys.u64(st.sid), db=ctx.db(keys.DB_SSTATE))
    ctx.txn.delete(name.encode(), db=ctx.db(keys.DB_STREAMS))
    cat.drop_stream(name)
    cat.batch.streams.discard(st)
    return slices.begin_sweep(cat, ctx, st.sid)


def purge(cat: Catalog, ctx: Ctx, op: PurgeStream) -> OpResult:
    check_purge_request(op.seq, op.keep)
    st = cat.stream(op.stream)
    if st.config.sealed:
        raise js_error("stream_sealed")
    if st.config.deny_purge:
        raise js_error("purge_failed", err="stream purge not permitted")
    if op.seq is not None and op.keep is not None:
        raise js_error("bad_request")
    if op.filter is not None and not _valid_filter(op.filter):
        raise js_error("bad_request")
    plan = purges.purge_plan(st, ctx, op.filter, op.seq, op.keep, op.keep_from)
    return slices.purge(cat, ctx, st, plan)


def check_purge_request(seq: int | None, keep: int | None) -> None:
    """STREAM.PURGE's numbers are uint64 in nats-server: out of range is its JSON error."""
    gojson.check_uint64(seq, "JSApiStreamPurgeRequest.seq")
    gojson.check_uint64(keep, "JSApiStreamPurgeRequest.keep")


def delete_msg(cat: Catalog, ctx: Ctx, op: DeleteMsg) -> OpResult:
    if op.seq is None:
        raise TypeError("DeleteMsg.seq must be an int, not None")
    gojson.check_uint64(op.seq, "JSApiMsgDeleteRequest.seq")
    st = cat.stream(op.stream)
    if st.config.sealed:
        raise js_error("stream_sealed")
    if st.config.deny_delete:
        raise js_error("msg_delete_failed", err="message delete not permitted")
    if not st.remove(ctx, op.seq):
        # As a single nats-server 2.15.1 answers (measured): a gap between the first and
        # the last seq is 10043; outside them, its file store's error as 10057.
        if op.seq > st.last_seq:
            raise js_error("msg_delete_failed", err="stream store EOF")
        if op.seq < st.first_seq or op.seq == 0:
            raise js_error("msg_delete_failed", err="no message found")
        raise js_error("sequence_not_found", seq=op.seq)
    cat.batch.streams.add(st)  # the engine writes the state record once per batch
    return True


def stream_info(cat: Catalog, ctx: Ctx, st: Stream) -> StreamInfo:
    num_deleted = 0
    if st.messages:
        num_deleted = st.last_seq - st.first_seq + 1 - st.messages
    state = StreamState(
        messages=st.messages,
        bytes=st.bytes,
        first_seq=st.first_seq,
        first_ts=format_time(st.first_ts),
        last_seq=st.last_seq,
        last_ts=format_time(st.last_ts),
        num_subjects=st.num_subjects or None,
        num_deleted=num_deleted or None,
        consumer_count=len(st.consumers),
    )
    return StreamInfo(
        config=st.config,
        created=format_time(st.created_ns),
        state=state,
        cluster=ClusterInfo(leader=cat.node_name),
        ts=format_time(cat.clock()),
    )


# -- consumer admin ------------------------------------------------------------------


def create_consumer(
    cat: Catalog, ctx: Ctx, op: CreateConsumer, placed: CreateConsumerMore | None = None
) -> OpResult:
    """CONSUMER.CREATE. A ``last_per_subject`` consumer, and a ``last`` one with wildcard
    filters whose last match is not among the stream's newest records, is placed first by
    a walk of its subjects' records (:func:`create_consumer_more`, in slices), which then
    creates it (``placed``: the finished walk)."""
    st = cat.stream(op.stream)
    cfg = op.config.normalized(st.config.consumer_limits)
    name = cfg.name or cfg.durable_name
    existing = st.consumers.get(name) if name else None
    if existing is not None:
        if existing.config == cfg:
            return consumer_info(cat, ctx, existing)
        if op.action == "create":
            raise js_error("consumer_already_exists")
        return update_consumer(cat, ctx, existing, cfg)
    if op.action == "update":
        raise js_error("consumer_does_not_exist")
    if cfg.replay_policy != "instant":  # (an update says it can not be updated, as there)
        raise js_error("consumer_create", err="replay policy original is not supported")
    if not name:
        name = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))
        cfg = cfg.model_copy(update={"name": name})
    scfg = st.config
    if scfg.max_consumers > 0 and len(st.consumers) >= scfg.max_consumers:
        raise js_error("maximum_consumers")
    check_stream_rules(st, cfg, None)
    dp = cfg.deliver_policy
    last: int | None = None  # deliver_policy last: the last match, if known
    if placed is None and dp == "last" and not all(is_literal(f) for f in cfg.filters):
        last = st.newest_match(ctx, matcher(cfg.filters), ctx.walk_min)
    if placed is None and (dp == "last_per_subject" or (dp == "last" and last is None)):
        walk = CreateConsumerMore(
            CreateConsumer(op.stream, cfg, op.action), st, st.removals, st.last_seq, LPS_START
        )
        return create_consumer_more(cat, ctx, walk)
    cid = cat.next_id(ctx)
    c = ConsumerRt(st, name, cid, cfg, ctx.now)
    if c.pause.until > ctx.now:
        ctx.events.append(advisory(ctx, st.name, name, True, c.pause.text))
    if placed is None:
        initial_position(cat, ctx, st, c, last)
    else:
        place(st, c, placed)
    c.update_ack_floor()
    write_consumer_record(cat, ctx, c)
    st.consumers[name] = c
    c.save(ctx)
    cat.batch.streams.add(st)
    return consumer_info(cat, ctx, c)


def initial_position(
    cat: Catalog, ctx: Ctx, st: Stream, c: ConsumerRt, last: int | None = None
) -> None:
    """Where a new consumer starts (``last``: its last match, if found by the caller; a
    placed one starts where :func:`place` puts it)."""
    cfg = c.config
    dp = cfg.deliver_policy
    start = st.first_seq - 1 if st.first_seq else 0
    if dp == "new":
        start = st.last_seq
    elif dp == "last":
        if last is not None:
            pass
        elif c.counts.filters:
            last = max((st.subj.last_seq_of_subject(ctx, f) for f in c.counts.filters), default=0)
        else:
            last = st.last_seq if st.messages else 0
        start = last - 1 if last else st.last_seq
    elif dp == "by_start_sequence":
        start = (cfg.opt_start_seq or 1) - 1
    elif dp == "by_start_time":
        start = st.first_at_or_after(ctx, parse_time(cfg.opt_start_time or "")) - 1
    if dp == "new":
        c.counts.num_pending_cache = 0
    c.delivered_sseq = max(0, start)


def create_consumer_more(cat: Catalog, ctx: Ctx, op: CreateConsumerMore) -> OpResult:
    """A slice of the walk that places a new consumer (all of it when the job holds other
    operations too, or the store is closing); the last one creates it."""
    st = cat.stream(op.create.stream)
    if st is not op.stream_rt:
        return create_consumer(cat, ctx, op.create)  # the walk starts again on this copy
    filters = op.create.config.filters or EVERY_SUBJECT
    scan = op.scan
    while True:
        budget = max(ctx.walk_left, ctx.count_min)
        scan, read = lps_slice(ctx, st.subj, filters, 0, op.cap, scan, budget)
        ctx.walk_left -= read
        if scan.pos is None:
            return create_consumer(cat, ctx, op.create, replace(op, scan=scan))
        if ctx.may_continue and not cat.closing:
            ctx.go_on(replace(op, scan=scan))
            return None


def place(st: Stream, c: ConsumerRt, walk: CreateConsumerMore) -> None:
    """Position a new consumer as its finished walk found. ``last_per_subject``: from the
    lowest of its subjects' last messages, skipping what a later one up to the highest
    supersedes, num_pending the subjects found; ``last``: from the highest, num_pending
    one. Plus the matches stored since the walk began (counted from there), unless
    messages went meanwhile (then counted afresh)."""
    scan = walk.scan
    n = scan.n
    if not n:
        c.delivered_sseq = walk.cap
    elif c.config.deliver_policy == "last":
        c.delivered_sseq = scan.hi - 1
        n = 1
    else:
        c.delivered_sseq = scan.lo - 1
        c.lps_end = scan.hi
    if st.removals != walk.removals:
        c.counts.forget()
    elif st.last_seq == walk.cap:
        c.counts.num_pending_cache = n
    else:
        c.counts.counting = [walk.cap + 1, walk.cap + 1, n]


def check_stream_rules(st: Stream, cfg: ConsumerConfig, updating: ConsumerRt | None) -> None:
    """The rules a consumer's config must meet on its stream, at creation and (as
    nats-server 2.15.1, measured) at an update: no delivery into the stream's own
    subjects; on a workqueue stream explicit acks, deliver all, and filters no other
    consumer's overlap (an unfiltered one takes every subject). Only a creation is refused
    for being unfiltered next to others: the server lets an update drop the filter."""
    # (A filter matching none of the stream's subjects is accepted, as nats-server 2.15.1
    # does: the consumer delivers nothing.)
    scfg = st.config
    if cfg.deliver_subject and any(subject_matches(s, cfg.deliver_subject) for s in scfg.subjects):
        raise js_error("deliver_subject_cycle")
    if scfg.retention != "workqueue":
        return
    if cfg.ack_policy != "explicit":
        raise js_error("wq_requires_explicit_ack")
    if cfg.deliver_policy != "all":
        raise js_error("wq_consumer_not_deliver_all")
    others = [o for o in st.consumers.values() if o is not updating]
    if not others:
        return
    if not cfg.filters:
        if updating is None:
            raise js_error("wq_multiple_unfiltered")
        return
    for o in others:
        if any(subjects_overlap(a, b) for a in cfg.filters for b in o.counts.filters or (">",)):
            raise js_error("wq_consumer_not_unique")


def update_consumer(
    cat: Catalog, ctx: Ctx, c: ConsumerRt, cfg: ConsumerConfig
) -> ConsumerInfo | None:
    old = c.config
    if old.is_push != cfg.is_push:  # before the fields (max_waiting differs too)
        raise js_error(
            "consumer_create",
            err="can not update push consumer to pull based"
            if old.is_push
            else "can not update pull consumer to push based",
        )
    for field, msg in _FIXED_CONSUMER_FIELDS.items():
        if getattr(old, field) != getattr(cfg, field):
            raise js_error("consumer_create", err=msg)
    check_stream_rules(c.stream, cfg, c)
    # An update keeps the pause as it is, whatever pause_until it names (nats-server
    # 2.15.1, measured): only CONSUMER.PAUSE changes it.
    cfg = cfg.model_copy(update={"pause_until": old.pause_until})
    c.config = cfg
    c.counts.filters = cfg.filters
    c.finder.scan_floor = 0
    c.counts.forget()
    if (old.ack_wait, old.backoff) != (cfg.ack_wait, cfg.backoff):
        c.retime_ack_waits(ctx, old)
    write_consumer_record(cat, ctx, c)
    cat.batch.streams.add(c.stream)
    cat.batch.consumers.add(c)
    st = c.stream
    # Interest decides again with the new filters: messages only the old ones wanted go
    # (nats-server 2.15.1, measured). Over a slice, the info answers at the end.
    if (
        old.filters != cfg.filters
        and st.config.retention == "interest"
        and slices.reevaluate(cat, ctx, st, st.first_seq, c.name) is None
    ):
        return None
    return consumer_info(cat, ctx, c)


def write_consumer_record(cat: Catalog, ctx: Ctx, c: ConsumerRt) -> None:
    ctx.txn.put(
        keys.consumer_key(c.stream.sid, c.name),
        keys.pack_named_record(
            keys.CONSUMER_RECORD_VERSION, c.cid, c.created_ns, c.config.to_json()
        ),
        db=ctx.db(keys.DB_CONSUMERS),
    )


def delete_consumer(
    cat: Catalog, ctx: Ctx, st: Stream, name: str, *, reevaluate: bool = True
) -> OpResult:
    c = st.consumers.get(name)
    if c is None:
        raise js_error("consumer_not_found")
    for req in c.waiting:
        ctx.events.append(PullStatus(st.name, name, req.reply, 409, "Consumer Deleted"))
    c.waiting.clear()
    if len(c.pending) <= cat.remove_slice:
        slices.delete_prefix(ctx, keys.DB_PENDING, keys.u64(c.cid))
    else:
        slices.sweep_apart(cat, ctx, c.cid)
    ctx.txn.delete(keys.u64(c.cid), db=ctx.db(keys.DB_CSTATE))
    ctx.txn.delete(keys.consumer_key(st.sid, name), db=ctx.db(keys.DB_CONSUMERS))
    del st.consumers[name]
    cat.batch.consumers.discard(c)
    cat.batch.streams.add(st)
    # Interest retention decides again without it; a workqueue stream keeps what only
    # this consumer would have taken, for the next consumer (nats-server 2.15.1, measured).
    if reevaluate and st.config.retention == "interest":
        return slices.reevaluate(cat, ctx, st, st.first_seq)
    return True


def consumer_info(cat: Catalog, ctx: Ctx, c: ConsumerRt) -> ConsumerInfo | None:
    """The consumer's info; None when its num_pending is being counted in slices (the job
    goes on with a GetConsumerInfo, so the caller gets the info with the last slice)."""
    if not c.pending_known(ctx) and ctx.may_continue and not cat.closing:
        ctx.go_on(GetConsumerInfo(c.stream.name, c.name))
        return None
    now = cat.clock()
    remaining = c.pause.remaining(now)
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
        num_pending=c.counts.num_pending(ctx),
        push_bound=True if c.config.is_push and c.push_bound else None,
        paused=True if remaining is not None else None,
        pause_remaining=remaining,
        ts=format_time(now),
    )


def pause_consumer(cat: Catalog, ctx: Ctx, op: PauseConsumer) -> PauseState:
    """CONSUMER.PAUSE: the config's ``pause_until`` becomes ``op.until`` (written with the
    consumer record, so the pause outlives a restart); a past or zero time resumes, and
    the consumer delivers in this batch (store.pausing)."""
    c = cat.consumer(op.stream, op.consumer)
    try:
        until = normalized_until(op.until)
    except ValueError:
        raise js_error("invalid_json", err=gojson.time_error(op.until)) from None
    was_paused = c.pause.until > ctx.now
    # (resumed with the zero time, the server's config has no pause_until: measured)
    kept = None if until == gojson.ZERO_TIME else until
    c.config = c.config.model_copy(update={"pause_until": kept})
    c.pause = Pause(c.config, ctx.now)
    write_consumer_record(cat, ctx, c)
    cat.batch.streams.add(c.stream)  # (its deadline: the pause's end)
    cat.batch.consumers.add(c)
    state = c.pause.state(c.config, cat.clock())
    if state.paused or was_paused:  # (no advisory for resuming what was not paused)
        ctx.events.append(advisory(ctx, c.stream.name, c.name, state.paused, state.pause_until))
    return state


def _valid_filter(f: str) -> bool:
    return is_valid_subject(f)
