"""The jetmq packed DIRECT.GET (an extension; docs/jetstream.md "Packed direct get"): a
batch of stored messages in ONE PUBLISH, for bulk readers (the Spark source's ``url=``).

Asked by a DIRECT.GET request (``$JS/API/DIRECT/GET/<stream>``, so the same ACL; any
user stream, ``allow_direct`` or not: a consumer could read the same) carrying the user
property ``Jetmq-Pack: 1`` and a body ``{"seq": first, "batch": n, "up_to_seq": last?,
"max_bytes": m?}``. A NATS client cannot
send MQTT user properties, so nothing changes for it.

The answer is one PUBLISH whose payload is ``u32 n``, then the ``n`` seqs (``u64`` each),
then the ``n`` record lengths (``u32`` each), then the ``n`` records back to back (all
integers big-endian), each the stored message record (``store.keys`` message record,
version 1: ``u8 1``, ``u64 time ns``, ``u16 subject length``, subject, ``u32 header
length``, NATS header block, payload), in seq order (the tables let a reader cut the
records without a per-record loop: one Arrow binary array), with the one user
property ``Jetmq-Pack`` (the record count); then the empty ``204 EOB`` status with
``Nats-Last-Sequence`` (the last seq sent, or the seq before ``seq`` when none). Records come from ``seq`` on, at most ``batch`` of them, none
past ``up_to_seq``, and at most ``max_bytes`` bytes of payload (default 1 MiB, at most
16 MiB; one record is always sent, however large). Missing sequences are simply absent.
Refusals: ``408 Bad Request`` (no ``seq`` or ``batch``; the usual 408s of a body that is
not JSON), ``503 No Responders`` (no such stream, or a ``$MQTT_*`` one).

Read from one read-only store transaction in the request's worker thread, never on the
trio thread (the records pulled by the cursor in C, values only: a range without gaps
needs no keys; the byte bound cut after by bisection: about 0.33 us a record, 0.56 with
(key, value) pairs, 2.2 with a Python loop).
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from itertools import accumulate, islice
from typing import Any, Final

from store import Store, keys
from store.ops import Headers

PACK_PROPERTY: Final = "Jetmq-Pack"
DEFAULT_PACK_BYTES: Final = 1 << 20
MAX_PACK_BYTES: Final = 16 << 20
_U32 = struct.Struct(">I")
_MAX_RECORDS: Final = 1 << 20  # records read per request at most, whatever batch says
_U32_ITEM: Final = "I" if array("I").itemsize == 4 else "L"  # ("Q" is always 8 bytes)
_SWAP: Final = sys.byteorder == "little"  # array items are native, the wire big-endian

Answer = tuple[bytes, Headers]


def wants_pack(user_properties: Headers) -> bool:
    """Whether a request's user properties ask for the packed form."""
    return any(k == PACK_PROPERTY and v == "1" for k, v in user_properties)


def _status(code: int, description: str) -> list[Answer]:
    return [(b"", (("Status", str(code)), ("Description", description)))]


def packed_get(st: Store, stream: str, req: dict[str, Any]) -> list[Answer]:
    """The packed answer to ``req`` (already parsed): ``408 Bad Request`` without ``seq``
    >= 1 and ``batch`` >= 1, ``503 No Responders`` for a stream that does not exist."""
    first, batch = req.get("seq", 0), req.get("batch", 0)
    if not first or not batch:
        return _status(408, "Bad Request")
    up_to = min(req.get("up_to_seq") or keys.MAX_SEQ, keys.MAX_SEQ)
    limit = min(req.get("max_bytes") or DEFAULT_PACK_BYTES, MAX_PACK_BYTES)
    if up_to < first:
        return _answer(b"\0\0\0\0", 0, first - 1)
    env = st.env
    with env.read() as txn:
        raw = txn.get(stream.encode(), db=env.dbs[keys.DB_STREAMS])
        if raw is None:
            return _status(503, "No Responders")
        sid, _, _ = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)
        cur = txn.cursor(db=env.dbs[keys.DB_MSGS])
        first_key = keys.msg_key(sid, first)
        end_key = keys.msg_key(sid, up_to)  # (keys of a higher sid sort after it too)
        seqs, vals = _read(cur, first_key, end_key, min(batch, up_to - first + 1, _MAX_RECORDS))
    lens = array(_U32_ITEM, map(len, vals))
    n = len(vals)
    if sum(lens) + 12 * n > limit:  # (else all of them: no running sums to build)
        sizes = list(accumulate(lens))
        n = bisect_right(range(n), limit, key=lambda i: sizes[i] + 12 * (i + 1))
        n = max(n, 1) if vals else 0
    del seqs[n:], lens[n:], vals[n:]
    last = seqs[-1] if n else first - 1
    if _SWAP:
        seqs.byteswap()
        lens.byteswap()
    vals[:0] = (_U32.pack(n), seqs.tobytes(), lens.tobytes())  # (the head, then the records)
    payload = b"".join(vals)
    return _answer(payload, n, last)


def _read(cur: Any, first_key: bytes, end_key: bytes, most: int) -> tuple[array[int], list[bytes]]:
    """The seqs and records of the keys ``first_key..end_key``, at most ``most``.

    The values are pulled by the cursor in C (keys not asked for: a tuple and a key per
    record cost as much again); when the last one read is the ``len(vals)``-th seq
    from the first (no gap, nothing past the end), the seqs are that range. Else the keys
    are read in a second pass of the same transaction and the range end cut by bisection."""
    if not cur.set_range(first_key):
        return array("Q"), []
    lo_key = cur.key()
    vals = list(islice(cur.iternext(keys=False, values=True), most))
    hi_key = cur.key()
    lo = int.from_bytes(lo_key[8:], "big")
    hi = int.from_bytes(hi_key[8:], "big")
    if hi_key <= end_key and hi - lo + 1 == len(vals):
        return array("Q", range(lo, hi + 1)), vals
    cur.set_range(first_key)
    ks = list(islice(cur.iternext(keys=True, values=False), len(vals)))
    del ks[bisect_right(ks, end_key) :], vals[len(ks) :]
    both = array("Q")
    both.frombytes(b"".join(ks))  # (sid, seq) pairs, big-endian
    seqs = both[1::2]
    if _SWAP:
        seqs.byteswap()
    return seqs, vals


def _answer(payload: bytes, count: int, last: int) -> list[Answer]:
    # One user property on the big PUBLISH (paho copies the rest of a packet per property)
    props: Headers = ((PACK_PROPERTY, str(count)),)
    eob: Headers = (("Status", "204"), ("Description", "EOB"), ("Nats-Last-Sequence", str(last)))
    return [(payload, props), (b"", eob)]
