"""Run a real broker for tests: in a thread (fast, in-process) or as a child process.

The in-thread broker runs ``broker.server.serve`` under its own ``trio.run`` on
127.0.0.1 port 0 with LMDB in a temp dir; readiness comes from
``task_status.started`` (never a sleep). The child-process broker is for tests
that must ``kill -9`` it; it reports its port on stdout ("listening on").
"""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

from broker.config import BrokerConfig, load_config
from broker.net.runtime import Broker
from broker.net.server import serve

START_TIMEOUT = 20.0


@dataclass
class BrokerThread:
    """A broker running ``serve`` in a background thread."""

    config: BrokerConfig
    host: str = "127.0.0.1"
    port: int = 0
    _thread: threading.Thread | None = None
    _token: trio.lowlevel.TrioToken | None = None
    _scope: trio.CancelScope | None = None
    _error: list[BaseException] = field(default_factory=list)
    addresses: list[tuple[str, int]] = field(default_factory=list)  # every listener's

    def start(self) -> None:
        ready: queue.Queue[tuple[str, int] | BaseException] = queue.Queue()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                async with trio.open_nursery() as nursery:
                    addresses = await nursery.start(_serve_partial(self.config))
                    self.addresses = addresses
                    ready.put(addresses[0])

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported to the test thread, not swallowed
                self._error.append(exc)
                ready.put(exc)

        self._thread = threading.Thread(target=run, name="jetmq-test-broker", daemon=True)
        self._thread.start()
        got = ready.get(timeout=START_TIMEOUT)
        if isinstance(got, BaseException):
            raise RuntimeError("broker failed to start") from got
        self.host, self.port = got

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self._scope is not None:
            scope = self._scope
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(scope.cancel)
        self._thread.join(timeout=30)
        alive = self._thread.is_alive()
        self._thread = None
        if alive:
            raise RuntimeError("broker thread did not stop within 30 s")
        if self._error:
            raise RuntimeError("broker thread failed") from self._error[0]


def _serve_partial(config: BrokerConfig) -> Any:
    async def run(task_status: trio.TaskStatus[list[tuple[str, int]]]) -> None:
        await serve(config, task_status=task_status)

    return run


def make_config(
    data_dir: pathlib.Path, *, sessions: dict[str, Any] | None = None, **mqtt: Any
) -> BrokerConfig:
    overrides: dict[str, dict[str, Any]] = {
        "listener": {"listen": ["127.0.0.1:0"]},
        "storage": {"data_dir": str(data_dir)},
    }
    if mqtt:
        overrides["mqtt"] = mqtt
    if sessions:
        overrides["sessions"] = sessions
    return load_config(None, overrides)


@contextlib.contextmanager
def running_broker(data_dir: pathlib.Path, **mqtt: Any) -> Iterator[BrokerThread]:
    broker = BrokerThread(make_config(data_dir, **mqtt))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def serve_command(
    data_dir: pathlib.Path,
    port: int = 0,
    file_size_limit: int | None = None,
    config: pathlib.Path | None = None,
) -> list[str]:
    """``jetmq serve`` on 127.0.0.1 as a child process; with ``file_size_limit`` the child
    may not grow any file past that many bytes (RLIMIT_FSIZE, SIGXFSZ ignored: writes
    beyond fail with EFBIG, as on a full disk); ``config``: a jetmq.toml (the listen
    address and the data dir still come from the flags)."""
    launch = ["-m", "broker"]
    if file_size_limit is not None:
        n = file_size_limit
        launch = [
            "-c",
            "import resource, runpy, signal;"
            " signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
            f" resource.setrlimit(resource.RLIMIT_FSIZE, ({n}, {n}));"
            " runpy.run_module('broker', run_name='__main__', alter_sys=True)",
        ]
    return [
        sys.executable,
        *launch,
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
        *(["--config", str(config)] if config is not None else []),
    ]


def refused_at_start(cmd: list[str]) -> str:
    """Run ``jetmq serve`` (``cmd``) expecting it to refuse to start: exit status 1 and
    one line on stderr, no traceback, never listening. Returns the line."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 1, proc.stderr
    assert "listening" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("jetmq: cannot start: ")
    return lines[0]


@dataclass
class BrokerProcess:
    """``jetmq serve`` as a child process (for kill -9 tests)."""

    data_dir: pathlib.Path
    port: int = 0
    file_size_limit: int | None = None  # see serve_command
    config: pathlib.Path | None = None  # see serve_command
    proc: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)
    _pump: threading.Thread | None = None
    _lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def start(self) -> None:
        cmd = serve_command(self.data_dir, self.port, self.file_size_limit, self.config)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.proc.stdout is not None
        lines = self._lines

        stdout = self.proc.stdout

        def pump() -> None:
            for line in stdout:
                self.output.append(line)
                lines.put(line)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        while True:
            try:
                line = lines.get(timeout=START_TIMEOUT)
            except queue.Empty:
                self.kill9()
                raise RuntimeError("broker did not start: " + "".join(self.output)) from None
            if "listening on" in line:
                self.port = int(line.rsplit(":", 1)[1])
                return

    def wait_for_output(self, text: str, timeout: float = START_TIMEOUT) -> str:
        """The next line of output containing ``text`` (lines before it are skipped)."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if text in line:
                return line
        raise AssertionError(f"no {text!r} within {timeout} s: " + "".join(self.output))

    def _reap(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        if self._pump is not None:
            self._pump.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        # Captured by pytest and shown with a failure: what the broker said before it ended.
        sys.stdout.write(f"--- broker output (exit {code}) ---\n{''.join(self.output)}")
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self._reap(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self._reap(30)


@contextlib.contextmanager
def clock_held(clock: trio.testing.MockClock) -> Iterator[None]:
    """The virtual clock does not jump while the test waits for real work (a commit on
    the writer thread, a page read in a worker thread): with autojump, every task waiting
    for it longer than the threshold would skip to the next deadline (a session's expiry,
    a message's)."""
    jump = clock.autojump_threshold
    clock.autojump_threshold = math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = jump


def run_with_broker(
    tmp_path: pathlib.Path, body: Callable[[Broker, trio.testing.MockClock], Awaitable[None]]
) -> None:
    """Run ``body`` against a real broker (its store in ``tmp_path``) on trio's MockClock."""
    clock = trio.testing.MockClock(autojump_threshold=0.05)

    async def main() -> None:
        broker = await Broker.open(make_config(tmp_path / "data"))
        try:
            async with trio.open_nursery() as nursery:
                broker.attach(nursery)
                await body(broker, clock)
                nursery.cancel_scope.cancel()
        finally:
            await broker.close()

    trio.run(main, clock=clock)
