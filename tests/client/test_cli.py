"""``jetmq pub|sub|req`` and the error paths, as a user runs them against ``jetmq serve``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.broker.harness import BrokerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def jetmq(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(tmp_path_factory.mktemp("cli") / "data")
    broker.start()
    yield f"mqtt://127.0.0.1:{broker.port}"
    assert broker.terminate() == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [
        ("pub", "a/b", "x"),
        ("sub", "a/#", "--count", "1"),
        ("req", "svc", "x"),
        ("stream", "ls"),
        ("stream", "info", "S"),
        ("consumer", "ls", "S"),
        ("consumer", "next", "S", "C"),
    ],
)
def test_broker_down_is_one_line_and_exit_1(argv: tuple[str, ...]) -> None:
    port = _free_port()
    out = jetmq(*argv, "--server", f"mqtt://127.0.0.1:{port}")
    assert out.returncode == 1
    assert out.stderr == f"jetmq: cannot connect to mqtt://127.0.0.1:{port}: Connection refused\n"
    assert out.stdout == ""


def test_a_bad_server_address_is_refused() -> None:
    out = jetmq("pub", "a", "b", "--server", "http://127.0.0.1:1")
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == "jetmq: server 'http://127.0.0.1:1': only mqtt:// and mqtts:// are supported"
    )


def test_pub_sub_round_trip(served: str) -> None:
    sub = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "sub",
            "cli/#",
            "--count",
            "2",
            "--json",
            "--server",
            served,
            "--wait",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Readiness: publish until the subscriber has seen the first message (QoS 1 tells
        # when it was subscribed: 0x10 "no matching subscribers" before that).
        for _ in range(200):
            pub = jetmq("pub", "cli/1", "hello", "--json", "-H", "k:v", "--server", served)
            assert pub.returncode == 0, pub.stderr
            if json.loads(pub.stdout)["reason_code"] == 0:
                break
        pub = jetmq("pub", "cli/2", "world", "--server", served)
        assert pub.returncode == 0, pub.stderr
        assert pub.stdout.strip() == "Published 5 bytes to 'cli/2'"
        out, err = sub.communicate(timeout=60)
    finally:
        sub.kill()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0] == {
        "topic": "cli/1",
        "qos": 1,
        "retain": False,
        "data": "hello",
        "headers": [["k", "v"]],
    }
    assert lines[1]["data"] == "world"
    assert sub.returncode == 0, err


def test_req_without_responder_fails_fast(served: str) -> None:
    out = jetmq("req", "nobody/here", "x", "--server", served, "--timeout", "20")
    assert out.returncode == 1
    assert out.stderr.strip() == "jetmq: no responders on 'nobody/here'"


def test_help_lists_the_client_verbs() -> None:
    out = jetmq("--help")
    for verb in ("stream", "consumer", "pub", "sub", "req"):
        assert f"    {verb}" in out.stdout
    out = jetmq("stream", "--help")
    assert "ls" in out.stdout
    assert "rmm" in out.stdout
