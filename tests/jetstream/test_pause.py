"""CONSUMER.PAUSE over MQTT 5: the consumer_pause_response, a paused pull consumer
delivering nothing until resumed (by the API or at its pause_until), and the errors."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from tests.jetstream.jsclient import JsClient, ok, user_props

pytestmark = pytest.mark.timeout(60)

PAUSE = "$JS.API.CONSUMER.PAUSE.S.C"
NEXT = "$JS/API/CONSUMER/MSG/NEXT/S/C"
ZERO = "0001-01-01T00:00:00Z"
TYPE = "io.nats.jetstream.api.v1.consumer_pause_response"


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _setup(js: JsClient, n: int) -> None:
    out = js.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    assert "error" not in out, out
    cfg = {"name": "C", "ack_policy": "explicit"}
    out = js.request("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": cfg})
    assert "error" not in out, out
    for i in range(n):
        ok(js.publish(f"s/{i}", f"m{i}".encode(), 1))


def _pull(js: JsClient, body: dict[str, object]) -> None:
    ok(js.publish(NEXT, json.dumps(body).encode(), 1, ResponseTopic="in/1"))


def test_a_paused_pull_consumer_delivers_nothing_until_resumed(js: JsClient) -> None:
    _setup(js, 2)
    js.subscribe("in/#", 1)
    out = js.request(PAUSE, {"pause_until": "2100-01-01T00:00:00Z"})
    assert out["type"] == TYPE
    assert out["paused"] is True
    assert out["pause_until"] == "2100-01-01T00:00:00Z"
    assert out["pause_remaining"] > 0
    info = js.request("$JS.API.CONSUMER.INFO.S.C")
    assert info["paused"] is True
    assert info["config"]["pause_until"] == "2100-01-01T00:00:00Z"
    _pull(js, {"batch": 1, "no_wait": True})
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("404", "No Messages")
    _pull(js, {"batch": 2, "expires": 30_000_000_000})
    assert js.nothing_on("in/1", 0.5)
    assert js.request(PAUSE) == {"type": TYPE, "paused": False, "pause_until": ZERO}
    assert [js.next_msg("in/1").payload for _ in range(2)] == [b"m0", b"m1"]
    assert "paused" not in js.request("$JS.API.CONSUMER.INFO.S.C")


def test_delivery_resumes_at_pause_until(js: JsClient) -> None:
    _setup(js, 1)
    js.subscribe("in/#", 1)
    js.subscribe("$JS/EVENT/ADVISORY/#", 0)
    until = time.time() + 1.0
    out = js.request(PAUSE, {"pause_until": _rfc3339(until)})
    assert out["paused"] is True
    _pull(js, {"batch": 1, "expires": 30_000_000_000})
    assert js.next_msg("in/1", timeout=10).payload == b"m0"
    assert time.time() >= until - 0.01  # (not before the pause ended)
    topic = "$JS/EVENT/ADVISORY/CONSUMER/PAUSE/S/C"
    paused, resumed = (json.loads(js.next_msg(topic, timeout=10).payload) for _ in range(2))
    assert paused["type"] == "io.nats.jetstream.advisory.v1.consumer_pause"
    assert (paused["paused"], resumed["paused"]) == (True, False)
    assert paused["pause_until"] == resumed["pause_until"] == out["pause_until"]


def test_pause_errors_answer_as_nats_server(js: JsClient) -> None:
    _setup(js, 0)
    extras = {"type": TYPE, "paused": False, "pause_until": ZERO}
    out = js.request("$JS.API.CONSUMER.PAUSE.S.nope")
    assert out == {
        **extras,
        "error": {"code": 404, "err_code": 10014, "description": "consumer not found"},
    }
    out = js.request("$JS.API.CONSUMER.PAUSE.X.C")
    assert out == {
        **extras,
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
    }
    out = js.request(PAUSE, b"{bad")
    # (the description is Python's words for bad JSON, as every request of ours today)
    assert (out["error"]["code"], out["error"]["err_code"]) == (400, 10025)
    assert (out["paused"], out["pause_until"]) == (False, ZERO)
    out = js.request(PAUSE, {"pause_until": "soon"})
    assert out["error"]["description"] == (
        'invalid JSON: parsing time "soon" as "2006-01-02T15:04:05Z07:00": '
        'cannot parse "soon" as "2006"'
    )
