"""``$SYS/broker/...`` with mosquitto's names, read by paho and mosquitto_sub."""

from __future__ import annotations

import json
import pathlib
import queue
import re
import shutil
import subprocess
import time

import pytest

import store
from broker import __version__
from broker.core.message import AppMessage
from broker.mqtt.packets import Publish
from broker.persist import records
from broker.persist.records import RMSGS
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


def _retained_topics(data: pathlib.Path) -> set[str]:
    """The topics of the retained messages in the data dir's store."""
    with store.Store.open(data) as st:
        return {json.loads(m.header("Mqtt-Topic") or "null") for m in st.iter_msgs(RMSGS)}


def _read_sys(port: int, uptime: str) -> dict[str, tuple[str, bool]]:
    """What a new subscriber to ``$SYS/broker/#`` sees until this run's version and an
    uptime matching ``uptime`` have come."""
    sub = Paho(port, "sys-reader")
    sub.connect()
    sub.subscribe("$SYS/broker/#", qos=0)
    try:
        return _values_until(
            sub,
            {
                "$SYS/broker/version": f"jetmq version {re.escape(__version__)}",
                "$SYS/broker/uptime": uptime,
            },
        )
    finally:
        sub.disconnect()


@pytest.mark.timeout(60)
def test_sys_figures_are_retained_in_memory_only(tmp_path: pathlib.Path) -> None:
    """$SYS is regenerated at every start and superseded every interval: a commit (and its
    fsync) per interval of an idle broker for nothing. A client's retained message beside
    it is stored as ever."""
    data = tmp_path / "data"
    with ops_broker(ops_config(data, sys={"interval": 1})) as broker:
        pub = Paho(broker.port, "keeper")
        pub.connect()
        pub.publish("keep/me", b"kept", qos=1, retain=True)
        seen = _read_sys(broker.port, uptime=r"[1-9]\d* seconds")
        assert seen["$SYS/broker/version"][1] is True  # retained, from memory
        pub.disconnect()
    assert _retained_topics(data) == {"keep/me"}


@pytest.mark.timeout(60)
def test_sys_records_of_an_earlier_version_are_dropped_at_start(tmp_path: pathlib.Path) -> None:
    """An earlier version stored $SYS figures as retained records: at start they are
    deleted, and a subscriber gets the new run's figures only."""
    data = tmp_path / "data"
    with ops_broker(ops_config(data, sys={"interval": 0})):
        pass  # the broker's streams
    old = AppMessage(Publish(b"$SYS/broker/version", b"jetmq version 0.0.1", 0, True), None, 0)
    stale = AppMessage(Publish(b"$SYS/broker/gone", b"stale", 0, True), None, 0)
    with store.Store.open(data) as st:
        st.submit(
            [
                store.Publish(
                    f"$MQTT.rmsgs.{records.token(m.topic)}",
                    m.payload,
                    records.message_block(m),
                    RMSGS,
                )
                for m in (old, stale)
            ]
        ).result(timeout=10)
    assert _retained_topics(data) == {"$SYS/broker/version", "$SYS/broker/gone"}
    with ops_broker(ops_config(data, sys={"interval": 1})) as broker:
        seen = _read_sys(broker.port, uptime=r"\d+ seconds")
        assert "$SYS/broker/gone" not in seen  # (retained ones come with the SUBACK)
    assert _retained_topics(data) == set()
