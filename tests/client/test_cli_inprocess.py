"""The client verbs called in-process (``client.cli.main``) against a broker thread: the
same paths as the subprocess tests, fast, and with tables and errors checked line by line."""

from __future__ import annotations

import json
import pathlib

import pytest

from client.cli import main
from tests.client.conftest import needs_jetstream

pytestmark = [pytest.mark.timeout(60), needs_jetstream]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_stream_and_consumer_verbs(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    s = ("--server", server)
    code, out, err = run(
        capsys,
        "stream",
        "add",
        "S",
        "--subjects",
        "s.>,t.>",
        "--max-msgs-per-subject",
        "5",
        "--dupe-window",
        "1m",
        "--allow-rollup",
        "--deny-delete",
        *s,
    )
    assert (code, err) == (0, "")
    assert "Subjects: s.>, t.>" in out
    assert "Duplicate Window: 1m0s" in out
    assert "Deny Deletes: True" in out
    for i in range(3):
        assert run(capsys, "pub", f"s/{i}", f"m{i}", "--qos", "2", *s)[0] == 0
    code, out, _ = run(capsys, "stream", "info", "S", *s)
    assert "Messages: 3" in out
    assert "Last Sequence: 3 @ " in out
    code, out, err = run(capsys, "stream", "rmm", "S", "1", "-f", *s)
    assert code == 1
    assert err == "jetmq: message delete not permitted (500/10057)\n"  # deny_delete
    code, out, _ = run(capsys, "stream", "get", "S", "2", *s)
    assert out.startswith("Item: S#2 received ")
    assert out.rstrip().endswith("m1")
    code, out, err = run(capsys, "stream", "get", "S", "2", "--direct", *s)
    assert code == 1
    assert err == (
        "jetmq: direct get from S: no responders (no such stream, or allow_direct is off) (503/0)\n"
    )
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "stream_name": "S",
                "config": {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "s.>"},
            }
        )
    )
    code, out, err = run(capsys, "consumer", "add", "S", "--config", str(cfg), "--json", *s)
    assert (code, err) == (0, "")
    assert json.loads(out)["name"] == "C"
    code, out, _ = run(capsys, "consumer", "info", "S", "C", *s)
    assert "Unprocessed Messages: 3" in out
    assert "Filter Subject: s.>" in out
    code, out, _ = run(
        capsys, "consumer", "next", "S", "C", "--count", "3", "--no-ack", "--json", *s
    )
    assert [json.loads(line)["data"] for line in out.splitlines()] == ["m0", "m1", "m2"]
    code, out, _ = run(capsys, "consumer", "ls", "S", *s)
    assert "│ C " in out
    assert "Consumers on S" in out
    code, out, _ = run(capsys, "consumer", "edit", "S", "C", "--description", "edited", *s)
    assert "Consumer S > C was updated" in out
    code, out, _ = run(capsys, "consumer", "ls", "S", "--names", *s)
    assert out == "C\n"
    code, out, _ = run(capsys, "stream", "ls", "--names", *s)
    assert out == "S\n"
    code, out, _ = run(capsys, "stream", "purge", "S", "--keep", "1", "-f", *s)
    assert out == "Purged 2 messages from S\n"
    code, out, _ = run(capsys, "consumer", "rm", "S", "C", "-f", "--json", *s)
    assert json.loads(out) == {"success": True}
    code, out, _ = run(capsys, "consumer", "ls", "S", *s)
    assert out == "No Consumers defined on S\n"
    assert run(capsys, "stream", "rm", "S", "-f", *s)[0] == 0
    code, out, _ = run(capsys, "stream", "ls", "--json", *s)
    assert json.loads(out) == []


def test_verb_errors(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    s = ("--server", server)
    assert run(capsys, "stream", "add", *s)[1:] == (
        "",
        "jetmq: a stream name is required (jetmq stream add NAME ...)\n",
    )
    assert run(capsys, "stream", "add", "X", "--max-bytes", "lots", *s)[2].startswith(
        "jetmq: --max-bytes: invalid size 'lots'"
    )
    assert run(capsys, "stream", "add", "X", "--config", str(tmp_path / "none.json"), *s)[2] == (
        f"jetmq: --config {tmp_path / 'none.json'}: No such file or directory\n"
    )
    assert (
        run(capsys, "stream", "get", "X", *s)[2] == "jetmq: give a sequence or --last-for SUBJECT\n"
    )
    assert run(capsys, "stream", "info", "X", *s)[2] == "jetmq: stream not found (404/10059)\n"
    assert run(capsys, "pub", "a/+", "x", *s)[0] == 1  # a wildcard in a topic name: refused
    code, _, err = run(capsys, "consumer", "add", "X", "c", "--pull", "--target", "d.x", *s)
    assert (code, err) == (1, "jetmq: --pull and --target exclude each other\n")
