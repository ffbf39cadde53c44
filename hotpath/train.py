"""The training run of the profile-guided build (``scripts/build_native.py``): a broker on
an instrumented build, driven on loopback through the paths a broker runs per message and
per connect, then stopped cleanly so the profile is written.

    python -m hotpath.train                  # against a broker of its own (the build's use)
    python -m hotpath.train --port 1883      # against one already listening

The clients are plain sockets and hand-made packets: standard library only, as all of
``hotpath`` is, and independent of the codec they exercise, so a codec bug fails the run
instead of being mirrored by it. Each step checks what comes back, so a broker that
misbehaves fails the run (``TrainingError``) instead of training on error paths.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from hotpath import ENV, TRAINING_ENV

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 10.0  # seconds: any one reply
START_TIMEOUT = 60.0  # seconds: the broker listening


class TrainingError(RuntimeError):
    """The broker did not answer as a broker should."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _utf8(s: bytes) -> bytes:
    return len(s).to_bytes(2, "big") + s


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def publish(topic: bytes, payload: bytes, qos: int, pid: int, v5: bool = True) -> bytes:
    vh = _utf8(topic) + (pid.to_bytes(2, "big") if qos else b"") + (b"\x00" if v5 else b"")
    return packet(0x30 | qos << 1, vh + payload)


class Client:
    """One MQTT connection: packets out, whole packets back (type, flags, body)."""

    def __init__(
        self, port: int, client_id: bytes, v5: bool = True, clean: bool = True, expiry: int = 0
    ) -> None:
        self.v5 = v5
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""
        props = b""
        if v5:
            props = b"\x11" + expiry.to_bytes(4, "big") if expiry else b""
            props = _varint(len(props)) + props
        level = b"\x05" if v5 else b"\x04"
        flags = b"\x02" if clean else b"\x00"
        self.send(
            packet(0x10, _utf8(b"MQTT") + level + flags + b"\x00\x3c" + props + _utf8(client_id))
        )
        try:
            kind, _, body = self.read()
            if kind != 2 or body[1] != 0:
                raise TrainingError(f"CONNECT of {client_id!r} refused: {body.hex()}")
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()  # a DISCONNECT first
        else:
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> tuple[int, int, bytes]:
        while True:
            got = self._take()
            if got is not None:
                return got
            chunk = self.sock.recv(65536)
            if not chunk:
                raise TrainingError("the broker closed a connection")
            self._buf += chunk

    def _take(self) -> tuple[int, int, bytes] | None:
        buf = self._buf
        length = shift = 0
        for i in range(1, min(len(buf), 5)):
            length |= (buf[i] & 0x7F) << shift
            shift += 7
            if buf[i] < 0x80:
                end = i + 1 + length
                if len(buf) < end:
                    return None
                self._buf = buf[end:]
                return buf[0] >> 4, buf[0] & 0x0F, buf[i + 1 : end]
        return None

    def expect(self, kind: int) -> bytes:
        got, _, body = self.read()
        if got != kind:
            raise TrainingError(f"expected packet type {kind}, got {got}: {body[:16].hex()}")
        return body

    def subscribe(self, topic: bytes, qos: int) -> None:
        props = b"\x00" if self.v5 else b""
        self.send(packet(0x82, b"\x00\x01" + props + _utf8(topic) + bytes([qos])))
        body = self.expect(9)
        if body[-1] != qos:
            raise TrainingError(f"SUBSCRIBE {topic!r} granted {body[-1]}")

    def delivery(self, ack: bool = True) -> tuple[int, int, bytes]:
        """A PUBLISH received, acknowledged as its QoS asks unless ``ack`` is false:
        (qos, packet id, payload)."""
        kind, flags, body = self.read()
        if kind != 3:
            raise TrainingError(f"expected a PUBLISH, got packet type {kind}")
        qos = flags >> 1 & 3
        pos = 2 + int.from_bytes(body[:2], "big")
        pid = int.from_bytes(body[pos : pos + 2], "big") if qos else 0
        pos += 2 if qos else 0
        if self.v5:
            pos += 1 + body[pos]  # (short property lengths only: what the broker sends here)
        if ack and qos == 1:
            self.send(b"\x40\x02" + pid.to_bytes(2, "big"))
        elif ack and qos == 2:
            self.send(b"\x50\x02" + pid.to_bytes(2, "big"))
            self.expect(6)
            self.send(b"\x70\x02" + pid.to_bytes(2, "big"))
        return qos, pid, body[pos:]

    def close(self) -> None:
        try:
            self.send(b"\xe0\x00")
        finally:
            self.sock.close()


def _round_trips(port: int, n: int, qos: int, v5: bool, tag: bytes) -> None:
    """One message at a time, as a device at a low rate sends (the paced latency path)."""
    with Client(port, b"train-s-" + tag, v5) as sub, Client(port, b"train-p-" + tag, v5) as pub:
        sub.subscribe(b"train/" + tag, qos)
        one_at_a_time(sub, pub, n, qos, b"train/" + tag)


def one_at_a_time(
    sub: Client, pub: Client, n: int, qos: int, topic: bytes, pause: float = 0.0
) -> None:
    """``n`` messages from ``pub`` to ``sub`` (subscribed to ``topic``), each acknowledged
    both ways before the next; ``pause`` seconds between them."""
    v5 = pub.v5
    for i in range(n):
        pid = i % 60000 + 1
        pub.send(publish(topic, b"x" * 100, qos, pid, v5))
        if qos == 2:
            pub.expect(5)
            pub.send(b"\x62\x02" + pid.to_bytes(2, "big"))
        got = sub.delivery()
        if qos == 1:
            pub.expect(4)
        elif qos == 2:
            pub.expect(7)
        if got[2] != b"x" * 100:
            raise TrainingError("a payload came back changed")
        if pause:
            time.sleep(pause)


def _batches(port: int, batches: int, size: int, persistent: bool, tag: bytes) -> None:
    """Many QoS 1 PUBLISHes per read (fan-in); to a persistent session, stored runs."""
    expiry = 3600 if persistent else 0
    with (
        Client(port, b"train-bs-" + tag, clean=not persistent, expiry=expiry) as sub,
        Client(port, b"train-bp-" + tag) as pub,
    ):
        sub.subscribe(b"train/b/" + tag, 1)
        for b in range(batches):
            chunk = b"".join(
                publish(b"train/b/" + tag, b"y" * 64, 1, (b * size + i) % 60000 + 1)
                for i in range(size)
            )
            pub.send(chunk)
            for _ in range(size):
                sub.delivery()
                pub.expect(4)


def _windows(port: int, rounds: int, pairs: int, window: int, qos: int) -> None:
    """Several publishers, each with ``window`` messages in flight to its own subscriber
    (the throughput path: many PUBLISHes and acknowledgements per read, several sockets
    per wake-up); the subscribers acknowledge a window in one write."""
    topics = [b"train/w/%d" % i for i in range(pairs)]
    with ExitStack() as clients:
        subs = [clients.enter_context(Client(port, b"train-ws-%d" % i)) for i in range(pairs)]
        pubs = [clients.enter_context(Client(port, b"train-wp-%d" % i)) for i in range(pairs)]
        for sub, topic in zip(subs, topics, strict=True):
            sub.subscribe(topic, qos)
        for r in range(rounds):
            for pub, topic in zip(pubs, topics, strict=True):
                pub.send(
                    b"".join(
                        publish(topic, b"w" * 32, qos, (r * window + i) % 60000 + 1)
                        for i in range(window)
                    )
                )
            for sub in subs:
                got = [sub.delivery(ack=False) for _ in range(window)]
                if qos:
                    sub.send(b"".join(b"\x40\x02" + pid.to_bytes(2, "big") for _, pid, _ in got))
            if qos:
                for pub in pubs:
                    for _ in range(window):
                        pub.expect(4)


def _connects(port: int, n: int) -> None:
    for i in range(n):
        with Client(port, b"train-c-%d" % i, v5=i % 2 == 0):
            pass


def drive(port: int, scale: int = 1) -> None:
    """Every step once, ``scale`` times the default counts. The counts weigh the paths:
    gcc inlines less where little ran, so the throughput paths (windows, batches) get as
    many messages as the low-rate one (one at a time)."""
    _round_trips(port, 1500 * scale, 1, True, b"q1")
    _round_trips(port, 500 * scale, 0, True, b"q0")
    _round_trips(port, 300 * scale, 1, False, b"v4")
    _round_trips(port, 200 * scale, 2, True, b"q2")
    _windows(port, 60 * scale, 4, 64, 1)
    _windows(port, 30 * scale, 4, 64, 0)
    _batches(port, 60 * scale, 100, False, b"plain")
    _batches(port, 40 * scale, 100, True, b"stored")
    _connects(port, 500 * scale)


@contextmanager
def broker() -> Iterator[int]:
    """A broker of this tree on a free loopback port, with its data in a temporary
    directory; stopped with SIGINT (a clean exit writes the profile) when done."""
    with tempfile.TemporaryDirectory(prefix="jetmq-train-") as data:
        # (not JETMQ_NATIVE: the build's own process sets it, the broker must run compiled)
        env = {k: v for k, v in os.environ.items() if k != ENV}
        env["PYTHONPATH"] = str(ROOT)
        env[TRAINING_ENV] = "1"  # an instrumented build runs (it does for nothing else)
        with subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                data,
            ],
            cwd=data,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        ) as proc:
            try:
                yield _port_of(proc)
            finally:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=START_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise TrainingError("the broker did not stop on SIGINT") from None
        if proc.returncode != 0:
            raise TrainingError(f"the broker exited with status {proc.returncode}")


def _port_of(proc: subprocess.Popen[bytes]) -> int:
    """The port from the broker's "jetmq: listening on 127.0.0.1:PORT" line, waited for at
    most START_TIMEOUT (a broker that hangs silent fails the run, it does not hang it)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + START_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:  # the broker exited
            break
        seen += chunk
        found = re.search(rb"listening on 127\.0\.0\.1:(\d+)", seen)
        if found:
            return int(found.group(1))
    raise TrainingError("the broker did not start listening")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="a broker already listening on 127.0.0.1")
    parser.add_argument("--scale", type=int, default=1, help="multiply the counts")
    args = parser.parse_args()
    if args.port:
        drive(args.port, args.scale)
    else:
        with broker() as port:
            drive(port, args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
