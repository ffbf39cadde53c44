"""Fixtures: a real nats-server with JetStream on a free loopback port."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.natsserver import NatsServer


@pytest.fixture
def nats_server(tmp_path: pathlib.Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.kill9()
