"""Read-only access to a jetmq store for Spark tasks: the environment, stream metadata and
message ranges (layout from ``store.keys``; nothing here writes).

Rules (spec/jetstream.md §4.4):
- the environment is opened lazily in the process that reads (a Spark worker, the driver
  planning offsets) and cached per path in this module, never on a pickled object;
- ``readonly=True, lock=True``: the broker writes concurrently and LMDB's reader table
  (``lock.mdb``) is how it knows which pages we still look at; the writer takes its own
  ``jetmq.lock``, readers take none;
- read transactions are short: at most ``chunk`` records, then closed and reopened at
  the next key, so a long scan never pins old pages while the broker writes;
- the map is opened at :data:`READ_MAP_SIZE` (address space only, nothing is allocated):
  a reader never needs to follow the broker growing its map; should LMDB still report
  ``MapResizedError`` (a store larger than that), the environment is reopened.
"""

from __future__ import annotations

import json
import os
import threading
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from typing import Any, Final

import lmdb

from store import keys
from store.env import MAX_READERS

MAX_DBS: Final = len(keys.ALL_DBS) + 4
# Read-only mappings may be larger than the file: LMDB never touches pages past the last
# committed one. 1 TiB of address space lets a reader follow the broker's map growth
# without reopening (it reopens when a store is larger still).
READ_MAP_SIZE: Final = 1 << 40


_first = itemgetter(0)


class SourceError(ValueError):
    """The options name something that cannot be read: a directory without a jetmq
    store, a stream that does not exist, a store of another schema. The message says
    which and what to do."""


@dataclass(frozen=True)
class StreamMeta:
    """One stream as a reader plans it: identity and stored range (one snapshot)."""

    name: str
    sid: int
    first_seq: int
    last_seq: int
    messages: int
    subjects: tuple[str, ...]


class _Handle:
    __slots__ = ("dbs", "env")

    def __init__(self, env: Any, dbs: dict[bytes, Any]) -> None:
        self.env = env
        self.dbs = dbs


_LOCK = threading.Lock()
_HANDLES: dict[str, _Handle] = {}


def _open(path: str) -> _Handle:
    data = os.path.join(path, "data.mdb")
    if not os.path.isdir(path):
        raise SourceError(f"jetmq source: data directory {path!r} does not exist")
    if not os.path.isfile(data):
        raise SourceError(
            f"jetmq source: {path!r} holds no jetmq store (no data.mdb); pass the broker's"
            " storage.data_dir as path"
        )
    try:
        env = lmdb.open(
            path,
            map_size=READ_MAP_SIZE,
            max_readers=MAX_READERS,  # the broker's: the first opener sizes the reader table
            readonly=True,
            lock=True,
            max_dbs=MAX_DBS,
            readahead=False,
            subdir=True,
        )
    except lmdb.Error as exc:
        raise SourceError(f"jetmq source: cannot open the store in {path!r}: {exc}") from exc
    try:
        dbs = {name: env.open_db(name, create=False) for name in keys.ALL_DBS}
        with env.begin() as txn:
            raw = txn.get(keys.META_SCHEMA, db=dbs[keys.DB_META])
    except lmdb.Error as exc:
        env.close()
        raise SourceError(f"jetmq source: {path!r} is not a jetmq store: {exc}") from exc
    version = keys.read_u32(raw) if raw is not None else 0
    if version != keys.SCHEMA_VERSION:
        env.close()
        raise SourceError(
            f"jetmq source: the store in {path!r} has schema {version}; this reader"
            f" understands {keys.SCHEMA_VERSION} (start the matching jetmq once to migrate)"
        )
    return _Handle(env, dbs)


def handle(path: str) -> _Handle:
    """The cached read-only environment of ``path`` (opened on first use)."""
    path = os.path.abspath(path)
    with _LOCK:
        h = _HANDLES.get(path)
        if h is None:
            h = _HANDLES[path] = _open(path)
        return h


def _reopen(path: str, old: _Handle) -> _Handle:
    path = os.path.abspath(path)
    with _LOCK:
        if _HANDLES.get(path) is old:
            del _HANDLES[path]
            old.env.close()
    return handle(path)


@contextmanager
def read_txn(path: str) -> Iterator[tuple[Any, dict[bytes, Any]]]:
    """A short read transaction on the store at ``path`` and its named databases."""
    h = handle(path)
    for _ in range(3):
        try:
            txn = h.env.begin(buffers=False)
            break
        except lmdb.MapResizedError:
            h = _reopen(path, h)
    else:
        txn = h.env.begin(buffers=False)
    try:
        yield txn, h.dbs
    finally:
        txn.abort()


def close_all() -> None:
    """Close every cached environment (tests; a worker process ending)."""
    with _LOCK:
        for h in _HANDLES.values():
            h.env.close()
        _HANDLES.clear()


def is_user_stream(name: str) -> bool:
    """Streams a reader takes by default: not the broker's own ``$MQTT_*`` state."""
    return not name.startswith("$")


def list_streams(path: str) -> dict[str, StreamMeta]:
    """Every stream of the store with its stored range, from one read transaction."""
    out: dict[str, StreamMeta] = {}
    with read_txn(path) as (txn, dbs):
        sstate = dbs[keys.DB_SSTATE]
        for k, v in txn.cursor(db=dbs[keys.DB_STREAMS]).iternext():
            name = bytes(k).decode()
            sid, _, cfg_json = keys.unpack_named_record(bytes(v), keys.STREAM_RECORD_VERSION)
            raw = txn.get(keys.u64(sid), db=sstate)
            if raw is None:  # created in the same instant; nothing stored yet
                first, last, n = 1, 0, 0
            else:
                first, last, n, *_ = keys.unpack_stream_state(bytes(raw))
            try:
                subjects = tuple(json.loads(cfg_json).get("subjects") or ())
            except (ValueError, AttributeError):
                subjects = ()
            out[name] = StreamMeta(name, sid, first, last, n, subjects)
    return out


def count_stored(path: str, sid: int, first: int, last: int, chunk: int = 65536) -> int:
    """How many messages of stream ``sid`` are stored with ``first <= seq <= last`` (keys
    only, in short transactions); ``last - first + 1`` minus this is the retention gap."""
    n = 0
    nxt = first
    prefix = keys.sid_prefix(sid)
    while nxt <= last:
        seen = 0
        with read_txn(path) as (txn, dbs):
            cur = txn.cursor(db=dbs[keys.DB_MSGS])
            if not cur.set_range(keys.msg_key(sid, nxt)):
                return n
            for k in cur.iternext(keys=True, values=False):
                if k[:8] != prefix:
                    return n
                seq = keys.read_u64(k, 8)
                if seq > last:
                    return n
                n += 1
                seen += 1
                nxt = seq + 1
                if seen >= chunk:
                    break
            else:
                return n
    return n


def scan(
    path: str, sid: int, first: int, last: int, chunk: int
) -> Iterator[list[tuple[bytes, bytes]]]:
    """The ``(key, record)`` pairs of stream ``sid`` with ``first <= seq <= last`` in
    sequence order, ``chunk`` at a time, each chunk from its own short transaction.
    Missing sequences (retention, deletes) are simply not there."""
    if first > last:
        return
    # Keys of a higher sid sort after end_key too: one comparison ends the range.
    end_key = keys.msg_key(sid, last)
    start_key = keys.msg_key(sid, first)
    while True:
        with read_txn(path) as (txn, dbs):
            cur = txn.cursor(db=dbs[keys.DB_MSGS])
            # islice pulls the records in C; the range end is cut after, by bisection
            rows = list(islice(cur.iternext(), chunk)) if cur.set_range(start_key) else []
        full = len(rows) == chunk
        if rows and rows[-1][0] > end_key:
            del rows[bisect_right(rows, end_key, key=_first) :]
            full = False
        if rows:
            yield rows
        if not full:
            return
        seq = keys.read_u64(rows[-1][0], 8)
        if seq >= last:
            return
        start_key = keys.msg_key(sid, seq + 1)
