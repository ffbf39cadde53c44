"""``jetmq stream ...`` / ``jetmq consumer ...`` end to end against ``jetmq serve``."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest

from tests.broker.harness import BrokerProcess
from tests.client.conftest import needs_jetstream
from tests.client.test_cli import jetmq

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), needs_jetstream]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(tmp_path_factory.mktemp("clijs") / "data")
    broker.start()
    yield f"mqtt://127.0.0.1:{broker.port}"
    assert broker.terminate() == 0


def ok(*args: str) -> str:
    out = jetmq(*args)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return out.stdout


def test_streams_from_add_to_rm(served: str) -> None:
    s = ("--server", served)
    text = ok(
        "stream",
        "add",
        "ORDERS",
        "--subjects",
        "orders.>",
        "--storage",
        "memory",
        "--max-msgs",
        "100",
        "--max-age",
        "1h",
        "--max-bytes",
        "1MB",
        *s,
    )
    assert "Stream ORDERS was created" in text
    assert "Subjects: orders.>" in text
    info = json.loads(ok("stream", "info", "ORDERS", "--json", *s))
    cfg = info["config"]
    assert (cfg["storage"], cfg["max_msgs"], cfg["max_age"], cfg["max_bytes"]) == (
        "memory",
        100,
        3_600_000_000_000,
        1024 * 1024,
    )
    assert [i["config"]["name"] for i in json.loads(ok("stream", "ls", "--json", *s))] == ["ORDERS"]
    assert json.loads(ok("stream", "ls", "--names", "--json", *s)) == ["ORDERS"]
    table = ok("stream", "ls", *s)
    assert "│ ORDERS" in table
    assert "Streams" in table
    for i in range(3):
        pub = ok("pub", f"orders/eu/{i}", f"order {i}", "-H", "Nats-Msg-Id:m" + str(i), *s)
        assert pub.strip() == f"Published 7 bytes to 'orders/eu/{i}' (stream ORDERS seq {i + 1})"
    got = json.loads(ok("stream", "get", "ORDERS", "2", "--json", *s))
    assert (got["subject"], got["seq"], got["data"]) == ("orders.eu.1", 2, "order 1")
    assert ["Nats-Msg-Id", "m1"] in got["headers"]
    last = json.loads(ok("stream", "get", "ORDERS", "--last-for", "orders.eu.0", "--json", *s))
    assert last["seq"] == 1
    edited = json.loads(
        ok("stream", "edit", "ORDERS", "--max-msgs", "50", "--description", "edited", "--json", *s)
    )
    assert edited["config"]["max_msgs"] == 50
    assert edited["config"]["subjects"] == ["orders.>"]
    assert ok("stream", "rmm", "ORDERS", "1", "-f", *s).strip() == "Deleted message 1 from ORDERS"
    assert json.loads(ok("stream", "purge", "ORDERS", "-f", "--json", *s))["purged"] == 2
    assert ok("stream", "rm", "ORDERS", "-f", *s).strip() == "Deleted stream ORDERS"
    assert ok("stream", "ls", *s).strip() == "No Streams defined"


def test_config_file_and_consumers(served: str, tmp_path: pathlib.Path) -> None:
    s = ("--server", served)
    conf = tmp_path / "wq.json"
    conf.write_text(json.dumps({"name": "WQ", "subjects": ["jobs.*"], "retention": "workqueue"}))
    assert (
        json.loads(ok("stream", "add", "--config", str(conf), "--json", *s))["config"]["retention"]
        == "workqueue"
    )
    for i in range(3):
        ok("pub", f"jobs/{i}", f"job {i}", *s)
    c = json.loads(
        ok(
            "consumer",
            "add",
            "WQ",
            "worker",
            "--pull",
            "--ack",
            "explicit",
            "--filter",
            "jobs.*",
            "--max-deliver",
            "5",
            "--wait",
            "30s",
            "--json",
            *s,
        )
    )
    assert c["name"] == "worker"
    assert c["config"]["ack_wait"] == 30_000_000_000
    assert c["num_pending"] == 3
    lines = ok("consumer", "next", "WQ", "worker", "--count", "2", "--json", *s).splitlines()
    msgs = [json.loads(line) for line in lines]
    assert [(m["subject"], m["data"], m["stream_seq"], m["acked"]) for m in msgs] == [
        ("jobs.0", "job 0", 1, True),
        ("jobs.1", "job 1", 2, True),
    ]
    info = json.loads(ok("consumer", "info", "WQ", "worker", "--json", *s))
    assert (info["num_pending"], info["num_ack_pending"]) == (1, 0)
    # Workqueue: acked messages are gone from the stream.
    assert json.loads(ok("stream", "info", "WQ", "--json", *s))["state"]["messages"] == 1
    text = ok("consumer", "next", "WQ", "worker", *s)
    assert "subj: jobs.2 / 3" in text
    assert "Acknowledged message" in text
    assert json.loads(ok("consumer", "ls", "WQ", "--names", "--json", *s)) == ["worker"]
    assert "│ worker" in ok("consumer", "ls", "WQ", *s)
    edited = json.loads(ok("consumer", "edit", "WQ", "worker", "--max-deliver", "9", "--json", *s))
    assert edited["config"]["max_deliver"] == 9
    assert ok("consumer", "rm", "WQ", "worker", "-f", *s).strip() == "Deleted consumer WQ > worker"
    push = json.loads(
        ok(
            "consumer",
            "add",
            "WQ",
            "--ephemeral",
            "--target",
            "deliver.x",
            "--filter",
            "jobs.9",
            "--json",
            *s,
        )
    )
    assert push["config"]["deliver_subject"] == "deliver.x"


def test_jetstream_errors_are_one_line_and_exit_1(served: str) -> None:
    s = ("--server", served)
    out = jetmq("stream", "info", "MISSING", *s)
    assert (out.returncode, out.stderr) == (1, "jetmq: stream not found (404/10059)\n")
    out = jetmq("consumer", "info", "MISSING", "c", *s)
    assert (out.returncode, out.stderr) == (1, "jetmq: stream not found (404/10059)\n")
    ok("stream", "add", "E1", "--subjects", "e1.>", *s)
    out = jetmq("stream", "add", "E2", "--subjects", "e1.x", *s)
    assert out.returncode == 1
    assert out.stderr == "jetmq: subjects overlap with an existing stream (400/10065)\n"
    out = jetmq("consumer", "next", "E1", "nope", "--timeout", "2", *s)
    assert out.returncode == 1
    assert len(out.stderr.splitlines()) == 1
    out = jetmq("stream", "add", "E3", "--max-age", "soon", *s)
    assert out.returncode == 1
    assert out.stderr.startswith("jetmq: --max-age: invalid duration 'soon'")
    out = jetmq("consumer", "add", "E1", *s)
    assert (out.returncode, out.stderr) == (
        1,
        "jetmq: a consumer name is required (or --ephemeral)\n",
    )
