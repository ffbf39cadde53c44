"""The byte pipe under one connection: a raw non-blocking TCP socket (the fast path), or
any trio ``Stream`` (TLS and WebSocket slot in here; tests use in-memory streams).

The raw path reads and writes the socket itself: trio's ``SocketStream`` costs a
conflict detector, two context managers and a scheduler round trip per call, which a
connection storm and a fan-out pay thousands of times a second. A ``SocketStream``
handed in is unwrapped to its socket when trio lets us; anything else takes the
``Stream`` path.

Error handling: a peer gone (reset, broken pipe) is ``trio.BrokenResourceError``; a
transport closed under a waiting task is ``trio.ClosedResourceError``.
"""

from __future__ import annotations

import socket
from typing import Final

import trio

READ_SIZE: Final = 65536
# What the broker reads, at most, from a client it closes (see Transport.aclose).
LINGER_SECONDS: Final = 1.0
LINGER_BYTES: Final = 1 << 20


def prepare_socket(sock: socket.socket, nodelay: bool = True) -> socket.socket:
    """An accepted TCP socket as a connection uses it: non-blocking, Nagle off (trio's
    ``SocketStream`` does the same; a connection works on the socket directly).
    ``nodelay=False``: Nagle is off already (the socket inherited it from its listener)."""
    sock.setblocking(False)
    if nodelay:
        try:  # noqa: SIM105 (contextlib.suppress: an object and two calls per connection)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # a peer that already reset the connection: the first read says so
    return sock


def nodelay_on(sock: socket.socket) -> bool:
    """Whether Nagle is off on ``sock`` (False when it cannot tell: not TCP, or gone)."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    except OSError:
        return False


def _raw_socket(stream: trio.abc.Stream) -> socket.socket | None:
    """The non-blocking stdlib socket under a trio SocketStream, if there is one.

    trio has no public accessor; ``_sock`` is checked, and anything else (an
    in-memory test stream, a TLS stream, a future trio) takes the plain path.
    """
    raw = getattr(getattr(stream, "socket", None), "_sock", None)
    return raw if isinstance(raw, socket.socket) else None


class Transport:
    """One connection's bytes in and out (see module docstring)."""

    __slots__ = ("drained", "raw", "stream", "watched")

    def __init__(self, transport: socket.socket | trio.abc.Stream) -> None:
        self.stream: trio.abc.Stream | None
        self.raw: socket.socket | None
        if isinstance(transport, socket.socket):
            self.stream, self.raw = None, transport
        else:
            self.stream, self.raw = transport, _raw_socket(transport)
        self.drained = False  # the last read emptied the socket: wait before the next recv
        self.watched = False  # a task waited on the raw socket through trio (see close_now)

    def recv_now(self) -> bytes | None:
        """What the socket holds right now, without waiting (the read of a CONNECT by the
        accept loop or the parking watcher): None when there is nothing yet or no raw
        socket; ``b""`` at end of stream or on an error (the task finds out)."""
        raw = self.raw
        if raw is None:
            return None
        try:
            data = raw.recv(READ_SIZE)
        except BlockingIOError:
            return None
        except OSError:
            return b""  # reset: the task's own read says so
        self.drained = len(data) < READ_SIZE
        return data

    async def receive(self) -> bytes | bytearray:
        """``receive_some`` on the raw socket: a non-blocking ``recv`` first (skipped when
        the last read emptied the socket), a wait only when there is nothing yet, and one
        checkpoint either way, the wait being one."""
        raw = self.raw
        if raw is None:
            assert self.stream is not None
            return await self.stream.receive_some(READ_SIZE)
        waited = False
        self.watched = True
        if self.drained:
            self.drained = False
            await trio.lowlevel.wait_readable(raw)
            waited = True
        while True:
            try:
                data = raw.recv(READ_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(raw)
                waited = True
                continue
            except OSError as exc:
                if raw.fileno() == -1:
                    raise trio.ClosedResourceError from None
                raise trio.BrokenResourceError from exc
            if not waited:
                await trio.lowlevel.checkpoint()
            return data

    def send_now(self, data: bytes) -> int:
        """As much of ``data`` as the kernel takes without waiting (raw sockets only);
        -1 when the peer is gone."""
        raw = self.raw
        assert raw is not None
        try:
            return raw.send(data)
        except BlockingIOError:
            return 0
        except OSError:
            return -1

    async def send_all(self, data: bytes | memoryview) -> None:
        """Everything in ``data``, waiting for the socket as needed."""
        raw = self.raw
        if raw is None:
            assert self.stream is not None
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        self.watched = True
        while view:
            try:
                sent = raw.send(view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(raw)
                continue
            except OSError as exc:
                if raw.fileno() == -1:
                    raise trio.ClosedResourceError from None
                raise trio.BrokenResourceError from exc
            view = view[sent:]

    def close_now(self) -> None:
        """Close at once (a parked connection abandoned at shutdown)."""
        raw = self.raw
        if raw is not None and raw.fileno() != -1:
            if self.watched:  # trio may hold a registration of the fd: forget it
                trio.lowlevel.notify_closing(raw)
            raw.close()

    async def aclose(self, *, linger: bool) -> None:
        """Close. With ``linger`` (the broker closes first: a DISCONNECT, a refusal,
        shutdown) the write side is shut and what the client still sends is read until it
        closes, at most ``LINGER_SECONDS`` and ``LINGER_BYTES``: closing a socket with
        unread input sends an RST, and a client still writing then dies on a broken pipe
        before it reads the DISCONNECT that says why (Paho's test_flow_control2)."""
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)
            return
        raw = self.raw
        assert raw is not None
        if raw.fileno() != -1:
            if linger:
                await _linger(raw)
            trio.lowlevel.notify_closing(raw)  # a task waiting on it gets ClosedResourceError
            raw.close()
        await trio.lowlevel.checkpoint()


async def _linger(raw: socket.socket) -> None:
    try:
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        return
    left = LINGER_BYTES
    with trio.move_on_after(LINGER_SECONDS):
        while left > 0:
            try:
                data = raw.recv(min(left, READ_SIZE))
            except BlockingIOError:
                await trio.lowlevel.wait_readable(raw)
                continue
            except OSError:
                return
            if not data:
                return
            left -= len(data)
