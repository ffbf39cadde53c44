"""The bridge end to end: a real nats-server, a real jetmq on port 0, paho clients."""

from __future__ import annotations

import json
import pathlib
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.bridge.harness import BridgedBroker, NatsClient, bridge_config, wait_for
from tests.broker.pahoclient import Paho, props
from tests.natsserver import NatsServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def start_broker(tmp_path: pathlib.Path) -> Iterator[Callable[..., BridgedBroker]]:
    started: list[BridgedBroker] = []

    def start(bridge: dict[str, Any], data: str = "data") -> BridgedBroker:
        b = BridgedBroker(bridge_config(tmp_path / data, bridge)).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def connected(b: BridgedBroker) -> None:
    wait_for(lambda: bool(b.state()["connected"]))


def test_forward_core_carries_topic_qos_retain_and_every_property(
    nats_server: NatsServer, nc: NatsClient, start_broker: Callable[..., BridgedBroker]
) -> None:
    b = start_broker(
        {"servers": [nats_server.url], "name": "edge-1", "forward": [{"filter": "sensors/#"}]}
    )
    connected(b)
    got = nc.subscribe("sensors.>")
    parent = nc.subscribe("sensors")
    pub = Paho(b.port, "fwd-pub")
    pub.connect()
    p = props(
        PacketTypes.PUBLISH,
        ContentType="text/plain; charset=ütf",
        ResponseTopic="replies/ä",
        CorrelationData=b"\x00\xffcorr",
        PayloadFormatIndicator=1,
        MessageExpiryInterval=3600,
        UserProperty=[("k", "v1"), ("k", "v2"), ("clé", "välue")],
    )
    pub.publish("sensors/a.b/t", "21.5", qos=1, retain=True, properties=p)
    msg = got.get(timeout=10)
    assert msg.subject == "sensors.a//b.t"
    assert msg.data == b"21.5"
    h = msg.headers or {}
    assert h["Mqtt-Origin"] == "edge-1"
    assert h["Mqtt-Topic"] == "sensors/a.b/t"
    assert h["Mqtt-Qos"] == "1"
    assert h["Mqtt-Retain"] == "1"
    assert h["Mqtt-Content-Type"] == "text/plain;%20charset=%C3%BCtf"
    assert h["Mqtt-Response-Topic"] == "replies/%C3%A4"
    assert h["Mqtt-Payload-Format"] == "1"
    assert 3590 <= int(h["Mqtt-Message-Expiry"]) <= 3600
    assert h["Mqtt-Correlation-Data"] == "AP9jb3Jy"
    assert json.loads(h["Mqtt-User-Properties"]) == [["k", "v1"], ["k", "v2"], ["clé", "välue"]]
    assert all(v.isascii() for v in h.values())
    assert not any(k.lower().startswith("nmqtt") for k in h)
    # 'sensors/#' also matches 'sensors' (MQTT), forwarded on subject 'sensors'.
    pub.publish("sensors", "p", qos=0)
    assert parent.get(timeout=10).data == b"p"
    # A topic over the bridge's cached length is converted every time, the same way.
    long_topic = "sensors/" + "x" * 1500
    for n in (b"1", b"2"):
        pub.publish(long_topic, n, qos=0)
        msg = got.get(timeout=10)
        assert (msg.subject, msg.data) == ("sensors." + "x" * 1500, n)
        assert (msg.headers or {})["Mqtt-Topic"] == long_topic
    pub.publish("other/x", "no", qos=0)
    pub.publish("sensors/bad topic", "no", qos=0)  # whitespace: cannot be a subject
    wait_for(lambda: b.state()["forward_bad_topic"] == 1)
    assert got.empty()
    pub.disconnect()


def test_import_core_restores_topic_qos_and_properties(
    nats_server: NatsServer, nc: NatsClient, start_broker: Callable[..., BridgedBroker]
) -> None:
    b = start_broker(
        {
            "servers": [nats_server.url],
            "name": "edge-1",
            "subject_prefix": "mq",
            "import": [{"subject": "cmd.>", "qos": 1}, {"subject": "mq.>", "qos": 1}],
        }
    )
    connected(b)
    sub = Paho(b.port, "imp-sub")
    sub.connect()
    sub.subscribe("#", qos=2)
    time.sleep(0.2)  # the bridge subscribes once connected; see the retries below
    # Plain NATS message: reverse conversion, the rule's QoS.
    wait_for(lambda: _published(nc, "cmd.x//y.z", b"go", sub))
    m = sub.get()
    assert (m.topic, m.payload, m.qos, m.retain) == ("cmd/x.y/z", b"go", 1, False)
    # From another jetmq: the original topic, QoS min(0, 1), properties back.
    headers = {
        "Mqtt-Origin": "edge-2",
        "Mqtt-Topic": "a/%C3%BC",
        "Mqtt-Qos": "0",
        "Mqtt-Content-Type": "x/%C3%A9",
        "Mqtt-Correlation-Data": "AP9jb3Jy",
        "Mqtt-User-Properties": json.dumps([["k", "1"], ["k", "2"], ["ü", "ö"]]),
    }
    nc.publish("mq.a.ü", b"hi", headers)
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == ("a/ü", b"hi", 0)
    mp: Any = m.properties
    assert mp is not None
    assert mp.ContentType == "x/é"
    assert mp.CorrelationData == b"\x00\xffcorr"
    assert mp.UserProperty == [("k", "1"), ("k", "2"), ("ü", "ö")]
    # Our own origin: dropped.
    nc.publish("mq.a.b", b"own", {"Mqtt-Origin": "edge-1", "Mqtt-Topic": "a/b"})
    wait_for(lambda: b.state()["import_own"] == 1)
    # Bad input: a subject that cannot become a topic, headers that are not ours.
    nc.publish("cmd.a+b", b"bad")
    nc.publish("cmd.$SYS", b"bad")
    nc.publish("mq.q", b"bad", {"Mqtt-Origin": "x", "Mqtt-Qos": "7"})
    nc.publish("mq.q", b"bad", {"Mqtt-Origin": "x", "Mqtt-Topic": "other/topic"})
    nc.publish("mq.q", b"bad", {"Mqtt-Origin": "x", "Mqtt-User-Properties": "{"})
    wait_for(lambda: b.state()["import_bad_headers"] == 3)
    wait_for(lambda: b.state()["import_bad_subject"] == 1)
    # cmd.$SYS -> topic cmd/$SYS: fine (only a first level is reserved).
    assert sub.get().topic == "cmd/$SYS"
    assert sub.none_within(0.3)
    sub.disconnect()


def _published(nc: NatsClient, subject: str, payload: bytes, sub: Paho) -> bool:
    """Publish until the broker's subscription is in place (it subscribes once connected)."""
    nc.publish(subject, payload)
    try:
        sub.messages.put(sub.get(timeout=0.5))
    except queue.Empty:
        return False
    return True


def test_a_rule_pair_that_would_loop_does_not(
    nats_server: NatsServer, nc: NatsClient, start_broker: Callable[..., BridgedBroker]
) -> None:
    """Forward 'loop/#' and import the same subjects back: every message arrives once on
    MQTT and once on NATS."""
    b = start_broker(
        {
            "servers": [nats_server.url],
            "name": "edge-1",
            "subject_prefix": "p",
            "forward": [{"filter": "loop/#"}],
            "import": [{"subject": "p.loop.>", "qos": 1}],
        }
    )
    connected(b)
    watch = nc.subscribe("p.>")
    sub = Paho(b.port, "loop-sub")
    sub.connect()
    sub.subscribe("loop/#", qos=1)
    pub = Paho(b.port, "loop-pub")
    pub.connect()
    for i in range(20):
        pub.publish(f"loop/{i}", str(i), qos=1)
    got = sorted(int(sub.get().payload) for _ in range(20))
    assert got == list(range(20))
    assert sorted(int(watch.get(timeout=10).data) for _ in range(20)) == list(range(20))
    assert sub.none_within(0.5)
    assert watch.empty()
    # Another broker's message on the same subjects comes in once and does not go back out.
    nc.publish("p.loop.x", b"from-nats", {"Mqtt-Origin": "edge-9", "Mqtt-Topic": "loop/x"})
    assert sub.get().payload == b"from-nats"
    assert watch.get(timeout=10).data == b"from-nats"  # (the test's own publish)
    assert sub.none_within(0.5)
    assert watch.empty()
    assert b.state()["forwarded"] == 20
    pub.disconnect()
    sub.disconnect()


def test_import_jetstream_acks_after_commit(
    nats_server: NatsServer,
    nc: NatsClient,
    start_broker: Callable[..., BridgedBroker],
    tmp_path: pathlib.Path,
) -> None:
    """A durable pull consumer on a NATS stream: everything arrives (stored for a persistent
    session first), and the consumer ends with nothing pending."""
    nc.run(nc.js.add_stream(name="CMD", subjects=["cmd.>"]))
    for i in range(100):
        nc.run(nc.js.publish(f"cmd.{i % 5}", str(i).encode()))
    # A persistent session subscribed before the bridge starts: every import is stored.
    b = start_broker({"servers": [nats_server.url], "name": "edge-1"}, data="d1")
    sub = Paho(b.port, "js-sub")
    sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600))
    sub.subscribe("cmd/#", qos=1)
    sub.disconnect()
    b.stop()
    b = BridgedBroker(
        bridge_config(
            tmp_path / "d1",
            {
                "servers": [nats_server.url],
                "name": "edge-1",
                "import": [
                    {"subject": "cmd.>", "qos": 1, "stream": "CMD", "durable": "edge-1-cmd"}
                ],
            },
        )
    ).start()
    try:
        wait_for(lambda: b.state()["imported"] == 100)
        info = nc.run(nc.js.consumer_info("CMD", "edge-1-cmd"))
        wait_for(lambda: nc.run(nc.js.consumer_info("CMD", "edge-1-cmd")).num_ack_pending == 0)
        assert info.config.ack_policy == "explicit"
        sub = Paho(b.port, "js-sub")
        sub.connect(
            clean_start=False, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
        )
        got = sorted(int(sub.get().payload) for _ in range(100))
        assert got == list(range(100))
        sub.disconnect()
    finally:
        b.stop()


def test_forward_jetstream_at_least_once_with_msg_ids(
    nats_server: NatsServer, nc: NatsClient, start_broker: Callable[..., BridgedBroker]
) -> None:
    nc.run(nc.js.add_stream(name="SENS", subjects=["sensors.>"]))
    b = start_broker(
        {
            "servers": [nats_server.url],
            "name": "edge-1",
            "forward": [{"filter": "sensors/#", "mode": "jetstream", "min_qos": 1}],
        }
    )
    pub = Paho(b.port, "js-pub")
    pub.connect()
    for i in range(200):
        pub.publish(f"sensors/{i % 7}", str(i), qos=1)
    pub.publish("sensors/q0", "below min_qos", qos=0)
    wait_for(lambda: nc.run(nc.js.stream_info("SENS")).state.messages == 200)
    wait_for(lambda: b.state()["pending"] == 0)
    st = b.state()
    assert st["js_published"] == 200
    assert st["captured"] == 200
    assert st["in_flight"] == 0
    ids = set()
    for seq in range(1, 201):
        m = nc.run(nc.js.get_msg("SENS", seq))
        assert m.headers is not None
        ids.add(m.headers["Nats-Msg-Id"])
        assert m.headers["Mqtt-Origin"] == "edge-1"
    assert len(ids) == 200
    assert all(i.startswith("edge-1:$MQTT_bridge:") for i in ids)
    pub.disconnect()


def _serves(b: BridgedBroker) -> None:
    """The broker serves MQTT on its own: a local publish reaches a local subscriber."""
    sub = Paho(b.port, "local-sub")
    sub.connect()
    sub.subscribe("local/#", qos=1)
    pub = Paho(b.port, "local-pub")
    pub.connect()
    pub.publish("local/x", "here", qos=1)
    assert sub.get().payload == b"here"
    pub.disconnect()
    sub.disconnect()


def test_an_unreachable_nats_url_is_logged_and_counted_and_the_broker_serves(
    start_broker: Callable[..., BridgedBroker],
) -> None:
    from tests.natsserver import free_port

    b = start_broker(
        {
            "servers": [f"nats://127.0.0.1:{free_port()}"],
            "name": "edge-1",
            "forward": [{"filter": "local/#"}],
        }
    )
    _serves(b)
    wait_for(lambda: b.state()["connect_failures"] >= 2)
    st = b.state()
    assert st["connected"] is False
    assert "Connect call failed" in st["last_error"] or "refused" in st["last_error"].lower()
    assert st["forward_dropped"] >= 1  # the local publish could not go to NATS


def test_bad_credentials_are_logged_and_counted_and_the_broker_serves(
    tmp_path: pathlib.Path,
    start_broker: Callable[..., BridgedBroker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = NatsServer(
        tmp_path / "auth",
        config="listen: 127.0.0.1:{port}\nauthorization { user: u, password: right }\n",
        name="auth",
    ).start()
    try:
        b = start_broker(
            {"servers": [server.url], "name": "edge-1", "user": "u", "password": "wrong"}
        )
        _serves(b)
        wait_for(lambda: b.state()["connect_failures"] >= 1)
        # The server's refusal is logged (the last error may be the reset that follows it).
        wait_for(lambda: "Authorization Violation" in caplog.text)
        assert b.state()["connected"] is False
        # The right password connects.
        good = start_broker(
            {"servers": [server.url], "name": "edge-2", "user": "u", "password": "right"},
            data="good",
        )
        connected(good)
    finally:
        server.kill9()


def test_token_authentication(
    tmp_path: pathlib.Path, start_broker: Callable[..., BridgedBroker]
) -> None:
    server = NatsServer(
        tmp_path / "tok", config="listen: 127.0.0.1:{port}\nauthorization { token: s3cret }\n"
    ).start()
    try:
        bad = start_broker({"servers": [server.url], "name": "edge-1", "token": "nope"})
        good = start_broker(
            {"servers": [server.url], "name": "edge-2", "token": "s3cret"}, data="good"
        )
        connected(good)
        wait_for(lambda: bad.state()["connect_failures"] >= 1)
        assert bad.state()["connected"] is False
    finally:
        server.kill9()


def _make_certs(d: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A CA and a server certificate for 127.0.0.1 (openssl)."""
    import subprocess

    ca_key, ca, key, csr, cert = (d / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem"))
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "1", "-subj", "/CN=jetmq test CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


def test_tls_with_a_ca_file(
    tmp_path: pathlib.Path, start_broker: Callable[..., BridgedBroker]
) -> None:
    ca, cert, key = _make_certs(tmp_path)
    server = NatsServer(
        tmp_path / "tls",
        config=f'listen: 127.0.0.1:{{port}}\ntls {{ cert_file: "{cert}", key_file: "{key}" }}\n',
    ).start()
    nc: NatsClient | None = None
    try:
        import ssl

        nc = NatsClient(server.url, tls=ssl.create_default_context(cafile=str(ca)))
        got = nc.subscribe("tls.>")
        b = start_broker(
            {
                "servers": [f"tls://127.0.0.1:{server.port}"],
                "name": "edge-1",
                "tls_ca": str(ca),
                "subject_prefix": "tls",
                "forward": [{"filter": "x/#"}],
            }
        )
        connected(b)
        pub = Paho(b.port, "tls-pub")
        pub.connect()
        pub.publish("x/y", "secure", qos=1)
        assert got.get(timeout=10).data == b"secure"
        pub.disconnect()
        # Without the CA the server is not trusted: refused, counted, the broker serves on.
        other = start_broker(
            {"servers": [f"tls://127.0.0.1:{server.port}"], "name": "edge-2"}, data="other"
        )
        wait_for(lambda: other.state()["connect_failures"] >= 1)
        assert other.state()["connected"] is False
    finally:
        if nc is not None:
            nc.close()
        server.kill9()
