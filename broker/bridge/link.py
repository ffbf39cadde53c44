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
    Imported messages cross through a window of ``window`` slots (an asyncio semaphore):
    a slot is taken before a message is handed to trio and given back when the broker
    is done with it (after its commit). A core subscription whose handler waits for a
    slot lets nats-py's per-subscription queue fill up to ``SUB_PENDING_MSGS`` /
    ``SUB_PENDING_BYTES``, then nats-py drops (counted: ``import_dropped``); a JetStream
    pull loop fetches no more than it has slots for and naks with a delay what waits for
    a slot longer than ``OVERLOAD_WAIT_S``. Forwarded messages arrive already encoded as
    NATS protocol (``publish_raw``): the trio side bounds what it hands over (core: 4
    batches behind a queue of 8,192; JetStream: a window of 256 awaiting PubAcks, which
    come back through one inbox subscription, ``ack_prefix``). Every crossing is batched:
    one wake-up of the other thread per batch, not per message.
"""

from __future__ import annotations

import asyncio
import contextlib
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

# (rule index, subject, headers, payload, the JetStream message to ack or None)
Inbound = tuple[int, str, "dict[str, str] | None", bytes, "Msg | None"]


class NatsLink:
    """The asyncio side of the bridge (see module docstring)."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        window: int,
        on_state: Callable[[bool, str], None],
        on_error: Callable[[str, str], None],
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

    def release(self, count: int = 1) -> None:
        """(trio thread) The broker is done with ``count`` imported messages: free slots."""
        with self._lock:
            self._to_release += count
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

    def _drain_inbox(self) -> None:
        """(trio thread) Hand the messages gathered so far to the broker."""
        with self._lock:
            items, self._inbox = self._inbox, []
            self._inbox_woken = False
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
        for index, rule in enumerate(cfg.imports):
            if rule.stream is None:
                await self._subscribe_core(index, rule.subject)
                if rule.subject.endswith(".>"):  # MQTT '#' semantics: 'a.>' also means 'a'
                    await self._subscribe_core(index, rule.subject[:-2])
            else:
                self._tasks.append(asyncio.create_task(self._pull_loop(index)))

    def _server(self) -> str:
        nc = self.nc
        url = nc.connected_url if nc is not None else None
        return f"{url.hostname}:{url.port}" if url is not None else "?"

    async def _subscribe_core(self, index: int, subject: str) -> None:
        assert self.nc is not None

        async def handler(msg: Msg) -> None:
            await self._hand_over(index, msg, None)

        await self.nc.subscribe(
            subject,
            cb=handler,
            pending_msgs_limit=SUB_PENDING_MSGS,
            pending_bytes_limit=SUB_PENDING_BYTES,
        )

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
