"""A consumer's num_pending (spec §1.7) inside the writer: kept up to date by every append
and removal once known, and counted afresh — after a restart, a purge that moves the
consumer, an update — in bounded work per batch. Writer thread only;
:class:`store.consumers.ConsumerRt` is a :class:`PendingCounts`.

A count that reads at most the batch's budget (``Ctx.walk_left``, at least
``Ctx.count_min`` records) is made at once; a longer one goes on in later batches (the
consumer is due again meanwhile: ``more``), and the consumer delivers nothing until it
is known. A count in slices is one of:

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
from typing import TYPE_CHECKING, NamedTuple

from store import keys, subjindex
from store.subjects import is_literal, matcher, subject_matches
from store.subjrecs import RecordsPos

if TYPE_CHECKING:
    from store.ctx import Ctx
    from store.streams import StreamRt

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
    st: StreamRt,
    filters: tuple[str, ...],
    floor: int,
    end: int,
    scan: LpsScan,
    limit: int,
) -> tuple[LpsScan, int]:
    """The next slice of ``scan`` (at most ``limit`` subject records read); and how many
    records it read."""
    assert scan.pos is not None
    found, pos, read = st.records_slice(ctx, filters, scan.pos, limit)
    n, lo, hi = scan.n, scan.lo, scan.hi
    cur = ctx.txn.cursor(db=ctx.subjects_db)
    for subject, _, first, last in found:
        if last > end:
            last = subjindex.prev_seq(cur, st.sid_b, subject.encode(), end + 1, first)
        if last > floor:
            n += 1
            if not lo or last < lo:
                lo = last
            if last > hi:
                hi = last
    return LpsScan(pos, n, lo, hi), read


class PendingCounts:
    """num_pending of one consumer (see the module's docstring)."""

    stream: StreamRt
    delivered_sseq: int
    lps_end: int
    more: bool
    num_pending_cache: int | None
    # A count in slices: a walk of the stream [from seq, next seq to read, matches so far],
    # or (first) the walk of a last_per_subject consumer's subject records.
    counting: list[int] | None
    lps_counting: LpsScan | None
    _filters: tuple[str, ...]
    _matches: Callable[[str], bool]

    @property
    def filters(self) -> tuple[str, ...]:
        return self._filters

    @filters.setter
    def filters(self, filters: tuple[str, ...]) -> None:
        self._filters = filters
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

    def forget_pending(self) -> None:
        """num_pending must be counted again (positions moved, filters changed)."""
        self.num_pending_cache = None
        self.counting = None
        self.lps_counting = None

    def lps_first_pass(self) -> bool:
        """A last_per_subject consumer that has not passed the end of its first pass."""
        return self.delivered_sseq < self.lps_end

    def pending_known(self, ctx: Ctx) -> bool:
        """Whether num_pending is known, counting a slice of it if not (the module's
        docstring)."""
        if self.num_pending_cache is not None:
            return True
        budget = max(ctx.walk_left, ctx.count_min)
        st = self.stream
        if self.counting is None:
            start, n = self.delivered_sseq + 1, 0
            if self.lps_first_pass():
                scan = self.lps_counting or LPS_START
                if scan.pos is not None:
                    scan, read = lps_slice(
                        ctx,
                        st,
                        self.filters or EVERY_SUBJECT,
                        self.delivered_sseq,
                        self.lps_end,
                        scan,
                        budget,
                    )
                    ctx.walk_left -= read
                    budget = max(budget - read, 1)
                    if scan.pos is not None:
                        self.lps_counting = scan
                        self.more = True
                        return False
                self.lps_counting = None
                start, n = self.lps_end + 1, scan.n
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
                self.more = True
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
                count, first, last = st.subject_record(ctx, f)
                if start <= first:
                    n += count
                elif start <= last:
                    if count > budget:
                        return None
                    n += st.count_from(ctx, f, start)
            return n
        if st.last_seq - start < budget:
            return self._count_from(ctx, start)
        if start <= st.first_seq:
            # Every matching subject counts whole: its records, if reading them is cheap.
            records = self._records_within(ctx, budget)
            return None if records is None else sum(count for _, count, _ in records)
        return None

    def _records_within(self, ctx: Ctx, limit: int) -> list[tuple[str, int, int]] | None:
        """``(subject, count, last seq)`` of each subject the filters match, from the
        subject records under each filter's literal prefix; None if that reads more than
        ``limit`` records (matching or not)."""
        found, pos, _ = self.stream.records_slice(ctx, self.filters, (0, ""), limit)
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
                self.stream,
                self.filters or EVERY_SUBJECT,
                self.delivered_sseq,
                self.lps_end,
                LPS_START,
                keys.MAX_U64,
            )
            return scan.n + self._count_from(ctx, self.lps_end + 1)
        return self._count_from(ctx, self.delivered_sseq + 1)

    def _count_from(self, ctx: Ctx, start: int) -> int:
        """Stored messages matching the filters with seq >= ``start``."""
        st = self.stream
        start = max(start, st.first_seq)
        if start > st.last_seq or not st.messages:
            return 0
        if not self.filters:
            return st.stored_from(ctx, start)
        if all(is_literal(f) for f in self.filters):
            return sum(st.count_from(ctx, f, start) for f in self.filters)
        if st.last_seq - start < st.num_subjects:
            # Fewer records from start on than subject records to read: count those.
            matches = self._matches
            return sum(1 for _, rec in st.seqs_from(ctx, start) if matches(keys.msg_subject(rec)))
        n = 0
        straddling: dict[bytes, tuple[int, int, int]] = {}
        for subj, count, first, last in st.filtered_records(ctx, self.filters):
            if start <= last:
                if start <= first:
                    n += count
                else:
                    straddling[subj.encode()] = (count, first, last)
        # The messages from start on, if spread evenly over the stream's seqs.
        after = -(-st.messages * (st.last_seq - start + 1) // (st.last_seq - st.first_seq + 1))
        return n + len(st.seqs_of(ctx, straddling, start, b"", after))

    def on_append(self, seq: int, subject: str) -> None:
        if (
            self.num_pending_cache is not None
            and seq > self.delivered_sseq
            and self.matches(subject)
        ):
            self.num_pending_cache += 1

    def uncount(self, ctx: Ctx, seq: int, subject: str) -> None:
        """Message ``seq`` (> delivered_sseq) was removed: off the count if counted."""
        if seq <= self.lps_end:
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
        for q in self.stream.subject_seqs(ctx, subject, self.delivered_sseq + 1):
            if q <= self.lps_end:
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
