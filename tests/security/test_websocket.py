"""MQTT over WebSocket (wsproto): paho with ``transport="websockets"`` over ws and wss,
the subprotocol and path checks, and bad input (unmasked frames, text frames, bad
opcodes, a giant frame, a truncated TLS record) closed cleanly with nothing else
affected."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
from collections.abc import Callable

import pytest

from tests.broker.harness import BrokerThread
from tests.broker.pahoclient import V311, Paho
from tests.security.conftest import Certs

pytestmark = pytest.mark.timeout(60)
WS = '[[listeners]]\nbind = "127.0.0.1:0"\ntransport = "ws"\n'


def handshake(sock: socket.socket, path: str = "/mqtt", protocol: str | None = "mqtt") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if protocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer


def frame(payload: bytes, opcode: int = 2, mask: bool = True, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    head = bytes([0x80 | opcode])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def closed_soon(sock: socket.socket) -> bool:
    """The broker closes (after any close frame / HTTP answer)."""
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_paho_over_websocket(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(WS)
    sub = Paho(broker.port, "ws-sub", transport="websockets")
    pub = Paho(broker.port, "ws-pub", transport="websockets", protocol=V311)
    try:
        assert sub.connect()[1] == 0
        sub.subscribe("ws/#", qos=1)
        assert pub.connect()[1] == 0
        big = os.urandom(200_000)  # several frames' worth, reassembled
        pub.publish("ws/big", big, qos=1)
        pub.publish("ws/small", b"hi", qos=1)
        assert sub.get().payload == big
        assert sub.get().payload == b"hi"
    finally:
        pub.disconnect()
        sub.disconnect()


def test_paho_over_secure_websocket(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    tls = f'tls = {{ cert = "{certs.server_cert}", key = "{certs.server_key}" }}\n'
    broker = start_broker(WS + tls)
    client = Paho(broker.port, "wss-1", transport="websockets")
    client.client.tls_set(ca_certs=str(certs.ca_file))
    try:
        assert client.connect()[1] == 0
        client.subscribe("wss/x", qos=1)
        client.publish("wss/x", b"over wss", qos=1)
        assert client.get().payload == b"over wss"
    finally:
        client.disconnect()


def test_subprotocol_and_path_are_checked(start_broker: Callable[[str], BrokerThread]) -> None:
    broker = start_broker(WS)
    for path, protocol, status in (
        ("/mqtt", "mqtt", b"101"),
        ("/other", "mqtt", b"404"),
        ("/mqtt", None, b"400"),
        ("/mqtt", "chat", b"400"),
    ):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            answer = handshake(sock, path, protocol)
            assert answer.split(b" ")[1] == status, answer
            if status == b"101":
                assert b"sec-websocket-protocol: mqtt" in answer.lower()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(frame(b"\x10\x00", mask=False), id="unmasked"),
        pytest.param(frame(b"hello", opcode=1), id="text-frame"),
        pytest.param(frame(b"x", opcode=3), id="reserved-opcode"),
        pytest.param(bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 63), id="absurd-length"),
        pytest.param(frame(b"\xff" * 20), id="garbage-mqtt"),
    ],
)
def test_bad_frames_close_that_connection_only(
    bad: bytes, start_broker: Callable[[str], BrokerThread]
) -> None:
    broker = start_broker(WS)
    ok = Paho(broker.port, "bystander", transport="websockets")
    try:
        assert ok.connect()[1] == 0
        ok.subscribe("still/here")
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            assert handshake(sock).startswith(b"HTTP/1.1 101")
            sock.sendall(bad)
            assert closed_soon(sock)
        ok.publish("still/here", b"fine", qos=1)
        assert ok.get().payload == b"fine"
    finally:
        ok.disconnect()


def test_giant_frame_is_bounded_by_max_packet_size(
    start_broker: Callable[[str], BrokerThread],
) -> None:
    broker = start_broker(WS + "[mqtt]\nmax_packet_size = 4096\n")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        assert handshake(sock).startswith(b"HTTP/1.1 101")
        connect = b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x01x"
        sock.sendall(frame(connect))
        # A PUBLISH announcing 10 MB inside a frame announcing 100 MB: refused early.
        header = b"\x30" + bytes([0x80, 0xAD, 0xE2, 0x04])  # remaining length 10,000,000
        sock.sendall(frame(header + b"\x00" * 8000, length=100_000_000)[: 14 + 8005])
        assert closed_soon(sock)


def test_truncated_tls_record_on_wss(
    certs: Certs, start_broker: Callable[[str], BrokerThread]
) -> None:
    tls = f'tls = {{ cert = "{certs.server_cert}", key = "{certs.server_key}" }}\n'
    broker = start_broker(WS + tls)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a cut ClientHello
        sock.shutdown(socket.SHUT_WR)
        assert closed_soon(sock)
    ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    client = Paho(broker.port, "after-cut", transport="websockets")
    client.client.tls_set_context(ctx)
    try:
        assert client.connect()[1] == 0
    finally:
        client.disconnect()


def test_pings_while_the_broker_is_busy_sending(
    start_broker: Callable[[str], BrokerThread],
) -> None:
    """WebSocket pings answered by the reader while the writer is blocked on a full socket:
    one sender at a time, no internal error, the connection carries on."""
    broker = start_broker(WS)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        assert handshake(sock).startswith(b"HTTP/1.1 101")
        sock.sendall(frame(b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x01w"))
        sock.sendall(frame(b"\x82\x0c\x00\x01\x00\x07flood/#\x00"))
        got = b""
        while b"\x90\x03\x00\x01\x00" not in got:  # SUBACK (after the CONNACK)
            got += sock.recv(4096)
        pub = Paho(broker.port, "flooder", transport="websockets")
        try:
            assert pub.connect()[1] == 0
            for _ in range(3000):
                pub.client.publish("flood/x", b"y" * 1000)
            done = pub.client.publish("flood/end", b"end", qos=1)
            done.wait_for_publish(20)
        finally:
            pub.disconnect()
        for _ in range(50):  # pings while the broker cannot write to us
            sock.sendall(frame(b"p", opcode=9))
        sock.sendall(frame(b"\xc0\x00"))  # MQTT PINGREQ after them
        data = b""
        while not data.endswith(b"\xd0\x00"):  # ...until the PINGRESP's frame (last)
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            data += chunk
        assert b"\x8a\x01p" in data  # a pong
        assert b"\xe0" not in data[:2]  # no DISCONNECT frame at the start
