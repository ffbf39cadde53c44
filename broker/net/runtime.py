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

from broker.config import BrokerConfig
from broker.core.hub import Hub
from broker.jetstream.service import JetStream
from broker.mqtt.properties import Properties
from broker.net.connection import ClientConnection
from broker.net.link import Authenticator
from broker.net.parking import Parkable, Parking
from broker.persist import recovery
from broker.persist.client import StoreClient
from broker.persist.records import STREAMS
from broker.persist.state import Persistence

log = logging.getLogger("jetmq.broker")

RESTART_ONLY = ("listener", "storage")  # configuration sections a reload cannot change


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
        self._nursery.start_soon(self._run, timer, delay, fn)
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
        self.persist = persistence
        # The store's trio client, shared by every part that writes: lifecycle, batches.
        self.store_client: StoreClient = persistence.client
        self._timers = timers
        self._nursery: trio.Nursery | None = None
        self.connections: set[ClientConnection] = set()
        self._all_closed = trio.Event()
        # Connections that got output while a reader handles one input chunk; the reader
        # sends it at the end of the chunk (see Output.output_ready).
        self.batch: list[Callable[[], None]] | None = None
        # Connected clients that have sent nothing since their CONNECT (no task yet).
        self.parking = Parking(self._start_parked)
        # The CONNACK properties of an MQTT 5 client that asked for nothing special.
        self.connack_properties: Properties | None = None
        # The CONNECT seam: None answers CONNECTs in the accept loop when they are there.
        self.authenticator: Authenticator | None = None
        # The $JS API, stream capture and delivery (None: [jetstream] enabled = false).
        self.jetstream = jetstream

    @classmethod
    async def open(cls, config: BrokerConfig) -> Broker:
        client = await StoreClient.open(config.storage, STREAMS)
        persistence = Persistence(client)
        timers = TrioTimers()
        hub = Hub(config, persistence, clock=trio.current_time, timers=timers)
        jetstream = JetStream(hub, client) if config.jetstream.enabled else None
        try:
            await recovery.load_into(persistence, hub)
            if jetstream is not None:
                await jetstream.load()
        except BaseException:
            with trio.CancelScope(shield=True):
                await client.close()
            raise
        return cls(hub, persistence, timers, jetstream)

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._timers.attach(nursery)
        self.store_client.attach(nursery)
        nursery.start_soon(self.parking.run)
        if self.jetstream is not None:
            self.jetstream.start(nursery)
        self.hub.start()

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task owned by the broker (outlives the connection that started it)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def spawn_connection(self, transport: socket.socket | trio.abc.Stream) -> None:
        """Serve one accepted connection (a socket from ``transport.prepare_socket``, or
        a trio stream in tests)."""
        assert self._nursery is not None
        conn = ClientConnection(self, transport)
        self.connections.add(conn)
        if not conn.connect_now():  # True: connected and parked, no task until needed
            self._nursery.start_soon(conn.run)

    def _start_parked(self, conn: Parkable) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(conn.run)

    def flush_batch(self) -> None:
        """Send what the current input chunk produced, one write per connection."""
        batch = self.batch
        if batch is None:
            return
        self.batch = None
        for flush in batch:
            flush()

    def connection_ended(self, conn: ClientConnection) -> None:
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
        await self.store_client.flush()

    def apply_config(self, new: BrokerConfig) -> list[str]:
        """Swap in a new configuration (the reload seam): what comes next uses it — new
        connections, and every limit, since they are read where they apply. Returns the
        sections only a restart can change (listeners, storage): those are kept."""
        kept = [name for name in RESTART_ONLY if getattr(new, name) != getattr(self.config, name)]
        if kept:
            new = new.model_copy(update={name: getattr(self.config, name) for name in kept})
        self.config = new
        self.hub.config = new
        self.connack_properties = None  # built from the configuration: built again
        return kept

    async def close(self) -> None:
        if self.jetstream is not None:
            self.jetstream.stop()
        self.parking.close()
        await self.store_client.close()
        self.hub.close()

    def log_warning(self, fmt: str, *args: Any) -> None:
        log.warning(fmt, *args)

    def log_exception(self, message: str) -> None:
        log.exception(message)
