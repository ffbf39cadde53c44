"""First light: create a stream, publish into it, pull, ack."""

from __future__ import annotations

import pytest

from tests.jetstream.jsclient import JsClient, ok, user_props

pytestmark = pytest.mark.timeout(60)


def test_create_publish_pull_ack(js: JsClient) -> None:
    out = js.request("$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
    assert out["type"] == "io.nats.jetstream.api.v1.stream_create_response", out
    assert out["config"]["name"] == "ORDERS"
    acked = ok(js.publish("orders/eu/1", b"hello", 1))
    assert acked.user == {"Nats-Stream": "ORDERS", "Nats-Sequence": "1"}
    out = js.request(
        "$JS.API.CONSUMER.CREATE.ORDERS.C1",
        {"stream_name": "ORDERS", "config": {"name": "C1", "ack_policy": "explicit"}},
    )
    assert out["name"] == "C1", out
    js.subscribe("inbox/me", 1)
    ok(js.publish("$JS/API/CONSUMER/MSG/NEXT/ORDERS/C1", b"", 1, ResponseTopic="inbox/me"))
    msg = js.next_msg("inbox/me")
    assert msg.payload == b"hello"
    up = user_props(msg)
    assert up["Nats-Subject"] == "orders/eu/1", up
    ack_topic = getattr(msg.properties, "ResponseTopic", "")
    assert ack_topic.startswith("$JS/ACK/ORDERS/C1/1/1/1/"), ack_topic
    ok(js.publish(ack_topic, b"+ACK", 1))
    info = js.request("$JS.API.CONSUMER.INFO.ORDERS.C1")
    assert info["num_ack_pending"] == 0, info
    assert info["ack_floor"]["stream_seq"] == 1, info
