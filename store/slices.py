"""Long operations in slices, each recorded in ``meta`` so that a restart goes on with it.

Writer thread only. Removing many messages in one transaction would stall every other
submission behind it, so these operations remove at most ``Catalog.remove_slice``
messages per transaction when they are alone in their job (``ctx.may_continue``; with
other operations in the job they do everything at once, as the job commits as one) and
name their continuation with ``ctx.go_on`` (store.writer runs it in a batch of its own,
after whatever was submitted meanwhile). Where each stands is written to ``meta`` (the
layouts in store.keys) in the same transaction as its slice, and ``Store.open`` resumes
every one it finds:

- a deleted stream's data under its sid (the stream is gone in the first transaction):
  ``sweep`` record; so are the pending entries of a deleted consumer that had more than
  ``remove_slice`` of them, in a job of their own (the deletion answers at once);
- a purge (its plan, whose bound is fixed when it begins), or the removal of the messages
  a ``Nats-Rollup`` message replaces (a purge below its seq): ``purge`` record;
- after a consumer of an interest stream is deleted, the check of every message
  for one no consumer needs any more: ``recheck`` record;
- after a stream update lowers ``max_msgs_per_subject`` / ``max_msgs`` / ``max_bytes`` /
  ``max_age``, the removal of the excess: ``trim`` record (where the walk for the
  per-subject limit stands). While it runs, an append to the stream removes at most one
  message per limit (``StreamRt.trimming``), so it does not remove the whole excess at
  once either; a later update supersedes it (``StreamRt.trim_gen``).

The caller's result comes once, from the last slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store import keys, purges
from store.consumers import Stream
from store.continuations import EnforceLimits, PurgeMore, Reevaluate, SweepStream
from store.ctx import Ctx
from store.ops import GetConsumerInfo, OpResult, PubAck, PurgeResult
from store.purgeplan import PurgePlan, plan_record
from store.writer import CallbackJob

if TYPE_CHECKING:
    from store.catalog import Catalog

MAX_U64 = keys.MAX_U64
# A deleted stream's data is swept in slices of this many keys per message of a purge
# slice (a key deletion costs about a fifth of removing a message with its bookkeeping).
SWEEP_KEYS_PER_MSG = 4
# Records an update's per-subject limit walks per message it may remove in a slice (each
# looks up its subject's record: over unique subjects a walked record costs about what a
# removal does; 4 made slices of 120-220 ms there).
WALK_PER_REMOVAL = 1

# The databases a sweep empties under an id: a stream's data under its sid, a consumer's
# pending entries under its cid (stream and consumer ids come from one counter).
_SWEPT_DBS = (
    keys.DB_MSGS,
    keys.DB_SUBJECTS,
    keys.DB_SUBJCOUNT,
    keys.DB_DEDUPE,
    keys.DB_DEDUPESEQ,
    keys.DB_PENDING,
)


def slice_limit(cat: Catalog, ctx: Ctx) -> int:
    """Removals one operation may make in this batch (all when it cannot go on)."""
    return cat.remove_slice if ctx.may_continue else MAX_U64


def delete_prefix(ctx: Ctx, dbname: bytes, prefix: bytes, limit: int = MAX_U64) -> int:
    """Delete up to ``limit`` keys starting with ``prefix``; how many were deleted."""
    cur = ctx.txn.cursor(db=ctx.db(dbname))
    if not cur.set_range(prefix):
        return 0
    n = 0
    while n < limit and cur.key().startswith(prefix):
        n += 1
        if not cur.delete():
            break
    return n


# -- a deleted stream's data -----------------------------------------------------------------


def begin_sweep(cat: Catalog, ctx: Ctx, sid: int) -> OpResult:
    """The stream ``sid`` was deleted in this transaction: record its sweep, drop the
    records of its other long operations (they stop at their next slice), sweep."""
    meta = ctx.db(keys.DB_META)
    ctx.txn.put(keys.sweep_key(sid), b"", db=meta)
    delete_prefix(ctx, keys.DB_META, keys.purge_prefix(sid))
    ctx.txn.delete(keys.trim_key(sid), db=meta)
    ctx.txn.delete(keys.recheck_key(sid), db=meta)
    return sweep(cat, ctx, sid)


def sweep_apart(cat: Catalog, ctx: Ctx, cid: int) -> None:
    """A deleted consumer's pending entries under ``cid``, too many for this batch: record
    their sweep and run it in slices, in a job of its own that nobody waits for."""
    ctx.txn.put(keys.sweep_key(cid), b"", db=ctx.db(keys.DB_META))
    if not cat.closing:  # (else the next open goes on with the record)
        op = SweepStream(cid)
        ctx.unfinished.append((CallbackJob([op], _ignore), op))


def _ignore(results: list[OpResult] | BaseException) -> None:
    pass


def sweep(cat: Catalog, ctx: Ctx, sid: int) -> OpResult:
    """Remove a slice of a deleted stream's data, or of a deleted consumer's pending
    entries (``sid`` its cid), all of it when the job holds other operations too; True
    once nothing is left."""
    budget = SWEEP_KEYS_PER_MSG * cat.remove_slice if ctx.may_continue else MAX_U64
    prefix = keys.sid_prefix(sid)
    for dbname in _SWEPT_DBS:
        budget -= delete_prefix(ctx, dbname, prefix, budget)
        if budget <= 0:
            if cat.closing:
                # The store is closing: the sweep record stays, the next open goes on.
                return True
            ctx.go_on(SweepStream(sid))  # perhaps nothing is left: the next slice says so
            return None
    ctx.txn.delete(keys.sweep_key(sid), db=ctx.db(keys.DB_META))
    return True


# -- purge -------------------------------------------------------------------------------------


def purge(cat: Catalog, ctx: Ctx, st: Stream, plan: PurgePlan) -> OpResult:
    """Begin a checked purge: its first slice."""
    return _purge_slice(cat, ctx, st, plan, 0, 0)


def rollup(cat: Catalog, ctx: Ctx, st: Stream, plan: PurgePlan, ack: PubAck) -> OpResult:
    """The message ``ack`` names is stored with a ``Nats-Rollup`` header: remove what it
    replaces (``plan``), a slice at a time as a purge; the publisher gets ``ack`` with the
    last slice, so once acknowledged the rollup is complete, as with nats-server."""
    return _purge_slice(cat, ctx, st, plan, 0, 0, ack)


def purge_more(cat: Catalog, ctx: Ctx, op: PurgeMore) -> OpResult:
    st = cat.streams.get(op.stream)
    if st is None or st.sid != op.sid:  # deleted meanwhile: done
        ctx.txn.delete(keys.purge_key(op.sid, op.rid), db=ctx.db(keys.DB_META))
        return _purge_result(op.reply, op.purged)
    return _purge_slice(cat, ctx, st, op.plan, op.purged, op.rid, op.reply)


def _purge_slice(
    cat: Catalog,
    ctx: Ctx,
    st: Stream,
    plan: PurgePlan,
    before: int,
    rid: int,
    reply: PubAck | None = None,
) -> OpResult:
    """One slice of a purge (all of it when the job holds other operations too); ``rid``
    numbers its ``meta`` record (0: none yet, this is the first slice). The result is
    ``reply`` if given (a rollup's PubAck), else the number purged."""
    n, rest = purges.purge_step(st, ctx, plan, slice_limit(cat, ctx))
    if plan.floor:
        # Consumers that had not reached the purge point move past it.
        floor = st.first_seq - 1
        for c in st.consumers.values():
            if c.delivered_sseq < floor:
                c.delivered_sseq = floor
                c.counts.forget()
                if not c.pending:
                    c.update_ack_floor()
                cat.batch.consumers.add(c)
    # (Every removal went through StreamRt.remove: consumers' num_pending follow it.)
    cat.batch.streams.add(st)
    meta = ctx.db(keys.DB_META)
    if rest is None:
        if rid:
            ctx.txn.delete(keys.purge_key(st.sid, rid), db=meta)
        return _purge_result(reply, before + n)
    if not rid:
        rid = cat.next_id(ctx)
    ctx.txn.put(keys.purge_key(st.sid, rid), plan_record(rest), db=meta)
    if cat.closing:  # the record stays: the next open goes on (the count so far answers)
        return _purge_result(reply, before + n)
    ctx.go_on(PurgeMore(st.name, st.sid, rest, before + n, rid, reply))
    return None  # the job is continued, not completed: this result is dropped


def _purge_result(reply: PubAck | None, purged: int) -> OpResult:
    """A rollup's PubAck, else the number purged."""
    return reply if reply is not None else PurgeResult(purged)


# -- the check after a consumer deletion -------------------------------------------------------


def reevaluate_more(cat: Catalog, ctx: Ctx, op: Reevaluate) -> OpResult:
    st = cat.streams.get(op.stream)
    if st is None or st.sid != op.sid:  # deleted meanwhile: nothing left to check
        ctx.txn.delete(keys.recheck_key(op.sid), db=ctx.db(keys.DB_META))
        return True
    raw = ctx.txn.get(keys.recheck_key(st.sid), db=ctx.db(keys.DB_META))
    if raw is None or keys.read_u64(bytes(raw)) != op.start:
        # A later consumer deletion started a check from the stream's first message and
        # took over the record: it covers everything this one had left.
        return True
    done = reevaluate(cat, ctx, st, op.start, op.answer)
    if done and op.answer and op.answer in st.consumers:
        ctx.go_on(GetConsumerInfo(st.name, op.answer))  # read after this slice's removals
        return None
    return done


def reevaluate(cat: Catalog, ctx: Ctx, st: Stream, start: int, answer: str = "") -> OpResult:
    """Queue a slice of an interest stream's messages for the retention check
    (the engine removes those no consumer needs); True when the last slice is queued.
    ``answer``: the consumer whose info answers the job at the end (Reevaluate)."""
    limit = slice_limit(cat, ctx)
    n = 0
    found = st.seqs_from(ctx, start)
    try:
        for seq, _ in found:
            if n == limit:
                # Recorded, so that a restart goes on from here (Store.open).
                ctx.txn.put(keys.recheck_key(st.sid), keys.u64(seq), db=ctx.db(keys.DB_META))
                ctx.go_on(Reevaluate(st.name, st.sid, seq, answer))
                return None  # the job is continued, not completed: this result is dropped
            cat.batch.retention.append((st, seq))
            n += 1
    finally:
        found.close()  # its cursor: the removals come after, in the same transaction
    ctx.txn.delete(keys.recheck_key(st.sid), db=ctx.db(keys.DB_META))
    cat.batch.streams.add(st)
    return True


# -- limits lowered by a stream update -------------------------------------------------------


def enforce(cat: Catalog, ctx: Ctx, st: Stream, start: int, info: bool, gen: int = 0) -> bool:
    """Remove a slice of what the stream holds beyond its limits: walking the stream from
    seq ``start`` (0: that part is done), the oldest messages of subjects over
    ``max_msgs_per_subject``; then (discard old) the oldest messages while over
    ``max_msgs`` / ``max_bytes``; then those past ``max_age``. As nats-server 2.15.1
    (measured): with discard new, an update lowering ``max_msgs`` or ``max_bytes`` removes
    nothing (appends are refused until the stream is under them again), one lowering
    ``max_msgs_per_subject`` does. True when nothing is left over (the caller
    answers); False when the job goes on. ``gen``: 0 for the update itself, else the
    continuation's number; one superseded by a later update stops (True): the later one
    enforces the limits as they are now, walking the whole stream."""
    if gen and gen != st.trim_gen:
        return True
    limit = slice_limit(cat, ctx)
    cfg = st.config
    n = 0
    if start and cfg.max_msgs_per_subject > 0:
        start, n = _per_subject_slice(st, ctx, start, cfg.max_msgs_per_subject, limit)
    else:
        start = 0
    if not start and cfg.discard == "old":  # discard new: these limits refuse appends
        while n < limit and cfg.max_msgs > 0 and st.messages > cfg.max_msgs:
            st.remove(ctx, st.first_seq)
            n += 1
        while n < limit and cfg.max_bytes > 0 and st.bytes > cfg.max_bytes:
            st.remove(ctx, st.first_seq)
            n += 1
    cat.batch.streams.add(st)
    meta = ctx.db(keys.DB_META)
    if not start and n < limit and not st.expire(ctx, limit - n):
        if gen:
            st.trimming = False
            ctx.txn.delete(keys.trim_key(st.sid), db=meta)
        return True
    if not gen:
        st.trim_gen += 1
        gen = st.trim_gen
        st.trimming = True
    ctx.txn.put(keys.trim_key(st.sid), keys.u64(start), db=meta)
    if cat.closing:  # the trim record stays: the next open goes on
        return True
    ctx.go_on(EnforceLimits(st.name, st.sid, start, gen, info))
    return False


def _per_subject_slice(st: Stream, ctx: Ctx, start: int, mmps: int, limit: int) -> tuple[int, int]:
    """Walk the stream from seq ``start`` removing each message whose subject holds more
    than ``mmps`` (oldest first, so every subject keeps its newest), at most ``limit``
    removals and ``WALK_PER_REMOVAL * limit`` records: the seq to go on from (0: the walk
    reached the end) and how many were removed. In stream order, the removals of a slice
    share pages (subject by subject, 1,000,000 removals over 100 subjects took three
    times as long: each slice rewrote pages all over the stream)."""
    victims: list[int] = []
    over: dict[bytes, int] = {}  # subject: how many of its messages are still to go
    walk = WALK_PER_REMOVAL * limit if limit < MAX_U64 else MAX_U64
    go_on_from = 0
    found = st.seqs_from(ctx, start)
    try:
        for q, rec in found:
            if len(victims) == limit or not walk:
                go_on_from = q
                break
            walk -= 1
            subj = keys.msg_subject_bytes(rec)
            extra = over.get(subj)
            if extra is None:
                extra = st.subj.subject_count(ctx, subj.decode()) - mmps
            if extra > 0:
                victims.append(q)
            over[subj] = extra - 1
    finally:
        found.close()  # its cursor: the removals below write where it reads
    for q in victims:
        st.remove(ctx, q)
    return go_on_from, len(victims)
