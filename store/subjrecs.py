"""A stream's per-subject records inside the writer: for each subject the count, first and
last seq of its stored messages, cached and written once per batch, and the index scans
that read them. Writer thread only; each :class:`store.streams.StreamRt` has one
(``StreamRt.subj``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

from store import keys, subjindex
from store.ctx import Ctx
from store.subjects import is_literal, literal_prefix, matcher, subject_matches

MAX_CACHED_COUNTS = 50_000  # per stream: the subject-record cache is dropped above this
# At least this many subjects whose first seq must be found again in one flush: one pass
# over the index keys from the lowest bound (a step per key, 256 per epoch) instead of a
# scan per subject (a seek, ≈4 steps, per epoch it spans): about where the two cost the same.
SWEEP_STALE_FIRSTS: Final = 64
# Subjects with 3 to this many stored messages created in this process keep the list of
# their seqs in memory (``SubjectRecords._seqs``), so removing their first needs no index scan.
SMALL_SUBJECT = 8
# Most other small subjects whose seqs one sweep collects on the side (≈200 bytes each while
# the sweep runs).
MAX_SWEPT_LISTS: Final = 16_384
_pack_counts = keys.pack_subject_counts
# Where a walk of the subject records a consumer's filters match stands: the index of the
# filter it is on, and the last subject it read under that filter ("": none yet).
RecordsPos = tuple[int, str]
# Subject records :meth:`SubjectRecords.filtered_records` reads per call of records_slice.
RECORDS_CHUNK: Final = 1024


class RecordsOwner(Protocol):
    """What the records need of their stream."""

    @property
    def first_seq(self) -> int:
        """The stream's first stored seq."""
        ...

    def records_dirty(self) -> None:
        """The first record changed in a batch: the stream must be flushed before the
        commit (the engine flushes every stream the batch touched)."""
        ...


class SubjectRecords:
    """The per-subject records of one stream.

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

    def __init__(self, sid: int, owner: RecordsOwner) -> None:
        self.sid = sid
        self.sid_b = keys.sid_prefix(sid)
        self._owner = owner
        self.num_subjects = 0  # subjects with stored messages (the stream's state)
        self._subj: dict[str, list[int]] = {}
        self._dirty: set[str] = set()
        self._stale: set[str] = set()
        self._seqs: dict[str, list[int]] = {}
        # Filled by StreamRt.publish; flush_counts takes the subjcount keys from it.
        self.packers: dict[str, keys.SubjectPackers] = {}

    def subject_record(self, ctx: Ctx, subject: str, key: bytes | None = None) -> list[int]:
        """The cached ``[count, first seq, last seq]`` of a literal subject (mutable: only
        the writer's own bookkeeping below changes it); ``key``: its ``subjcount`` key, when
        the caller has it."""
        rec = self._subj.get(subject)
        if rec is None:
            raw = ctx.subjcount_cur.get(key or keys.subjcount_key(self.sid, subject))
            rec = list(keys.unpack_subject_record(bytes(raw))) if raw else [0, 0, 0]
            self._subj[subject] = rec
            ctx.cached.add(self)  # the engine bounds the cache when the batch ends
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
        packers = self.packers
        for subject in dirty:
            n, first, last = recs[subject]
            pk = packers.get(subject)
            key = pk.count_key if pk is not None else keys.subjcount_key(sid, subject)
            if n:
                cur.put(key, _pack_counts(n, first, last))
            else:
                if cur.set_key(key):
                    cur.delete()
                del recs[subject]
        dirty.clear()

    def bound_cache(self) -> None:
        """Drop the cached records when there are more than MAX_CACHED_COUNTS (and the seq
        lists with them). The engine calls it when a batch ends, after the flush: any
        cached record is then as written, and no caller holds one."""
        if len(self._subj) > MAX_CACHED_COUNTS and not self._dirty:
            self._subj.clear()
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
            stream_first = self._owner.first_seq
            if collect and 0 < stream_first < lo and lo - stream_first <= hi - lo:
                lo = stream_first  # no stale subject has a message below its bound
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

    def filtered_records(
        self, ctx: Ctx, filters: tuple[str, ...]
    ) -> Iterator[tuple[str, int, int, int]]:
        """:meth:`subject_records` of the subjects matching any of ``filters`` (which do not
        overlap, as consumer filters), in the order of :meth:`records_slice`, which reads
        them a chunk at a time: one lookup per literal filter, the keys under its literal
        prefix per wildcard one (every record only for a leading wildcard)."""
        pos: RecordsPos | None = (0, "")
        while pos is not None:
            found, pos, _ = self.records_slice(ctx, filters, pos, RECORDS_CHUNK)
            yield from found

    def records_slice(
        self, ctx: Ctx, filters: tuple[str, ...], pos: RecordsPos, limit: int
    ) -> tuple[list[tuple[str, int, int, int]], RecordsPos | None, int]:
        """:meth:`filtered_records` read in slices: those from ``pos`` on, reading at most
        ``limit`` subject records (matching or not); where the next slice begins (None:
        none is left) and how many records this one read. Filters in order, each filter's
        subjects in byte order."""
        self.flush_counts(ctx)
        cur = ctx.txn.cursor(db=ctx.subjcount_db)
        found: list[tuple[str, int, int, int]] = []
        read = 0
        i, after = pos
        while i < len(filters):
            f = filters[i]
            if is_literal(f):
                if read >= limit:
                    return found, (i, ""), read
                read += 1
                n, first, last = subjindex.record(cur, self.sid, f)
                if n:
                    found.append((f, n, first, last))
            else:
                matches = matcher((f,))
                for item in subjindex.records(cur, self.sid, literal_prefix(f), after):
                    if read >= limit:
                        return found, (i, after), read
                    read += 1
                    after = item[0]
                    if matches(after):
                        found.append(item)
            i += 1
            after = ""
        return found, None, read

    def _mark_dirty(self, ctx: Ctx, subject: str) -> None:
        if not self._dirty:
            self._owner.records_dirty()  # flushed before the commit
        self._dirty.add(subject)

    def index_append(self, ctx: Ctx, subject: str, seq: int, count_key: bytes) -> int:
        """Count message ``seq`` (just stored, the stream's newest) in its subject's record
        (``count_key``: the subject's ``subjcount`` key); the subject's count after it."""
        srec = self._subj.get(subject)
        if srec is None:
            srec = self.subject_record(ctx, subject, count_key)
        count = srec[0]
        if not count:
            srec[1] = seq
            self.num_subjects += 1
        elif count >= 2:
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
            self._owner.records_dirty()  # flushed before the commit
        self._dirty.add(subject)
        return count

    def unindex(self, ctx: Ctx, subject: str, subj_b: bytes, seq: int) -> None:
        """Drop message ``seq`` from the index and its subject's record, moving the
        subject's first/last seq to its next/previous stored message when it was one (a
        first that is not the neighbouring key is left as a lower bound: class doc)."""
        icur = ctx.subjects_cur
        key = keys.subject_index_key(self.sid, subj_b, seq)
        found = icur.set_key(key)
        if found:
            icur.delete()  # and the cursor moves to the next key
        self._unrecord(ctx, subject, subj_b, seq, key, found)

    def unindex_run(self, ctx: Ctx, subject: str, subj_b: bytes, seqs: list[int]) -> None:
        """:meth:`unindex` of each of ``seqs`` in turn (one subject's, in the order they
        went), with the same index and records, cheaper: a key the index cursor already
        stands on is not sought, and a chain of deletions of the subject's first message,
        each the index key right after the last within one epoch, is one record update
        (store.rundelete: the acknowledgements of a session's pending entries)."""
        icur = ctx.subjects_cur
        pack = keys.subject_packers(self.sid_b, subj_b).index_key
        sid = self.sid
        shift = keys.EPOCH_SHIFT
        srec = self._subj.get(subject) or self.subject_record(ctx, subject)
        small = self._seqs.get(subject)  # (removals never make a list)
        at = b""  # the key the index cursor stands on ("": not known)
        chain = 0  # deletions of the first folded into one update, the last of ``last_key``
        last_q = 0
        last_key = b""
        dirty = False
        for q in seqs:
            key = pack(sid, q >> shift, subj_b, q)
            if chain:
                if key == at and q >> shift == last_q >> shift and srec[0] - chain >= 3:
                    # The subject's next message is its new first (unindex: the next key
                    # in the same epoch), and it goes too.
                    icur.delete()
                    at = icur.key()
                    chain += 1
                    last_q, last_key = q, key
                    continue
                self._end_chain(ctx, subject, srec, chain, last_q, last_key, at)
                chain = 0
            found = key == at or icur.set_key(key)
            if found:
                icur.delete()
            n = srec[0]
            if small is not None:
                if n > 1 and q in small:  # as _unrecord
                    small.remove(q)
                    srec[0], srec[1], srec[2] = n - 1, small[0], small[-1]
                    if n - 1 <= 2:
                        del self._seqs[subject]
                        small = None
                    dirty = True
                    at = icur.key()
                    continue
            elif found and n >= 3 and q == srec[1]:
                at = icur.key()
                chain, last_q, last_key = 1, q, key
                continue
            self._unrecord(ctx, subject, subj_b, q, key, found)
            at = icur.key()  # wherever the update left it
        if chain:
            self._end_chain(ctx, subject, srec, chain, last_q, last_key, at)
        elif dirty:
            self._mark_dirty(ctx, subject)

    def _end_chain(
        self,
        ctx: Ctx,
        subject: str,
        srec: list[int],
        chain: int,
        seq: int,
        key: bytes,
        at: bytes,
    ) -> None:
        """The record after ``chain`` deletions of the subject's first message, the last
        of ``seq`` (index key ``key``; ``at``: the key after it): as :meth:`_unrecord` for
        it, its count less ``chain``."""
        srec[0] -= chain
        self._first_after(subject, srec, seq, key, at)
        self._mark_dirty(ctx, subject)

    def _first_after(self, subject: str, srec: list[int], seq: int, key: bytes, at: bytes) -> None:
        """The subject's first seq once its first, ``seq`` (index ``key``), is deleted: the
        index key ``at`` after it when that is in the same epoch (the usual case), else
        ``seq + 1`` as a lower bound (resolved by flush_counts)."""
        epoch_prefix = keys.subject_key_epoch_prefix(key)
        if at[: len(epoch_prefix)] == epoch_prefix:
            srec[1] = keys.subject_key_seq(at)
            self._stale.discard(subject)
        else:
            srec[1] = seq + 1
            self._stale.add(subject)

    def _unrecord(
        self, ctx: Ctx, subject: str, subj_b: bytes, seq: int, key: bytes, found: bool
    ) -> None:
        """The record part of :meth:`unindex`: ``seq``'s index ``key`` was just deleted
        (``found``) or is not in the index, and the index cursor stands where that left it."""
        icur = ctx.subjects_cur
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
                self._first_after(subject, srec, seq, key, icur.key() if found else b"")
            elif seq == last:
                srec[2] = subjindex.prev_seq(icur, self.sid_b, subj_b, seq, first)
        self._mark_dirty(ctx, subject)
