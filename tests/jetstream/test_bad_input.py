"""Bad input to the JetStream topics: each a JetStream error or a refusal, and nothing
else disturbed (the stream, its consumer and a well-formed exchange go on)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Puback, Publish, Pubrec
from broker.mqtt.reason_codes import ReasonCode
from tests.broker.harness import BrokerThread
from tests.broker.rawclient import RawClient
from tests.jetstream.jsclient import JsClient, ok, user_props

pytestmark = pytest.mark.timeout(60)


def _setup(js: JsClient) -> None:
    assert "error" not in js.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    cfg = {"stream_name": "S", "config": {"name": "C", "ack_policy": "explicit"}}
    assert "error" not in js.request("$JS.API.CONSUMER.CREATE.S.C", cfg)
    ok(js.publish("s/1", b"one", 1))


def _still_fine(js: JsClient) -> None:
    """The stream and consumer answer as before: one message, delivered, acked."""
    js.subscribe("fine/#", 1)
    ok(js.publish("$JS/API/CONSUMER/MSG/NEXT/S/C", b"", 1, ResponseTopic="fine/in"))
    msg = js.next_msg("fine/in")
    assert msg.payload == b"one"
    ok(js.publish(str(getattr(msg.properties, "ResponseTopic", "")), b"+ACK", 1))
    info = js.request("$JS.API.CONSUMER.INFO.S.C")
    assert info["ack_floor"]["stream_seq"] == 1
    assert info["num_ack_pending"] == 0


def test_malformed_requests_get_jetstream_errors(js: JsClient) -> None:
    _setup(js)
    cases: list[tuple[str, bytes, int]] = [
        ("$JS.API.STREAM.CREATE.X", b"{", 10025),
        ("$JS.API.STREAM.CREATE.X", b"[1,2]", 10025),
        ("$JS.API.STREAM.CREATE.X", b'{"name": "Y"}', 10056),
        ("$JS.API.STREAM.CREATE.X", b'{"name": "X", "max_msgs": 1e400}', 10025),
        ("$JS.API.STREAM.CREATE.$MQTT_sess", b'{"name": "$MQTT_sess"}', 10052),
        ("$JS.API.STREAM.DELETE.$MQTT_sess", b"", 10059),
        ("$JS.API.STREAM.PURGE.$MQTT_msgs", b"", 10059),
        ("$JS.API.STREAM.INFO.S", b'{"offset": "x"}', 10025),
        ("$JS.API.STREAM.INFO", b"", 10003),
        ("$JS.API.STREAM.INFO.S.extra", b"", 10003),
        ("$JS.API.STREAM.MSG.GET.S", b"", 10003),
        ("$JS.API.STREAM.MSG.GET.S", b'{"seq": -1}', 10025),
        ("$JS.API.STREAM.MSG.GET.S", b'{"seq": 18446744073709551616}', 10025),
        ("$JS.API.CONSUMER.CREATE.S.D", b"", 10025),
        ("$JS.API.CONSUMER.CREATE.S.D", b'{"config": 7}', 10025),
        ("$JS.API.CONSUMER.INFO.S", b"", 10003),
        ("$JS.API.NOT.A.THING", b"", 10003),
        (
            "$JS.API.STREAM.CREATE.G",
            b'{"name":"G","subjects":["g"]' + b" " * 2_000_000 + b"}",
            10003,
        ),
    ]
    for subject, body, err in cases:
        out = js.request(subject, body)
        assert out.get("error", {}).get("err_code") == err, (subject, body[:40], out)
    assert js.request("$JS.API.STREAM.NAMES")["streams"] == ["S"]  # ours only
    _still_fine(js)


def test_acks_that_are_not_acks_are_refused(js: JsClient) -> None:
    _setup(js)
    refusals = [
        ("$JS/ACK/S/C/1/1/1/1", b"+ACK"),  # too few levels
        ("$JS/ACK/S/C/1/x/1/1/0", b"+ACK"),  # not a number
        ("$JS/ACK/S/C/1/99999999999999999999999/1/1/0", b"+ACK"),  # beyond u64
        ("$JS/ACK/S/C/1/0/1/1/0", b"+ACK"),  # seq 0
        ("$JS/ACK/S/C/1/1/1/1/0", b"+WHAT"),  # not an ack
        ("$JS/ACK/S/C/1/1/1/1/0", b"+NXT -5"),
        ("$JS/ACK/S/NOPE/1/1/1/1/0", b"+ACK"),  # no such consumer
        ("$JS/ACK/NOPE/C/1/1/1/1/0", b"+ACK"),  # no such stream
        ("$JS/ACK/S/C/1/1/1/1/0", b"+ACK" + b" " * 5000),
    ]
    for topic, payload in refusals:
        acked = js.publish(topic, payload, 1)
        assert acked is not None
        assert acked.code == 0x83, (topic, payload[:20], hex(acked.code))
        assert acked.reason
    # An ack for a message never delivered is ignored, as nats-server does.
    ok(js.publish("$JS/ACK/S/C/1/1/1/1/0", b"+ACK", 1))
    ok(js.publish("$JS/ACK/S/C/9/18446744073709551615/9/9/9", b"+ACK", 1))
    info = js.request("$JS.API.CONSUMER.INFO.S.C")
    assert info["ack_floor"]["stream_seq"] == 0
    _still_fine(js)


def test_pulls_with_bad_shapes(js: JsClient) -> None:
    _setup(js)
    js.subscribe("bad/#", 1)
    for topic, body in [
        ("$JS/API/CONSUMER/MSG/NEXT/S", b""),
        ("$JS/API/CONSUMER/MSG/NEXT/S/C/extra", b""),
        ("$JS/API/CONSUMER/MSG/NEXT/S/C", b'{"expires": 99999999999999999999}'),
        ("$JS/API/CONSUMER/MSG/NEXT/S/C", b'{"no_wait": "yes"}'),
    ]:
        acked = js.publish(topic, body, 1, ResponseTopic="bad/in")
        assert acked is not None
        assert acked.code == 0x83, (topic, body)
        assert user_props(js.next_msg("bad/in"))["Status"] == "400"
    acked = js.publish("$JS/API/CONSUMER/MSG/NEXT/S/NOPE", b"", 1, ResponseTopic="bad/in")
    assert acked is not None
    assert (acked.code, acked.reason) == (0x83, "consumer not found")
    assert user_props(js.next_msg("bad/in"))["Status"] == "503"
    for reply in ("$SYS/x", "$JS/API/INFO"):  # (a wildcard there is a protocol error)
        acked = js.publish("$JS/API/CONSUMER/MSG/NEXT/S/C", b"", 1, ResponseTopic=reply)
        assert acked is not None
        assert acked.code == 0x83
    _still_fine(js)


def test_no_response_topic_is_refused_with_a_log_line(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), RawClient(broker.port) as c:
        c.connect("no-reply")
        c.publish(b"$JS/API/INFO", b"", qos=1, packet_id=1)
        assert c.expect(Puback).reason_code is ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
        c.publish(b"$JS/API/INFO", b"", qos=2, packet_id=2)
        assert c.expect(Pubrec).reason_code is ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
    assert any("without a Response Topic" in r.getMessage() for r in caplog.records)


def test_mqtt311_requests_are_refused_and_logged(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING),
        RawClient(broker.port, version=ProtocolVersion.MQTT_3_1_1) as c,
    ):
        c.connect("old")
        c.publish(b"$JS/API/INFO", b"", qos=1, packet_id=1)
        c.expect(Puback)  # 3.1.1 cannot be told; the log says it
    assert any("'old'" in r.getMessage() for r in caplog.records)


def test_api_topics_reach_no_subscriber(broker: BrokerThread) -> None:
    with RawClient(broker.port) as watcher, RawClient(broker.port) as c:
        watcher.connect("watch-all")
        watcher.subscribe((b"#", 0), (b"$JS/#", 0))
        c.connect("asker")
        c.subscribe((b"answers", 0))
        c.publish(b"$JS/API/INFO", b"", qos=1, packet_id=5, response_topic="answers")
        got = [c.next(), c.next()]
        answer = next(p for p in got if isinstance(p, Publish))
        assert (
            json.loads(answer.payload)["type"] == "io.nats.jetstream.api.v1.account_info_response"
        )
        assert any(isinstance(p, Puback) for p in got)
        c.publish(b"$JS/ACK/S/C/1/1/1/1/0", b"+ACK", qos=0)
        c.publish(b"plain/marker", b"m", qos=0)
        # The answer went to "answers", which "#" matches; nothing under $JS did.
        topics = []
        while True:
            p = watcher.expect_publish()
            topics.append(p.topic)
            if p.topic == b"plain/marker":
                break
        assert topics == [b"answers", b"plain/marker"]


def test_disabled_jetstream_closes_the_topics(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(enabled=False)
    with RawClient(broker.port) as c:
        c.connect("off")
        c.publish(b"$JS/API/INFO", b"", qos=1, packet_id=1, response_topic="r")
        ack = c.expect(Puback)
        assert ack.reason_code is ReasonCode.TOPIC_NAME_INVALID
        assert "reserved" in str(ack.properties.reason_string)
