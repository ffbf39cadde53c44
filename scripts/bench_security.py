#!/usr/bin/env python3
"""Security benchmarks (issue 23), jetmq and mosquitto in ONE run with the same load:

  acl        mqttbench fanin against jetmq without and with a 1,000-rule ACL file
             (../shared/bench/mqttbench; alternating rounds, the ratio per round)
  tls-storm  N clients, C at a time: TCP connect, TLS handshake, CONNECT/CONNACK, DISCONNECT
             (asyncio + ssl) against jetmq and mosquitto TLS listeners; connects/s
  tls-fanin  4 publishers -> 1 subscriber on a '+' filter over TLS, QoS 0, 100 B payloads,
             closed loop (at most WINDOW messages in flight); delivered msg/s
  ws-fanin   the same fan-in against jetmq over WebSocket and over plain TCP (same
             generator; the client masks its frames with wsproto)
  stall      (not in the default set) a subscriber stops reading while FLOOD x 1 KB QoS 0
             messages arrive for it, over tcp, tls and ws: the broker's RSS before/after

    .venv/bin/python scripts/bench_security.py                 # all three, 3 rounds
    .venv/bin/python scripts/bench_security.py tls-storm --rounds 5

Certificates are made at run time with trustme; brokers run on 127.0.0.1 only, each
started fresh per round and stopped by PID. The load generator is Python (asyncio's TLS
is OpenSSL in C); it shares the 2 cores with the broker, so compare the ratios within one
run. Prerequisites: .venv (./scripts/test), `apt-get install mosquitto`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

import trustme
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, Request

ROOT = pathlib.Path(__file__).resolve().parent.parent
MQTTBENCH = ROOT.parent / "shared" / "bench" / "mqttbench" / "mqttbench.py"
JETMQ = ROOT / ".venv" / "bin" / "jetmq"
CONNECT_V311 = b"\x10%c\x00\x04MQTT\x04\x02\x00\x3c"  # remaining length filled in


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect_packet(client_id: str) -> bytes:
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


def publish_packet(topic: bytes, payload: bytes) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + payload
    assert len(body) < 128
    return bytes([0x30, len(body)]) + body


def subscribe_packet(flt: bytes) -> bytes:
    body = b"\x00\x01" + len(flt).to_bytes(2, "big") + flt + b"\x00"
    return bytes([0x82, len(body)]) + body


class Broker:
    """A broker process started fresh, ready once its port accepts, stopped by PID."""

    def __init__(self, cmd: list[str], port: int, log: pathlib.Path) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker did not start: {' '.join(cmd)} (log: {log})")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        self.log.close()


class Setup:
    def __init__(self, work: pathlib.Path) -> None:
        self.work = work
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1")
        self.ca = work / "ca.pem"
        self.cert = work / "server.pem"
        self.key = work / "server.key"
        ca.cert_pem.write_to_path(str(self.ca))
        self.cert.write_bytes(b"".join(b.bytes() for b in server.cert_chain_pems))
        server.private_key_pem.write_to_path(str(self.key))
        self.client_ctx = ssl.create_default_context(cafile=str(self.ca))

    def jetmq_tls(self, port: int, name: str) -> Broker:
        cfg = self.work / f"{name}.toml"
        data = self.work / f"{name}-data"
        shutil.rmtree(data, ignore_errors=True)
        cfg.write_text(
            f'[[listeners]]\nbind = "127.0.0.1:{port}"\n'
            f'tls = {{ cert = "{self.cert}", key = "{self.key}" }}\n'
            f'[storage]\ndata_dir = "{data}"\n'
        )
        return Broker([str(JETMQ), "serve", "--config", str(cfg)], port, self.work / "jetmq.log")

    def jetmq_plain(self, port: int, name: str, ws: bool) -> Broker:
        cfg = self.work / f"{name}.toml"
        data = self.work / f"{name}-data"
        shutil.rmtree(data, ignore_errors=True)
        transport = 'transport = "ws"\n' if ws else ""
        cfg.write_text(
            f'[[listeners]]\nbind = "127.0.0.1:{port}"\n{transport}[storage]\ndata_dir = "{data}"\n'
        )
        return Broker([str(JETMQ), "serve", "--config", str(cfg)], port, self.work / "jetmq.log")

    def mosquitto_tls(self, port: int) -> Broker:
        cfg = self.work / "mosquitto-tls.conf"
        cfg.write_text(
            f"listener {port} 127.0.0.1\ncertfile {self.cert}\nkeyfile {self.key}\n"
            "allow_anonymous true\npersistence false\nlog_dest stderr\nlog_type error\n"
            + ("user root\n" if os.geteuid() == 0 else "")
        )
        return Broker(["mosquitto", "-c", str(cfg)], port, self.work / "mosquitto.log")


async def one_connect(port: int, ctx: ssl.SSLContext, i: int) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
    )
    writer.write(connect_packet(f"storm-{i}"))
    await writer.drain()
    connack = await reader.readexactly(4)
    if connack[:2] != b"\x20\x02" or connack[3] != 0:
        raise RuntimeError(f"refused: {connack!r}")
    writer.write(b"\xe0\x00")  # DISCONNECT
    await writer.drain()
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def storm(port: int, ctx: ssl.SSLContext, n: int, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def guarded(i: int) -> None:
        async with sem:
            await one_connect(port, ctx, i)

    start = time.perf_counter()
    await asyncio.gather(*(guarded(i) for i in range(n)))
    return n / (time.perf_counter() - start)


class Conn:
    """One client connection's bytes: plain TCP, TLS, or WebSocket (wsproto's client, the
    MQTT bytes in binary frames, masked as RFC 6455 requires)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ws: WSConnection | None = None
        self.pending = bytearray()

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext | None, ws: bool) -> Conn:
        kw: dict[str, object] = {} if ctx is None else {"ssl": ctx, "server_hostname": "127.0.0.1"}
        reader, writer = await asyncio.open_connection("127.0.0.1", port, **kw)  # type: ignore[arg-type]
        conn = cls(reader, writer)
        if ws:
            conn.ws = WSConnection(ConnectionType.CLIENT)
            writer.write(
                conn.ws.send(Request(host="127.0.0.1", target="/mqtt", subprotocols=["mqtt"]))
            )
            while True:
                conn.ws.receive_data(await reader.read(65536))
                if any(isinstance(e, AcceptConnection) for e in conn.ws.events()):
                    break
        return conn

    def write(self, data: bytes) -> None:
        self.writer.write(data if self.ws is None else self.ws.send(BytesMessage(data=data)))

    async def drain(self) -> None:
        await self.writer.drain()

    async def read(self) -> bytes:
        while True:
            chunk = await self.reader.read(262_144)
            if not chunk:
                raise RuntimeError("closed")
            if self.ws is None:
                return chunk
            self.ws.receive_data(chunk)
            out = b"".join(e.data for e in self.ws.events() if isinstance(e, BytesMessage))
            if out:
                return out

    async def readexactly(self, n: int) -> bytes:
        while len(self.pending) < n:
            self.pending += await self.read()
        data = bytes(self.pending[:n])
        del self.pending[:n]
        return data

    def close(self) -> None:
        self.writer.close()


async def fanin(
    port: int, ctx: ssl.SSLContext | None, total: int, window: int, ws: bool = False
) -> float:
    topics = [f"bench/fanin/{i}".encode() for i in range(4)]
    packets = [publish_packet(t, b"x" * 100) for t in topics]
    size = len(packets[0])
    sub = await Conn.open(port, ctx, ws)
    sub.write(connect_packet("fanin-sub") + subscribe_packet(b"bench/fanin/+"))
    await sub.drain()
    await sub.readexactly(4)  # CONNACK
    await sub.readexactly(5)  # SUBACK
    received = 0
    progress = asyncio.Event()
    done = asyncio.Event()

    async def reader() -> None:
        nonlocal received
        got = len(sub.pending)
        while received < total:
            chunk = await sub.read()
            got += len(chunk)
            received = got // size
            progress.set()
        done.set()

    per = total // 4
    sent = 0

    async def publisher(i: int) -> None:
        nonlocal sent
        pub = await Conn.open(port, ctx, ws)
        pub.write(connect_packet(f"fanin-pub-{i}"))
        await pub.drain()
        await pub.readexactly(4)
        batch = packets[i] * 100
        for _ in range(per // 100):
            while sent - received > window:
                progress.clear()
                await progress.wait()
            pub.write(batch)
            sent += 100
            await pub.drain()
        await done.wait()
        pub.close()

    task = asyncio.create_task(reader())
    start = time.perf_counter()
    await asyncio.gather(*(publisher(i) for i in range(4)))
    await task
    rate = total / (time.perf_counter() - start)
    sub.close()
    return rate


def tls_compare(setup: Setup, rounds: int, what: str, args: argparse.Namespace) -> None:
    rates: dict[str, list[float]] = {"jetmq": [], "mosquitto": []}
    for r in range(rounds):
        for name in ("jetmq", "mosquitto") if r % 2 == 0 else ("mosquitto", "jetmq"):
            port = free_port()
            broker = (
                setup.jetmq_tls(port, "jetmq") if name == "jetmq" else setup.mosquitto_tls(port)
            )
            try:
                if what == "tls-storm":
                    rate = asyncio.run(
                        storm(port, setup.client_ctx, args.clients, args.concurrency)
                    )
                else:
                    rate = asyncio.run(fanin(port, setup.client_ctx, args.messages, args.window))
            finally:
                broker.stop()
            rates[name].append(rate)
    unit = "connects/s" if what == "tls-storm" else "delivered msg/s"
    ratios = [j / m for j, m in zip(rates["jetmq"], rates["mosquitto"], strict=True)]
    print(
        f"{what}: jetmq {statistics.median(rates['jetmq']):,.0f} {unit}, "
        f"mosquitto {statistics.median(rates['mosquitto']):,.0f} {unit}, "
        f"jetmq/mosquitto median of per-round ratios {statistics.median(ratios):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        flush=True,
    )


def ws_compare(setup: Setup, rounds: int, args: argparse.Namespace) -> None:
    """jetmq fan-in over WebSocket against jetmq over plain TCP, the same generator."""
    rates: dict[str, list[float]] = {"tcp": [], "ws": []}
    for r in range(rounds):
        for name in ("tcp", "ws") if r % 2 == 0 else ("ws", "tcp"):
            port = free_port()
            broker = setup.jetmq_plain(port, name, name == "ws")
            try:
                rate = asyncio.run(fanin(port, None, args.messages, args.window, name == "ws"))
            finally:
                broker.stop()
            rates[name].append(rate)
    ratios = [w / t for w, t in zip(rates["ws"], rates["tcp"], strict=True)]
    print(
        f"ws-fanin: jetmq over WebSocket {statistics.median(rates['ws']):,.0f} msg/s, "
        f"over TCP {statistics.median(rates['tcp']):,.0f} msg/s, ws/tcp median of per-round "
        f"ratios {statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        flush=True,
    )


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def stalled(port: int, ctx: ssl.SSLContext | None, ws: bool, n: int, pid: int) -> str:
    """A subscriber that stops reading while a publisher floods it with n x 1 KB QoS 0
    messages: the broker's RSS before and after, and whether another client is served."""
    sub = await Conn.open(port, ctx, ws)
    sub.write(connect_packet("stall-sub") + subscribe_packet(b"stall/#"))
    await sub.drain()
    await sub.readexactly(9)  # CONNACK + SUBACK; then it reads nothing more
    before = rss_mb(pid)
    pub = await Conn.open(port, ctx, ws)
    pub.write(connect_packet("stall-pub"))
    await pub.drain()
    await pub.readexactly(4)
    batch = publish_big(b"stall/x", 1000) * 100
    for _ in range(n // 100):
        pub.write(batch)
        await pub.drain()
    pub.write(b"\xc0\x00")  # PINGREQ: answered once everything before it was handled
    await pub.drain()
    await pub.readexactly(2)
    peak = rss_mb(pid)
    probe = await Conn.open(port, ctx, ws)
    probe.write(connect_packet("stall-probe"))
    await probe.drain()
    ok = (await asyncio.wait_for(probe.readexactly(4), 10))[:2] == b"\x20\x02"
    for c in (sub, pub, probe):
        c.close()
    return f"RSS {before:.0f} MB -> {peak:.0f} MB after {n:,} x 1 KB, another client served: {ok}"


def publish_big(topic: bytes, size: int) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + b"x" * size
    n = len(body)
    length = bytearray()
    while True:
        byte, n = n % 128, n // 128
        length.append(byte | (0x80 if n else 0))
        if not n:
            break
    return b"\x30" + bytes(length) + body


def stall_compare(setup: Setup, args: argparse.Namespace) -> None:
    for name in ("tcp", "tls", "ws"):
        port = free_port()
        if name == "tls":
            broker = setup.jetmq_tls(port, "stall-tls")
        else:
            broker = setup.jetmq_plain(port, f"stall-{name}", name == "ws")
        try:
            ctx = setup.client_ctx if name == "tls" else None
            line = asyncio.run(stalled(port, ctx, name == "ws", args.flood, broker.proc.pid))
        finally:
            broker.stop()
        print(f"stall over {name}: {line}", flush=True)


def acl_rules(path: pathlib.Path, n: int) -> None:
    """n rules in the anonymous section (mqttbench connects without a username), the one
    that grants the benchmark's topics last (the worst place for a first match)."""
    lines = [f"topic readwrite filler/{i}/+/data/#" for i in range(n - 3)]
    lines += ["pattern readwrite clients/%c/#", "topic deny mqb/secret/#", "topic readwrite mqb/#"]
    path.write_text("\n".join(lines) + "\n")


def acl_compare(work: pathlib.Path, rounds: int, rules: int) -> None:
    bench = work / "mqttbench"  # a private copy: it builds its C engine on first use
    shutil.copytree(MQTTBENCH.parent, bench, ignore=shutil.ignore_patterns("build"))
    acl = work / "acl"
    acl_rules(acl, rules)
    rates: dict[str, list[float]] = {"plain": [], "acl": []}
    cpu: dict[str, list[float]] = {"plain": [], "acl": []}
    for r in range(rounds):
        for name in ("plain", "acl") if r % 2 == 0 else ("acl", "plain"):  # order alternates
            port = free_port()
            data = work / f"acl-data-{name}"
            cfg = work / f"{name}.toml"
            auth = f'[auth]\nallow_anonymous = true\nacl_file = "{acl}"\n' if name == "acl" else ""
            cfg.write_text(f'[[listeners]]\nbind = "127.0.0.1:{port}"\n{auth}')
            out = work / f"{name}-{r}.json"
            cmd = f"sh -c 'rm -rf {data}; exec {JETMQ} serve --config {cfg} --data-dir {data}'"
            subprocess.run(
                [
                    sys.executable,
                    str(MQTTBENCH),
                    "--port",
                    str(port),
                    "--protocol",
                    "5",
                    "--repeat",
                    "1",
                    "--label",
                    name,
                    "--broker-cmd",
                    cmd,
                    "--json",
                    str(out),
                    "fanin",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            import json

            run = json.loads(out.read_text())["results"]["fanin"]["runs"][0]
            rates[name].append(float(run["delivered_per_s"]))
            cpu[name].append(float(run["cpu"]["broker_s"]))  # for the same 200k messages
    cpu_ratios = [a / p for a, p in zip(cpu["acl"], cpu["plain"], strict=True)]
    print(
        f"acl: broker CPU for the run without ACL {statistics.median(cpu['plain']):.2f} s, with"
        f" {rules} rules {statistics.median(cpu['acl']):.2f} s, with/without median of"
        f" per-round ratios {statistics.median(cpu_ratios):.2f}"
        f" (rounds: {', '.join(f'{r:.2f}' for r in cpu_ratios)})",
        flush=True,
    )
    ratios = [a / p for a, p in zip(rates["acl"], rates["plain"], strict=True)]
    print(
        f"acl: fanin without ACL {statistics.median(rates['plain']):,.0f} msg/s, "
        f"with {rules} rules {statistics.median(rates['acl']):,.0f} msg/s, "
        f"with/without median of per-round ratios {statistics.median(ratios):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "benchmarks", nargs="*", default=["acl", "tls-storm", "tls-fanin", "ws-fanin"]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--flood", type=int, default=100_000)
    args = parser.parse_args()
    if shutil.which("mosquitto") is None and {"tls-storm", "tls-fanin"} & set(args.benchmarks):
        raise SystemExit("bench_security: mosquitto is not installed (apt-get install mosquitto)")
    with tempfile.TemporaryDirectory(prefix="jetmq-bench-sec.") as tmp:
        work = pathlib.Path(tmp)
        setup = Setup(work)
        for what in args.benchmarks:
            if what == "acl":
                acl_compare(work, args.rounds, args.rules)
            elif what == "ws-fanin":
                ws_compare(setup, args.rounds, args)
            elif what == "stall":
                stall_compare(setup, args)
            else:
                tls_compare(setup, args.rounds, what, args)


if __name__ == "__main__":
    main()
