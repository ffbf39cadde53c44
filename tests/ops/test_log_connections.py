"""``[log] connections = true|false``: the connect/disconnect lines by default, none with
false, a config error for anything but a boolean, and a reload (``Broker.apply_config``,
SIGHUP) that flips it for the connections that follow."""

from __future__ import annotations

import pathlib
import signal
import time

import pytest

from broker.config import ConfigError, load_config
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho
from tests.ops.harness import OpsBroker, ops_broker, ops_config
from tests.ops.test_logs import Lines, lines  # noqa: F401 (the fixture)


@pytest.mark.parametrize("value", ['"maybe"', '"false"', "1", "0"])
def test_connections_must_be_a_boolean(tmp_path: pathlib.Path, value: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[log]\nlevel = "info"\nconnections = {value}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"log.connections (line 3): {value.replace(chr(34), chr(39))}" in str(info.value)


def test_connections_default_to_true() -> None:
    assert load_config(None).log.connections is True
    assert load_config(None, {"log": {"connections": False}}).log.connections is False


def _visit(broker: OpsBroker, client_id: str) -> None:
    """Connect and disconnect; return once the broker has seen the disconnect."""
    c = Paho(broker.port, client_id)
    c.connect()
    c.disconnect()

    def connected() -> int:
        assert broker.ops is not None
        assert broker.ops.broker is not None
        return broker.ops.broker.stats.clients_connected

    # The disconnect line (if any) is written where the count drops.
    deadline = time.monotonic() + 10
    while broker.call(connected):
        assert time.monotonic() < deadline, f"{client_id} still connected"
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_lines_by_default_none_with_false_and_a_reload_flips_it(
    tmp_path: pathlib.Path,
    lines: Lines,  # noqa: F811
) -> None:
    data = tmp_path / "data"
    with ops_broker(ops_config(data, log={"connections": False})) as broker:
        _visit(broker, "quiet-1")
        assert broker.ops is not None
        assert broker.ops.broker is not None
        running = broker.ops.broker
        on = running.config.model_copy(
            update={"log": running.config.log.model_copy(update={"connections": True})}
        )
        assert broker.call(lambda: running.apply_config(on)) == []
        _visit(broker, "loud-1")
        lines.wait_for("'loud-1' connected from 127.0.0.1:")
        lines.wait_for("'loud-1' disconnected")
        off = on.model_copy(update={"log": on.log.model_copy(update={"connections": False})})
        assert broker.call(lambda: running.apply_config(off)) == []
        _visit(broker, "quiet-2")
        assert broker.call(lambda: running.apply_config(on)) == []
        _visit(broker, "loud-2")
        lines.wait_for("'loud-2' disconnected")
        said = [r.getMessage() for r in lines.records]
        assert not [m for m in said if "quiet-" in m], said
    with ops_broker(ops_config(tmp_path / "data2")) as broker:  # the default: lines
        _visit(broker, "default-1")
        lines.wait_for("'default-1' connected from 127.0.0.1:")
        lines.wait_for("'default-1' disconnected")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sighup_turns_connection_lines_on(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "jetmq.toml"
    conf.write_text('[log]\nlevel = "info"\nconnections = false\n')
    broker = BrokerProcess(tmp_path / "data", config=conf)
    broker.start()
    try:
        c = Paho(broker.port, "before")
        c.connect()
        c.disconnect()
        conf.write_text('[log]\nlevel = "info"\nconnections = true\n')
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        out = broker.wait_for_output("SIGHUP: configuration")
        assert out.strip() == "jetmq: SIGHUP: configuration reloaded"
        c = Paho(broker.port, "after")
        c.connect()
        c.disconnect()
        broker.wait_for_output("'after' disconnected")
        # The connect line is written before CONNACK; the disconnect of "before" may be
        # handled after the reload, so only its connect line is sure to be absent.
        assert not any("'before' connected" in line for line in broker.output), broker.output
    finally:
        assert broker.terminate() == 0
