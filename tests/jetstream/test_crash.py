"""Durability of JetStream over MQTT (ARCHITECTURE.md §5): ``kill -9`` the broker at a
random moment while a client creates streams and consumers, publishes QoS 1 into them,
pulls and acks; after a restart on the same data directory every acknowledged API
change, every PUBACKed message and every processed ack holds."""

from __future__ import annotations

import base64
import contextlib
import pathlib
import random
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.broker.harness import BrokerProcess
from tests.jetstream.jsclient import JsClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 3


@dataclass
class Acknowledged:
    streams: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)  # stream names with consumer C
    messages: dict[tuple[str, int], bytes] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)  # stream -> highest seq acked


def _work(port: int, rnd: int, seen: Acknowledged, stop: threading.Event) -> None:
    """Streams, publishes, pulls and acks until the broker dies; record what was
    acknowledged (a success answer, a PUBACK 0)."""
    with contextlib.suppress(Exception):
        js = JsClient(port, f"crash-{rnd}", timeout=2.0)
        js.subscribe(f"in/{rnd}", 1)
        n = 0
        while not stop.is_set():
            name = f"S{rnd}_{n}"
            n += 1
            out = js.request(
                f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"]}
            )
            assert "error" not in out, out
            seen.streams.add(name)
            cfg = {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit"}}
            assert "error" not in js.request(f"$JS.API.CONSUMER.CREATE.{name}.C", cfg)
            seen.consumers.add(name)
            for i in range(20):
                payload = f"{name}-{i}".encode()
                acked = js.publish(f"{name}/x/{i}", payload, 1)
                assert acked is not None
                if acked.code == 0:
                    seen.messages[(name, int(acked.user["Nats-Sequence"]))] = payload
            for _ in range(10):
                js.publish(f"$JS/API/CONSUMER/MSG/NEXT/{name}/C", b"", 1, ResponseTopic=f"in/{rnd}")
                msg = js.next_msg(f"in/{rnd}")
                ack = str(getattr(msg.properties, "ResponseTopic", ""))
                acked = js.publish(ack, b"+ACK", 1)
                if acked is not None and acked.code == 0:
                    seen.acked[name] = int(ack.split("/")[5])


def _check(port: int, seen: Acknowledged) -> None:
    js = JsClient(port, "checker")
    try:
        names = set(js.request("$JS.API.STREAM.NAMES")["streams"])
        assert seen.streams <= names, seen.streams - names
        for name in seen.consumers:
            info = js.request(f"$JS.API.CONSUMER.INFO.{name}.C")
            assert "error" not in info, (name, info)
            assert info["ack_floor"]["stream_seq"] >= seen.acked.get(name, 0), (name, info)
        for (name, seq), payload in seen.messages.items():
            out = js.request(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
            assert "message" in out, (name, seq, out)
            assert base64.b64decode(out["message"]["data"]) == payload
    finally:
        js.close()


def test_acknowledged_jetstream_state_survives_kill_9(tmp_path: pathlib.Path) -> None:
    seen = Acknowledged()
    rng = random.Random()
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        for rnd in range(ROUNDS):
            stop = threading.Event()
            worker = threading.Thread(
                target=_work, args=(broker.port, rnd, seen, stop), daemon=True
            )
            worker.start()
            time.sleep(rng.uniform(0.5, 2.0))  # a random moment of the work: the kill
            broker.kill9()
            stop.set()
            worker.join(timeout=30)
            broker = BrokerProcess(tmp_path / "data")
            broker.start()
            _check(broker.port, seen)
        assert seen.messages, "no message was acknowledged: the test proves nothing"
        assert seen.acked, "no ack was processed: the test proves nothing"
    finally:
        broker.kill9()
