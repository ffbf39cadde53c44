"""Stored message records -> ``pyarrow.RecordBatch`` rows of the source's schema.

A chunk of ``(key, record)`` pairs (:func:`pipeline.storeread.scan`) is decoded column
by column with numpy (see :func:`to_batch`). Record layout: ``store.keys`` (message
record version 1).

Columns: see :data:`SCHEMA_DDL`. ``topic`` is the ``Mqtt-Topic`` header when the broker kept
it (a JSON string in its own streams, the topic as is where capture stored it), else the subject converted back (:func:`subject_to_topic`); ``qos``
and ``retain`` come from ``Mqtt-Qos`` / ``Mqtt-Retain`` and are null without them;
``headers`` maps each header name to its FIRST value (what nats.go's ``Header.Get``
returns; NATS allows a name more than once); ``ts`` is the stored time in microseconds.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pipeline.subjects import subject_to_topic
from store import keys

SCHEMA_DDL: Final = (
    "stream string, seq long, subject string, topic string, ts timestamp,"
    " headers map<string,string>, payload binary, qos int, retain boolean"
)
# ``includeHeaders=false``: the same without the ``headers`` column (a map costs Spark about
# a third of the transfer: docs/benchmarks.md).
SCHEMA_DDL_NO_HEADERS: Final = SCHEMA_DDL.replace(" headers map<string,string>,", "")
COLUMNS: Final = ("stream", "seq", "subject", "topic", "ts", "headers", "payload", "qos", "retain")

_HEAD = struct.Struct(">BQH")  # version, time, subject length (store.keys message record)
_HEAD_SIZE: Final = _HEAD.size
_U32 = struct.Struct(">I")
_VERSION: Final = keys.MSG_RECORD_VERSION


def _index(first: int, stop: int) -> Any:
    import numpy as np

    return np.arange(first, stop, dtype=np.int64)


_TIME_IDX: Final = _index(1, 9)  # the u64 time after the version byte
_U32_IDX: Final = _index(0, 4)


@dataclass(frozen=True)
class RowFilter:
    """What ``read()`` keeps besides the seq range: a subject predicate and a time range
    (ns, inclusive). Everything None keeps every row."""

    subject: Callable[[str], bool] | None = None
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None

    @property
    def empty(self) -> bool:
        return self.subject is None and self.ts_min_ns is None and self.ts_max_ns is None


NO_FILTER: Final = RowFilter()


def arrow_schema(include_headers: bool = True) -> Any:
    import pyarrow as pa

    fields = [
        pa.field("stream", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("subject", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("payload", pa.binary()),
        pa.field("qos", pa.int32()),
        pa.field("retain", pa.bool_()),
    ]
    if not include_headers:
        fields = [f for f in fields if f.name != "headers"]
    return pa.schema(fields)


def _mqtt_topic(value: str) -> str:
    """The topic in an ``Mqtt-Topic`` header: a JSON string in the broker's own streams
    (``broker/persist/records.py``), the topic itself where capture stored it."""
    if value[:1] == '"':
        try:
            topic = json.loads(value)
        except ValueError:
            return value
        return topic if isinstance(topic, str) else value
    return value


def to_batch(
    stream: str,
    rows: Sequence[tuple[bytes, bytes]],
    *,
    include_headers: bool = True,
    keep: RowFilter = NO_FILTER,
) -> Any:
    """The rows of ``rows`` that ``keep`` accepts as one RecordBatch (None if none).

    The fixed-layout fields are decoded for the whole chunk at once with numpy over the
    records packed into one Arrow buffer (time, subject length, header length, then
    subject and payload gathered by offset); only records with a header block go
    through Python, one by one. Subjects repeat, so topics and the subject filter are
    computed once per distinct subject."""
    import numpy as np

    if not rows:
        return None
    seqs = np.frombuffer(b"".join([r[0] for r in rows]), dtype=">u8")[1::2].astype(np.int64)
    return records_batch(
        stream, seqs, [r[1] for r in rows], include_headers=include_headers, keep=keep
    )


def records_batch(
    stream: str,
    seqs: Any,
    vals: list[bytes] | None,
    *,
    raw: Any = None,
    include_headers: bool = True,
    keep: RowFilter = NO_FILTER,
) -> Any:
    """:func:`to_batch` of records whose seqs are ``seqs`` (numpy int64): ``vals``, or
    ``raw``, the records as one Arrow binary array (a packed network answer, no copy)."""
    import numpy as np
    import pyarrow as pa

    if raw is None:
        raw = pa.array(vals, pa.binary())  # one buffer for the numpy views
    n = len(raw)
    if not n:
        return None
    if raw.offset:  # (buffers are read from 0 below)
        raw = pa.concat_arrays([raw])
    bufs = raw.buffers()
    offs = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts, ends = offs[:-1], offs[1:]
    if bool((ends - starts < _HEAD_SIZE + 4).any()):
        raise keys.RecordError("message record too short")
    versions = data[starts]
    if bool((versions != _VERSION).any()):
        bad = int(versions[versions != _VERSION][0])
        raise keys.RecordError(f"unknown message record version {bad}")
    times_ns = data[starts[:, None] + _TIME_IDX].view(">u8").reshape(n).astype(np.int64)
    slen = (data[starts + 9].astype(np.int64) << 8) | data[starts + 10]
    sstart = starts + _HEAD_SIZE
    send = sstart + slen
    if bool((send + 4 > ends).any()):
        raise keys.RecordError("message record subject overruns the record")
    hlen = data[send[:, None] + _U32_IDX].view(">u4").reshape(n).astype(np.int64)
    pstart = send + 4 + hlen
    if bool((pstart > ends).any()):
        raise keys.RecordError("message record header block overruns the record")
    # (offsets within each record from here on)
    send = _HEAD_SIZE + slen
    pstart = send + 4 + hlen
    subjects, payloads = _slice_fields(raw, vals, slen, hlen, send, pstart)

    enc = subjects.dictionary_encode()
    distinct = enc.dictionary.to_pylist()
    topics = pa.array([subject_to_topic(x) for x in distinct], pa.string()).take(enc.indices)
    mask = None
    if keep.subject is not None:
        want = keep.subject
        mask = np.asarray(pa.array([want(x) for x in distinct], pa.bool_()).take(enc.indices))
    if keep.ts_min_ns is not None or keep.ts_max_ns is not None:
        lo = keep.ts_min_ns if keep.ts_min_ns is not None else -(1 << 63)
        hi = keep.ts_max_ns if keep.ts_max_ns is not None else (1 << 63) - 1
        in_time = (times_ns >= lo) & (times_ns <= hi)
        mask = in_time if mask is None else mask & in_time

    schema = arrow_schema(include_headers)
    with_headers = np.nonzero(hlen)[0]
    if len(with_headers):
        topic_list = topics.to_pylist()
        qos: list[int | None] = [None] * n
        retain: list[bool | None] = [None] * n
        counts = np.zeros(n, np.int32)
        h_keys: list[str] = []
        h_vals: list[str] = []
        if vals is None:
            vals = raw.to_pylist()
        for i in with_headers.tolist():
            block = vals[i][send[i] + 4 : pstart[i]]
            seen: set[str] = set()
            for name, value in keys.decode_headers(block):
                if name in seen:
                    continue
                seen.add(name)
                if name == "Mqtt-Topic":
                    topic_list[i] = _mqtt_topic(value)
                elif name == "Mqtt-Qos":
                    qos[i] = int(value) if value in ("0", "1", "2") else None
                elif name == "Mqtt-Retain":
                    retain[i] = value == "1"
                if include_headers:
                    h_keys.append(name)
                    h_vals.append(value)
                    counts[i] += 1
        topics = pa.array(topic_list, pa.string())
        qos_arr = pa.array(qos, pa.int32())
        retain_arr = pa.array(retain, pa.bool_())
        h_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(counts, out=h_offsets[1:])
    else:
        qos_arr = pa.nulls(n, pa.int32())
        retain_arr = pa.nulls(n, pa.bool_())
        h_offsets = np.zeros(n + 1, np.int32)
        h_keys, h_vals = [], []
    columns = [
        pa.repeat(pa.scalar(stream, pa.string()), n),
        pa.array(seqs, pa.int64()),
        subjects,
        topics,
        pa.array(times_ns // 1000, pa.int64()).cast(schema.field("ts").type),
        payloads,
        qos_arr,
        retain_arr,
    ]
    if include_headers:
        headers = pa.MapArray.from_arrays(
            pa.array(h_offsets, pa.int32()),
            pa.array(h_keys, pa.string()),
            pa.array(h_vals, pa.string()),
            type=schema.field("headers").type,
        )
        columns.insert(5, headers)
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    if mask is not None:
        if not bool(mask.any()):
            return None
        batch = batch.filter(pa.array(mask, pa.bool_()))
    return batch


_MAX_SHAPES: Final = 32  # distinct (subject length, header length) pairs sliced in Arrow
_TO_END: Final = (1 << 31) - 1


def _slice_fields(
    raw: Any, vals: list[bytes] | None, slen: Any, hlen: Any, send: Any, pstart: Any
) -> tuple[Any, Any]:
    """The subject (string) and payload (binary) arrays of the records in ``raw``.

    Records sharing a subject length and a header length share where both fields are,
    so each such group is cut by two Arrow ``binary_slice`` calls (in C); the groups are
    put back in record order with one ``take``. A chunk with too many shapes (unique
    subjects of many lengths) is sliced in Python instead, a memcpy per value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    shape = (slen << 32) | hlen
    uniq, inv = np.unique(shape, return_inverse=True)
    if len(uniq) > _MAX_SHAPES:
        if vals is None:
            vals = raw.to_pylist()
        subjects = pa.array(
            [v[_HEAD_SIZE:b] for v, b in zip(vals, send.tolist(), strict=True)], pa.binary()
        )
        payloads = pa.array(
            [v[p:] for v, p in zip(vals, pstart.tolist(), strict=True)], pa.binary()
        )
        return subjects.cast(pa.string()), payloads
    if len(uniq) == 1:
        sl = int(uniq[0] >> 32)
        p0 = _HEAD_SIZE + sl + 4 + int(uniq[0] & 0xFFFFFFFF)
        return (
            pc.binary_slice(raw, _HEAD_SIZE, _HEAD_SIZE + sl).cast(pa.string()),
            pc.binary_slice(raw, p0, _TO_END),
        )
    order = np.argsort(inv, kind="stable")
    grouped = raw.take(pa.array(order))
    subj_parts = []
    pay_parts = []
    pos = 0
    for u, count in zip(uniq.tolist(), np.bincount(inv).tolist(), strict=True):
        part = grouped.slice(pos, count)
        pos += count
        sl = u >> 32
        subj_parts.append(pc.binary_slice(part, _HEAD_SIZE, _HEAD_SIZE + sl))
        pay_parts.append(pc.binary_slice(part, _HEAD_SIZE + sl + 4 + (u & 0xFFFFFFFF), _TO_END))
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    undo = pa.array(back)
    subjects = pa.concat_arrays(subj_parts).take(undo)
    payloads = pa.concat_arrays(pay_parts).take(undo)
    return subjects.cast(pa.string()), payloads
