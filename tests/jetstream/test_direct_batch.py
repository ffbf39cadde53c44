"""DIRECT.GET batch forms (``batch``, ``max_bytes``, ``multi_last``, ``up_to_seq``,
``up_to_time``) compared message by message with a real nats-server (nats-py on
``$JS.API.DIRECT.GET``), and jetmq's packed form (``Jetmq-Pack: 1``) against the stored
messages."""

from __future__ import annotations

import json
import pathlib
import queue
import struct
from typing import Any

import nats
import pytest

from store.headerblock import decode_headers
from store.models import format_time
from tests.broker.harness import BrokerThread
from tests.jetstream.jsclient import JsClient, ok, user_props
from tests.jetstream.test_differential import both_answers

pytestmark = [pytest.mark.timeout(120)]

Seen = list[tuple[bytes, dict[str, str]]]
STREAM = {"name": "DG", "subjects": ["dg.>"], "allow_direct": True}
MSGS: list[tuple[str, bytes, dict[str, str] | None]] = [
    ("dg.a", b"one", None),
    ("dg.b", b"two", {"k": "v"}),
    ("dg.a", b"three", None),
    ("dg.c.x", b"four", None),
    ("dg.b", b"five", None),
    ("dg.c.y", b"six" * 10, None),
]
REQUESTS: list[dict[str, Any] | bytes] = [
    {"seq": 1, "batch": 3},
    {"seq": 2, "batch": 100},
    {"seq": 5, "batch": 1},
    {"seq": 99, "batch": 2},
    {"seq": 1, "batch": 10, "max_bytes": 8},
    {"next_by_subj": "dg.a", "batch": 5},
    {"next_by_subj": "dg.c.*", "seq": 1, "batch": 5},
    {"seq": 2, "batch": 3, "up_to_seq": 3},
    {"multi_last": ["dg.a", "dg.b"]},
    {"multi_last": ["dg.>"]},
    {"multi_last": ["dg.>"], "up_to_seq": 4},
    {"multi_last": ["dg.>"], "batch": 2},
    {"multi_last": ["dg.>"], "seq": 3},
    {"multi_last": ["dg.zzz"]},
    {"multi_last": ["dg.a"], "next_by_subj": "dg.a"},
    {"last_by_subj": "dg.a", "batch": 2},
    {"seq": 1, "batch": 2, "up_to_seq": 2, "up_to_time": "2020-01-01T00:00:00Z"},
    {"multi_last": ["dg.>"], "up_to_time": "2000-01-01T00:00:00Z"},
    {"batch": 2},
    b"{bad json",
]
IGNORED = frozenset(("Nats-Time-Stamp",))


def _comparable(seen: Seen) -> list[tuple[bytes, dict[str, str]]]:
    return [(p, {k: v for k, v in h.items() if k not in IGNORED}) for p, h in seen]


def _body(req: dict[str, Any] | bytes) -> bytes:
    return req if isinstance(req, bytes) else json.dumps(req).encode()


def _ends(headers: dict[str, str], batch: bool) -> bool:
    status = headers.get("Status")
    return (status is not None and (status != "204" or batch)) or not batch


def _is_batch(req: dict[str, Any] | bytes) -> bool:
    return isinstance(req, dict) and bool(req.get("batch") or req.get("multi_last"))


async def _theirs(port: int) -> list[Seen]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=10)
    out: list[Seen] = []
    try:
        await nc.request("$JS.API.STREAM.CREATE.DG", json.dumps(STREAM).encode(), timeout=10)
        js = nc.jetstream()
        for subject, payload, headers in MSGS:
            await js.publish(subject, payload, headers=headers)
        for i, req in enumerate(REQUESTS):
            inbox = f"_INBOX.dg{i}"
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.DIRECT.GET.DG", _body(req), reply=inbox)
            seen: Seen = []
            while True:
                msg = await sub.next_msg(timeout=5)
                hdrs = dict(msg.headers or {})
                seen.append((msg.data, hdrs))
                if _ends(hdrs, _is_batch(req)):
                    break
            await sub.unsubscribe()
            out.append(seen)
    finally:
        await nc.close()
    return out


def _ours(js: JsClient) -> list[Seen]:
    assert "error" not in js.request("$JS.API.STREAM.CREATE.DG", STREAM)
    for subject, payload, headers in MSGS:
        extra: dict[str, Any] = {"UserProperty": list(headers.items())} if headers else {}
        # QoS 0 (QoS 1 would store Mqtt-Qos); the JSON PubAck on the Response Topic
        ack = js.request_with(subject.replace(".", "/"), payload, subject.encode(), qos=0, **extra)
        assert "error" not in json.loads(ack.payload)
    out: list[Seen] = []
    for i, req in enumerate(REQUESTS):
        inbox = f"dg/in{i}"
        js.subscribe(inbox, 1)
        js.publish("$JS/API/DIRECT/GET/DG", _body(req), 1, ResponseTopic=inbox)
        seen: Seen = []
        while True:
            msg = js.next_msg(inbox)
            hdrs = user_props(msg)
            seen.append((bytes(msg.payload), hdrs))
            if _ends(hdrs, _is_batch(req)):
                break
        out.append(seen)
    return out


@pytest.mark.slow
def test_batch_forms_answer_as_nats_server(tmp_path: pathlib.Path, broker: BrokerThread) -> None:
    theirs, ours = both_answers(tmp_path, broker, _theirs, _ours)
    found = []
    for req, a, b in zip(REQUESTS, theirs, ours, strict=True):
        if _comparable(a) != _comparable(b):
            found.append(f"{req!r}:\n  nats:  {_comparable(a)}\n  jetmq: {_comparable(b)}")
    assert not found, "\n".join(found)


def unpack(payload: bytes) -> list[tuple[int, int, str, bytes, bytes]]:
    """(seq, time, subject, header block, payload) of a packed answer (docs/jetstream.md):
    u32 n, n u64 seqs, n u32 lengths, the records."""
    (n,) = struct.unpack_from(">I", payload)
    seqs = struct.unpack_from(f">{n}Q", payload, 4)
    lens = struct.unpack_from(f">{n}I", payload, 4 + 8 * n)
    pos = 4 + 12 * n
    assert pos + sum(lens) == len(payload)
    out = []
    for seq, size in zip(seqs, lens, strict=True):
        rec = payload[pos : pos + size]
        pos += size
        version, t, slen = struct.unpack_from(">BQH", rec)
        assert version == 1
        subject = rec[11 : 11 + slen].decode()
        (hlen,) = struct.unpack_from(">I", rec, 11 + slen)
        hstart = 15 + slen
        out.append((seq, t, subject, rec[hstart : hstart + hlen], rec[hstart + hlen :]))
    return out


def _packed(js: JsClient, body: dict[str, Any], inbox: str) -> tuple[Any, dict[str, str]]:
    js.publish(
        "$JS/API/DIRECT/GET/PK",
        json.dumps(body),
        1,
        ResponseTopic=inbox,
        UserProperty=[("Jetmq-Pack", "1")],
    )
    first = js.next_msg(inbox)
    up = user_props(first)
    if "Status" in up and up["Status"] != "204":
        return first, up
    eob = user_props(js.next_msg(inbox))
    assert (eob["Status"], eob["Description"]) == ("204", "EOB")
    assert list(up) == ["Jetmq-Pack"]
    return first, {**up, "Nats-Last-Sequence": eob["Nats-Last-Sequence"]}


def test_packed_form_carries_the_stored_records(js: JsClient) -> None:
    assert "error" not in js.request(
        "$JS.API.STREAM.CREATE.PK", {"name": "PK", "subjects": ["pk.>"], "allow_direct": True}
    )
    for i in range(1, 51):
        extra: dict[str, Any] = {"UserProperty": [("n", str(i))]} if i % 7 == 0 else {}
        ok(js.publish(f"pk/d{i % 3}", b"p%d" % i, 1, **extra))
    assert "error" not in js.request("$JS.API.STREAM.MSG.DELETE.PK", {"seq": 10})
    js.subscribe("pk/in", 1)
    msg, up = _packed(js, {"seq": 5, "batch": 10, "up_to_seq": 12}, "pk/in")
    recs = unpack(bytes(msg.payload))
    assert [r[0] for r in recs] == [5, 6, 7, 8, 9, 11, 12]
    assert (up["Jetmq-Pack"], up["Nats-Last-Sequence"]) == ("7", "12")
    assert recs[0][2] == "pk.d2"
    assert recs[0][4] == b"p5"
    seven = next(r for r in recs if r[0] == 7)
    assert ("n", "7") in decode_headers(seven[3])
    # batch bounds the count, max_bytes the size (one record at least)
    msg, up = _packed(js, {"seq": 1, "batch": 3}, "pk/in")
    assert [r[0] for r in unpack(bytes(msg.payload))] == [1, 2, 3]
    msg, up = _packed(js, {"seq": 1, "batch": 50, "max_bytes": 1}, "pk/in")
    assert [r[0] for r in unpack(bytes(msg.payload))] == [1]
    # past the end: no record, Nats-Last-Sequence = seq - 1
    msg, up = _packed(js, {"seq": 60, "batch": 5}, "pk/in")
    assert (bytes(msg.payload), up["Jetmq-Pack"], up["Nats-Last-Sequence"]) == (
        b"\0\0\0\0",
        "0",
        "59",
    )
    # not a packed request's shape: 408; no such stream: 503
    _, up = _packed(js, {"seq": 0, "batch": 5}, "pk/in")
    assert up["Status"] == "408"
    js.publish(
        "$JS/API/DIRECT/GET/NOPE",
        b'{"seq":1,"batch":1}',
        1,
        ResponseTopic="pk/in",
        UserProperty=[("Jetmq-Pack", "1")],
    )
    assert user_props(js.next_msg("pk/in"))["Status"] == "503"
    # a stream without allow_direct: packed reads still served (as a consumer would be)
    assert "error" not in js.request("$JS.API.STREAM.CREATE.ND", {"name": "ND", "subjects": ["nd"]})
    ok(js.publish("nd", b"x", 1))
    js.publish(
        "$JS/API/DIRECT/GET/ND",
        b'{"seq":1,"batch":5}',
        1,
        ResponseTopic="pk/in",
        UserProperty=[("Jetmq-Pack", "1")],
    )
    assert [r[4] for r in unpack(bytes(js.next_msg("pk/in").payload))] == [b"x"]
    assert user_props(js.next_msg("pk/in"))["Status"] == "204"
    # every stored message, compared with the per-message form's answers
    got: list[tuple[int, int, str, bytes, bytes]] = []
    seq = 1
    while True:
        msg, up = _packed(js, {"seq": seq, "batch": 16, "max_bytes": 200}, "pk/in")
        part = unpack(bytes(msg.payload))
        if not part:
            break
        got += part
        seq = int(up["Nats-Last-Sequence"]) + 1
    assert [r[0] for r in got] == [s for s in range(1, 51) if s != 10]
    for seq, t, subject, hdrs, payload in got:
        one = js.request_with("$JS/API/DIRECT/GET/PK", b'{"seq": %d}' % seq, b"s%d" % seq)
        props = list(getattr(one.properties, "UserProperty", []))
        meta = dict(props[-4:])
        assert (meta["Nats-Sequence"], meta["Nats-Subject"]) == (str(seq), subject)
        assert meta["Nats-Time-Stamp"] == format_time(t)
        assert (bytes(one.payload), props[:-4]) == (payload, list(decode_headers(hdrs)))
    with pytest.raises(queue.Empty):
        js.next_msg("pk/in", timeout=0.2)
