"""The status page's NATS bridge and JetStream state: ``/api/bridge`` and ``/api/stats``
through a real broker bridged to a real nats-server, and the page in headless Chromium."""

from __future__ import annotations

import json
import pathlib
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.broker.pahoclient import Paho
from tests.natsserver import NatsServer
from tests.ops.harness import http_get, ops_broker, ops_config
from tests.ops.test_status_page import CHROMIUM, _chromium


def _api(port: int, path: str) -> Any:
    status, ctype, body = http_get(port, path)
    assert status == 200
    assert ctype == "application/json"
    return json.loads(body)


def _wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _bridge(url: str) -> dict[str, Any]:
    return {"servers": [url], "name": "edge-1", "forward": [{"filter": "up/#"}]}


@pytest.mark.timeout(60)
def test_api_bridge_without_a_bridge(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        assert _api(broker.http_port, "/api/bridge") == {"configured": False}
        stats = _api(broker.http_port, "/api/stats")
        assert stats["jetstream_enabled"] == 1
        assert (stats["jetstream_streams"], stats["jetstream_consumers"]) == (0, 0)


@pytest.mark.timeout(90)
def test_api_bridge_follows_the_nats_connection(tmp_path: pathlib.Path) -> None:
    nats = NatsServer(tmp_path / "nats").start()
    try:
        config = ops_config(tmp_path / "data", bridge=_bridge(nats.url))
        with ops_broker(config) as broker:
            port = broker.http_port
            _wait_for(lambda: _api(port, "/api/bridge")["connected"])
            b = _api(port, "/api/bridge")
            assert b["configured"] is True
            assert b["name"] == "edge-1"
            assert str(nats.port) in b["server"]
            assert b["connects"] == 1
            assert (b["in_flight"], b["pending"], b["forward_queue"]) == (0, 0, 0)
            c = Paho(broker.port, "bridge-pub")
            c.connect()
            try:
                for i in range(3):
                    c.publish("up/t", b"%d" % i, qos=1)
            finally:
                c.disconnect()
            _wait_for(lambda: _api(port, "/api/bridge")["forwarded"] == 3)
            stats = _api(port, "/api/stats")
            assert stats["bridge_connected"] == 1
            assert stats["bridge_forwarded"] == 3
            nats.kill9()
            _wait_for(lambda: not _api(port, "/api/bridge")["connected"])
            b = _api(port, "/api/bridge")
            assert b["configured"] is True
            assert b["forwarded"] == 3
    finally:
        nats.kill9()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_the_status_page_shows_the_bridge_and_jetstream(tmp_path: pathlib.Path) -> None:
    nats = NatsServer(tmp_path / "nats").start()
    try:
        config = ops_config(tmp_path / "data", bridge=_bridge(nats.url))
        with ops_broker(config) as broker:
            _wait_for(lambda: _api(broker.http_port, "/api/bridge")["connected"])
            url = f"http://127.0.0.1:{broker.http_port}/"
            out = _chromium(tmp_path, "--dump-dom", url)
            assert out.returncode == 0, out.stderr
            dom = out.stdout
            assert re.search(r'id="bridge_state">connected<', dom), dom
            assert re.search(r'id="jetstream">0 streams · 0 consumers<', dom), dom
            assert "<td>server</td>" in dom
            assert '<section id="bridge_section">' in dom
            assert f"127.0.0.1:{nats.port}" in dom
            assert "<td>forwarded</td>" in dom
            assert "<td>edge-1</td>" in dom
            assert "broker unreachable" not in dom
            shot = tmp_path / "status.png"
            out = _chromium(tmp_path, "--window-size=1200,1600", f"--screenshot={shot}", url)
            assert out.returncode == 0, out.stderr
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        nats.kill9()
