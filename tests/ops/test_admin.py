"""``jetmq status``, ``clients``, ``subs`` against a running broker and ``jetmq backup``
while one runs (the copy is then served by another broker)."""

from __future__ import annotations

import json
import pathlib

import pytest

from broker.cli import main
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho, props
from tests.ops.harness import ops_broker, ops_config


@pytest.mark.timeout(60)
def test_status_clients_and_subs(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        c = Paho(broker.port, "admin-client")
        c.connect()
        c.subscribe("admin/#", qos=1)
        try:
            assert main(["status", "--broker", f"127.0.0.1:{broker.port}"]) == 0
            out = capsys.readouterr().out
            assert "version:" in out
            assert "jetmq version" in out
            assert "streams:" in out
            http = f"127.0.0.1:{broker.http_port}"
            assert main(["clients", "--http", http]) == 0
            lines = capsys.readouterr().out.splitlines()
            assert lines[0].split() == [
                "client_id",
                "connected",
                "protocol",
                "subscriptions",
                "queued",
            ]
            assert lines[1].split() == ["admin-client", "True", "5.0", "1", "0"]
            assert main(["subs", "--http", http, "--json"]) == 0
            subs = json.loads(capsys.readouterr().out)
            assert subs == [{"client_id": "admin-client", "filter": "admin/#", "qos": 1}]
        finally:
            c.disconnect()


def test_the_verbs_say_what_is_missing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["clients"]) == 1
    assert "no HTTP API: set [http] bind" in capsys.readouterr().err
    assert main(["backup", str(tmp_path / "b"), "--data-dir", str(tmp_path / "none")]) == 1
    assert "no store here" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_backup_while_the_broker_runs(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        pub = Paho(broker.port, "bk-pub")
        sub = Paho(broker.port, "bk-sub")
        sub.connect(clean_start=False, properties=props(1, SessionExpiryInterval=3600))
        sub.subscribe("bk/#", qos=1)
        sub.disconnect()  # a persistent session with queued messages to back up
        pub.connect()
        pub.publish("bk/retained", b"kept", qos=1, retain=True)
        for i in range(20):
            pub.publish("bk/q", b"%d" % i, qos=1)
        dest = tmp_path / "backup"
        assert main(["backup", str(dest), "--data-dir", str(tmp_path / "data")]) == 0
        assert "streams" in capsys.readouterr().out
        pub.publish("bk/after", b"not in the backup", qos=1, retain=True)  # still serving
        pub.disconnect()
        assert main(["backup", str(dest), "--data-dir", str(tmp_path / "data")]) == 1
        assert "not empty" in capsys.readouterr().err
    finally:
        assert broker.terminate() == 0
    restored = BrokerProcess(dest)
    restored.start()
    try:
        again = Paho(restored.port, "bk-sub")
        flags, _rc, _props = again.connect(
            clean_start=False, properties=props(1, SessionExpiryInterval=3600)
        )
        assert flags.session_present
        got = sorted(again.get().payload for _ in range(21))  # bk/retained matched too
        assert got == sorted([b"kept", *(b"%d" % i for i in range(20))])
        again.disconnect()
        reader = Paho(restored.port, "bk-reader")
        reader.connect()
        reader.subscribe("bk/+", qos=1)
        assert reader.get().payload == b"kept"
        reader.disconnect()
    finally:
        assert restored.terminate() == 0
