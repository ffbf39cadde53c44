#!/usr/bin/env python3
"""Benchmark of the broker's memory with a large offline queue and many retained messages.

Runs ``jetmq serve`` as a child process on a temporary data directory (127.0.0.1, a free
port) and, per run:

1. an MQTT 5 paho client subscribes at QoS 1 with a persistent session
   (Session Expiry Interval 0xFFFFFFFF) and disconnects; a paho publisher sends
   ``--queued`` (10,000) QoS 1 messages of ``--size`` (100 KB), at most 100 unacknowledged;
   the broker's RSS is read from /proc/<pid>/status (VmRSS, RssAnon, VmHWM);
2. the broker is stopped (SIGTERM) and started again: time from the spawn to the
   "listening on" line, and RSS once listening;
3. the subscriber reconnects (Clean Start 0) and receives every message (checked in
   order); the time and the broker's peak RSS (VmHWM, reset after the restart) while
   they go out;
4. on a fresh data directory: RSS of the idle broker, then ``--retained`` (100,000)
   retained QoS 0 messages of 50 bytes on distinct topics (a QoS 1 publish after them as
   the barrier: acknowledged once every one before it is applied); RSS delta (VmRSS,
   which counts the store's file pages the process has mapped, and RssAnon); then a
   subscriber of ``r/#`` receives them all (time); then a restart and the RSS delta of
   the restarted broker over an idle one.

Prints the median of ``--runs`` (3) runs of each number. The queue limits are raised in
the config so that nothing is dropped (the defaults would keep 1,000 copies): this
measures what a session allowed to queue 1 GB costs in RAM.

Usage: ``.venv/bin/python scripts/bench_memory.py [--runs N] [--queued N] [--size B]
[--retained N] [--sync always|batch]`` (``--queued 0`` / ``--retained 0``: skip that part)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 120.0
WINDOW = 100  # unacknowledged QoS 1 publishes


class Broker:
    """``jetmq serve`` as a child process."""

    def __init__(self, data_dir: pathlib.Path, config: pathlib.Path) -> None:
        self.data_dir = data_dir
        self.config = config
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.listen_s = 0.0

    def start(self) -> None:
        # `jetmq serve`, as `python -m broker` from this tree (the console script would
        # run whatever tree is installed)
        cmd = [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--config",
            str(self.config),
            "--data-dir",
            str(self.data_dir),
        ]
        cmd += ["--listen", "127.0.0.1:0"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + TIMEOUT
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if "listening on" in line:
                self.listen_s = time.monotonic() - t0
                self.port = int(line.rsplit(":", 1)[1])
                return

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM, RssAnon, RssFile of the broker, in bytes."""
        assert self.proc is not None
        out: dict[str, int] = {}
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[name] = int(value.split()[0]) * 1024
        return out

    def reset_peak(self) -> None:
        """Start VmHWM over from the current RSS (``clear_refs`` 5)."""
        assert self.proc is not None
        pathlib.Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
        self.proc = None


class Client:
    """A paho MQTT 5 client with bounded waits."""

    def __init__(self, port: int, client_id: str) -> None:
        self.port = port
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        self.client.max_inflight_messages_set(WINDOW)
        self.client.max_queued_messages_set(0)
        self.connected: queue.Queue[Any] = queue.Queue()
        self.subacks: queue.Queue[Any] = queue.Queue()
        self.client.on_connect = lambda _c, _u, flags, rc, _p: self.connected.put((flags, rc))
        self.client.on_subscribe = lambda _c, _u, _m, rcs, _p: self.subacks.put(rcs)

    def connect(self, *, clean_start: bool = True, expiry: int = 0) -> Any:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        if expiry:
            props.SessionExpiryInterval = expiry
        self.client.connect(
            "127.0.0.1", self.port, keepalive=120, clean_start=clean_start, properties=props
        )
        self.client.loop_start()
        flags, rc = self.connected.get(timeout=TIMEOUT)
        if rc.is_failure:
            raise RuntimeError(f"CONNACK {rc}")
        return flags

    def subscribe(self, topic: str, qos: int) -> None:
        self.client.subscribe(topic, options=SubscribeOptions(qos=qos))
        self.subacks.get(timeout=TIMEOUT)

    def publish_all(self, messages: Iterator[tuple[str, bytes, int, bool]]) -> None:
        """Publish with at most ``WINDOW`` QoS 1 messages unacknowledged."""
        pending: list[mqtt.MQTTMessageInfo] = []
        for topic, payload, qos, retain in messages:
            info = self.client.publish(topic, payload, qos, retain)
            if qos:
                pending.append(info)
                if len(pending) >= WINDOW:
                    pending[0].wait_for_publish(TIMEOUT)
                    pending = [p for p in pending if not p.is_published()]
        for info in pending:
            info.wait_for_publish(TIMEOUT)
            if not info.is_published():
                raise RuntimeError("a publish was not acknowledged")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@contextlib.contextmanager
def broker_in(data_dir: pathlib.Path, config: pathlib.Path) -> Iterator[Broker]:
    b = Broker(data_dir, config)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def settle(b: Broker) -> dict[str, int]:
    """RSS once the broker has stopped moving (its commits and frees are done)."""
    time.sleep(1.0)  # a measurement, not a test: the last commit's frees and GC settle
    return b.status()


def queued_run(tmp: pathlib.Path, config: pathlib.Path, n: int, size: int) -> dict[str, float]:
    data = tmp / "queued"
    out: dict[str, float] = {}
    payload_tail = b"x" * (size - 8)
    with broker_in(data, config) as b:
        out["idle_rss"] = b.status()["VmRSS"]
        sub = Client(b.port, "bench-sub")
        sub.connect(expiry=0xFFFFFFFF)
        sub.subscribe("bench/q", 1)
        sub.close()
        pub = Client(b.port, "bench-pub")
        pub.connect()
        t0 = time.monotonic()
        pub.publish_all(
            ("bench/q", i.to_bytes(8, "big") + payload_tail, 1, False) for i in range(n)
        )
        out["queue_s"] = time.monotonic() - t0
        pub.close()
        st = settle(b)
        out["queued_rss"] = st["VmRSS"]
        out["queued_anon"] = st["RssAnon"]
        out["queued_hwm"] = st["VmHWM"]
    with broker_in(data, config) as b:
        out["restart_listen_s"] = b.listen_s
        st = b.status()
        out["restart_rss"] = st["VmRSS"]
        out["restart_anon"] = st["RssAnon"]
        out["restart_hwm"] = st["VmHWM"]
        b.reset_peak()
        got: queue.Queue[bytes] = queue.Queue()
        sub = Client(b.port, "bench-sub")
        sub.client.on_message = lambda _c, _u, m: got.put(m.payload[:8])
        t0 = time.monotonic()
        flags = sub.connect(clean_start=False, expiry=0xFFFFFFFF)
        if not flags.session_present:
            raise RuntimeError("the session was not kept")
        for i in range(n):
            head = got.get(timeout=TIMEOUT)
            if int.from_bytes(head, "big") != i:
                raise RuntimeError(f"message {i} out of order: {int.from_bytes(head, 'big')}")
        out["drain_s"] = time.monotonic() - t0
        out["drain_hwm"] = b.status()["VmHWM"]
        sub.close()
    shutil.rmtree(data)
    return out


def retained_run(tmp: pathlib.Path, config: pathlib.Path, n: int) -> dict[str, float]:
    data = tmp / "retained"
    out: dict[str, float] = {}
    with broker_in(data, config) as b:
        base = settle(b)
        pub = Client(b.port, "bench-ret")
        pub.connect()
        pub.publish_all((f"r/{i // 1000}/{i:06d}", f"{i:050d}".encode(), 0, True) for i in range(n))
        pub.publish_all(iter([("r/barrier", b"b" * 50, 1, True)]))
        pub.close()
        st = settle(b)
        out["retained_rss_delta"] = st["VmRSS"] - base["VmRSS"]
        out["retained_anon_delta"] = st["RssAnon"] - base["RssAnon"]
        got: queue.Queue[bool] = queue.Queue()
        sub = Client(b.port, "bench-ret-sub")
        sub.client.on_message = lambda _c, _u, _m: got.put(True)
        sub.connect()
        t0 = time.monotonic()
        sub.subscribe("r/#", 0)
        for _ in range(n + 1):
            got.get(timeout=TIMEOUT)
        out["retained_subscribe_s"] = time.monotonic() - t0
        sub.close()
    with broker_in(tmp / "empty", config) as b:
        empty = settle(b)
    with broker_in(data, config) as b:
        out["retained_restart_listen_s"] = b.listen_s
        st = settle(b)
        out["retained_restart_rss_delta"] = st["VmRSS"] - empty["VmRSS"]
        out["retained_restart_anon_delta"] = st["RssAnon"] - empty["RssAnon"]
    shutil.rmtree(data)
    shutil.rmtree(tmp / "empty")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queued", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--retained", type=int, default=100_000)
    ap.add_argument("--sync", choices=("always", "batch"), default="always")
    args = ap.parse_args()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="jetmq-bench-mem-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        config = tmp / "jetmq.toml"
        config.write_text(
            f'[storage]\nsync = "{args.sync}"\n\n'
            "[sessions]\nmax_queued_messages = 0\nmax_queued_bytes = 0\n"
        )
        for run in range(args.runs):
            row = queued_run(tmp, config, args.queued, args.size) if args.queued else {}
            if args.retained:
                row |= retained_run(tmp, config, args.retained)
            for k, v in row.items():
                results.setdefault(k, []).append(v)
            print(f"run {run + 1}: " + ", ".join(_fmt(k, v) for k, v in row.items()), flush=True)
    print(
        f"\nmedians of {args.runs} runs ({args.queued} x {args.size} B queued QoS 1,"
        f" {args.retained} x 50 B retained, sync={args.sync}):"
    )
    for k, vs in results.items():
        print("  " + _fmt(k, statistics.median(vs)))
    return 0


def _fmt(name: str, value: float) -> str:
    if name.endswith("_s"):
        return f"{name} {value:.2f} s"
    return f"{name} {value / 1e6:.1f} MB"


if __name__ == "__main__":
    sys.exit(main())
