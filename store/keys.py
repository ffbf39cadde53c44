"""The on-disk layout of the jetmq LMDB environment: every database, key and record.

This module is the only place that packs and unpacks keys and records. ``pipeline``
(the Spark reader) imports it; nothing else should know these byte layouts.

All integers are unsigned, big-endian and fixed width, so LMDB's bytewise key order
is numeric order. ``u8``/``u16``/``u32``/``u64`` are 1/2/4/8 bytes. Strings are UTF-8.
``sid`` is a stream id (u64, allocated from ``meta/next_id``, never reused); ``cid`` is
a consumer id from the same counter. Times are Unix nanoseconds (u64), 0 = no time.

+---------------+--------------------------------------+--------------------------------------------+
| database      | key                                  | value                                      |
+===============+======================================+============================================+
| ``meta``      | ``b"schema"``                        | u32 schema version (``SCHEMA_VERSION``)    |
|               | ``b"next_id"``                       | u64 next stream/consumer id to hand out    |
|               | ``b"sweep/"``, u64 id                | empty: a deleted stream whose data under   |
|               |                                      | this sid (or a deleted consumer whose      |
|               |                                      | ``pending`` entries under this cid) is     |
|               |                                      | still being removed (in slices; resumed    |
|               |                                      | when the store opens; ids are unique)      |
|               | ``b"recheck/"``, u64 sid             | u64 seq: an interest stream                |
|               |                                      | whose messages from seq on are still to be |
|               |                                      | checked after a consumer was deleted (in   |
|               |                                      | slices; resumed when the store opens)      |
|               | ``b"purge/"``, u64 sid, u64 purge id | a purge still going on, in slices (resumed |
|               |                                      | when the store opens): u8 version (1), u8  |
|               |                                      | filter kind (0 none, 1 literal subject, 2  |
|               |                                      | wildcard), u8 consumers move past it (0/1),|
|               |                                      | u64 next seq to look at, u64 bound (seqs   |
|               |                                      | below it), u64 compact-to seq (0 = none),  |
|               |                                      | then the filter (UTF-8) to the end         |
|               | ``b"trim/"``, u64 sid                | u64 seq: a stream update lowered limits    |
|               |                                      | and the excess is still being removed (in  |
|               |                                      | slices; resumed when the store opens); the |
|               |                                      | walk for the per-subject limit goes on     |
|               |                                      | from seq (0: that part is done)            |
+---------------+--------------------------------------+--------------------------------------------+
| ``streams``   | stream name (UTF-8)                  | stream record: u8 version (1), u64 sid,    |
|               |                                      | u64 created time, then the StreamConfig    |
|               |                                      | as its wire JSON (UTF-8) to the end        |
+---------------+--------------------------------------+--------------------------------------------+
| ``sstate``    | u64 sid                              | stream state: u8 version (1), then u64     |
|               |                                      | first seq, last seq, messages, bytes,      |
|               |                                      | first time, last time, number of distinct  |
|               |                                      | subjects                                   |
+---------------+--------------------------------------+--------------------------------------------+
| ``msgs``      | u64 sid, u64 seq                     | message record version 1: u8 version (1),  |
|               |                                      | u64 time, u16 subject length, subject,     |
|               |                                      | u32 header length, header block (the NATS  |
|               |                                      | ``NATS/1.0\\r\\n`` text form; length 0 =   |
|               |                                      | no headers), then the payload to the end   |
+---------------+--------------------------------------+--------------------------------------------+
| ``subjects``  | u64 sid, u64 epoch (= seq >> 8, i.e. | empty (index: the messages of one subject  |
|               | 256 sequences per epoch), subject,   | within one epoch in sequence order; epochs |
|               | byte 0x00, u64 seq                   | in sequence order; subjects never hold     |
|               |                                      | 0x00, so the 0x00 ends the subject)        |
+---------------+--------------------------------------+--------------------------------------------+
| ``subjcount`` | u64 sid, subject                     | subject record: u64 number of stored       |
|               |                                      | messages on the subject, u64 first stored  |
|               |                                      | seq, u64 last stored seq (a subject with   |
|               |                                      | no stored message has no record)           |
+---------------+--------------------------------------+--------------------------------------------+
| ``dedupe``    | u64 sid, msg id (UTF-8); an id of    | u64 seq, u64 time of the original message  |
|               | over 256 bytes as byte 0xFF (never   |                                            |
|               | in UTF-8) and the id's SHA-256       |                                            |
|               | (LMDB keys end at 511 bytes)         |                                            |
| ``dedupeseq`` | u64 sid, u64 seq                     | msg id (UTF-8): eviction order of dedupe   |
+---------------+--------------------------------------+--------------------------------------------+
| ``consumers`` | u64 sid, consumer name (UTF-8)       | consumer record: u8 version (1), u64 cid,  |
|               |                                      | u64 created time, then the ConsumerConfig  |
|               |                                      | as its wire JSON                           |
+---------------+--------------------------------------+--------------------------------------------+
| ``cstate``    | u64 cid                              | consumer state: u8 version (1), then u64   |
|               |                                      | delivered consumer seq, delivered stream   |
|               |                                      | seq, ack floor consumer seq, ack floor     |
|               |                                      | stream seq, last delivery time, last ack   |
|               |                                      | time, last-per-subject end seq (0 = none)  |
+---------------+--------------------------------------+--------------------------------------------+
| ``pending``   | u64 cid, u64 stream seq              | pending ack: u64 consumer seq of its first |
|               |                                      | delivery (the ack floor's), u32 delivery   |
|               |                                      | count, u64 ack deadline, u8 flags (bit 0:  |
|               |                                      | max deliveries reached)                    |
+---------------+--------------------------------------+--------------------------------------------+

Why the ``subjects`` index leads with the epoch: a commit stores messages with
neighbouring sequences, so all its index keys fall into one or two epochs and dirty a few
leaf pages, however many distinct subjects it holds (keyed subject-first, as in schema 1,
a commit with 64 subjects dirtied about 64 leaf pages). A scan of one subject visits only
the epochs from its first to its last stored seq (from ``subjcount``), one seek per epoch;
last-by-subject is a point lookup in ``subjcount``.

Readers must treat an unknown record version as an error, never guess. A schema
change bumps ``SCHEMA_VERSION`` and adds a migration in ``store.env`` (which says what
earlier schemas held).

"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Final, NamedTuple

from store.failures import RecordError as RecordError
from store.headerblock import decode_headers as decode_headers
from store.headerblock import encode_headers as encode_headers

SCHEMA_VERSION: Final = 2

# 256 sequences per index epoch. Measured on the raw index (64 one-subject-each inserts
# per commit): leaf+branch+meta pages written per commit were 76 keyed subject-first,
# 35 / 12.6 / 6.5 / 6.0 / 6.3 with 4096 / 1024 / 256 / 128 / 64 sequences per epoch;
# smaller epochs cost more seeks when scanning a sparse subject (see store/DESIGN.md).
EPOCH_SHIFT: Final = 8

DB_META: Final = b"meta"
DB_STREAMS: Final = b"streams"
DB_SSTATE: Final = b"sstate"
DB_MSGS: Final = b"msgs"
DB_SUBJECTS: Final = b"subjects"
DB_SUBJCOUNT: Final = b"subjcount"
DB_DEDUPE: Final = b"dedupe"
DB_DEDUPESEQ: Final = b"dedupeseq"
DB_CONSUMERS: Final = b"consumers"
DB_CSTATE: Final = b"cstate"
DB_PENDING: Final = b"pending"

ALL_DBS: Final = (
    DB_META,
    DB_STREAMS,
    DB_SSTATE,
    DB_MSGS,
    DB_SUBJECTS,
    DB_SUBJCOUNT,
    DB_DEDUPE,
    DB_DEDUPESEQ,
    DB_CONSUMERS,
    DB_CSTATE,
    DB_PENDING,
)

META_SCHEMA: Final = b"schema"
META_NEXT_ID: Final = b"next_id"
META_SWEEP_PREFIX: Final = b"sweep/"
META_RECHECK_PREFIX: Final = b"recheck/"
META_PURGE_PREFIX: Final = b"purge/"
META_TRIM_PREFIX: Final = b"trim/"
PURGE_RECORD_VERSION: Final = 1

MSG_RECORD_VERSION: Final = 1
STREAM_RECORD_VERSION: Final = 1
STATE_RECORD_VERSION: Final = 1
CONSUMER_RECORD_VERSION: Final = 1

_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_U64X2: Final = struct.Struct(">QQ")
_U64X3: Final = struct.Struct(">QQQ")
_MSG_HEAD: Final = struct.Struct(">BQH")  # version, time, subject length
MSG_RECORD_OVERHEAD: Final = _MSG_HEAD.size + 4  # a message record's bytes besides its contents
_REC_HEAD: Final = struct.Struct(">BQQ")  # version, id, created
_SSTATE: Final = struct.Struct(">B7Q")
_CSTATE: Final = struct.Struct(">B7Q")
_PENDING: Final = struct.Struct(">QIQB")
_PURGE: Final = struct.Struct(">BBBQQQ")  # version, filter kind, floor, start, below, compact-to

MAX_U64: Final = (1 << 64) - 1

# The writer's hot path calls these bound ``struct`` methods directly (no Python frame):
# the same bytes as msg_key(sid, seq) and pack_subject_record(count, first, last).
pack_msg_key: Final = _U64X2.pack
pack_subject_counts: Final = _U64X3.pack


def u32(n: int) -> bytes:
    return _U32.pack(n)


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u32(b: bytes) -> int:
    return int(_U32.unpack(b)[0])


def read_u64(b: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(b, offset)[0])


# -- keys ------------------------------------------------------------------------------------


def msg_key(sid: int, seq: int) -> bytes:
    return _U64X2.pack(sid, seq)


def split_msg_key(key: bytes) -> tuple[int, int]:
    sid, seq = _U64X2.unpack(key)
    return int(sid), int(seq)


def sid_prefix(sid: int) -> bytes:
    return _U64.pack(sid)


def sweep_key(sid: int) -> bytes:
    return META_SWEEP_PREFIX + _U64.pack(sid)


def read_sweep_key(key: bytes) -> int | None:
    """The sid of a ``meta`` sweep record's key, or None for any other ``meta`` key."""
    return _read_sid_key(key, META_SWEEP_PREFIX)


def recheck_key(sid: int) -> bytes:
    return META_RECHECK_PREFIX + _U64.pack(sid)


def read_recheck_key(key: bytes) -> int | None:
    """The sid of a ``meta`` recheck record's key, or None for any other ``meta`` key."""
    return _read_sid_key(key, META_RECHECK_PREFIX)


def purge_key(sid: int, rid: int) -> bytes:
    return META_PURGE_PREFIX + _U64X2.pack(sid, rid)


def read_purge_key(key: bytes) -> tuple[int, int] | None:
    """``(sid, purge id)`` of a ``meta`` purge record's key, or None for any other key."""
    if len(key) != len(META_PURGE_PREFIX) + 16 or not key.startswith(META_PURGE_PREFIX):
        return None
    sid, rid = _U64X2.unpack_from(key, len(META_PURGE_PREFIX))
    return int(sid), int(rid)


def pack_purge_record(
    subject: str | None, wildcard: bool, floor: bool, start: int, below: int, compact_to: int
) -> bytes:
    """A purge as it stands between slices (``store.purgeplan.PurgePlan``)."""
    kind = 0 if subject is None else 2 if wildcard else 1
    head = _PURGE.pack(PURGE_RECORD_VERSION, kind, floor, start, below, compact_to)
    return head + subject.encode() if subject is not None else head


def unpack_purge_record(rec: bytes) -> tuple[str | None, bool, bool, int, int, int]:
    """``(subject, wildcard, floor, start, below, compact_to)`` of a purge record."""
    if len(rec) < _PURGE.size or rec[0] != PURGE_RECORD_VERSION:
        raise RecordError("unknown purge record version")
    _, kind, floor, start, below, compact = _PURGE.unpack_from(rec)
    if kind > 2:
        raise RecordError("damaged purge record")
    subject = bytes(rec[_PURGE.size :]).decode() if kind else None
    return subject, kind == 2, bool(floor), int(start), int(below), int(compact)


def purge_prefix(sid: int) -> bytes:
    """The start of every ``meta`` purge record of stream ``sid``."""
    return META_PURGE_PREFIX + _U64.pack(sid)


def trim_key(sid: int) -> bytes:
    return META_TRIM_PREFIX + _U64.pack(sid)


def read_trim_key(key: bytes) -> int | None:
    """The sid of a ``meta`` trim record's key, or None for any other ``meta`` key."""
    return _read_sid_key(key, META_TRIM_PREFIX)


def _read_sid_key(key: bytes, prefix: bytes) -> int | None:
    if len(key) != len(prefix) + 8 or not key.startswith(prefix):
        return None
    return int(_U64.unpack_from(key, len(prefix))[0])


def epoch_of(seq: int) -> int:
    """The ``subjects`` index epoch holding ``seq``."""
    return seq >> EPOCH_SHIFT


def subject_key(sid: int, subject: str, seq: int) -> bytes:
    return subject_index_key(sid, subject.encode(), seq)


def subject_prefix(sid: int, subject: str, epoch: int = 0) -> bytes:
    """Prefix of every ``subjects`` key of one exact subject in one epoch (ends with 0x00)."""
    return _U64X2.pack(sid, epoch) + subject.encode() + b"\x00"


def split_subject_key(key: bytes) -> tuple[int, str, int]:
    """``(sid, subject, seq)`` of a ``subjects`` key (the epoch follows from the seq)."""
    sid = read_u64(key)
    seq = read_u64(key, len(key) - 8)
    return sid, key[16:-9].decode(), seq


def subject_index_key(sid: int, subject: bytes, seq: int) -> bytes:
    """:func:`subject_key` with the subject already UTF-8, in one ``struct`` call (the
    packer of :func:`subject_packers`, shared per subject length)."""
    return _packers_of_length(len(subject))[0](sid, seq >> EPOCH_SHIFT, subject, seq)


class SubjectPackers(NamedTuple):
    """One subject's packers for the writer's hot path (built once per subject, cached by the
    stream): the same bytes as :func:`subject_index_key` and :func:`msg_record`, each in
    one ``struct`` call instead of several concatenations."""

    utf8: bytes
    count_key: bytes  # the subject's ``subjcount`` key
    # (sid, epoch, utf8, seq) -> the ``subjects`` key
    index_key: Callable[[int, int, bytes, int], bytes]
    # (MSG_RECORD_VERSION, time, len(utf8), utf8, len(header block)) -> the record up to
    # the header block; the record is that + header block + payload
    record_head: Callable[[int, int, int, bytes, int], bytes]


_new_tuple = tuple.__new__


@lru_cache(maxsize=1024)
def _packers_of_length(
    n: int,
) -> tuple[Callable[[int, int, bytes, int], bytes], Callable[[int, int, int, bytes, int], bytes]]:
    # Bound methods shared by every subject of this length.
    return struct.Struct(f">QQ{n}sxQ").pack, struct.Struct(f">BQH{n}sI").pack


def subject_packers(sid_prefix_: bytes, subject: bytes) -> SubjectPackers:
    """The packers of ``subject`` (UTF-8) in the stream whose :func:`sid_prefix` is given."""
    index, head = _packers_of_length(len(subject))
    # tuple.__new__: the NamedTuple without its Python-level __new__ (built per message for
    # the broker's unique subjects).
    return _new_tuple(SubjectPackers, (subject, sid_prefix_ + subject, index, head))


def subject_epoch_prefix(sid_prefix_: bytes, subject: bytes, epoch: int) -> bytes:
    """:func:`subject_prefix` from the stream's :func:`sid_prefix` and the UTF-8 subject."""
    return sid_prefix_ + _U64.pack(epoch) + subject + b"\x00"


def subject_sweep_prefix(sid_prefix_: bytes, epoch: int, subject_prefix_: bytes) -> bytes:
    """Prefix of the ``subjects`` keys of one epoch whose subject starts with the UTF-8
    ``subject_prefix_`` (any subject when it is empty)."""
    return sid_prefix_ + _U64.pack(epoch) + subject_prefix_


def subject_key_subject(key: bytes) -> bytes:
    """The UTF-8 subject of a ``subjects`` key."""
    return key[16:-9]


def subject_key_epoch_prefix(key: bytes) -> bytes:
    """The :func:`subject_epoch_prefix` a ``subjects`` key starts with (all but its seq)."""
    return key[:-8]


def subject_epoch_end(epoch_prefix: bytes) -> bytes:
    """The smallest key above every key under ``epoch_prefix`` (its final 0x00 as 0x01)."""
    return epoch_prefix[:-1] + b"\x01"


def subject_key_seq(key: bytes) -> int:
    """The seq of a ``subjects`` key (its last 8 bytes)."""
    return int(_U64.unpack_from(key, len(key) - 8)[0])


def subjcount_key(sid: int, subject: str) -> bytes:
    return _U64.pack(sid) + subject.encode()


def subjcount_subject(key: bytes) -> str:
    """The subject of a ``subjcount`` key."""
    return bytes(key[8:]).decode()


def pack_subject_record(count: int, first_seq: int, last_seq: int) -> bytes:
    return _U64X3.pack(count, first_seq, last_seq)


def unpack_subject_record(record: bytes) -> tuple[int, int, int]:
    """``(count, first_seq, last_seq)`` of a ``subjcount`` record."""
    if len(record) != _U64X3.size:
        raise RecordError("subject record has the wrong length")
    a, b, c = _U64X3.unpack(record)
    return int(a), int(b), int(c)


# The last seq a message may take: one more must still pack, as the first seq of the
# stream once that message is removed (u64 keys and state).
MAX_SEQ: Final = MAX_U64 - 1
MAX_PLAIN_MSG_ID: Final = 256  # longer ids are keyed by their hash (table above)


def dedupe_key(sid: int, msg_id: str) -> bytes:
    raw = msg_id.encode()
    if len(raw) > MAX_PLAIN_MSG_ID:
        return _U64.pack(sid) + b"\xff" + hashlib.sha256(raw).digest()
    return _U64.pack(sid) + raw


def pack_dedupe(seq: int, ts: int) -> bytes:
    return _U64X2.pack(seq, ts)


def unpack_dedupe(record: bytes) -> tuple[int, int]:
    """``(seq, time)`` of a ``dedupe`` record."""
    if len(record) != _U64X2.size:
        raise RecordError("dedupe record has the wrong length")
    seq, ts = _U64X2.unpack(record)
    return int(seq), int(ts)


def consumer_key(sid: int, name: str) -> bytes:
    return _U64.pack(sid) + name.encode()


def consumer_key_name(key: bytes) -> str:
    """The consumer name of a ``consumers`` key."""
    return bytes(key[8:]).decode()


def pending_key(cid: int, seq: int) -> bytes:
    return _U64X2.pack(cid, seq)


# -- records ---------------------------------------------------------------------------------


def pack_msg(time_ns: int, subject: str, header_block: bytes, payload: bytes) -> bytes:
    return msg_record(time_ns, subject.encode(), header_block, payload)


def msg_record(time_ns: int, subject: bytes, header_block: bytes, payload: bytes) -> bytes:
    """:func:`pack_msg` with the subject already UTF-8 (the writer's hot path)."""
    return b"".join(
        (
            _MSG_HEAD.pack(MSG_RECORD_VERSION, time_ns, len(subject)),
            subject,
            _U32.pack(len(header_block)),
            header_block,
            payload,
        )
    )


def _msg_head(record: bytes | memoryview) -> tuple[int, str, int, int]:
    """``(time_ns, subject, header block start, header block length)``, checked."""
    if len(record) < _MSG_HEAD.size + 4:
        raise RecordError("message record too short")
    version, time_ns, slen = _MSG_HEAD.unpack_from(record)
    if version != MSG_RECORD_VERSION:
        raise RecordError(f"unknown message record version {version}")
    pos = _MSG_HEAD.size + slen
    subject = bytes(record[_MSG_HEAD.size : pos]).decode()
    (hlen,) = _U32.unpack_from(record, pos)
    if pos + 4 + hlen > len(record):
        raise RecordError("message record header block overruns the record")
    return int(time_ns), subject, pos + 4, hlen


def unpack_msg(record: bytes) -> tuple[int, str, bytes, bytes]:
    """Return ``(time_ns, subject, header_block, payload)`` of a message record."""
    time_ns, subject, pos, hlen = _msg_head(record)
    return time_ns, subject, bytes(record[pos : pos + hlen]), bytes(record[pos + hlen :])


def unpack_msg_head(record: bytes | memoryview) -> tuple[int, str, bytes, int]:
    """``(time_ns, subject, header_block, payload length)`` without copying the payload
    (``record`` may be a memoryview of the map: only the pages of the head are read)."""
    time_ns, subject, pos, hlen = _msg_head(record)
    return time_ns, subject, bytes(record[pos : pos + hlen]), len(record) - pos - hlen


def msg_time(record: bytes) -> int:
    """Only the time of a message record (cheap; no decoding)."""
    version, time_ns, _ = _MSG_HEAD.unpack_from(record)
    if version != MSG_RECORD_VERSION:
        raise RecordError(f"unknown message record version {version}")
    return int(time_ns)


def msg_subject(record: bytes) -> str:
    return msg_subject_bytes(record).decode()


def msg_subject_bytes(record: bytes) -> bytes:
    """The subject of a message record, still UTF-8."""
    version, _, slen = _MSG_HEAD.unpack_from(record)
    if version != MSG_RECORD_VERSION:
        raise RecordError(f"unknown message record version {version}")
    return bytes(record[_MSG_HEAD.size : _MSG_HEAD.size + slen])


def pack_named_record(version: int, ident: int, created_ns: int, config_json: bytes) -> bytes:
    """Stream and consumer records: version, id, created time, config JSON."""
    return _REC_HEAD.pack(version, ident, created_ns) + config_json


def unpack_named_record(record: bytes, version: int) -> tuple[int, int, bytes]:
    """Return ``(id, created_ns, config_json)``."""
    v, ident, created = _REC_HEAD.unpack_from(record)
    if v != version:
        raise RecordError(f"unknown record version {v}")
    return int(ident), int(created), bytes(record[_REC_HEAD.size :])


def pack_stream_state(
    first_seq: int,
    last_seq: int,
    messages: int,
    nbytes: int,
    first_ts: int,
    last_ts: int,
    num_subjects: int,
) -> bytes:
    return _SSTATE.pack(
        STATE_RECORD_VERSION, first_seq, last_seq, messages, nbytes, first_ts, last_ts, num_subjects
    )


def unpack_stream_state(record: bytes) -> tuple[int, int, int, int, int, int, int]:
    v, *rest = _SSTATE.unpack(record)
    if v != STATE_RECORD_VERSION:
        raise RecordError(f"unknown stream state version {v}")
    a, b, c, d, e, f, g = (int(x) for x in rest)
    return a, b, c, d, e, f, g


def pack_consumer_state(
    delivered_cseq: int,
    delivered_sseq: int,
    ack_cseq: int,
    ack_sseq: int,
    last_delivered_ns: int,
    last_ack_ns: int,
    lps_end: int,
) -> bytes:
    return _CSTATE.pack(
        STATE_RECORD_VERSION,
        delivered_cseq,
        delivered_sseq,
        ack_cseq,
        ack_sseq,
        last_delivered_ns,
        last_ack_ns,
        lps_end,
    )


def unpack_consumer_state(record: bytes) -> tuple[int, int, int, int, int, int, int]:
    v, *rest = _CSTATE.unpack(record)
    if v != STATE_RECORD_VERSION:
        raise RecordError(f"unknown consumer state version {v}")
    a, b, c, d, e, f, g = (int(x) for x in rest)
    return a, b, c, d, e, f, g


PENDING_EXHAUSTED: Final = 1


def pack_pending(cseq: int, count: int, deadline_ns: int, flags: int) -> bytes:
    return _PENDING.pack(cseq, count, deadline_ns, flags)


def unpack_pending(record: bytes) -> tuple[int, int, int, int]:
    """Return ``(consumer_seq, delivery_count, deadline_ns, flags)``."""
    a, b, c, d = _PENDING.unpack(record)
    return int(a), int(b), int(c), int(d)


def msg_bytes(subject_len: int, header_len: int, payload_len: int) -> int:
    """Bytes a message counts for ``bytes``/``max_bytes``: nats-server's file-store formula.

    ``22 + len(subject) + len(payload) + 8``, plus ``4 + len(headers)`` when there are
    headers (spec §1.4, "Byte accounting").
    """
    n = 30 + subject_len + payload_len
    if header_len:
        n += 4 + header_len
    return n


def msg_subject_and_size(record: bytes) -> tuple[bytes, int]:
    """:func:`msg_subject_bytes` and :func:`record_bytes` of a record in one decode (the
    writer's removal path: :func:`msg_bytes` written out, a call less per removal)."""
    version, _, slen = _MSG_HEAD.unpack_from(record)
    if version != MSG_RECORD_VERSION:
        raise RecordError(f"unknown message record version {version}")
    end = _MSG_HEAD.size + slen
    (hlen,) = _U32.unpack_from(record, end)
    n = 30 + slen + len(record) - end - 4 - hlen  # 30 + slen + payload length
    return bytes(record[_MSG_HEAD.size : end]), n + 4 + hlen if hlen else n


def record_bytes(record: bytes) -> int:
    """:func:`msg_bytes` of a stored message record, without decoding it."""
    return msg_subject_and_size(record)[1]
