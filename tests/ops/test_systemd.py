"""The units in etc/ as systemd reads them, and socket activation with systemd's own
``systemd-socket-activate`` (Debian package ``systemd``)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.broker.pahoclient import Paho

ROOT = pathlib.Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")
ACTIVATE = shutil.which("systemd-socket-activate")
MAX_EXPOSURE = 2.0  # systemd-analyze security: "OK" is below 4.0; the unit scores 1.1


def _units(tmp_path: pathlib.Path) -> pathlib.Path:
    """The units with ExecStart pointing at this venv's jetmq (verify checks that the
    program exists; /opt/jetmq is where docs/install.md puts it)."""
    jetmq = pathlib.Path(sys.executable).with_name("jetmq")
    service = (ROOT / "etc/jetmq.service").read_text()
    assert "ExecStart=/opt/jetmq/bin/jetmq serve --config /etc/jetmq/jetmq.toml" in service
    (tmp_path / "jetmq.service").write_text(service.replace("/opt/jetmq/bin/jetmq", str(jetmq)))
    shutil.copy(ROOT / "etc/jetmq.socket", tmp_path / "jetmq.socket")
    return tmp_path


@pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (apt-get install systemd)"
)
@pytest.mark.timeout(120)
def test_the_units_verify(tmp_path: pathlib.Path) -> None:
    assert ANALYZE is not None
    units = _units(tmp_path)
    out = subprocess.run(
        [ANALYZE, "verify", str(units / "jetmq.service"), str(units / "jetmq.socket")],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=units,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr


@pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (apt-get install systemd)"
)
@pytest.mark.timeout(120)
def test_the_service_is_hardened(tmp_path: pathlib.Path) -> None:
    assert ANALYZE is not None
    units = _units(tmp_path)
    out = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(units / "jetmq.service")],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=units,
    )
    found = re.search(r"Overall exposure level for jetmq.service: ([0-9.]+) (\w+)", out.stdout)
    assert found is not None, out.stdout + out.stderr
    score = float(found.group(1))
    print(f"systemd-analyze security: {score} {found.group(2)}")
    assert score <= MAX_EXPOSURE, out.stdout
    for line in ("NoNewPrivileges=", "PrivateTmp=", "RestrictAddressFamilies=~AF_PACKET"):
        assert any(row.startswith("✓ " + line) for row in out.stdout.splitlines()), line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.skipif(
    ACTIVATE is None, reason="systemd-socket-activate not installed (apt-get install systemd)"
)
@pytest.mark.timeout(90)
def test_socket_activation_serves_on_the_passed_socket(tmp_path: pathlib.Path) -> None:
    """systemd-socket-activate binds the port and starts jetmq on the first connection with
    LISTEN_FDS=1: the broker adopts fd 3 (the [listener] address is not used) and paho
    clients talk through it."""
    assert ACTIVATE is not None
    port = _free_port()
    cmd = [
        ACTIVATE,
        "-l",
        f"127.0.0.1:{port}",
        "--fdname=mqtt",
        sys.executable,
        "-m",
        "broker",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ)
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: list[str] = []
    pump = threading.Thread(target=lambda: lines.extend(stdout), daemon=True)
    try:
        first = stdout.readline()  # the activator listens before it says so
        assert first.startswith("Listening on"), first
        pump.start()
        sub, pub = Paho(port, "sa-sub"), Paho(port, "sa-pub")
        sub.connect()  # the first connection starts jetmq with the socket
        sub.subscribe("sa/t", qos=1)
        pub.connect()
        pub.publish("sa/t", b"through the passed socket", qos=1)
        assert sub.get().payload == b"through the passed socket"
        pub.disconnect()
        sub.disconnect()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        pump.join(timeout=10)
        stdout.close()
    text = "".join(lines)
    assert code == 0, text
    assert "socket activation: listening on fd 3 (mqtt)" in text, text
    assert f"jetmq: listening on 127.0.0.1:{port}" in text, text
