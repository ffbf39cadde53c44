"""Push consumers over MQTT 5: the deliver topic, queue groups as shared
subscriptions, interest from subscriptions."""

from __future__ import annotations

import pytest

from tests.jetstream.jsclient import JsClient, ok, user_props

pytestmark = pytest.mark.timeout(60)


def _stream(js: JsClient) -> None:
    assert "error" not in js.request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})


def _push(js: JsClient, name: str, **cfg: object) -> dict[str, object]:
    body = {"stream_name": "S", "config": {"name": name, "ack_policy": "explicit", **cfg}}
    out = js.request(f"$JS.API.CONSUMER.CREATE.S.{name}", body)
    assert "error" not in out, out
    return out


def test_push_delivers_to_the_deliver_topic_once_bound(js: JsClient) -> None:
    _stream(js)
    ok(js.publish("s/1", b"one", 1))
    out = _push(js, "P", deliver_subject="deliver.p")
    assert out.get("push_bound") is None  # nobody subscribes yet
    js.subscribe("deliver/p", 1)
    msg = js.next_msg("deliver/p")
    assert msg.payload == b"one"
    assert user_props(msg)["Nats-Subject"] == "s/1"
    ack = str(getattr(msg.properties, "ResponseTopic", ""))
    assert ack.startswith("$JS/ACK/S/P/1/1/1/")
    info = js.request("$JS.API.CONSUMER.INFO.S.P")
    assert info["push_bound"] is True
    ok(js.publish(ack, b"+ACK", 1))
    ok(js.publish("s/2", b"two", 1))
    assert js.next_msg("deliver/p").payload == b"two"
    js.unsubscribe("deliver/p")
    info = js.request("$JS.API.CONSUMER.INFO.S.P")
    assert info.get("push_bound") is None
    ok(js.publish("s/3", b"three", 1))
    assert js.nothing_on("deliver/p", 0.3)


def test_deliver_group_goes_to_one_member_of_the_shared_subscription(js: JsClient) -> None:
    _stream(js)
    other = JsClient(js.port)
    try:
        js.subscribe("$share/workers/deliver/g", 1)
        other.subscribe("$share/workers/deliver/g", 1)
        _push(js, "G", deliver_subject="deliver.g", deliver_group="workers")
        for i in range(6):
            ok(js.publish(f"s/{i}", f"m{i}".encode(), 1))
        got = 0
        for client in (js, other):
            while not client.nothing_on("deliver/g", 0.5):
                got += 1
        assert got == 6
    finally:
        other.close()


def test_push_interest_survives_a_restart_of_the_consumer_list(js: JsClient) -> None:
    _stream(js)
    js.subscribe("deliver/r", 1)
    _push(js, "R", deliver_subject="deliver.r")
    ok(js.publish("s/1", b"one", 1))
    assert js.next_msg("deliver/r").payload == b"one"
    assert js.request("$JS.API.CONSUMER.DELETE.S.R")["success"] is True
    ok(js.publish("s/2", b"two", 1))
    assert js.nothing_on("deliver/r", 0.3)


def test_idle_heartbeats_name_the_last_delivery(js: JsClient) -> None:
    _stream(js)
    js.subscribe("deliver/h", 1)
    _push(js, "H", deliver_subject="deliver.h", idle_heartbeat=200_000_000)
    ok(js.publish("s/1", b"one", 1))
    assert js.next_msg("deliver/h").payload == b"one"
    beat = js.next_msg("deliver/h")
    up = user_props(beat)
    assert beat.payload == b""
    assert (up["Status"], up["Description"]) == ("100", "Idle Heartbeat")
    assert (up["Nats-Last-Consumer"], up["Nats-Last-Stream"]) == ("1", "1")


def test_flow_control_stalls_until_answered(js: JsClient) -> None:
    _stream(js)
    js.subscribe("deliver/f", 1)
    _push(
        js,
        "F",
        deliver_subject="deliver.f",
        idle_heartbeat=500_000_000,
        flow_control=True,
        ack_policy="none",
    )
    chunk = b"x" * 8192
    for i in range(12):  # 96 KiB: past the 64 KiB window
        ok(js.publish(f"s/{i}", chunk, 1))
    got = 0
    fc_topic = ""
    while True:
        msg = js.next_msg("deliver/f")
        up = user_props(msg)
        if up.get("Description") == "FlowControl Request":
            fc_topic = str(getattr(msg.properties, "ResponseTopic", ""))
            continue
        if up.get("Description") == "Idle Heartbeat":
            assert up["Nats-Consumer-Stalled"] == fc_topic
            break
        got += 1
    assert fc_topic.startswith("$JS/FC/S/F/")
    assert got == 8  # a window's worth, then stalled
    js.publish(fc_topic, b"", 1)
    for _ in range(12 - got):
        msg = js.next_msg("deliver/f")
        while user_props(msg).get("Status"):
            msg = js.next_msg("deliver/f")
    info = js.request("$JS.API.CONSUMER.INFO.S.F")
    assert info["delivered"]["stream_seq"] == 12
