"""TLS listeners with certificates made at test time (trustme): server authentication,
client certificates, use_identity_as_username, a wrong CA refused, plain TCP to the TLS
port refused cleanly, ALPN ``mqtt``; paho clients."""

from __future__ import annotations

import pathlib
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable

import pytest
import trustme

from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import V5, V311, Paho
from tests.broker.rawclient import RawClient
from tests.security.conftest import Certs

pytestmark = pytest.mark.timeout(60)


def tls_toml(certs: Certs, **extra: str) -> str:
    tls = f'cert = "{certs.server_cert}", key = "{certs.server_key}"'
    for key, value in extra.items():
        tls += f", {key} = {value}"
    return f'[[listeners]]\nbind = "127.0.0.1:0"\ntls = {{ {tls} }}\n'


def tls_client(
    port: int,
    client_id: str,
    ca: str | pathlib.Path,
    cert: tuple[str, str] | None = None,
    protocol: int = V5,
) -> Paho:
    client = Paho(port, client_id, protocol=protocol)  # type: ignore[arg-type]
    certfile, keyfile = cert if cert is not None else (None, None)
    client.client.tls_set(ca_certs=str(ca), certfile=certfile, keyfile=keyfile)
    return client


def refused_by_tls(port: int, ca: pathlib.Path, cert: tuple[str, str] | None) -> bool:
    """Whether the broker ends a TLS connection before any MQTT (TLS 1.3 reports a
    refused client certificate after the client's side of the handshake, at the first
    read)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x01x")
                return tls.recv(10) == b""
        except (ssl.SSLError, OSError):
            return True


def test_server_authentication_and_messages_over_tls(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs))
    sub = tls_client(broker.port, "tls-sub", certs.ca_file)
    pub = tls_client(broker.port, "tls-pub", certs.ca_file, protocol=V311)
    try:
        assert sub.connect()[1] == 0
        sub.subscribe("tls/#", qos=1)
        assert pub.connect()[1] == 0
        pub.publish("tls/a", b"secret payload", qos=1)
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("tls/a", b"secret payload")
    finally:
        pub.disconnect()
        sub.disconnect()


def test_alpn_mqtt_is_chosen_when_offered(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs))
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    ctx.set_alpn_protocols(["mqtt"])
    with (
        socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.selected_alpn_protocol() == "mqtt"


def test_client_certificate_required(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs, ca=f'"{certs.ca_file}"', require_client_cert="true"))
    good = tls_client(broker.port, "with-cert", certs.ca_file, certs.client("device-1"))
    try:
        assert good.connect()[1] == 0
    finally:
        good.disconnect()
    # No certificate, or one from another CA: the handshake fails, the broker goes on.
    assert refused_by_tls(broker.port, certs.ca_file, None)
    assert refused_by_tls(broker.port, certs.ca_file, certs.client("intruder", trustme.CA()))
    again = tls_client(broker.port, "again", certs.ca_file, certs.client("device-2"))
    try:
        assert again.connect()[1] == 0  # nothing else was affected
    finally:
        again.disconnect()


def test_client_refuses_a_server_signed_by_another_ca(
    certs: Certs, start_broker: Callable[[str], BrokerThread], tmp_path: pathlib.Path
) -> None:
    broker = start_broker(tls_toml(certs))
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    ctx = ssl.create_default_context(cafile=str(other))
    with (
        socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1").close()


def test_use_identity_as_username_with_the_acl(
    certs: Certs, start_broker: Callable[[str], BrokerThread], tmp_path: pathlib.Path
) -> None:
    acl = tmp_path / "acl"
    acl.write_text("user sensor-7\ntopic readwrite sensors/7/#\n", encoding="utf-8")
    toml = tls_toml(certs, ca=f'"{certs.ca_file}"', require_client_cert="true")
    toml += f'use_identity_as_username = true\n[auth]\nacl_file = "{acl}"\n'
    broker = start_broker(toml)
    client = tls_client(broker.port, "any-id", certs.ca_file, certs.client("sensor-7"))
    try:
        assert client.connect()[1] == 0
        codes = client.subscribe("sensors/7/#", qos=1)
        assert [int(c.value) for c in codes] == [1]
        denied = client.subscribe("sensors/8/#", qos=1)
        assert [int(c.value) for c in denied] == [0x87]
        client.publish("sensors/7/t", b"21.5", qos=1)
        assert client.get().payload == b"21.5"
    finally:
        client.disconnect()


def test_plain_tcp_to_the_tls_port_is_refused_cleanly(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs))
    raw = RawClient(broker.port)
    raw.send_raw(b"\x10\x10\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x03abc")
    try:
        data = raw.sock.recv(100)  # a TLS alert, or nothing, then the close
        while data:
            assert not data.startswith(b"\x20")  # never a CONNACK
            data = raw.sock.recv(100)
    except ConnectionResetError:
        pass
    finally:
        raw.close()
    client = tls_client(broker.port, "after-plain", certs.ca_file)
    try:
        assert client.connect()[1] == 0
    finally:
        client.disconnect()


def test_tls_and_plain_listeners_side_by_side(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    toml = tls_toml(certs) + '[[listeners]]\nbind = "127.0.0.1:0"\n'
    broker = start_broker(toml)
    tls_port, plain_port = (port for _host, port in broker.addresses)
    sub = Paho(plain_port, "plain-sub")
    pub = tls_client(tls_port, "tls-pub", certs.ca_file)
    try:
        sub.connect()
        sub.subscribe("mix/#")
        pub.connect()
        pub.publish("mix/x", b"across", qos=1)
        assert sub.get().payload == b"across"
    finally:
        pub.disconnect()
        sub.disconnect()


def test_min_version_1_3_refuses_tls_1_2(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs, min_version='"1.3"'))
    old = ssl.create_default_context(cafile=str(certs.ca_file))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        old.wrap_socket(raw, server_hostname="127.0.0.1").close()
    client = tls_client(broker.port, "modern", certs.ca_file)
    try:
        assert client.connect()[1] == 0
    finally:
        client.disconnect()


@pytest.mark.parametrize(
    ("listener", "message"),
    [
        (
            'tls = { cert = "c", key = "k", require_client_cert = true }',
            "require_client_cert needs tls.ca",
        ),
        ("use_identity_as_username = true", "use_identity_as_username needs tls with a ca"),
        ('transport = "mqtt"', r"listeners\[0\]\.transport \(line 3\): 'mqtt'"),
        (
            'tls = { cert = "c", key = "k", min_version = "1.1" }',
            r"listeners\[0\]\.tls\.min_version: '1\.1'",
        ),
    ],
)
def test_listener_config_errors_name_the_key(
    tmp_path: pathlib.Path, listener: str, message: str
) -> None:
    from broker.config import ConfigError, load_config

    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'[[listeners]]\nbind = "127.0.0.1:0"\n{listener}\n')
    with pytest.raises(ConfigError, match=message):
        load_config(cfg)


def test_unreadable_certificate_stops_the_start(tmp_path: pathlib.Path, certs: Certs) -> None:
    cfg = tmp_path / "missing.toml"
    cfg.write_text(
        f'[[listeners]]\nbind = "127.0.0.1:0"\n'
        f'tls = {{ cert = "{tmp_path / "nope.pem"}", key = "{certs.server_key}" }}\n'
    )
    cmd = [sys.executable, "-m", "broker", "serve", "--config", str(cfg)]
    proc = subprocess.run(
        [*cmd, "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=50
    )
    assert proc.returncode == 1
    assert "cannot start: tls: cannot load certificate, key or ca" in proc.stderr
