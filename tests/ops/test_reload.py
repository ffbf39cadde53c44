"""SIGHUP to a running ``jetmq serve``: the --config file is read again and applied (log
level and format, limits); what needs a restart is named; a broken file keeps the
configuration in use."""

from __future__ import annotations

import json
import pathlib
import signal

import pytest

from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho


def _hup(broker: BrokerProcess) -> str:
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGHUP)
    broker.wait_for_output("SIGHUP: reloading")
    return broker.wait_for_output("SIGHUP: configuration")


def _connect(broker: BrokerProcess, client_id: str) -> dict[str, object]:
    """Connect and disconnect an MQTT 5 client; its CONNACK properties."""
    c = Paho(broker.port, client_id)
    try:
        _flags, rc, props = c.connect()
        assert rc == 0
        return props.json()  # type: ignore[no-any-return]
    finally:
        c.disconnect()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sighup_applies_log_level_format_and_limits(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "jetmq.toml"
    conf.write_text('[log]\nlevel = "warning"\n[mqtt]\nreceive_maximum = 100\n')
    broker = BrokerProcess(tmp_path / "data", config=conf)
    broker.start()
    try:
        assert _connect(broker, "before")["ReceiveMaximum"] == 100
        conf.write_text('[log]\nlevel = "info"\nformat = "json"\n[mqtt]\nreceive_maximum = 77\n')
        assert _hup(broker).strip() == "jetmq: SIGHUP: configuration reloaded"
        assert _connect(broker, "after")["ReceiveMaximum"] == 77
        line = broker.wait_for_output('"client_id": "after"')
        record = json.loads(line)
        assert record["level"] == "info"
        assert record["logger"] == "jetmq.client"
        assert record["protocol"] == "5.0"
        assert record["address"].startswith("127.0.0.1:")
        assert record["ts"].endswith("Z")
        # At "warning" the first client's connect was not logged.
        assert not any("'before' connected" in out for out in broker.output), broker.output
    finally:
        assert broker.terminate() == 0


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_broken_file_keeps_the_configuration_in_use(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "jetmq.toml"
    conf.write_text("[mqtt]\nreceive_maximum = 100\n")
    broker = BrokerProcess(tmp_path / "data", config=conf)
    broker.start()
    try:
        conf.write_text("[mqtt]\nreceive_maximum = 0\n")
        assert "not reloaded" in _hup(broker)
        assert any("mqtt.receive_maximum (line 2): 0" in out for out in broker.output)
        conf.write_text("[mqtt\nreceive_maximum = 5\n")
        assert "not reloaded" in _hup(broker)
        assert any("not valid TOML" in out for out in broker.output)
        assert _connect(broker, "still")["ReceiveMaximum"] == 100
        broker.wait_for_output("'still' connected")  # log level "info" still applies
    finally:
        assert broker.terminate() == 0


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_what_needs_a_restart_is_named_and_kept(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "jetmq.toml"
    conf.write_text("[mqtt]\nreceive_maximum = 100\n")
    broker = BrokerProcess(tmp_path / "data", config=conf)
    broker.start()
    try:
        conf.write_text('[mqtt]\nreceive_maximum = 50\n[http]\nbind = "127.0.0.1:0"\n')
        line = _hup(broker)
        assert line.strip() == "jetmq: SIGHUP: configuration reloaded; restart to apply http"
        assert any("reload: [http] changed but needs a restart" in o for o in broker.output)
        assert _connect(broker, "limits")["ReceiveMaximum"] == 50  # the rest applied
        assert not any("jetmq: http on" in out for out in broker.output)
    finally:
        assert broker.terminate() == 0
