"""Fixtures: a real nats-server with JetStream on a free loopback port, and a nats-py
client of it for the test's side."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.bridge.harness import NatsClient
from tests.natsserver import NatsServer


@pytest.fixture
def nats_server(tmp_path: pathlib.Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.kill9()


@pytest.fixture
def nc(nats_server: NatsServer) -> Iterator[NatsClient]:
    client = NatsClient(nats_server.url)
    yield client
    client.close()
