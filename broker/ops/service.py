"""``Operations``: everything that runs beside the broker to run it as a service — the
``Supervisor`` of ``broker.net.server`` (which does not import this package).

It owns the systemd notifier (READY / STATUS / WATCHDOG / RELOADING / STOPPING), the
sockets of socket activation, the ``$SYS`` publisher, the HTTP server and the reload.

Tasks (all in the server's nursery, started by :meth:`run` once the broker is attached,
cancelled with it): the HTTP server (when ``[http] bind`` is set), the ``$SYS`` loop, the
watchdog (when systemd asked for one) and the STATUS updates.

Watchdog: ``WATCHDOG=1`` is sent by a task on the event loop every half of
``$WATCHDOG_USEC``; a loop that is blocked (a bug, a long synchronous call) sends nothing,
and systemd restarts the service after ``WatchdogSec=``.

Reload (SIGHUP): ``RELOADING=1`` with ``MONOTONIC_USEC``, the configuration file read and
validated again (in a worker thread: file I/O and pydantic), then
``Broker.apply_config`` (limits and everything read where it applies; other parts hook into
it), the log level and format, and ``READY=1``. What could not be applied is logged (the
listeners, the storage and the HTTP bind need a restart). A file that does not load or
validate keeps the configuration in use, and the error is logged.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from broker.config import BrokerConfig, ConfigError, parse_listen
from broker.ops import logs, view
from broker.ops.http import HttpServer, Reply, Route, json_reply, static_reply, text_reply
from broker.ops.metrics import CONTENT_TYPE, Exporter
from broker.ops.notify import Notifier, listen_fds
from broker.ops.systree import SysTree

if TYPE_CHECKING:
    from broker.net.runtime import Broker

log = logging.getLogger("jetmq.ops")

STATUS_EVERY = 5.0  # seconds between STATUS= updates to systemd


class Operations:
    """See module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        load: Callable[[], BrokerConfig] | None = None,
        *,
        notifier: Notifier | None = None,
    ) -> None:
        """``load``: reads the configuration again (the ``--config`` file with the
        command line's overrides); None: nothing to reload."""
        self.config = config
        self._load = load
        self.notifier = notifier or Notifier()
        self.started = time.monotonic()
        self.broker: Broker | None = None
        self.is_ready = False
        self.is_stopping = False
        self.http_address: tuple[str, int] | None = None
        self._rates = (0.0, 0, 0)  # (time, publish received, publish sent) of the last STATUS

    # -- the server's Supervisor -----------------------------------------------------------

    def inherited_sockets(self) -> list[socket.socket]:
        return listen_fds()

    async def run(self, broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
        self.broker = broker
        async with trio.open_nursery() as nursery:
            bind = self.config.http.bind
            if bind is not None:
                host, port = parse_listen(bind)
                server = HttpServer(self.routes(broker))
                self.http_address = await nursery.start(server.serve, host, port)
                print(f"jetmq: http on {self.http_address[0]}:{self.http_address[1]}", flush=True)
            nursery.start_soon(SysTree(broker, self.started).run)
            if self.notifier.watchdog_usec:
                nursery.start_soon(self._watchdog, self.notifier.watchdog_usec / 2e6)
            if self.notifier.enabled:
                nursery.start_soon(self._status_loop)
            task_status.started()

    def ready(self, addresses: list[tuple[str, int]]) -> None:
        self.is_ready = True
        self.notifier.ready(self.status_text())

    async def reload(self) -> None:
        self.notifier.reloading()
        print("jetmq: SIGHUP: reloading the configuration", flush=True)
        try:
            if self._load is None:
                raise ConfigError("no configuration file to reload (started without --config)")
            new = await trio.to_thread.run_sync(self._load)
        except ConfigError as exc:
            log.error("reload failed, the configuration in use is kept:\n%s", exc)
            print("jetmq: SIGHUP: configuration not reloaded (see the log)", flush=True)
        else:
            kept = self.apply(new)
            done = "; restart to apply " + ", ".join(kept) if kept else ""
            print(f"jetmq: SIGHUP: configuration reloaded{done}", flush=True)
        self.notifier.ready(self.status_text())

    def stopping(self) -> None:
        self.is_stopping = True
        self.notifier.stopping()

    # -- reload --------------------------------------------------------------------------

    def apply(self, new: BrokerConfig) -> list[str]:
        """Apply ``new`` to the running broker; the sections that need a restart."""
        broker = self.broker
        assert broker is not None
        kept: list[str] = []
        if new.http != self.config.http:
            kept.append("http")
            new = new.model_copy(update={"http": self.config.http})
        kept += broker.apply_config(new)
        self.config = broker.config
        logs.setup(self.config.log)
        for name in kept:
            log.warning("reload: [%s] changed but needs a restart; the old one is kept", name)
        log.info(
            "configuration reloaded (log level %s, format %s)",
            self.config.log.level,
            self.config.log.format,
        )
        return kept

    # -- systemd -------------------------------------------------------------------------

    async def _watchdog(self, period: float) -> None:
        while True:
            self.notifier.watchdog()
            await trio.sleep(period)

    async def _status_loop(self) -> None:
        while True:
            await trio.sleep(STATUS_EVERY)
            self.notifier.status(self.status_text())

    def status_text(self) -> str:
        """systemd's STATUS=: clients and messages per second since the last one."""
        broker = self.broker
        if broker is None:
            return "starting"
        stats = broker.stats
        now = time.monotonic()
        then, received, sent = self._rates
        self._rates = (now, stats.publish_received, stats.publish_sent)
        dt = now - then if then else 0.0
        rate_in = (stats.publish_received - received) / dt if dt else 0.0
        rate_out = (stats.publish_sent - sent) / dt if dt else 0.0
        return (
            f"{stats.clients_connected} clients, {rate_in:.0f} msg/s in, {rate_out:.0f} msg/s out"
        )

    # -- HTTP ----------------------------------------------------------------------------

    def routes(self, broker: Broker) -> dict[str, Route]:
        exporter = Exporter(broker, self.started)

        async def metrics() -> Reply:
            return 200, CONTENT_TYPE, exporter.render()

        async def healthz() -> Reply:
            return text_reply("ok\n")

        async def readyz() -> Reply:
            if self.is_ready and not self.is_stopping:
                return text_reply("ready\n")
            return text_reply("stopping\n" if self.is_stopping else "starting\n", 503)

        async def index() -> Reply:
            return static_reply("index.html")

        async def stats() -> Reply:
            return json_reply(view.summary(broker, self.started))

        async def clients() -> Reply:
            return json_reply(view.clients_table(broker))

        async def subscriptions() -> Reply:
            return json_reply(view.subscriptions_table(broker))

        async def bridge() -> Reply:
            return json_reply(view.bridge_view(broker))

        async def streams() -> Reply:
            return json_reply(await trio.to_thread.run_sync(view.store_tables, broker))

        return {
            "/": index,
            "/metrics": metrics,
            "/healthz": healthz,
            "/readyz": readyz,
            "/api/stats": stats,
            "/api/clients": clients,
            "/api/subscriptions": subscriptions,
            "/api/streams": streams,
            "/api/bridge": bridge,
        }
