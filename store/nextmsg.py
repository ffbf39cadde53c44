"""Where a consumer's next new message is, inside the writer: the first stored message
after its position that its filters match. Writer thread only; each
:class:`store.consumers.ConsumerRt` has one (``c.finder``).

No filter: the next stored message. Literal filters: the lowest next seq of their
subjects in the index. Wildcard filters: a walk of the stream from the position
(``scan_floor`` remembers, in memory, how far nothing matched), and past ``Ctx.walk_min``
records the subject index of the subjects the filters' literal prefix selects, if few
enough have messages further on; otherwise the walk goes on while the batch's
``Ctx.walk_left`` lasts, and then in the next batch (store/DESIGN.md).
"""

from __future__ import annotations

from typing import Any

from store import keys
from store.counting import PendingCounts
from store.ctx import Ctx
from store.streams import StreamRt
from store.subjects import is_literal

# A consumer with wildcard filters looks for its next message by walking the stream from
# its position: SHORT_WALK records first (``Ctx.walk_min``: fewer with a small
# ``remove_slice``); if none matches, through the index of the subjects its filters
# match, if at most INDEXED_SUBJECTS of them have messages there and finding them reads
# at most SUBJECT_RECORDS_READ subject records; else by walking on while the batch's
# ``Ctx.walk_left`` lasts.
SHORT_WALK = 1024
INDEXED_SUBJECTS = 64
SUBJECT_RECORDS_READ = 1024


class NextMessage:
    def __init__(self, stream: StreamRt[Any], counts: PendingCounts) -> None:
        self.stream = stream
        self.counts = counts  # the consumer's filters
        self.scan_floor = 0  # no filtered match exists at or below this seq (memory only)
        self.stopped = False  # the last search stopped at the batch's walk budget

    def next_new(self, ctx: Ctx, start: int) -> tuple[int, bytes] | None:
        """The first stored message at or after ``start`` that the filters match, or None:
        none, or (``stopped``) the walk used up the batch's budget and goes on in the
        next batch (a no_wait request is not answered before it ends)."""
        st = self.stream
        start = max(start, st.first_seq, 1)
        if start > st.last_seq:
            return None
        if not self.counts.filters:
            return st.first_from(ctx, start)
        if all(is_literal(f) for f in self.counts.filters):
            best = 0
            for f in self.counts.filters:
                for s in st.subj.subject_seqs(ctx, f, start):
                    if not best or s < best:
                        best = s
                    break
            if not best:
                return None
            found = st.get_record(ctx, best)
            return (best, found) if found is not None else None
        start = max(start, self.scan_floor + 1)
        walked = 0
        try:
            for seq, rec in st.seqs_from(ctx, start):
                if self.counts.matches(keys.msg_subject(rec)):
                    return seq, rec
                walked += 1
                if walked == ctx.walk_min:
                    self.scan_floor = seq  # nothing matches up to here
                    subjects = self._matching_subjects(ctx, seq + 1)
                    if subjects is not None:
                        return self._next_of_subjects(ctx, subjects, seq + 1)
                if walked >= ctx.walk_min and walked >= ctx.walk_left:
                    self.scan_floor = seq
                    self.stopped = True
                    return None
            self.scan_floor = st.last_seq
            return None
        finally:
            ctx.walk_left -= walked

    def _matching_subjects(self, ctx: Ctx, start: int) -> list[str] | None:
        """The subjects the filters match that have messages at or after ``start``, or
        None if more than INDEXED_SUBJECTS do or finding them would read more than
        SUBJECT_RECORDS_READ subject records."""
        records = self.counts.records_within(ctx, SUBJECT_RECORDS_READ)
        if records is None:
            return None
        found = [subject for subject, _, last in records if last >= start]
        return found if len(found) <= INDEXED_SUBJECTS else None

    def _next_of_subjects(
        self, ctx: Ctx, subjects: list[str], start: int
    ) -> tuple[int, bytes] | None:
        """The first message at or after ``start`` on any of ``subjects``."""
        st = self.stream
        best = 0
        for subject in subjects:
            for q in st.subj.subject_seqs(ctx, subject, start):
                if not best or q < best:
                    best = q
                break
        if not best:
            self.scan_floor = st.last_seq
            return None
        self.scan_floor = best - 1
        rec = st.get_record(ctx, best)
        return (best, rec) if rec is not None else None

    def superseded(self, ctx: Ctx, seq: int, rec: bytes, lps_end: int) -> bool:
        """deliver_policy last_per_subject: is ``seq`` superseded by a later message of
        its subject up to ``lps_end`` (the end of the first pass; 0: none)?"""
        if not lps_end or seq > lps_end:
            return False
        for later in self.stream.subj.subject_seqs(ctx, keys.msg_subject(rec), seq + 1):
            return later <= lps_end
        return False
