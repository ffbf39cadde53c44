"""``Operations.apply``: what a reload changes in the running broker, what it keeps."""

from __future__ import annotations

import logging
import pathlib

import pytest

from broker.config import load_config
from tests.ops.harness import ops_broker, ops_config


@pytest.mark.timeout(60)
def test_apply_changes_what_it_can_and_names_the_rest(tmp_path: pathlib.Path) -> None:
    config = ops_config(tmp_path / "data", sys={"interval": 1})
    with ops_broker(config) as broker:
        ops = broker.ops
        assert ops is not None
        new = load_config(
            None,
            {
                "listener": {"listen": ["127.0.0.1:1"]},
                "storage": {"data_dir": str(tmp_path / "elsewhere")},
                "http": {"bind": "127.0.0.1:2"},
                "sys": {"interval": 0},
                "mqtt": {"receive_maximum": 9},
                "log": {"level": "debug"},
            },
        )
        root = logging.getLogger("jetmq")
        saved = (root.handlers[:], root.level, root.propagate)
        try:
            kept = broker.call(lambda: ops.apply(new))
            assert kept == ["http", "listener", "storage"]
            running = broker.call(lambda: ops.broker.config)  # type: ignore[union-attr]
            assert running.sys.interval == 0
            assert running.mqtt.receive_maximum == 9
            assert running.listener == config.listener
            assert running.storage == config.storage
            assert running.http == config.http
            assert root.getEffectiveLevel() == logging.DEBUG
        finally:
            root.handlers[:] = saved[0]
            root.setLevel(saved[1])
            root.propagate = saved[2]
