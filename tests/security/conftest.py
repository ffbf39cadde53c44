"""Fixtures for the security tests: certificates made at test time (trustme), brokers
started from a jetmq.toml written in the test's temp dir, paho clients with TLS,
credentials and WebSocket."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import trustme

from broker.config import load_config
from tests.broker.harness import BrokerThread


@dataclass
class Certs:
    ca: trustme.CA
    ca_file: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    dir: pathlib.Path

    def client(self, name: str, ca: trustme.CA | None = None) -> tuple[str, str]:
        """A client certificate for common name ``name`` (signed by ``ca``, default ours):
        (cert file, key file)."""
        issued = (ca or self.ca).issue_cert(f"{name}.client.test", common_name=name)
        cert = self.dir / f"{name}-cert.pem"
        key = self.dir / f"{name}-key.pem"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        return str(cert), str(key)


@pytest.fixture
def certs(tmp_path: pathlib.Path) -> Certs:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path / "certs"
    d.mkdir()
    ca_file = d / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert, key = d / "server.pem", d / "server.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key))
    return Certs(ca, ca_file, cert, key, d)


@pytest.fixture
def start_broker(tmp_path: pathlib.Path) -> Iterator[Callable[[str], BrokerThread]]:
    """Start a broker from TOML text (the data dir is added); ``.addresses`` has every
    listener's bound address."""
    started: list[BrokerThread] = []

    def start(toml: str) -> BrokerThread:
        path = tmp_path / f"jetmq{len(started)}.toml"
        data = tmp_path / f"data{len(started)}"
        path.write_text(toml + f'\n[storage]\ndata_dir = "{data}"\n', encoding="utf-8")
        broker = BrokerThread(load_config(path))
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
