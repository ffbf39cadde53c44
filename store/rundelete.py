"""A run of ``DeleteMsg`` operations on one stream, removed in one walk. Writer thread only.

The broker acknowledges a session's pending entries in order, and submits the
acknowledgements as they come: one operation list then holds long runs of deletions on
``$MQTT_pend``, ascending and mostly consecutive, all on the session's one subject. One
by one (:func:`store.admin.delete_msg`, :meth:`store.streams.StreamRt.remove`) each seeks
its record and its index key, updates its subject's record, the stream's first message
and calls the stream's hooks. :func:`delete_run` gives every operation of the run the
same result, in the same order, and leaves the same databases and the same cached state:

- the checks of ``delete_msg`` that hold for the whole run (the stream exists, is not
  sealed, allows deletion) are made once; the hooks are skipped when they would only
  mark the stream touched (a stream without consumers: no consumer to tell);
- a record the message cursor already stands on (the one after the last deleted) is not
  sought; the stream's counts and first message are set once, at the end;
- the index keys and subject records are updated per subject after the walk
  (:meth:`store.subjrecs.SubjectRecords.unindex_run`): subjects are independent, and the
  messages of one subject keep their order;
- anything else (a seq that is not an int, not stored, zero or beyond the last; a stream
  with consumers, sealed or denying deletion; a missing stream) goes the one-by-one way,
  after what the run did so far is written back, so its result (True or the exact
  ``JetStreamError``) and any exception are the one-by-one path's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store import admin, keys
from store.catalog import Catalog
from store.consumers import Stream
from store.ctx import Ctx
from store.errors import JetStreamError
from store.ops import DeleteMsg

_pack_msg_key = keys.pack_msg_key


def run_end(ops: Sequence[Any], start: int) -> int:
    """Where the run of ``DeleteMsg`` operations on one stream starting at ``start`` ends."""
    name = ops[start].stream
    end = start + 1
    n = len(ops)
    while end < n:
        op = ops[end]
        if type(op) is not DeleteMsg or op.stream != name:
            break
        end += 1
    return end


def delete_run(cat: Catalog, ctx: Ctx, ops: Sequence[Any], start: int, results: list[Any]) -> int:
    """Apply the run of ``DeleteMsg`` operations starting at ``ops[start]`` (a run of one
    included), appending one result each to ``results``; where the run ends."""
    end = run_end(ops, start)
    st = cat.streams.get(ops[start].stream)
    if (
        end - start < 2
        or st is None
        or st.consumers
        or st.hooks is not cat.batch
        or st.config.sealed
        or st.config.deny_delete
    ):
        for i in range(start, end):
            _one(cat, ctx, ops[i], results)
        return end
    walk = _Walk(cat, ctx, st)
    i = start
    while True:
        i = walk.remove(ops, i, end, results)
        if i == end:
            break
        walk.write_back()
        _one(cat, ctx, ops[i], results)
        walk.restart()
        i += 1
    walk.write_back()
    return end


def _one(cat: Catalog, ctx: Ctx, op: DeleteMsg, results: list[Any]) -> None:
    try:
        res: Any = admin.delete_msg(cat, ctx, op)
    except JetStreamError as exc:
        res = exc
    results.append(res)


class _Walk:
    """Removals on one stream whose stream counts, first message, index keys and subject
    records are written back by :meth:`write_back`."""

    def __init__(self, cat: Catalog, ctx: Ctx, st: Stream) -> None:
        self.cat = cat
        self.ctx = ctx
        self.st = st
        self.cur = ctx.msgs_cur
        self.sid = st.sid
        self.sid_b = st.sid_b
        self.last = st.last_seq  # a deletion never moves it
        self.restart()

    def restart(self) -> None:
        """Start again from the stream as it is (after a one-by-one deletion)."""
        st = self.st
        self.messages = st.messages
        self.removed = 0
        self.nbytes = 0
        # The stream's first stored message by key; its time, None: read it at the end.
        self.first_key = _pack_msg_key(self.sid, st.first_seq)
        self.first_ts: int | None = st.first_ts
        self.at = b""  # the key the message cursor stands on ("": not known)
        self.by_subject: dict[bytes, list[int]] = {}

    def remove(self, ops: Sequence[Any], i: int, end: int, results: list[Any]) -> int:
        """Remove the messages of ``ops[i:end]`` as :meth:`StreamRt.remove` would, each
        result True, up to the first whose seq is not an int in 1..last_seq or not stored
        (the one-by-one path answers it): its index, or ``end``."""
        cur = self.cur
        sid = self.sid
        sid_b = self.sid_b
        last = self.last
        by_subject = self.by_subject
        at = self.at
        first_key = self.first_key
        messages = self.messages
        nbytes = 0
        removed = 0
        subject_and_size = keys.msg_subject_and_size
        ok = results.append
        while i < end:
            seq = ops[i].seq
            if type(seq) is not int or not 0 < seq <= last:
                break
            key = _pack_msg_key(sid, seq)
            if key != at and not cur.set_key(key):
                at = b""  # (the cursor stands nowhere)
                break
            rec = cur.value()
            subj_b, size = subject_and_size(rec)
            cur.delete()  # and the cursor moves to the next record
            at = cur.key()
            seqs = by_subject.get(subj_b)
            if seqs is None:
                by_subject[subj_b] = [seq]
            else:
                seqs.append(seq)
            removed += 1
            nbytes += size
            messages -= 1
            if messages and key == first_key:
                # As StreamRt.remove: the next stored message is the new first.
                if at[:8] == sid_b:
                    first_key = at
                    self.first_ts = None
                elif self.first_ts is None:  # (none is left above: never so) it stays
                    self.first_ts = keys.msg_time(rec)
            ok(True)
            i += 1
        self.at = at
        self.first_key = first_key
        self.messages = messages
        self.nbytes += nbytes
        self.removed += removed
        return i

    def write_back(self) -> None:
        """The stream as the one-by-one path leaves it after the same removals."""
        if not self.removed:
            return
        st = self.st
        ctx = self.ctx
        st.removals += self.removed
        st.messages = self.messages
        st.bytes -= self.nbytes
        if not self.messages:
            st.first_seq = self.last + 1
            st.first_ts = 0
        else:
            st.first_seq = keys.split_msg_key(self.first_key)[1]
            ts = self.first_ts
            if ts is None:
                if self.at == self.first_key:  # the message cursor stands on it
                    rec = self.cur.value()
                else:
                    rec = bytes(ctx.txn.get(self.first_key, db=ctx.msgs_db))
                ts = keys.msg_time(rec)
            st.first_ts = ts
        # StreamHooks.removed of a stream without consumers, and delete_msg's own.
        self.cat.batch.streams.add(st)
        subj = st.subj
        for subj_b, seqs in self.by_subject.items():
            subj.unindex_run(ctx, subj_b.decode(), subj_b, seqs)
        self.removed = 0
        self.by_subject = {}
