"""The async MQTT 5 client: one TCP connection driven by ``broker.mqtt``'s client role.

Resource handling
-----------------
``async with Client(...) as client`` connects and owns a task group: the writer, the
reader (bytes -> ``Connection.receive_data`` -> acks, waiters, subscriptions) and, when
keep alive is on, the pinger. Leaving the block sends DISCONNECT and closes the socket;
every waiter and subscription is ended with :class:`ConnectionClosedError`.

Error handling
--------------
Background tasks never raise into the task group. A broken connection, a protocol error
or a DISCONNECT from the broker closes the client: every pending and later call raises
ConnectionClosedError with the cause in its text. With ``reconnect=True`` the reader
reconnects instead (pending calls fail, later calls wait, subscriptions go on). Packets
are queued whole for the writer task (``client.writer``), never half-written.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import ByteStream

from broker.mqtt.connection import Connection, DuplicatePublish, Role
from broker.mqtt.errors import MQTTProtocolError
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)
from broker.mqtt.packets import Subscription as SubscriptionOption
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.session import pubcomp_for
from client.errors import (
    ClientError,
    ConnectError,
    ConnectionClosedError,
    MQTTReasonError,
    NoRespondersError,
    PublishError,
    SubscribeError,
)
from client.handshake import READ_SIZE, open_connection
from client.inbox import Inbox
from client.jetstream import JetStreamContext
from client.message import Message, PublishResult, publish_properties
from client.subscription import DEFAULT_MAX_PENDING, Orphans, Subscription
from client.url import DEFAULT_SERVER, parse_address, tls_context
from client.waiter import Waiter
from client.writer import HIGH_WATER, Writer

_V5 = ProtocolVersion.MQTT_5


class Client:
    """An MQTT 5 client for asyncio and trio (through anyio).

    ``server`` is ``mqtt://host:port`` (default port 1883) or ``mqtts://host:port`` (TLS,
    default port 8883; ``tls`` is the context, default the system's CAs: see
    :func:`client.url.tls_context`). ``session_expiry`` in seconds (0: the session ends
    with the connection); ``keep_alive`` in seconds (0: off).
    """

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | bytes | None = None,
        keep_alive: int = 60,
        clean_start: bool = True,
        session_expiry: int = 0,
        connect_timeout: float = 10.0,
        inbox_qos: int = 1,
        max_pending: int = DEFAULT_MAX_PENDING,
        will: Will | None = None,
        reconnect: bool = False,
        reconnect_wait: float = 0.5,
        max_reconnect_attempts: int = 60,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.server = server
        address = parse_address(server)
        self.host, self.port = address.host, address.port
        if tls is None and address.tls:
            tls = tls_context()
        elif tls is not None and not address.tls:
            raise ValueError(f"server {server!r}: a TLS context needs an mqtts:// address")
        self._tls = tls
        self.client_id = client_id if client_id is not None else "jetmq-" + secrets.token_hex(6)
        self._username = username
        self._password = password.encode() if isinstance(password, str) else password
        self._keep_alive = keep_alive
        self._clean_start = clean_start
        self._session_expiry = session_expiry
        self._connect_timeout = connect_timeout
        self.max_pending = max_pending
        self.connack: Connack | None = None
        self._conn = Connection(Role.CLIENT)
        self._stream: ByteStream | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._writer = Writer()
        self._window = anyio.Semaphore(0xFFFF)
        self._waiters: dict[tuple[PacketType, int], Waiter] = {}
        self._subs: dict[int, Subscription] = {}
        self._orphans = Orphans()
        self._sids = itertools.count(1)
        self._use_sub_ids = True
        self._inbox = Inbox(self._subscribe_packet, inbox_qos, max_pending)
        self.inbox_prefix = self._inbox.prefix
        self._closed = False
        self._close_error: ConnectionClosedError | None = None
        self._closed_event = anyio.Event()
        self._last_recv = 0.0
        self._will = will
        self._reconnect = reconnect
        self._reconnect_wait = reconnect_wait
        self._max_reconnect_attempts = max_reconnect_attempts
        self._online = anyio.Event()  # set while connected (and once closed for good)
        self._sub_packets: dict[int, tuple[tuple[SubscriptionOption, ...], Properties]] = {}
        self.reconnects = 0
        self._lost: ConnectionClosedError | None = None  # why we end the connection ourselves

    # ---- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await self._connect(tg)
        except BaseException:
            tg.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._stack, self._tg = stack, tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()
        stack, self._stack = self._stack, None
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if stack is not None:
            await stack.aclose()

    @property
    def is_connected(self) -> bool:
        return not self._closed and self._online.is_set()

    async def _open(self, clean_start: bool) -> list[Packet | DuplicatePublish]:
        connect = Connect(
            _V5,
            self.client_id,
            clean_start=clean_start,
            keep_alive=self._keep_alive,
            username=self._username,
            password=self._password,
            will=self._will,
            properties=Properties(session_expiry_interval=self._session_expiry or None),
        )
        opened = await open_connection(
            self.host, self.port, connect, self._connect_timeout, self._tls
        )
        self._stream, self._conn, self.connack = opened.stream, opened.conn, opened.connack
        cprops = opened.connack.properties
        if cprops.assigned_client_identifier:
            self.client_id = cprops.assigned_client_identifier
        self._use_sub_ids = cprops.subscription_identifier_available != 0
        self._window = anyio.Semaphore(max(1, self._conn.peer_receive_maximum))
        self._writer.last_write = self._last_recv = anyio.current_time()
        self._online.set()
        return opened.leftover

    async def _connect(self, tg: anyio.abc.TaskGroup) -> None:
        for event in await self._open(self._clean_start):
            await self._dispatch(event)
        tg.start_soon(self._reader)
        tg.start_soon(self._writer.run, lambda: self._stream, self._write_failed)
        if self._conn.keep_alive:
            tg.start_soon(self._pinger, self._conn.keep_alive)

    async def close(self) -> None:
        """DISCONNECT (normal) and close the socket; idempotent."""
        stream = self._stream
        if stream is None:
            return
        online = not self._closed and self._online.is_set()
        self._shutdown(ConnectionClosedError("the client closed the connection"))
        if online:
            with contextlib.suppress(Exception), anyio.move_on_after(2):
                self._writer.write(self._conn.send(Disconnect()))
                await self._writer.wait_drained()
        with contextlib.suppress(Exception):
            await stream.aclose()

    async def wait_closed(self) -> ConnectionClosedError | None:
        """Wait until the connection ends; the reason (None before it ever connected)."""
        await self._closed_event.wait()
        return self._close_error

    def _shutdown(self, error: ConnectionClosedError) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_error = error
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.set(error)
        for sub in self._subs.values():
            sub.end(error)
        self._inbox.end_all(error)
        self._online.set()  # wakes calls waiting for a reconnect: they raise now
        self._closed_event.set()

    async def _ready(self) -> ByteStream:
        """The stream to write to; waits while a reconnect is under way."""
        while not self._online.is_set():
            await self._online.wait()
        if self._closed or self._stream is None:
            raise self._close_error or ConnectionClosedError("not connected")
        return self._stream

    # ---- background tasks --------------------------------------------------------------
    async def _reader(self) -> None:
        while True:
            error = await self._read(self._stream)
            if self._closed:
                return
            if not self._reconnect:
                self._shutdown(error)
                return
            if not await self._reconnect_after(error):
                return

    async def _read(self, stream: ByteStream | None) -> ConnectionClosedError:
        """Read and dispatch until the connection ends; why it ended."""
        assert stream is not None
        error = ConnectionClosedError("connection closed by the broker")
        try:
            while True:
                data = await stream.receive(READ_SIZE)
                self._last_recv = anyio.current_time()
                try:
                    events = self._conn.receive_data(data)
                except MQTTProtocolError as exc:
                    for event in exc.packets:
                        await self._dispatch(event)
                    error = ConnectionClosedError(f"protocol error from the broker: {exc}")
                    break
                for event in events:
                    await self._dispatch(event)
                if self._conn.closed:
                    error = self._lost or error
                    break
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            error = self._lost or error
        except OSError as exc:
            error = ConnectionClosedError(f"connection lost: {exc}")
        except ConnectionClosedError as exc:
            error = exc
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()
        self._lost = None
        return error

    async def _reconnect_after(self, error: ConnectionClosedError) -> bool:
        """Reconnect (resuming the session when it has an expiry); False when given up.
        Calls in flight fail (their outcome is unknown); subscriptions stay and are made
        again when the broker has no session; new calls wait for the connection."""
        self._online = anyio.Event()
        self._writer.clear()
        lost = ConnectionClosedError(f"{error}; reconnecting")
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.set(lost)
        wait = self._reconnect_wait
        attempt = 0
        while not self._closed:
            attempt += 1
            if 0 <= self._max_reconnect_attempts < attempt:
                self._shutdown(ConnectionClosedError(f"{error}; gave up reconnecting"))
                return False
            await anyio.sleep(wait)
            wait = min(wait * 2, 10.0)
            try:
                leftover = await self._open(clean_start=self._session_expiry == 0)
            except ConnectError:
                continue
            self.reconnects += 1
            if self._tg is not None and not (self.connack and self.connack.session_present):
                self._tg.start_soon(self._subscribe_again)
            for event in leftover:
                await self._dispatch(event)
            return True
        return False

    async def _subscribe_again(self) -> None:
        with contextlib.suppress(ClientError):
            if self._inbox.ready:
                self._inbox.ready = False
                await self._inbox.ensure()
            for sid, (options, props) in list(self._sub_packets.items()):
                if sid in self._subs:
                    await self._subscribe_packet(options, props)

    async def _pinger(self, keep_alive: int) -> None:
        with contextlib.suppress(ConnectionClosedError):
            while not self._closed:
                due = self._writer.last_write + keep_alive * 0.75
                now = anyio.current_time()
                if now < due:
                    await anyio.sleep(due - now)
                    continue
                await self._send(Pingreq())
                await anyio.sleep(keep_alive)
                if self._last_recv < now and self._stream is not None:
                    self._lost = ConnectionClosedError("keep alive: no PINGRESP from the broker")
                    await self._stream.aclose()

    async def _dispatch(self, event: Packet | DuplicatePublish) -> None:
        if isinstance(event, Publish):
            if event.qos == 1:
                await self._send(Puback(event.packet_id), False)  # type: ignore[arg-type]
            elif event.qos == 2:
                await self._send(Pubrec(event.packet_id), False)  # type: ignore[arg-type]
            self._route(event)
        elif isinstance(event, DuplicatePublish):
            await self._send(Pubrec(event.publish.packet_id), False)  # type: ignore[arg-type]
        elif isinstance(event, Pubrel):
            known = event.packet_id in self._conn.session.inbound_qos2
            await self._send(pubcomp_for(event, known), False)
        elif isinstance(event, Puback | Pubrec | Pubcomp | Suback | Unsuback):
            waiter = self._waiters.pop((event.TYPE, event.packet_id), None)
            if waiter is not None:
                waiter.set(event)
        elif isinstance(event, Disconnect):
            code = event.reason_code
            text = event.properties.reason_string or code.name.replace("_", " ").lower()
            self._lost = ConnectionClosedError(
                f"disconnected by the broker: 0x{int(code):02X} {text}"
            )

    def _route(self, packet: Publish) -> None:
        topic = packet.topic.decode()
        msg = Message(topic, packet.payload, packet.qos, packet.retain, packet.properties)
        if self._inbox.route(msg):
            return
        delivered = False
        for sid in packet.properties.subscription_identifiers:
            target = self._subs.get(sid)
            # (an identifier from a resumed session may name another subscription now)
            if target is not None and target.matches(topic):
                target.deliver(msg)
                delivered = True
        if delivered:
            return
        for target in self._subs.values():
            if target.matches(topic):
                target.deliver(msg)
                delivered = True
        if not delivered:
            self._orphans.keep(msg)

    # ---- sending -----------------------------------------------------------------------
    async def _send(self, packet: Packet, wait: bool = True) -> None:
        """Queue ``packet`` for the writer; with ``wait``, wait while the buffer is over
        its high-water mark (the reader's acks never wait: that could deadlock)."""
        await self._ready()
        self._writer.write(self._conn.send(packet))
        if wait and self._writer.full:
            await self._writer.wait_drained(HIGH_WATER)

    async def _write_failed(self, exc: BaseException) -> None:
        self._lost = ConnectionClosedError(f"connection lost: {exc or type(exc).__name__}")
        if self._stream is not None:
            await self._stream.aclose()  # the reader sees it and ends or reconnects

    async def _send_awaiting(
        self, make: Callable[[int], Packet], answer: PacketType
    ) -> tuple[int, Waiter]:
        """Send the packet ``make(packet_id)`` and register the waiter for its answer
        before the bytes leave (the answer may arrive before this task runs again)."""
        await self._ready()
        pid = self._conn.next_packet_id()
        data = self._conn.send(make(pid))
        waiter = Waiter()
        self._waiters[answer, pid] = waiter
        self._writer.write(data)
        if self._writer.full:
            await self._writer.wait_drained(HIGH_WATER)
        return pid, waiter

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
        content_type: str | None = None,
        message_expiry_interval: int | None = None,
        payload_format_indicator: int | None = None,
        properties: Properties | None = None,
    ) -> PublishResult:
        """Publish; for QoS 1/2 wait for the broker's acknowledgement. An error reason code
        raises :class:`PublishError` with the Reason String; otherwise the PUBACK (QoS 1) or
        PUBREC (QoS 2) reason code and properties are returned."""
        body = payload.encode() if isinstance(payload, str) else payload
        if properties is None:
            properties = publish_properties(
                user_properties,
                response_topic,
                correlation_data,
                content_type,
                message_expiry_interval,
                payload_format_indicator,
            )
        name = topic.encode()
        if qos == 0:
            await self._send(Publish(name, body, 0, retain, properties=properties))
            return PublishResult()
        if qos not in (1, 2):
            raise ValueError(f"QoS must be 0, 1 or 2, not {qos}")
        answer = PacketType.PUBACK if qos == 1 else PacketType.PUBREC
        async with self._window:
            pid, waiter = await self._send_awaiting(
                lambda pid: Publish(name, body, qos, retain, packet_id=pid, properties=properties),
                answer,
            )
            ack = await waiter.wait()
            assert isinstance(ack, Puback | Pubrec)
            if qos == 2 and not ack.reason_code.is_error:
                comp = Waiter()
                self._waiters[PacketType.PUBCOMP, pid] = comp
                await self._send(Pubrel(pid))
                await comp.wait()
        if ack.reason_code.is_error:
            props = ack.properties
            raise PublishError(
                "PUBLISH", ack.reason_code, props.reason_string, props.user_properties
            )
        return PublishResult(ack.reason_code, ack.properties)

    # ---- subscriptions -----------------------------------------------------------------
    async def subscribe(
        self,
        *filters: str,
        qos: int = 0,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE,
        max_pending: int | None = None,
    ) -> Subscription:
        """Subscribe to ``filters``; the returned subscription receives the messages that
        match them (routed by Subscription Identifier when the broker supports it)."""
        if not filters:
            raise ValueError("subscribe needs at least one topic filter")
        sid = next(self._sids)
        sub = Subscription(
            tuple(filters),
            self._unsubscribe,
            self.max_pending if max_pending is None else max_pending,
            sid,
        )
        self._subs[sid] = sub
        options = tuple(
            SubscriptionOption(f.encode(), qos, no_local, retain_as_published, retain_handling)
            for f in filters
        )
        props = (
            Properties(subscription_identifiers=(sid,)) if self._use_sub_ids else EMPTY_PROPERTIES
        )
        self._sub_packets[sid] = (options, props)
        try:
            await self._subscribe_packet(options, props)
        except BaseException:
            self._subs.pop(sid, None)
            self._sub_packets.pop(sid, None)
            sub.end()
            raise
        self._orphans.claim(sub)
        return sub

    async def _subscribe_packet(
        self, options: tuple[SubscriptionOption, ...], props: Properties
    ) -> None:
        _pid, waiter = await self._send_awaiting(
            lambda pid: Subscribe(pid, options, props), PacketType.SUBACK
        )
        suback = await waiter.wait()
        assert isinstance(suback, Suback)
        for option, code in zip(options, suback.reason_codes, strict=False):
            if code.is_error:
                raise SubscribeError(
                    f"SUBSCRIBE {option.filter.decode()!r}", code, suback.properties.reason_string
                )

    async def _unsubscribe(self, sub: Subscription) -> None:
        self._sub_packets.pop(sub.sid, None)
        if self._subs.pop(sub.sid, None) is None:
            return
        filters = tuple(f.encode() for f in sub.filters)
        _pid, waiter = await self._send_awaiting(
            lambda pid: Unsubscribe(pid, filters), PacketType.UNSUBACK
        )
        unsuback = await waiter.wait()
        assert isinstance(unsuback, Unsuback)
        for code in unsuback.reason_codes:
            if code.is_error:
                raise MQTTReasonError("UNSUBSCRIBE", code, unsuback.properties.reason_string)

    # ---- inbox and request/response ----------------------------------------------------
    def new_inbox(self) -> str:
        """A fresh topic under this client's inbox prefix (``_INBOX/<random>/<n>``)."""
        return self._inbox.new_topic()

    async def open_inbox(
        self, topic: str | None = None, max_pending: int | None = None
    ) -> Subscription:
        """A subscription receiving what is published to one inbox topic (a new one by
        default)."""
        return await self._inbox.open(topic, max_pending)

    async def request(
        self,
        topic: str,
        payload: bytes | str = b"",
        timeout: float = 5.0,
        *,
        qos: int = 1,
        user_properties: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        no_responders: bool = True,
    ) -> Message:
        """Publish with a Response Topic and Correlation Data and wait for the answer.
        With QoS 1 and ``no_responders``, PUBACK 0x10 (no matching subscribers) raises
        :class:`NoRespondersError` at once instead of waiting for the timeout."""
        inbox = await self.open_inbox(max_pending=16)
        try:
            with anyio.fail_after(timeout):
                result = await self.publish(
                    topic,
                    payload,
                    qos,
                    user_properties=user_properties,
                    response_topic=inbox.topic,
                    correlation_data=inbox.topic.rsplit("/", 1)[1].encode(),
                )
                if no_responders and result.reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS:
                    raise NoRespondersError(f"no responders on {topic!r}")
                return await inbox.next()
        except TimeoutError:
            raise TimeoutError(f"no answer on {topic!r} within {timeout:g} s") from None
        finally:
            await inbox.unsubscribe()

    async def respond(self, request: Message, payload: bytes | str, qos: int = 0) -> None:
        """Answer ``request`` on its Response Topic, echoing its Correlation Data."""
        topic, corr = request.response_topic, request.correlation_data
        if not topic:
            raise ValueError("the message has no Response Topic")
        await self.publish(topic, payload, qos, correlation_data=corr)

    def jetstream(self, timeout: float = 5.0) -> JetStreamContext:
        """The JetStream context on this connection (nats-py's ``nc.jetstream()``)."""
        return JetStreamContext(self, timeout=timeout)
