"""The operations HTTP server: h11 (the sans-I/O HTTP/1.1 machine) on trio sockets.

Why h11 and not hypercorn: we serve a handful of read-only GET routes to Prometheus, load
balancers and a browser; h11 is the protocol core only (hypercorn is built on it), runs in
our nursery as one more trio task with no ASGI layer, no second event-loop abstraction and
no worker/config machinery to disable, and it is the model STYLE.md names for protocol code.

Routes (GET and HEAD; anything else is 405):

| path | answer |
|---|---|
| ``/metrics`` | Prometheus text exposition (``broker.ops.metrics``) |
| ``/healthz`` | 200 ``ok`` while the event loop answers |
| ``/readyz`` | 200 once every listener accepts and the store is open; 503 before and while stopping |
| ``/`` , ``/static/...`` | the status page (files of ``broker/ops/static``, no CDN) |
| ``/api/stats`` | the counters as JSON (the page polls it for its live chart) |
| ``/api/clients``, ``/api/subscriptions``, ``/api/streams`` | the tables as JSON |
| ``/api/bridge`` | the NATS bridge's state (``{"configured": false}`` without ``[bridge]``) |

Resource handling: one task per HTTP connection in the server's nursery, at most
``MAX_CONNECTIONS`` at once (more are closed at once), each closed after ``IDLE_TIMEOUT``
seconds without a complete request. Error handling: a malformed request gets h11's 400 and
a close; a bug in a route is a 500 (logged), never a crash of the broker.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import trio

log = logging.getLogger("jetmq.http")

STATIC = pathlib.Path(__file__).with_name("static")
MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 30.0
READ_SIZE = 65536
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

Reply = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[], Awaitable[Reply]]


def json_reply(value: Any, status: int = 200) -> Reply:
    return status, "application/json", json.dumps(value, separators=(",", ":")).encode()


def text_reply(text: str, status: int = 200) -> Reply:
    return status, "text/plain; charset=utf-8", text.encode()


def static_reply(name: str) -> Reply:
    """A file of the status page; only names listed in ``STATIC`` (no path traversal)."""
    files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
    path = files.get(name)
    if path is None:
        return text_reply("not found\n", 404)
    return 200, TYPES.get(path.suffix, "application/octet-stream"), path.read_bytes()


class HttpServer:
    """Routes by exact path, plus ``/static/<file>``."""

    def __init__(self, routes: dict[str, Route], *, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.routes = routes
        self.idle_timeout = idle_timeout
        self._limit = trio.Semaphore(MAX_CONNECTIONS)

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[tuple[str, int]]
    ) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        sockname = listeners[0].socket.getsockname()
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started((str(sockname[0]), int(sockname[1])))

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                self._limit.acquire_nowait()
            except trio.WouldBlock:
                return
            try:
                await self._serve_one(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._limit.release()

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request: h11.Request | None = None  # stays None if the client idles too long
            with trio.move_on_after(self.idle_timeout):
                request = await self._next_request(conn, stream)
            if request is None:
                return
            status, ctype, body = await self._answer(request)
            head = request.method == b"HEAD"
            headers = [
                ("content-type", ctype),
                ("content-length", str(len(body))),
                ("cache-control", "no-store"),
            ]
            data = conn.send(h11.Response(status_code=status, headers=headers))
            if not head:
                data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
            data = (data or b"") + (conn.send(h11.EndOfMessage()) or b"")
            await stream.send_all(data)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _next_request(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> h11.Request | None:
        request: h11.Request | None = None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                await self._bad_request(conn, stream, exc)
                return None
            if event is h11.NEED_DATA:
                data = await stream.receive_some(READ_SIZE)
                conn.receive_data(data)  # b"" at EOF: h11 then reports ConnectionClosed
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage):
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _bad_request(
        self, conn: h11.Connection, stream: trio.SocketStream, exc: h11.RemoteProtocolError
    ) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = f"bad request: {exc}\n".encode()
        headers = [("content-type", "text/plain"), ("content-length", str(len(body)))]
        status = exc.error_status_hint
        data = conn.send(h11.Response(status_code=status, headers=headers)) or b""
        data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)

    async def _answer(self, request: h11.Request) -> Reply:
        if request.method not in (b"GET", b"HEAD"):
            return text_reply("method not allowed\n", 405)
        path = request.target.decode("ascii", "replace").split("?", 1)[0]
        try:
            if path.startswith("/static/"):
                return static_reply(path.removeprefix("/static/"))
            route = self.routes.get(path)
            if route is None:
                return text_reply("not found\n", 404)
            return await route()
        except Exception:
            log.exception("internal error answering %s", path)
            return text_reply("internal error\n", 500)
