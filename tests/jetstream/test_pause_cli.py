"""``jetmq consumer pause|resume`` (client.cli, in-process) against a broker thread, and
``JetStreamContext.pause_consumer`` / ``resume_consumer`` under them."""

from __future__ import annotations

import json

import pytest

from client.cli import main
from tests.broker.harness import BrokerThread

pytestmark = pytest.mark.timeout(60)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_pause_and_resume_verbs(broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
    s = ("--server", f"mqtt://127.0.0.1:{broker.port}")
    assert run(capsys, "stream", "add", "S", "--subjects", "s.>", *s)[0] == 0
    assert run(capsys, "consumer", "add", "S", "C", *s)[0] == 0
    code, out, err = run(
        capsys, "consumer", "pause", "S", "C", "--until", "2100-01-01T00:00:00Z", *s
    )
    assert (code, err) == (0, "")
    assert out == "Paused consumer S > C until 2100-01-01T00:00:00Z\n"
    code, out, _ = run(capsys, "consumer", "info", "S", "C", "--json", *s)
    info = json.loads(out)
    assert info["paused"] is True
    assert info["config"]["pause_until"] == "2100-01-01T00:00:00Z"
    code, out, _ = run(capsys, "consumer", "resume", "S", "C", "--json", *s)
    assert json.loads(out) == {"paused": False, "pause_until": "0001-01-01T00:00:00Z"}
    code, out, _ = run(capsys, "consumer", "resume", "S", "C", *s)
    assert out == "Consumer S > C is not paused\n"
    code, out, err = run(capsys, "consumer", "pause", "S", "C", "--until", "soon", *s)
    assert code == 1
    assert "(400/10025)" in err
    code, out, err = run(capsys, "consumer", "resume", "S", "nope", *s)
    assert (code, err) == (1, "jetmq: consumer not found (404/10014)\n")
