"""Fixtures: a real broker (JetStream on) on 127.0.0.1 port 0, LMDB in a temp dir."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker.config import load_config
from tests.broker.harness import BrokerThread
from tests.jetstream.jsclient import JsClient


def js_config(data_dir: pathlib.Path, **jetstream: Any) -> Any:
    overrides: dict[str, dict[str, Any]] = {
        "listener": {"listen": ["127.0.0.1:0"]},
        "storage": {"data_dir": str(data_dir), "sync": "batch"},
    }
    if jetstream:
        overrides["jetstream"] = jetstream
    return load_config(None, overrides)


@pytest.fixture
def make_broker(tmp_path: pathlib.Path) -> Iterator[Callable[..., BrokerThread]]:
    started: list[BrokerThread] = []

    def start(**jetstream: Any) -> BrokerThread:
        broker = BrokerThread(js_config(tmp_path / f"data{len(started)}", **jetstream))
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(make_broker: Callable[..., BrokerThread]) -> BrokerThread:
    return make_broker()


@pytest.fixture
def js(broker: BrokerThread) -> Iterator[JsClient]:
    client = JsClient(broker.port)
    yield client
    client.close()
