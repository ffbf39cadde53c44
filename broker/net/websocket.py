"""MQTT over WebSocket (RFC 6455 via **wsproto**, sans-I/O like our codec): a trio
``Stream`` of the MQTT bytes carried in binary frames, so the connection code is the same
as for TCP.

The opening handshake is answered on the first read (in the connection's task, inside
the CONNECT timeout): path ``/mqtt`` (or ``/``), subprotocol ``mqtt`` required
(``mqttv3.1`` accepted from old clients) [MQTT-6.0.0-3]; anything else is refused with an
HTTP status. Frame payloads go to the decoder as they arrive (wsproto streams a frame's
payload, so a giant frame is never buffered whole; the MQTT decoder's
``max_packet_size`` bounds what is held). A text frame is a protocol error
[MQTT-6.0.0-1]: close 1003. Bad masks, sizes or opcodes: close 1002.
"""

from __future__ import annotations

import contextlib

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

PATHS = ("/mqtt", "/")
SUBPROTOCOLS = ("mqtt", "mqttv3.1")
READ_SIZE = 65_536


class WebSocketStream(trio.abc.Stream):
    """The server side of one WebSocket connection over ``transport_stream``."""

    def __init__(self, transport_stream: trio.abc.Stream) -> None:
        self.transport_stream = transport_stream
        self._ws = WSConnection(ConnectionType.SERVER)
        self._open = False
        self._eof = False
        self._data: list[bytes | bytearray] = []  # payload pieces not yet read, in order
        # The reader answers pings and closes while the writer may be sending frames: one
        # sender at a time on the transport (trio refuses concurrent send_all).
        self._send_lock = trio.Lock()

    async def _pump(self) -> None:
        """Read once from the transport and handle the events it completes."""
        try:
            chunk = await self.transport_stream.receive_some(READ_SIZE)
        except trio.BrokenResourceError:
            self._eof = True
            raise
        self._ws.receive_data(bytes(chunk) or None)
        if not chunk:
            self._eof = True
        out = bytearray()
        try:
            for event in self._ws.events():
                if isinstance(event, Request):
                    out += self._answer(event)
                elif isinstance(event, BytesMessage):
                    if event.data:
                        self._data.append(event.data)  # unmasked by wsproto: no copy
                elif isinstance(event, TextMessage):
                    out += self._ws.send(CloseConnection(1003, "MQTT needs binary frames"))
                    self._eof = True
                elif isinstance(event, Ping):
                    out += self._ws.send(event.response())
                elif isinstance(event, CloseConnection):
                    with contextlib.suppress(LocalProtocolError):
                        out += self._ws.send(event.response())
                    self._eof = True
        except RemoteProtocolError:
            with contextlib.suppress(LocalProtocolError):
                if self._open:
                    out += self._ws.send(CloseConnection(1002, "protocol error"))
                else:
                    out += self._ws.send(RejectConnection(status_code=400))
            self._eof = True
        if out:
            async with self._send_lock:
                await self.transport_stream.send_all(bytes(out))
        if self._eof and not self._data:
            raise trio.BrokenResourceError("websocket closed")

    def _answer(self, request: Request) -> bytes:
        path = request.target.split("?", 1)[0]
        chosen = next((p for p in request.subprotocols if p in SUBPROTOCOLS), None)
        if path not in PATHS:
            self._eof = True
            return self._ws.send(RejectConnection(status_code=404))
        if chosen is None:
            self._eof = True
            return self._ws.send(RejectConnection(status_code=400))
        self._open = True
        return self._ws.send(AcceptConnection(subprotocol=chosen))

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """The payload received so far: one frame's piece as wsproto made it (no copy),
        or the pieces joined when several are waiting."""
        while not self._data:
            if self._eof:
                return b""
            try:
                await self._pump()
            except trio.BrokenResourceError:
                if self._data:
                    break
                return b""
        pieces = self._data
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if max_bytes is not None and len(data) > max_bytes:
            self._data = [data[max_bytes:]]
            return data[:max_bytes]
        self._data = []
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self._open:
            raise trio.BrokenResourceError("websocket not open")
        try:
            frame = self._ws.send(BytesMessage(data=bytes(data)))
        except LocalProtocolError as exc:
            raise trio.BrokenResourceError("websocket closed") from exc
        async with self._send_lock:
            await self.transport_stream.send_all(frame)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        try:
            if self._open and not self._eof:
                self._eof = True
                with (
                    contextlib.suppress(
                        LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError
                    ),
                    trio.move_on_after(1),
                ):
                    frame = self._ws.send(CloseConnection(1000))
                    async with self._send_lock:
                        await self.transport_stream.send_all(frame)
        finally:
            await self.transport_stream.aclose()
