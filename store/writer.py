"""The writer thread: every LMDB write transaction, with group commit.

Callers hand :meth:`GroupCommitWriter.submit` a list of operations and get a
``concurrent.futures.Future`` that completes with one result per operation once the
transaction holding them is committed (and, with ``sync="always"``, fsynced). While one
commit runs, new submissions queue up; the next transaction takes all of them at once.

Failure rules:
- an operation that fails with a JetStream error reports it as its result (the engine
  checks before it writes, so the other operations of the batch still commit);
- ``lmdb.MapFullError`` aborts the transaction, grows the map and runs the batch again;
- any other exception aborts the transaction; the jobs are then retried one by one so
  only the job that raised fails (its future gets the exception).

After a commit the engine's events are handed over first, then the futures complete.
Future callbacks run on the writer thread: they must be quick and thread-safe (the broker
uses ``TrioToken.run_sync_soon``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Final

import lmdb

from store.env import Env, StoreClosedError

MAX_BATCH_JOBS: Final = 4096
BATCH_SYNC_INTERVAL_S: Final = 0.05  # sync="batch": the documented loss window


class Job:
    """One submission: its operations, its future, and (filled by the engine) its results."""

    __slots__ = ("future", "ops", "results")

    def __init__(self, ops: Sequence[Any]) -> None:
        self.ops = ops
        self.future: Future[list[Any]] = Future()
        self.results: list[Any] = []


ApplyFn = Callable[[Any, list[Job]], Any]


class GroupCommitWriter:
    """Owns the one thread that opens LMDB write transactions."""

    def __init__(
        self,
        env: Env,
        apply: ApplyFn,
        *,
        on_abort: Callable[[], None],
        after_commit: Callable[[Any], None],
        sync_always: bool,
        name: str = "jetmq-store-writer",
    ) -> None:
        self._env = env
        self._apply = apply
        self._on_abort = on_abort
        self._after_commit = after_commit
        self._sync_always = sync_always
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._unsynced = False
        self._last_sync = time.monotonic()
        self.commits = 0  # counters read from any thread (diagnostics, metrics)
        self.jobs_committed = 0
        self.ops_committed = 0
        self.map_growths = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, ops: Sequence[Any]) -> Future[list[Any]]:
        job = Job(ops)
        with self._cond:
            if self._closing:
                raise StoreClosedError("store is closed")
            self._queue.append(job)
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Finish every queued job, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def on_writer_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    if self._unsynced:
                        # sync="batch": wait for more work, but sync within the window.
                        left = BATCH_SYNC_INTERVAL_S - (time.monotonic() - self._last_sync)
                        if left <= 0 or not self._cond.wait(left):
                            break
                    else:
                        self._cond.wait()
                if not self._queue and self._closing:
                    break
                jobs: list[Job] = []
                while self._queue and len(jobs) < MAX_BATCH_JOBS:
                    jobs.append(self._queue.popleft())
            if jobs:
                self._commit(jobs)
            if self._unsynced and time.monotonic() - self._last_sync >= BATCH_SYNC_INTERVAL_S:
                self._sync()
        if self._unsynced:
            self._sync()

    def _sync(self) -> None:
        self._env.sync()
        self._unsynced = False
        self._last_sync = time.monotonic()

    def _commit(self, jobs: list[Job]) -> None:
        while True:
            for job in jobs:
                job.results = []
            txn = self._env.begin_write()
            try:
                token = self._apply(txn, jobs)
                txn.commit()
            except lmdb.MapFullError:
                txn.abort()
                self._on_abort()
                self._env.grow()
                self.map_growths += 1
                continue
            except BaseException as exc:
                txn.abort()
                self._on_abort()
                if len(jobs) > 1:
                    for job in jobs:
                        self._commit([job])
                    return
                jobs[0].future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            break
        self.commits += 1
        self.jobs_committed += len(jobs)
        self.ops_committed += sum(len(job.ops) for job in jobs)
        if not self._sync_always:
            self._unsynced = True
        # Events first, so a caller woken by its future already sees the events it caused.
        self._after_commit(token)
        for job in jobs:
            job.future.set_result(job.results)
