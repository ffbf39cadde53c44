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

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from typing import TYPE_CHECKING, Any

from store import keys, subjindex
from store.errors import JetStreamError, js_error
from store.models import StreamConfig
from store.ops import Headers, PubAck
from store.subjects import is_literal, is_valid_subject, subject_matches, tail_prefix

if TYPE_CHECKING:
    from store.consumers import ConsumerRt

_HEADER_BAD = frozenset("\r\n")
MAX_SUBJECT = 480  # bytes: keeps every index key under LMDB's 511-byte key limit
MAX_CACHED_COUNTS = 50_000  # per stream: the subject-record cache is dropped above this
# At least this many subjects whose first seq must be found again in one flush: one pass
# over the index keys from the lowest bound (a step per key, 256 per epoch) instead of a
# scan per subject (a seek, ≈4 steps, per epoch it spans): about where the two cost the same.
SWEEP_STALE_FIRSTS = 64
# Subjects with 3 to this many stored messages created in this process keep the list of
# their seqs in memory (``StreamRt._seqs``), so removing their first needs no index scan.
SMALL_SUBJECT = 8
# Most other small subjects whose seqs one sweep collects on the side (≈200 bytes each while
# the sweep runs).
MAX_SWEPT_LISTS = 16_384
# Per stream: subjects whose packers (keys.subject_packers, ≈270 bytes each) are kept; the
# cache is dropped when full (the broker's message subjects are unique: they only fill it).
MAX_CACHED_PACKERS = 16_384
MSG_RECORD_VERSION = keys.MSG_RECORD_VERSION
EPOCH_SHIFT = keys.EPOCH_SHIFT
_pack_msg_key = keys.pack_msg_key
_pack_counts = keys.pack_subject_counts
_new_tuple = tuple.__new__


@dataclass
class Ctx:
    """One batch: its write transaction, databases and time."""

    txn: Any
    dbs: dict[bytes, Any]
    now: int
    events: list[Any] = field(default_factory=list)
    retention_check: list[tuple[StreamRt, int]] = field(default_factory=list)
    touched: set[StreamRt] = field(default_factory=set)
    dirty_consumers: set[ConsumerRt] = field(default_factory=set)
    # The databases of the hot path, looked up once per batch, and one cursor on each for
    # point writes and lookups: ``cursor.put(k, v)`` costs about half of
    # ``txn.put(k, v, db=...)`` in py-lmdb. Scans open cursors of their own.
    msgs_db: Any = field(init=False)
    subjects_db: Any = field(init=False)
    subjcount_db: Any = field(init=False)
    msgs_cur: Any = field(init=False)
    subjects_cur: Any = field(init=False)
    subjcount_cur: Any = field(init=False)

    def __post_init__(self) -> None:
        self.msgs_db = self.dbs[keys.DB_MSGS]
        self.subjects_db = self.dbs[keys.DB_SUBJECTS]
        self.subjcount_db = self.dbs[keys.DB_SUBJCOUNT]
        self.msgs_cur = self.txn.cursor(db=self.msgs_db)
        self.subjects_cur = self.txn.cursor(db=self.subjects_db)
        self.subjcount_cur = self.txn.cursor(db=self.subjcount_db)

    def db(self, name: bytes) -> Any:
        return self.dbs[name]


class StreamRt:
    """The writer's copy of one stream.

    Per-subject records — ``[count, first seq, last seq]`` of the stored messages on a
    subject — are cached in ``_subj`` (a subject absent from the cache is read from
    ``subjcount``; ``[0, 0, 0]`` = nothing stored). Within a batch they change only in
    memory; the subjects changed (``_dirty``) are written once each by
    :meth:`flush_counts`, which the engine calls before the commit and every reader of the
    ``subjcount`` table calls before it reads. After an aborted batch the engine rebuilds
    every ``StreamRt``, so the cache never holds uncommitted records.

    When a subject's first message goes and the next one is not the neighbouring index
    key, the new first seq is found later: until :meth:`flush_counts` the cached first seq
    is a lower bound (the subject is in ``_stale``) — every reader scans from it, which is
    correct for a lower bound — and the flush resolves all of a batch's stale subjects,
    by one scan each or, for many, by one sweep over the epochs. What is written to
    ``subjcount`` is always exact. (Removing the stream's head over many sparse subjects —
    max_msgs, max_age, purges, per-subject history limits — would otherwise seek every
    epoch between a subject's first and second message, once per removal.)

    A subject that grows from 2 to 3 messages with an exact first seq gets the sorted list
    of its seqs in ``_seqs``, kept while it has 3 to ``SMALL_SUBJECT`` messages: its next
    first is then the list's second entry. Subjects read back from ``subjcount`` (after a
    restart or a cache drop) get their list when the flush resolves their first seq.
    """

    def __init__(self, name: str, sid: int, config: StreamConfig, created_ns: int) -> None:
        self.name = name
        self.sid = sid
        self.sid_b = keys.sid_prefix(sid)
        self._subj: dict[str, list[int]] = {}
        self._dirty: set[str] = set()
        self._stale: set[str] = set()
        self._seqs: dict[str, list[int]] = {}
        self._packers: dict[str, keys.SubjectPackers] = {}
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
        self.on_remove: Callable[[Ctx, StreamRt, int, str], None] | None = None

    def accepts(self, subject: str) -> bool:
        """Does one of the stream's subjects match the literal ``subject``?"""
        cfg = self.config
        if self._accepts_for is not cfg:  # built once per config (update_stream swaps it)
            self._accepts = _matcher(tuple(cfg.subjects))
            self._accepts_for = cfg
        return self._accepts(subject)

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

    def subject_record(self, ctx: Ctx, subject: str, key: bytes | None = None) -> list[int]:
        """The cached ``[count, first seq, last seq]`` of a literal subject (mutable: only
        the writer's own bookkeeping below changes it); ``key``: its ``subjcount`` key, when
        the caller has it."""
        rec = self._subj.get(subject)
        if rec is None:
            raw = ctx.subjcount_cur.get(key or keys.subjcount_key(self.sid, subject))
            rec = list(keys.unpack_subject_record(bytes(raw))) if raw else [0, 0, 0]
            self._subj[subject] = rec
        return rec

    def subject_count(self, ctx: Ctx, subject: str) -> int:
        return self.subject_record(ctx, subject)[0]

    def flush_counts(self, ctx: Ctx) -> None:
        """Write the subject records changed since the last flush (once per subject)."""
        dirty = self._dirty
        if not dirty:
            return
        if self._stale:
            self._resolve_firsts(ctx)
        recs = self._subj
        cur = ctx.subjcount_cur
        sid = self.sid
        packers = self._packers
        for subject in dirty:
            n, first, last = recs[subject]
            if n:
                pk = packers.get(subject)
                key = pk.count_key if pk is not None else keys.subjcount_key(sid, subject)
                cur.put(key, _pack_counts(n, first, last))
            else:
                if cur.set_key(keys.subjcount_key(sid, subject)):
                    cur.delete()
                del recs[subject]
        dirty.clear()
        if len(recs) > MAX_CACHED_COUNTS:
            recs.clear()
            self._seqs.clear()

    def _resolve_firsts(self, ctx: Ctx) -> None:
        """Find the exact first seq of every subject in ``_stale`` (see the class doc).

        A subject left with 3 to ``SMALL_SUBJECT`` messages gets its list of seqs while at
        it (the scan goes on to its last message), so its next removals need no scan: the
        records read back after a restart have no lists, and a key-value history or a
        stream head moving over many sparse subjects would otherwise scan for every
        removal.
        """
        recs = self._subj
        pending = {subj.encode(): recs[subj] for subj in self._stale}
        self._stale.clear()
        small = {b: rec[2] for b, rec in pending.items() if 3 <= rec[0] <= SMALL_SUBJECT}
        lists: dict[bytes, list[int]] = {b: [] for b in small}
        cur = ctx.txn.cursor(db=ctx.subjects_db)
        sid_b = self.sid_b
        if len(pending) < SWEEP_STALE_FIRSTS:
            for subj_b, rec in pending.items():
                if subj_b in small:
                    lists[subj_b] = list(subjindex.seqs(cur, sid_b, subj_b, rec[1], rec[2]))
                else:
                    rec[1] = subjindex.next_seq(cur, sid_b, subj_b, rec[1] - 1, rec[2])
        else:
            lo = min(rec[1] for rec in pending.values())
            hi = max(rec[2] for rec in pending.values())
            firsts = pending.keys() - small.keys()
            # When this pass builds lists it also collects the other small subjects it
            # meets, from the stream's first message if that at most doubles the pass:
            # after a restart one pass then gives most of them their list (a key-value
            # history over 10,000 subjects: one pass instead of one per batch of 1,000).
            collect = SMALL_SUBJECT if small else 0
            if collect and 0 < self.first_seq < lo and lo - self.first_seq <= hi - lo:
                lo = self.first_seq  # no stale subject has a message below its bound
            swept = subjindex.sweep_firsts(
                cur, sid_b, lo, hi, firsts, small, collect, MAX_SWEPT_LISTS
            )
            lists = swept.lists
            for subj_b in firsts:
                rec = pending[subj_b]
                seq = swept.firsts.get(subj_b)
                if seq is None:  # none unless the index lost keys
                    seq = subjindex.next_seq(cur, sid_b, subj_b, rec[1] - 1, rec[2])
                rec[1] = seq
            self._adopt_lists(ctx, swept.others)
        for subj_b, seqs in lists.items():
            rec = pending[subj_b]
            if len(seqs) == rec[0]:
                rec[1] = seqs[0]
                self._seqs[subj_b.decode()] = seqs
            else:  # the index lost keys: no list, the first from a scan
                rec[1] = subjindex.next_seq(cur, sid_b, subj_b, rec[1] - 1, rec[2])

    def _adopt_lists(self, ctx: Ctx, found: dict[bytes, list[int]]) -> None:
        """Keep as seq lists those of ``found`` (seqs of subjects met by a sweep) that hold
        every stored message of a subject with 3 to ``SMALL_SUBJECT`` of them."""
        for subj_b, seqs in found.items():
            if len(seqs) < 3:
                continue
            subject = subj_b.decode()
            if subject in self._seqs:
                continue
            # Exact: only the stale subjects' records are not, and the sweep leaves them out.
            rec = self.subject_record(ctx, subject)
            if rec[0] == len(seqs) and rec[1] == seqs[0] and rec[2] == seqs[-1]:
                self._seqs[subject] = seqs

    def subject_seqs(self, ctx: Ctx, subject: str, start: int = 0) -> Iterator[int]:
        """Stored sequences of one literal subject, ascending, from ``start``."""
        n, first, last = self.subject_record(ctx, subject)
        if not n or start > last:
            return iter(())
        small = self._seqs.get(subject)
        if small is not None:
            return iter([q for q in small if q >= start])
        cur = ctx.txn.cursor(db=ctx.subjects_db)
        return subjindex.seqs(cur, self.sid_b, subject.encode(), max(start, first), last)

    def count_from(self, ctx: Ctx, subject: str, start: int) -> int:
        """Stored messages of one literal subject with seq >= ``start``."""
        n, first, last = self.subject_record(ctx, subject)
        if not n or start > last:
            return 0
        if start <= first:
            return n
        return sum(1 for _ in self.subject_seqs(ctx, subject, start))

    def filtered_seqs(self, ctx: Ctx, filter_: str) -> list[int]:
        """Stored seqs whose subject matches the wildcard ``filter_``, ascending."""
        wanted: dict[bytes, tuple[int, int, int]] = {}
        under_prefix = 0
        prefix = literal_prefix(filter_)
        self.flush_counts(ctx)
        for subj, n, first, last in subjindex.records(
            ctx.txn.cursor(db=ctx.subjcount_db), self.sid, prefix
        ):
            under_prefix += n
            if subject_matches(filter_, subj):
                wanted[subj.encode()] = (n, first, last)
        return self.seqs_of(ctx, wanted, 0, prefix.encode(), under_prefix)

    def seqs_of(
        self,
        ctx: Ctx,
        wanted: dict[bytes, tuple[int, int, int]],
        start: int,
        prefix: bytes,
        swept_keys: int,
    ) -> list[int]:
        """Stored seqs >= ``start`` of the ``wanted`` subjects (UTF-8 -> their record; all
        starting with ``prefix``), ascending. ``swept_keys`` estimates the messages stored
        under ``prefix`` from ``start`` on (an upper bound will do).

        Scans each subject (a seek per epoch it spans, a step per message) or sweeps the
        epochs once (a seek per epoch, a step per key under ``prefix``), whichever the
        records say costs less: many sparse subjects spanning the same epochs are swept.
        The estimate weighs a seek as 4 steps (py-lmdb: ≈0.9 µs per ``set_range``, ≈0.3 µs
        per step, plus building the key) and assumes a subject's messages spread evenly
        between its first and last seq.
        """
        if not wanted:
            return []
        shift = keys.EPOCH_SHIFT
        lo, hi, per_subject = keys.MAX_U64, 0, 0
        for n, first, last in wanted.values():
            if start > first:
                n = -(-n * (last - start + 1) // (last - first + 1))
                first = start
            lo, hi = min(lo, first), max(hi, last)
            per_subject += n + 4 * ((last >> shift) - (first >> shift) + 1)
        if lo > hi:
            return []
        cur = ctx.txn.cursor(db=ctx.subjects_db)
        if 4 * ((hi >> shift) - (lo >> shift) + 1) + swept_keys < per_subject:
            return subjindex.sweep(cur, self.sid_b, prefix, lo, hi, wanted.__contains__)
        return sorted(
            q
            for subj, (_, first, last) in wanted.items()
            if last >= start
            for q in subjindex.seqs(cur, self.sid_b, subj, max(first, start), last)
        )

    def last_seq_of_subject(self, ctx: Ctx, subject: str) -> int:
        """Last stored seq for ``subject`` (wildcards allowed); 0 when none."""
        if is_literal(subject):
            return self.subject_record(ctx, subject)[2]
        return max((last for _, _, _, last in self.subject_records(ctx, subject)), default=0)

    def subjects(self, ctx: Ctx, filter_: str | None = None) -> Iterator[str]:
        """Distinct stored subjects; with ``filter_`` only matching ones, scanning only the
        keys under the filter's literal prefix (``a.b.*`` looks at ``a.b.`` only)."""
        for subj, _, _, _ in self.subject_records(ctx, filter_):
            yield subj

    def subject_records(
        self, ctx: Ctx, filter_: str | None = None
    ) -> Iterator[tuple[str, int, int, int]]:
        """``(subject, count, first seq, last seq)`` of :meth:`subjects`, as committed to
        ``subjcount`` after a flush."""
        self.flush_counts(ctx)
        cur = ctx.txn.cursor(db=ctx.subjcount_db)
        for item in subjindex.records(cur, self.sid, literal_prefix(filter_) if filter_ else ""):
            if filter_ is None or subject_matches(filter_, item[0]):
                yield item

    def get_record(self, ctx: Ctx, seq: int) -> bytes | None:
        raw = ctx.txn.get(keys.msg_key(self.sid, seq), db=ctx.db(keys.DB_MSGS))
        return bytes(raw) if raw is not None else None

    def seqs_from(self, ctx: Ctx, start: int) -> Iterator[tuple[int, bytes]]:
        """``(seq, record)`` of stored messages with seq >= start, ascending."""
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_MSGS))
        if not cur.set_range(keys.msg_key(self.sid, start)):
            return
        prefix = keys.sid_prefix(self.sid)
        for k, v in cur.iternext():
            if not k.startswith(prefix):
                return
            yield keys.read_u64(k, 8), v

    # -- append --------------------------------------------------------------------------

    def publish(
        self, ctx: Ctx, subject: str, payload: bytes, headers: Headers, has_interest: bool
    ) -> PubAck | JetStreamError:
        """Spec §1.8 in its order of checks. Nothing is written unless every check passes."""
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
        msg_id: str | None = None
        rollup: str | None = None
        if headers:
            checked = self._check_headers(ctx, subject, headers)
            if isinstance(checked, PubAck | JetStreamError):
                return checked
            msg_id, rollup = checked
        block = keys.encode_headers(headers) if headers else b""
        size = len(block) + len(payload)
        if cfg.max_msg_size >= 0 and size > cfg.max_msg_size:
            return js_error("message_exceeds_maximum")
        subj_b = packers.utf8
        subj_len = len(subj_b)
        nbytes = 30 + subj_len + size + 4 if block else 30 + subj_len + size  # keys.msg_bytes
        seq = self.last_seq + 1
        if cfg.retention == "interest" and not has_interest:
            # Spec §1.5: the publish is acknowledged with a new seq, nothing is stored.
            self.last_seq = seq
            if not self.messages:
                self.first_seq = seq + 1
            if msg_id:
                self.dedupe_record(ctx, msg_id, seq)
            return _new_tuple(PubAck, (self.name, seq, False))
        if cfg.discard == "new":
            if cfg.max_msgs > 0 and self.messages + 1 > cfg.max_msgs:
                return js_error("store_failed", err="maximum messages exceeded")
            if cfg.max_bytes > 0 and self.bytes + nbytes > cfg.max_bytes:
                return js_error("store_failed", err="maximum bytes exceeded")
        mmps = cfg.max_msgs_per_subject
        if mmps > 0 and cfg.discard_new_per_subject and self.subject_count(ctx, subject) >= mmps:
            return js_error("store_failed", err="maximum messages per subject exceeded")
        # -- every check passed: write ------------------------------------------------
        now = ctx.now
        head = packers.record_head(MSG_RECORD_VERSION, now, subj_len, subj_b, len(block))
        ctx.msgs_cur.put(
            _pack_msg_key(self.sid, seq), head + block + payload if block else head + payload
        )
        ctx.subjects_cur.put(packers.index_key(self.sid, seq >> EPOCH_SHIFT, subj_b, seq), b"")
        srec = self._subj.get(subject)
        if srec is None:
            srec = self.subject_record(ctx, subject, packers.count_key)
        count = srec[0]
        if not count:
            srec[1] = seq
            self.num_subjects += 1
        elif cache_packers:  # a second message: cache (unique subjects would only churn it)
            if len(self._packers) >= MAX_CACHED_PACKERS:
                self._packers.clear()
            self._packers[subject] = packers
        if count >= 2:
            small = self._seqs.get(subject)
            if small is not None:
                if count < SMALL_SUBJECT:
                    small.append(seq)
                else:
                    del self._seqs[subject]
            elif count == 2 and SMALL_SUBJECT >= 3 and subject not in self._stale:
                self._seqs[subject] = [srec[1], srec[2], seq]
        count += 1
        srec[0] = count
        srec[2] = seq
        if not self._dirty:
            ctx.touched.add(self)  # the engine flushes touched streams before the commit
        self._dirty.add(subject)
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
        if mmps > 0 and count > mmps:
            for old in list(islice(self.subject_seqs(ctx, subject), count - mmps)):
                self.remove(ctx, old)
        if cfg.discard == "old":
            while cfg.max_msgs > 0 and self.messages > cfg.max_msgs:
                self.remove(ctx, self.first_seq)
            while cfg.max_bytes > 0 and self.bytes > cfg.max_bytes and self.messages > 1:
                self.remove(ctx, self.first_seq)
        if rollup == "sub":
            for old in list(self.subject_seqs(ctx, subject)):
                if old < seq:
                    self.remove(ctx, old)
        elif rollup == "all":
            for old, _ in list(self.seqs_from(ctx, 0)):
                if old >= seq:
                    break
                self.remove(ctx, old)
        # The state record is written once per batch by the engine (every stream it touched).
        return _new_tuple(PubAck, (self.name, seq, False))  # PubAck(name, seq), minus a call

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
        exp_stream = hdr.get("Nats-Expected-Stream")
        if exp_stream is not None and exp_stream != self.name:
            return js_error("stream_not_match")
        subj_seq_subject = hdr.get("Nats-Expected-Last-Subject-Sequence-Subject")
        raw = hdr.get("Nats-Expected-Last-Subject-Sequence")
        if raw is not None:
            want = _parse_u64(raw)
            if want is None:
                return js_error("bad_header", err="invalid Nats-Expected-Last-Subject-Sequence")
            on = subj_seq_subject or subject
            if not is_valid_subject(on):
                return js_error("bad_header", err="invalid expected last subject sequence subject")
            actual = self.last_seq_of_subject(ctx, on)
            if actual != want:
                return js_error("wrong_last_sequence", seq=actual)
        elif subj_seq_subject is not None:
            return js_error("expected_subject_seq_required")
        raw = hdr.get("Nats-Expected-Last-Sequence")
        if raw is not None:
            want = _parse_u64(raw)
            if want is None:
                return js_error("bad_header", err="invalid Nats-Expected-Last-Sequence")
            if self.last_seq != want:
                return js_error("wrong_last_sequence", seq=self.last_seq)
        msg_id = hdr.get("Nats-Msg-Id")
        if msg_id:
            found = self.dedupe_lookup(ctx, msg_id)
            if found is not None:
                return PubAck(self.name, found, duplicate=True)
        exp_id = hdr.get("Nats-Expected-Last-Msg-Id")
        if exp_id is not None:
            last_id = self.msg_id_of(ctx, self.last_seq)
            if last_id != exp_id:
                return js_error("wrong_last_msg_id", id=last_id)
        rollup = hdr.get("Nats-Rollup")
        if rollup is not None:
            if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                return js_error("rollup_failed", err="rollup not permitted")
            if rollup not in ("sub", "all"):
                return js_error("rollup_failed", err=f'rollup value invalid: "{rollup}"')
        if "Nats-TTL" in hdr:
            return js_error("msg_ttl_disabled")
        return msg_id or None, rollup

    def _mark_dirty(self, ctx: Ctx, subject: str) -> None:
        if not self._dirty:
            ctx.touched.add(self)  # the engine flushes touched streams before the commit
        self._dirty.add(subject)

    def _unindex(self, ctx: Ctx, subject: str, subj_b: bytes, seq: int) -> None:
        """Drop message ``seq`` from the index and its subject's record, moving the
        subject's first/last seq to its next/previous stored message when it was one (a
        first that is not the neighbouring key is left as a lower bound: class doc)."""
        icur = ctx.subjects_cur
        key = keys.subject_index_key_of(self.sid, subj_b, seq)
        found = icur.set_key(key)
        if found:
            icur.delete()  # and the cursor moves to the next key
        srec = self._subj.get(subject) or self.subject_record(ctx, subject)
        n, first, last = srec
        if n <= 1:
            if n:
                self.num_subjects -= 1
            srec[0] = srec[1] = srec[2] = 0
            if self._stale:
                self._stale.discard(subject)
            self._mark_dirty(ctx, subject)
            return
        small = self._seqs.get(subject)
        if small is not None and seq in small:  # 3 or more messages, all in the list
            small.remove(seq)
            srec[0], srec[1], srec[2] = n - 1, small[0], small[-1]
            if n - 1 <= 2:
                del self._seqs[subject]
            self._mark_dirty(ctx, subject)
            return
        if n == 2:  # one message left: it is both the first and the last
            srec[0] = 1
            if seq != last:
                srec[1] = last
            elif subject in self._stale:  # the other one, wherever it is
                srec[1] = srec[2] = subjindex.next_seq(icur, self.sid_b, subj_b, first - 1, last)
            else:
                srec[2] = first
            self._stale.discard(subject)
        else:
            srec[0] = n - 1
            if seq == first:
                # The next one usually sits right after the deleted key, in the same epoch.
                k = icur.key() if found else b""
                epoch_prefix = keys.subject_key_epoch_prefix(key)
                if k[: len(epoch_prefix)] == epoch_prefix:
                    srec[1] = keys.subject_key_seq(k)
                    self._stale.discard(subject)
                else:
                    srec[1] = seq + 1  # a lower bound, resolved by flush_counts
                    self._stale.add(subject)
            elif seq == last:
                srec[2] = subjindex.prev_seq(icur, self.sid_b, subj_b, seq, first)
        self._mark_dirty(ctx, subject)

    # -- dedupe --------------------------------------------------------------------------

    def dedupe_lookup(self, ctx: Ctx, msg_id: str) -> int | None:
        raw = ctx.txn.get(keys.dedupe_key(self.sid, msg_id), db=ctx.db(keys.DB_DEDUPE))
        if raw is None:
            return None
        seq = keys.read_u64(raw)
        ts = keys.read_u64(raw, 8)
        if ts + self.config.duplicate_window <= ctx.now:
            return None
        return seq

    def dedupe_record(self, ctx: Ctx, msg_id: str, seq: int) -> None:
        # Amortised eviction: every recorded id retires up to two expired ones, so the
        # dedupe tables stay bounded even when nobody drives Tick.
        self.evict_dedupe(ctx, limit=2)
        ctx.txn.put(
            keys.dedupe_key(self.sid, msg_id),
            keys.u64(seq) + keys.u64(ctx.now),
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
            if raw is not None and keys.read_u64(raw) == seq:
                if keys.read_u64(raw, 8) + self.config.duplicate_window > ctx.now:
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
        return keys.read_u64(raw, 8) if raw is not None else ctx.now

    # -- removal -------------------------------------------------------------------------

    def remove(self, ctx: Ctx, seq: int) -> bool:
        """Remove one message (limits, delete, purge, retention). False if not stored."""
        cur = ctx.msgs_cur
        if not cur.set_key(_pack_msg_key(self.sid, seq)):
            return False
        subj_b, size = keys.msg_subject_and_size(cur.value())
        subject = subj_b.decode()
        cur.delete()  # and the cursor moves to the next record
        self._unindex(ctx, subject, subj_b, seq)
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
            self.on_remove(ctx, self, seq, subject)
        return True

    def purge(self, ctx: Ctx, filter_: str | None, below: int | None, keep: int | None) -> int:
        """STREAM.PURGE: all, or by ``filter_``, below seq ``below``, keeping ``keep`` newest."""
        victims: list[int]
        if filter_ and is_literal(filter_):
            victims = list(self.subject_seqs(ctx, filter_))
        elif filter_:
            victims = self.filtered_seqs(ctx, filter_)
        else:
            victims = [q for q, _ in self.seqs_from(ctx, 0)]
        if below is not None:
            victims = [s for s in victims if s < below]
        if keep is not None:
            victims = victims[: max(0, len(victims) - keep)]
        for s in victims:
            self.remove(ctx, s)
        if not filter_ and keep is None and below is not None and below > self.last_seq + 1:
            # Purging past the end moves the stream forward (nats-server's "compact").
            self.last_seq = below - 1
            self.first_seq = below
        ctx.touched.add(self)  # the engine writes the state record once per batch
        return len(victims)

    def expire(self, ctx: Ctx) -> None:
        """Remove messages older than ``max_age`` (oldest first)."""
        max_age = self.config.max_age
        if max_age <= 0 or not self.messages:
            return
        cutoff = ctx.now - max_age
        changed = False
        while self.messages and self.first_ts and self.first_ts <= cutoff:
            self.remove(ctx, self.first_seq)
            changed = True
        if changed:
            self.save_state(ctx)

    def next_expiry(self) -> int:
        if self.config.max_age <= 0 or not self.messages or not self.first_ts:
            return 0
        return self.first_ts + self.config.max_age


def literal_prefix(filter_: str) -> str:
    """The tokens of ``filter_`` before its first wildcard, with their trailing dot."""
    out: list[str] = []
    for tok in filter_.split("."):
        if tok in ("*", ">"):
            return ".".join(out) + "." if out else ""
        out.append(tok)
    return filter_


def _matcher(filters: tuple[str, ...]) -> Callable[[str], bool]:
    """A test of "does one of ``filters`` match this subject", specialised for the usual
    stream subjects: one ``prefix.>`` (the broker's streams) is a ``startswith``."""
    if len(filters) == 1 and (prefix := tail_prefix(filters[0])) is not None:
        n = len(prefix)
        return lambda subject: len(subject) > n and subject.startswith(prefix)
    return lambda subject: any(subject_matches(f, subject) for f in filters)


@lru_cache(maxsize=1024)
def _header_name_ok(name: str) -> bool:
    """Header names repeat (the broker sends the same four on every message): cached."""
    return bool(name) and not any(c in _HEADER_BAD or c == ":" or c.isspace() for c in name)


@lru_cache(maxsize=65536)
def _publish_subject_ok(subject: str) -> bool:
    return is_valid_subject(subject, wildcards=False) and len(subject.encode()) <= MAX_SUBJECT


def _parse_u64(raw: str) -> int | None:
    raw = raw.strip()
    if not raw.isdigit():
        return None
    n = int(raw)
    return n if n <= keys.MAX_U64 else None
