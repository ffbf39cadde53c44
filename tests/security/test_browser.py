"""MQTT.js (npm ``mqtt``, the client a dashboard uses) in headless Chromium, over
WebSocket to jetmq: a page served from 127.0.0.1 connects, subscribes at QoS 1, echoes
what a paho client sends it and reports over MQTT itself (no DOM scraping).

Needs ``node``/``npm`` (the package is installed at test time into a cache directory) and
``chromium`` (Debian: ``apt-get install chromium``); skipped with the reason otherwise."""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import Paho

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NPM = shutil.which("npm")
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
MQTT_JS = CACHE / "jetmq-tests" / "npm" / "node_modules" / "mqtt" / "dist" / "mqtt.min.js"

PAGE = """<!doctype html>
<html><head><script src="mqtt.min.js"></script></head><body><script>
const client = mqtt.connect("ws://127.0.0.1:%(port)d/mqtt",
  {clientId: "browser-1", protocolVersion: 5});
client.on("connect", () => {
  client.subscribe("browser/in", {qos: 1}, (err) => {
    client.publish("browser/ready", err ? "error " + err : "subscribed", {qos: 1});
  });
});
client.on("message", (topic, payload, packet) => {
  client.publish("browser/out", "echo:" + payload.toString() + ":qos" + packet.qos, {qos: 1});
});
</script></body></html>
"""


@pytest.fixture(scope="module")
def mqtt_js() -> pathlib.Path:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    if not MQTT_JS.exists():
        if NPM is None:
            pytest.skip("npm not installed: cannot fetch MQTT.js")
        MQTT_JS.parents[3].mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [NPM, "install", "--no-audit", "--no-fund", "--silent", "mqtt@5"],
            cwd=MQTT_JS.parents[3],
            check=True,
            timeout=150,
        )
    return MQTT_JS


@pytest.fixture
def page_server(tmp_path: pathlib.Path, mqtt_js: pathlib.Path) -> Iterator[Callable[[int], str]]:
    shutil.copy(mqtt_js, tmp_path / "mqtt.min.js")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def page(broker_port: int) -> str:
        (tmp_path / "index.html").write_text(PAGE % {"port": broker_port})
        return f"http://127.0.0.1:{server.server_address[1]}/index.html"

    yield page
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_mqtt_js_in_headless_chromium_over_websocket(
    tmp_path: pathlib.Path,
    page_server: Callable[[int], str],
    start_broker: Callable[[str], BrokerThread],
) -> None:
    assert CHROMIUM is not None
    broker = start_broker('[[listeners]]\nbind = "127.0.0.1:0"\ntransport = "ws"\n')
    url = page_server(broker.port)
    watcher = Paho(broker.port, "watcher", transport="websockets")
    assert watcher.connect()[1] == 0
    watcher.subscribe("browser/#", qos=1)
    profile = tmp_path / "chromium-profile"
    browser = subprocess.Popen(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",  # stays open until we end it
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = watcher.get(timeout=90)  # the browser's first word: it has subscribed
        assert (ready.topic, ready.payload) == ("browser/ready", b"subscribed")
        watcher.publish("browser/in", b"ping-42", qos=1)
        seen = [watcher.get(timeout=30) for _ in range(2)]  # our own copy and the echo
        echo = next(m for m in seen if m.topic == "browser/out")
        assert echo.payload == b"echo:ping-42:qos1"
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=20)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait(timeout=20)
        watcher.disconnect()
