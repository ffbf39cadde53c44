"""The accept loop's sockets: Nagle is off on every accepted connection, whether it
inherited TCP_NODELAY from the listening socket (Linux) or got it itself."""

from __future__ import annotations

import functools
import pathlib
import resource
import socket
import subprocess
import sys

import pytest
import trio

from broker.mqtt.encoder import encode
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connect, Publish
from broker.net.connection import _NOT_CONNECTED
from broker.net.runtime import Broker
from broker.net.server import FD_TABLE_SLOTS, serve
from broker.net.transport import nodelay_on, prepare_socket
from tests.broker.harness import BrokerProcess, make_config

pytestmark = pytest.mark.timeout(60)

V5 = ProtocolVersion.MQTT_5


def test_every_accepted_socket_has_nagle_off(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        opened: list[Broker] = []
        async with trio.open_nursery() as nursery:
            serving = functools.partial(serve, make_config(tmp_path), opened=opened.append)
            host, port = (await nursery.start(serving))[0]
            clients = []
            with trio.fail_after(10):
                for i in range(3):  # the first is checked, the others inherit
                    sock = trio.socket.socket()
                    await sock.connect((host, port))
                    await sock.send(encode(Connect(V5, f"nagle-{i}"), V5))
                    assert (await sock.recv(100))[0] == 0x20  # CONNACK
                    clients.append(sock)
            conns = opened[0].connections
            assert len(conns) == 3
            for conn in conns:
                raw = conn.transport.raw
                assert raw is not None
                assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            for sock in clients:
                sock.close()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_prepare_socket_turns_nagle_off_unless_told_it_is() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            assert not nodelay_on(accepted)
            prepare_socket(accepted, nodelay=False)
            assert not nodelay_on(accepted)
            assert not accepted.getblocking()
            prepare_socket(accepted)
            assert nodelay_on(accepted)
    a, b = socket.socketpair()  # not TCP: cannot tell, and cannot set (no error either)
    with a, b:
        assert not nodelay_on(a)
        prepare_socket(a)
        assert not nodelay_on(a)


def test_the_shared_state_before_connack_stays_empty(tmp_path: pathlib.Path) -> None:
    """Connections share one empty codec session state until their CONNECT is accepted:
    packets pipelined behind CONNECTs, accepted or refused, must never land in it."""
    v311 = ProtocolVersion.MQTT_3_1_1
    pipelined = [
        # accepted, QoS 1 and QoS 2 PUBLISHes right behind the CONNECT
        (encode(Connect(V5, "ok-5"), V5), V5),
        (encode(Connect(v311, "ok-311"), v311), v311),
        # refused: an empty client id with a session to keep (3.1.1: 0x02), and a protocol
        # level nobody speaks (a CONNACK, then the connection is closed)
        (encode(Connect(v311, "", clean_start=False), v311), v311),
        (b"\x10\x0d\x00\x04MQTT\x07\x02\x00\x3c\x00\x01x", V5),
    ]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            serving = functools.partial(serve, make_config(tmp_path))
            host, port = (await nursery.start(serving))[0]
            with trio.fail_after(10):
                for connect, version in pipelined:
                    data = connect + b"".join(
                        encode(Publish(b"t/pipelined", b"x", qos, packet_id=7 + qos), version)
                        for qos in (1, 2)
                    )
                    sock = trio.socket.socket()
                    await sock.connect((host, port))
                    await sock.send(data)
                    assert (await sock.recv(100))[0] == 0x20  # a CONNACK, accepted or not
                    sock.close()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert _NOT_CONNECTED.outbound == {}
    assert _NOT_CONNECTED.inbound_qos2 == set()


def _fd_table_size(pid: int | str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("FDSize:"):
            return int(line.split()[1])
    raise AssertionError("no FDSize in /proc/PID/status")


def test_the_served_broker_grows_its_descriptor_table_at_start(tmp_path: pathlib.Path) -> None:
    # A table grown under load waits for an RCU grace period per doubling (threads share
    # it): the first connects of a storm stalled. A plain process starts at 64 slots.
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        assert broker.proc is not None
        want = FD_TABLE_SLOTS if soft == resource.RLIM_INFINITY else min(soft, FD_TABLE_SLOTS)
        assert _fd_table_size(broker.proc.pid) >= want
    finally:
        assert broker.terminate() == 0


def test_growing_the_table_keeps_to_the_limit_and_touches_no_open_descriptor() -> None:
    # In a child: a soft limit of 500, a descriptor already open at 499 (as one handed
    # over could be): the table grows to 512 slots and 499 stays the file it was.
    script = (
        "import os, resource, sys\n"
        "from broker.net.server import grow_fd_table\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (500, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "r, w = os.pipe()\n"
        "os.dup2(w, 499)\n"
        "print(grow_fd_table())\n"
        "os.write(499, b'still the pipe')\n"
        "print(os.read(r, 100).decode())\n"
        "print([l for l in open('/proc/self/status') if l.startswith('FDSize')][0].split()[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=50, check=True
    ).stdout.splitlines()
    assert out == ["500", "still the pipe", "512"]
