"""The LMDB environment: open/close, schema version and migrations, map growth, readers.

Threading rules (py-lmdb's, written down):
- write transactions are opened only by the writer thread (:mod:`store.writer`);
- read transactions may be opened from any thread through :meth:`Env.read`, which holds
  a shared lock so that growing the map (which needs no live transaction in this
  process) can wait for readers to finish;
- after :meth:`Env.close`, every call raises :class:`StoreClosedError`.

Schema history: 1 had ``subjects`` keyed u64 sid, subject, 0x00, u64 seq and a
``subjcount`` value of the count alone; 2 (migrated from 1 here, by rebuilding both from
``msgs``) is the layout ``store.keys`` documents.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import lmdb

from store import keys, lmdbfile
from store.failures import SchemaError, StorageFailure, StoreClosedError, StoreOpenError

__all__ = [
    "DEFAULT_MAP_SIZE",
    "MIGRATIONS",
    "Env",
    "SchemaError",
    "StorageFailure",
    "StoreClosedError",
    "StoreOpenError",
]

DEFAULT_MAP_SIZE: Final = 1 << 30
MAX_READERS: Final = 512  # broker threads + external read-only readers (Spark, diagnostics)


def _rebuild_subject_index(txn: Any, env: Env) -> None:
    """Schema 1 -> 2: the ``subjects`` index gains the epoch after the sid and ``subjcount``
    records gain each subject's first and last stored seq. Both are rebuilt from ``msgs``
    (one pass in key order, so per stream in sequence order)."""
    subjects, subjcount = env.dbs[keys.DB_SUBJECTS], env.dbs[keys.DB_SUBJCOUNT]
    txn.drop(subjects, delete=False)
    txn.drop(subjcount, delete=False)
    icur = txn.cursor(db=subjects)
    cur_sid = -1
    recs: dict[bytes, list[int]] = {}

    def flush() -> None:
        for subj, (n, first, last) in recs.items():
            txn.put(
                keys.subjcount_key(cur_sid, subj.decode()),
                keys.pack_subject_record(n, first, last),
                db=subjcount,
            )
        recs.clear()

    for k, v in txn.cursor(db=env.dbs[keys.DB_MSGS]).iternext():
        sid, seq = keys.split_msg_key(k)
        if sid != cur_sid:
            flush()
            cur_sid = sid
        subj = keys.msg_subject_bytes(v)
        icur.put(keys.subject_index_key(sid, subj, seq), b"")
        rec = recs.get(subj)
        if rec is None:
            recs[subj] = [1, seq, seq]
        else:
            rec[0] += 1
            rec[2] = seq
    flush()


# Migrations: from-version -> function upgrading an open write txn by one version.
MIGRATIONS: dict[int, Callable[[Any, Env], None]] = {1: _rebuild_subject_index}


OWNER_FILE: Final = "jetmq.lock"


def _take_ownership(path: str) -> int:
    """Lock ``path/jetmq.lock`` (``flock``, exclusive) for this process: one writer per
    store. LMDB lets a second process open the environment and write; a second jetmq
    would then write from its own cached stream state (sequences already taken, counts)
    and overwrite the first one's messages. The kernel drops the lock when the process
    dies, kill -9 included. Read-only opens (the Spark reader) take no lock. Returns the
    descriptor that holds it; the file names the owner's pid."""
    name = os.path.join(path, OWNER_FILE)
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise StoreOpenError(
            f"the store in {path} is in use by another process"
            + (f" (pid {owner})" if owner.isdigit() else "")
        ) from None
    except BaseException:
        os.close(fd)
        raise
    # Fixed width, written over the last owner's pid: truncating the file first cost a
    # millisecond (ext4), as much as the rest of an open.
    os.pwrite(fd, b"%-10d\n" % os.getpid(), 0)
    return fd


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
        try:
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
        except lmdb.Error as exc:  # not an LMDB file, a version mismatch, no permission, ...
            detail = str(exc).removeprefix(f"{self.path}: ")  # py-lmdb names the path
            raise StoreOpenError(f"cannot open the store in {self.path}: {detail}") from exc
        self._owner_fd = -1
        try:
            self._check_length()
            if not readonly:
                self._owner_fd = _take_ownership(self.path)
                self._env.reader_check()  # a reader that died while no writer was open
        except BaseException:
            self._env.close()
            raise
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
                version = self._init_schema(txn)
            if version < keys.SCHEMA_VERSION:
                self._migrate(version)

    def _check_length(self) -> None:
        """Refuse a data file cut short (a bad copy): LMDB would read the missing pages
        through its map and the process would die of SIGBUS on the first of them.

        The file may legitimately end before its last allocated page (pages allocated and
        freed again within one transaction are never written), so that alone proves
        nothing; a tree root of the committed state past the end does (store.lmdbfile reads
        the meta pages and the main tree's root, a few pages)."""
        page_size = self._env.stat()["psize"]
        data = os.path.join(self.path, "data.mdb")
        size = os.stat(data).st_size
        if size >= (self._env.info()["last_pgno"] + 1) * page_size:
            return
        try:
            roots = lmdbfile.committed_roots(data, page_size)
        except (OSError, ValueError) as exc:
            raise StoreOpenError(f"the store in {self.path} is damaged: {exc}") from exc
        past = [r for r in roots if (r + 1) * page_size > size]
        if past:
            raise StoreOpenError(
                f"the store in {self.path} is damaged: {data} has {size} bytes but its"
                f" committed tree has page {max(past)}, which ends at byte"
                f" {(max(past) + 1) * page_size} (restore it from a backup)"
            )

    # -- schema ---------------------------------------------------------------------------

    def _init_schema(self, txn: Any) -> int:
        """Record the schema of a new environment; the version found (checked) otherwise."""
        meta = self.dbs[keys.DB_META]
        raw = txn.get(keys.META_SCHEMA, db=meta)
        if raw is None:
            txn.put(keys.META_SCHEMA, keys.u32(keys.SCHEMA_VERSION), db=meta)
            txn.put(keys.META_NEXT_ID, keys.u64(1), db=meta)
            return keys.SCHEMA_VERSION
        version = keys.read_u32(raw)
        if version > keys.SCHEMA_VERSION:
            raise SchemaError(
                f"store schema {version} is newer than this jetmq ({keys.SCHEMA_VERSION})"
            )
        for v in range(version, keys.SCHEMA_VERSION):
            if v not in MIGRATIONS:
                raise SchemaError(f"no migration from store schema {v}")
        return version

    def _migrate(self, version: int) -> None:
        """Run the migrations from ``version`` in one write transaction (all or nothing),
        doubling the map and starting again when a migration fills it."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    v = version
                    while v < keys.SCHEMA_VERSION:
                        MIGRATIONS[v](txn, self)
                        v += 1
                    txn.put(keys.META_SCHEMA, keys.u32(v), db=self.dbs[keys.DB_META])
                return
            except lmdb.MapFullError:
                self._env.set_mapsize(self.map_size * 2)

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
    def read(self, *, buffers: bool = False) -> Iterator[Any]:
        """A short read transaction, usable from any thread. With ``buffers`` values are
        memoryviews of the map, valid only inside the transaction (nothing is copied)."""
        self._check()
        with self._lock.shared():
            self._check()
            txn = self._env.begin(buffers=True) if buffers else self._env.begin(buffers=False)
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

    def clear_stale_readers(self) -> int:
        """Free the reader-table slots of processes that died inside a read transaction
        (LMDB's ``mdb_reader_check``); how many. Until then such a slot pins the snapshot
        it read: no page freed after it can be reused, and the data file grows with every
        commit (measured: 90 KB to 172 MB over 3,000 publish+delete cycles of 1 KB after
        one read-only process was killed mid-read)."""
        self._check()
        return int(self._env.reader_check())

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

    def release_mapped_pages(self) -> bool:
        """Drop the data file's pages from this process's page tables (Linux; False where
        it cannot). Reads touch the map, and the kernel maps the pages around each one
        it faults in, so a scan of large records (even of their heads only) leaves the
        process with most of the file in its RSS. The pages are clean and file-backed:
        they stay in the page cache, and the next read faults them back. The map is
        read-only (no ``writemap``), so nothing written is affected."""
        path = os.path.realpath(os.path.join(self.path, "data.mdb"))
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                ranges = [
                    line.split(None, 1)[0]
                    for line in maps
                    if line.rstrip("\n").endswith(" " + path)
                ]
        except OSError:
            return False
        madvise = _madvise()
        if madvise is None:
            return False
        ok = bool(ranges)
        with self._lock.shared():
            self._check()
            for r in ranges:
                lo, hi = (int(x, 16) for x in r.split("-"))
                ok = madvise(lo, hi - lo, mmap.MADV_DONTNEED) == 0 and ok
        return ok

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
            if self._owner_fd >= 0:
                os.close(self._owner_fd)  # releases the lock
                self._owner_fd = -1


_MADVISE: list[Any] = []


def _madvise() -> Any:
    """libc's ``madvise`` through ctypes (None where there is none)."""
    if not _MADVISE:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _MADVISE.append(fn)
    return _MADVISE[0]
