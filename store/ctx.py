"""One batch inside the writer: its write transaction, databases, hot cursors, time, the
events it produced, its walk budgets and the jobs it leaves to go on with.

Writer thread only (:mod:`store.engine` makes one per batch). It names no stream or
consumer class: what a batch touched is recorded by the catalog (store.catalog).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from store import keys
from store.writer import CallbackJob

log = logging.getLogger("jetmq.store")


class BoundedCache(Protocol):
    """A cache the batch grew (store.subjrecs): bounded once the batch ends."""

    def bound_cache(self) -> None: ...


@dataclass
class Ctx:
    """One batch: its write transaction, databases and time."""

    txn: Any
    dbs: dict[bytes, Any]
    now: int
    events: list[Any] = field(default_factory=list)
    cached: set[BoundedCache] = field(default_factory=set)  # subject-record caches that grew
    # The job whose operation is being applied, and the jobs to continue in the
    # next batch with the operation that goes on with each (store.writer: long operations
    # run in slices). Only a job of one operation may be continued.
    job: Any = None
    unfinished: list[tuple[Any, Any]] = field(default_factory=list)
    # Records that consumers may still walk in this batch looking for their next messages
    # or counting num_pending (store.consumers: a longer walk goes on in the next batch),
    # and what one search walks before it looks at the subject index / one count may
    # always read, whatever is left. The engine sets all three from ``remove_slice``; a
    # context it does not set them on (loading) walks without bounds.
    walk_left: int = keys.MAX_U64
    walk_min: int = keys.MAX_U64
    count_min: int = keys.MAX_U64
    # The databases of the hot path, looked up once per batch, and one cursor on each for
    # point writes and lookups: ``cursor.put(k, v)`` costs about half of
    # ``txn.put(k, v, db=...)`` in py-lmdb. Scans open cursors of their own.
    msgs_db: Any = field(init=False)
    subjects_db: Any = field(init=False)
    subjcount_db: Any = field(init=False)
    pending_db: Any = field(init=False)
    msgs_cur: Any = field(init=False)
    subjects_cur: Any = field(init=False)
    subjcount_cur: Any = field(init=False)
    pending_cur: Any = field(init=False)

    def __post_init__(self) -> None:
        self.msgs_db = self.dbs[keys.DB_MSGS]
        self.subjects_db = self.dbs[keys.DB_SUBJECTS]
        self.subjcount_db = self.dbs[keys.DB_SUBJCOUNT]
        self.msgs_cur = self.txn.cursor(db=self.msgs_db)
        self.subjects_cur = self.txn.cursor(db=self.subjects_db)
        self.subjcount_cur = self.txn.cursor(db=self.subjcount_db)
        self.pending_db = self.dbs[keys.DB_PENDING]
        self.pending_cur = self.txn.cursor(db=self.pending_db)

    def db(self, name: bytes) -> Any:
        return self.dbs[name]

    @property
    def may_continue(self) -> bool:
        """Whether the current operation may run in slices (it is its job's only one)."""
        return self.job is not None and len(self.job.ops) == 1

    def go_on(self, op: Any) -> None:
        """Leave the current job unfinished; the next batch continues it with ``op``. A job
        goes on with one operation: should one of its operations leave two to go on with
        (a Tick deleting two inactive consumers of interest streams), the second goes on
        in a job of its own, whose result nobody waits for."""
        if any(job is self.job for job, _ in self.unfinished):
            self.unfinished.append((CallbackJob([op], _detached_done), op))
            return
        self.unfinished.append((self.job, op))


def _detached_done(result: list[Any] | BaseException) -> None:
    if isinstance(result, BaseException):
        log.error("a continued store operation failed: %r", result)
