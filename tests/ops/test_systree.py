"""``$SYS/broker/...`` with mosquitto's names, read by paho and mosquitto_sub."""

from __future__ import annotations

import pathlib
import queue
import re
import shutil
import subprocess
import time

import pytest

from tests.broker.pahoclient import Paho
from tests.ops.harness import ops_broker, ops_config

MOSQUITTO_SUB = shutil.which("mosquitto_sub")


def _values_until(
    sub: Paho, want: dict[str, str], timeout: float = 15.0
) -> dict[str, tuple[str, bool]]:
    """$SYS messages (topic -> (payload, retain)) until every topic of ``want`` has its
    value (a regular expression)."""
    seen: dict[str, tuple[str, bool]] = {}
    deadline = time.monotonic() + timeout
    while not all(t in seen and re.fullmatch(v, seen[t][0]) for t, v in want.items()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"wanted {want}, saw {seen}")
        try:
            m = sub.messages.get(timeout=remaining)
        except queue.Empty:
            continue
        seen[m.topic] = (m.payload.decode(), bool(m.retain))
    return seen


@pytest.mark.timeout(60)
def test_sys_topics_with_mosquitto_names(tmp_path: pathlib.Path) -> None:
    config = ops_config(tmp_path / "data", sys={"interval": 1})
    with ops_broker(config) as broker:
        sub = Paho(broker.port, "sys-sub")
        pub = Paho(broker.port, "sys-pub")
        sub.connect()
        sub.subscribe("$SYS/broker/#", qos=0)
        sub.subscribe("app/#", qos=1)
        try:
            first = _values_until(
                sub,
                {
                    "$SYS/broker/version": r"jetmq version \d+\.\d+\.\d+.*",
                    "$SYS/broker/uptime": r"\d+ seconds",
                },
            )
            assert first["$SYS/broker/version"][1] is True  # retained
            pub.connect()
            for i in range(5):
                pub.publish("app/x", b"%d" % i, qos=1)
            for _ in range(5):
                sub.get()
            seen = _values_until(
                sub,
                {
                    "$SYS/broker/clients/connected": "2",
                    "$SYS/broker/clients/total": "2",
                    "$SYS/broker/clients/maximum": "2",
                    "$SYS/broker/publish/messages/received": "5",
                    "$SYS/broker/subscriptions/count": "2",
                },
            )
            names = set(seen) | set(first)
            for topic in (
                "clients/disconnected",
                "messages/received",
                "messages/sent",
                "publish/messages/sent",
                "bytes/received",
                "bytes/sent",
                "retained messages/count",
                "load/messages/received/1min",
                "load/messages/sent/5min",
                "load/bytes/received/15min",
                "load/connections/1min",
                "store/size",
                "store/map/size",
                "store/map/used",
                "store/streams",
            ):
                assert f"$SYS/broker/{topic}" in names, topic
            latest = {**first, **seen}
            assert int(latest["$SYS/broker/bytes/received"][0]) > 0
            assert float(latest["$SYS/broker/load/connections/1min"][0]) >= 0.0
            assert int(latest["$SYS/broker/store/streams"][0]) >= 5  # the $MQTT_ streams
        finally:
            pub.disconnect()
            sub.disconnect()


@pytest.mark.skipif(
    MOSQUITTO_SUB is None, reason="mosquitto_sub not installed (apt-get install mosquitto-clients)"
)
@pytest.mark.timeout(60)
def test_mosquitto_sub_reads_the_retained_version(tmp_path: pathlib.Path) -> None:
    assert MOSQUITTO_SUB is not None
    with ops_broker(ops_config(tmp_path / "data")) as broker:
        out = subprocess.run(
            [
                MOSQUITTO_SUB,
                "-p",
                str(broker.port),
                "-t",
                "$SYS/broker/version",
                "-C",
                "1",
                "-W",
                "20",
                "-v",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("$SYS/broker/version jetmq version ")
        # A wildcard filter at the first level never matches $SYS [MQTT-4.7.2-1].
        out = subprocess.run(
            [MOSQUITTO_SUB, "-p", str(broker.port), "-t", "#", "-W", "1", "--retained-only"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "jetmq version" not in out.stdout


@pytest.mark.timeout(60)
def test_interval_zero_turns_sys_off(tmp_path: pathlib.Path) -> None:
    with ops_broker(ops_config(tmp_path / "data", sys={"interval": 0})) as broker:
        c = Paho(broker.port, "nosys")
        c.connect()
        c.subscribe("x", qos=1)  # a few passes of the event loop
        c.disconnect()
        assert broker.call(lambda: len(broker.ops.broker.hub.retained)) == 0  # type: ignore[union-attr]
