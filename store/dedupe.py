"""A stream's message ids (``Nats-Msg-Id``) inside the writer: the duplicate lookup, the
record of a stored message's id, and the eviction of ids older than the stream's
duplicate window (``dedupe`` and ``dedupeseq`` in store.keys). Writer thread only; each
:class:`store.streams.StreamRt` has one (``StreamRt.dedupe``). ``window`` is the stream's
``duplicate_window`` (ns), passed in because a stream update may change it.
"""

from __future__ import annotations

from store import keys
from store.ctx import Ctx


class Dedupe:
    def __init__(self, sid: int) -> None:
        self.sid = sid

    def lookup(self, ctx: Ctx, msg_id: str, window: int) -> int | None:
        """The seq of the message stored with ``msg_id`` within the window, or None."""
        raw = ctx.txn.get(keys.dedupe_key(self.sid, msg_id), db=ctx.db(keys.DB_DEDUPE))
        if raw is None:
            return None
        seq, ts = keys.unpack_dedupe(bytes(raw))
        if ts + window <= ctx.now:
            return None
        return seq

    def record(self, ctx: Ctx, msg_id: str, seq: int, window: int) -> None:
        # Amortised eviction: every recorded id retires up to two expired ones, so the
        # dedupe tables stay bounded even when nobody drives Tick.
        self.evict(ctx, window, limit=2)
        ctx.txn.put(
            keys.dedupe_key(self.sid, msg_id),
            keys.pack_dedupe(seq, ctx.now),
            db=ctx.db(keys.DB_DEDUPE),
        )
        ctx.txn.put(keys.msg_key(self.sid, seq), msg_id.encode(), db=ctx.db(keys.DB_DEDUPESEQ))

    def msg_id_of(self, ctx: Ctx, seq: int) -> str:
        raw = ctx.txn.get(keys.msg_key(self.sid, seq), db=ctx.db(keys.DB_DEDUPESEQ))
        return bytes(raw).decode() if raw is not None else ""

    def evict(self, ctx: Ctx, window: int, limit: int = 10_000) -> None:
        """Forget msg ids older than the duplicate window (oldest first, bounded work)."""
        cur = ctx.txn.cursor(db=ctx.db(keys.DB_DEDUPESEQ))
        prefix = keys.sid_prefix(self.sid)
        ddb = ctx.db(keys.DB_DEDUPE)
        if not cur.set_range(prefix):
            return
        for _ in range(limit):
            k = cur.key()
            if not k.startswith(prefix):
                return
            seq = keys.read_u64(k, 8)
            dkey = keys.dedupe_key(self.sid, bytes(cur.value()).decode())
            raw = ctx.txn.get(dkey, db=ddb)
            found, ts = keys.unpack_dedupe(bytes(raw)) if raw is not None else (0, 0)
            if found == seq:
                if ts + window > ctx.now:
                    return
                ctx.txn.delete(dkey, db=ddb)
            if not cur.delete():
                return
