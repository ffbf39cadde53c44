"""Fixtures: a real broker on 127.0.0.1 port 0 with LMDB in a temp dir."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.broker.harness import BrokerThread, make_config


@pytest.fixture
def make_broker(tmp_path: pathlib.Path) -> Iterator[Callable[..., BrokerThread]]:
    started: list[BrokerThread] = []

    def start(
        data_dir: pathlib.Path | None = None, sessions: dict[str, Any] | None = None, **mqtt: Any
    ) -> BrokerThread:
        broker = BrokerThread(make_config(data_dir or tmp_path / "data", sessions=sessions, **mqtt))
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(make_broker: Callable[..., BrokerThread]) -> BrokerThread:
    return make_broker()
