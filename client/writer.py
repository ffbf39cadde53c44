"""Outgoing bytes of one client, written to the socket by one task.

Callers encode a packet and append its bytes (no await in between, so the order on the
wire is the order of the calls and a cancelled caller never leaves half a packet); the
writer task sends whatever has accumulated in one ``send`` - under load many packets per
system call instead of one each. Above ``HIGH_WATER`` bytes callers wait until the buffer
drained (backpressure from the socket); the reader task's own acks never wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ByteStream

HIGH_WATER = 256 * 1024


class Writer:
    def __init__(self) -> None:
        self._buf = bytearray()
        self._wake = anyio.Event()
        self._drained = anyio.Event()
        self.last_write = 0.0

    def write(self, data: bytes) -> None:
        self._buf += data
        self._wake.set()

    @property
    def full(self) -> bool:
        return len(self._buf) > HIGH_WATER

    def clear(self) -> None:
        """Drop what was not written (the connection it was for is gone)."""
        self._buf.clear()
        self._drained.set()

    async def wait_drained(self, below: int = 0) -> None:
        while len(self._buf) > below:
            if self._drained.is_set():
                self._drained = anyio.Event()
            await self._drained.wait()

    async def run(
        self,
        stream_of: Callable[[], ByteStream | None],
        failed: Callable[[BaseException], Awaitable[None]],
    ) -> None:
        """The writer task (runs until cancelled); ``failed`` is told of a write error."""
        while True:
            if not self._buf:
                self._drained.set()
                if self._wake.is_set():
                    self._wake = anyio.Event()
                await self._wake.wait()
                continue
            data = bytes(self._buf)
            self._buf.clear()
            stream = stream_of()
            if stream is None:
                continue
            try:
                await stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self.clear()
                await failed(exc)
                continue
            self.last_write = anyio.current_time()
