"""One network connection: its lifecycle, read loop and packet handling. The CONNECT
handshake is in ``broker.handshake`` and everything it sends (direct sends, the writer,
the ordered pipeline) in ``broker.output``, two mixins of :class:`ClientConnection`.

Tasks per connection (the reader is the connection's own task; the others are
started in the broker's nursery when first needed, and the reader ends them):

* the reader (this task): reads up to 64 KiB, feeds the codec machine, handles
  each event; one cancel scope covers the CONNECT timeout, keep alive (the
  machine's deadline [MQTT-3.1.2-22]) and a close requested from elsewhere.
  Output produced while handling a chunk is sent by this task at the chunk's
  end, straight to the socket, when nothing is ahead of it;
* the writer, started the first time output has to wait (the kernel did not
  take it all, a copy needs a commit first, or output arrives outside a
  chunk): waits for a wake-up, moves queued QoS 1/2 copies into the client's
  Receive Maximum window [MQTT-3.3.4-9], and sends everything pending in ONE
  write (coalesced writes). An idle connection never has one;
* the pipeline: acknowledgements that depend on a store commit (PUBACK, PUBREC,
  PUBCOMP, SUBACK, UNSUBACK, PUBREL of stored copies) run in arrival order after
  their commit, and so do the deliveries of the PUBLISH they acknowledge. Steps
  with nothing to wait for run at once when the pipeline is empty.

Error handling: anything the peer sends wrong arrives as ``MQTTProtocolError``
from the machine and becomes CONNACK / DISCONNECT with its reason code (3.1.x:
a close); the connection then closes without affecting any other client.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

import radix
from broker.core import RETAINED_AT_ONCE, make_handle
from broker.handshake import READ_SIZE, Handshake
from broker.message import AppMessage, Outgoing
from broker.mqtt.connection import Connection, DuplicatePublish, Role
from broker.mqtt.encoder import encode
from broker.mqtt.errors import Answer, MQTTProtocolError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
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
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.output import FLUSH_TIMEOUT, NOT_STORED, Step
from broker.persist import wait_future
from broker.sessions import Session, SubscriptionRecord

if TYPE_CHECKING:
    from broker.core import Broker

log = logging.getLogger("jetmq.client")

_V5 = ProtocolVersion.MQTT_5
_WILDCARDS = (b"+", b"#")
# SUBACK codes by granted QoS (an Enum call per subscription is measurable in a storm).
_GRANTED = (ReasonCode.GRANTED_QOS_0, ReasonCode.GRANTED_QOS_1, ReasonCode.GRANTED_QOS_2)


def prepare_socket(sock: socket.socket) -> socket.socket:
    """An accepted TCP socket as a connection uses it: non-blocking, Nagle off (trio's
    ``SocketStream`` does the same; a connection works on the socket directly)."""
    sock.setblocking(False)
    # A peer that already reset the connection can make this fail; the first read says so.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _raw_socket(stream: trio.abc.Stream) -> socket.socket | None:
    """The non-blocking stdlib socket under a trio SocketStream, if there is one.

    trio has no public accessor; ``_sock`` is checked, and anything else (an
    in-memory test stream, a future trio) takes the plain ``send_all`` path.
    """
    raw = getattr(getattr(stream, "socket", None), "_sock", None)
    return raw if isinstance(raw, socket.socket) else None


class ClientConnection(Handshake):
    """See module docstring."""

    def __init__(self, broker: Broker, transport: socket.socket | trio.abc.Stream) -> None:
        """``transport``: an accepted socket (see :func:`prepare_socket`), or any trio
        stream (tests drive a connection through in-memory streams)."""
        self.broker = broker
        self.stream: trio.abc.Stream | None
        self._raw: socket.socket | None
        if isinstance(transport, socket.socket):
            self.stream, self._raw = None, transport
        else:
            self.stream, self._raw = transport, _raw_socket(transport)
        cfg = broker.config.mqtt
        self.proto = Connection(Role.SERVER, max_packet_size=cfg.max_packet_size)
        self.session: Session | None = None
        self.version = _V5
        self.problem_info = True  # Request Problem Information [MQTT-3.1.2-29]
        self._out: list[bytes] = []
        self._qos0_pending = 0
        self._wake = trio.Event()
        self._idle = False  # the writer waits for a wake-up with nothing in hand
        self._in_batch = False
        self._closing = False
        self._send_will = True
        self._writer_done = trio.Event()
        self._writer_scope: trio.CancelScope | None = None  # set once the writer is started
        self._read_scope: trio.CancelScope | None = None
        # The ordered pipeline is created on first need (most connections never wait).
        self._steps_send: trio.MemorySendChannel[Step] | None = None
        self._steps_pending = 0
        # What connect_now read but left to the handshake; a bug it ran into.
        self._early: Connect | MQTTProtocolError | None = None
        self._early_error: Exception | None = None
        self._drained = False  # the last read emptied the socket: wait before the next recv
        self._parked_fd = -1  # the socket, while the connection is parked (no task yet)

    # == lifecycle ================================================================================

    async def run(self) -> None:
        try:
            if self._early_error is not None:
                raise self._early_error  # a bug in connect_now: reported below
            with trio.CancelScope() as scope:
                self._read_scope = scope
                if self.session is None:  # not connected by connect_now
                    connect_timeout = self.broker.config.mqtt.connect_timeout
                    scope.deadline = trio.current_time() + connect_timeout
                    connect = await self._handshake()
                    if connect is None:
                        return
                    refusal = self._refusal(connect)
                    if refusal is not None:
                        self.version = connect.protocol_version
                        await self._refuse(refusal[0], refusal[1], connect.protocol_version)
                        return
                    scope.deadline = math.inf
                    self._accept(connect)
                    self._resend_inflight()
                # Packets the client pipelined after CONNECT were held until CONNACK was
                # sent (not handled if the session was taken over before this task ran).
                if not self._closing:
                    await self._feed(b"")
                await self._read_loop()
            if scope.cancelled_caught and not self._closing and self.session is not None:
                # Only the keep-alive deadline cancels the scope without closing first.
                self._disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
            self._closing = True
            with trio.move_on_after(FLUSH_TIMEOUT):
                if self._writer_scope is not None:
                    self._wake.set()
                    await self._writer_done.wait()
                elif self._out:
                    data = b"".join(self._out)
                    self._out = []
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self._send_all(data)
        except Exception:
            # A bug while serving this client must not take the broker down: log it with
            # its traceback, tell the client (0x83), and close only this connection.
            log.exception("internal error while serving a client; closing its connection")
            if self.version is _V5:
                data = encode(Disconnect(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR), _V5)
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(FLUSH_TIMEOUT),
                    contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    await self._send_all(data)
        finally:
            self._closing = True
            if self._writer_scope is not None:
                self._writer_scope.cancel()
            if self._steps_send is not None:
                self._steps_send.close()
            self._detach()
            with trio.CancelScope(shield=True):
                await self._close_transport()
            self.broker.connection_ended(self)

    async def _close_transport(self) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)
            return
        raw = self._raw
        assert raw is not None
        if raw.fileno() != -1:
            trio.lowlevel.notify_closing(raw)  # a task waiting on it gets ClosedResourceError
            raw.close()
        await trio.lowlevel.checkpoint()

    def connect_now(self) -> bool:
        """Called by the accept loop before this connection has a task: True when the
        CONNECT was answered on the spot and the connection is parked (see
        ``broker.parking``): its task starts when the client sends something, keep alive
        runs out, or the broker closes it. False: start the task."""
        if not self._connect_inline():
            return False
        assert self._raw is not None
        fd = self._raw.fileno()
        deadline = self.proto.keepalive_deadline(trio.current_time())
        if self.broker.parking.park(self, fd, deadline):
            self._parked_fd = fd
            return True
        return False

    def _detach(self) -> None:
        session = self.session
        if session is None or session.conn is not self:
            return
        session.conn = None
        self.broker.sessions.connection_closed(session, send_will=self._send_will)

    def _stop_reading(self) -> None:
        """End the read loop (a parked connection gets its task, which then closes)."""
        if self._read_scope is not None:
            self._read_scope.cancel()
        elif self._parked_fd >= 0:
            self.broker.parking.unpark(self, self._parked_fd)

    def abandoned(self) -> None:
        """Called by ``Parking`` when this parked connection is closed without being
        served: the broker stops without a shutdown (its nursery was cancelled), or waking
        it failed on a bug. Nothing is published from here any more."""
        self._parked_fd = -1
        self._closing = True
        self._send_will = False
        self._detach()
        if self._raw is not None:
            self._raw.close()
        self.broker.connection_ended(self)

    def unparked(self, expired: bool) -> None:
        """Called by ``Parking`` before this connection's task starts."""
        self._parked_fd = -1
        self._drained = False  # woken because the socket is readable (or to close)
        if expired:
            self._disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")

    def taken_over(self) -> None:
        """Another connection took this client id [MQTT-3.1.4-3]."""
        self._disconnect(ReasonCode.SESSION_TAKEN_OVER, "another connection used this client id")
        self._detach()

    def server_shutdown(self) -> None:
        if self.session is None:  # still in the CONNECT handshake: just stop
            if self._read_scope is not None:
                self._read_scope.cancel()
            return
        self._disconnect(ReasonCode.SERVER_SHUTTING_DOWN, "the server is shutting down")

    def _disconnect(self, code: ReasonCode, reason: str) -> None:
        """DISCONNECT with ``code`` (MQTT 5 only), then close."""
        if self.version is _V5 and not self._closing:
            props = Properties(reason_string=reason) if self.problem_info else EMPTY_PROPERTIES
            self._out.append(encode(Disconnect(code, props), _V5))
        self._close_soon()

    # == reading ================================================================================

    async def _read_loop(self) -> None:
        """Runs inside the connection's scope, whose deadline is the keep-alive deadline
        (the caller turns its expiry into the DISCONNECT)."""
        proto = self.proto
        scope = self._read_scope
        assert scope is not None
        while not self._closing:
            deadline = proto.keepalive_deadline(trio.current_time())
            if deadline is not None:
                scope.deadline = deadline
            try:
                data = await self._receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return  # closed without DISCONNECT: the will goes out
            broker = self.broker
            broker.batch = []
            try:
                await self._feed(bytes(data))
            finally:
                broker.flush_batch()
                broker.persist.chunk_done()

    async def _receive(self) -> bytes | bytearray:
        """``receive_some`` on the raw socket: a non-blocking ``recv`` first (skipped when
        the last read emptied the socket), a wait only when there is nothing yet, and one
        checkpoint either way, the wait being one (trio's own call also enters a conflict
        detector and two context managers per read)."""
        raw = self._raw
        if raw is None:
            assert self.stream is not None
            return await self.stream.receive_some(READ_SIZE)
        waited = False
        if self._drained:
            self._drained = False
            await trio.lowlevel.wait_readable(raw)
            waited = True
        while True:
            try:
                data = raw.recv(READ_SIZE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(raw)
                waited = True
                continue
            except OSError as exc:
                if raw.fileno() == -1:
                    raise trio.ClosedResourceError from None
                raise trio.BrokenResourceError from exc
            if not waited:
                await trio.lowlevel.checkpoint()
            return data

    async def _feed(self, data: bytes) -> None:
        try:
            events = self.proto.receive_data(data)
        except MQTTProtocolError as exc:
            for event in exc.packets:
                await self._handle(event)
            self._protocol_error(exc)
            return
        for event in events:
            await self._handle(event)
            if self._closing:
                return

    def _protocol_error(self, exc: MQTTProtocolError) -> None:
        if self._closing:
            return
        log.debug("protocol error from a client: %s", exc)
        if exc.answer is Answer.DISCONNECT and self.version is _V5:
            props = Properties(reason_string=exc.reason) if self.problem_info else EMPTY_PROPERTIES
            self._out.append(encode(Disconnect(exc.reason_code, props), _V5))
        self._close_soon()

    async def _handle(self, event: Packet | DuplicatePublish) -> None:
        if isinstance(event, Publish):
            await self._on_publish(event)
        elif isinstance(event, Puback | Pubcomp):
            self._copy_acknowledged(event.packet_id)
        elif isinstance(event, Pubrec):
            await self._on_pubrec(event)
        elif isinstance(event, Pubrel):
            await self._on_pubrel(event)
        elif isinstance(event, DuplicatePublish):
            pid = event.publish.packet_id
            assert pid is not None
            # Still awaiting PUBREL: answer again, deliver nothing [MQTT-4.3.3-10].
            await self._step(None, lambda: self._send(Pubrec(pid)))
        elif isinstance(event, Subscribe):
            await self._on_subscribe(event)
        elif isinstance(event, Unsubscribe):
            await self._on_unsubscribe(event)
        elif isinstance(event, Pingreq):
            self._send(Pingresp())  # [MQTT-3.12.4-1]
        elif isinstance(event, Disconnect):
            self._on_disconnect(event)
        elif isinstance(event, Auth):
            # No Authentication Method was accepted, so AUTH is a Protocol Error [MQTT-4.12.0-7].
            self._disconnect(ReasonCode.PROTOCOL_ERROR, "AUTH without an authentication method")

    # == inbound PUBLISH ==========================================================================

    def _publish_refusal(self, p: Publish) -> tuple[ReasonCode, str] | None:
        """Checks beyond topic syntax (which the radix match validates [MQTT-3.3.2-2])."""
        if p.topic.startswith(b"$"):
            return ReasonCode.TOPIC_NAME_INVALID, "topics starting with $ are reserved"
        if (
            p.properties.payload_format_indicator == 1
            and self.broker.config.mqtt.validate_utf8_payload
        ):
            try:
                p.payload.decode("utf-8")
            except UnicodeDecodeError:
                return ReasonCode.PAYLOAD_FORMAT_INVALID, "payload is not UTF-8 as its format says"
        return None

    async def _on_publish(self, p: Publish) -> None:
        session = self.session
        assert session is not None
        refusal = self._publish_refusal(p)
        if refusal is not None:
            await self._refuse_publish(p, *refusal)
            return
        broker = self.broker
        pid = p.packet_id
        msg = self._message(p, session.num)
        extra = broker.persist.qos2_received(session, pid) if p.qos == 2 and pid else []
        try:
            deliveries, plan = broker.plan_publish(msg, extra)
        except radix.TopicError as exc:
            await self._refuse_publish(p, ReasonCode.TOPIC_NAME_INVALID, f"invalid topic: {exc}")
            return
        code = ReasonCode.SUCCESS if deliveries else ReasonCode.NO_MATCHING_SUBSCRIBERS

        def then() -> None:
            broker.persist.after_commit(msg, plan)
            broker.apply_publish(msg, deliveries, plan)
            if p.qos == 1 and code is ReasonCode.SUCCESS and pid:
                self._send_puback(pid)
            elif p.qos:
                self._send(self._ack(p, code))

        def not_stored() -> None:
            # Not stored, so not delivered. MQTT 5 is told (0x80, the exchange ends); a
            # 3.1.x client gets no acknowledgement and is disconnected, so it sends it again.
            if p.qos and self.version is _V5:
                self._send(self._ack(p, ReasonCode.UNSPECIFIED_ERROR, NOT_STORED))
            elif p.qos:
                self._storage_failed()

        await self._step(None if plan.empty else plan.wait, then, not_stored)

    async def _refuse_publish(self, p: Publish, code: ReasonCode, reason: str) -> None:
        """Not delivered: PUBACK/PUBREC with the reason (v5, QoS > 0), else DISCONNECT
        with it; a 3.1.x client cannot be told why, so it is acknowledged (for a reserved
        ``$`` topic) or disconnected (for anything malformed)."""
        if p.qos and self.version is _V5:
            await self._step(None, lambda: self._send(self._ack(p, code, reason)))
            return
        if code is ReasonCode.TOPIC_NAME_INVALID and p.topic.startswith(b"$"):
            if p.qos:
                await self._step(None, lambda: self._send(self._ack(p, ReasonCode.SUCCESS)))
            return
        self._disconnect(code, reason)

    def _ack(self, p: Publish, code: ReasonCode, reason: str | None = None) -> Puback | Pubrec:
        pid = p.packet_id
        assert pid is not None
        if self.version is not _V5:
            code = ReasonCode.SUCCESS
        props = (
            Properties(reason_string=reason) if reason and self.problem_info else EMPTY_PROPERTIES
        )
        return Puback(pid, code, props) if p.qos == 1 else Pubrec(pid, code, props)

    async def _on_pubrel(self, p: Pubrel) -> None:
        session = self.session
        assert session is not None
        known = p.packet_id in session.state.inbound_qos2
        fut = self.broker.persist.qos2_released(session, p.packet_id) if known else None
        wait = None if fut is None else (lambda: wait_future(fut))
        await self._step(wait, lambda: self._send(self.proto.pubcomp_for(p, known)))

    # == outbound acknowledgements ================================================================

    def _copy_acknowledged(self, packet_id: int) -> None:
        """PUBACK / PUBCOMP (or a PUBREC with an error): the copy is done [MQTT-4.4.0-2]."""
        session = self.session
        assert session is not None
        og = session.outgoing.pop(packet_id, None)
        if og is not None:
            self.broker.persist.copy_done(session, og)
            if session.queue:
                self.output_ready()  # the window has room for a queued copy

    async def _on_pubrec(self, p: Pubrec) -> None:
        session = self.session
        assert session is not None
        pid = p.packet_id
        if p.reason_code.is_error:
            self._copy_acknowledged(pid)
            return
        og = session.outgoing.get(pid)
        if og is None:
            self._send(Pubrel(pid, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            return
        persist = self.broker.persist
        entries = [(og, pid, 2)]
        fut = persist.stage_copies(session, entries) if og.pend_seq else None

        async def recorded() -> None:
            assert fut is not None
            persist.stages_committed(entries, await wait_future(fut))

        await self._step(None if fut is None else recorded, lambda: self._send(Pubrel(pid)))

    # == subscriptions ============================================================================

    async def _on_subscribe(self, p: Subscribe) -> None:
        broker = self.broker
        cfg = broker.config.mqtt
        session = self.session
        assert session is not None
        sub_ids = p.properties.subscription_identifiers
        sub_id = sub_ids[0] if sub_ids else 0
        if sub_id and not cfg.subscription_identifiers_available:
            self._disconnect(
                ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
                "subscription identifiers are not available",
            )
            return
        v5 = self.version is _V5
        codes: list[ReasonCode] = []
        granted: list[tuple[SubscriptionRecord, bytes, bool]] = []
        added: list[SubscriptionRecord] = []
        for sub in p.subscriptions:
            try:
                share, flt = radix.validate_filter(sub.filter)
            except radix.TopicError:
                codes.append(
                    ReasonCode.TOPIC_FILTER_INVALID if v5 else ReasonCode.UNSPECIFIED_ERROR
                )
                continue
            if share is not None and not cfg.shared_subscriptions_available:
                codes.append(ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            if not cfg.wildcard_subscription_available and any(
                level in _WILDCARDS for level in flt.split(b"/")
            ):
                codes.append(ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            qos = min(sub.qos, cfg.maximum_qos)
            record = SubscriptionRecord(
                sub.filter,
                qos,
                sub.no_local,
                sub.retain_as_published,
                int(sub.retain_handling),
                sub_id,
                make_handle(sub, qos, sub_id),
            )
            is_new = broker.subscribe(session, record)
            codes.append(_GRANTED[qos])
            added.append(record)
            if share is None:
                granted.append((record, flt, is_new))
        fut = broker.persist.save_subscriptions(session, added) if session.stored else None
        wait = None if fut is None else (lambda: wait_future(fut))
        pid = p.packet_id

        def then() -> None:
            self._send(Suback(pid, tuple(codes)))
            self._send_retained(session, granted)

        await self._step(wait, then)

    def _send_retained(
        self, session: Session, granted: list[tuple[SubscriptionRecord, bytes, bool]]
    ) -> None:
        """Retained messages for new subscriptions per Retain Handling [MQTT-3.3.1-9..11]."""
        broker = self.broker
        now = trio.current_time()
        for record, flt, is_new in granted:
            rh = record.retain_handling
            if rh == RetainHandling.DO_NOT_SEND or (
                rh == RetainHandling.SEND_IF_NEW_SUBSCRIPTION and not is_new
            ):
                continue
            sub_ids = (record.sub_id,) if record.sub_id else ()
            messages = broker.retained_for(flt)
            if session.retained_backlog is not None or not self._retained_fit(messages):
                broker.pace_retained(session, messages, record.qos, sub_ids)
                self.output_ready()
                continue
            for msg in messages:
                qos = min(msg.qos, record.qos)
                if qos == 0:
                    self.send_qos0(msg, True, sub_ids, now)
                else:
                    broker.queue_copy(session, Outgoing(msg, qos, True, sub_ids))

    def _retained_fit(self, messages: Sequence[AppMessage]) -> bool:
        """Whether ``messages`` can go out at once without a copy limit cutting them short
        (else they are paced): at most ``RETAINED_AT_ONCE``, within what is left of
        ``max_outbound_queue`` for QoS 0 copies and of ``max_queued_messages`` /
        ``max_queued_bytes`` for QoS 1/2 ones."""
        n = len(messages)
        if n > RETAINED_AT_ONCE:
            return False
        limits = self.broker.config.sessions
        session = self.session
        assert session is not None
        if self._qos0_pending + n > limits.max_outbound_queue:
            return False
        if limits.max_queued_messages and session.queued + n > limits.max_queued_messages:
            return False
        return (
            not limits.max_queued_bytes
            or session.queued_bytes + sum(len(m.payload) for m in messages)
            <= limits.max_queued_bytes
        )

    async def _on_unsubscribe(self, p: Unsubscribe) -> None:
        broker = self.broker
        session = self.session
        assert session is not None
        codes: list[ReasonCode] = []
        removed: list[bytes] = []
        for flt in p.filters:
            try:
                radix.validate_filter(flt)
            except radix.TopicError:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            found = broker.unsubscribe(session, flt)
            codes.append(ReasonCode.SUCCESS if found else ReasonCode.NO_SUBSCRIPTION_EXISTED)
            if found:
                removed.append(flt)
        fut = broker.persist.remove_subscriptions(session, removed) if session.stored else None
        wait = None if fut is None else (lambda: wait_future(fut))
        pid = p.packet_id
        await self._step(wait, lambda: self._send(Unsuback(pid, tuple(codes))))

    def _on_disconnect(self, p: Disconnect) -> None:
        session = self.session
        assert session is not None
        # 0x04: the client asks for its will [MQTT-3.14.4-3 otherwise discards it].
        self._send_will = p.reason_code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        expiry = p.properties.session_expiry_interval
        if expiry is not None:
            cap = self.broker.config.mqtt.max_session_expiry_interval
            was_persistent = session.persistent
            session.expiry_interval = min(expiry, cap)
            if session.persistent:
                self.broker.persist.save_session(session)
            elif was_persistent:
                self.broker.persist.session_ended(session, ())
        self._close_soon()
