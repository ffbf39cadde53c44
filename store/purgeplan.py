"""Where a purge stands between its slices, and that plan as its ``meta`` record
(store.keys: ``purge/``), so that a restart goes on with it. Writer thread only.
"""

from __future__ import annotations

from typing import NamedTuple

from store import keys


class PurgePlan(NamedTuple):
    """Where a purge stands between slices. Its bound is fixed when the purge begins, so
    messages stored while it runs are not purged."""

    filter: str | None  # a literal subject (the steps walk its index) or None
    pattern: str | None  # a wildcard filter: the steps walk the stream
    start: int  # the next seq to look at
    below: int  # purge seqs below this one
    compact_to: int  # whole stream: if empty at the end, first_seq = max(this, last_seq + 1)
    floor: bool  # consumers behind the purged range move past it


def plan_record(plan: PurgePlan) -> bytes:
    subject = plan.pattern if plan.pattern is not None else plan.filter
    return keys.pack_purge_record(
        subject, plan.pattern is not None, plan.floor, plan.start, plan.below, plan.compact_to
    )


def plan_of(record: bytes) -> PurgePlan:
    subject, wildcard, floor, start, below, compact_to = keys.unpack_purge_record(record)
    return PurgePlan(
        filter=None if wildcard else subject,
        pattern=subject if wildcard else None,
        start=start,
        below=below,
        compact_to=compact_to,
        floor=floor,
    )
