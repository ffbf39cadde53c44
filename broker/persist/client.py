"""The broker's trio client of the store: batches, futures to trio, failure reports.

Nothing here knows MQTT: any part of the broker that writes to the store (the MQTT
state in ``state.py``, the JetStream API later) goes through one :class:`StoreClient`,
so that every write of a scheduler pass joins one store job and store order stays
submission order.

Threads
    Everything runs on the trio thread except the completion callbacks of store jobs
    (a batch's ``submit_then`` function, the done callbacks of futures), which run on the
    store's writer thread: they only observe, log (``_FailureReport``) or hand work back
    to trio (a batch's outcome through the :class:`~broker.persist.inbox.CommitInbox` the
    broker gives :meth:`StoreClient.use_inbox`, else ``TrioToken.run_sync_soon``).
    Nothing blocks the loop.

Resource handling
    :meth:`StoreClient.open` opens the store (in a worker thread) and creates the
    streams it is given that are missing; :meth:`StoreClient.attach` hands it the
    nursery that runs its tasks (retries of failed deletions, and what :meth:`spawn`
    starts); :meth:`StoreClient.close` submits what is gathered and closes the store.

Error handling
    A failed job the caller waits for raises :class:`StorageError` in the waiter;
    deletions nobody waits for are tried again (:meth:`StoreClient.fire_deletes`); other
    writes nobody waits for are not (:meth:`StoreClient.fire`). Every failure is logged
    by the failure report, at most one line per ``STORAGE_REPORT_INTERVAL_S``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import math
import pathlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeAlias

import trio

import store
from broker.config import StorageConfig
from broker.core.stats import Histogram
from broker.persist.inbox import CommitInbox

STORAGE_REPORT_INTERVAL_S: Final = 10.0  # at most one log line per interval about failed store jobs
# A failed acknowledgement's deletions are tried again after this.
RETRY_DELETES_AFTER_S: Final = 1.0

log = logging.getLogger("jetmq.persist")

# A submitted job: its results, one per op, once the writer thread committed it.
StoreFuture: TypeAlias = concurrent.futures.Future[list[store.OpResult]]


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

    def __call__(self, fut: StoreFuture) -> None:
        self.report(fut.exception())

    def report(self, exc: BaseException | None) -> None:
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


def _not_stored(exc: BaseException) -> StorageError:
    return StorageError(f"{type(exc).__name__}: {exc}")


def _notify(fut: StoreFuture, event: trio.Event) -> None:
    """Set ``event`` on the trio thread once ``fut`` (completed on the writer) is done."""
    tok = trio.lowlevel.current_trio_token()

    def done(_: object) -> None:
        # The loop may already be gone at shutdown; nobody is waiting then.
        with contextlib.suppress(trio.RunFinishedError):
            tok.run_sync_soon(event.set)

    fut.add_done_callback(done)


async def wait_future(fut: StoreFuture) -> list[store.OpResult]:
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


class Batch:
    """Operations gathered on the trio thread and submitted as one store job.

    Every PUBLISH read in one scheduler pass (and every acknowledgement's deletions)
    joins the open batch; it is submitted when somebody waits for it, before any other
    submission (store order is submission order), at the end of the parking round that
    opened it, or by a callback queued when the batch was opened, whichever comes first.
    It is submitted with a completion callback (``Store.submit_then``: no future, lock or
    condition per job), which hands the results to the trio thread once (the inbox, or
    ``run_sync_soon``; not at all if nobody waited for it: see ``submit_open``): from then on
    the batch is *finished* (:meth:`finish`), its waiters are woken and its callbacks run,
    all on the trio thread. One wake-up per batch instead of per message.
    """

    __slots__ = (
        "awaited",
        "callbacks",
        "deletes",
        "done",
        "error",
        "event",
        "finished",
        "ops",
        "owner",
        "submitted",
    )

    def __init__(self, owner: StoreClient) -> None:
        self.owner = owner
        self.awaited = False  # holds writes somebody waits for (a PUBLISH's acknowledgement)
        self.ops: list[store.Op] = []
        # The deletions by seq among ops that nobody waits for (tried again if it fails).
        self.deletes: list[store.DeleteMsg] = []
        self.submitted = False
        self.finished = False  # the commit's outcome reached the trio thread
        self.event: trio.Event | None = None  # made by the first waiter
        self.callbacks: list[Callable[[bool], None]] = []  # when_committed, in order
        self.done: list[store.OpResult] | None = None
        self.error: BaseException | None = None

    def finish(self, outcome: list[store.OpResult] | BaseException) -> None:
        """(trio thread) The commit is done: keep its results, wake the waiters, run the
        callbacks."""
        if isinstance(outcome, BaseException):
            self.error = outcome
        else:
            self.done = outcome
        self.finished = True
        if self.event is not None:
            self.event.set()
        callbacks, self.callbacks = self.callbacks, []
        ok = self.error is None
        for fn in callbacks:
            fn(ok)

    async def wait(self) -> None:
        """Until the batch is finished (submitting it if it is still open)."""
        if not self.submitted:
            self.owner.submit_open()
        if not self.finished:
            event = self.event
            if event is None:
                event = self.event = trio.Event()
            await event.wait()

    async def results(self) -> list[store.OpResult]:
        if self.done is None:
            await self.wait()
            if self.error is not None:
                raise _not_stored(self.error)
        assert self.done is not None
        return self.done


class PublishPlan:
    """What one PUBLISH stores before it is acknowledged (a slice of a batch), and the
    results. The indexes are the caller's: which of its operations hold what. (A plain
    class: one is made per stored PUBLISH, and a dataclass's default factories cost.)"""

    __slots__ = ("batch", "count", "msg_op", "offset", "pend_index", "results", "retained_op")

    def __init__(
        self,
        batch: Batch | None = None,
        offset: int = 0,
        count: int = 0,
        pend_index: dict[int, int] | None = None,
        msg_op: int = -1,
        retained_op: int = -1,
    ) -> None:
        self.batch = batch
        self.offset = offset  # where this plan's operations start in the batch
        self.count = count
        self.pend_index = {} if pend_index is None else pend_index  # delivery -> op index
        self.msg_op = msg_op
        self.retained_op = retained_op
        self.results: Sequence[store.OpResult] = ()  # (the slice of the batch's, once done)

    @property
    def empty(self) -> bool:
        return self.batch is None

    async def wait(self) -> None:
        if self.batch is not None and not self.results:
            res = await self.batch.results()
            self.results = res[self.offset : self.offset + self.count]

    def committed(self) -> bool | None:
        """Whether this plan's commit succeeded (False: failed), None while in flight (its
        outcome has not reached the trio thread yet)."""
        batch = self.batch
        if batch is None or batch.done is not None:
            return True
        if not batch.finished:
            return None
        return batch.error is None

    def settled(self) -> bool | None:
        """:meth:`committed`, with :attr:`results` in place once the commit succeeded."""
        batch = self.batch
        if batch is None:
            return True
        done = batch.done
        if done is not None:
            if not self.results and self.count:
                self.results = done[self.offset : self.offset + self.count]
            return True
        if not batch.finished:
            return None
        return batch.error is None

    def on_finish(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(ok)`` on the trio thread when this plan's batch is finished, without
        submitting it (a reader submits at its chunk's end, or the callback queued when
        the batch was opened does). Only while the batch is in flight."""
        batch = self.batch
        assert batch is not None
        assert not batch.finished
        batch.callbacks.append(fn)

    def when_committed(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(ok)`` on the trio thread once this plan's commit is done (submitting
        the open batch now); its results are in place by then. Never called from here
        directly: a batch already finished calls it at the next ``run_sync_soon``."""
        batch = self.batch
        assert batch is not None
        if not batch.submitted:
            batch.owner.submit_open()

        def done(ok: bool) -> None:
            if ok and not self.results:
                assert batch.done is not None
                self.results = batch.done[self.offset : self.offset + self.count]
            fn(ok)

        if batch.finished:
            with contextlib.suppress(trio.RunFinishedError):
                trio.lowlevel.current_trio_token().run_sync_soon(done, batch.error is None)
        else:
            batch.callbacks.append(done)

    def seq_of(self, op_index: int) -> int:
        res = self.results[op_index] if 0 <= op_index < len(self.results) else None
        return res.seq if isinstance(res, store.PubAck) else 0

    def result(self, op_index: int) -> store.OpResult:
        return self.results[op_index] if 0 <= op_index < len(self.results) else None

    def pend_seq(self, delivery_index: int) -> int:
        op = self.pend_index.get(delivery_index)
        return 0 if op is None else self.seq_of(op)


EMPTY_PLAN: Final = PublishPlan()


class StoreClient:
    """The store as the broker's trio side uses it (one instance per broker, shared by
    every part that writes)."""

    def __init__(self, st: store.Store) -> None:
        self.store = st
        self._open: Batch | None = None
        self._in_round = False  # see round_begun
        self._closed = False
        self._report = _FailureReport()
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._retry: list[store.DeleteMsg] = []
        self._retrying = False
        # Where batch outcomes reach the trio thread (None: run_sync_soon): see use_inbox.
        self._inbox: CommitInbox | None = None
        # Submission of a batch -> its commit done (durable with sync="always"), observed
        # on the writer thread (the only writer of this histogram): /metrics reads it.
        self.commit_seconds = Histogram()

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: StorageConfig, streams: Sequence[dict[str, Any]]) -> StoreClient:
        """Open the store of ``config`` and create the ``streams`` (configurations) it
        does not have yet; existing ones are left as they are."""
        path = pathlib.Path(config.data_dir)

        def _open() -> store.Store:
            path.mkdir(parents=True, exist_ok=True)
            st = store.Store.open(path, sync=config.sync)
            try:
                existing = set(st.stream_names())
                for spec in streams:
                    if spec["name"] not in existing:
                        st.create_stream(spec)
            except BaseException:
                st.close()
                raise
            return st

        return cls(await trio.to_thread.run_sync(_open))

    def attach(self, nursery: trio.Nursery) -> None:
        """The nursery that runs the retries of failed deletions and :meth:`spawn`."""
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()

    def use_inbox(self, inbox: CommitInbox) -> None:
        """Hand batch outcomes to the trio thread through ``inbox`` (served in the parking
        watcher's rounds) instead of ``run_sync_soon``; it is released at :meth:`close`."""
        self._inbox = inbox

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed (or failed: logged)."""
        self.submit_open()
        # An empty job: the writer commits in submission order, so when it is done so is
        # everything before it, including batches whose outcome never comes back to this
        # thread (deletions nobody waits for: see submit_open).
        with contextlib.suppress(StorageError):
            await wait_future(self.store.submit([]))

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
        if self._inbox is not None:  # the writer is gone: nothing puts any more
            self._inbox.release()

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task in the broker's nursery (reads in a worker thread)."""
        assert self._nursery is not None, "StoreClient used before attach"
        self._nursery.start_soon(fn, *args)

    # -- submissions -----------------------------------------------------------------------------

    def chunk_done(self) -> None:
        """A reader finished an input chunk: writes somebody waits for go to the store now,
        so their commit overlaps the other connections' work in this pass; deletions can
        wait."""
        batch = self._open
        if batch is not None and batch.awaited:
            self.submit_open()

    def submit_open(self) -> None:
        """Submit the open batch, if any (idempotent)."""
        batch = self._open
        if batch is None:
            return
        self._open = None
        batch.submitted = True
        if self._closed:  # (shutdown) nothing is written any more: its waiters are told
            batch.finish(StorageError("the store is closed"))
            return
        token = trio.lowlevel.current_trio_token()
        hist = self.commit_seconds
        report = self._report.report
        deletes = batch.deletes
        # Nobody can wait for a batch nobody waited for when it was submitted (only plans
        # wait, and they join open batches; flush() waits for a job of its own): its
        # success needs no trip to the trio thread, a wake-up of the loop saved per batch
        # of deletions (one per acknowledged message at low rates).
        silent = not batch.awaited
        inbox = self._inbox
        started = time.perf_counter()

        def on_done(outcome: list[store.OpResult] | BaseException) -> None:
            # Writer thread: observe, report, hand the outcome to the trio thread.
            hist.observe(time.perf_counter() - started)
            failed = isinstance(outcome, BaseException)
            report(outcome if isinstance(outcome, BaseException) else None)
            if silent and not failed:
                return
            if inbox is not None:
                inbox.put(batch.finish, outcome)
                if failed and deletes:
                    inbox.put(self._retry_later, deletes)
                return
            # The loop may already be gone at shutdown; nobody is waiting then.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(batch.finish, outcome)
                if failed and deletes:
                    token.run_sync_soon(self._retry_later, deletes)

        self.store.submit_then(batch.ops, on_done)

    def open_batch(self) -> Batch:
        """The batch gathering this scheduler pass's writes (opened if there is none)."""
        batch = self._open
        if batch is None:
            batch = self._open = Batch(self)
            if not self._in_round:  # a round submits it at its end (round_done)
                trio.lowlevel.current_trio_token().run_sync_soon(self.submit_open)
        return batch

    def round_begun(self) -> None:
        """The parking watcher serves a round of ready sockets: what they write is
        submitted at its end (:meth:`round_done`), not by a callback of the loop."""
        self._in_round = True

    def round_done(self) -> None:
        """The round is over: its writes go to the store now, deletions included (they
        would wait for the next pass of the loop's callbacks, which the round replaces)."""
        self._in_round = False
        self.submit_open()

    def submit(self, ops: Sequence[store.Op]) -> StoreFuture:
        """Submit ``ops`` as a job of their own, after the open batch; the caller awaits the
        future (:func:`wait_future`)."""
        self.submit_open()  # what was gathered before goes first
        fut = self.store.submit(ops)
        fut.add_done_callback(self._report)
        return fut

    def fire(self, ops: Sequence[store.Op]) -> None:
        """Store without waiting (the caller's correctness does not depend on the commit).
        Not tried again if the commit fails: a purge by subject tried late could remove
        records written since."""
        if ops:
            self.open_batch().ops.extend(ops)

    def fire_deletes(self, ops: list[store.DeleteMsg]) -> None:
        """Delete without waiting; tried again if the commit fails (:meth:`_deletes_done`):
        a seq is never reused, so a late deletion removes nothing newer."""
        if ops:
            batch = self.open_batch()
            batch.ops.extend(ops)
            batch.deletes.extend(ops)

    def fire_delete(self, op: store.DeleteMsg) -> None:
        """:meth:`fire_deletes` of one."""
        batch = self.open_batch()
        batch.ops.append(op)
        batch.deletes.append(op)

    # -- deletions that failed (a full disk) ---------------------------------------------------

    def _deletes_done(self, deletes: list[store.DeleteMsg], fut: StoreFuture) -> None:
        """Done callback (writer thread) of a retried deletion's job."""
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
