"""systemd's notify protocol over a real datagram socket: READY only once listening,
STATUS, WATCHDOG from the event loop (and none while it is blocked), RELOADING around
SIGHUP, STOPPING; socket activation's LISTEN_FDS rules."""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import socket
import threading
import time

import pytest

from broker.ops.notify import Notifier, listen_fds
from tests.broker.harness import BrokerProcess
from tests.ops.harness import NotifySocket, ops_broker, ops_config


@pytest.mark.timeout(30)
def test_notifier_sends_one_datagram_per_call(tmp_path: pathlib.Path) -> None:
    sock = NotifySocket(tmp_path / "notify")
    try:
        notifier = Notifier({"NOTIFY_SOCKET": sock.path})
        assert notifier.enabled
        notifier.ready("3 clients")
        notifier.reloading()
        notifier.stopping()
        assert sock.receive()[1] == "READY=1\nSTATUS=3 clients"
        reloading = sock.receive()[1].split("\n")
        assert reloading[0] == "RELOADING=1"
        assert reloading[1].startswith("MONOTONIC_USEC=")
        usec = int(reloading[1].removeprefix("MONOTONIC_USEC="))
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert 0 <= now - usec < 10_000_000
        assert sock.receive()[1] == "STOPPING=1"
        notifier.close()
    finally:
        sock.close()


@pytest.mark.timeout(30)
def test_notifier_reaches_an_abstract_socket() -> None:
    name = f"jetmq-test-{os.getpid()}-{time.monotonic_ns()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name)
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        notifier.watchdog()
        notifier.close()
        server.settimeout(10)
        assert server.recv(100) == b"WATCHDOG=1"
    finally:
        server.close()


def test_outside_systemd_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.notify("READY=1") is False
    assert notifier.watchdog_usec == 0
    # A watchdog meant for another process is not ours.
    other = Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid() + 1)})
    assert other.watchdog_usec == 0
    assert Notifier({"WATCHDOG_USEC": "1000000"}).watchdog_usec == 1_000_000


def test_listen_fds_only_for_this_process() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
    assert listen_fds(env) == []
    assert env == {}  # unset, so a child process does not take them either
    assert listen_fds({"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"}) == []


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_served_broker_notifies_in_order(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """READY=1 (with STATUS) only when the listener accepts; WATCHDOG=1 at half of
    WATCHDOG_USEC; SIGHUP: RELOADING=1 + MONOTONIC_USEC, then READY=1; SIGTERM: STOPPING=1."""
    sock = NotifySocket(tmp_path / "notify")
    conf = tmp_path / "jetmq.toml"
    conf.write_text('[log]\nlevel = "info"\n')
    monkeypatch.setenv("NOTIFY_SOCKET", sock.path)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")
    broker = BrokerProcess(tmp_path / "data", config=conf)
    try:
        broker.start()
        first = sock.until("READY=1")
        assert [m for m in first if not m.startswith(("STATUS=", "WATCHDOG=1"))] == [first[-1]]
        assert "STATUS=0 clients" in first[-1]
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10):
            pass  # READY meant it: the listener accepts
        times: list[float] = []
        while len(times) < 3:
            at, message = sock.receive()
            if message == "WATCHDOG=1":
                times.append(at)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(0.1 < gap < 0.6 for gap in gaps), gaps  # every 0.2 s
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        got = sock.until("RELOADING=1")[-1].split("\n")
        assert got[1].startswith("MONOTONIC_USEC=")
        assert sock.until("READY=1")[-1].startswith("READY=1")
        assert broker.terminate() == 0  # SIGTERM
        assert sock.until("STOPPING=1")[-1] == "STOPPING=1"
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()
        sock.close()


@pytest.mark.timeout(60)
def test_the_watchdog_stops_while_the_event_loop_is_blocked(tmp_path: pathlib.Path) -> None:
    sock = NotifySocket(tmp_path / "notify")
    arrivals: list[tuple[float, str]] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                arrivals.append(sock.receive(timeout=0.2))
            except TimeoutError:
                continue

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    env = {"NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": "100000"}  # WATCHDOG=1 every 50 ms
    try:
        with ops_broker(ops_config(tmp_path / "data"), env) as broker:
            deadline = time.monotonic() + 10
            while sum(m == "WATCHDOG=1" for _, m in arrivals) < 5:
                assert time.monotonic() < deadline, arrivals
                time.sleep(0.02)

            def block() -> tuple[float, float]:
                start = time.monotonic()
                time.sleep(1.0)  # a wedged event loop
                return start, time.monotonic()

            start, end = broker.call(block)
            deadline = time.monotonic() + 10
            while not any(m == "WATCHDOG=1" and t > end for t, m in arrivals):
                assert time.monotonic() < deadline, "the watchdog did not resume"
                time.sleep(0.02)
    finally:
        stop.set()
        reader.join(timeout=5)
        sock.close()
    during = [t for t, m in arrivals if m == "WATCHDOG=1" and start + 0.1 < t < end]
    assert during == []
    before = [t for t, m in arrivals if m == "WATCHDOG=1" and t < start]
    assert len(before) >= 5
