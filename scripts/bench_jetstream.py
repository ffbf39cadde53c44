#!/usr/bin/env python3
"""JetStream over MQTT 5 (jetmq) against nats-server's JetStream (nats-py), same machine,
same run, same payloads and concurrency (issue 21's performance targets).

1. publish into a stream with a PubAck: 16 publishers, each with one publish in flight
   (jetmq: MQTT 5 QoS 1, PUBACK after the commit; NATS: ``js.publish``);
2. pull-consume with explicit acks, batch 100 (jetmq: ``$JS/API/CONSUMER/MSG/NEXT`` +
   QoS 0 ``+ACK`` publishes; NATS: ``fetch(100)`` + ``msg.ack()``);
3. end-to-end latency publish -> pull delivery at a paced 1,000 msg/s (p50/p99).

Both servers are child processes on 127.0.0.1 with their store in a temporary
directory. jetmq runs with ``storage.sync`` as given (``always`` fsyncs every group
commit; nats-server's default ``sync_interval`` is 2 minutes, so ``batch`` is the like
for like). The MQTT side is a small asyncio client on jetmq's own codec, the NATS side
nats-py: both are Python clients in this process.

    .venv/bin/python scripts/bench_jetstream.py [--sync batch|always] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from broker.mqtt.connection import Connection, Role
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Puback, Publish, Subscribe, Subscription
from broker.mqtt.properties import Properties

PAYLOAD = b"x" * 128
PUBLISHERS = 16
BATCH = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen")


# -- a small asyncio MQTT 5 client on our codec ---------------------------------------------


class Mqtt:
    def __init__(self) -> None:
        self.proto = Connection(Role.CLIENT)
        self.acks: dict[int, asyncio.Future[Puback]] = {}
        self.on_publish: Callable[[Publish], None] = lambda p: None
        self.next_id = 0

    async def connect(self, port: int, client_id: str) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.connack: asyncio.Future[Connack] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._read())
        self.send(
            Connect(ProtocolVersion.MQTT_5, client_id, properties=Properties(receive_maximum=65535))
        )
        await self.connack

    def send(self, packet: Any) -> None:
        self.writer.write(self.proto.send(packet))

    def pid(self) -> int:
        self.next_id = self.next_id % 65535 + 1
        return self.next_id

    async def _read(self) -> None:
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                return
            for p in self.proto.receive_data(data):
                if isinstance(p, Puback):
                    fut = self.acks.pop(p.packet_id, None)
                    if fut is not None:
                        fut.set_result(p)
                elif isinstance(p, Publish):
                    if p.qos == 1 and p.packet_id is not None:
                        self.send(Puback(p.packet_id))
                    self.on_publish(p)
                elif isinstance(p, Connack):
                    self.connack.set_result(p)
                elif hasattr(p, "packet_id") and p.packet_id in self.acks:
                    self.acks.pop(p.packet_id).set_result(p)

    async def publish(self, topic: bytes, payload: bytes, qos: int = 1, **props: Any) -> Any:
        if not qos:
            self.send(Publish(topic, payload, 0, properties=Properties(**props)))
            return None
        pid = self.pid()
        fut = self.acks[pid] = asyncio.get_running_loop().create_future()
        self.send(Publish(topic, payload, qos, False, False, pid, Properties(**props)))
        return await fut

    async def subscribe(self, flt: bytes, qos: int = 1) -> None:
        pid = self.pid()
        fut = self.acks[pid] = asyncio.get_running_loop().create_future()
        self.send(Subscribe(pid, (Subscription(flt, qos),)))
        await fut

    async def request(self, topic: str, body: dict[str, Any]) -> dict[str, Any]:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        old = self.on_publish

        def on(p: Publish) -> None:
            if p.topic == b"bench/reply" and not got.done():
                got.set_result(p.payload)

        self.on_publish = on
        await self.publish(
            topic.encode(), json.dumps(body).encode(), 1, response_topic="bench/reply"
        )
        out: dict[str, Any] = json.loads(await got)
        self.on_publish = old
        return out

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


# -- jetmq --------------------------------------------------------------------------------------


async def jetmq_publish(port: int, seconds: float) -> float:
    admin = Mqtt()
    await admin.connect(port, "bench-admin")
    await admin.subscribe(b"bench/reply")
    await admin.request("$JS/API/STREAM/CREATE/PUB", {"name": "PUB", "subjects": ["pub.>"]})
    clients = []
    for i in range(PUBLISHERS):
        c = Mqtt()
        await c.connect(port, f"bench-pub-{i}")
        clients.append(c)
    count = 0
    stop = time.perf_counter() + seconds

    async def run(c: Mqtt, i: int) -> None:
        nonlocal count
        topic = f"pub/{i}".encode()
        while time.perf_counter() < stop:
            ack = await c.publish(topic, PAYLOAD)
            assert ack.reason_code == 0, ack
            count += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(run(c, i) for i, c in enumerate(clients)))
    rate = count / (time.perf_counter() - t0)
    for c in [admin, *clients]:
        c.close()
    return rate


async def jetmq_consume(port: int, total: int) -> float:
    c = Mqtt()
    await c.connect(port, "bench-consumer")
    await c.subscribe(b"bench/reply")
    await c.subscribe(b"bench/in", 1)
    await c.request("$JS/API/STREAM/CREATE/CON", {"name": "CON", "subjects": ["con.>"]})
    cfg = {"stream_name": "CON", "config": {"durable_name": "C", "ack_policy": "explicit"}}
    await c.request("$JS/API/CONSUMER/CREATE/CON/C", cfg)
    pending = [c.publish(b"con/x", PAYLOAD) for _ in range(total)]
    for i in range(0, total, 1000):
        await asyncio.gather(*pending[i : i + 1000])
    got = 0
    batch_done: asyncio.Event = asyncio.Event()
    in_batch = 0

    def on(p: Publish) -> None:
        nonlocal got, in_batch
        if p.topic != b"bench/in":
            return
        ack = p.properties.response_topic
        if ack is None:
            batch_done.set()  # a status
            return
        c.send(Publish(ack.encode(), b"+ACK", 0))
        got += 1
        in_batch += 1
        if in_batch == BATCH:
            batch_done.set()

    c.on_publish = on
    t0 = time.perf_counter()
    while got < total:
        batch_done.clear()
        in_batch = 0
        body = json.dumps({"batch": BATCH, "expires": 2_000_000_000}).encode()
        await c.publish(b"$JS/API/CONSUMER/MSG/NEXT/CON/C", body, 1, response_topic="bench/in")
        await batch_done.wait()
    rate = got / (time.perf_counter() - t0)
    c.close()
    return rate


async def jetmq_latency(port: int, seconds: float) -> list[float]:
    c = Mqtt()
    await c.connect(port, "bench-lat")
    await c.subscribe(b"bench/reply")
    await c.subscribe(b"bench/lat", 1)
    await c.request("$JS/API/STREAM/CREATE/LAT", {"name": "LAT", "subjects": ["lat.>"]})
    cfg = {"stream_name": "LAT", "config": {"durable_name": "L", "ack_policy": "explicit"}}
    await c.request("$JS/API/CONSUMER/CREATE/LAT/L", cfg)
    pub = Mqtt()
    await pub.connect(port, "bench-lat-pub")
    lat: list[float] = []
    want = int(seconds * 1000)
    all_in = asyncio.Event()

    def on(p: Publish) -> None:
        if p.topic != b"bench/lat":
            return
        ack = p.properties.response_topic
        if ack is None:
            all_in.set()  # a status: the request ended
            return
        lat.append(time.perf_counter() - float(p.payload))
        c.send(Publish(ack.encode(), b"+ACK", 0))
        if len(lat) >= want:
            all_in.set()

    c.on_publish = on
    body = json.dumps({"batch": 10_000, "expires": int(seconds * 3e9)}).encode()
    await c.publish(b"$JS/API/CONSUMER/MSG/NEXT/LAT/L", body, 1, response_topic="bench/lat")
    t0 = time.perf_counter()
    for i in range(want):
        delay = t0 + i / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pub.send(Publish(b"lat/x", repr(time.perf_counter()).encode(), 1, False, False, pub.pid()))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_in.wait(), 5)
    c.close()
    pub.close()
    return lat


# -- nats-server --------------------------------------------------------------------------------


async def nats_publish(url: str, seconds: float) -> float:
    ncs = [await nats.connect(url) for _ in range(PUBLISHERS)]
    await ncs[0].jetstream().add_stream(name="PUB", subjects=["pub.>"])
    count = 0
    stop = time.perf_counter() + seconds

    async def run(nc: Any, i: int) -> None:
        nonlocal count
        js = nc.jetstream()
        while time.perf_counter() < stop:
            await js.publish(f"pub.{i}", PAYLOAD)
            count += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(run(nc, i) for i, nc in enumerate(ncs)))
    rate = count / (time.perf_counter() - t0)
    for nc in ncs:
        await nc.close()
    return rate


async def nats_consume(url: str, total: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="CON", subjects=["con.>"])
    for i in range(0, total, 1000):
        await asyncio.gather(*(js.publish("con.x", PAYLOAD) for _ in range(min(1000, total - i))))
    psub = await js.pull_subscribe("con.>", durable="C")
    got = 0
    t0 = time.perf_counter()
    while got < total:
        for m in await psub.fetch(BATCH, timeout=5):
            await m.ack()
            got += 1
    rate = got / (time.perf_counter() - t0)
    await nc.close()
    return rate


async def nats_latency(url: str, seconds: float) -> list[float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="LAT", subjects=["lat.>"])
    psub = await js.pull_subscribe("lat.>", durable="L")
    lat: list[float] = []
    want = int(seconds * 1000)

    async def consume() -> None:
        while len(lat) < want:
            try:
                msgs = await psub.fetch(100, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                lat.append(time.perf_counter() - float(m.data))
                await m.ack()

    task = asyncio.create_task(consume())
    pub = await nats.connect(url)
    pjs = pub.jetstream()
    t0 = time.perf_counter()
    futs = []
    for i in range(want):
        delay = t0 + i / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        futs.append(asyncio.create_task(pjs.publish("lat.x", repr(time.perf_counter()).encode())))
    await asyncio.gather(*futs)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(task, 10)
    await pub.close()
    await nc.close()
    return lat


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sync", choices=("always", "batch"), default="batch")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--consume", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[float]] = {}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            cfg = Path(tmp) / "jetmq.toml"
            cfg.write_text(f'[storage]\nsync = "{args.sync}"\n[log]\nlevel = "warning"\n')
            jm = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "broker",
                    "serve",
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--data-dir",
                    f"{tmp}/jetmq",
                    "--config",
                    str(cfg),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            nport = free_port()
            ns = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "nats-server"),
                    "-js",
                    "-sd",
                    f"{tmp}/nats",
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(nport),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_port(port, jm)
                wait_port(nport, ns)
                url = f"nats://127.0.0.1:{nport}"
                for name, coro in (
                    ("jetmq publish msg/s", jetmq_publish(port, args.seconds)),
                    ("nats publish msg/s", nats_publish(url, args.seconds)),
                    ("jetmq consume msg/s", jetmq_consume(port, args.consume)),
                    ("nats consume msg/s", nats_consume(url, args.consume)),
                ):
                    results.setdefault(name, []).append(asyncio.run(coro))
                lat = asyncio.run(jetmq_latency(port, args.seconds))
                results.setdefault("jetmq latency p50 ms", []).append(pct(lat, 0.5))
                results.setdefault("jetmq latency p99 ms", []).append(pct(lat, 0.99))
                results.setdefault("jetmq latency received", []).append(len(lat))
                lat = asyncio.run(nats_latency(url, args.seconds))
                results.setdefault("nats latency p50 ms", []).append(pct(lat, 0.5))
                results.setdefault("nats latency p99 ms", []).append(pct(lat, 0.99))
            finally:
                for p in (jm, ns):
                    p.terminate()
                    p.wait(timeout=30)
    print(f"sync={args.sync} seconds={args.seconds} runs={args.runs} (medians; all runs)")
    for name, xs in results.items():
        print(f"{name:26s} {statistics.median(xs):10.1f}   {[round(x, 1) for x in xs]}")
    pub = statistics.median(results["jetmq publish msg/s"]) / statistics.median(
        results["nats publish msg/s"]
    )
    con = statistics.median(results["jetmq consume msg/s"]) / statistics.median(
        results["nats consume msg/s"]
    )
    print(f"ratio publish {pub:.2f} (target >= 0.5), consume {con:.2f} (target >= 0.5)")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
