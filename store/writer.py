"""The writer thread: every LMDB write transaction, with group commit.

Callers hand :meth:`GroupCommitWriter.submit` a list of operations and get a
``concurrent.futures.Future`` (the :class:`Job` itself) that completes with one result per
operation once the transaction holding them is committed (and, with ``sync="always"``,
fsynced); or hand :meth:`GroupCommitWriter.submit_then` the operations and a function
that is called with the results (or the exception) at that moment, which spares the
future's lock and condition (a :class:`CallbackJob`: three slots). While one commit runs,
new submissions queue up; the next transaction takes all of them at once.

Failure rules:
- an operation that fails with a JetStream error reports it as its result (the engine
  checks before it writes, so the other operations of the batch still commit);
- ``lmdb.MapFullError`` aborts the transaction, grows the map and runs the batch again;
- any other exception aborts the transaction; the jobs are then retried one by one so
  only the job that raised fails (its future gets the exception; an LMDB error, such as
  a full disk, as :class:`store.env.StorageFailure`).

Long operations (purging or deleting a big stream) run in slices: the engine applies one
slice, and ``unfinished()`` (called after each commit) names the jobs it wants to go on
with and the operation that continues each. Such a job is not completed: its next slice
runs in a batch of its own, after a batch of whatever was submitted meanwhile, so other
submissions wait for the rest of one slice at most, not for all of it. The engine only
continues a job of one operation (a job's operations otherwise commit in one
transaction).

After a commit the engine's events are handed over first, then the jobs complete.
Future callbacks and ``submit_then`` functions run on the writer thread: they must be
quick and thread-safe (the broker uses ``TrioToken.run_sync_soon``); an exception they
raise is logged and goes no further. Cancelling a future does not withdraw its
operations: they commit, and only the result is dropped.

Hot path (tens of thousands of submissions per second): a submission is one object (the
job is its own future) put on a ``queue.SimpleQueue`` under a plain lock; the writer
blocks in the queue's C ``get`` and drains whatever else is queued without waiting.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, Final

import lmdb

from store.env import Env
from store.failures import StorageFailure, StoreClosedError

log = logging.getLogger("jetmq.store")

MAX_BATCH_JOBS: Final = 4096
BATCH_SYNC_INTERVAL_S: Final = 0.05  # sync="batch": the documented loss window
# After a commit, at most this often: free the reader slots of dead processes (Env.
# clear_stale_readers; a stale slot makes every commit grow the data file).
READER_CHECK_INTERVAL_S: Final = 0.1


class Job(Future[list[Any]]):
    """One submission: its operations and (filled by the engine) its results.

    The job is the future handed back to the caller, so a submission allocates one object.
    """

    __slots__ = ("ops", "results")

    def __init__(self, ops: Sequence[Any]) -> None:
        super().__init__()
        self.ops = ops
        self.results: list[Any] = []


class CallbackJob:
    """One submission whose completion is a function call instead of a future."""

    __slots__ = ("on_done", "ops", "results")

    def __init__(self, ops: Sequence[Any], on_done: Callable[[list[Any] | BaseException], None]):
        self.ops = ops
        self.on_done = on_done
        self.results: list[Any] = []

    def set_result(self, results: list[Any]) -> None:
        try:
            self.on_done(results)
        except Exception:
            log.exception("store completion callback failed")

    def set_exception(self, exc: BaseException) -> None:
        try:
            self.on_done(exc)
        except Exception:
            log.exception("store completion callback failed")


AnyJob = Job | CallbackJob
ApplyFn = Callable[[Any, list[AnyJob]], Any]
# After a committed batch: the jobs to go on with, each with the operation that continues it.
UnfinishedFn = Callable[[], list[tuple[AnyJob, Any]]]


def _nothing_unfinished() -> list[tuple[AnyJob, Any]]:
    return []


class GroupCommitWriter:
    """Owns the one thread that opens LMDB write transactions."""

    def __init__(
        self,
        env: Env,
        apply: ApplyFn,
        *,
        on_abort: Callable[[], None],
        after_commit: Callable[[Any], None],
        unfinished: UnfinishedFn = _nothing_unfinished,
        sync_always: bool,
        max_batch_jobs: int = MAX_BATCH_JOBS,
        name: str = "jetmq-store-writer",
    ) -> None:
        if max_batch_jobs < 1:
            raise ValueError("max_batch_jobs must be at least 1")
        self._max_jobs = max_batch_jobs
        self._env = env
        self._apply = apply
        self._on_abort = on_abort
        self._after_commit = after_commit
        self._unfinished = unfinished
        self._carried: list[AnyJob] = []  # unfinished jobs: their next slice, a batch of its own
        self._sync_always = sync_always
        # None is the stop mark, queued by close() after every job (both under _lock).
        self._queue: queue.SimpleQueue[AnyJob | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closing = False
        self._unsynced = False
        self._last_sync = time.monotonic()
        self._readers_checked = self._last_sync
        self.commits = 0  # counters read from any thread (diagnostics, metrics)
        self.jobs_committed = 0
        self.ops_committed = 0
        self.map_growths = 0
        # Writer-thread time (ns) of committed batches: applying the operations, the LMDB
        # commit (its fsyncs with sync="always"), and the event hook + future completion
        # (which runs the callers' done callbacks).
        self.apply_ns = 0
        self.commit_ns = 0
        self.complete_ns = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, ops: Iterable[Any]) -> Future[list[Any]]:
        job = Job(ops if type(ops) is list else list(ops))
        with self._lock:
            if self._closing:
                raise StoreClosedError("store is closed")
            self._queue.put(job)
        return job

    def submit_then(
        self, ops: Iterable[Any], on_done: Callable[[list[Any] | BaseException], None]
    ) -> None:
        """Like :meth:`submit`; ``on_done`` gets the results list (or the exception)."""
        job = CallbackJob(ops if type(ops) is list else list(ops), on_done)
        with self._lock:
            if self._closing:
                raise StoreClosedError("store is closed")
            self._queue.put(job)

    def close(self) -> None:
        """Finish every queued job, then stop the thread."""
        with self._lock:
            if not self._closing:
                self._closing = True
                self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def on_writer_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # -- the thread -----------------------------------------------------------------------

    def _next(self) -> AnyJob | None:
        """Block for the next submission (or the stop mark); sync="batch" syncs when due."""
        q = self._queue
        while self._unsynced:
            left = BATCH_SYNC_INTERVAL_S - (time.monotonic() - self._last_sync)
            if left > 0:
                try:
                    return q.get(timeout=left)
                except queue.Empty:
                    pass
            self._sync()
        return q.get()

    def _run(self) -> None:
        q = self._queue
        max_jobs = self._max_jobs
        stop = False
        others_first = False
        while True:
            carried = self._carried
            if carried and (not others_first or stop or q.empty()):
                # A slice of each unfinished job, in a batch of their own: what was queued
                # meanwhile committed in the batch before (others_first), so it waits for
                # at most the rest of one slice.
                self._carried = []
                jobs = carried
                more = False
                item = None
            else:
                jobs = []
                more = True
                if carried:
                    item = q.get_nowait()  # not empty, checked above
                elif stop:
                    break
                else:
                    item = self._next()
            while more:
                if item is None:
                    stop = True
                    break
                jobs.append(item)
                if len(jobs) >= max_jobs or q.empty():
                    break
                item = q.get_nowait()  # the only consumer: not empty means get succeeds
            if jobs:
                self._commit(jobs)
            others_first = not more  # after a slice, queued jobs go first
            now = time.monotonic()
            if self._unsynced and now - self._last_sync >= BATCH_SYNC_INTERVAL_S:
                self._sync()
            if now - self._readers_checked >= READER_CHECK_INTERVAL_S:
                self._check_readers(now)
        if self._unsynced:
            self._sync()

    def _check_readers(self, now: float) -> None:
        self._readers_checked = now
        try:
            cleared = self._env.clear_stale_readers()
        except Exception:
            log.exception("checking LMDB's reader table failed")
            return
        if cleared:
            log.warning(
                "freed %d LMDB reader slot(s) of processes that died while reading", cleared
            )

    def _sync(self) -> None:
        self._env.sync()
        self._unsynced = False
        self._last_sync = time.monotonic()

    def _reset_after_abort(self) -> None:
        """The engine reloads what is committed. Should that fail too, it is logged and the
        thread goes on: the jobs get their own failure, later ones a fresh try."""
        try:
            self._on_abort()
        except Exception:
            log.exception("reloading the store after an aborted batch failed")

    def _commit(self, jobs: list[AnyJob]) -> None:
        retry = False
        while True:
            if retry:
                for job in jobs:
                    job.results = []
            t0 = time.perf_counter_ns()
            txn = self._env.begin_write()
            try:
                token = self._apply(txn, jobs)
                t1 = time.perf_counter_ns()
                txn.commit()
            except lmdb.MapFullError:
                txn.abort()
                self._reset_after_abort()
                self._env.grow()
                self.map_growths += 1
                retry = True
                continue
            except BaseException as exc:
                txn.abort()
                self._reset_after_abort()
                if len(jobs) == 1:
                    failure: BaseException = exc
                    if isinstance(exc, lmdb.Error):
                        failure = StorageFailure(f"writing the store in {self._env.path}: {exc}")
                        failure.__cause__ = exc
                    with contextlib.suppress(InvalidStateError):  # cancelled by its caller
                        jobs[0].set_exception(failure)
                    if not isinstance(exc, Exception):
                        raise
                    return
                # Several jobs: one by one, below (outside this handler, so the exceptions
                # they get carry no context from this one).
            else:
                break
            for job in jobs:
                job.results = []
                self._commit([job])
            return
        t2 = time.perf_counter_ns()
        self.commits += 1
        self.jobs_committed += len(jobs)
        if not self._sync_always:
            self._unsynced = True
        carried = self._unfinished()
        if carried:
            going_on = set()
            for job, op in carried:
                job.ops = [op]
                job.results = []
                going_on.add(id(job))
                self._carried.append(job)
            jobs = [job for job in jobs if id(job) not in going_on]
        # Events first, so a caller woken by its future already sees the events it caused.
        self._after_commit(token)
        nops = 0
        for job in jobs:
            nops += len(job.ops)
            # try/except, not contextlib.suppress: no context-manager object per job.
            try:  # noqa: SIM105
                job.set_result(job.results)
            except InvalidStateError:  # cancelled by its caller: the ops committed anyway
                pass
        self.ops_committed += nops
        self.apply_ns += t1 - t0
        self.commit_ns += t2 - t1
        self.complete_ns += time.perf_counter_ns() - t2
