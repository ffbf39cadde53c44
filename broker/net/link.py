"""What the parts of one connection see of it and of the broker: the ``Link`` (the
connection's shared state) and the ``Host`` (the broker's trio side).

A connection is composed of parts (``Output``, ``Handshake``, ``Inbound``) that each hold
the connection as a ``Link``: the parts depend on these protocols, the connection
(``broker.net.connection``) and the broker (``broker.net.runtime``) implement them, so
nothing in ``net`` imports in a circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.config import BrokerConfig, ListenerSpec
    from broker.core.hub import Hub
    from broker.core.ports import Access
    from broker.core.sessions import Session
    from broker.core.stats import Stats
    from broker.jetstream.service import JetStream
    from broker.mqtt.connection import Connection
    from broker.mqtt.packet_types import ProtocolVersion
    from broker.mqtt.packets import Connect
    from broker.mqtt.properties import Properties
    from broker.mqtt.reason_codes import ReasonCode
    from broker.net.parking import Parking
    from broker.net.settings import Settings
    from broker.net.transport import Transport
    from broker.persist.client import StoreClient
    from broker.persist.state import Persistence
    from broker.security.auth import PeerInfo


class Authenticator(Protocol):
    """Decides on a CONNECT (username, password, client certificate...): None accepts
    (and sets ``peer.username`` to the identity the ACL uses), else the refusal's reason
    code and reason. It runs in the connection's own task, never in the accept loop, so
    it may take its time (a password hash in a thread, a back-off wait).
    ``broker.security.auth.Security`` is the broker's."""

    async def authenticate(
        self, connect: Connect, peer: PeerInfo
    ) -> tuple[ReasonCode, str] | None: ...

    def access_for(self, client_id: str, username: str | None) -> Access | None: ...


class Host(Protocol):
    """The broker as a connection uses it (``broker.net.runtime.Broker``)."""

    hub: Hub
    config: BrokerConfig
    settings: Settings  # the values of ``config`` read per connect or message
    persist: Persistence  # the MQTT state in the store
    store_client: StoreClient  # the store's trio client (Persistence writes through it)
    parking: Parking
    stats: Stats  # the hub's counters (one integer add where the work happens)
    # Flushes of connections that got output while a reader handles one input chunk
    # (None outside a chunk): the reader runs them at the chunk's end.
    batch: list[Callable[[], None]] | None
    connack_properties: Properties | None
    authenticator: Authenticator | None  # None: every CONNECT is accepted (no auth)
    jetstream: JetStream | None  # None: [jetstream] enabled = false

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...

    def flush_batch(self) -> None: ...

    def connection_ended(self, conn: Any) -> None: ...


class Link(Protocol):
    """One connection's shared state (``broker.net.connection.ClientConnection``)."""

    broker: Host
    transport: Transport
    listener: ListenerSpec | None
    username: str | None
    proto: Connection
    session: Session | None
    version: ProtocolVersion
    problem_info: bool
    closing: bool
    send_will: bool
    peer_gone: bool
    peer: str  # the client's address ("host:port"), once connected
    close_reason: str  # why the connection ends, for the disconnect log line

    def stop_reading(self) -> None: ...

    def disconnect(self, code: ReasonCode, reason: str) -> None: ...

    def taken_over(self) -> None: ...
