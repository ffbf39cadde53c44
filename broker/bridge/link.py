"""nats-py on its own asyncio thread (spec/jetstream.md §3.2, option 1): the only module
of jetmq that imports nats-py.

Resource handling
    :meth:`NatsLink.start` starts a daemon thread running a new asyncio loop and, on it,
    the connection task: ``nats.connect`` with ``max_reconnect_attempts = -1`` (the first
    connection is retried forever too), ``no_echo`` (our own publishes never come back on
    a core subscription), then the core subscriptions and one pull loop per JetStream
    import. :meth:`stop` (trio side) stops the pull loops, drains the connection (bounded
    by ``DRAIN_TIMEOUT_S``), stops the loop and joins the thread.

Threads
    Everything nats-py does runs on the loop thread. The trio side hands work over with
    :meth:`submit` (a coroutine function run on the loop; its result comes back to the
    trio thread through ``TrioToken.run_sync_soon``). News from NATS (state changes,
    imported messages) go to the trio thread the same way. Nothing blocks either thread.

Backpressure
    Imported messages cross through windows of ``window`` messages (core and JetStream
    imports each): a JetStream pull
    loop takes a slot (an asyncio semaphore) before it hands a message to trio, and the
    slot comes back when the broker is done with it (after its commit). Core imports take
    a fast path (``_install_fast_path``): their frames wait in a backlog on this thread
    (``FAST_BACKLOG_MSGS`` / ``FAST_BACKLOG_BYTES``, as nats-py's own pending queue; beyond,
    they are dropped and counted: ``import_dropped``) and cross while the window has room.
    Without the fast path a core subscription's callback waits for a slot and nats-py's
    per-subscription queue (``SUB_PENDING_MSGS`` / ``SUB_PENDING_BYTES``) fills instead.
    A JetStream pull loop fetches no more than it has slots for and naks with a delay what
    waits for a slot longer than ``OVERLOAD_WAIT_S``. Forwarded messages arrive already encoded as
    NATS protocol (``publish_raw``): the trio side bounds what it hands over (core: 4
    batches behind a queue of 8,192; JetStream: a window of 256 awaiting PubAcks, which
    come back through one inbox subscription, ``ack_prefix``). Every crossing is batched:
    one wake-up of the other thread per batch, not per message.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import json
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any

import nats
import nats.errors
import nats.js.api
import nats.js.errors
import trio
from nats.aio.client import Client
from nats.aio.msg import Msg

from broker.bridgeconfig import BridgeConfig

log = logging.getLogger("jetmq.bridge")

DRAIN_TIMEOUT_S = 5.0
SUB_PENDING_MSGS = 65_536
SUB_PENDING_BYTES = 64 * 1024 * 1024
OVERLOAD_WAIT_S = 1.0
NAK_DELAY_S = 1.0
FETCH_TIMEOUT_S = 1.0
RETRY_S = 1.0

# Fast-path core imports waiting on the loop thread for room in the window (more are
# dropped, counted: import_dropped, as nats-py's slow-consumer limit would).
FAST_BACKLOG_MSGS = SUB_PENDING_MSGS
FAST_BACKLOG_BYTES = SUB_PENDING_BYTES

# (rule index, subject, headers, payload, what to give back when done: the JetStream
# message to ack, None (a slot), or the payload size (a fast-path core import))
Inbound = tuple[int, str, "dict[str, str] | None", bytes, "Msg | int | None"]


class NatsLink:
    """The asyncio side of the bridge (see module docstring)."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        window: int,
        on_state: Callable[[bool, str], None],
        on_error: Callable[..., None],  # (counter or "", text, count=1)
        on_message: Callable[[Inbound], None],
        on_pubacks: Callable[[list[tuple[int, bool | str]]], None] | None = None,
    ) -> None:
        self.config = config
        self.window = window
        self._token = trio.lowlevel.current_trio_token()
        # Called on the trio thread:
        self._on_state = on_state  # (connected, server)
        self._on_error = on_error  # (counter or "", text)
        self._on_message = on_message
        self._on_pubacks = on_pubacks  # (key, duplicate flag or the error text), batched
        # The reply subjects of our JetStream publishes: <ack_prefix><key>; set once
        # connected (one subscription, kept across reconnects).
        self.ack_prefix = b""
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self.nc: Client | None = None
        self.js: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._main: Future[None] | None = None
        # Crossings are batched: one wake-up of the other thread per batch, not per message
        # (each run_sync_soon / call_soon_threadsafe writes to a wake-up socket).
        self._lock = threading.Lock()
        self._inbox: list[Inbound] = []  # loop thread -> trio, under _lock
        self._inbox_woken = False
        self._to_release = 0  # trio -> loop thread: slots given back, under _lock
        self._release_woken = False
        self._acks: list[tuple[int, bool | str]] = []  # loop thread -> trio, under _lock
        self._acks_woken = False
        # The fast path of core imports (``_install_fast_path``): sid -> rule index, and
        # what it has handed over and not yet got back (under _lock).
        self._fast_sids: dict[int, int] = {}
        self._backlog: collections.deque[Inbound] = collections.deque()  # loop thread only
        self._backlog_bytes = 0  # loop thread only
        self._fast_in_broker = 0  # handed to trio, not done yet (under _lock)
        self._fast_dropped = 0  # (under _lock)

    # -- lifecycle (trio thread) -------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=f"jetmq-bridge-{self.config.name}", daemon=True
        )
        self._thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run(), self.loop)

    async def stop(self) -> None:
        """Stop the pull loops, drain the connection, stop the loop, join the thread."""
        if self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        await trio.to_thread.run_sync(_wait, fut, DRAIN_TIMEOUT_S + 2)
        self.loop.call_soon_threadsafe(self.loop.stop)
        thread, self._thread = self._thread, None
        await trio.to_thread.run_sync(thread.join, 5.0)
        if not thread.is_alive():
            self.loop.close()

    def submit(
        self,
        fn: Callable[..., Coroutine[Any, Any, Any]],
        args: Sequence[Any],
        done: Callable[[Any], None],
    ) -> None:
        """Run ``fn(*args)`` on the loop; ``done(result or exception)`` on the trio thread."""
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(fn(*args), self.loop)

        def finished(f: Future[Any]) -> None:
            exc = f.exception()
            self._to_trio(done, exc if exc is not None else f.result())

        fut.add_done_callback(finished)

    def done(self, token: Msg | int | None, ok: bool) -> None:
        """(trio thread) The broker is done with an imported message (``token`` from its
        ``Inbound``): a fast-path core import frees its room, others their slot, and a
        JetStream message is acked (or nak'd: ``ok`` False)."""
        if isinstance(token, int):
            self.release(0)  # the window has room: the loop thread hands over more
            return
        self.release()
        if token is not None:
            self.finish(token, ok)

    def release(self, count: int = 1) -> None:
        """(trio thread) The broker is done with imported messages: ``count`` slots, or
        (``count`` 0) one fast-path core import."""
        with self._lock:
            if count:
                self._to_release += count
            else:
                self._fast_in_broker -= 1
            if self._release_woken:
                return
            self._release_woken = True
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._do_release)

    def _do_release(self) -> None:
        with self._lock:
            n, self._to_release = self._to_release, 0
            self._release_woken = False
        slots = self._slots
        if slots is not None:
            for _ in range(n):
                slots.release()
        if self._backlog:
            self._pump()

    def _pump(self) -> None:
        """(loop thread) Move fast-path core imports from the backlog to the trio thread
        while the window (``window``, as the slots) has room."""
        backlog = self._backlog
        with self._lock:
            room = self.window - self._fast_in_broker
            if room <= 0 or not backlog:
                return
            inbox = self._inbox
            moved = 0
            while backlog and moved < room:
                item = backlog.popleft()
                self._backlog_bytes -= len(item[3])
                inbox.append(item)
                moved += 1
            self._fast_in_broker += moved
            if self._inbox_woken:
                return
            self._inbox_woken = True
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._drain_inbox)

    def _drain_inbox(self) -> None:
        """(trio thread) Hand the messages gathered so far to the broker."""
        with self._lock:
            items, self._inbox = self._inbox, []
            self._inbox_woken = False
            dropped, self._fast_dropped = self._fast_dropped, 0
        if dropped:
            self._on_error("import_dropped", "core imports dropped: the broker is busy", dropped)
        on_message = self._on_message
        for item in items:
            on_message(item)

    def finish(self, msg: Msg, ok: bool) -> None:
        """(trio thread) A JetStream import is committed (ack) or not (nak with delay)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: redelivered later
            asyncio.run_coroutine_threadsafe(self._settle(msg, ok), self.loop)

    def _to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(fn, *args)

    # -- the loop thread ---------------------------------------------------------------------

    async def _run(self) -> None:
        cfg = self.config
        self._slots = asyncio.Semaphore(self.window)
        nc = Client()
        self.nc = nc
        options: dict[str, Any] = {
            "servers": cfg.servers,
            "name": f"jetmq-bridge-{cfg.name}",
            "no_echo": True,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "connect_timeout": 2,
            "ping_interval": 10,
            "max_outstanding_pings": 3,
            "drain_timeout": int(DRAIN_TIMEOUT_S),
            "error_cb": self._error_cb,
            "disconnected_cb": self._disconnected_cb,
            "reconnected_cb": self._reconnected_cb,
        }
        if cfg.user is not None:
            options["user"], options["password"] = cfg.user, cfg.password
        if cfg.token is not None:
            options["token"] = cfg.token
        if cfg.creds is not None:
            options["user_credentials"] = cfg.creds
        if cfg.tls_ca is not None:
            options["tls"] = ssl.create_default_context(cafile=cfg.tls_ca)
        try:
            await nc.connect(**options)
        except Exception as exc:  # a bad credentials file, a TLS setup error
            self._to_trio(self._on_error, "", f"cannot connect: {type(exc).__name__}: {exc}")
            return
        self.js = nc.jetstream()
        if self._on_pubacks is not None:
            prefix = nc.new_inbox() + ".ack."
            await nc.subscribe(
                prefix + "*",
                cb=self._on_puback,
                pending_msgs_limit=SUB_PENDING_MSGS,
                pending_bytes_limit=SUB_PENDING_BYTES,
            )
            self.ack_prefix = prefix.encode()
        self._to_trio(self._on_state, True, self._server())
        fast = self._install_fast_path(nc)
        for index, rule in enumerate(cfg.imports):
            if rule.stream is None:
                await self._subscribe_core(index, rule.subject, fast)
                if rule.subject.endswith(".>"):  # MQTT '#' semantics: 'a.>' also means 'a'
                    await self._subscribe_core(index, rule.subject[:-2], fast)
            else:
                self._tasks.append(asyncio.create_task(self._pull_loop(index)))

    def _server(self) -> str:
        nc = self.nc
        url = nc.connected_url if nc is not None else None
        return f"{url.hostname}:{url.port}" if url is not None else "?"

    def _install_fast_path(self, nc: Client) -> bool:
        """Core imports skip nats-py's per-message ``Msg``, queue and callback task (≈9 of
        its ≈14 µs a message, measured): the connection's message hook takes the frames of
        our core subscriptions itself. Uses nats-py internals (``_process_msg``,
        ``_process_headers``, 2.16): when they are not there, the subscription callbacks
        (the ordinary path) do the work. Returns whether it is installed.

        The frames wait in a backlog on this thread (``FAST_BACKLOG_MSGS`` /
        ``FAST_BACKLOG_BYTES``, as nats-py's pending queue; more are dropped and counted)
        and go to the trio thread in batches while the window has room: at most ``window``
        in the broker at once, as with the slots (a bigger burst would overflow the
        subscribers' QoS 0 queues)."""
        orig = getattr(nc, "_process_msg", None)
        parse_headers = getattr(nc, "_process_headers", None)
        if not (inspect.iscoroutinefunction(orig) and inspect.iscoroutinefunction(parse_headers)):
            return False
        assert orig is not None
        assert parse_headers is not None
        fast_sids = self._fast_sids
        lock = self._lock

        async def process_msg(
            sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
        ) -> None:
            index = fast_sids.get(sid)
            if index is None:
                await orig(sid, subject, reply, data, headers)
                return
            hdr = await parse_headers(headers) if headers else None
            size = len(data)
            if (
                len(self._backlog) >= FAST_BACKLOG_MSGS
                or self._backlog_bytes + size > FAST_BACKLOG_BYTES
            ):
                with lock:
                    self._fast_dropped += 1
                return
            self._backlog.append((index, subject.decode(), hdr, data, size))
            self._backlog_bytes += size
            self._pump()

        nc._process_msg = process_msg  # type: ignore[method-assign, unused-ignore]  # (unused without nats-py)
        return True

    async def _subscribe_core(self, index: int, subject: str, fast: bool) -> None:
        assert self.nc is not None

        async def handler(msg: Msg) -> None:
            await self._hand_over(index, msg, None)

        sub = await self.nc.subscribe(
            subject,
            cb=handler,
            pending_msgs_limit=SUB_PENDING_MSGS,
            pending_bytes_limit=SUB_PENDING_BYTES,
        )
        if fast:
            self._fast_sids[sub._id] = index

    async def _hand_over(self, index: int, msg: Msg, ack: Msg | None) -> None:
        slots = self._slots
        assert slots is not None
        await slots.acquire()
        self._give(index, msg, ack)

    def _give(self, index: int, msg: Msg, ack: Msg | None) -> None:
        """Hand a message to the trio thread (its slot is taken)."""
        item: Inbound = (index, msg.subject, msg.headers, msg.data, ack)
        with self._lock:
            self._inbox.append(item)
            if self._inbox_woken:
                return
            self._inbox_woken = True
        # The broker gone: nothing will be acked, NATS redelivers.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._drain_inbox)

    async def _on_puback(self, msg: Msg) -> None:
        """A PubAck (or a 503 no-responders status) for one of our JetStream publishes."""
        try:
            key = int(msg.subject.rsplit(".", 1)[1])
        except ValueError:
            return
        result: bool | str
        data = msg.data
        headers = msg.headers
        if headers and headers.get("Status") == "503":
            result = "no responders: no stream captures the subject"
        elif b'"error"' in data:
            try:
                result = str(json.loads(data)["error"].get("description", data))
            except (ValueError, KeyError, AttributeError):
                result = data.decode(errors="replace")
        elif not data:
            result = f"empty reply (status {headers.get('Status') if headers else '?'})"
        else:
            result = b'"duplicate":true' in data
        with self._lock:
            self._acks.append((key, result))
            if self._acks_woken:
                return
            self._acks_woken = True
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._drain_acks)

    def _drain_acks(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
            self._acks_woken = False
        if self._on_pubacks is not None:
            self._on_pubacks(acks)

    async def _pull_loop(self, index: int) -> None:
        """A durable pull consumer on the rule's NATS stream; fetch as many as there are
        free slots; a fetch after a reconnect is a new pull request (they do not survive
        disconnects)."""
        cfg = self.config
        rule = cfg.imports[index]
        durable = cfg.durable_of(index)
        slots = self._slots
        assert slots is not None
        assert rule.stream is not None
        psub: Any = None
        while not self._stopping:
            nc = self.nc
            if nc is None or not nc.is_connected:
                await asyncio.sleep(0.1)
                continue
            try:
                if psub is None:
                    consumer = nats.js.api.ConsumerConfig(
                        durable_name=durable,
                        ack_policy=nats.js.api.AckPolicy.EXPLICIT,
                        max_ack_pending=self.window,
                        filter_subject=rule.subject,
                        ack_wait=30,
                    )
                    psub = await self.js.pull_subscribe(
                        rule.subject, durable=durable, stream=rule.stream, config=consumer
                    )
                batch = max(1, min(256, self._free()))
                msgs = await psub.fetch(batch, timeout=FETCH_TIMEOUT_S)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._to_trio(
                    self._on_error,
                    "",
                    f"import[{index}] from stream {rule.stream!r}: {type(exc).__name__}: {exc}",
                )
                if psub is not None:  # set it up again (the consumer may be gone)
                    with contextlib.suppress(Exception):
                        await psub.unsubscribe()
                    psub = None
                await asyncio.sleep(RETRY_S)
                continue
            for msg in msgs:
                try:
                    await asyncio.wait_for(slots.acquire(), OVERLOAD_WAIT_S)
                except TimeoutError:
                    self._to_trio(self._on_error, "import_nak_overload", "")
                    with contextlib.suppress(Exception):
                        await msg.nak(delay=NAK_DELAY_S)
                    continue
                self._give(index, msg, msg)

    def _free(self) -> int:
        """Free slots (asyncio.Semaphore keeps the count in ``_value``; no public read)."""
        slots = self._slots
        return slots._value if slots is not None else 0

    async def _settle(self, msg: Msg, ok: bool) -> None:
        try:
            if ok:
                await msg.ack()
            else:
                await msg.nak(delay=NAK_DELAY_S)
        except Exception as exc:
            # Not acked: NATS delivers it again after ack_wait, and we store it again
            # (at-least-once).
            self._to_trio(self._on_error, "", f"ack failed: {type(exc).__name__}: {exc}")

    async def _error_cb(self, exc: Exception) -> None:
        if isinstance(exc, nats.errors.SlowConsumerError):
            self._to_trio(self._on_error, "import_dropped", "slow consumer: NATS dropped messages")
            return
        self._to_trio(self._on_error, "connect_failures", f"{type(exc).__name__}: {exc}")

    async def _disconnected_cb(self) -> None:
        self._to_trio(self._on_state, False, "")

    async def _reconnected_cb(self) -> None:
        self._to_trio(self._on_state, True, self._server())

    async def _shutdown(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        nc = self.nc
        if nc is None:
            return
        if nc.is_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), DRAIN_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await nc.close()
        if self._main is not None:
            self._main.cancel()

    # -- publishing (run on the loop by the trio side through submit) -------------------------

    async def publish_raw(self, blob: bytes) -> bool:
        """Core publishes already encoded as NATS protocol (``HPUB`` commands, see
        ``headers.hpub``), written as one chunk. nats-py buffers up to ``pending_size``
        while reconnecting; False when it refused them (not connected, buffer full)."""
        nc = self.nc
        if nc is None or nc.is_closed or nc.is_draining_pubs:
            return False
        if not nc.is_connected and (
            not nc.is_reconnecting
            or len(blob) + nc._pending_data_size > nc._max_pending_size  # as nc.publish does
        ):
            return False
        await nc._send_command(blob)
        await nc._flush_pending()
        return True

    @property
    def max_payload(self) -> int:
        nc = self.nc
        return int(nc._max_payload) if nc is not None and nc.is_connected else 1 << 20


def _wait(fut: Future[None], timeout: float) -> None:
    with contextlib.suppress(Exception):
        fut.result(timeout)
