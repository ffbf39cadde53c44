"""The LMDB environment: open/close, schema version and migrations, map growth, readers.

Threading rules (py-lmdb's, written down):
- write transactions are opened only by the writer thread (:mod:`store.writer`);
- read transactions may be opened from any thread through :meth:`Env.read`, which holds
  a shared lock so that growing the map (which needs no live transaction in this
  process) can wait for readers to finish;
- after :meth:`Env.close`, every call raises :class:`StoreClosedError`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import lmdb

from store import keys

DEFAULT_MAP_SIZE: Final = 1 << 30
MAX_READERS: Final = 512  # broker threads + external read-only readers (Spark, diagnostics)

# Migrations: from-version -> function upgrading an open write txn by one version.
MIGRATIONS: dict[int, Callable[[Any, Env], None]] = {}


class StoreClosedError(RuntimeError):
    """The store (or its environment) was used after close()."""


class SchemaError(RuntimeError):
    """The environment was written by a newer jetmq or has no known migration path."""


class _SharedLock:
    """Many readers or one exclusive holder (used only to grow the map safely)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Env:
    """One LMDB environment directory holding every named database of :mod:`store.keys`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        readonly: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        if not readonly:
            os.makedirs(self.path, exist_ok=True)
        self._env = lmdb.open(
            self.path,
            map_size=map_size,
            max_dbs=len(keys.ALL_DBS) + 4,
            max_readers=MAX_READERS,
            sync=sync,
            metasync=sync,
            readonly=readonly,
            readahead=False,
            lock=True,
        )
        self._lock = _SharedLock()
        self._closed = False
        self.dbs: dict[bytes, Any] = {}
        if readonly:
            for name in keys.ALL_DBS:
                self.dbs[name] = self._env.open_db(name, create=False)
            self._check_schema_readonly()
        else:
            with self._env.begin(write=True) as txn:
                for name in keys.ALL_DBS:
                    self.dbs[name] = self._env.open_db(name, txn=txn, create=True)
                self._init_schema(txn)

    # -- schema ---------------------------------------------------------------------------

    def _init_schema(self, txn: Any) -> None:
        meta = self.dbs[keys.DB_META]
        raw = txn.get(keys.META_SCHEMA, db=meta)
        if raw is None:
            txn.put(keys.META_SCHEMA, keys.u32(keys.SCHEMA_VERSION), db=meta)
            txn.put(keys.META_NEXT_ID, keys.u64(1), db=meta)
            return
        version = keys.read_u32(raw)
        if version > keys.SCHEMA_VERSION:
            raise SchemaError(
                f"store schema {version} is newer than this jetmq ({keys.SCHEMA_VERSION})"
            )
        while version < keys.SCHEMA_VERSION:
            migrate = MIGRATIONS.get(version)
            if migrate is None:
                raise SchemaError(f"no migration from store schema {version}")
            migrate(txn, self)
            version += 1
            txn.put(keys.META_SCHEMA, keys.u32(version), db=meta)

    def _check_schema_readonly(self) -> None:
        with self._env.begin() as txn:
            raw = txn.get(keys.META_SCHEMA, db=self.dbs[keys.DB_META])
        if raw is None or keys.read_u32(raw) != keys.SCHEMA_VERSION:
            raise SchemaError("store schema missing or not the version this reader understands")

    @property
    def schema_version(self) -> int:
        with self.read() as txn:
            raw = txn.get(keys.META_SCHEMA, db=self.dbs[keys.DB_META])
        return keys.read_u32(raw) if raw is not None else 0

    # -- transactions ---------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A short read transaction, usable from any thread."""
        self._check()
        with self._lock.shared():
            self._check()
            txn = self._env.begin(buffers=False)
            try:
                yield txn
            finally:
                txn.abort()

    def begin_write(self) -> Any:
        """A write transaction: for the writer thread only (and tests of this module)."""
        self._check()
        return self._env.begin(write=True)

    def sync(self) -> None:
        self._check()
        self._env.sync(True)

    @property
    def map_size(self) -> int:
        return int(self._env.info()["map_size"])

    def grow(self) -> int:
        """Double the map (called by the writer after MapFullError, with no write txn open)."""
        self._check()
        with self._lock.exclusive():
            new = self.map_size * 2
            self._env.set_mapsize(new)
        return new

    def stat(self) -> dict[str, dict[str, int]]:
        """Entries and pages of each named database (diagnostics)."""
        out: dict[str, dict[str, int]] = {}
        with self.read() as txn:
            for name, db in self.dbs.items():
                out[name.decode()] = dict(txn.stat(db))
        return out

    def close(self) -> None:
        if self._closed:
            return
        with self._lock.exclusive():
            self._closed = True
            self._env.close()
