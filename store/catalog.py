"""The writer's streams by name and what every operation needs around them: lookups that
answer "not found", stream capture by subject, new ids, the per-stream timer deadlines,
and the writer's settings (clock, node name, slice size, closing). Writer thread only,
except :attr:`Catalog.next_due` (one attribute load from any thread) and
:attr:`Catalog.closing` (set by ``Store.close``).

It is the narrow interface :mod:`store.admin` and :mod:`store.slices` get instead of the
engine: they look streams up, add and drop them here, and record what they touched in
``batch`` (:class:`Touched`); the engine (store.engine) owns the catalog and runs the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from store import keys
from store.consumers import ConsumerRt, Stream
from store.ctx import Ctx
from store.errors import js_error
from store.streams import StreamRt
from store.subjects import subject_matches

MAX_CAPTURE_CACHE: Final = 100_000  # subjects remembered by capture(); cleared when over
# Longer subjects are looked up every time: a full cache of 64 KiB subjects (an MQTT topic
# may be that long) would hold GiBs.
CACHED_SUBJECT_MAX: Final = 1024


class Touched:
    """What the current batch touched, for the engine's delivery and retention phases and
    the state records it writes before the commit. Every stream reports here
    (store.streams.StreamHooks); operations add what they change."""

    def __init__(self) -> None:
        self.streams: set[Stream] = set()  # deliver, flush and save these
        self.consumers: set[ConsumerRt] = set()  # save these
        self.retention: list[tuple[Stream, int]] = []  # seqs a consumer is done with

    def clear(self) -> None:
        self.streams.clear()
        self.consumers.clear()
        self.retention.clear()

    # -- store.streams.StreamHooks (a stream is always a Stream here) -------------------

    def touched(self, st: StreamRt[Any]) -> None:
        self.streams.add(st)

    def removed(self, ctx: Ctx, st: StreamRt[Any], seq: int, subject: str, purged: bool) -> None:
        for c in st.consumers.values():
            c.on_remove(ctx, seq, subject, purged)
            self.consumers.add(c)
        self.streams.add(st)

    def released(self, st: StreamRt[Any], seq: int) -> None:
        self.retention.append((st, seq))


class Catalog:
    def __init__(self, clock: Callable[[], int], node_name: str, remove_slice: int) -> None:
        self.clock = clock
        self.node_name = node_name
        # Most messages one transaction removes for a purge, a stream deletion or max_age
        # expiry; the rest follows in later batches, other submissions committing between.
        self.remove_slice = remove_slice
        # Set by Store.close (another thread; read between slices): a long operation stops
        # at its next slice and is finished by the next open, so closing does not wait.
        self.closing = False
        self.streams: dict[str, Stream] = {}
        self.batch = Touched()
        self.deadlines: dict[str, int] = {}  # stream name -> its earliest timer
        self.next_due: int | None = None  # the earliest of them
        self._capture: dict[str, Stream | None] = {}

    # -- lookups -------------------------------------------------------------------------

    def stream(self, name: str) -> Stream:
        st = self.streams.get(name)
        if st is None:
            raise js_error("stream_not_found")
        return st

    def consumer(self, stream: str, name: str) -> ConsumerRt:
        c = self.stream(stream).consumers.get(name)
        if c is None:
            raise js_error("consumer_not_found")
        return c

    def find(self, key: tuple[str, str]) -> ConsumerRt | None:
        st = self.streams.get(key[0])
        return st.consumers.get(key[1]) if st is not None else None

    def capture(self, subject: str) -> Stream | None:
        """The stream whose subjects match ``subject`` (stream subjects never overlap)."""
        try:
            return self._capture[subject]
        except KeyError:
            pass
        found = None
        for st in self.streams.values():
            if any(subject_matches(s, subject) for s in st.config.subjects):
                found = st
                break
        if len(subject) <= CACHED_SUBJECT_MAX:
            if len(self._capture) > MAX_CAPTURE_CACHE:
                self._capture.clear()
            self._capture[subject] = found
        return found

    # -- changes -------------------------------------------------------------------------

    def add_stream(self, st: Stream) -> None:
        """A stream created or loaded: it reports to ``batch``."""
        st.hooks = self.batch
        self.streams[st.name] = st
        self._capture.clear()

    def subjects_changed(self) -> None:
        """A stream's subjects were updated: capture looks again."""
        self._capture.clear()

    def drop_stream(self, name: str) -> None:
        del self.streams[name]
        self.deadlines.pop(name, None)
        self._capture.clear()

    def clear(self) -> None:
        """Before a reload: no stream, nothing touched."""
        self.streams = {}
        self._capture = {}
        self.batch.clear()

    def next_id(self, ctx: Ctx) -> int:
        """A new stream or consumer id (``meta/next_id``; never reused)."""
        db = ctx.db(keys.DB_META)
        n = keys.read_u64(ctx.txn.get(keys.META_NEXT_ID, db=db))
        ctx.txn.put(keys.META_NEXT_ID, keys.u64(n + 1), db=db)
        return n

    # -- timers --------------------------------------------------------------------------

    def refresh_deadline(self, st: Stream) -> None:
        best = st.next_expiry()
        for c in st.consumers.values():
            d = c.next_deadline()
            if d and (not best or d < best):
                best = d
        if best:
            self.deadlines[st.name] = best
        else:
            self.deadlines.pop(st.name, None)

    def publish_deadline(self) -> None:
        vals = list(self.deadlines.values())
        self.next_due = min(vals) if vals else None
