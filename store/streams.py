"""Streams inside a write transaction: append with every limit and header check, removal,
expiry. Writer thread only.

A :class:`StreamRt` is the writer's cached copy of one stream (config + state). It is
mutated only inside a batch; if the batch aborts the engine drops every cached object and
reloads from LMDB, so the cache never runs ahead of what is committed. It is composed of
its subject records (``subj``: :class:`store.subjrecs.SubjectRecords`) and its message ids
(``dedupe``: :class:`store.dedupe.Dedupe`); purges are :mod:`store.purges`. It tells its
owner (the catalog: :class:`StreamHooks`) when a batch touched it, when a message went and
when a consumer is done with one; it never names a consumer class (``consumers`` holds
whatever the owner keeps there: ``StreamRt[ConsumerRt]``, store.consumers.Stream).

State invariants (spec §1.5): an empty new stream has ``first_seq = last_seq = 0``; when
the last message goes, ``first_seq = last_seq + 1`` and ``first_ts`` is zero; interior gaps
are ``num_deleted = last_seq - first_seq + 1 - messages``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from itertools import islice
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar

from store import keys
from store.ctx import Ctx
from store.dedupe import Dedupe
from store.errors import JetStreamError, js_error
from store.models import StreamConfig
from store.ops import Headers, PubAck
from store.pubsyntax import DISABLED_FEATURES, header_name_ok, parse_u64, publish_subject_ok
from store.purgeplan import PurgePlan
from store.subjects import is_valid_subject, matcher
from store.subjrecs import SubjectRecords

# Per stream: subjects whose packers (keys.subject_packers, ≈270 bytes each) are kept; the
# cache is dropped when full (the broker's message subjects are unique: they only fill it).
MAX_CACHED_PACKERS: Final = 16_384
MSG_RECORD_VERSION: Final = keys.MSG_RECORD_VERSION
EPOCH_SHIFT: Final = keys.EPOCH_SHIFT
_pack_msg_key = keys.pack_msg_key
_new_tuple = tuple.__new__


class Rollup(NamedTuple):
    """What :meth:`StreamRt.publish` returns for a stored message with a ``Nats-Rollup``
    header that replaces others: its PubAck, and the purge that removes those it replaces
    (every message of its subject, or of the stream, below its seq)."""

    ack: PubAck
    plan: PurgePlan


C = TypeVar("C")  # what the owner keeps in ``consumers``


class StreamHooks(Protocol):
    """What a stream tells its owner (store.catalog.Catalog)."""

    def touched(self, st: StreamRt[Any]) -> None:
        """The batch changed ``st``: deliver, flush and save it before the commit."""

    def removed(self, ctx: Ctx, st: StreamRt[Any], seq: int, subject: str, purged: bool) -> None:
        """Message ``seq`` of ``st`` went (``purged``: by a purge or a rollup)."""

    def released(self, st: StreamRt[Any], seq: int) -> None:
        """A consumer is done with ``seq``: interest/workqueue retention may remove it."""


class _NoHooks:
    def touched(self, st: StreamRt[Any]) -> None:
        pass

    def removed(self, ctx: Ctx, st: StreamRt[Any], seq: int, subject: str, purged: bool) -> None:
        pass

    def released(self, st: StreamRt[Any], seq: int) -> None:
        pass


class StreamRt(Generic[C]):
    """The writer's copy of one stream."""

    def __init__(self, name: str, sid: int, config: StreamConfig, created_ns: int) -> None:
        self.sid = sid
        self.sid_b = keys.sid_prefix(sid)
        self.subj = SubjectRecords(sid, self)
        self.dedupe = Dedupe(sid)
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
        self.consumers: dict[str, C] = {}
        self.hooks: StreamHooks = _NoHooks()  # set by the owner (store.catalog)
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

    @property
    def num_subjects(self) -> int:
        return self.subj.num_subjects

    def touched(self) -> None:
        """This batch changed the stream (its state record is written once per batch)."""
        self.hooks.touched(self)

    def records_dirty(self) -> None:
        """(store.subjrecs.RecordsOwner) The subject records changed: flush before commit."""
        self.hooks.touched(self)

    def release(self, seq: int) -> None:
        """A consumer is done with ``seq``: retention may remove it after delivery."""
        self.hooks.released(self, seq)

    def flush_counts(self, ctx: Ctx) -> None:
        self.subj.flush_counts(ctx)

    # -- persistence ---------------------------------------------------------------------

    def load_state(self, record: bytes) -> None:
        (
            self.first_seq,
            self.last_seq,
            self.messages,
            self.bytes,
            self.first_ts,
            self.last_ts,
            self.subj.num_subjects,
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

    def first_from(self, ctx: Ctx, start: int) -> tuple[int, bytes] | None:
        """``(seq, record)`` of the first stored message with seq >= start, or None: one
        lookup on the batch's message cursor (a consumer's next message, per delivery)."""
        cur = ctx.msgs_cur
        if not cur.set_range(_pack_msg_key(self.sid, start)):
            return None
        k = cur.key()
        if k[:8] != self.sid_b:
            return None
        return keys.read_u64(k, 8), cur.value()

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

    def _write(
        self,
        ctx: Ctx,
        subject: str,
        packers: keys.SubjectPackers,
        seq: int,
        block: bytes,
        payload: bytes,
        nbytes: int,
    ) -> int:
        """Store message ``seq`` (the stream's next) and count it; its subject's count."""
        now = ctx.now
        subj_b = packers.utf8
        subj_len = len(subj_b)
        head = packers.record_head(MSG_RECORD_VERSION, now, subj_len, subj_b, len(block))
        ctx.msgs_cur.put(
            _pack_msg_key(self.sid, seq), head + block + payload if block else head + payload
        )
        ctx.subjects_cur.put(packers.index_key(self.sid, seq >> EPOCH_SHIFT, subj_b, seq), b"")
        count = self.subj.index_append(ctx, subject, seq, packers.count_key)
        if not self.messages:
            self.first_seq = seq
            self.first_ts = now
        self.last_seq = seq
        self.last_ts = now
        self.messages += 1
        self.bytes += nbytes
        return count

    def _cache_packers(self, subject: str, packers: keys.SubjectPackers) -> keys.SubjectPackers:
        cache = self.subj.packers
        if len(cache) >= MAX_CACHED_PACKERS:
            cache.clear()
        cache[subject] = packers
        return packers

    def takes_as_is(self) -> bool:
        """No check of :meth:`publish` depends on the stream's state or the message's size
        (not sealed, limits retention without a limit, no maximum message size, no
        consumer): a message to a subject and with a header block (encoded, no ``Nats-``
        name) this stream just took as a new message takes the next seq the same way
        (:meth:`append_as_is`)."""
        cfg = self.config
        return not (
            cfg.sealed
            or self.consumers
            or cfg.retention != "limits"
            or cfg.max_msgs > 0
            or cfg.max_bytes > 0
            or cfg.max_msgs_per_subject > 0
            or cfg.max_msg_size >= 0
        )

    def append_as_is(self, ctx: Ctx, subject: str, block: bytes, payload: bytes) -> PubAck | None:
        """:meth:`publish` of a message whose checks held for the one before it (see
        :meth:`takes_as_is`), without them; None (nothing done) at the end of the
        sequence space, which :meth:`publish` answers."""
        seq = self.last_seq + 1
        if seq > keys.MAX_SEQ:
            return None
        subj = self.subj
        packers = subj.packers.get(subject)
        if packers is None:  # (the subject repeats: this is its second)
            packers = self._cache_packers(
                subject, keys.subject_packers(self.sid_b, subject.encode())
            )
        nbytes = keys.msg_bytes(len(packers.utf8), len(block), len(payload))
        self._write(ctx, subject, packers, seq, block, payload, nbytes)
        return _new_tuple(PubAck, (self.name, seq, False))

    def publish(
        self,
        ctx: Ctx,
        subject: str,
        payload: bytes,
        headers: Headers | bytes,
        has_interest: bool,
    ) -> PubAck | JetStreamError | Rollup:
        """Spec §1.8's checks, in nats-server's order. Nothing is written unless every
        check passes. A rollup's removals are left to the caller (:class:`Rollup`).
        ``headers`` as an encoded block (the broker's records, built by its own code) is
        stored as it is; it is decoded and checked only when it holds a ``Nats-`` name."""
        cfg = self.config
        if cfg.sealed:
            return js_error("stream_sealed")
        subj = self.subj
        packers = subj.packers.get(subject)
        cache_packers = False
        if packers is None:
            if not publish_subject_ok(subject):
                return js_error("bad_header", err=f"invalid subject {subject[:64]!r}")
            packers = keys.subject_packers(self.sid_b, subject.encode())
            cache_packers = True  # once the subject is seen to repeat (below)
        if isinstance(headers, bytes):
            block = headers
            if not (
                block.isascii()
                and block.startswith(b"NATS/1.0\r\n")
                and block.endswith(b"\r\n\r\n")
            ):
                return js_error("bad_header", err="invalid header block")
            headers = keys.decode_headers(block) if b"Nats-" in block else ()
        else:
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
                self.dedupe.record(ctx, msg_id, seq, cfg.duplicate_window)
            return _new_tuple(PubAck, (self.name, seq, False))
        mmps = cfg.max_msgs_per_subject
        if cfg.discard == "new":
            # As nats-server's file store (measured against 2.15.1): a subject at its
            # per-subject limit refuses with discard_new_per_subject, unless the message is
            # a rollup (which makes room); otherwise the message replaces the subject's
            # oldest, so the stream does not grow: max_msgs does not refuse it, and
            # max_bytes only when it is larger than the message it replaces.
            replaces = False
            if mmps > 0 and subj.subject_count(ctx, subject) >= mmps:
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
        count = self._write(ctx, subject, packers, seq, block, payload, nbytes)
        if cache_packers and count > 1:  # it repeats (unique subjects would only churn it)
            self._cache_packers(subject, packers)
        if msg_id:
            self.dedupe.record(ctx, msg_id, seq, cfg.duplicate_window)
        # Limits that drop old messages.
        # (While lowered limits are being enforced in slices, one removal per limit keeps
        # the excess from growing; the slices remove the rest.)
        if mmps > 0 and count > mmps:
            extra = 1 if self.trimming else count - mmps
            for old in list(islice(subj.subject_seqs(ctx, subject), extra)):
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
        for q in self.subj.subject_seqs(ctx, subject):
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
            if not header_name_ok(k):
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
        for gate, err in DISABLED_FEATURES:
            if gate in hdr:
                return js_error(err)
        exp_stream = hdr.get("Nats-Expected-Stream")
        if exp_stream and exp_stream != self.name:
            return js_error("stream_not_match")
        subj_seq_subject = hdr.get("Nats-Expected-Last-Subject-Sequence-Subject")
        raw = hdr.get("Nats-Expected-Last-Subject-Sequence")
        if raw:
            want = parse_u64(raw) or 0
            on = subj_seq_subject or subject
            if not is_valid_subject(on):
                return js_error("bad_header", err="invalid expected last subject sequence subject")
            actual = self.subj.last_seq_of_subject(ctx, on)
            if actual != want:
                return js_error("wrong_last_sequence", seq=actual)
        elif subj_seq_subject is not None:
            return js_error("expected_subject_seq_required")
        raw = hdr.get("Nats-Expected-Last-Sequence")
        if raw:
            want = parse_u64(raw) or 0
            if self.last_seq != want:
                return js_error("wrong_last_sequence", seq=self.last_seq)
        msg_id = hdr.get("Nats-Msg-Id")
        if msg_id:
            found = self.dedupe.lookup(ctx, msg_id, cfg.duplicate_window)
            if found is not None:
                return PubAck(self.name, found, duplicate=True)
        exp_id = hdr.get("Nats-Expected-Last-Msg-Id")
        if exp_id:
            last_id = self.dedupe.msg_id_of(ctx, self.last_seq)
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
        self.subj.unindex(ctx, subject, subj_b, seq)
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
        self.hooks.removed(ctx, self, seq, subject, purged)
        return True

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
