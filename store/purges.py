"""Purges of a stream inside the writer (STREAM.PURGE, and what a ``Nats-Rollup`` message
replaces): the plan that fixes what a purge removes, and its removal a slice at a time
(store.slices runs the slices and records the plan between them). Writer thread only.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from store import keepbound, keys
from store.ctx import Ctx
from store.purgeplan import PurgePlan
from store.streams import StreamRt
from store.subjects import is_literal, matcher

# A wildcard purge walks the stream; per slice it looks at most this many records that do
# not match per message it may remove (a sparse filter takes several short slices).
WALK_PER_REMOVAL = 4


def purge_plan(
    st: StreamRt[Any],
    ctx: Ctx,
    filter_: str | None,
    below: int | None,
    keep: int | None,
    keep_from: tuple[int, int] | None = None,
) -> PurgePlan:
    """STREAM.PURGE: all, or by ``filter_``, below seq ``below``, keeping ``keep`` newest.

    The plan fixes what the purge removes (nothing stored after it begins); :func:`
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
    bound = st.last_seq + 1 if below is None else min(below, st.last_seq + 1)
    literal = filter_ if filter_ and is_literal(filter_) else None
    pattern = filter_ if filter_ and literal is None else None
    if keep is not None:
        if keep_from is not None and keep_from[0] == st.sid:
            bound = keep_from[1]
        else:
            st.subj.flush_counts(ctx)  # the subject records as of this batch
            state = (st.first_seq, st.last_seq, st.messages)
            bound = keepbound.keep_from(ctx.txn, ctx.dbs, st.sid, state, filter_, keep)
    return PurgePlan(
        filter=literal,
        pattern=pattern,
        start=st.first_seq,
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
    st: StreamRt[Any], ctx: Ctx, plan: PurgePlan, take: int, walk: int
) -> tuple[list[int], int]:
    """Up to ``take`` seqs from ``plan.start`` below ``plan.below`` whose subject
    matches the wildcard ``plan.pattern``, walking the stream, and the seq to go on
    from (``plan.below``: done). It also stops after ``walk`` records that do not
    match, so a sparse filter is walked over several slices."""
    assert plan.pattern is not None
    matches = matcher((plan.pattern,))
    taken: list[int] = []
    for q, rec in st.seqs_from(ctx, plan.start):
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


def purge_step(
    st: StreamRt[Any], ctx: Ctx, plan: PurgePlan, limit: int
) -> tuple[int, PurgePlan | None]:
    """Remove at most ``limit`` messages of ``plan``: how many, and the plan that goes
    on (None: the purge is complete)."""
    taken: list[int] = []
    if plan.pattern is not None:
        walk = WALK_PER_REMOVAL * limit if limit < keys.MAX_U64 else keys.MAX_U64
        taken, q = _pattern_slice(st, ctx, plan, limit, walk)
    else:
        found: Iterator[int]
        if plan.filter is not None:
            found = st.subj.subject_seqs(ctx, plan.filter, plan.start)
        else:
            found = (q for q, _ in st.seqs_from(ctx, plan.start))
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
        if st.remove(ctx, q, purged=True):
            removed += 1
    if rest is None and plan.compact_to > st.last_seq and not st.messages:
        st.last_seq = max(st.last_seq, plan.compact_to - 1)
        st.first_seq = st.last_seq + 1
    st.touched()  # the engine writes the state record once per batch
    return removed, rest
