"""What the JetStream layer needs from a connection (``client.core.Client`` provides it).

A Protocol rather than an import keeps the package free of import cycles: ``core`` builds
the JetStream context, the JetStream modules only see this interface.
"""

from __future__ import annotations

from typing import Protocol

from client.message import Message, PublishResult
from client.subscription import Subscription


class MQTTClient(Protocol):
    client_id: str

    async def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        qos: int = 0,
        retain: bool = False,
        *,
        user_properties: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> PublishResult: ...

    async def request(
        self,
        topic: str,
        payload: bytes | str = b"",
        timeout: float = 5.0,
        *,
        qos: int = 1,
        user_properties: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        no_responders: bool = True,
    ) -> Message: ...

    def new_inbox(self) -> str: ...

    async def open_inbox(
        self, topic: str | None = None, max_pending: int | None = None
    ) -> Subscription: ...

    async def subscribe(self, *filters: str, qos: int = 0) -> Subscription: ...
