"""A consumer's num_pending (spec §1.7) inside the writer: kept up to date by every append
and removal once known, and counted afresh — after a restart, a purge that moves the
consumer, an update — in bounded work per batch. Writer thread only; each :class:`store.consumers.ConsumerRt` has
one (``ConsumerRt.counts``), which reads the consumer's position through :class:`Position`.

A count that reads at most the batch's budget (``Ctx.walk_left``, at least
``Ctx.count_min`` records) is made at once; a longer one goes on in later batches (the
consumer is due again meanwhile: :meth:`PendingCounts.pending_known` says False), and the
consumer delivers nothing until it is known. A count in slices is one of:

- a walk of the stream's records from a seq (``counting = [from, next seq, so far]``);
  a removal behind the walk takes its message off the count;
- for a ``last_per_subject`` consumer in its first pass (``lps_end``), a walk of the
  subject records its filters match (``lps_counting``, :class:`LpsScan`): a subject
  counts once if it has a message in ``(delivered_sseq, lps_end]``; then the messages
  after ``lps_end``, counted as above. A removal in ``(delivered_sseq, lps_end]`` takes
  its subject off the count if the subject was counted and has no other message there.

The same walk of subject records places a new ``last_per_subject`` consumer, and a
``last`` one with wildcard filters (:func:`lps_slice`; store.admin runs it in slices
before the consumer exists).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from store import keys, subjindex
from store.ctx import Ctx
from store.streams import StreamRt
from store.subjects import is_literal, matcher, subject_matches
from store.subjrecs import RecordsPos, SubjectRecords

EVERY_SUBJECT = (">",)
# A count reads at least this many records per call (``Ctx.count_min``), so small streams
# are counted at once.
COUNT_AT_ONCE = 4096


def _everything(subject: str) -> bool:
    return True


class LpsScan(NamedTuple):
    """A walk of the subject records some filters match, counting the subjects that have
    a message in ``(floor, end]`` — each subject's last message there is what a
    ``last_per_subject`` consumer delivers of it."""

    pos: RecordsPos | None  # where the next slice begins; None: done
    n: int  # subjects found so far
    lo: int  # the lowest of their last messages in the range (0: none yet)
    hi: int  # the highest


LPS_START = LpsScan((0, ""), 0, 0, 0)


def lps_slice(
    ctx: Ctx,
    recs: SubjectRecords,
    filters: tuple[str, ...],
    floor: int,
    end: int,
    scan: LpsScan,
    limit: int,
) -> tuple[LpsScan, int]:
    """The next slice of ``scan`` (at most ``limit`` subject records read); and how many
    records it read."""
    assert scan.pos is not None
    found, pos, read = recs.records_slice(ctx, filters, scan.pos, limit)
    n, lo, hi = scan.n, scan.lo, scan.hi
    cur = ctx.txn.cursor(db=ctx.subjects_db)
    for subject, _, first, last in found:
        if last > end:
            last = subjindex.prev_seq(cur, recs.sid_b, subject.encode(), end + 1, first)
        if last > floor:
            n += 1
            if not lo or last < lo:
                lo = last
            if last > hi:
                hi = last
    return LpsScan(pos, n, lo, hi), read


class Position(Protocol):
    """Where the consumer stands (store.consumers.ConsumerRt)."""

    @property
    def delivered_sseq(self) -> int:
        """The stream seq of its last new delivery."""
        ...

    @property
    def lps_end(self) -> int:
        """last_per_subject: the end of its first pass (0: none)."""
        ...


class PendingCounts:
    """num_pending of one consumer (see the module's docstring). ``stream``: the
    consumer's (its consumers are not read here)."""

    def __init__(self, stream: StreamRt[Any], pos: Position, filters: tuple[str, ...]) -> None:
        self.stream = stream
        self.pos = pos
        self.filters = filters
        self.num_pending_cache: int | None = None
        # A count in slices: a walk of the stream [from seq, next seq to read, matches so
        # far], or (first) the walk of a last_per_subject consumer's subject records.
        self.counting: list[int] | None = None
        self.lps_counting: LpsScan | None = None

    @property
    def filters(self) -> tuple[str, ...]:
        return self._filters

    @filters.setter
    def filters(self, filters: tuple[str, ...]) -> None:
        self._filters = filters
        self._matches: Callable[[str], bool]
        self._matches = matcher(filters) if filters else _everything

    def matches(self, subject: str) -> bool:
        return self._matches(subject)

    def num_pending(self, ctx: Ctx) -> int:
        """Messages matching the filter with seq > delivered.stream_seq (spec §1.7); counted
        at once if not known (see :meth:`pending_known` for the count in slices)."""
        if self.num_pending_cache is None:
            self.num_pending_cache = self._count_pending(ctx)
            self.counting = None
            self.lps_counting = None
        return self.num_pending_cache

    def forget(self) -> None:
        """num_pending must be counted again (positions moved, filters changed)."""
        self.num_pending_cache = None
        self.counting = None
        self.lps_counting = None

    def lps_first_pass(self) -> bool:
        """A last_per_subject consumer that has not passed the end of its first pass."""
        pos = self.pos
        return pos.delivered_sseq < pos.lps_end

    def pending_known(self, ctx: Ctx) -> bool:
        """Whether num_pending is known, counting a slice of it if not (the module's
        docstring): False leaves work for a later batch (the consumer is due now)."""
        if self.num_pending_cache is not None:
            return True
        budget = max(ctx.walk_left, ctx.count_min)
        st = self.stream
        if self.counting is None:
            start, n = self.pos.delivered_sseq + 1, 0
            if self.lps_first_pass():
                scan = self.lps_counting or LPS_START
                if scan.pos is not None:
                    scan, read = lps_slice(
                        ctx,
                        st.subj,
                        self.filters or EVERY_SUBJECT,
                        self.pos.delivered_sseq,
                        self.pos.lps_end,
                        scan,
                        budget,
                    )
                    ctx.walk_left -= read
                    budget = max(budget - read, 1)
                    if scan.pos is not None:
                        self.lps_counting = scan
                        return False
                self.lps_counting = None
                start, n = self.pos.lps_end + 1, scan.n
            quick = self._count_within(ctx, budget, start)
            if quick is not None:
                self.num_pending_cache = n + quick
                return True
            self.counting = [start, max(start, st.first_seq), n]
        start, pos, n = self.counting
        matches = self._matches if self.filters else None
        walked = 0
        for seq, rec in st.seqs_from(ctx, pos):
            if matches is None or matches(keys.msg_subject(rec)):
                n += 1
            walked += 1
            if walked >= budget:
                ctx.walk_left -= walked
                self.counting = [start, seq + 1, n]
                return False
        ctx.walk_left -= walked
        self.counting = None
        self.num_pending_cache = n
        return True

    def _count_within(self, ctx: Ctx, budget: int, start: int) -> int | None:
        """Stored messages matching the filters with seq >= ``start`` if counting them
        reads about ``budget`` records at most, else None."""
        st = self.stream
        start = max(start, st.first_seq)
        if start > st.last_seq or not st.messages:
            return 0
        if not self.filters:
            gaps = st.last_seq - st.first_seq + 1 != st.messages
            if gaps and min(start - st.first_seq, st.last_seq - start) > budget:
                return None
            return st.stored_from(ctx, start)
        if all(is_literal(f) for f in self.filters):
            n = 0
            for f in self.filters:
                count, first, last = st.subj.subject_record(ctx, f)
                if start <= first:
                    n += count
                elif start <= last:
                    if count > budget:
                        return None
                    n += st.subj.count_from(ctx, f, start)
            return n
        if st.last_seq - start < budget:
            return self._count_from(ctx, start)
        if start <= st.first_seq:
            # Every matching subject counts whole: its records, if reading them is cheap.
            records = self.records_within(ctx, budget)
            return None if records is None else sum(count for _, count, _ in records)
        return None

    def records_within(self, ctx: Ctx, limit: int) -> list[tuple[str, int, int]] | None:
        """``(subject, count, last seq)`` of each subject the filters match, from the
        subject records under each filter's literal prefix; None if that reads more than
        ``limit`` records (matching or not)."""
        found, pos, _ = self.stream.subj.records_slice(ctx, self.filters, (0, ""), limit)
        if pos is not None:
            return None
        return [(subject, count, last) for subject, count, _, last in found]

    def _count_pending(self, ctx: Ctx) -> int:
        """num_pending counted at once."""
        if self.lps_first_pass():
            # Per matching subject, its last message up to lps_end if not delivered yet,
            # then every match after lps_end.
            scan, _ = lps_slice(
                ctx,
                self.stream.subj,
                self.filters or EVERY_SUBJECT,
                self.pos.delivered_sseq,
                self.pos.lps_end,
                LPS_START,
                keys.MAX_U64,
            )
            return scan.n + self._count_from(ctx, self.pos.lps_end + 1)
        return self._count_from(ctx, self.pos.delivered_sseq + 1)

    def _count_from(self, ctx: Ctx, start: int) -> int:
        """Stored messages matching the filters with seq >= ``start``."""
        st = self.stream
        start = max(start, st.first_seq)
        if start > st.last_seq or not st.messages:
            return 0
        if not self.filters:
            return st.stored_from(ctx, start)
        if all(is_literal(f) for f in self.filters):
            return sum(st.subj.count_from(ctx, f, start) for f in self.filters)
        if st.last_seq - start < st.num_subjects:
            # Fewer records from start on than subject records to read: count those.
            matches = self._matches
            return sum(1 for _, rec in st.seqs_from(ctx, start) if matches(keys.msg_subject(rec)))
        n = 0
        straddling: dict[bytes, tuple[int, int, int]] = {}
        for subj, count, first, last in st.subj.filtered_records(ctx, self.filters):
            if start <= last:
                if start <= first:
                    n += count
                else:
                    straddling[subj.encode()] = (count, first, last)
        # The messages from start on, if spread evenly over the stream's seqs.
        after = -(-st.messages * (st.last_seq - start + 1) // (st.last_seq - st.first_seq + 1))
        return n + len(st.subj.seqs_of(ctx, straddling, start, b"", after))

    def on_append(self, seq: int, subject: str) -> None:
        if (
            self.num_pending_cache is not None
            and seq > self.pos.delivered_sseq
            and self.matches(subject)
        ):
            self.num_pending_cache += 1

    def uncount(self, ctx: Ctx, seq: int, subject: str) -> None:
        """Message ``seq`` (> delivered_sseq) was removed: off the count if counted."""
        if seq <= self.pos.lps_end:
            self._uncount_lps(ctx, subject)
        elif self.num_pending_cache is not None:
            if self.matches(subject):
                self.num_pending_cache -= 1
        elif self.counting is not None and seq < self.counting[1] and self.matches(subject):
            self.counting[2] -= 1  # counted already

    def _uncount_lps(self, ctx: Ctx, subject: str) -> None:
        """A message of ``subject`` in the first pass's range went: the subject leaves the
        count if it was counted and has no other message there."""
        if not self.matches(subject):
            return
        if self.num_pending_cache is None and self.counting is None:
            scan = self.lps_counting
            if scan is None or (scan.pos is not None and not self._lps_passed(subject, scan.pos)):
                return  # not counted (yet)
        for q in self.stream.subj.subject_seqs(ctx, subject, self.pos.delivered_sseq + 1):
            if q <= self.pos.lps_end:
                return  # still counted: a message of it is left in the range
            break
        if self.num_pending_cache is not None:
            self.num_pending_cache -= 1
        elif self.counting is not None:
            self.counting[2] -= 1
        elif self.lps_counting is not None:
            self.lps_counting = self.lps_counting._replace(n=self.lps_counting.n - 1)

    def _lps_passed(self, subject: str, pos: RecordsPos) -> bool:
        """Whether the walk of subject records standing at ``pos`` has read ``subject``'s."""
        i, after = pos
        filters = self.filters or EVERY_SUBJECT
        for j, f in enumerate(filters):
            if subject_matches(f, subject):
                return j < i or (j == i and bool(after) and subject <= after)
        return False
