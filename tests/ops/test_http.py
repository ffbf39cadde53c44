"""The operations HTTP server: /metrics parsed by prometheus-client's own parser, health
and readiness, the JSON API, the status page's files, and bad requests."""

from __future__ import annotations

import json
import pathlib
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.broker.pahoclient import Paho, props
from tests.ops.harness import http_get, ops_broker, ops_config

STATIC = pathlib.Path(__file__).resolve().parents[2] / "broker/ops/static"


def _metrics(port: int) -> dict[str, list[Sample]]:
    status, ctype, body = http_get(port, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4")
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    for s in samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {name} {labels}")


@pytest.mark.timeout(60)
def test_metrics_count_what_the_broker_did(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        port = broker.http_port
        before = _metrics(port)
        assert _value(before["jetmq_clients_connected"], "jetmq_clients_connected") == 0
        sub, pub = Paho(broker.port, "m-sub"), Paho(broker.port, "m-pub")
        # A persistent subscriber: each QoS 1 PUBLISH waits for a store commit.
        sub.connect(clean_start=False, properties=props(1, SessionExpiryInterval=300))
        sub.subscribe("m/#", qos=1)
        pub.connect()
        try:
            for i in range(10):
                pub.publish("m/t", b"%d" % i, qos=1)
            for _ in range(10):
                sub.get()
            m = _metrics(port)
            assert _value(m["jetmq_clients_connected"], "jetmq_clients_connected") == 2
            assert _value(m["jetmq_messages_received"], "jetmq_messages_received_total") == 10
            assert _value(m["jetmq_messages_sent"], "jetmq_messages_sent_total") >= 10
            assert _value(m["jetmq_subscriptions"], "jetmq_subscriptions") == 1
            assert _value(m["jetmq_bytes_received"], "jetmq_bytes_received_total") > 0
            ack = m["jetmq_publish_ack_seconds"]
            assert _value(ack, "jetmq_publish_ack_seconds_count") == 10
            assert _value(ack, "jetmq_publish_ack_seconds_bucket", le="+Inf") == 10
            assert _value(ack, "jetmq_publish_ack_seconds_sum") > 0
            commit = m["jetmq_store_commit_seconds"]
            assert _value(commit, "jetmq_store_commit_seconds_count") >= 10
            buckets = [s.value for s in commit if s.name.endswith("_bucket")]
            assert buckets == sorted(buckets)  # cumulative
            assert _value(m["jetmq_store_streams"], "jetmq_store_streams") >= 5
            assert _value(m["jetmq_store_size_bytes"], "jetmq_store_size_bytes") > 0
        finally:
            pub.disconnect()
            sub.disconnect()


@pytest.mark.timeout(60)
def test_health_readiness_and_the_json_api(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        port = broker.http_port
        assert http_get(port, "/healthz")[::2] == (200, b"ok\n")
        assert http_get(port, "/readyz")[::2] == (200, b"ready\n")
        c = Paho(broker.port, "api-client")
        c.connect()
        c.subscribe("api/+/x", qos=1)
        try:
            clients = json.loads(http_get(port, "/api/clients")[2])
            assert clients == [
                {
                    "client_id": "api-client",
                    "connected": True,
                    "protocol": "5.0",
                    "expiry": 0,
                    "subscriptions": 1,
                    "inflight": 0,
                    "queued": 0,
                }
            ]
            subs = json.loads(http_get(port, "/api/subscriptions")[2])
            assert subs == [{"client_id": "api-client", "filter": "api/+/x", "qos": 1}]
            stats = json.loads(http_get(port, "/api/stats")[2])
            assert stats["clients_connected"] == 1
            assert stats["subscriptions"] == 1
            streams = json.loads(http_get(port, "/api/streams")[2])
            assert "$MQTT_msgs" in {s["name"] for s in streams}
        finally:
            c.disconnect()
        broker.call(lambda: broker.ops.stopping())  # type: ignore[union-attr]
        assert http_get(port, "/readyz")[::2] == (503, b"stopping\n")


@pytest.mark.timeout(60)
def test_the_status_page_is_served_locally(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        port = broker.http_port
        status, ctype, body = http_get(port, "/")
        assert status == 200
        assert ctype == "text/html; charset=utf-8"
        html = body.decode()
        assert '<script src="/static/app.js">' in html
        for name in ("app.js", "style.css"):
            status, _ctype, data = http_get(port, f"/static/{name}")
            assert status == 200
            assert data == (STATIC / name).read_bytes()
        assert http_get(port, "/static/../http.py")[0] == 404
        assert http_get(port, "/nothing")[0] == 404
    for path in STATIC.iterdir():  # no CDN: nothing is fetched from elsewhere
        text = path.read_text()
        for remote in ("http://", "https://", "//cdn"):
            assert remote not in text, path


@pytest.mark.timeout(60)
def test_bad_requests_get_an_error_not_a_crash(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        port = broker.http_port
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        with refused.value:
            assert refused.value.code == 405
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            reply = s.recv(4096)
            assert reply.startswith(b"HTTP/1.1 400 ")
        # Keep-alive: two requests on one connection.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            got = b""
            while got.count(b"ok\n") < 2:
                data = s.recv(4096)
                assert data
                got += data
        assert http_get(port, "/healthz")[0] == 200  # still serving


async def _no_routes() -> tuple[int, str, bytes]:
    return 200, "text/plain", b"x"


@pytest.mark.timeout(30)
def test_an_idle_connection_is_closed() -> None:
    """A client that opens a connection and sends nothing (or stops mid-request) is closed
    after the idle timeout; the server goes on."""
    import trio

    from broker.ops.http import HttpServer

    async def main() -> None:
        server = HttpServer({"/": _no_routes}, idle_timeout=0.3)
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(server.serve, "127.0.0.1", 0)
            with trio.fail_after(10):
                idle = await trio.open_tcp_stream(host, port)
                await idle.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
                assert await idle.receive_some(100) == b""  # closed by the server
                await idle.aclose()
                ok = await trio.open_tcp_stream(host, port)
                await ok.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                reply = b""
                while data := await ok.receive_some(1000):
                    reply += data
                assert reply.startswith(b"HTTP/1.1 200 ")
                assert reply.endswith(b"\r\n\r\nx")
                await ok.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.timeout(60)
def test_metrics_export_jetstream_and_the_bridge_seams(tmp_path: pathlib.Path) -> None:
    from paho.mqtt.packettypes import PacketTypes

    with ops_broker(ops_config(tmp_path / "data")) as broker:
        port = broker.http_port
        m = _metrics(port)
        assert _value(m["jetmq_jetstream_streams"], "jetmq_jetstream_streams") == 0
        assert _value(m["jetmq_bridge_connected"], "jetmq_bridge_connected") == 0  # no [bridge]
        c = Paho(broker.port, "js-admin")
        c.connect()
        c.subscribe("answers/#", qos=1)
        try:
            for rest, body in (
                ("STREAM/CREATE/ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]}),
                ("CONSUMER/CREATE/ORDERS/C", {"stream_name": "ORDERS", "config": {"durable_name": "C"}}),
            ):  # fmt: skip
                p = props(PacketTypes.PUBLISH, ResponseTopic="answers/1")
                c.publish("$JS/API/" + rest, json.dumps(body), qos=1, properties=p)
                assert "error" not in json.loads(c.get().payload)
            m = _metrics(port)
            assert _value(m["jetmq_jetstream_streams"], "jetmq_jetstream_streams") == 1
            assert _value(m["jetmq_jetstream_consumers"], "jetmq_jetstream_consumers") == 1
        finally:
            c.disconnect()
