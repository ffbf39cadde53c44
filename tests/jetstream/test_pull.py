"""Pull consumers over MQTT 5: batches, statuses, interest, acks and redelivery."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.jetstream.jsclient import JsClient, ok, user_props

pytestmark = pytest.mark.timeout(60)

NEXT = "$JS/API/CONSUMER/MSG/NEXT/S/C"


def _setup(js: JsClient, n: int, retention: str = "limits", **consumer: Any) -> None:
    out = js.request(
        "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "retention": retention}
    )
    assert "error" not in out, out
    cfg = {"name": "C", "ack_policy": "explicit", **consumer}
    out = js.request("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": cfg})
    assert "error" not in out, out
    for i in range(n):
        ok(js.publish(f"s/{i}", f"m{i}".encode(), 1))


def _pull(js: JsClient, body: Any, inbox: str = "in/1") -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    ok(js.publish(NEXT, data, 1, ResponseTopic=inbox))


def test_a_batch_arrives_with_ack_topics_and_subjects(js: JsClient) -> None:
    _setup(js, 3)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 3, "expires": 5_000_000_000})
    for i in range(3):
        msg = js.next_msg("in/1")
        assert msg.payload == f"m{i}".encode()
        up = user_props(msg)
        assert up["Nats-Subject"] == f"s/{i}"
        assert up["Mqtt-Qos"] == "1"
        ack = str(getattr(msg.properties, "ResponseTopic", ""))
        parts = ack.split("/")
        assert parts[:5] == ["$JS", "ACK", "S", "C", "1"]
        assert parts[5:7] == [str(i + 1), str(i + 1)]
        assert parts[8] == str(2 - i)  # pending after this one
        ok(js.publish(ack, b"+ACK", 1))
    info = js.request("$JS.API.CONSUMER.INFO.S.C")
    assert info["num_ack_pending"] == 0
    assert info["ack_floor"]["stream_seq"] == 3


def test_statuses_404_408_and_400(js: JsClient) -> None:
    _setup(js, 0)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 1, "no_wait": True})
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("404", "No Messages")
    _pull(js, {"batch": 2, "expires": 200_000_000})
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("408", "Request Timeout")
    assert st["Nats-Pending-Messages"] == "2"
    _pull(js, {"batch": 1, "expires": 1_000_000_000, "idle_heartbeat": 900_000_000})
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("400", "Bad Request - heartbeat value too large")
    acked = js.publish(NEXT, b'{"batch": "many"}', 1, ResponseTopic="in/1")
    assert acked is not None
    assert (acked.code, acked.reason) == (0x83, "batch is not an int64")
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("400", "Bad Request - batch is not an int64")


def test_idle_heartbeats_while_a_request_waits(js: JsClient) -> None:
    _setup(js, 0)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 1, "expires": 2_000_000_000, "idle_heartbeat": 200_000_000})
    st = user_props(js.next_msg("in/1"))
    assert (st["Status"], st["Description"]) == ("100", "Idle Heartbeat")
    assert st["Nats-Last-Consumer"] == "0"


def test_a_request_waits_for_a_message_then_leaves_with_its_inbox(js: JsClient) -> None:
    _setup(js, 0)
    js.subscribe("in/#", 1)
    _pull(js, b"")  # batch 1, no expiry: waits
    assert js.request("$JS.API.CONSUMER.INFO.S.C")["num_waiting"] == 1
    ok(js.publish("s/x", b"late", 1))
    assert js.next_msg("in/1").payload == b"late"
    _pull(js, b"")
    assert js.request("$JS.API.CONSUMER.INFO.S.C")["num_waiting"] == 1
    js.unsubscribe("in/#")  # the inbox's interest goes: so does the request
    assert js.request("$JS.API.CONSUMER.INFO.S.C")["num_waiting"] == 0


def test_a_pull_without_a_subscription_to_its_inbox_is_refused(js: JsClient) -> None:
    _setup(js, 1)
    acked = js.publish(NEXT, b"", 1, ResponseTopic="nobody/listens")
    assert acked is not None
    assert acked.code == 0x83
    assert acked.reason == "no subscription of this client matches the inbox"


def test_nak_term_wpi_and_double_ack(js: JsClient) -> None:
    _setup(js, 2, ack_wait=30_000_000_000)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 2})
    first = js.next_msg("in/1")
    second = js.next_msg("in/1")
    ack1 = str(getattr(first.properties, "ResponseTopic", ""))
    ack2 = str(getattr(second.properties, "ResponseTopic", ""))
    ok(js.publish(ack1, b"+WPI", 1))
    ok(js.publish(ack1, b"-NAK", 1))
    _pull(js, {"batch": 1})
    again = js.next_msg("in/1")
    assert again.payload == b"m0"
    assert str(getattr(again.properties, "ResponseTopic", "")).split("/")[4] == "2"
    # Double ack: the Response Topic hears once it is processed.
    got = js.request_with(str(getattr(again.properties, "ResponseTopic", "")), b"+ACK", b"a1")
    assert got.payload == b""
    ok(js.publish(ack2, b"+TERM bad payload", 1))
    info = js.request("$JS.API.CONSUMER.INFO.S.C")
    assert info["num_ack_pending"] == 0
    assert info["ack_floor"]["stream_seq"] == 2


def test_nxt_acks_and_asks_for_the_next(js: JsClient) -> None:
    _setup(js, 2)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 1})
    first = js.next_msg("in/1")
    ok(
        js.publish(
            str(getattr(first.properties, "ResponseTopic", "")), b"+NXT", 1, ResponseTopic="in/2"
        )
    )
    assert js.next_msg("in/2").payload == b"m1"


def test_ack_wait_redelivers_and_workqueue_acks_remove(js: JsClient) -> None:
    _setup(js, 1, retention="workqueue", ack_wait=300_000_000, max_deliver=2)
    js.subscribe("in/#", 1)
    _pull(js, {"batch": 1})
    js.next_msg("in/1")  # not acked
    _pull(js, {"batch": 1, "expires": 3_000_000_000})
    redelivered = js.next_msg("in/1")
    ack = str(getattr(redelivered.properties, "ResponseTopic", ""))
    assert ack.split("/")[4] == "2"
    ok(js.publish(ack, b"", 1))  # an empty payload acks
    info = js.request("$JS.API.STREAM.INFO.S")
    assert info["state"]["messages"] == 0
