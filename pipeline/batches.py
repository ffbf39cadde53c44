"""Stored message records -> ``pyarrow.RecordBatch`` rows of the source's schema.

One pass over a chunk of ``(key, record)`` pairs (:func:`pipeline.storeread.scan`)
fills plain Python lists, one per column, that pyarrow turns into arrays in C. Record
layout: ``store.keys`` (message record version 1).

Columns: see :data:`SCHEMA_DDL`. ``topic`` is the ``Mqtt-Topic`` header when capture kept
it (a JSON string), else the subject converted back (:func:`subject_to_topic`); ``qos``
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
COLUMNS: Final = ("stream", "seq", "subject", "topic", "ts", "headers", "payload", "qos", "retain")

_HEAD = struct.Struct(">BQH")  # version, time, subject length (store.keys message record)
_HEAD_SIZE: Final = _HEAD.size
_U32 = struct.Struct(">I")
_KEY = struct.Struct(">QQ")
_VERSION: Final = keys.MSG_RECORD_VERSION


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


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
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
    )


def _mqtt_topic(value: str) -> str | None:
    try:
        topic = json.loads(value)
    except ValueError:
        return None
    return topic if isinstance(topic, str) else None


def to_batch(
    stream: str,
    rows: Sequence[tuple[bytes, bytes]],
    *,
    include_headers: bool = True,
    keep: RowFilter = NO_FILTER,
) -> Any:
    """The rows of ``rows`` that ``keep`` accepts as one RecordBatch (None if none)."""
    import pyarrow as pa

    seqs: list[int] = []
    times: list[int] = []
    subjects: list[str] = []
    topics: list[str] = []
    payloads: list[bytes] = []
    qos: list[int | None] = []
    retain: list[bool | None] = []
    h_offsets: list[int] = [0]
    h_keys: list[str] = []
    h_vals: list[str] = []
    n_hdr = 0
    head = _HEAD.unpack_from
    u32 = _U32.unpack_from
    key_seq = _KEY.unpack
    to_topic = subject_to_topic
    want_subject = keep.subject
    ts_min = keep.ts_min_ns
    ts_max = keep.ts_max_ns
    for k, v in rows:
        version, t, slen = head(v)
        if version != _VERSION:
            raise keys.RecordError(f"unknown message record version {version}")
        if ts_min is not None and t < ts_min:
            continue
        if ts_max is not None and t > ts_max:
            continue
        send = _HEAD_SIZE + slen
        subject = v[_HEAD_SIZE:send].decode()
        if want_subject is not None and not want_subject(subject):
            continue
        (hlen,) = u32(v, send)
        pstart = send + 4 + hlen
        seqs.append(key_seq(k)[1])
        times.append(t // 1000)
        subjects.append(subject)
        payloads.append(v[pstart:])
        if hlen:
            topic: str | None = None
            q: int | None = None
            r: bool | None = None
            seen: set[str] = set()
            for name, value in keys.decode_headers(v[send + 4 : pstart]):
                if name in seen:
                    continue
                seen.add(name)
                if name == "Mqtt-Topic":
                    topic = _mqtt_topic(value)
                elif name == "Mqtt-Qos":
                    q = int(value) if value in ("0", "1", "2") else None
                elif name == "Mqtt-Retain":
                    r = value == "1"
                if include_headers:
                    h_keys.append(name)
                    h_vals.append(value)
                    n_hdr += 1
            topics.append(topic if topic is not None else to_topic(subject))
            qos.append(q)
            retain.append(r)
        else:
            topics.append(to_topic(subject))
            qos.append(None)
            retain.append(None)
        h_offsets.append(n_hdr)
    n = len(seqs)
    if not n:
        return None
    schema = arrow_schema()
    headers = pa.MapArray.from_arrays(
        pa.array(h_offsets, pa.int32()),
        pa.array(h_keys, pa.string()),
        pa.array(h_vals, pa.string()),
        type=schema.field("headers").type,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream], pa.string()).take(pa.array([0] * n, pa.int32()))
            if n
            else pa.array([], pa.string()),
            pa.array(seqs, pa.int64()),
            pa.array(subjects, pa.string()),
            pa.array(topics, pa.string()),
            pa.array(times, pa.int64()).cast(schema.field("ts").type),
            headers,
            pa.array(payloads, pa.binary()),
            pa.array(qos, pa.int32()),
            pa.array(retain, pa.bool_()),
        ],
        schema=schema,
    )
