"""Streams inside a write transaction: append with every limit and header check, removal,
purge, expiry, dedupe. Writer thread only.

A :class:`StreamRt` is the writer's cached copy of one stream (config + state). It is
mutated only inside a batch; if the batch aborts the engine drops every cached object and
reloads from LMDB, so the cache never runs ahead of what is committed.

State invariants (spec §1.5): an empty new stream has ``first_seq = last_seq = 0``; when
the last message goes, ``first_seq = last_seq + 1`` and ``first_ts`` is zero; interior gaps
are ``num_deleted = last_seq - first_seq + 1 - messages``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from functools import lru_cache
from itertools import islice
from typing import TYPE_CHECKING, NamedTuple

from store import keepbound, keys
from store.ctx import Ctx
from store.errors import JetStreamError, js_error
from store.models import StreamConfig
from store.ops import Headers, PubAck
from store.purgeplan import PurgePlan
from store.subjects import is_literal, is_valid_subject, matcher
from store.subjrecs import SubjectRecords

if TYPE_CHECKING:
    from store.consumers import ConsumerRt

_HEADER_BAD = frozenset("\r\n")
MAX_SUBJECT = 480  # bytes: keeps every index key under LMDB's 511-byte key limit
# Per stream: subjects whose packers (keys.subject_packers, ≈270 bytes each) are kept; the
# cache is dropped when full (the broker's message subjects are unique: they only fill it).
MAX_CACHED_PACKERS = 16_384
MSG_RECORD_VERSION = keys.MSG_RECORD_VERSION
EPOCH_SHIFT = keys.EPOCH_SHIFT
# A wildcard purge walks the stream; per slice it looks at most this many records that do
# not match per message it may remove (a sparse filter takes several short slices).
WALK_PER_REMOVAL = 4
_pack_msg_key = keys.pack_msg_key
_new_tuple = tuple.__new__


class Rollup(NamedTuple):
    """What :meth:`StreamRt.publish` returns for a stored message with a ``Nats-Rollup``
    header that replaces others: its PubAck, and the purge that removes those it replaces
    (every message of its subject, or of the stream, below its seq)."""

    ack: PubAck
    plan: PurgePlan


class StreamRt(SubjectRecords):
    """The writer's copy of one stream (its subject records: :class:`SubjectRecords`)."""

    def __init__(self, name: str, sid: int, config: StreamConfig, created_ns: int) -> None:
        super().__init__(sid)
        self.name = name
        self.config = config
        self._accepts_for: StreamConfig | None = None  # the config _accepts was built for
        self._accepts: Callable[[str], bool] = bool
        self.created_ns = created_ns
        self.first_seq = 0
        self.last_seq = 0
        self.messages = 0
        self.bytes = 0
        self.first_ts = 0
        self.last_ts = 0
        self.num_subjects = 0
        self.consumers: dict[str, ConsumerRt] = {}
        # (ctx, stream, seq, subject, purged): after each removal.
        self.on_remove: Callable[[Ctx, StreamRt, int, str, bool], None] | None = None
        # The removal of the excess left by a stream update that lowered limits is in
        # flight (store.slices.enforce): meanwhile an append removes at most one message
        # per limit. ``trim_gen`` numbers the latest such removal (it supersedes others).
        self.trimming = False
        self.trim_gen = 0
        self.removals = 0  # messages removed since this copy was made (memory only)

    def accepts(self, subject: str) -> bool:
        """Does one of the stream's subjects match the literal ``subject``?"""
        cfg = self.config
        if self._accepts_for is not cfg:  # built once per config (update_stream swaps it)
            self._accepts = matcher(tuple(cfg.subjects))
            self._accepts_for = cfg
        return self._accepts(subject)

    def _touch(self, ctx: Ctx) -> None:
        ctx.touched.add(self)

    # -- persistence ---------------------------------------------------------------------

    def load_state(self, record: bytes) -> None:
        (
            self.first_seq,
            self.last_seq,
            self.messages,
            self.bytes,
            self.first_ts,
            self.last_ts,
            self.num_subjects,
        ) = keys.unpack_stream_state(record)

    def save_state(self, ctx: Ctx) -> None:
        ctx.txn.put(
            keys.u64(self.sid),
            keys.pack_stream_state(
                self.first_seq,
                self.last_seq,
                self.messages,
                self.bytes,
                self.first_ts,
                self.last_ts,
                self.num_subjects,
            ),
            db=ctx.db(keys.DB_SSTATE),
        )

    # -- lookups -------------------------------------------------------------------------

    def get_record(self, ctx: Ctx, seq: int) -> bytes | None:
        raw = ctx.txn.get(keys.msg_key(self.sid, seq), db=ctx.db(keys.DB_MSGS))
        return bytes(raw) if raw is not None else None

    def seqs_from(self, ctx: Ctx, start: int) -> Generator[tuple[int, bytes], None, None]:
        """``(seq, record)`` of stored messages with seq >= start, ascending."""
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_MSGS))
        if not cur.set_range(keys.msg_key(self.sid, start)):
            return
        prefix = keys.sid_prefix(self.sid)
        for k, v in cur.iternext():
            if not k.startswith(prefix):
                return
            yield keys.read_u64(k, 8), v

    def stored_from(self, ctx: Ctx, start: int) -> int:
        """How many stored messages have seq >= ``start``: from the state when no message
        between the first and the last is missing, else by counting the keys on the
        shorter side of ``start``."""
        if start <= self.first_seq:
            return self.messages
        if start > self.last_seq:
            return 0
        if self.last_seq - self.first_seq + 1 == self.messages:
            return self.last_seq - start + 1
        cur = ctx.txn.cursor(db=ctx.msgs_db)
        before = start - self.first_seq < self.last_seq - start
        lo, hi = (self.first_seq, start - 1) if before else (start, self.last_seq)
        end = _pack_msg_key(self.sid, hi)
        n = 0
        if cur.set_range(_pack_msg_key(self.sid, lo)):
            for k in cur.iternext(values=False):
                if k > end:
                    break
                n += 1
        return self.messages - n if before else n

    def first_at_or_after(self, ctx: Ctx, t: int) -> int:
        """The seq of the first stored message stored at or after time ``t`` (ns), or
        ``last_seq + 1``: a binary search, seeking O(log n) records (a message's time never
        decreases with its seq)."""
        cur = ctx.txn.cursor(db=ctx.msgs_db)
        lo, hi = self.first_seq, self.last_seq
        found = self.last_seq + 1
        while lo <= hi:
            mid = (lo + hi) // 2
            q = 0
            if cur.set_range(_pack_msg_key(self.sid, mid)):
                k = cur.key()
                if k[:8] == self.sid_b:
                    q = keys.split_msg_key(k)[1]
            if not q or q > hi:  # nothing stored from mid to hi
                hi = mid - 1
            elif keys.msg_time(cur.value()) >= t:
                found = q  # and nothing is stored from mid to just below q
                hi = mid - 1
            else:
                lo = q + 1
        return found

    def newest_match(self, ctx: Ctx, matches: Callable[[str], bool], limit: int) -> int | None:
        """The seq of the newest stored message whose subject ``matches``, looking at the
        ``limit`` newest records at most: 0 if none matches, None if it is not among them."""
        for seq, rec in self.seqs_back(ctx, self.last_seq + 1):
            if matches(keys.msg_subject(rec)):
                return seq
            limit -= 1
            if limit <= 0:
                return None
        return 0

    def seqs_back(self, ctx: Ctx, before: int) -> Iterator[tuple[int, bytes]]:
        """``(seq, record)`` of stored messages with seq < before, descending."""
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_MSGS))
        if cur.set_range(keys.msg_key(self.sid, before)):
            ok = cur.prev()
        else:
            ok = cur.last()
        prefix = keys.sid_prefix(self.sid)
        while ok:
            k = cur.key()
            if not k.startswith(prefix):
                return
            yield keys.read_u64(k, 8), cur.value()
            ok = cur.prev()

    # -- append --------------------------------------------------------------------------

    def publish(
        self, ctx: Ctx, subject: str, payload: bytes, headers: Headers, has_interest: bool
    ) -> PubAck | JetStreamError | Rollup:
        """Spec §1.8's checks, in nats-server's order. Nothing is written unless every
        check passes. A rollup's removals are left to the caller (:class:`Rollup`)."""
        cfg = self.config
        if cfg.sealed:
            return js_error("stream_sealed")
        packers = self._packers.get(subject)
        cache_packers = False
        if packers is None:
            if not _publish_subject_ok(subject):
                return js_error("bad_header", err=f"invalid subject {subject[:64]!r}")
            packers = keys.subject_packers(self.sid_b, subject.encode())
            cache_packers = True  # once the subject is seen to repeat (below)
        try:
            block = keys.encode_headers(headers) if headers else b""
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8
            return js_error("bad_header", err="header is not valid UTF-8")
        # Size before the header checks: nats-server 2.15.1 answers an oversized message
        # with 10054 whatever its expected-* or dedupe headers say (measured against it;
        # spec §1.8 lists the size check after them).
        if cfg.max_msg_size >= 0 and len(block) + len(payload) > cfg.max_msg_size:
            return js_error("message_exceeds_maximum")
        msg_id: str | None = None
        rollup: str | None = None
        if headers:
            checked = self._check_headers(ctx, subject, headers)
            if isinstance(checked, PubAck | JetStreamError):
                return checked
            msg_id, rollup = checked
        subj_b = packers.utf8
        subj_len = len(subj_b)
        nbytes = keys.msg_bytes(subj_len, len(block), len(payload))
        seq = self.last_seq + 1
        if seq > keys.MAX_SEQ:  # (first_seq or a purge can put a stream at the end)
            return js_error("store_failed", err="stream sequence space exhausted")
        if cfg.retention == "interest" and not has_interest:
            # Spec §1.5: the publish is acknowledged with a new seq, nothing is stored.
            self.last_seq = seq
            if not self.messages:
                self.first_seq = seq + 1
            if msg_id:
                self.dedupe_record(ctx, msg_id, seq)
            return _new_tuple(PubAck, (self.name, seq, False))
        mmps = cfg.max_msgs_per_subject
        if cfg.discard == "new":
            # As nats-server's file store (measured against 2.15.1): a subject at its
            # per-subject limit refuses with discard_new_per_subject, unless the message is
            # a rollup (which makes room); otherwise the message replaces the subject's
            # oldest, so the stream does not grow: max_msgs does not refuse it, and
            # max_bytes only when it is larger than the message it replaces.
            replaces = False
            if mmps > 0 and self.subject_count(ctx, subject) >= mmps:
                if cfg.discard_new_per_subject and rollup is None:
                    return js_error("store_failed", err="maximum messages per subject exceeded")
                replaces = True
            if cfg.max_msgs > 0 and self.messages >= cfg.max_msgs and not replaces:
                return js_error("store_failed", err="maximum messages exceeded")
            if (
                cfg.max_bytes > 0
                and self.bytes + nbytes > cfg.max_bytes
                and (not replaces or self._oldest_size(ctx, subject) < nbytes)
            ):
                return js_error("store_failed", err="maximum bytes exceeded")
        # -- every check passed: write ------------------------------------------------
        now = ctx.now
        head = packers.record_head(MSG_RECORD_VERSION, now, subj_len, subj_b, len(block))
        ctx.msgs_cur.put(
            _pack_msg_key(self.sid, seq), head + block + payload if block else head + payload
        )
        ctx.subjects_cur.put(packers.index_key(self.sid, seq >> EPOCH_SHIFT, subj_b, seq), b"")
        count = self._index_append(ctx, subject, seq, packers.count_key)
        if cache_packers and count > 1:  # it repeats (unique subjects would only churn it)
            if len(self._packers) >= MAX_CACHED_PACKERS:
                self._packers.clear()
            self._packers[subject] = packers
        if not self.messages:
            self.first_seq = seq
            self.first_ts = now
        self.last_seq = seq
        self.last_ts = now
        self.messages += 1
        self.bytes += nbytes
        if msg_id:
            self.dedupe_record(ctx, msg_id, seq)
        # Limits that drop old messages.
        # (While lowered limits are being enforced in slices, one removal per limit keeps
        # the excess from growing; the slices remove the rest.)
        if mmps > 0 and count > mmps:
            extra = 1 if self.trimming else count - mmps
            for old in list(islice(self.subject_seqs(ctx, subject), extra)):
                self.remove(ctx, old)
        if cfg.discard == "old":
            while cfg.max_msgs > 0 and self.messages > cfg.max_msgs:
                self.remove(ctx, self.first_seq)
                if self.trimming:
                    break
            # Down to none: a message larger than max_bytes is acknowledged and removed
            # (as nats-server 2.15.1, measured).
            while cfg.max_bytes > 0 and self.bytes > cfg.max_bytes:
                self.remove(ctx, self.first_seq)
                if self.trimming:
                    break
        ack = _new_tuple(PubAck, (self.name, seq, False))  # PubAck(name, seq), minus a call
        if rollup is not None and (count > 1 if rollup == "sub" else self.messages > 1):
            # The messages it replaces go as a purge below its seq, which the engine runs
            # in slices (store.slices.rollup): on a big stream, in one transaction, every
            # other submission would wait for all of it.
            plan = PurgePlan(
                filter=subject if rollup == "sub" else None,
                pattern=None,
                start=self.first_seq,
                below=seq,
                compact_to=0,
                floor=False,
            )
            return _new_tuple(Rollup, (ack, plan))
        # The state record is written once per batch by the engine (every stream it touched).
        return ack

    def _oldest_size(self, ctx: Ctx, subject: str) -> int:
        """The stored size (``keys.msg_bytes``) of the oldest message on ``subject``."""
        for q in self.subject_seqs(ctx, subject):
            rec = self.get_record(ctx, q)
            if rec is not None:
                return keys.record_bytes(rec)
        return 0

    def _check_headers(
        self, ctx: Ctx, subject: str, headers: Headers
    ) -> tuple[str | None, str | None] | PubAck | JetStreamError:
        """Header syntax and the expected-*/dedupe/rollup checks, in nats-server's order."""
        cfg = self.config
        nats = False
        for k, v in headers:
            if not _header_name_ok(k):
                return js_error("bad_header", err=f"invalid header name {k!r}")
            if "\r" in v or "\n" in v:
                return js_error("bad_header", err=f"invalid header value for {k!r}")
            if k[:5] == "Nats-":
                nats = True
        if not nats:  # none of the headers below (the broker's never are)
            return None, None
        hdr = dict(headers)  # the last value of a repeated name wins
        # As nats-server 2.15.1 (measured): features it has and streams enable are refused
        # as disabled (this store has none of them); an empty expected-*/rollup header is
        # no header; a sequence that does not parse expects seq 0.
        for gate, err in _DISABLED_FEATURES:
            if gate in hdr:
                return js_error(err)
        exp_stream = hdr.get("Nats-Expected-Stream")
        if exp_stream and exp_stream != self.name:
            return js_error("stream_not_match")
        subj_seq_subject = hdr.get("Nats-Expected-Last-Subject-Sequence-Subject")
        raw = hdr.get("Nats-Expected-Last-Subject-Sequence")
        if raw:
            want = _parse_u64(raw) or 0
            on = subj_seq_subject or subject
            if not is_valid_subject(on):
                return js_error("bad_header", err="invalid expected last subject sequence subject")
            actual = self.last_seq_of_subject(ctx, on)
            if actual != want:
                return js_error("wrong_last_sequence", seq=actual)
        elif subj_seq_subject is not None:
            return js_error("expected_subject_seq_required")
        raw = hdr.get("Nats-Expected-Last-Sequence")
        if raw:
            want = _parse_u64(raw) or 0
            if self.last_seq != want:
                return js_error("wrong_last_sequence", seq=self.last_seq)
        msg_id = hdr.get("Nats-Msg-Id")
        if msg_id:
            found = self.dedupe_lookup(ctx, msg_id)
            if found is not None:
                return PubAck(self.name, found, duplicate=True)
        exp_id = hdr.get("Nats-Expected-Last-Msg-Id")
        if exp_id:
            last_id = self.msg_id_of(ctx, self.last_seq)
            if last_id != exp_id:
                return js_error("wrong_last_msg_id", id=last_id)
        rollup = hdr.get("Nats-Rollup") or None
        if rollup is not None:
            if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                return js_error("rollup_failed", err="rollup not permitted")
            if rollup not in ("sub", "all"):
                return js_error("rollup_failed", err=f'rollup value invalid: "{rollup}"')
        if "Nats-TTL" in hdr:
            return js_error("msg_ttl_disabled")
        return msg_id or None, rollup

    # -- dedupe --------------------------------------------------------------------------

    def dedupe_lookup(self, ctx: Ctx, msg_id: str) -> int | None:
        raw = ctx.txn.get(keys.dedupe_key(self.sid, msg_id), db=ctx.db(keys.DB_DEDUPE))
        if raw is None:
            return None
        seq, ts = keys.unpack_dedupe(bytes(raw))
        if ts + self.config.duplicate_window <= ctx.now:
            return None
        return seq

    def dedupe_record(self, ctx: Ctx, msg_id: str, seq: int) -> None:
        # Amortised eviction: every recorded id retires up to two expired ones, so the
        # dedupe tables stay bounded even when nobody drives Tick.
        self.evict_dedupe(ctx, limit=2)
        ctx.txn.put(
            keys.dedupe_key(self.sid, msg_id),
            keys.pack_dedupe(seq, ctx.now),
            db=ctx.db(keys.DB_DEDUPE),
        )
        ctx.txn.put(keys.msg_key(self.sid, seq), msg_id.encode(), db=ctx.db(keys.DB_DEDUPESEQ))

    def msg_id_of(self, ctx: Ctx, seq: int) -> str:
        raw = ctx.txn.get(keys.msg_key(self.sid, seq), db=ctx.db(keys.DB_DEDUPESEQ))
        return bytes(raw).decode() if raw is not None else ""

    def evict_dedupe(self, ctx: Ctx, limit: int = 10_000) -> None:
        """Forget msg ids older than the duplicate window (oldest first, bounded work)."""
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_DEDUPESEQ))
        prefix = keys.sid_prefix(self.sid)
        ddb = ctx.db(keys.DB_DEDUPE)
        if not cur.set_range(prefix):
            return
        for _ in range(limit):
            k = cur.key()
            if not k.startswith(prefix):
                return
            seq = keys.read_u64(k, 8)
            dkey = keys.dedupe_key(self.sid, bytes(cur.value()).decode())
            raw = ctx.txn.get(dkey, db=ddb)
            found, ts = keys.unpack_dedupe(bytes(raw)) if raw is not None else (0, 0)
            if found == seq:
                if ts + self.config.duplicate_window > ctx.now:
                    return
                ctx.txn.delete(dkey, db=ddb)
            if not cur.delete():
                return

    def oldest_dedupe_time(self, ctx: Ctx) -> int:
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_DEDUPESEQ))
        prefix = keys.sid_prefix(self.sid)
        if not cur.set_range(prefix) or not cur.key().startswith(prefix):
            return 0
        raw = ctx.txn.get(
            keys.dedupe_key(self.sid, bytes(cur.value()).decode()), db=ctx.db(keys.DB_DEDUPE)
        )
        return keys.unpack_dedupe(bytes(raw))[1] if raw is not None else ctx.now

    # -- removal -------------------------------------------------------------------------

    def remove(self, ctx: Ctx, seq: int, purged: bool = False) -> bool:
        """Remove one message (limits, age, delete, retention; ``purged``: a purge or a
        rollup). False if not stored."""
        cur = ctx.msgs_cur
        if not cur.set_key(_pack_msg_key(self.sid, seq)):
            return False
        subj_b, size = keys.msg_subject_and_size(cur.value())
        subject = subj_b.decode()
        cur.delete()  # and the cursor moves to the next record
        self._unindex(ctx, subject, subj_b, seq)
        self.removals += 1
        self.messages -= 1
        self.bytes -= size
        if not self.messages:
            self.first_seq = self.last_seq + 1
            self.first_ts = 0
        elif seq == self.first_seq:
            # The next stored message is the new first: where the cursor now stands.
            nxt = cur.key()
            if nxt[:8] == self.sid_b:
                self.first_seq = keys.split_msg_key(nxt)[1]
                self.first_ts = keys.msg_time(cur.value())
        if self.on_remove is not None:
            self.on_remove(ctx, self, seq, subject, purged)
        return True

    def purge_plan(
        self,
        ctx: Ctx,
        filter_: str | None,
        below: int | None,
        keep: int | None,
        keep_from: tuple[int, int] | None = None,
    ) -> PurgePlan:
        """STREAM.PURGE: all, or by ``filter_``, below seq ``below``, keeping ``keep`` newest.

        The plan fixes what the purge removes (nothing stored after it begins); :meth:`
        purge_step` carries it out a slice at a time, each from where the last one stopped:
        walking the stream (with a wildcard filter, matching each record's subject) or a
        literal subject's index. ``keep`` sets the bound where the ``keep`` newest
        matching messages begin: ``keep_from`` (``(sid, seq)``, found from a snapshot by
        the caller: store.keepbound) if it is this stream's, else found here."""
        # As nats-server: filter ">" is every subject, seq 0 no bound, keep 0 without a
        # filter all of it (each a purge of the whole stream).
        if filter_ == ">":
            filter_ = None
        if below == 0:
            below = None
        if keep == 0 and not filter_:
            keep = None
        if keep is not None and below is not None:
            raise ValueError("a purge takes a seq or keep, not both")
        bound = self.last_seq + 1 if below is None else min(below, self.last_seq + 1)
        literal = filter_ if filter_ and is_literal(filter_) else None
        pattern = filter_ if filter_ and literal is None else None
        if keep is not None:
            if keep_from is not None and keep_from[0] == self.sid:
                bound = keep_from[1]
            else:
                self.flush_counts(ctx)  # the subject records as of this batch
                state = (self.first_seq, self.last_seq, self.messages)
                bound = keepbound.keep_from(ctx.txn, ctx.dbs, self.sid, state, filter_, keep)
        return PurgePlan(
            filter=literal,
            pattern=pattern,
            start=self.first_seq,
            below=bound,
            # A whole-stream purge leaves first_seq at last_seq + 1, even on a new stream;
            # one past the end also moves last_seq (nats-server's "compact").
            compact_to=(
                max(bound, below or 0)
                if not filter_ and keep is None and (below is None or below > 1)
                else 0
            ),
            floor=not filter_ and keep is None,
        )

    def _pattern_slice(
        self, ctx: Ctx, plan: PurgePlan, take: int, walk: int
    ) -> tuple[list[int], int]:
        """Up to ``take`` seqs from ``plan.start`` below ``plan.below`` whose subject
        matches the wildcard ``plan.pattern``, walking the stream, and the seq to go on
        from (``plan.below``: done). It also stops after ``walk`` records that do not
        match, so a sparse filter is walked over several slices."""
        assert plan.pattern is not None
        matches = matcher((plan.pattern,))
        taken: list[int] = []
        for q, rec in self.seqs_from(ctx, plan.start):
            if q >= plan.below:
                break
            if matches(keys.msg_subject(rec)):
                if len(taken) == take:
                    return taken, q
                taken.append(q)
            else:
                walk -= 1
                if not walk:
                    return taken, q + 1
        return taken, plan.below

    def purge_step(self, ctx: Ctx, plan: PurgePlan, limit: int) -> tuple[int, PurgePlan | None]:
        """Remove at most ``limit`` messages of ``plan``: how many, and the plan that goes
        on (None: the purge is complete)."""
        taken: list[int] = []
        if plan.pattern is not None:
            walk = WALK_PER_REMOVAL * limit if limit < keys.MAX_U64 else keys.MAX_U64
            taken, q = self._pattern_slice(ctx, plan, limit, walk)
        else:
            found: Iterator[int]
            if plan.filter is not None:
                found = self.subject_seqs(ctx, plan.filter, plan.start)
            else:
                found = (q for q, _ in self.seqs_from(ctx, plan.start))
            for q in found:
                if q >= plan.below:
                    break
                if len(taken) == limit:  # one more exists: go on from it
                    break
                taken.append(q)
            else:
                q = plan.below
            if isinstance(found, Generator):
                found.close()  # its cursor: the removals below go through the same pages
        rest = plan._replace(start=q) if q < plan.below else None
        removed = 0
        for q in taken:
            if self.remove(ctx, q, purged=True):
                removed += 1
        if rest is None and plan.compact_to > self.last_seq and not self.messages:
            self.last_seq = max(self.last_seq, plan.compact_to - 1)
            self.first_seq = self.last_seq + 1
        ctx.touched.add(self)  # the engine writes the state record once per batch
        return removed, rest

    def expire(self, ctx: Ctx, limit: int) -> bool:
        """Remove messages older than ``max_age`` (oldest first), at most ``limit``; True
        if expired messages are left (the limit was reached)."""
        max_age = self.config.max_age
        if max_age <= 0 or not self.messages:
            return False
        cutoff = ctx.now - max_age
        changed = False
        while self.messages and self.first_ts and self.first_ts <= cutoff:
            if not limit:
                break
            if not self.remove(ctx, self.first_seq):
                return False  # first_seq not stored: never so; no endless continuation
            limit -= 1
            changed = True
        if changed:
            self.save_state(ctx)
        return bool(self.messages and self.first_ts and self.first_ts <= cutoff)

    def next_expiry(self) -> int:
        if self.config.max_age <= 0 or not self.messages or not self.first_ts:
            return 0
        return self.first_ts + self.config.max_age


# Headers of nats-server features a stream must enable, none of which this store has.
_DISABLED_FEATURES = (
    ("Nats-Batch-Id", "atomic_publish_disabled"),
    ("Nats-Incr", "counters_disabled"),
    ("Nats-Schedule", "schedules_disabled"),
)


@lru_cache(maxsize=1024)
def _header_name_ok(name: str) -> bool:
    """Header names repeat (the broker sends the same four on every message): cached."""
    return bool(name) and not any(c in _HEADER_BAD or c == ":" or c.isspace() for c in name)


@lru_cache(maxsize=65536)
def _publish_subject_ok(subject: str) -> bool:
    if not is_valid_subject(subject, wildcards=False):
        return False
    try:
        return len(subject.encode()) <= MAX_SUBJECT
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8
        return False


def _parse_u64(raw: str) -> int | None:
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()):  # str.isdigit takes other scripts' digits
        return None
    n = int(raw)
    return n if n <= keys.MAX_U64 else None
