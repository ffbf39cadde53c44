"""Fixtures: a real broker on 127.0.0.1 port 0 (in a thread), and both anyio backends."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.broker.harness import BrokerThread, make_config


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker(tmp_path: pathlib.Path) -> Iterator[BrokerThread]:
    b = BrokerThread(make_config(tmp_path / "data"))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def server(broker: BrokerThread) -> str:
    return f"mqtt://127.0.0.1:{broker.port}"


def jetstream_in_broker() -> bool:
    """Whether this checkout's broker serves the JetStream API (issue 21's server side,
    package ``broker.jetstream``); the JetStream tests need it."""
    import importlib.util

    return importlib.util.find_spec("broker.jetstream") is not None


needs_jetstream = pytest.mark.skipif(
    not jetstream_in_broker(), reason="broker.jetstream (the js-server branch) is not merged"
)
