"""MQTT state expressed as streams in the store (see broker/DESIGN.md, "Persistence").

Everything here runs on the trio thread except the store's own writer thread
and the startup load (``trio.to_thread``). A store future completes a trio
event through ``TrioToken.run_sync_soon``; nothing blocks the event loop.
Operations gathered in one scheduler pass go to the store as one job (``_Batch``).

Records (all JSON with sorted keys, UTF-8):

* session  ``{"id", "expiry", "version"}`` (records written before 2026-11-22 also hold
  ``"subs"``, the list below: read at start and moved to ``$MQTT_subs``)
* subscription  ``[filter, qos, nl, rap, rh, sub_id]``, one record per (session, filter), so
  a SUBSCRIBE writes what it adds, not every subscription the session has
* pending  ``{"m": msg key, "q": qos, "r": retain, "s": [sub ids], "p": packet id, "st": stage,
  "o": first pending sequence}`` where stage 0 = not acknowledged yet, 2 = PUBREC received
  (PUBREL sent) and "o" (send order on restore) is written once the entry is rewritten. A
  message with a single persistent recipient is not stored separately: its pending entry *is*
  the message (payload and message headers) with the record, without "m", in header
  ``Mqtt-Pend``, so storing and acknowledging it cost one write each.
* message  payload as is; header ``Mqtt-Topic`` (UTF-8 topic), ``Mqtt-Props`` (JSON of the
  publish properties), ``Mqtt-Qos``, ``Mqtt-Retain``.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import pathlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import trio

import store
from broker.config import StorageConfig
from broker.core import handles
from broker.core.message import AppMessage, Outgoing
from broker.core.router import Delivery, RetainedMessages
from broker.core.sessions import OnDisk, Session, SubscriptionRecord
from broker.mqtt.encoder import EncodedPublish
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.session import Stage

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.ports import Plan
    from broker.core.queues import SessionQueues

SESS = "$MQTT_sess"
RMSGS = "$MQTT_rmsgs"
MSGS = "$MQTT_msgs"
PEND = "$MQTT_pend"
QOS2IN = "$MQTT_qos2in"
SUBS = "$MQTT_subs"
PEND_HEADER = "Mqtt-Pend"  # on a pending entry that holds its message inline
STORAGE_REPORT_INTERVAL_S = 10.0  # at most one log line per interval about failed store jobs
RETRY_DELETES_AFTER_S = 1.0  # a failed acknowledgement's deletions are tried again after this
# At start, a pending entry's payload is read with its head only when it is this small
# (the record of a copy that references a message stored once for several sessions).
SMALL_RECORD = 4096
SCAN_CHUNK = 1024  # heads read per worker-thread call at start
# Reads of queued copies release the store's mapped pages from the RSS (Store.release_pages)
# each time they have read this much: the copies are in Python bytes by then.
RELEASE_PAGES_AFTER = 64 * 1024 * 1024

log = logging.getLogger("jetmq.persist")

# A page of copies read back: their pending entries, and the messages those reference.
Page = tuple[list[store.StoredMsg | None], list[store.StoredMsg | None]]


class StorageError(Exception):
    """A store job the broker waited for failed (a full disk, an I/O error, a bug in the
    store): none of its operations is stored. The waiter refuses or closes what depended
    on it; the broker and its other clients go on."""


class _FailureReport:
    """Logs failed store jobs, from the done callback of every job the broker submits (on
    the store's writer thread): a line when failures start (the first time with the
    traceback), then at most one per ``STORAGE_REPORT_INTERVAL_S`` while they go on (a full
    disk fails every commit), and one when a job succeeds again."""

    def __init__(self) -> None:
        self._last = -math.inf  # when the last line was logged
        self._missed = 0  # failures since then, not logged
        self._failing = False
        self._traced = False  # the traceback is logged once per broker

    def __call__(self, fut: concurrent.futures.Future[list[store.OpResult]]) -> None:
        exc = fut.exception()
        if exc is None:
            if self._failing:
                self._failing = False
                log.warning(
                    "store writes succeed again (%d more failed since the last report)",
                    self._missed,
                )
                self._missed = 0
            return
        now = time.monotonic()
        if not self._failing:
            self._failing = True
            self._last = now
            log.error(
                "a store write failed, nothing of it is stored: %s",
                exc,
                exc_info=None if self._traced else exc,
            )
            self._traced = True
        elif now - self._last >= STORAGE_REPORT_INTERVAL_S:
            self._last = now
            log.error(
                "store writes still fail (%d more since the last report): %s",
                self._missed + 1,
                exc,
            )
            self._missed = 0
        else:
            self._missed += 1


def _not_stored(exc: Exception) -> StorageError:
    return StorageError(f"{type(exc).__name__}: {exc}")


_STREAMS: tuple[dict[str, Any], ...] = (
    {"name": SESS, "subjects": ["$MQTT.sess.>"], "max_msgs_per_subject": 1},
    {"name": SUBS, "subjects": ["$MQTT.subs.>"], "max_msgs_per_subject": 1},
    {"name": RMSGS, "subjects": ["$MQTT.rmsgs.>"], "max_msgs_per_subject": 1},
    {"name": MSGS, "subjects": ["$MQTT.msgs.>"]},
    {"name": PEND, "subjects": ["$MQTT.pend.>"]},
    {
        "name": QOS2IN,
        "subjects": ["$MQTT.qos2.>"],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "discard_new_per_subject": True,
    },
)

_PROP_FIELDS = (
    "payload_format_indicator",
    "message_expiry_interval",
    "content_type",
    "response_topic",
)


def token(text: bytes | str) -> str:
    """A subject token for a client id or topic (they may contain any UTF-8)."""
    raw = text.encode() if isinstance(text, str) else text
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def session_token(session: Session) -> str:
    """The session's client id token (computed once per session)."""
    tok = session.token
    if not tok:
        tok = session.token = token(session.client_id)
    return tok


def _props_to_json(props: Properties) -> str:
    out: dict[str, Any] = {}
    for name in _PROP_FIELDS:
        value = getattr(props, name)
        if value is not None:
            out[name] = value
    if props.correlation_data is not None:
        out["correlation_data"] = base64.b64encode(props.correlation_data).decode()
    if props.user_properties:
        out["user_properties"] = [list(kv) for kv in props.user_properties]
    return json.dumps(out, separators=(",", ":"), ensure_ascii=True)


def _props_from_json(text: str | None) -> Properties:
    if not text or text == "{}":
        return EMPTY_PROPERTIES  # (the encoder writes the shared empty block at once)
    data = json.loads(text)
    kwargs: dict[str, Any] = {k: data[k] for k in _PROP_FIELDS if k in data}
    if "correlation_data" in data:
        kwargs["correlation_data"] = base64.b64decode(data["correlation_data"])
    if "user_properties" in data:
        kwargs["user_properties"] = tuple((k, v) for k, v in data["user_properties"])
    return Properties(**kwargs)


@functools.lru_cache(maxsize=4096)
def _topic_json(topic: bytes) -> str:
    return json.dumps(topic.decode("utf-8"), ensure_ascii=True)


def _message_headers(msg: AppMessage) -> tuple[tuple[str, str], ...]:
    props = msg.publish.properties
    return (
        ("Mqtt-Topic", _topic_json(msg.topic)),
        ("Mqtt-Qos", str(msg.qos)),
        ("Mqtt-Retain", "1" if msg.retain else "0"),
        ("Mqtt-Props", "{}" if props is EMPTY_PROPERTIES else _props_to_json(props)),
    )


def message_from_stored(
    stored: store.StoredMsg, now_wall_ns: int, now_trio: float
) -> AppMessage | None:
    """Rebuild a message with its expiry deadline moved onto the trio clock.

    The deadline may already be in the past: callers drop expired copies when
    they would send them, except a QoS 2 exchange already started [MQTT-4.3.3-7].
    """
    topic_json = stored.header("Mqtt-Topic")
    if topic_json is None:
        return None
    props = _props_from_json(stored.header("Mqtt-Props"))
    expires_at: float | None = None
    if props.message_expiry_interval is not None:
        age = max(0.0, (now_wall_ns - stored.time_ns) / 1e9)
        expires_at = now_trio + props.message_expiry_interval - age
    publish = Publish(
        json.loads(topic_json).encode("utf-8"),
        stored.payload,
        int(stored.header("Mqtt-Qos") or 0),
        stored.header("Mqtt-Retain") == "1",
        properties=props,
    )
    return AppMessage(publish, expires_at, 0)


def _notify(fut: concurrent.futures.Future[list[store.OpResult]], event: trio.Event) -> None:
    """Set ``event`` on the trio thread once ``fut`` (completed on the writer) is done."""
    tok = trio.lowlevel.current_trio_token()

    def done(_: object) -> None:
        # The loop may already be gone at shutdown; nobody is waiting then.
        with contextlib.suppress(trio.RunFinishedError):
            tok.run_sync_soon(event.set)

    fut.add_done_callback(done)


async def wait_future(fut: concurrent.futures.Future[list[store.OpResult]]) -> list[store.OpResult]:
    """Await a store future from trio without blocking the loop; :class:`StorageError` if
    the job failed."""
    if not fut.done():
        event = trio.Event()
        _notify(fut, event)
        await event.wait()
    try:
        return fut.result()
    except Exception as exc:
        raise _not_stored(exc) from exc


class _Batch:
    """Operations gathered on the trio thread and submitted as one store job.

    Every PUBLISH read in one scheduler pass (and every acknowledgement's deletions)
    joins the open batch; it is submitted when somebody waits for it, before any other
    submission (store order is submission order), or by a callback queued when the
    batch was opened, whichever comes first. One future and one trio event per batch
    instead of per message.
    """

    __slots__ = ("awaited", "deletes", "done", "event", "future", "ops", "owner")

    def __init__(self, owner: Persistence) -> None:
        self.owner = owner
        self.awaited = False  # holds a PUBLISH's writes (an acknowledgement waits for them)
        self.ops: list[store.Op] = []
        # The deletions by seq among ops that nobody waits for (tried again if it fails).
        self.deletes: list[store.DeleteMsg] = []
        self.future: concurrent.futures.Future[list[store.OpResult]] | None = None
        self.event: trio.Event | None = None
        self.done: list[store.OpResult] | None = None

    async def results(self) -> list[store.OpResult]:
        if self.done is not None:
            return self.done
        if self.future is None:
            self.owner.submit_open()
        fut = self.future
        assert fut is not None
        if not fut.done():
            event = self.event
            if event is None:
                event = self.event = trio.Event()
                _notify(fut, event)
            await event.wait()
        try:
            self.done = fut.result()  # every later waiter skips the future's lock
        except Exception as exc:
            raise _not_stored(exc) from exc
        return self.done


@dataclass(slots=True)
class PublishPlan:
    """What one PUBLISH stores before it is acknowledged (a slice of a batch), and the results."""

    batch: _Batch | None = None
    offset: int = 0  # where this plan's operations start in the batch
    count: int = 0
    pend_index: dict[int, int] = field(default_factory=dict)  # delivery index -> op index
    msg_op: int = -1
    retained_op: int = -1
    results: list[store.OpResult] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.batch is None

    async def wait(self) -> None:
        if self.batch is not None and not self.results:
            res = await self.batch.results()
            self.results = res[self.offset : self.offset + self.count]

    def committed(self) -> bool | None:
        """Whether this plan's commit succeeded (False: failed), None while in flight."""
        batch = self.batch
        if batch is None or batch.done is not None:
            return True
        fut = batch.future
        if fut is None or not fut.done():
            return None
        return fut.exception() is None

    def when_committed(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(ok)`` on the trio thread once this plan's commit is done (submitting
        the open batch now); its results are in place by then."""
        batch = self.batch
        assert batch is not None
        if batch.future is None:
            batch.owner.submit_open()
        fut = batch.future
        assert fut is not None
        token = trio.lowlevel.current_trio_token()

        def done(f: concurrent.futures.Future[list[store.OpResult]]) -> None:
            def on_trio_thread() -> None:
                ok = f.exception() is None
                if ok and not self.results:
                    self.results = f.result()[self.offset : self.offset + self.count]
                fn(ok)

            # The loop may already be gone at shutdown; nobody is waiting then.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(on_trio_thread)

        fut.add_done_callback(done)

    def seq_of(self, op_index: int) -> int:
        res = self.results[op_index] if 0 <= op_index < len(self.results) else None
        return res.seq if isinstance(res, store.PubAck) else 0

    def pend_seq(self, delivery_index: int) -> int:
        op = self.pend_index.get(delivery_index)
        return 0 if op is None else self.seq_of(op)


EMPTY_PLAN = PublishPlan()


class Persistence:
    """The broker's use of the store (one instance per broker)."""

    def __init__(self, st: store.Store) -> None:
        self.store = st
        self._keys = itertools.count(1)
        self._boot = f"{os.getpid():x}{time.time_ns() & 0xFFFFFFFF:08x}"
        self._last: concurrent.futures.Future[list[store.OpResult]] | None = None
        self._open: _Batch | None = None
        self._closed = False
        self._report = _FailureReport()
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._retry: list[store.DeleteMsg] = []
        self._retrying = False
        # $MQTT_msgs key -> [its seq (0 until committed), pending entries referencing it]:
        # the message goes with its last entry. Kept here, not on the message, because a
        # copy waiting on disk has no message in memory.
        self.refs: dict[str, list[int]] = {}
        self._read_bytes = 0  # read back since the store's pages were last released
        self.retained: RetainedMessages | None = None  # the broker's retained index

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: StorageConfig) -> Persistence:
        path = pathlib.Path(config.data_dir)

        def _open() -> store.Store:
            path.mkdir(parents=True, exist_ok=True)
            st = store.Store.open(path, sync=config.sync)
            try:
                existing = set(st.stream_names())
                for spec in _STREAMS:
                    if spec["name"] not in existing:
                        st.create_stream(spec)
            except BaseException:
                st.close()
                raise
            return st

        return cls(await trio.to_thread.run_sync(_open))

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed (or failed: logged)."""
        self.submit_open()
        if self._last is not None:
            with contextlib.suppress(StorageError):
                await wait_future(self._last)

    async def close(self) -> None:
        self.submit_open()
        self._closed = True
        if self._retry:
            log.warning(
                "%d acknowledged deliveries could not be deleted from the store; they will"
                " be sent again after the restart",
                len(self._retry),
            )
        await trio.to_thread.run_sync(self.store.close)

    def chunk_done(self) -> None:
        """A reader finished an input chunk: PUBLISH writes go to the store now, so their
        commit overlaps the other connections' work in this pass; deletions can wait."""
        batch = self._open
        if batch is not None and batch.awaited:
            self.submit_open()

    def submit_open(self) -> None:
        """Submit the open batch, if any (idempotent)."""
        batch = self._open
        if batch is None:
            return
        self._open = None
        if self._closed:
            return
        fut = batch.future = self._last = self.store.submit(batch.ops)
        fut.add_done_callback(
            functools.partial(self._deletes_done, batch.deletes) if batch.deletes else self._report
        )

    def _batch(self) -> _Batch:
        batch = self._open
        if batch is None:
            batch = self._open = _Batch(self)
            trio.lowlevel.current_trio_token().run_sync_soon(self.submit_open)
        return batch

    def _submit(self, ops: Sequence[store.Op]) -> concurrent.futures.Future[list[store.OpResult]]:
        self.submit_open()  # what was gathered before goes first
        fut = self.store.submit(ops)
        fut.add_done_callback(self._report)
        self._last = fut
        return fut

    def _fire(self, ops: Sequence[store.Op]) -> None:
        """Store without waiting (the caller's correctness does not depend on the commit).
        Not tried again if the commit fails: a purge by subject tried late could remove a
        later session's records."""
        if ops:
            self._batch().ops.extend(ops)

    def _fire_deletes(self, ops: list[store.DeleteMsg]) -> None:
        """Delete without waiting; tried again if the commit fails (:meth:`_deletes_done`):
        a seq is never reused, so a late deletion removes nothing newer."""
        if ops:
            batch = self._batch()
            batch.ops.extend(ops)
            batch.deletes.extend(ops)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task in the broker's nursery (reads of queued copies)."""
        assert self._nursery is not None, "Persistence used before attach"
        self._nursery.start_soon(fn, *args)

    # -- queued copies on disk (broker/queues.py decides when) -----------------------------------

    def page_in(
        self, queues: SessionQueues, session: Session, items: list[OnDisk | Outgoing], size: int
    ) -> None:
        """Read a page of ``session``'s backlog back (``SessionQueues.page_soon`` took it)."""
        self.spawn(self._page_in, queues, session, items, size)

    async def _page_in(
        self, queues: SessionQueues, session: Session, items: list[OnDisk | Outgoing], size: int
    ) -> None:
        """Pages until the RAM queue is long enough, the backlog empty or the session
        offline (``SessionQueues.page_read`` says); then wakes the connection."""
        while True:
            on_disk = [i for i in items if isinstance(i, OnDisk)]
            read: Page | None = None
            try:
                if on_disk:
                    read = await trio.to_thread.run_sync(self.read_copies, on_disk)
            except (Exception, trio.Cancelled) as exc:
                queues.page_failed(session, items)
                if isinstance(exc, trio.Cancelled):
                    raise
                if not isinstance(exc, store.StoreClosedError):  # (closed: shutting down)
                    log.exception("client %r: reading queued copies back failed", session.client_id)
                return
            if session.gone:  # its entries are purged with it
                session.paging = 0
                self.drop_on_disk(on_disk, purged=True)
                return
            found = self.copies(on_disk, read) if read is not None else {}
            if not queues.page_read(session, items, size, found):
                break
            items, size = queues.take_page(session)
        conn = session.conn
        if conn is not None:
            conn.wake()

    def drop_on_disk(self, items: Sequence[OnDisk], *, purged: bool = False) -> None:
        """Forget copies waiting on disk: delete their pending entries (unless ``purged``
        with their session's) and release the messages they reference."""
        ops: list[store.DeleteMsg] = []
        for item in items:
            self._release(item.seq, item.key, ops)
        if purged:
            ops = [op for op in ops if op.stream != PEND]
        self._fire_deletes(ops)

    def read_retained(self, seqs: Sequence[int]) -> list[AppMessage | None]:
        """Retained messages by seq in ``$MQTT_rmsgs`` (one short read transaction on this
        thread: a SUBSCRIBE's at-once batch, or a chunk of a paced one)."""
        now_wall = time.time_ns()
        now = trio.current_time()
        out: list[AppMessage | None] = []
        for stored in self.store.get_msgs(RMSGS, seqs):
            msg = None if stored is None else message_from_stored(stored, now_wall, now)
            if msg is not None and stored is not None:
                msg.retained_seq = stored.seq
            out.append(msg)
        return out

    def read_copies(self, items: Sequence[OnDisk]) -> Page:
        """(any thread) The pending entries of ``items`` and the messages they reference,
        one read transaction each."""
        refs = self.refs
        msg_seqs = sorted({ref[0] for i in items if i.key and (ref := refs.get(i.key))})
        st = self.store
        page = st.get_msgs(PEND, [i.seq for i in items]), st.get_msgs(MSGS, msg_seqs)
        self._read_bytes += sum(i.size for i in items)  # (a race between pages: harmless)
        if self._read_bytes >= RELEASE_PAGES_AFTER:
            self._read_bytes = 0
            st.release_pages()
        return page

    def copies(self, items: Sequence[OnDisk], page: Page) -> dict[int, Outgoing]:
        """The copies of a page read by :meth:`read_copies`, by pending seq; one whose
        entry or message is gone is left out (and its entry deleted)."""
        pend, msgs = page
        now_wall = time.time_ns()
        now = trio.current_time()
        by_key: dict[str, AppMessage | None] = {}
        stored_by_seq = {m.seq: m for m in msgs if m is not None}
        refs = self.refs
        out: dict[int, Outgoing] = {}
        lost: list[OnDisk] = []
        for item, stored in zip(items, pend, strict=True):
            if stored is None:
                continue  # purged with its session
            inline = stored.header(PEND_HEADER)
            msg: AppMessage | None
            if inline is not None:
                rec = json.loads(inline)
                msg = message_from_stored(stored, now_wall, now)
            else:
                rec = json.loads(stored.payload)
                key = rec["m"]
                if key in by_key:
                    msg = by_key[key]
                else:
                    ref = refs.get(key)
                    held = stored_by_seq.get(ref[0]) if ref is not None else None
                    msg = by_key[key] = (
                        message_from_stored(held, now_wall, now) if held is not None else None
                    )
                    if msg is not None:
                        msg.key = key
            if msg is None:
                lost.append(item)
                continue
            og = Outgoing(msg, int(rec["q"]), bool(rec["r"]), tuple(rec["s"]), item.seq)
            og.order = int(rec.get("o", 0)) or item.seq
            og.shared = item.shared
            if item.expires_at is not None:  # (the stored time is wall-clock time)
                msg.expires_at = item.expires_at
            out[item.seq] = og
        if lost:
            self.drop_on_disk(lost)
        return out

    # -- deletions that failed (a full disk) ---------------------------------------------------

    def attach(self, nursery: trio.Nursery) -> None:
        """The nursery that runs the retries of failed deletions."""
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()

    def _deletes_done(
        self, deletes: list[store.DeleteMsg], fut: concurrent.futures.Future[list[store.OpResult]]
    ) -> None:
        """Done callback (writer thread) of a job holding deletions nobody waits for."""
        self._report(fut)
        token = self._token
        if fut.exception() is not None and token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._retry_later, deletes)

    def _retry_later(self, deletes: list[store.DeleteMsg]) -> None:
        """(trio thread) Keep failed deletions for the retry task, starting it if needed:
        until they are gone the acknowledged messages take disk space, and a restart would
        send them again."""
        if self._closed:
            return
        self._retry.extend(deletes)
        if not self._retrying and self._nursery is not None:
            self._retrying = True
            self._nursery.start_soon(self._retry_deletes)

    async def _retry_deletes(self) -> None:
        """Every ``RETRY_DELETES_AFTER_S``, submit the failed deletions again, one job each:
        when their group commit fails the writer commits job by job, so on a full disk
        each deletion that fits in the pages still free goes through and frees more."""
        try:
            while self._retry and not self._closed:
                await trio.sleep(RETRY_DELETES_AFTER_S)
                ops, self._retry = self._retry, []
                for op in ops:
                    fut = self.store.submit([op])
                    fut.add_done_callback(functools.partial(self._deletes_done, [op]))
        finally:
            self._retrying = False

    @staticmethod
    def _pend_subject(session: Session) -> str:
        return f"$MQTT.pend.{session_token(session)}"

    def _pend_op(
        self,
        session: Session,
        msg: AppMessage,
        qos: int,
        retain: bool,
        sub_ids: Sequence[int],
        packet_id: int = 0,
        stage: int = 0,
        order: int = 0,
    ) -> store.Publish:
        """One copy's pending entry: a reference to the stored message, or (a message with
        a single persistent recipient) the message itself with the copy's fields in a header."""
        # The record's JSON is built directly (this runs per stored copy), keys sorted.
        ids = ",".join(map(str, sub_ids))
        record = "".join(
            (
                f'{{"m":{json.dumps(msg.key)},' if msg.key else "{",
                f'"o":{order},' if order else "",
                f'"p":{packet_id},"q":{qos},"r":{int(retain)},"s":[{ids}],"st":{stage}}}',
            )
        )
        subject = self._pend_subject(session)
        if msg.key:
            return store.Publish(subject, record.encode(), stream=PEND)
        headers = (*_message_headers(msg), (PEND_HEADER, record))
        return store.Publish(subject, msg.payload, headers, stream=PEND)

    # -- publish -----------------------------------------------------------------------------

    def plan(
        self,
        broker: Hub,
        msg: AppMessage,
        deliveries: Sequence[Delivery],
        extra: Sequence[store.Op] = (),
    ) -> PublishPlan:
        """The store operations a PUBLISH needs: retained update, stored copy, pending entries.

        ``extra`` (inbound QoS 2 state) commits in the same batch.
        """
        ops: list[store.Op] = list(extra)
        retained_op = -1
        if msg.retain and broker.config.mqtt.retain_available:
            subject = f"$MQTT.rmsgs.{token(msg.topic)}"
            if msg.payload:
                retained_op = len(ops)
                ops.append(store.Publish(subject, msg.payload, _message_headers(msg), stream=RMSGS))
            else:
                ops.append(store.PurgeStream(RMSGS, filter=subject))
        pend_index: dict[int, int] = {}
        msg_op = -1
        if msg.qos:
            by_num = broker.sessions.by_num
            targets: list[tuple[int, Delivery, Session]] = []
            for index, d in enumerate(deliveries):
                if d.qos == 0:
                    continue
                session = by_num.get(d.client)
                if session is not None and session.persistent:
                    targets.append((index, d, session))
            if len(targets) > 1:
                # Stored once, referenced by one pending entry per session.
                msg.key = f"{self._boot}-{next(self._keys)}"
                self.refs[msg.key] = [0, len(targets)]
                msg_op = len(ops)
                ops.append(
                    store.Publish(
                        f"$MQTT.msgs.{msg.key}", msg.payload, _message_headers(msg), stream=MSGS
                    )
                )
            for index, d, session in targets:
                session.stored = True
                pend_index[index] = len(ops)
                qos = msg.qos if msg.qos < d.qos else d.qos
                ops.append(
                    self._pend_op(
                        session, msg, qos, msg.retain and d.retain_as_published, d.sub_ids
                    )
                )
        if not ops:
            return EMPTY_PLAN
        batch = self._batch()
        plan = PublishPlan(batch, len(batch.ops), len(ops), pend_index, msg_op, retained_op)
        batch.ops.extend(ops)
        batch.awaited = True
        return plan

    def after_commit(self, msg: AppMessage, plan: Plan) -> None:
        """The plan's commit is done: a retained update and a message stored once for
        several sessions learn their sequences (its last acknowledgement deletes it)."""
        plan = cast(PublishPlan, plan)  # the only kind this store client makes
        if plan.retained_op >= 0:
            msg.retained_seq = plan.seq_of(plan.retained_op)
            if self.retained is not None:
                self.retained.committed(msg)
        if plan.msg_op >= 0:
            ref = self.refs.get(msg.key)
            if ref is not None:
                ref[0] = plan.seq_of(plan.msg_op)

    # -- acknowledgements of outbound copies -------------------------------------------------------

    def _release_copy(self, og: Outgoing, ops: list[store.DeleteMsg]) -> None:
        if og.pend_seq:
            self._release(og.pend_seq, og.message.key, ops)
            og.pend_seq = 0

    def _release(self, pend_seq: int, key: str, ops: list[store.DeleteMsg]) -> None:
        """Delete a copy's pending entry, and the message it references once no other
        entry does (``key`` "": the entry held the message itself)."""
        ops.append(store.DeleteMsg(PEND, pend_seq))
        if not key:
            return
        ref = self.refs.get(key)
        if ref is None:
            return
        ref[1] -= 1
        if ref[1] <= 0:
            del self.refs[key]
            if ref[0]:
                ops.append(store.DeleteMsg(MSGS, ref[0]))

    def copy_done(self, session: Session, og: Outgoing) -> None:
        """PUBACK / PUBCOMP (or a copy skipped or expired): forget its pending entry."""
        ops: list[store.DeleteMsg] = []
        self._release_copy(og, ops)
        self._fire_deletes(ops)

    def stage_copies(
        self, session: Session, entries: Sequence[tuple[Outgoing, int, int]]
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        """Record QoS 2 copies' packet ids (stage 0) or PUBRECs (stage 2) in one commit.

        A restart must resend a QoS 2 PUBLISH with its original packet id, and must send
        PUBREL rather than the PUBLISH once PUBREC was received [MQTT-4.3.3-6]. Each
        entry's pending record is rewritten (new record, old one deleted); the caller
        awaits the future and then calls :meth:`stages_committed`.
        """
        ops: list[store.Op] = []
        for og, packet_id, stage in entries:
            og.order = og.order or og.pend_seq
            ops.append(
                self._pend_op(
                    session, og.message, og.qos, og.retain, og.sub_ids, packet_id, stage, og.order
                )
            )
            ops.append(store.DeleteMsg(PEND, og.pend_seq))
        return self._submit(ops) if ops else None

    @staticmethod
    def stages_committed(
        entries: Sequence[tuple[Outgoing, int, int]], results: Sequence[store.OpResult]
    ) -> None:
        for i, (og, _pid, _stage) in enumerate(entries):
            res = results[2 * i]
            og.pend_seq = res.seq if isinstance(res, store.PubAck) else 0

    # -- sessions ----------------------------------------------------------------------------

    def save_session(self, session: Session) -> concurrent.futures.Future[list[store.OpResult]]:
        """The session record (client id, expiry, protocol version); the first time the
        session is stored, every subscription it has as well (it may have subscribed
        before it became persistent, with a DISCONNECT that set an expiry)."""
        first = not session.stored
        session.stored = True
        record = {
            "id": session.client_id,
            "expiry": session.expiry_interval,
            "version": session.protocol_version,
        }
        ops: list[store.Op] = [
            store.Publish(f"$MQTT.sess.{session_token(session)}", _dump(record), stream=SESS)
        ]
        if first:
            ops.extend(self._subscription_op(session, r) for r in session.subscriptions.values())
        return self._submit(ops)

    def save_subscriptions(
        self, session: Session, records: Sequence[SubscriptionRecord]
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        """SUBSCRIBE of a stored session: one record per subscription it adds or replaces."""
        if not records:
            return None
        return self._submit([self._subscription_op(session, r) for r in records])

    def remove_subscriptions(
        self, session: Session, filters: Sequence[bytes]
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        """UNSUBSCRIBE of a stored session: the records of the filters it removed."""
        if not filters:
            return None
        tok = session_token(session)
        return self._submit(
            [store.PurgeStream(SUBS, filter=f"$MQTT.subs.{tok}.{token(f)}") for f in filters]
        )

    @staticmethod
    def _subscription_op(session: Session, r: SubscriptionRecord) -> store.Publish:
        record = [
            r.topic_filter.decode("utf-8"),
            r.qos,
            int(r.no_local),
            int(r.retain_as_published),
            r.retain_handling,
            r.sub_id,
        ]
        return store.Publish(
            f"$MQTT.subs.{session_token(session)}.{token(r.topic_filter)}",
            json.dumps(record, separators=(",", ":")).encode(),
            stream=SUBS,
        )

    def session_ended(self, session: Session, dropped: Sequence[Outgoing]) -> None:
        """The session is over (or was cleaned): remove its stored state, if it has any."""
        if not session.stored:
            return
        session.stored = False
        if not session.gone and session.backlog:
            # It goes on without being stored (expiry now 0): what waits on disk comes
            # back to RAM before its entries are purged (bounded by the queue limits).
            self._keep_backlog(session)
        deletes: list[store.DeleteMsg] = []
        for og in dropped:
            self._release_copy(og, deletes)
        self._fire_deletes(deletes)
        tok = session_token(session)
        self._fire(
            [
                store.PurgeStream(SESS, filter=f"$MQTT.sess.{tok}"),
                store.PurgeStream(SUBS, filter=f"$MQTT.subs.{tok}.*"),
                store.PurgeStream(PEND, filter=f"$MQTT.pend.{tok}"),
                store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{tok}.*"),
            ]
        )

    def _keep_backlog(self, session: Session) -> None:
        backlog = session.backlog
        assert backlog is not None
        on_disk = [i for i in backlog if isinstance(i, OnDisk)]
        found = self.copies(on_disk, self.read_copies(on_disk))
        kept: deque[OnDisk | Outgoing] = deque()
        for item in backlog:
            if isinstance(item, OnDisk):
                og = found.get(item.seq)
                if og is None:
                    session.queued_bytes -= item.size
                    session.backlog_bytes -= item.size
                    continue
                item = og
            kept.append(item)
        session.backlog = kept

    def qos2_received(self, session: Session, packet_id: int) -> list[store.Op]:
        """Ops recording an inbound QoS 2 packet id (exactly once across restarts)."""
        if not session.persistent:
            return []
        session.stored = True
        return [
            store.Publish(
                f"$MQTT.qos2.{session_token(session)}.{packet_id}",
                b"",
                (("Mqtt-Client", json.dumps(session.client_id, ensure_ascii=True)),),
                stream=QOS2IN,
            )
        ]

    def qos2_released(
        self, session: Session, packet_id: int
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        if not session.persistent:
            return None
        return self._submit(
            [store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{session_token(session)}.{packet_id}")]
        )

    # -- startup -------------------------------------------------------------------------------

    async def load_into(self, broker: Hub) -> None:
        """Rebuild retained messages, sessions, subscriptions and the index of queued
        copies: a queued copy stays on disk (its seq, size and message key in its
        session's backlog); only QoS 2 copies in flight are read whole (their PUBLISH
        or PUBREL is resent at once on reconnection)."""
        st = self.store

        def read() -> tuple[list[store.StoredMsg], ...]:
            return list(st.iter_msgs(SESS)), list(st.iter_msgs(SUBS)), list(st.iter_msgs(QOS2IN))

        sess_msgs, subs, qos2 = await trio.to_thread.run_sync(read)
        now_wall = time.time_ns()
        now = trio.current_time()
        index = broker.retained

        def retained(head: store.MsgHead) -> None:  # the index only: SUBSCRIBEs read them
            topic_json = head.header("Mqtt-Topic")
            if topic_json is None or not head.size:
                return
            props = head.header("Mqtt-Props")
            expires_at = None
            if props and "message_expiry_interval" in props:
                interval = _props_from_json(props).message_expiry_interval or 0
                age = max(0.0, (now_wall - head.time_ns) / 1e9)
                if age >= interval:
                    return
                expires_at = now + interval - age
            index.load(json.loads(topic_json).encode("utf-8"), head.seq, expires_at)

        await self._scan(RMSGS, retained)
        by_token: dict[str, Session] = {}
        moved: list[store.Op] = []  # records of the older layout, rewritten
        for stored in sess_msgs:
            rec = json.loads(stored.payload)
            session = broker.sessions.create(rec["id"])
            session.stored = True
            session.expiry_interval = int(rec["expiry"])
            session.protocol_version = int(rec.get("version", 5))
            by_token[session_token(session)] = session
            if "subs" in rec:  # written before subscriptions had records of their own
                for sub in rec["subs"]:
                    broker.subscribe(session, _subscription(sub))
                del rec["subs"]
                moved.append(store.Publish(stored.subject, _dump(rec), stream=SESS))
                moved.extend(
                    self._subscription_op(session, r) for r in session.subscriptions.values()
                )
        orphan_subs: list[store.DeleteMsg] = []
        for stored in subs:
            owner = by_token.get(stored.subject.split(".")[2])
            if owner is None:
                orphan_subs.append(store.DeleteMsg(SUBS, stored.seq))
                continue
            broker.subscribe(owner, _subscription(json.loads(stored.payload)))
        # One job: a session record is rewritten without its list only together with the
        # records that replace it.
        self._fire(moved)
        self._fire_deletes(orphan_subs)
        refs = self.refs
        sizes: dict[str, int] = {}

        def stored_once(head: store.MsgHead) -> None:
            key = head.subject.removeprefix("$MQTT.msgs.")
            refs[key] = [head.seq, 0]
            sizes[key] = head.size

        await self._scan(MSGS, stored_once)
        orphans: list[store.DeleteMsg] = []
        # QoS 2 copies with a packet id: (send order, session, copy, packet id, stage)
        inflight: list[tuple[int, Session, OnDisk, int, Stage]] = []

        def pending(head: store.MsgHead) -> None:
            owner = by_token.get(head.subject.removeprefix("$MQTT.pend."))
            inline = head.header(PEND_HEADER)
            key = ""
            if inline is not None:
                rec = json.loads(inline)
                size = head.size
            else:
                rec = json.loads(head.payload) if head.payload else {}
                key = rec.get("m", "")
                size = sizes.get(key, -1)
            if owner is None or size < 0:
                orphans.append(store.DeleteMsg(PEND, head.seq))
                return
            if key:
                refs[key][1] += 1
            item = OnDisk(head.seq, size, key, False)
            pid = int(rec["p"])
            if pid and int(rec["q"]) == 2:
                stage = Stage.AWAIT_PUBCOMP if rec["st"] == 2 else Stage.AWAIT_PUBREC
                inflight.append((int(rec.get("o", 0)) or head.seq, owner, item, pid, stage))
                return
            backlog = owner.backlog
            if backlog is None:
                backlog = owner.backlog = deque()
            backlog.append(item)
            owner.queued_bytes += size
            owner.backlog_bytes += size

        await self._scan(PEND, pending, SMALL_RECORD)
        for key, ref in list(refs.items()):
            if ref[1] == 0:
                orphans.append(store.DeleteMsg(MSGS, ref[0]))
                del refs[key]
        if inflight:
            items = [r[2] for r in inflight]
            found = self.copies(items, await trio.to_thread.run_sync(self.read_copies, items))
            # In-flight QoS 2 copies go back in their original send order [MQTT-4.6.0-1].
            for _order, owner, item, pid, stage in sorted(inflight, key=lambda r: r[0]):
                og = found.get(item.seq)
                if og is None:
                    continue
                enc = EncodedPublish(og.message.publish, ProtocolVersion(owner.protocol_version))
                owner.state.restore_outbound(
                    pid, enc.as_publish(pid, 2, og.retain, True, og.sub_ids), 2, stage
                )
                owner.outgoing[pid] = og
        for stored in qos2:
            client_json = stored.header("Mqtt-Client")
            target = broker.sessions.get(json.loads(client_json)) if client_json else None
            if target is None:
                orphans.append(store.DeleteMsg(QOS2IN, stored.seq))
                continue
            target.state.inbound_qos2.add(int(stored.subject.rsplit(".", 1)[1]))
        self._fire_deletes(orphans)

    async def _scan(
        self, stream: str, each: Callable[[store.MsgHead], None], payload_upto: int = 0
    ) -> None:
        """Start-up: ``each`` head of ``stream`` in order, read in a worker thread a chunk at
        a time (what a chunk leaves behind is reused by the next: a list of every head
        of 100,000 retained messages left 94 MB of the process's heap in use)."""
        st = self.store

        def chunk(start: int) -> list[store.MsgHead]:
            heads = st.iter_heads(stream, start, chunk=SCAN_CHUNK, payload_upto=payload_upto)
            out = list(itertools.islice(heads, SCAN_CHUNK))
            # The read mapped the records and the pages around them: not ours to keep.
            st.release_pages()
            return out

        start = 0
        while True:
            heads = await trio.to_thread.run_sync(chunk, start)
            for head in heads:
                each(head)
            if len(heads) < SCAN_CHUNK:
                return
            start = heads[-1].seq + 1


def _subscription(sub: list[Any]) -> SubscriptionRecord:
    """A subscription from its stored form ``[filter, qos, nl, rap, rh, sub_id]``."""
    flt, qos, nl, rap, rh, sid = sub
    handle = handles.pack(
        qos, no_local=bool(nl), retain_as_published=bool(rap), retain_handling=rh, sub_id=sid
    )
    return SubscriptionRecord(flt.encode("utf-8"), qos, bool(nl), bool(rap), int(rh), sid, handle)


def _dump(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
