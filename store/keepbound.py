"""Where a purge that keeps the ``keep`` newest matching messages begins: the seq of the
oldest message it keeps.

Finding it can walk half the stream — the ``keep`` newest matching records back from the
end, or the others forward from the first, the shorter — and, for a wildcard filter, add
up the counts of every subject record under the filter's literal prefix first. So
:meth:`store.Store.purge_stream` finds it on the caller's thread, in a read transaction
(a snapshot of committed data), and hands it to the writer with the purge
(``PurgeStream.keep_from``): the writer, and every other submission, does not wait for
the walk (keeping 500,000 of 1,000,000 messages on ``big.*`` held the writer up to 4.6 s).
The purge then removes what matched below that seq as of the snapshot — messages stored
after it are newer, so kept. A ``PurgeStream`` submitted without the bound (or whose
stream was re-created since) has the writer find it in its own transaction, by the same
code.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

from store import keys, subjindex
from store.subjects import is_literal, is_valid_subject, literal_prefix, matcher


def keeps(filter_: str | None, seq: int | None, keep: int | None) -> bool:
    """Whether a purge request keeps the newest messages (and is one the writer accepts):
    as nats-server, ``keep: 0`` without a filter (or with ``>``) purges everything."""
    if keep is None or seq is not None:
        return False
    if filter_ is None or filter_ == ">":
        return keep > 0
    return is_valid_subject(filter_)


def keep_from(
    txn: Any,
    dbs: dict[bytes, Any],
    sid: int,
    state: tuple[int, int, int],
    filter_: str | None,
    keep: int,
) -> int:
    """The seq from which the ``keep`` newest messages of stream ``sid`` matching
    ``filter_`` (None or ``>``: all) on, as ``txn`` sees them; ``state`` is the stream's
    ``(first_seq, last_seq, messages)``. The first seq when no more than ``keep`` match;
    one past the last when ``keep`` is 0."""
    first_seq, last_seq, messages = state
    if keep <= 0:
        return last_seq + 1
    if filter_ is None or filter_ == ">":
        older = messages - keep
        if older <= 0:
            return first_seq
        if last_seq - first_seq + 1 == messages:  # no gaps
            return first_seq + older
        return _walk(txn.cursor(db=dbs[keys.DB_MSGS]), sid, state, None, keep, older)
    subjcount = txn.cursor(db=dbs[keys.DB_SUBJCOUNT])
    if is_literal(filter_):
        n, first, last = subjindex.record(subjcount, sid, filter_)
        older = n - keep
        if older <= 0:
            return first_seq
        cur = txn.cursor(db=dbs[keys.DB_SUBJECTS])
        sid_b, subj_b = keys.sid_prefix(sid), filter_.encode()
        if keep <= older:
            q = last + 1
            for _ in range(keep):
                q = subjindex.prev_seq(cur, sid_b, subj_b, q, first)
            return q
        return next(islice(subjindex.seqs(cur, sid_b, subj_b, first, last), older, None))
    matches = matcher((filter_,))
    n = sum(
        count
        for subject, count, _, _ in subjindex.records(subjcount, sid, literal_prefix(filter_))
        if matches(subject)
    )
    older = n - keep
    if older <= 0:
        return first_seq
    return _walk(txn.cursor(db=dbs[keys.DB_MSGS]), sid, state, matches, keep, older)


def _walk(
    cur: Any,
    sid: int,
    state: tuple[int, int, int],
    matches: Callable[[str], bool] | None,
    keep: int,
    older: int,
) -> int:
    """:func:`keep_from` by a walk of the message records (``cur``: a cursor on them) from
    the nearer end, counting those whose subject ``matches`` (None: every one)."""
    first_seq, last_seq, _ = state
    prefix = keys.sid_prefix(sid)
    backward = keep <= older
    if backward:
        wanted = keep
        if cur.set_range(keys.msg_key(sid, last_seq + 1)):
            ok = cur.prev()
        else:
            ok = cur.last()
        step = cur.prev
    else:
        wanted = older + 1
        ok = cur.set_range(keys.msg_key(sid, first_seq))
        step = cur.next
    while ok:
        k = cur.key()
        if not k.startswith(prefix):
            break
        if matches is None or matches(keys.msg_subject(cur.value())):
            wanted -= 1
            if not wanted:
                return keys.read_u64(k, 8)
        ok = step()
    raise AssertionError("subject records count messages the stream does not hold")
