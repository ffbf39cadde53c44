"""One log line per connect and disconnect (client id, address, protocol, reason), as text
or JSON, never with a payload or a password."""

from __future__ import annotations

import json
import logging
import pathlib
import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from broker.config import LogConfig
from broker.ops import logs
from tests.broker.pahoclient import Paho
from tests.ops.harness import ops_broker, ops_config


class Lines(logging.Handler):
    """The jetmq.client records, waited for by content."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 10.0) -> logging.LogRecord:
        with self._changed:
            found: list[logging.LogRecord] = []

            def match() -> bool:
                found[:] = [r for r in self.records if text in r.getMessage()]
                return bool(found)

            assert self._changed.wait_for(match, timeout), [r.getMessage() for r in self.records]
            return found[0]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("jetmq.client")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


@pytest.mark.timeout(60)
def test_connect_and_disconnect_lines(tmp_path: pathlib.Path, lines: Lines) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        c = Paho(broker.port, "log-1")
        c.client.username_pw_set("alice", "s3cret-password")
        c.connect()
        c.publish("log/t", b"secret-payload", qos=1)
        c.disconnect()
        up = lines.wait_for("'log-1' connected from 127.0.0.1:")
        assert up.getMessage().endswith("(MQTT 5.0, clean start yes, keep alive 60)")
        assert up.__dict__["client_id"] == "log-1"
        assert up.__dict__["protocol"] == "5.0"
        down = lines.wait_for("'log-1' disconnected")
        assert down.getMessage().endswith(": DISCONNECT from the client (0x00)")
        assert down.__dict__["reason"] == "DISCONNECT from the client (0x00)"

        first = Paho(broker.port, "log-2")
        first.connect()
        second = Paho(broker.port, "log-2")
        second.connect()  # takes the session over
        line = lines.wait_for("'log-2' disconnected").getMessage()
        assert line.endswith("another connection used this client id (0x8e)")
        second.disconnect()
        first.disconnect()

        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
            # CONNECT, MQTT 3.1.1, client id "log-3", then a close without DISCONNECT.
            raw.sendall(b"\x10\x11\x00\x04MQTT\x04\x02\x00\x3c\x00\x05log-3")
            assert raw.recv(4) == b"\x20\x02\x00\x00"
        line = lines.wait_for("'log-3' disconnected").getMessage()
        assert "(MQTT 3.1.1): closed by the client without DISCONNECT" in line
    for record in lines.records:
        text = record.getMessage() + json.dumps({k: str(v) for k, v in record.__dict__.items()})
        assert "secret-payload" not in text
        assert "s3cret-password" not in text


def test_json_lines_carry_the_fields() -> None:
    formatter = logs.JsonFormatter()
    record = logging.LogRecord(
        "jetmq.client", logging.INFO, __file__, 1, "client %r up", ("x",), None
    )
    record.client_id = "x"
    record.address = "127.0.0.1:5"
    out = json.loads(formatter.format(record))
    assert out["msg"] == "client 'x' up"
    assert out["level"] == "info"
    assert out["logger"] == "jetmq.client"
    assert out["client_id"] == "x"
    assert out["address"] == "127.0.0.1:5"
    assert "reason" not in out
    assert out["ts"].endswith("Z")
    assert "T" in out["ts"]


def _is_json(logger: logging.Logger) -> bool:
    return isinstance(logger.handlers[0].formatter, logs.JsonFormatter)


def test_setup_switches_level_and_format() -> None:
    root = logging.getLogger("jetmq")
    saved = (root.handlers[:], root.level, root.propagate)
    try:
        logs.setup(LogConfig(level="warning", format="json"))
        assert root.getEffectiveLevel() == logging.WARNING
        assert _is_json(root)
        logs.setup(LogConfig(level="debug", format="text"))
        assert root.getEffectiveLevel() == logging.DEBUG
        assert not _is_json(root)
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        assert handler.stream is sys.stderr
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
