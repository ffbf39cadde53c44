"""A broker with its operations side (``broker.ops.service.Operations``) for tests: in a
thread (``OpsBroker``) or as ``jetmq serve`` in a child process (``ops_process``), and a
datagram socket standing in for systemd's ``$NOTIFY_SOCKET``."""

from __future__ import annotations

import contextlib
import functools
import pathlib
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from broker.config import BrokerConfig, load_config
from broker.net.server import serve
from broker.ops.notify import Notifier
from broker.ops.service import Operations

START_TIMEOUT = 20.0
T = TypeVar("T")


def ops_config(data_dir: pathlib.Path, **sections: dict[str, Any]) -> BrokerConfig:
    overrides: dict[str, dict[str, Any]] = {
        "listener": {"listen": ["127.0.0.1:0"]},
        "storage": {"data_dir": str(data_dir)},
        "http": {"bind": "127.0.0.1:0"},
    }
    overrides.update(sections)
    return load_config(None, overrides)


@dataclass
class OpsBroker:
    """``serve`` with an ``Operations`` supervisor in a background thread."""

    config: BrokerConfig
    environ: dict[str, str] = field(default_factory=dict)
    port: int = 0
    ops: Operations | None = None
    _thread: threading.Thread | None = None
    _token: trio.lowlevel.TrioToken | None = None
    _scope: trio.CancelScope | None = None
    _error: list[BaseException] = field(default_factory=list)

    @property
    def http_port(self) -> int:
        assert self.ops is not None
        assert self.ops.http_address is not None
        return self.ops.http_address[1]

    def start(self) -> None:
        ready: queue.Queue[int | BaseException] = queue.Queue()
        self.ops = ops = Operations(self.config, notifier=Notifier(self.environ))

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    addresses = await nursery.start(
                        functools.partial(serve, self.config, supervisor=ops)
                    )
                    ops.ready(addresses)
                    ready.put(addresses[0][1])

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:
                self._error.append(exc)
                ready.put(exc)

        self._thread = threading.Thread(target=run, name="jetmq-ops-broker", daemon=True)
        self._thread.start()
        got = ready.get(timeout=START_TIMEOUT)
        if isinstance(got, BaseException):
            raise RuntimeError("broker failed to start") from got
        self.port = got

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
        ok, value = out.get(timeout=10)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self._scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._scope.cancel)
        self._thread.join(timeout=30)
        if self.ops is not None:
            self.ops.notifier.close()
        alive = self._thread.is_alive()
        self._thread = None
        if alive:
            raise RuntimeError("broker thread did not stop within 30 s")
        if self._error:
            raise RuntimeError("broker thread failed") from self._error[0]


@contextlib.contextmanager
def ops_broker(config: BrokerConfig, environ: dict[str, str] | None = None) -> Iterator[OpsBroker]:
    broker = OpsBroker(config, environ or {})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class NotifySocket:
    """A datagram socket at a path, as systemd's notify socket: messages with the time they
    arrived (``time.monotonic``), in order."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def receive(self, timeout: float = 10.0) -> tuple[float, str]:
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096)
        return time.monotonic(), data.decode()

    def until(self, prefix: str, timeout: float = 20.0) -> list[str]:
        """Every message up to and including the first starting with ``prefix``."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {prefix!r} within {timeout} s; got {seen}")
            _, message = self.receive(remaining)
            seen.append(message)
            if message.startswith(prefix):
                return seen

    def close(self) -> None:
        self.sock.close()


def http_get(port: int, path: str, timeout: float = 10.0) -> tuple[int, str, bytes]:
    """GET ``path`` on 127.0.0.1: status, content type, body (errors included)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.headers.get("content-type", ""), r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers.get("content-type", ""), exc.read()
