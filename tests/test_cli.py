"""The ``jetmq`` console script as a user runs it."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from broker import __version__
from tests.broker.harness import BrokerProcess


def _jetmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    out = _jetmq("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"jetmq {__version__}"


def test_help_lists_serve() -> None:
    out = _jetmq("--help")
    assert out.returncode == 0
    assert "serve" in out.stdout
    assert "usage: jetmq" in out.stdout


def test_serve_starts_and_stops_cleanly_on_sigterm(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    assert broker.port > 0
    assert broker.terminate() == 0
    assert (tmp_path / "data").is_dir()


def test_serve_refuses_a_bad_config_naming_the_key(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j.toml"
    path.write_text("[storage]\nsync = 'never'\n")
    out = _jetmq("serve", "--config", str(path))
    assert out.returncode == 1
    assert "storage.sync (line 2)" in out.stderr


def test_check_config_reports_errors_with_the_key(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j.toml"
    path.write_text("[mqtt]\nmaximum_qos = 7\n")
    out = _jetmq("check-config", "--config", str(path))
    assert out.returncode == 1
    assert "mqtt.maximum_qos (line 2)" in out.stderr


def test_check_config_accepts_the_example() -> None:
    example = pathlib.Path(__file__).resolve().parents[1] / "etc" / "jetmq.toml"
    out = _jetmq("check-config", "--config", str(example))
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stdout
