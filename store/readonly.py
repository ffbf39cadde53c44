"""The store's environment opened read-only, for readers outside the broker (the Spark
source): the named databases of :mod:`store.keys`, short read transactions and the
message records decoded. Imports lmdb, :mod:`store.keys` and the standard library only
(a Spark executor imports it; no pydantic, no engine).

It never writes and takes no ownership lock: any number of readers may open the
environment while the broker writes it (each read transaction is a snapshot). A reader
that dies inside a read transaction pins its snapshot until the broker's writer clears
stale readers (``Env.clear_stale_readers``), so keep transactions short and read long
ranges in chunks (:meth:`ReadOnlyEnv.messages` with ``limit``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, NamedTuple

import lmdb

from store import keys
from store.failures import SchemaError, StoreClosedError, StoreOpenError

READ_MAX_READERS: Final = 512  # the writer's Env opens the table with this many slots


class Record(NamedTuple):
    """One stored message, decoded."""

    seq: int
    time_ns: int
    subject: str
    headers: tuple[tuple[str, str], ...]
    payload: bytes


def decode_record(seq: int, record: bytes) -> Record:
    """A ``msgs`` record (store.keys) as a :class:`Record`."""
    time_ns, subject, header_block, payload = keys.unpack_msg(record)
    return Record(seq, time_ns, subject, keys.decode_headers(header_block), payload)


class ReadOnlyEnv:
    """An LMDB environment written by jetmq, opened read-only (schema checked)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._env = lmdb.open(
                self.path,
                max_dbs=len(keys.ALL_DBS) + 4,
                max_readers=READ_MAX_READERS,
                readonly=True,
                readahead=False,
                lock=True,
            )
        except lmdb.Error as exc:
            detail = str(exc).removeprefix(f"{self.path}: ")
            raise StoreOpenError(f"cannot open the store in {self.path}: {detail}") from exc
        self._closed = False
        try:
            self.dbs: dict[bytes, Any] = {
                name: self._env.open_db(name, create=False) for name in keys.ALL_DBS
            }
            with self._env.begin() as txn:
                raw = txn.get(keys.META_SCHEMA, db=self.dbs[keys.DB_META])
        except lmdb.Error as exc:
            self._env.close()
            raise StoreOpenError(f"cannot open the store in {self.path}: {exc}") from exc
        if raw is None or keys.read_u32(raw) != keys.SCHEMA_VERSION:
            self._env.close()
            raise SchemaError("store schema missing or not the version this reader understands")

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A read transaction (a snapshot); short, from any thread."""
        if self._closed:
            raise StoreClosedError("store is closed")
        txn = self._env.begin(buffers=False)
        try:
            yield txn
        finally:
            txn.abort()

    def streams(self) -> dict[str, int]:
        """Every stream's name and sid."""
        out: dict[str, int] = {}
        with self.read() as txn:
            for k, v in txn.cursor(db=self.dbs[keys.DB_STREAMS]).iternext():
                sid, _, _ = keys.unpack_named_record(bytes(v), keys.STREAM_RECORD_VERSION)
                out[bytes(k).decode()] = sid
        return out

    def messages(self, sid: int, start: int = 1, limit: int = keys.MAX_U64) -> list[Record]:
        """At most ``limit`` messages of stream ``sid`` from seq ``start`` on, in seq
        order, from one read transaction."""
        out: list[Record] = []
        prefix = keys.sid_prefix(sid)
        with self.read() as txn:
            cur = txn.cursor(db=self.dbs[keys.DB_MSGS])
            if not cur.set_range(keys.msg_key(sid, start)):
                return out
            for k, v in cur.iternext():
                if len(out) >= limit or not k.startswith(prefix):
                    break
                out.append(decode_record(keys.split_msg_key(k)[1], v))
        return out

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()

    def __enter__(self) -> ReadOnlyEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
