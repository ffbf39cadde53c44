"""The status page in headless Chromium (Debian package ``chromium``): the DOM after the
page's scripts ran against a live broker, and a screenshot."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

from tests.broker.pahoclient import Paho
from tests.ops.harness import ops_broker, ops_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"
    ),
]


def _chromium(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in a container
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",  # let the page poll the API a few times
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.timeout(180)
def test_the_status_page_shows_the_broker(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        c = Paho(broker.port, "page-client")
        c.connect()
        c.subscribe("page/+/temp", qos=1)
        try:
            url = f"http://127.0.0.1:{broker.http_port}/"
            out = _chromium(tmp_path, "--dump-dom", url)
            assert out.returncode == 0, out.stderr
            dom = out.stdout
            assert "<td>page-client</td>" in dom
            assert "<td>page/+/temp</td>" in dom
            assert "<td>$MQTT_msgs</td>" in dom
            assert re.search(r'id="clients_connected">1<', dom), dom
            assert re.search(r'id="subscriptions">1<', dom)
            assert 'id="rate_in">' in dom
            assert 'id="rate_in">\u2013<' not in dom
            assert "broker unreachable" not in dom
            # No [bridge]: the card says so and the bridge's table stays hidden.
            assert re.search(r'id="bridge_state">not configured<', dom), dom
            assert re.search(r'<section id="bridge_section" hidden', dom), dom
            shot = tmp_path / "status.png"
            out = _chromium(tmp_path, "--window-size=1200,1300", f"--screenshot={shot}", url)
            assert out.returncode == 0, out.stderr
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert shot.stat().st_size > 10_000
        finally:
            c.disconnect()
