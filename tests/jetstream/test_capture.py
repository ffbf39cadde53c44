"""Stream capture over MQTT 5: headers from user properties, PUBACK properties and
reason codes, the JSON PubAck on a Response Topic, QoS 2 exactly once, subscribers."""

from __future__ import annotations

import base64
import json

import pytest

from broker.jetstream.capture import CACHED_TOPIC_MAX, Capture
from broker.mqtt.packets import Publish
from store import Publish as StorePublish
from tests.jetstream.jsclient import JsClient, ok

pytestmark = pytest.mark.timeout(60)


def _stream(js: JsClient, **cfg: object) -> None:
    out = js.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], **cfg})
    assert "error" not in out, out


def _get(js: JsClient, seq: int) -> dict[str, object]:
    out = js.request("$JS.API.STREAM.MSG.GET.S", {"seq": seq})
    assert "message" in out, out
    msg: dict[str, object] = out["message"]
    return msg


def test_user_properties_are_headers_and_mqtt_properties_are_kept(js: JsClient) -> None:
    _stream(js)
    acked = ok(
        js.publish(
            "s/a/b",
            b"x",
            1,
            UserProperty=[("Nats-Msg-Id", "id1"), ("k", "v")],
            ContentType="text/plain",
            PayloadFormatIndicator=1,
        )
    )
    assert acked.user == {"Nats-Stream": "S", "Nats-Sequence": "1"}
    msg = _get(js, 1)
    assert msg["subject"] == "s.a.b"
    hdrs = base64.b64decode(str(msg["hdrs"])).decode()
    assert hdrs == (
        "NATS/1.0\r\nNats-Msg-Id: id1\r\nk: v\r\nMqtt-Qos: 1\r\n"
        "Mqtt-Content-Type: text/plain\r\nMqtt-Payload-Format: 1\r\n\r\n"
    )
    # Nats-Msg-Id dedupes: the same seq, Nats-Duplicate.
    again = ok(js.publish("s/a/b", b"x", 1, UserProperty=[("Nats-Msg-Id", "id1")]))
    assert again.user == {"Nats-Stream": "S", "Nats-Sequence": "1", "Nats-Duplicate": "true"}


def test_refusals_are_reason_codes_with_the_description(js: JsClient) -> None:
    _stream(js, max_msgs=1, discard="new", max_msg_size=100)
    ok(js.publish("s/1", b"x", 1))
    full = js.publish("s/2", b"y", 1)
    assert full is not None
    assert full.code == 0x97, full.code
    assert full.reason == "maximum messages exceeded"
    big = js.publish("s/3", b"y" * 200, 1)
    assert big is not None
    assert big.code == 0x97
    assert big.reason == "message size exceeds maximum allowed"
    wrong = js.publish("s/4", b"z", 1, UserProperty=[("Nats-Expected-Last-Sequence", "7")])
    assert wrong is not None
    assert wrong.code == 0x83, wrong.reason
    assert wrong.reason == "wrong last sequence: 1"
    bad = js.publish("s/5", b"z", 1, UserProperty=[("bad name", "v")])
    assert bad is not None
    assert bad.code == 0x99, bad.code
    # (QoS 2's PUBREC says it too: tests/jetstream/test_bad_input.py, paho sends a PUBREL
    # after a PUBREC with an error, which MQTT 5 forbids.)


def test_response_topic_gets_the_json_pub_ack(js: JsClient) -> None:
    _stream(js)
    got = js.request_with("s/x", b"1", b"c1", qos=1)
    assert json.loads(got.payload) == {"stream": "S", "seq": 1}
    got = js.request_with("s/x", b"1", b"c2", qos=0, UserProperty=[("Nats-Expected-Stream", "T")])
    assert json.loads(got.payload) == {
        "error": {"code": 400, "err_code": 10060, "description": "expected stream does not match"},
        "stream": "S",
        "seq": 0,
    }


def test_qos2_is_stored_exactly_once_and_subscribers_still_receive(js: JsClient) -> None:
    _stream(js)
    js.subscribe("s/#", 2)
    for i in range(5):
        ok(js.publish(f"s/{i}", f"m{i}".encode(), 2))
    info = js.request("$JS.API.STREAM.INFO.S")
    assert info["state"]["messages"] == 5
    assert info["state"]["last_seq"] == 5
    for i in range(5):
        assert js.next_msg(f"s/{i}").payload == f"m{i}".encode()


def test_topics_no_stream_captures_are_not_stored(js: JsClient) -> None:
    _stream(js)
    acked = js.publish("other/x", b"x", 1)
    assert acked is not None
    assert acked.code == 0x10  # no matching subscribers, as before
    assert acked.user == {}


def test_a_stream_deleted_stops_capturing(js: JsClient) -> None:
    _stream(js)
    ok(js.publish("s/1", b"x", 1))
    assert js.request("$JS.API.STREAM.DELETE.S")["success"] is True
    acked = js.publish("s/1", b"x", 1)
    assert acked is not None
    assert acked.user == {}


def test_direct_get_answers_with_the_message(js: JsClient) -> None:
    _stream(js, allow_direct=True)
    ok(js.publish("s/a", b"first", 1, UserProperty=[("k", "v")]))
    ok(js.publish("s/a", b"second", 1))
    got = js.request_with("$JS/API/DIRECT/GET/S", b'{"seq": 1}', b"d1")
    assert got.payload == b"first"
    up = dict(getattr(got.properties, "UserProperty", []))
    assert up["k"] == "v"
    assert (up["Nats-Stream"], up["Nats-Subject"], up["Nats-Sequence"]) == ("S", "s.a", "1")
    got = js.request_with("$JS/API/DIRECT/GET/S/s/a", b"", b"d2")
    assert got.payload == b"second"
    got = js.request_with("$JS/API/DIRECT/GET/S", b'{"seq": 9}', b"d3")
    up = dict(getattr(got.properties, "UserProperty", []))
    assert (up["Status"], up["Description"]) == ("404", "Message Not Found")
    got = js.request_with("$JS/API/DIRECT/GET/NOPE", b'{"seq": 1}', b"d4")
    assert dict(getattr(got.properties, "UserProperty", []))["Status"] == "503"


def test_a_topic_too_long_for_a_subject_is_refused_and_not_cached(js: JsClient) -> None:
    """A captured topic whose subject would be over 480 bytes is refused with the store's
    reason (a bad header, 0x99); the broker's and the store's per-topic caches keep no
    such long key (65,535-byte topics would make them hold GiBs), and the stream goes on."""
    _stream(js)
    long_topic = "s/" + "t" * 2000
    for _ in range(2):
        refused = js.publish(long_topic, b"x", 1)
        assert refused is not None
        assert refused.code == 0x99, (refused.code, refused.reason)
        assert "invalid subject" in (refused.reason or "")
    acked = ok(js.publish("s/short", b"y", 1))
    assert acked.user == {"Nats-Stream": "S", "Nats-Sequence": "1"}


def test_the_capture_cache_keeps_no_long_topic() -> None:
    cap = Capture()
    cap.set_subjects((("s.>", "S"),))
    long_topic = b"s/" + b"t" * CACHED_TOPIC_MAX
    for _ in range(2):
        op = cap.op_for(Publish(long_topic, b"x", 1, False, packet_id=1))
        assert isinstance(op, StorePublish)
        assert op.subject == "s." + "t" * CACHED_TOPIC_MAX
    assert cap._cache == {}
    assert isinstance(cap.op_for(Publish(b"s/a", b"x", 1, False, packet_id=1)), StorePublish)
    assert list(cap._cache) == [b"s/a"]
