"""A run of ``DeleteMsg`` operations removed a walk per stream. Writer thread only.

The broker acknowledges a session's pending entries in order, and submits the
acknowledgements as they come: one operation list then holds long runs of deletions on
``$MQTT_pend``, ascending and mostly consecutive, all on the session's one subject (with,
for a message stored apart, its deletion from ``$MQTT_msgs`` after its last entry's). One
by one (:func:`store.admin.delete_msg`, :meth:`store.streams.StreamRt.remove`) each seeks
its record and its index key, updates its subject's record, the stream's first message
and calls the stream's hooks. :func:`delete_run` gives every operation of the run the
same result, in the same order, and leaves the same databases and the same cached state:

- the checks of ``delete_msg`` that hold for the whole run (the stream exists, is not
  sealed, allows deletion) are made once per stream; the hooks are skipped when they
  would only mark the stream touched (a stream without consumers: no consumer to tell);
- a record the message cursor already stands on (the one after the last deleted) is not
  sought; each stream's counts and first message are set once, when the run ends;
- the index keys and subject records are updated per subject then
  (:meth:`store.subjrecs.SubjectRecords.unindex_run`): streams and subjects are
  independent, and the messages of one subject keep their order; the streams are marked
  touched in the order of their first removal, as one by one;
- anything else (a seq that is not an int, not stored, zero or beyond the last; a stream
  with consumers, sealed or denying deletion; a missing stream) goes the one-by-one way,
  after what the run did so far is written back, so its result (True or the exact
  ``JetStreamError``), its events and any exception are the one-by-one path's.
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
    """Where the run of ``DeleteMsg`` operations starting at ``start`` ends."""
    end = start + 1
    n = len(ops)
    while end < n and type(ops[end]) is DeleteMsg:
        end += 1
    return end


def delete_run(cat: Catalog, ctx: Ctx, ops: Sequence[Any], start: int, results: list[Any]) -> int:
    """Apply the run of ``DeleteMsg`` operations starting at ``ops[start]``, appending one
    result each to ``results``; where the run ends."""
    end = run_end(ops, start)
    walks: dict[str, _Walk | None] = {}
    pending: list[_Walk] = []  # with removals to write back, in the order of the first
    last: _Walk | None = None  # the walk the message cursor's position is known to
    i = start
    while i < end:
        op = ops[i]
        name = op.stream
        if name in walks:
            w = walks[name]
        else:
            w = walks[name] = _walk_of(cat, ctx, name)
        if w is not None:
            if w is not last:  # only the last walk knows where the cursor stands
                if last is not None:
                    last.at = b""
                last = w
            j = w.remove(ops, i, end, results)
            if j > i and not w.queued:
                w.queued = True
                pending.append(w)
            if j == end or ops[j].stream != name:
                i = j
                continue
            i, op = j, ops[j]  # not removed: one by one
        # One by one, after what the walks did (their streams first touched before).
        for p in pending:
            p.write_back()
        pending.clear()
        if last is not None:
            last.at = b""
            last = None
        _one(cat, ctx, op, results)
        if w is not None:
            w.restart()  # from the stream as the deletion left it
        i += 1
    for p in pending:
        p.write_back()
    return end


def _walk_of(cat: Catalog, ctx: Ctx, name: str) -> _Walk | None:
    """A walk for stream ``name``, or None: its deletions go one by one."""
    st = cat.streams.get(name)
    if (
        st is None
        or st.consumers
        or st.hooks is not cat.batch
        or st.config.sealed
        or st.config.deny_delete
    ):
        return None
    return _Walk(cat, ctx, st)


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
        self.at = b""  # the key the message cursor stands on ("": not known)
        self.restart()

    def restart(self) -> None:
        """Start again from the stream as it is (written back, or after a one-by-one
        deletion)."""
        st = self.st
        self.messages = st.messages
        self.removed = 0
        self.queued = False  # in delete_run's walks to write back
        self.nbytes = 0
        # The stream's first stored message by key; its time, None: read it at the end.
        self.first_key = _pack_msg_key(self.sid, st.first_seq)
        self.first_ts: int | None = st.first_ts
        self.by_subject: dict[bytes, list[int]] = {}

    def remove(self, ops: Sequence[Any], i: int, end: int, results: list[Any]) -> int:
        """Remove the messages of ``ops[i:end]`` as :meth:`StreamRt.remove` would, each
        result True, up to the first of another stream or whose seq is not an int in
        1..last_seq or not stored (the one-by-one path answers it): its index, or ``end``."""
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
        name = self.st.name
        while i < end:
            op = ops[i]
            if op.stream != name:
                break
            seq = op.seq
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
        self.restart()
