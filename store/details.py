"""The details of a stream info request, read on the caller's thread.

``subjects_filter`` (the ``{subject: count}`` map) and ``deleted_details`` (the seqs
missing between the first and the last) each read up to the whole stream's subject
records or message keys. They come from committed data in a read transaction, so the
writer — and every other submission — does not wait for them (a map of 1,000,000
subjects took the writer 3.6 s). The stream's state comes from the writer first; the
details read a snapshot at or after it (later commits may show in them, as in
nats-server, which also reads them apart from the state).

Subjects are paged as nats-server pages them: sorted (byte order, which is the order of
the ``subjcount`` keys), at most :data:`SUBJECTS_PAGE` from ``offset``, with the number
of matching subjects as the total.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from store import keys, subjindex
from store.subjects import literal_prefix, matcher

SUBJECTS_PAGE: Final = 100_000  # nats-server's JSMaxSubjectDetails


class Paged(NamedTuple):
    """The ``total`` / ``offset`` / ``limit`` of a paged API answer (zeros: not paged)."""

    total: int = 0
    offset: int = 0
    limit: int = 0


def subjects_page(
    txn: Any, dbs: dict[bytes, Any], sid: int, filter_: str, offset: int, num_subjects: int
) -> tuple[dict[str, int] | None, Paged]:
    """The counts of the subjects matching ``filter_`` in stream ``sid``, one page from
    ``offset``, and its paging (None and zeros when no subject matches)."""
    cur = txn.cursor(db=dbs[keys.DB_SUBJCOUNT])
    offset = max(offset, 0)
    every = filter_ == ">"
    matches = matcher((filter_,))
    page: dict[str, int] = {}
    end = offset + SUBJECTS_PAGE
    total = 0
    for subject, count, _, _ in subjindex.records(cur, sid, literal_prefix(filter_)):
        if not count or not (every or matches(subject)):
            continue
        if offset <= total < end:
            page[subject] = count
        total += 1
        if every and total >= end:
            total = num_subjects  # every subject is counted in the stream's state
            break
    if not total:
        return None, Paged()
    return page or None, Paged(total, offset, SUBJECTS_PAGE)


def deleted_seqs(txn: Any, dbs: dict[bytes, Any], sid: int, first: int, last: int) -> list[int]:
    """The seqs from ``first`` to ``last`` with no stored message, ascending."""
    cur = txn.cursor(db=dbs[keys.DB_MSGS])
    prefix = keys.sid_prefix(sid)
    end = keys.msg_key(sid, last)
    deleted: list[int] = []
    expect = first
    if cur.set_range(keys.msg_key(sid, first)):
        for k in cur.iternext(values=False):
            if k > end or not k.startswith(prefix):
                break
            seq = keys.read_u64(k, 8)
            deleted.extend(range(expect, seq))
            expect = seq + 1
    deleted.extend(range(expect, last + 1))  # removed after the last stored one
    return deleted
