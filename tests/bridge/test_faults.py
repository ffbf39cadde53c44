"""Fault tests, repeated in bounded loops: nats-server or jetmq killed with SIGKILL
mid-stream and restarted. In ``jetstream`` mode every message jetmq PUBACKed arrives in
the NATS stream exactly once (its Nats-Msg-Id dedupes the resends), and a JetStream import
is acked only after our commit (nothing lost when jetmq dies)."""

from __future__ import annotations

import collections
import pathlib
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes

from tests.bridge.harness import BridgedBroker, NatsClient, bridge_config
from tests.broker.harness import BrokerProcess
from tests.broker.pahoclient import Paho, props
from tests.natsserver import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 3


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


class Publisher:
    """Publishes numbered QoS 1 messages in a thread until stopped or cut off; ``acked()``
    holds the numbers whose PUBACK arrived."""

    def __init__(self, port: int, client_id: str, topic: str, start: int) -> None:
        self.sent = start
        self._infos: list[tuple[mqtt.MQTTMessageInfo, int]] = []
        self._stop = threading.Event()
        self._port, self._cid, self._topic = port, client_id, topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def acked(self) -> set[int]:
        # A publish issued as the broker died was never sent (paho's rc says so, and its
        # is_published() raises for it): not acknowledged.
        return {
            n
            for info, n in list(self._infos)
            if info.rc == mqtt.MQTT_ERR_SUCCESS and info.is_published()
        }

    def _run(self) -> None:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self._cid, protocol=mqtt.MQTTv5)
        try:
            client.connect("127.0.0.1", self._port)
        except OSError:
            return
        client.loop_start()
        deadline = time.monotonic() + 10
        while not client.is_connected() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            while not self._stop.is_set() and client.is_connected():
                info = client.publish(self._topic, str(self.sent).encode(), qos=1)
                self._infos.append((info, self.sent))
                self.sent += 1
                if self.sent % 20 == 0:
                    time.sleep(0.005)
        finally:
            client.loop_stop()
            client.disconnect()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


def stream_payloads(nc: NatsClient, stream: str) -> collections.Counter[int]:
    info = nc.run(nc.js.stream_info(stream))
    out: collections.Counter[int] = collections.Counter()
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        m = nc.run(nc.js.get_msg(stream, seq))
        out[int(m.data)] += 1
    return out


def test_jetstream_forward_survives_nats_server_kill9(tmp_path: pathlib.Path) -> None:
    server = NatsServer(tmp_path / "nats").start()
    nc = NatsClient(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    b: BridgedBroker | None = None
    try:
        nc.run(nc.js.add_stream(name="SENS", subjects=["sensors.>"]))
        b = BridgedBroker(
            bridge_config(
                tmp_path / "data",
                {
                    "servers": [server.url],
                    "name": "edge-1",
                    "forward": [{"filter": "sensors/#", "mode": "jetstream"}],
                },
            )
        ).start()
        acked: set[int] = set()
        start = 0
        for _ in range(ROUNDS):
            pub = Publisher(b.port, "fault-pub", "sensors/x", start)
            wait_for(lambda p=pub: len(p.acked()) > 300)  # type: ignore[misc]
            server.kill9()
            time.sleep(0.3)  # publishing goes on into the outbox while NATS is away
            server.start()
            pub.stop()
            wait_for(lambda bb=b: bool(bb.state()["connected"]))  # type: ignore[misc]  # each kill is felt
            acked |= pub.acked()
            start = pub.sent
        bb = b
        wait_for(lambda: bb.state()["pending"] == 0, 120)
        counts = stream_payloads(nc, "SENS")
        missing = acked - set(counts)
        assert not missing, f"{len(missing)} PUBACKed messages missing in NATS"
        dups = [n for n, c in counts.items() if c > 1]
        assert not dups, f"duplicates in NATS: {dups[:10]}"
        assert bb.state()["connects"] >= ROUNDS + 1  # the kills were felt: reconnects
    finally:
        if b is not None:
            b.stop()
        nc.close()
        server.kill9()


def _write_config(path: pathlib.Path, body: str) -> pathlib.Path:
    path.write_text(body)
    return path


def test_jetstream_forward_survives_jetmq_kill9(tmp_path: pathlib.Path) -> None:
    server = NatsServer(tmp_path / "nats").start()
    nc = NatsClient(server.url)
    conf = _write_config(
        tmp_path / "jetmq.toml",
        f"""[storage]
sync = "always"
[bridge]
servers = ["{server.url}"]
name = "edge-1"
[[bridge.forward]]
filter = "sensors/#"
mode = "jetstream"
""",
    )
    proc = BrokerProcess(tmp_path / "data", config=conf)
    try:
        nc.run(nc.js.add_stream(name="SENS", subjects=["sensors.>"]))
        acked: set[int] = set()
        start = 0
        proc.start()
        for _ in range(ROUNDS):
            pub = Publisher(proc.port, "fault-pub", "sensors/x", start)
            wait_for(lambda p=pub: len(p.acked()) > 300)  # type: ignore[misc]
            proc.kill9()
            pub.stop()
            acked |= pub.acked()
            start = pub.sent
            proc.start()
        wait_for(lambda: acked <= set(stream_payloads(nc, "SENS")), 120)
        counts = stream_payloads(nc, "SENS")
        dups = [n for n, c in counts.items() if c > 1]
        assert not dups, f"duplicates in NATS: {dups[:10]}"
        proc.terminate()
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill9()
        nc.close()
        server.kill9()


def test_jetstream_import_is_acked_only_after_commit(tmp_path: pathlib.Path) -> None:
    """jetmq killed while importing from a NATS stream into a persistent session: after the
    restart every NATS message reaches the subscriber (at least once)."""
    server = NatsServer(tmp_path / "nats").start()
    nc = NatsClient(server.url)
    conf = _write_config(
        tmp_path / "jetmq.toml",
        f"""[sessions]
max_queued_messages = 0
[bridge]
servers = ["{server.url}"]
name = "edge-1"
[[bridge.import]]
subject = "cmd.>"
qos = 1
stream = "CMD"
""",
    )
    n = 3000
    proc = BrokerProcess(tmp_path / "data", config=conf)
    try:
        nc.run(nc.js.add_stream(name="CMD", subjects=["cmd.>"]))
        proc.start()
        sub = Paho(proc.port, "imp-sub")
        sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600))
        sub.subscribe("cmd/#", qos=1)
        sub.disconnect()

        async def fill() -> None:
            for i in range(n):
                await nc.js.publish("cmd.x", str(i).encode())

        nc.run(fill(), 120)
        for _ in range(ROUNDS):
            time.sleep(0.2)
            proc.kill9()
            proc.start()
        sub = Paho(proc.port, "imp-sub")
        sub.connect(
            clean_start=False, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
        )
        seen: set[int] = set()
        while len(seen) < n:
            seen.add(int(sub.get(timeout=60).payload))
        sub.disconnect()
        wait_for(lambda: nc.run(nc.js.consumer_info("CMD", "edge-1-import-0")).num_ack_pending == 0)
        proc.terminate()
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill9()
        nc.close()
        server.kill9()


def test_jetstream_import_goes_on_after_nats_server_kill9(tmp_path: pathlib.Path) -> None:
    """Pull requests do not survive a disconnect: the bridge issues new ones once the
    server is back, and the durable consumer carries on where it was."""
    server = NatsServer(tmp_path / "nats").start()
    nc = NatsClient(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    b: BridgedBroker | None = None
    n = 600
    try:
        nc.run(nc.js.add_stream(name="CMD", subjects=["cmd.>"]))
        b = BridgedBroker(
            bridge_config(
                tmp_path / "data",
                {
                    "servers": [server.url],
                    "name": "edge-1",
                    "import": [{"subject": "cmd.>", "qos": 1, "stream": "CMD"}],
                },
                max_queued_messages=0,
            )
        ).start()
        sub = Paho(b.port, "imp-sub")
        sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600))
        sub.subscribe("cmd/#", qos=1)
        seen: set[int] = set()
        for r in range(ROUNDS):

            async def fill(base: int) -> None:
                for i in range(base, base + n // ROUNDS):
                    await nc.js.publish("cmd.x", str(i).encode())

            nc.run(fill(r * (n // ROUNDS)), 60)
            while len(seen) < (r + 1) * (n // ROUNDS):
                seen.add(int(sub.get(timeout=60).payload))
            server.kill9()
            server.start()
        assert seen == set(range(n))
        bb = b
        wait_for(lambda: int(bb.state()["connects"]) >= ROUNDS + 1)
        assert bb.state()["imported"] >= n
        sub.disconnect()
    finally:
        if b is not None:
            b.stop()
        nc.close()
        server.kill9()


def test_jetstream_import_naks_what_a_full_disk_refuses(tmp_path: pathlib.Path) -> None:
    """jetmq's files may not grow past 1 MiB (RLIMIT_FSIZE: a full disk). Imports for an
    offline persistent session fill it; the commits that fail are nak'd (NATS delivers them
    again), nothing is acked unstored, the broker serves on, and once the subscriber drains
    its queue every message arrives."""
    server = NatsServer(tmp_path / "nats").start()
    nc = NatsClient(server.url)
    conf = _write_config(
        tmp_path / "jetmq.toml",
        f"""[sessions]
max_queued_messages = 0
max_queued_bytes = 0
[bridge]
servers = ["{server.url}"]
name = "edge-1"
[[bridge.import]]
subject = "cmd.>"
qos = 1
stream = "CMD"
""",
    )
    n = 2000
    proc = BrokerProcess(tmp_path / "data", config=conf, file_size_limit=1 << 20)
    try:
        nc.run(nc.js.add_stream(name="CMD", subjects=["cmd.>"]))
        proc.start()
        sub = Paho(proc.port, "full-sub")
        sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600))
        sub.subscribe("cmd/#", qos=1)
        sub.disconnect()

        async def fill() -> None:
            for i in range(n):
                await nc.js.publish("cmd.x", b"%06d" % i + bytes(994))

        nc.run(fill(), 120)

        def info() -> Any:
            return nc.run(nc.js.consumer_info("CMD", "edge-1-import-0"))

        wait_for(lambda: info().num_redelivered > 0)  # refused commits were nak'd
        assert info().ack_floor.stream_seq < n
        sub = Paho(proc.port, "full-sub")  # the broker still serves
        sub.connect(
            clean_start=False, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
        )
        seen: set[int] = set()
        while len(seen) < n:
            seen.add(int(sub.get(timeout=60).payload[:6]))
        sub.disconnect()
        wait_for(lambda: info().num_ack_pending == 0)
        proc.terminate()
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.kill9()
        nc.close()
        server.kill9()
