"""``$JS.API.DIRECT.GET.<stream>[.<subject>]``: stored messages themselves, not JSON (spec
§1.2), for streams with ``allow_direct``. Runs in a worker thread (store reads).

The answer is the message: payload = its data, user properties = its headers then
``Nats-Stream``, ``Nats-Subject`` (NATS form, as nats-server's header), ``Nats-Sequence``,
``Nats-Time-Stamp``. A failure is an empty message with ``Status`` / ``Description``:
``404 Message Not Found``, ``408 Bad Request`` / ``Empty Request`` / ``Malformed
Request``, and ``503 No Responders`` where nats-server has no responder (no such stream,
no ``allow_direct``).

Batch forms (nats-server 2.11+): ``batch`` (with ``seq``, ``next_by_subj`` or
``start_time``) answers up to ``batch`` messages from the start, ``multi_last`` the last
message of each subject its filters match (at most 1,024, else ``413 Too Many
Results``; none: ``404 No Results``), both bounded by ``max_bytes`` (default 64 MiB, as
nats-server's max pending) and by ``up_to_seq`` / ``up_to_time`` for ``multi_last``.
Each message adds ``Nats-Num-Pending`` (messages still to come) and
``Nats-Last-Sequence`` (the previous message's seq, 0 first); the answer ends with an
empty ``204 EOB`` status carrying both (and ``Nats-UpTo-Sequence`` for ``multi_last``).

The jetmq packed form (request user property ``Jetmq-Pack: 1``, docs/jetstream.md):
:mod:`broker.jetstream.packed`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from broker.jetstream import packed
from store import JetStreamError, Store, StoredMsg, keys
from store.gojson import parse_time
from store.models import format_time
from store.ops import Headers
from store.subjects import subject_matches

PREFIX: Final = "$JS.API.DIRECT.GET."
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024  # nats-server's max_pending
MAX_MULTI: Final = 1024

Answer = tuple[bytes, Headers]


def _status(code: int, description: str, *extra: tuple[str, str]) -> Answer:
    return b"", (("Status", str(code)), ("Description", description), *extra)


def _message(stream: str, msg: StoredMsg, *extra: tuple[str, str]) -> Answer:
    meta: Headers = (
        ("Nats-Stream", stream),
        ("Nats-Subject", msg.subject),
        ("Nats-Sequence", str(msg.seq)),
        ("Nats-Time-Stamp", format_time(msg.time_ns)),
        *extra,
    )
    return msg.payload, msg.headers + meta


def parse_request(body: bytes) -> dict[str, Any] | Answer:
    """A batch-capable DIRECT.GET body, or the status refusing it."""
    if not body.strip():
        return _status(408, "Empty Request")
    try:
        req = json.loads(body)
    except ValueError:
        return _status(408, "Malformed Request")
    if not isinstance(req, dict):
        return _status(408, "Malformed Request")
    for key in ("seq", "batch", "max_bytes", "up_to_seq"):
        value = req.get(key, 0)
        if type(value) is not int or value < 0 or value >= 1 << 64:
            return _status(408, "Malformed Request")
    multi = req.get("multi_last") or []
    if not isinstance(multi, list) or not all(isinstance(s, str) for s in multi):
        return _status(408, "Malformed Request")
    for key in ("start_time", "up_to_time"):
        if req.get(key) is not None:
            try:
                req[key] = parse_time(str(req[key]))
            except ValueError:
                return _status(408, "Malformed Request")
    return req


def is_batch(req: dict[str, Any]) -> bool:
    return bool(req.get("batch")) or bool(req.get("multi_last"))


def direct_get(st: Store, subject: str, body: bytes, pack: bool = False) -> list[Answer]:
    """The answer(s) to a DIRECT.GET on ``subject`` (NATS form) with ``body``, in order;
    ``pack``: the jetmq packed form (:mod:`broker.jetstream.packed`)."""
    rest = subject[len(PREFIX) :]
    stream, _, last_subject = rest.partition(".")
    if not stream or stream.startswith("$MQTT_"):
        return [_status(503, "No Responders")]
    try:
        if pack and not last_subject:  # any user stream: the same ACL, allow_direct or not
            req = parse_request(body)
            return [req] if isinstance(req, tuple) else packed.packed_get(st, stream, req)
        if not st.stream_info(stream).config.allow_direct:
            return [_status(503, "No Responders")]
        if last_subject:
            if body.strip():
                return [_status(408, "Bad Request")]
            return [_message(stream, st.last_by_subject(stream, last_subject))]
        req = parse_request(body)
        if isinstance(req, tuple):
            return [req]
        if is_batch(req):
            return _batch(st, stream, req)
        seq = req.get("seq", 0)
        if req.get("last_by_subj"):
            msg = st.last_by_subject(stream, str(req["last_by_subj"]))
        elif req.get("next_by_subj"):
            msg = st.next_by_subject(stream, str(req["next_by_subj"]), seq)
        elif seq:
            msg = st.get_msg(stream, seq)
        else:
            return [_status(408, "Bad Request")]
    except JetStreamError as exc:
        if exc.err_code == 10059:
            return [_status(503, "No Responders")]
        if exc.err_code == 10037:
            return [_status(404, "Message Not Found")]
        return [_status(408, "Bad Request")]
    return [_message(stream, msg)]


def conflicting(req: dict[str, Any]) -> bool:
    """nats-server's refused combinations (408 Bad Request)."""
    seq, last, nxt = req.get("seq", 0), req.get("last_by_subj"), req.get("next_by_subj")
    start, multi = req.get("start_time"), req.get("multi_last")
    return bool(
        (seq and last)
        or (seq and start is not None)
        or (start is not None and last)
        or (last and nxt)
        or (last and req.get("batch"))
        or (last and multi)
        or (nxt and multi)
        or (req.get("up_to_seq") and req.get("up_to_time") is not None)
    )


def seq_from_time(st: Store, stream: str, ns: int) -> int:
    """The first stored seq at or after ``ns`` (the last seq + 1 if none)."""
    for msg in st.iter_msgs(stream):
        if msg.time_ns >= ns:
            return msg.seq
    return st.stream_state(stream).last_seq + 1


def _batch(st: Store, stream: str, req: dict[str, Any]) -> list[Answer]:
    if conflicting(req):
        return [_status(408, "Bad Request")]
    max_bytes = req.get("max_bytes") or DEFAULT_MAX_BYTES
    if req.get("multi_last"):
        return _multi_last(st, stream, req, max_bytes)
    seq = req.get("seq", 0)
    if req.get("start_time") is not None:
        seq = seq_from_time(st, stream, req["start_time"])
    if not seq and not req.get("next_by_subj"):
        return [_status(408, "Empty Request")]
    want = str(req.get("next_by_subj") or ">")
    batch = req["batch"]
    msgs: list[StoredMsg] = []
    size = 0
    for msg in st.iter_msgs(stream, start=seq, chunk=min(batch, 1024)):
        if subject_matches(want, msg.subject):
            msgs.append(msg)
            size += len(msg.subject) + _header_bytes(msg) + len(msg.payload)
            if len(msgs) >= batch or size >= max_bytes:
                break
    if not msgs:
        return [_status(404, "Message Not Found")]
    pending = _count_from(st, stream, seq, want)
    out: list[Answer] = []
    last = 0
    for msg in msgs:
        pending -= 1
        out.append(
            _message(
                stream, msg, ("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))
            )
        )
        last = msg.seq
    out.append(
        _status(204, "EOB", ("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last)))
    )
    return out


def _count_from(st: Store, stream: str, seq: int, want: str) -> int:
    """How many stored messages with sequence >= ``seq`` match ``want``: every key walked
    for ``>`` (no record decoded), the message heads (no payloads) for a filter."""
    if want != ">":
        return sum(1 for h in st.iter_heads(stream, start=seq) if subject_matches(want, h.subject))
    state = st.stream_state(stream)
    if seq <= state.first_seq:
        return state.messages
    env = st.env
    n = 0
    with env.read() as txn:
        raw = txn.get(stream.encode(), db=env.dbs[keys.DB_STREAMS])
        if raw is None:
            return 0
        sid, _, _ = keys.unpack_named_record(bytes(raw), keys.STREAM_RECORD_VERSION)
        cur = txn.cursor(db=env.dbs[keys.DB_MSGS])
        end = keys.sid_prefix(sid + 1)
        if cur.set_range(keys.msg_key(sid, seq)):
            for k in cur.iternext(keys=True, values=False):
                if k >= end:
                    break
                n += 1
    return n


def _header_bytes(msg: StoredMsg) -> int:
    if not msg.headers:
        return 0
    return 12 + sum(len(k) + len(v) + 4 for k, v in msg.headers)


def _multi_last(st: Store, stream: str, req: dict[str, Any], max_bytes: int) -> list[Answer]:
    filters = req["multi_last"]
    up_to = req.get("up_to_seq", 0)
    if req.get("up_to_time") is not None:  # (0 here: before the first message, no results)
        up_to = seq_from_time(st, stream, req["up_to_time"]) - 1
    elif not up_to:
        up_to = st.stream_state(stream).last_seq
    lasts: dict[str, int] = {}  # subject -> its last seq (heads only: no payload read)
    for head in st.iter_heads(stream, end=up_to):
        if head.subject in lasts or any(subject_matches(f, head.subject) for f in filters):
            lasts[head.subject] = head.seq
            if len(lasts) > MAX_MULTI:
                return [_status(413, "Too Many Results")]
    if not lasts:
        return [_status(404, "No Results")]
    chosen = [m for m in st.get_msgs(stream, sorted(lasts.values())) if m is not None]
    pending = len(chosen) - 1
    last = sent = count = 0
    out: list[Answer] = []
    floor = req.get("seq", 0)
    for msg in chosen:
        if msg.seq < floor:
            pending = max(pending - 1, 0)
            continue
        if last:  # (the EOB repeats the last message's count, as nats-server's)
            pending = max(pending - 1, 0)
        out.append(
            _message(
                stream, msg, ("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))
            )
        )
        last = msg.seq
        sent += len(msg.subject) + _header_bytes(msg) + len(msg.payload)
        if sent >= max_bytes:
            break
        count += 1
        if req.get("batch") and count >= req["batch"]:
            break
    out.append(
        _status(
            204,
            "EOB",
            ("Nats-Num-Pending", str(pending)),
            ("Nats-Last-Sequence", str(last)),
            ("Nats-UpTo-Sequence", str(up_to)),
        )
    )
    return out
