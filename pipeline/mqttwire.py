"""A minimal blocking MQTT 5 client for request/answer traffic on one inbox (``url=`` reads).

Why not paho here: paho copies a received PUBLISH whole several times while it decodes
it (``struct.unpack`` of the rest of the packet per field, a slice of the rest per
property byte), which for the multi-megabyte packed answers of :mod:`pipeline.netread`
cost about 0.45 us a row, as much as decoding the rows. :class:`Wire` reads a large
packet with ``recv_into`` straight into one buffer of its size and hands the payload out
as a ``memoryview`` of it: one copy, from the kernel.

It does what the reader needs and nothing more: CONNECT (clean start, credentials),
SUBSCRIBE, PUBLISH at QoS 1 with response topic, correlation data and user properties,
PUBACK of the broker's QoS 1 PUBLISHes, DISCONNECT. No topic aliases (none asked for),
no QoS 2, no keepalive pings (a task reads continuously; it sends requests all along).
Driven by one thread; every socket error or malformed packet raises :class:`WireError`.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from pipeline.mqttpub import BrokerAddress, tls_context

CONNACK: Final = 2
PUBLISH: Final = 3
PUBACK: Final = 4
SUBACK: Final = 9
DISCONNECT: Final = 14

_U16 = struct.Struct(">H")
_R = TypeVar("_R", bytes, int)
_CHUNK: Final = 1 << 16
# property id -> value kind (MQTT 5 §2.2.2.2): b byte, h u16, i u32, v varint, s string,
# d binary data, p string pair
_KINDS: Final = {
    0x01: "b", 0x02: "i", 0x03: "s", 0x08: "s", 0x09: "d", 0x0B: "v", 0x11: "i", 0x12: "s",
    0x13: "h", 0x15: "s", 0x16: "d", 0x17: "b", 0x18: "i", 0x19: "b", 0x1A: "s", 0x1C: "s",
    0x1F: "s", 0x21: "h", 0x22: "h", 0x23: "h", 0x24: "b", 0x25: "b", 0x26: "p", 0x27: "i",
    0x28: "b", 0x29: "b", 0x2A: "b",
}  # fmt: skip
_SIZES: Final = {"b": 1, "h": 2, "i": 4}


class WireError(RuntimeError):
    """The connection failed, was closed, or carried a packet that is not MQTT 5."""


@dataclass
class Props:
    """The properties a reader looks at; the others are skipped."""

    correlation: bytes | None = None
    reason: str | None = None
    user: tuple[tuple[str, str], ...] = ()


@dataclass
class Message:
    topic: str
    payload: memoryview
    props: Props


def _vbi(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return _U16.pack(len(raw)) + raw


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + _vbi(len(body)) + body


def _read_vbi(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(4):
        if pos >= len(buf):
            raise WireError("a packet is cut short")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise WireError("a variable byte integer is longer than 4 bytes")


def parse_props(buf: bytes | bytearray | memoryview, pos: int) -> tuple[Props, int]:
    """The properties at ``pos`` (length first); the position after them."""
    size, pos = _read_vbi(buf, pos)
    end = pos + size
    if end > len(buf):
        raise WireError("a packet's properties overrun it")
    out = Props()
    user: list[tuple[str, str]] = []
    while pos < end:
        ident, pos = _read_vbi(buf, pos)
        kind = _KINDS.get(ident)
        if kind is None:
            raise WireError(f"unknown property 0x{ident:02x}")
        if kind in _SIZES:
            pos += _SIZES[kind]
        elif kind == "v":
            _, pos = _read_vbi(buf, pos)
        else:
            values = []
            for _ in range(2 if kind == "p" else 1):
                if pos + 2 > end:
                    raise WireError("a packet's properties overrun their length")
                (n,) = _U16.unpack_from(buf, pos)
                values.append(bytes(buf[pos + 2 : pos + 2 + n]))
                pos += 2 + n
            if ident == 0x09:
                out.correlation = values[0]
            elif ident == 0x1F:
                out.reason = values[0].decode(errors="replace")
            elif ident == 0x26:
                user.append(
                    (values[0].decode(errors="replace"), values[1].decode(errors="replace"))
                )
    if pos != end:  # (a fixed-size value or a string ran past the properties)
        raise WireError("a packet's properties overrun their length")
    out.user = tuple(user)
    return out, end


class Wire:
    """One MQTT 5 connection: packets out, packets in (blocking, one thread)."""

    def __init__(self, address: BrokerAddress, client_id_prefix: str, timeout: float) -> None:
        self._pending = bytearray()  # bytes read past the last packet
        self._next_id = 0
        sock = socket.create_connection((address.host, address.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if address.tls:
                ctx = tls_context(address)
                sock = ctx.wrap_socket(
                    sock, server_hostname=address.host if ctx.check_hostname else None
                )
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        flags = 0x02  # clean start
        auth = b""
        if address.username is not None:
            flags |= 0x80
            auth += _str(address.username)
            if address.password is not None:
                flags |= 0x40
                auth += _str(address.password)
        client_id = f"{client_id_prefix}-{uuid.uuid4().hex[:12]}"
        body = _str("MQTT") + bytes((5, flags)) + _U16.pack(60) + b"\0" + _str(client_id) + auth
        try:
            self.send(_packet(0x10, body))
        except BaseException:
            sock.close()
            raise

    def settimeout(self, seconds: float) -> None:
        self._sock.settimeout(max(seconds, 0.001))

    def send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise WireError(f"cannot send: {exc}") from exc

    def packet_id(self) -> int:
        self._next_id = self._next_id % 0xFFFF + 1
        return self._next_id

    def subscribe(self, topic_filter: str, qos: int) -> int:
        pid = self.packet_id()
        self.send(_packet(0x82, _U16.pack(pid) + b"\0" + _str(topic_filter) + bytes((qos,))))
        return pid

    def publish(
        self,
        topic: str,
        payload: bytes,
        reply: str,
        corr: bytes | None,
        user: tuple[tuple[str, str], ...],
    ) -> int:
        """A QoS 1 PUBLISH; its packet id."""
        pid = self.packet_id()
        props = b"\x08" + _str(reply)
        if corr is not None:
            props += b"\x09" + _str(corr)
        for k, v in user:
            props += b"\x26" + _str(k) + _str(v)
        head = _str(topic) + _U16.pack(pid) + _vbi(len(props)) + props
        self.send(bytes((0x32,)) + _vbi(len(head) + len(payload)) + head + payload)
        return pid

    def puback(self, pid: int) -> None:
        self.send(b"\x40\x02" + _U16.pack(pid))

    def disconnect(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.sendall(b"\xe0\x00")
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    # -- reading ----------------------------------------------------------------------------

    def _fill(self) -> None:
        self._pending += _received(lambda: self._sock.recv(_CHUNK))

    def read(self) -> tuple[int, int, bytearray]:
        """The next packet: (type, flags, body). Raises ``TimeoutError`` when nothing
        complete arrived within the socket's timeout (what was read is kept)."""
        pending = self._pending
        while True:
            if len(pending) >= 2:
                length, pos = _head_length(pending)
                if pos:
                    break
            self._fill()
        first = pending[0]
        end = pos + length
        if len(pending) >= end:
            body = pending[pos:end]
            del pending[:end]
            return first >> 4, first & 0x0F, body
        # a large packet: one buffer of its size, the rest received straight into it
        body = bytearray(length)
        have = len(pending) - pos
        body[:have] = pending[pos:]
        view = memoryview(body)
        try:
            while have < length:
                have += _received(functools.partial(self._sock.recv_into, view[have:]))
        except TimeoutError:
            del pending[pos:]
            pending += view[:have]  # (kept: the next read goes on from here)
            raise
        del pending[:]
        return first >> 4, first & 0x0F, body


def _received(receive: Callable[[], _R]) -> _R:
    """What one receive call gave (bytes, or a count received into a buffer); a lost or
    closed connection as :class:`WireError` (a timeout stays a ``TimeoutError``)."""
    try:
        got = receive()
    except TimeoutError:
        raise
    except OSError as exc:
        raise WireError(f"the connection was lost ({exc})") from exc
    if not got:
        raise WireError("the connection was closed by the broker")
    return got


def _head_length(buf: bytearray) -> tuple[int, int]:
    """(remaining length, where the body starts) of the packet at the head of ``buf``;
    (0, 0) while its fixed header is incomplete."""
    value = shift = 0
    for pos in range(1, min(len(buf), 5)):
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + 1
        shift += 7
    if len(buf) >= 5:
        raise WireError("a packet's remaining length is longer than 4 bytes")
    return 0, 0


def parse_publish(flags: int, body: bytearray) -> tuple[Message, int]:
    """A received PUBLISH and its packet id (0 at QoS 0); the payload is a view of ``body``."""
    if len(body) < 2:
        raise WireError("a PUBLISH is cut short")
    (tlen,) = _U16.unpack_from(body, 0)
    pos = 2 + tlen
    if pos > len(body):
        raise WireError("a PUBLISH is cut short")
    topic = bytes(body[2:pos]).decode(errors="replace")
    pid = 0
    if flags & 0x06:
        if len(body) < pos + 2:
            raise WireError("a PUBLISH is cut short")
        (pid,) = _U16.unpack_from(body, pos)
        pos += 2
    props, pos = parse_props(body, pos)
    return Message(topic, memoryview(body)[pos:], props), pid
