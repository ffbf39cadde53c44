"""The broker's trio side: the :class:`~broker.core.hub.Hub` with the store client, the
connections, their nursery, the parking set and the timers.

Resource handling
    :meth:`Broker.open` opens the store and loads the persisted MQTT state into a new
    hub; :meth:`attach` hands it the nursery that owns every task the broker starts
    (connections, writers, pipelines, timers, the parking watcher, store retries);
    :meth:`close` closes the store after the last connection is gone.

Shutdown
    :meth:`shutdown` tells every client DISCONNECT 0x8B, publishes pending wills at
    once, waits for the connections to flush and close and for the store to commit what
    is queued; the caller bounds the time.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from broker.bridgeconfig import BridgeConfig
from broker.config import BrokerConfig, ListenerSpec
from broker.core.hub import Hub
from broker.jetstream.service import JetStream
from broker.mqtt.properties import Properties
from broker.net.connection import ClientConnection
from broker.net.idlewait import run_clock
from broker.net.link import Authenticator
from broker.net.parking import Parkable, Parking
from broker.net.settings import Settings
from broker.persist import recovery
from broker.persist.client import StoreClient
from broker.persist.inbox import CommitInbox
from broker.persist.records import STREAMS
from broker.persist.state import Persistence
from broker.security import auth as security
from broker.security.acl import AclFileError, ClientAccess
from broker.security.passwords import PasswordFileError

log = logging.getLogger("jetmq.broker")

RESTART_ONLY = ("listener", "listeners", "storage")  # sections a reload cannot change


class _Timer:
    __slots__ = ("scope",)

    def __init__(self) -> None:
        self.scope = trio.CancelScope()

    def cancel(self) -> None:
        self.scope.cancel()


class TrioTimers:
    """The core's ``Timers`` port: one task per pending timer in the broker's nursery,
    cancelled through its scope (wills with a delay and session expiries are few next to
    connections)."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Timer:
        assert self._nursery is not None, "timers used before the broker was attached"
        timer = _Timer()
        try:
            self._nursery.start_soon(self._run, timer, delay, fn)
        except RuntimeError:
            # The nursery is closed: the broker stopped, and the connections still parked
            # close after it (``Parking.close``); nothing fires any more.
            timer.cancel()
        return timer

    @staticmethod
    async def _run(timer: _Timer, delay: float, fn: Callable[[], None]) -> None:
        with timer.scope:
            await trio.sleep(delay)
            fn()


class Broker:
    """One broker process on trio (see module docstring)."""

    def __init__(
        self,
        hub: Hub,
        persistence: Persistence,
        timers: TrioTimers,
        jetstream: JetStream | None = None,
    ) -> None:
        self.hub = hub
        self.config = hub.config
        self.settings = Settings(self.config)  # its values read per connect or message
        self.stats = hub.stats
        self.persist = persistence
        # The store's trio client, shared by every part that writes: lifecycle, batches.
        self.store_client: StoreClient = persistence.client
        self._timers = timers
        self._nursery: trio.Nursery | None = None
        self.connections: set[ClientConnection] = set()
        # Open connections per listener with a max_connections of its own (only those are
        # counted: hashing the listener's settings costs a connect storm ≈ 1 µs a time).
        self._per_listener: dict[ListenerSpec, int] = {}
        # The last listener's own max_connections, read once per listener object (a
        # pydantic field read costs a connect about 1,000 instructions each time).
        self._cap_of: ListenerSpec | None = None
        self._cap = 0
        self._all_closed = trio.Event()
        # Connections that got output while a reader handles one input chunk; the reader
        # sends it at the end of the chunk (see Output.wake).
        self.batch: list[Callable[[], None]] | None = None
        # Connected clients that have sent nothing since their CONNECT (no task yet).
        self.parking = Parking(self._start_parked, self._begin_round, self._end_round)
        # The CONNACK properties of an MQTT 5 client that asked for nothing special.
        self.connack_properties: Properties | None = None
        # The CONNECT seam: None answers CONNECTs in the accept loop when they are there.
        self.authenticator: Authenticator | None = None
        # The $JS API, stream capture and delivery (None: [jetstream] enabled = false).
        self.jetstream = jetstream
        # [auth]: users and ACL (None: nothing to check, the fast path stays).
        self.security: security.Security | None = None
        self.set_security(hub.config)
        # The NATS bridge (broker.bridge.service.Bridge) when [bridge] is configured.
        self.bridge: Any = None
        self._bridge_lock = trio.Lock()  # one [bridge] swap at a time (reloads)

    def set_security(self, config: BrokerConfig) -> None:
        """Build the security state from ``[auth]`` (raises on a file that does not load:
        at start the broker refuses to run)."""
        if security.needed(config):
            self.security = security.Security(config)
        else:
            self.security = None
        self.authenticator = self.security
        self.hub.acl_active = self.security is not None and self.security.acl is not None

    @classmethod
    async def open(cls, config: BrokerConfig) -> Broker:
        client = await StoreClient.open(config.storage, STREAMS)
        persistence = Persistence(client)
        timers = TrioTimers()
        # The run's clock read directly (trio.current_time is two calls more per read; the
        # hub reads it per message).
        hub = Hub(config, persistence, clock=run_clock(), timers=timers)
        jetstream = JetStream(hub, client) if config.jetstream.enabled else None
        try:
            await recovery.load_into(persistence, hub)
            if jetstream is not None:
                await jetstream.load()
            bridge = None
            if config.bridge is not None:
                from broker.bridge.service import Bridge  # imports nats-py: only when asked

                bridge = await Bridge.open(config.bridge, hub, client)
        except BaseException:
            with trio.CancelScope(shield=True):
                await client.close()
            raise
        broker = cls(hub, persistence, timers, jetstream)
        broker.bridge = bridge
        return broker

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._timers.attach(nursery)
        self.store_client.attach(nursery)
        # Commit outcomes reach the trio thread in the parking watcher's rounds.
        inbox = CommitInbox(trio.lowlevel.current_trio_token())
        self.parking.watch_source(inbox.fd, inbox.run, inbox.stop)
        self.store_client.use_inbox(inbox)
        nursery.start_soon(self.parking.run)
        if self.jetstream is not None:
            self.jetstream.start(nursery)
        self.hub.start()
        if self.bridge is not None:
            self.bridge.start(nursery)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task owned by the broker (outlives the connection that started it)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def spawn_connection(
        self, transport: socket.socket | trio.abc.Stream, listener: ListenerSpec | None = None
    ) -> None:
        """Serve one accepted connection (a socket from ``transport.prepare_socket``, or
        a trio stream: TLS, WebSocket, tests), accepted by ``listener``."""
        assert self._nursery is not None
        conn = ClientConnection(self, transport, listener)
        cap = 0 if listener is None else self._listener_cap(listener)
        over = self._over_limit(listener, cap)
        self.connections.add(conn)
        if cap:
            assert listener is not None
            self._per_listener[listener] = self._per_listener.get(listener, 0) + 1
        if over:
            conn.over_limit = True  # its task reads the CONNECT and refuses it (0x97)
            self._nursery.start_soon(conn.run)
        elif not conn.connect_now():  # True: connected and parked, no task until needed
            self._nursery.start_soon(conn.run)

    def _listener_cap(self, listener: ListenerSpec) -> int:
        """The listener's own ``max_connections`` (0: only the broker's limit)."""
        if listener is not self._cap_of:
            self._cap = int(listener.max_connections)
            self._cap_of = listener
        return self._cap

    def _over_limit(self, listener: ListenerSpec | None, cap: int) -> bool:
        """``[limits] max_connections`` (the broker) or the listener's own (``cap``), reached."""
        most = self.settings.max_connections
        if most and len(self.connections) >= most:
            return True
        if cap:
            assert listener is not None
            return self._per_listener.get(listener, 0) >= cap
        return False

    def _start_parked(self, conn: Parkable) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(conn.run)

    def _begin_round(self) -> None:
        """The parking watcher serves ready sockets: gather their output."""
        if self.batch is None:
            self.batch = []
        self.store_client.round_begun()

    def _end_round(self) -> None:
        """The round is over: its output goes out, its store writes to the store."""
        self.flush_batch()
        self.store_client.round_done()

    def flush_batch(self) -> None:
        """Send what the current input chunk produced, one write per connection."""
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        for flush in batch:
            flush()

    def connection_ended(self, conn: ClientConnection) -> None:
        listener = conn.listener
        if listener is not None and self._listener_cap(listener) and conn in self.connections:
            self._per_listener[listener] -= 1
        self.connections.discard(conn)
        if not self.connections:
            self._all_closed.set()
            self._all_closed = trio.Event()

    async def shutdown(self) -> None:
        """Graceful stop: DISCONNECT 0x8B to every client, wills published, connections
        flushed and closed, store writes committed. The caller bounds the time."""
        for conn in list(self.connections):
            conn.server_shutdown()
        self.hub.fire_all_wills()
        if self.connections:
            await self._all_closed.wait()
        if self.bridge is not None:
            await self.bridge.stop()
        await self.store_client.flush()

    def apply_config(self, new: BrokerConfig) -> list[str]:
        """Swap in a new configuration (the reload seam): what comes next uses it — new
        connections, and every limit, since they are read where they apply. Returns the
        sections only a restart can change (listeners, storage): those are kept."""
        kept = [name for name in RESTART_ONLY if getattr(new, name) != getattr(self.config, name)]
        if kept:
            new = new.model_copy(update={name: getattr(self.config, name) for name in kept})
        new = self._reload_security(new)
        if new.bridge != self.config.bridge:
            self.spawn(self._swap_bridge, new.bridge)
        self.config = new
        self.settings = Settings(new)
        self.hub.reconfigure(new)
        self.connack_properties = None  # built from the configuration: built again
        return kept

    async def _swap_bridge(self, config: BridgeConfig | None) -> None:
        """A reload changed ``[bridge]``: the new bridge is opened, then swapped in with no
        PUBLISH handled between the old one leaving the hub and the new one joining it
        (a ``jetstream`` forward is captured by one or the other); the old one then hands
        over its queued core forwards and closes its NATS connection. Its outbox stays in
        the store: the new bridge sends it (NATS drops the duplicates by message id). A
        bridge that cannot be opened leaves the old one running (logged)."""
        async with self._bridge_lock:
            new = None
            if config is not None:
                from broker.bridge.service import Bridge  # imports nats-py: only when asked

                try:
                    new = await Bridge.open(config, self.hub, self.store_client)
                except Exception as exc:  # (the store refused the outbox stream)
                    log.error("reload: [bridge] not applied, the previous one runs on: %s", exc)
                    return
            old, self.bridge = self.bridge, new
            if old is not None:
                old.detach()
            if new is not None:
                assert self._nursery is not None
                new.start(self._nursery)
            if config is None:
                log.info("reload: [bridge] removed: the bridge stops")
            else:
                log.info("reload: bridge %r started with the new [bridge]", config.name)
            if old is not None:
                await old.stop()

    def _reload_security(self, new: BrokerConfig) -> BrokerConfig:
        """The ``[auth]`` part of a reload, atomic: the password and ACL files are read
        again (even when the paths did not change); if either does not load, the previous
        users, ACL and ``[auth]`` stay (logged). Every session then gets its access from
        the new ACL: connected clients lose what it no longer grants from their next
        operation (deliveries, publishes, subscribes)."""
        try:
            if self.security is not None and security.needed(new):
                problem = self.security.reload(new)
                if problem is not None:
                    return new.model_copy(update={"auth": self.config.auth})
            else:
                self.set_security(new)
        except (PasswordFileError, AclFileError) as exc:
            log.error("reload: kept the previous [auth]: %s", exc)
            return new.model_copy(update={"auth": self.config.auth})
        sec = self.security
        self.hub.acl_active = sec is not None and sec.acl is not None
        for session in self.hub.sessions:
            old = session.access
            if sec is None or sec.acl is None or not isinstance(old, ClientAccess):
                session.access = None
            else:
                session.access = sec.access_for(*old.who)
        if sec is not None and sec.acl is not None:
            for conn in self.connections:
                if conn.session is not None:
                    conn.session.access = sec.access_for(conn.session.client_id, conn.username)
        return new

    async def close(self) -> None:
        if self.jetstream is not None:
            self.jetstream.stop()
        self.parking.close()
        if self.bridge is not None:
            with trio.move_on_after(10):
                await self.bridge.stop()
        await self.store_client.close()
        self.hub.close()

    def log_warning(self, fmt: str, *args: Any) -> None:
        log.warning(fmt, *args)

    def log_exception(self, message: str) -> None:
        log.exception(message)
