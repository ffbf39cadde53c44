"""The trio server: listeners, readiness, signals and graceful shutdown.

Resource handling
    ``serve`` opens the store (when the configuration has a data directory),
    loads the persisted MQTT state, binds every listener and only then reports
    readiness through ``task_status.started(addresses)`` with the bound
    ``(host, port)`` pairs, so callers (tests) can bind port 0. Every
    connection task runs in one handler nursery owned by ``serve``. The store
    is closed after the last connection task has finished.

Error handling
    A connection task never lets an exception escape into the handler nursery
    for anything a peer can send: protocol errors become reason codes and a
    closed socket (see ``broker.net.connection``). A bug that does escape cancels the
    server; that is deliberate, it must not go unnoticed.

Signals
    SIGTERM and SIGINT shut down (below). SIGHUP reloads the configuration through the
    ``Supervisor`` (``broker.ops``: re-read the file, ``Broker.apply_config``, systemd's
    RELOADING/READY); without one it is logged and ignored. A SIGHUP before the signal
    receiver is set up (during imports) still ends the process.

Supervisor
    What runs beside the broker (``broker.ops.service.Operations``; this module does not
    import it): sockets handed over by systemd (socket activation) replace the configured
    listeners; its tasks ($SYS, HTTP, watchdog) start in the server's nursery once the
    broker is attached and end when it is cancelled; it is told when the broker is ready,
    reloading and stopping.

Shutdown
    Cancelling the scope given to ``serve`` (SIGTERM/SIGINT in ``run_broker``)
    stops accepting at once, tells every MQTT 5 client DISCONNECT 0x8B
    (Server shutting down), publishes the wills of connected clients, waits
    at most ``SHUTDOWN_GRACE`` seconds for in-flight store writes, and closes
    the store.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import gc
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol

import trio

import hotpath
import store
from broker.config import BrokerConfig, KeyNames, ListenerSpec, show_value
from broker.net.runtime import Broker
from broker.net.tls import server_context
from broker.net.transport import nodelay_on, prepare_socket
from broker.net.websocket import WebSocketStream
from broker.security.cli import old_listener_warning

SHUTDOWN_GRACE = 5.0
ACCEPT_BURST = 64
GC_THRESHOLD = 10_000  # net allocations between young-generation collections
FD_TABLE_SLOTS = 65_536  # the descriptor table grown at start (at most RLIMIT_NOFILE's soft limit)
_PEER_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


class ListenError(OSError):
    """A listen address that could not be bound: the address as configured and the cause
    (``run_broker`` adds the key or flag it came from)."""

    def __init__(self, address: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.address = address

    def __str__(self) -> str:
        return f"{show_value(self.address)}: {self.strerror}"


Wrap = Callable[[socket.socket], trio.abc.Stream]


def _wrapper(spec: ListenerSpec) -> Wrap | None:
    """How an accepted socket becomes the connection's transport: None for plain TCP
    (the raw-socket fast path), else TLS and/or WebSocket streams over it."""
    ctx = None
    if spec.tls is not None:
        ctx = server_context(spec.tls, "http/1.1" if spec.transport == "ws" else "mqtt")
    if ctx is None and spec.transport == "tcp":
        return None

    def wrap(sock: socket.socket) -> trio.abc.Stream:
        stream: trio.abc.Stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        if ctx is not None:
            stream = trio.SSLStream(stream, ctx, server_side=True)
        if spec.transport == "ws":
            stream = WebSocketStream(stream)
        return stream

    return wrap


async def _accept_loop(
    broker: Broker,
    listener: trio.SocketListener,
    spec: ListenerSpec | None = None,
    wrap: Wrap | None = None,
) -> None:
    """Accept connections in bursts: a non-blocking ``accept`` until the backlog is empty,
    then one wait for readability (trio's ``listener.accept`` is a scheduler round trip per
    connection, which a connection storm pays thousands of times a second)."""
    async with listener:
        # A duplicate of the listening descriptor, so the stdlib object can be non-blocking
        # and closed independently of trio's (the listener closes the original).
        with socket.socket(fileno=os.dup(listener.socket.fileno())) as sock:
            sock.setblocking(False)
            # What sock.accept() does, without turning the family and type into enums for
            # every connection (≈ 2 µs of a connect storm's budget): the accepted socket
            # is made from the descriptor with the listener's family, type and protocol.
            accept: Callable[[], tuple[int, Any]] = sock._accept  # type: ignore[attr-defined]
            family, kind, proto = int(sock.family), int(sock.type), sock.proto
            # Nagle off on the listener: Linux copies TCP_NODELAY to every socket accepted
            # from it, which spares each connection a setsockopt. Whether it did is checked
            # on the first accepted socket; else every socket gets it (prepare_socket).
            inherited = None if _nodelay(sock) else False
            while True:
                for _ in range(ACCEPT_BURST):
                    try:
                        conn = socket.socket(family, kind, proto, accept()[0])
                    except BlockingIOError:
                        await trio.lowlevel.wait_readable(sock)
                        break
                    except OSError as exc:
                        if exc.errno in _PEER_GONE:
                            continue  # that client gave up before we accepted it
                        # EMFILE and friends: back off instead of spinning.
                        broker.log_warning("accept failed: %s", exc)
                        await trio.sleep(0.1)
                        break
                    try:
                        if inherited is None:
                            inherited = nodelay_on(conn)
                        ready = prepare_socket(conn, nodelay=not inherited)
                        broker.spawn_connection(ready if wrap is None else wrap(ready), spec)
                    except Exception:
                        # A bug in one connection's set-up must not stop the accepting.
                        broker.log_exception("internal error while accepting a connection")
                        conn.close()
                else:
                    await trio.lowlevel.checkpoint()  # a long burst still lets others run


def _nodelay(sock: socket.socket) -> bool:
    """Turn Nagle off on a listening socket (False: not TCP, or refused)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        return False
    return True


class Supervisor(Protocol):
    """See module docstring (``broker.ops.service.Operations``)."""

    def inherited_sockets(self) -> list[socket.socket]:
        """Listening sockets passed by systemd (LISTEN_FDS), or none."""
        ...

    async def run(self, broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
        """Its tasks, in the server's nursery; ``started()`` once its own listeners are
        bound; returns when cancelled."""
        ...

    def ready(self, addresses: list[tuple[str, int]]) -> None: ...

    async def reload(self) -> None: ...

    def stopping(self) -> None: ...


async def _listeners(
    config: BrokerConfig, supervisor: Supervisor | None
) -> list[tuple[trio.SocketListener, ListenerSpec, Wrap | None]]:
    """The listeners with their ``[[listeners]]`` entry and transport wrapper. Sockets
    handed over by systemd (socket activation) replace the configured addresses; they take
    the settings (transport, TLS) of the only ``[[listeners]]`` entry when there is one,
    else they are plain MQTT over TCP."""
    specs = config.listener_specs()
    inherited = supervisor.inherited_sockets() if supervisor is not None else []
    if inherited:
        spec = specs[0] if len(specs) == 1 else ListenerSpec(bind="0.0.0.0:0")
        wrap = _wrapper(spec)
        return [
            (trio.SocketListener(trio.socket.from_stdlib_socket(s)), spec, wrap) for s in inherited
        ]
    listeners: list[tuple[trio.SocketListener, ListenerSpec, Wrap | None]] = []
    for spec in specs:
        host, port = spec.address()
        wrap = _wrapper(spec)
        try:
            bound = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise ListenError(spec.bind, exc) from exc
        listeners.extend((listener, spec, wrap) for listener in bound)
    return listeners


async def _shielded_nursery(task_status: trio.TaskStatus[trio.Nursery]) -> None:
    """A nursery outer cancellation cannot reach: connections end through shutdown."""
    async with trio.open_nursery() as nursery:
        nursery.cancel_scope.shield = True
        task_status.started(nursery)
        await trio.sleep_forever()


async def serve(
    config: BrokerConfig,
    *,
    supervisor: Supervisor | None = None,
    task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED,
    opened: Callable[[Broker], None] | None = None,
) -> None:
    """Run the broker until cancelled; report the bound addresses once listening.
    ``opened`` is shown the broker once it is open (tests read its state)."""
    broker = await Broker.open(config)
    if opened is not None:
        opened(broker)
    try:
        listeners = await _listeners(config, supervisor)
        addresses: list[tuple[str, int]] = []
        for listener, _spec, _wrap in listeners:
            sockname: Any = listener.socket.getsockname()
            addresses.append((str(sockname[0]), int(sockname[1])))
        async with trio.open_nursery() as outer:
            handlers: trio.Nursery = await outer.start(_shielded_nursery)
            broker.attach(handlers)
            if supervisor is not None:
                await outer.start(functools.partial(supervisor.run, broker))
            try:
                async with trio.open_nursery() as acceptors:
                    for listener, spec, wrap in listeners:
                        acceptors.start_soon(_accept_loop, broker, listener, spec, wrap)
                    task_status.started(addresses)
            finally:
                # Cancelled (SIGTERM, or the caller): stop accepting (done: the acceptors
                # are gone), then shut the connections down within the grace period.
                with trio.CancelScope(shield=True):
                    with trio.move_on_after(SHUTDOWN_GRACE):
                        await broker.shutdown()
                    handlers.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await broker.close()


async def _main(
    config: BrokerConfig,
    listening: list[bool],
    supervisor: Supervisor | None,
    deprecated: str | None = None,
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            addresses = await nursery.start(functools.partial(serve, config, supervisor=supervisor))
            listening.append(True)
            _tune_gc()
            for host, port in addresses:
                print(f"jetmq: listening on {host}:{port}", flush=True)
            log = logging.getLogger("jetmq.broker")
            if hotpath.usable_or_absent():
                log.info("hot path: %s", hotpath.state())
            else:
                log.warning("hot path: %s", hotpath.state())
            if deprecated is not None:
                log.warning("%s", deprecated)
            if supervisor is not None:
                supervisor.ready(addresses)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    if supervisor is None:
                        print("jetmq: SIGHUP: nothing to reload, going on", flush=True)
                    else:
                        await supervisor.reload()
                    continue
                print(f"jetmq: {signal.Signals(signum).name}, shutting down", flush=True)
                if supervisor is not None:
                    supervisor.stopping()
                nursery.cancel_scope.cancel()
                break


def _tune_gc() -> None:
    """The cyclic collector, set up for a server (the broker process only, not tests).

    Measured with mqttbench (storm: 2,000 connects; fresh broker per run): with the
    default thresholds the collector ran over the growing set of connection objects
    again and again (the storm ran ≈20 % faster with it disabled). Everything loaded at
    start-up (modules, configuration, restored sessions, retained messages) is moved out
    of its reach, and the youngest generation is collected every 10,000 net allocations
    instead of 700.
    Garbage without cycles is still freed at once by reference counting.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 10, 10)


def grow_fd_table(slots: int = FD_TABLE_SLOTS) -> int:
    """Grow the process's descriptor table at start to ``slots`` (at most the soft
    RLIMIT_NOFILE), before any thread runs (``FDSize`` in ``/proc/PID/status`` shows it).
    Returns the slots asked for, 0 when nothing could be opened to grow it with.

    Linux starts a process with a table of 64 descriptors and doubles it when one more is
    needed; in a process with more than one thread (the store's writer, trio's workers)
    each doubling waits for an RCU grace period, milliseconds on a VM. A fresh broker's
    table (256 slots once it listens) doubled three times in a storm's first 2,000
    connects: ``scripts/bench_broker.sh storm`` gave 16,979 conn/s with a connect p99 of
    21.5 ms before, 31,560 and 4.6 ms with the table grown here (docs/benchmarks.md,
    2026-11-28). The table never shrinks; 65,536 slots cost the kernel 512 KiB.
    ``F_DUPFD`` takes the lowest free descriptor at or above the one asked for, so no open
    descriptor (one handed over by systemd, say) is touched."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        slots = min(slots, soft)
    try:
        probe = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        os.close(fcntl.fcntl(probe, fcntl.F_DUPFD_CLOEXEC, slots - 1))
    except OSError:  # (every descriptor from there up in use: the table is that large)
        pass
    finally:
        os.close(probe)
    return slots


def run_broker(
    config: BrokerConfig, names: KeyNames | None = None, supervisor: Supervisor | None = None
) -> int:
    """Entry point of ``jetmq serve``: run until SIGTERM/SIGINT, then shut down cleanly.

    An operating-system error (a port in use, a data directory it may not write) or a store
    it cannot open or write at start (not an LMDB environment, a damaged or newer one, a
    full disk) ends it with one line on stderr and exit status 1, as mosquitto does, not a
    traceback; trio hands it over inside an exception group. An address it cannot listen
    on is named with the key or flag it came from (``names``): ``--listen:
    '127.0.0.1:1883': Address already in use``."""
    names = names or KeyNames()
    listening: list[bool] = []
    failed: list[Exception] = []
    grow_fd_table()
    try:
        trio.run(_main, config, listening, supervisor, old_listener_warning(names))
    except* (OSError, store.StoreOpenError, store.StorageFailure) as group:
        failed.extend(_leaves(group))
    for exc in failed:
        what = "stopped" if listening else "cannot start"
        old_form = "listeners" not in config.model_fields_set
        key = ("listener", "listen") if old_form else ("listeners", "bind")
        where = f"{names(key)}: " if isinstance(exc, ListenError) else ""
        print(f"jetmq: {what}: {where}{exc}", file=sys.stderr)
    return 1 if failed else 0


def _leaves(group: BaseExceptionGroup[Exception]) -> list[Exception]:
    out: list[Exception] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_leaves(exc))
        else:
            out.append(exc)
    return out
