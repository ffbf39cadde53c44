"""The jetmq packed DIRECT.GET (an extension; docs/jetstream.md "Packed direct get"): a
batch of stored messages in ONE PUBLISH, for bulk readers (the Spark source's ``url=``).

Asked by a DIRECT.GET request (``$JS/API/DIRECT/GET/<stream>``, so the same ACL and the
same ``allow_direct`` rule) carrying the user property ``Jetmq-Pack: 1`` and a body
``{"seq": first, "batch": n, "up_to_seq": last?, "max_bytes": m?}``. A NATS client cannot
send MQTT user properties, so nothing changes for it.

The answer is one PUBLISH whose payload is the records, each ``u64 seq``, ``u32 length``
(big-endian) and ``length`` bytes of the stored message record (``store.keys`` message
record, version 1: ``u8 1``, ``u64 time ns``, ``u16 subject length``, subject, ``u32
header length``, NATS header block, payload), in seq order, with user properties
``Nats-Stream``, ``Jetmq-Pack`` (the record count), ``Nats-Last-Sequence`` (the last seq
in it, or the seq before ``seq`` when none); then the empty ``204 EOB`` status with
``Nats-Last-Sequence``. Records come from ``seq`` on, at most ``batch`` of them, none
past ``up_to_seq``, and at most ``max_bytes`` bytes of payload (default 1 MiB, at most
16 MiB; one record is always sent, however large). Missing sequences are simply absent.

Read from one read-only store transaction in the request's worker thread, never on the
trio thread; the records are copied once, into the payload.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from store import Store, keys
from store.ops import Headers

PACK_PROPERTY: Final = "Jetmq-Pack"
DEFAULT_PACK_BYTES: Final = 1 << 20
MAX_PACK_BYTES: Final = 16 << 20
_REC = struct.Struct(">QI")
_pack_rec = _REC.pack

Answer = tuple[bytes, Headers]


def wants_pack(user_properties: Headers) -> bool:
    """Whether a request's user properties ask for the packed form."""
    return any(k == PACK_PROPERTY and v == "1" for k, v in user_properties)


def packed_get(st: Store, stream: str, req: dict[str, Any]) -> list[Answer] | None:
    """The packed answer to ``req`` (already parsed), or None when the request is not a
    packed one's shape (``seq`` >= 1 and ``batch`` >= 1 required): the caller answers 408."""
    first, batch = req.get("seq", 0), req.get("batch", 0)
    if not first or not batch:
        return None
    up_to = req.get("up_to_seq") or keys.MAX_SEQ
    limit = min(req.get("max_bytes") or DEFAULT_PACK_BYTES, MAX_PACK_BYTES)
    parts: list[Any] = []
    size = 0
    last = first - 1
    env = st.env
    with env.read(buffers=True) as txn:
        raw = txn.get(stream.encode(), db=env.dbs[keys.DB_STREAMS])
        if raw is None:
            return None
        sid, _, _ = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)
        prefix = keys.sid_prefix(sid)
        cur = txn.cursor(db=env.dbs[keys.DB_MSGS])
        if cur.set_range(keys.msg_key(sid, first)):
            for k, v in cur.iternext():
                if k[:8] != prefix:
                    break
                seq = int.from_bytes(k[8:16], "big")
                if seq > up_to:
                    break
                n = len(v)
                if parts and size + n + 12 > limit:
                    break
                parts.append(_pack_rec(seq, n))
                parts.append(v)
                size += n + 12
                last = seq
                if len(parts) >= 2 * batch:
                    break
        payload = b"".join(parts)  # (inside the txn: the values are views of the map)
    count = len(parts) // 2
    props: Headers = (
        ("Nats-Stream", stream),
        (PACK_PROPERTY, str(count)),
        ("Nats-Last-Sequence", str(last)),
    )
    eob: Headers = (("Status", "204"), ("Description", "EOB"), ("Nats-Last-Sequence", str(last)))
    return [(payload, props), (b"", eob)]
