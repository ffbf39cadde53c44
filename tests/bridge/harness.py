"""A jetmq broker with a bridge in a thread (real clock, port 0) whose state the test can
read, and a blocking nats-py client for the test's side of NATS."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats
import trio
from nats.aio.client import Client
from nats.aio.msg import Msg

from broker.config import BrokerConfig, load_config
from broker.net.runtime import Broker
from broker.net.server import serve
from tests.broker.pahoclient import Paho

T = TypeVar("T")
TIMEOUT = 20.0


def bridge_config(
    data_dir: pathlib.Path, bridge: dict[str, Any] | None, **sessions: Any
) -> BrokerConfig:
    """The test broker's configuration; ``bridge`` None: no ``[bridge]``."""
    overrides: dict[str, dict[str, Any]] = {
        "listener": {"listen": ["127.0.0.1:0"]},
        "storage": {"data_dir": str(data_dir), "sync": "batch"},
    }
    if bridge is not None:
        overrides["bridge"] = bridge
    if sessions:
        overrides["sessions"] = sessions
    return load_config(None, overrides)


@dataclass
class BridgedBroker:
    """``serve`` in a background thread; ``broker`` is the running Broker."""

    config: BrokerConfig
    port: int = 0
    broker: Broker | None = None
    _thread: threading.Thread | None = None
    _token: trio.lowlevel.TrioToken | None = None
    _scope: trio.CancelScope | None = None
    _error: list[BaseException] = field(default_factory=list)

    def start(self) -> BridgedBroker:
        ready: queue.Queue[tuple[str, int] | BaseException] = queue.Queue()

        def opened(broker: Broker) -> None:
            self.broker = broker

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope

                async def run(task_status: trio.TaskStatus[list[tuple[str, int]]]) -> None:
                    await serve(self.config, task_status=task_status, opened=opened)

                async with trio.open_nursery() as nursery:
                    addresses = await nursery.start(run)
                    ready.put(addresses[0])

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:
                self._error.append(exc)
                ready.put(exc)

        self._thread = threading.Thread(target=run, name="jetmq-bridged", daemon=True)
        self._thread.start()
        got = ready.get(timeout=TIMEOUT)
        if isinstance(got, BaseException):
            raise RuntimeError("broker failed to start") from got
        self.port = got[1]
        return self

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the broker's trio thread and return its result."""
        assert self._token is not None
        out: queue.Queue[tuple[bool, Any]] = queue.Queue()

        def run() -> None:
            try:
                out.put((True, fn()))
            except BaseException as exc:
                out.put((False, exc))

        self._token.run_sync_soon(run)
        ok, value = out.get(timeout=TIMEOUT)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def state(self) -> dict[str, Any]:
        def snap() -> dict[str, Any]:
            assert self.broker is not None
            return self.broker.bridge.status().snapshot()  # type: ignore[no-any-return]

        return self.call(snap)

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self._scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._scope.cancel)
        self._thread.join(timeout=30)
        alive = self._thread.is_alive()
        self._thread = None
        if alive:
            raise RuntimeError("broker thread did not stop within 30 s")
        if self._error:
            raise RuntimeError("broker thread failed") from self._error[0]


class NatsClient:
    """nats-py on a loop thread of its own, with a blocking surface (every wait bounded)."""

    def __init__(self, url: str | list[str], **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.nc: Client = self.run(nats.connect(url, **options))
        self.js: Any = self.nc.jetstream()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def subscribe(self, subject: str) -> queue.Queue[Msg]:
        got: queue.Queue[Msg] = queue.Queue()

        async def cb(msg: Msg) -> None:
            got.put(msg)

        async def sub() -> None:
            await self.nc.subscribe(subject, cb=cb)
            await self.nc.flush()

        self.run(sub())
        return got

    def publish(self, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
        async def pub() -> None:
            await self.nc.publish(subject, payload, headers=headers)
            await self.nc.flush()

        self.run(pub())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.nc.close(), 10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    """Until ``cond()`` holds (polled every 20 ms), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def serve_process(config: pathlib.Path) -> tuple[subprocess.Popen[str], int]:
    """``jetmq serve --config`` as a child process, once it listens: (process, port). Its
    output stays readable on ``stdout``; end it with :func:`end_process`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on 127.0.0.1:" in line:
            return proc, int(line.rsplit(":", 1)[1].split()[0])
    end_process(proc)
    raise AssertionError("jetmq serve ended before it listened")


def end_process(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


def forwards(port: int, nc: NatsClient, topic: str, subject: str) -> bytes:
    """Publish to ``topic`` until ``subject`` receives it (the bridge may still be
    connecting to NATS); the payload received."""
    got = nc.subscribe(subject)
    pub = Paho(port, f"pub-{topic.replace('/', '-')}")
    pub.connect()
    try:
        deadline = time.monotonic() + 20
        while got.empty():
            assert time.monotonic() < deadline, f"{topic} was never forwarded"
            pub.publish(topic, "hello", qos=1)
            time.sleep(0.2)
        return bytes(got.get().data)
    finally:
        pub.disconnect()
