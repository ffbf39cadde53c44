"""The ``jetmq`` console script as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from broker import __version__


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


def test_serve_names_what_is_missing_until_the_broker_lands() -> None:
    out = _jetmq("serve")
    assert out.returncode == 2
    assert "broker.server is missing" in out.stderr
