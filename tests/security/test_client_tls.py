"""jetmq's own client (``client/``) and its CLI over TLS: ``mqtts://`` against a TLS
listener with certificates made at test time, a client certificate where the listener
requires one, and the refusals a user meets (an unknown CA, TLS options on a plain
address, no certificate where one is required)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from collections.abc import Callable

import anyio
import pytest

from client import Client, ConnectError
from client.url import parse_address, tls_context
from tests.broker.harness import BrokerThread
from tests.security.conftest import Certs
from tests.security.test_tls import tls_toml

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def mqtts(broker: BrokerThread) -> str:
    host, port = broker.addresses[0]
    return f"mqtts://{host}:{port}"


def test_addresses() -> None:
    assert parse_address("mqtts://h") == ("h", 8883, True)
    assert parse_address("ssl://h:1") == ("h", 1, True)
    assert parse_address("h:2") == ("h", 2, False)
    with pytest.raises(ValueError, match="needs its certificate"):
        tls_context(key_file="k.pem")
    with pytest.raises(ValueError, match=r"TLS CA file 'missing\.pem'"):
        tls_context("missing.pem")
    with pytest.raises(ValueError, match="needs an mqtts:// address"):
        Client("mqtt://127.0.0.1:1", tls=ssl.create_default_context())


@pytest.mark.anyio
async def test_round_trip_and_jetstream_over_tls(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs))
    tls = tls_context(str(certs.ca_file))
    with anyio.fail_after(20):
        async with Client(mqtts(broker), tls=tls) as a, Client(mqtts(broker), tls=tls) as b:
            sub = await a.subscribe("tls/#", qos=1)
            await b.publish("tls/x", b"over tls", 1)
            msg = await sub.next(5)
            assert (msg.topic, msg.payload) == ("tls/x", b"over tls")
            js = b.jetstream()
            await js.add_stream(name="TLS", subjects=["tls.>"])
            ack = await js.publish("tls/y", b"stored")
            assert (ack.stream, ack.seq) == ("TLS", 1)


@pytest.mark.anyio
async def test_an_unknown_ca_is_a_connect_error(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs))
    with anyio.fail_after(20), pytest.raises(ConnectError) as err:
        async with Client(mqtts(broker)):  # the system's CAs do not know ours
            pass
    assert str(err.value).startswith(f"cannot connect to {mqtts(broker)}: TLS: ")
    assert "certificate" in str(err.value)


@pytest.mark.anyio
async def test_a_client_certificate_where_one_is_required(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(tls_toml(certs, ca=f'"{certs.ca_file}"', require_client_cert="true"))
    cert, key = certs.client("device-1")
    with anyio.fail_after(20):
        async with Client(mqtts(broker), tls=tls_context(str(certs.ca_file), cert, key)) as c:
            assert (await c.publish("with/cert", b"x", 1)).reason_code.value == 0x10
        with pytest.raises(ConnectError):
            async with Client(mqtts(broker), tls=tls_context(str(certs.ca_file))) as c:
                await c.publish("without/cert", b"x", 1)


def jetmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
def test_cli_over_tls(certs: Certs, start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(tls_toml(certs))
    server = ("--server", mqtts(broker))
    ca = ("--tls-ca", str(certs.ca_file))
    added = jetmq("stream", "add", "CLI", "--subjects", "cli.>", *server, *ca)
    assert added.returncode == 0, added.stderr
    listed = jetmq("stream", "ls", "--json", *server, *ca)
    assert listed.returncode == 0, listed.stderr
    assert [s["config"]["name"] for s in json.loads(listed.stdout)] == ["CLI"]
    no_ca = jetmq("stream", "ls", *server)
    assert no_ca.returncode == 1
    assert no_ca.stderr.startswith(f"jetmq: cannot connect to {mqtts(broker)}: TLS: ")
    plain = jetmq("pub", "a", "b", "--server", "mqtt://127.0.0.1:1", *ca)
    assert plain.returncode == 1
    assert "--tls-* options need an mqtts:// --server" in plain.stderr
