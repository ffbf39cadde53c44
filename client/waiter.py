"""One awaited answer of the broker, or the error that ended the connection."""

from __future__ import annotations

import anyio

from broker.mqtt.packets import Packet


class Waiter:
    """One awaited answer (PUBACK, PUBREC, PUBCOMP, SUBACK, UNSUBACK) or the error that
    ended the connection."""

    __slots__ = ("event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Packet | BaseException | None = None

    def set(self, value: Packet | BaseException) -> None:
        if not self.event.is_set():
            self.value = value
            self.event.set()

    async def wait(self) -> Packet:
        await self.event.wait()
        value = self.value
        if isinstance(value, BaseException):
            raise value
        assert value is not None
        return value
