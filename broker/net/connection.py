"""One network connection: its lifecycle, read loop and packet dispatch, composed of a
:class:`~broker.net.transport.Transport` (the bytes), a :class:`~broker.net.handshake.Handshake`
(CONNECT to CONNACK), an :class:`~broker.net.inbound.Inbound` (what it does with each packet)
and an :class:`~broker.net.output.Output` (what it sends).

A plain-TCP connection is served without a task of its own while it is parked (see
``broker.net.parking``): the watcher hands it each chunk (``serve``). Otherwise (TLS,
WebSocket, or while the broker must wait for it) its own task reads:

* the reader (its task): reads up to 64 KiB, feeds the codec machine, handles each
  event; one cancel scope covers the CONNECT timeout, keep alive (the machine's
  deadline, counted from the last complete packet [MQTT-3.1.2-22]) and a close
  requested from elsewhere. Output produced while handling a chunk is sent at the
  chunk's end, straight to the socket, when nothing is ahead of it;
* the writer, started in the broker's nursery the first time output has to wait (the
  kernel did not take it all, a copy needs a commit first, or output arrives outside
  a chunk): waits for a wake-up, moves queued QoS 1/2 copies into the client's
  Receive Maximum window [MQTT-3.3.4-9], and sends everything pending in ONE write
  (coalesced writes). An idle connection never has one;
* the ordered pipeline (``Output.step``): acknowledgements that depend on a store
  commit (PUBACK, PUBREC, PUBCOMP, SUBACK, UNSUBACK, PUBREL of stored copies) run in
  arrival order after their commit, and so do the deliveries of the PUBLISH they
  acknowledge, from the commit's callback. Steps with nothing to wait for run at once
  when the pipeline is empty.

Error handling: anything the peer sends wrong arrives as ``MQTTProtocolError``
from the machine and becomes CONNACK / DISCONNECT with its reason code (3.1.x:
a close); the connection then closes without affecting any other client.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from typing import TYPE_CHECKING, Final

import trio

from broker.core.sessions import Session
from broker.core.stats import Stats
from broker.mqtt.connection import Connection, ConnectionState, DuplicatePublish, Role
from broker.mqtt.encoder import encode
from broker.mqtt.errors import Answer, MQTTProtocolError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Auth,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Unsubscribe,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.session import SessionState
from broker.net.bugs import internal_errors
from broker.net.handshake import Handshake, log_disconnect, log_over_limit
from broker.net.inbound import Inbound
from broker.net.output import FLUSH_TIMEOUT, Output
from broker.net.parking import LEFT, PINGED, SERVED
from broker.net.runs import Run, StoredRun, drop_eager, open_run
from broker.net.transport import READ_SIZE, Transport

if TYPE_CHECKING:
    from broker.config import ListenerSpec
    from broker.net.link import Host

log = logging.getLogger("jetmq.client")

_V5: Final = ProtocolVersion.MQTT_5
_PINGREQ: Final = b"\xc0\x00"  # a whole PINGREQ (the same in every protocol version)
_PINGRESP: Final = b"\xd0\x00"
_CONNECTED: Final = ConnectionState.CONNECTED
_SERVER: Final = Role.SERVER
# Read per packet: Final, so that compiled (hotpath) each is a C static.
_PUBLISH_CLASS: Final = Publish
_PUBACK_CLASS: Final = Puback
_PUBCOMP_CLASS: Final = Pubcomp
_PUBREC_CLASS: Final = Pubrec
_PUBREL_CLASS: Final = Pubrel
_SUBSCRIBE_CLASS: Final = Subscribe
_UNSUBSCRIBE_CLASS: Final = Unsubscribe
_PINGREQ_CLASS: Final = Pingreq
_DISCONNECT_CLASS: Final = Disconnect
_DUPLICATE_CLASS: Final = DuplicatePublish
_EMPTY: Final = EMPTY_PROPERTIES
# The codec machine's session state until the CONNECT is accepted (the handshake puts the
# session's own in): shared, as the machine takes nothing that writes it before CONNACK.
_NOT_CONNECTED: Final = SessionState()


# SUBACK codes by granted QoS (an Enum call per subscription is measurable in a storm).
_GRANTED: Final = (ReasonCode.GRANTED_QOS_0, ReasonCode.GRANTED_QOS_1, ReasonCode.GRANTED_QOS_2)


class ClientConnection:
    """See module docstring."""

    __slots__ = (
        "_parked_fd",
        "_read_scope",
        "_released",
        "_serving",
        "broker",
        "close_reason",
        "closing",
        "handshake",
        "heard",
        "inbound",
        "listener",
        "out",
        "over_limit",
        "peer",
        "peer_gone",
        "problem_info",
        "proto",
        "send_will",
        "session",
        "stats",
        "transport",
        "username",
        "version",
    )
    # Dropped when the connection is over (``_release``): a native class names what it deletes.
    __deletable__ = ("inbound", "out")

    def __init__(
        self,
        broker: Host,
        transport: socket.socket | trio.abc.Stream,
        listener: ListenerSpec | None = None,
    ) -> None:
        """``transport``: an accepted socket (see :func:`transport.prepare_socket`), or any
        trio stream (TLS, WebSocket; tests drive a connection through in-memory streams)."""
        self.broker = broker
        self.stats: Stats = broker.stats  # typed: a native read per chunk (compiled)
        self.listener = listener  # the listener that accepted it (None: tests)
        self.username: str | None = None  # the identity the ACL knows it by
        self.over_limit = False  # accepted past max_connections: its CONNECT is refused
        self.transport = Transport(transport)
        self.proto = Connection(
            _SERVER, session=_NOT_CONNECTED, max_packet_size=broker.settings.max_packet_size
        )
        self.session: Session | None = None
        self.version = _V5
        self.problem_info = True  # Request Problem Information [MQTT-3.1.2-29]
        self.closing = False
        self.send_will = True
        self.peer_gone = False  # the client closed (EOF), reset, or said goodbye: no linger
        self.peer = "-"  # the client's address once connected, for the log lines
        self.close_reason = ""  # why the connection ends (the disconnect log line)
        self._read_scope: trio.CancelScope | None = None
        self._parked_fd = -1  # the socket, while the connection is parked (no task)
        self._serving = False  # the parking watcher is handling a chunk of this connection
        self.heard = 0.0  # when the last complete packet arrived (keep alive counts from it)
        self._released = False  # over, its parts let go of (_release)
        self.out = Output(self, self.transport)
        self.handshake: Handshake | None = Handshake(self, self.out)
        self.inbound = Inbound(self, self.out)

    # == lifecycle ================================================================================

    async def run(self) -> None:
        hs = self.handshake
        self.handshake = None  # the task holds it while it needs it
        try:
            if hs is not None and hs.early_error is not None:
                raise hs.early_error  # a bug in connect_now: reported below
            with trio.CancelScope() as scope:
                self._read_scope = scope
                if hs is not None and self.session is None:  # not connected by connect_now
                    if self.closing:
                        return  # the connect timeout ran out while parked, or shutdown
                    connect_timeout = self.broker.settings.connect_timeout
                    scope.deadline = trio.current_time() + connect_timeout
                    connect = await hs.read_connect()
                    if connect is None:
                        return
                    refusal = (
                        hs.too_many(connect)
                        if self.over_limit
                        else hs.refusal(connect) or await hs.authenticate(connect)
                    )
                    if refusal is not None:
                        self.version = connect.protocol_version
                        await hs.refuse(refusal[0], refusal[1], connect.protocol_version)
                        return
                    scope.deadline = math.inf
                    self.heard = trio.current_time()
                    hs.accept(connect)
                    hs.resend_inflight()
                # Packets the client pipelined after CONNECT were held until CONNACK was
                # sent (not handled if the session was taken over before this task ran).
                if hs is not None:
                    for packet in hs.behind_connect:
                        self._handle(packet)
                    hs = None
                if not self.closing:
                    self._feed(b"")
                await self._read_loop()
            if self._parked_fd >= 0:
                return  # parked again, idle: its next packet starts a task
            if scope.cancelled_caught and not self.closing and self.session is not None:
                # Only the keep-alive deadline cancels the scope without closing first.
                self.disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")
            self.closing = True
            with trio.move_on_after(FLUSH_TIMEOUT):
                await self.out.flush_on_close()
        except Exception:
            # A bug while serving this client must not take the broker down: log it,
            # tell the client (0x83), and close only this connection.
            internal_errors.report(self)
            self.close_reason = self.close_reason or "internal error (0x83)"
            if self.version is _V5:
                data = encode(Disconnect(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR), _V5)
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(FLUSH_TIMEOUT),
                    # Busy: the writer task is sending on a TLS/WebSocket stream right now.
                    contextlib.suppress(
                        trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError
                    ),
                ):
                    await self.transport.send_all(data)
        finally:
            if self._parked_fd < 0:  # else parked again: the connection goes on
                self.closing = True
                self.out.end()
                self.detach()
                with trio.CancelScope(shield=True):
                    await self.transport.aclose(linger=not self.peer_gone)
                self.broker.connection_ended(self)
                self._release()

    def connect_now(self) -> bool:
        """Called by the accept loop before this connection has a task: True when it is
        parked (see ``broker.net.parking``), its CONNECT answered on the spot or not all
        there yet (the watcher answers it when it comes); its task starts only when the
        broker must wait for it. False: start the task."""
        hs = self.handshake
        assert hs is not None
        self.heard = now = self.broker.hub.now()
        if hs.connect_inline():
            deadline = self.proto.keepalive_deadline(now)
        elif hs.pending and self.transport.raw is not None:  # not all of the CONNECT yet
            deadline = now + self.broker.settings.connect_timeout
        else:
            return False
        raw = self.transport.raw
        assert raw is not None
        fd = raw.fileno()
        if self.broker.parking.park(self, fd, deadline):
            self._parked_fd = fd
            if not hs.pending:
                self.handshake = None  # done with: an idle connection keeps what it needs
            return True
        return False

    def _release(self) -> None:
        """The connection is over: it lets go of its parts, which refer to it, so that
        reference counting frees them all (else ~14 objects of cyclic garbage per
        connection, kept until a full collection). What may still run for it (a queued
        step, a commit's callback) holds a part, which still sees it closed."""
        if self._released:
            return
        self._released = True
        self.handshake = None
        del self.inbound
        del self.out

    def detach(self) -> None:
        if self._released:
            return
        session = self.session
        if session is None or session.conn is not self.out:
            return
        session.conn = None
        self.broker.stats.disconnected()
        log_disconnect(self, session.client_id)
        self.broker.hub.sessions.connection_closed(session, send_will=self.send_will)

    def stop_reading(self) -> None:
        """End the read loop (a parked connection gets its task, which then closes)."""
        if self._read_scope is not None:
            self._read_scope.cancel()
        elif self._parked_fd >= 0 and not self._serving:  # (serve() decides when it ends)
            self.broker.parking.unpark(self, self._parked_fd)

    def abandoned(self) -> None:
        """Called by ``Parking`` when this parked connection is closed without being
        served: the broker stops without a shutdown (its nursery was cancelled), or waking
        it failed on a bug. Nothing is published from here any more."""
        self._parked_fd = -1
        self.closing = True
        self.send_will = False
        self.close_reason = self.close_reason or "the broker stopped"
        self.detach()
        self.transport.close_now()
        self.broker.connection_ended(self)
        self._release()

    def deadline(self) -> float | None:
        """Called by ``Parking``: the keep-alive deadline, from the last complete packet
        (before the CONNECT: the connect timeout, from the accept)."""
        if self.session is None:
            return self.heard + self.broker.settings.connect_timeout
        return self.proto.keepalive_deadline(self.heard)

    def serve(self, now: float) -> int:
        """Called by ``Parking`` in a round (``Broker._begin_round``: output and store writes
        gathered for the round) when this parked connection's socket is readable: what it
        holds is read and handled here, as the connection's task would (see
        ``broker.net.parking``)."""
        hs = self.handshake
        if hs is not None:  # parked before its CONNECT came
            if hs.connect_inline():
                self.handshake = None
                self.heard = now
                parking = self.broker.parking
                parking.reschedule(self._parked_fd, self.proto.keepalive_deadline(now))
                return SERVED
            if hs.pending and not self.closing:
                return SERVED  # still not all of it
            # A refusal, an error, a check that takes time, packets behind the CONNECT, or
            # the end of the stream: the task's handshake answers.
            self.broker.parking.unpark(self, self._parked_fd)
            return LEFT
        raw = self.transport.raw
        assert raw is not None
        try:
            data = raw.recv(READ_SIZE)
        except BlockingIOError:
            return SERVED  # nothing after all
        except OSError:
            self.peer_gone = True
            self.close_reason = self.close_reason or "connection reset"
            return self._leave()
        if not data:
            self.peer_gone = True
            self.close_reason = self.close_reason or "closed by the client without DISCONNECT"
            return self._leave()  # closed without DISCONNECT: the will goes out
        proto = self.proto
        if data == _PINGREQ and proto.state is _CONNECTED and not proto.buffered:
            self._pinged()
            self.heard = now
            return PINGED
        self.stats.bytes_received += len(data)
        self._serving = True
        try:
            if self._feed(data):
                self.heard = now
        except Exception:
            internal_errors.report(self)
            self.close_reason = self.close_reason or "internal error (0x83)"
            self.disconnect(ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
        finally:
            self._serving = False
        if self.closing:
            return self._leave()
        if self.out.congested():  # reading waits for commits: the task's job
            self.broker.parking.unpark(self, self._parked_fd)
            return LEFT
        return SERVED

    def _pinged(self) -> None:
        """A lone PINGREQ on a connected socket with nothing buffered: the codec machine
        would turn these two bytes into one PINGREQ and change nothing (nor does sending
        PINGRESP), so it is skipped: the hot path of an idle broker."""
        broker = self.broker
        stats = broker.stats
        stats.bytes_received += 2
        stats.packets_received += 1
        out = self.out
        if out.at_rest():  # the usual case: nothing ahead of the PINGRESP, send it now
            data = _PINGRESP  # [MQTT-3.12.4-1]
            stats.control_sent += 1
            sent = self.transport.send_now(data)
            if sent < 0:
                out.close_soon()  # the peer is gone: the connection's task closes it
            elif sent < len(data):  # the kernel did not take it all: the writer's job
                stats.bytes_sent += sent
                out.out.append(data[sent:])
                out.kick()
            else:
                stats.bytes_sent += sent
        else:
            out.send(Pingresp())  # [MQTT-3.12.4-1] (sent at the round's end)

    def _leave(self) -> int:
        """Serving found the connection closing or the peer gone: close it here when
        nothing needs a wait (the peer is gone or said goodbye, no writer busy; what is
        left goes out best effort), else start the task that flushes and lingers."""
        self.closing = True
        out = self.out
        fd = self._parked_fd
        if not self.peer_gone or out.writer_scope is not None:
            self.broker.parking.unpark(self, fd)
            return LEFT
        if out.out:
            data = b"".join(out.out)
            out.out = []
            self.transport.send_now(data)
        self.broker.parking.forget(self, fd)
        self._parked_fd = -1
        out.end()
        self.detach()
        self.transport.close_now()
        self.broker.connection_ended(self)
        self._release()
        return LEFT

    def _park_again(self) -> bool:
        """After a chunk read by this connection's task: give the socket to ``Parking``
        and end the task (True) when it may be served there."""
        raw = self.transport.raw
        if raw is None or self.closing or self.out.congested():
            return False
        scope = self._read_scope
        self._read_scope = None
        fd = raw.fileno()
        if self.broker.parking.park(self, fd, self.proto.keepalive_deadline(self.heard)):
            self._parked_fd = fd
            return True
        self._read_scope = scope
        return False

    def unparked(self, expired: bool) -> None:
        """Called by ``Parking`` before this connection's task starts."""
        self._parked_fd = -1
        self.transport.drained = False  # woken because the socket is readable (or to close)
        if expired and self.session is None:
            self.closing = True  # no CONNECT within connect_timeout [MQTT-3.1.0-1]
            self.close_reason = self.close_reason or "no CONNECT in time"
        elif expired:
            self.disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT, "keep alive timeout")

    def taken_over(self) -> None:
        """Another connection took this client id [MQTT-3.1.4-3]."""
        self.disconnect(ReasonCode.SESSION_TAKEN_OVER, "another connection used this client id")
        self.detach()

    def server_shutdown(self) -> None:
        if self.session is None:  # still in the CONNECT handshake: just stop
            self.closing = True
            self.close_reason = self.close_reason or "the server is shutting down"
            self.stop_reading()
            return
        self.disconnect(ReasonCode.SERVER_SHUTTING_DOWN, "the server is shutting down")

    def disconnect(self, code: ReasonCode, reason: str) -> None:
        """DISCONNECT with ``code`` (MQTT 5 only), then close."""
        if self._released:
            return  # over already (a part's late step or callback)
        if not self.close_reason:
            self.close_reason = f"{reason} (0x{int(code):02x})"
        if self.version is _V5 and not self.closing:
            props = Properties(reason_string=reason) if self.problem_info else EMPTY_PROPERTIES
            self.out.out.append(encode(Disconnect(code, props), _V5))
        self.out.close_soon()

    # == reading ================================================================================

    async def _read_loop(self) -> None:
        """Runs inside the connection's scope, whose deadline is the keep-alive deadline
        (the caller turns its expiry into the DISCONNECT)."""
        proto = self.proto
        scope = self._read_scope
        assert scope is not None
        receive = self.transport.receive
        while not self.closing:
            if self.out.congested():
                await self.out.uncongested()  # steps waiting for commits: read no more
                continue
            # Counted from the last COMPLETE packet: a client trickling a packet a byte at
            # a time does not keep its connection alive [MQTT-3.1.2-22].
            deadline = proto.keepalive_deadline(self.heard)
            if deadline is not None:
                scope.deadline = deadline
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.peer_gone = True
                self.close_reason = self.close_reason or "connection reset"
                return
            if not data:
                self.peer_gone = True
                self.close_reason = self.close_reason or "closed by the client without DISCONNECT"
                return  # closed without DISCONNECT: the will goes out
            now = trio.current_time()
            broker = self.broker
            broker.stats.bytes_received += len(data)
            broker.batch = []
            try:
                if self._feed(bytes(data)):
                    self.heard = now
            finally:
                broker.flush_batch()
                broker.store_client.chunk_done()
            if self._park_again():
                return

    def _feed(self, data: bytes) -> bool:
        """Handle the packets ``data`` completes; True when it completed at least one."""
        try:
            events = self.proto.receive_data(data)
        except MQTTProtocolError as exc:
            for event in exc.packets:
                self._handle(event)
            self._protocol_error(exc)
            return bool(exc.packets)
        self.stats.packets_received += len(events)
        inbound = self.inbound
        out = self.out
        # Plain QoS 0/1 PUBLISHes (no retain, no properties) in a stretch without other
        # events: the second to a topic opens the topic's run (broker.net.runs). A run
        # that acknowledges at once is dropped once a step waits (it would overtake it).
        seen: set[bytes] = set()
        runs: dict[bytes, Run | StoredRun | None] = {}
        eager = False  # some run in runs acknowledges at once
        for event in events:
            if type(event) is not _PUBLISH_CLASS:
                seen.clear()
                runs.clear()
                eager = False
                self._handle(event)
            elif event.qos == 2 or event.retain or event.properties is not _EMPTY:
                seen.clear()
                runs.clear()
                eager = False
                inbound.on_publish(event)  # (what _handle does first, without its call)
            else:
                topic = event.topic
                run = runs.get(topic)
                if run is None and topic in seen and topic not in runs:
                    run = runs[topic] = open_run(inbound, event)
                    if run is not None and not run.stored:
                        eager = True
                if run is not None and run.forward(event):
                    if eager and run.stored:
                        drop_eager(runs)
                        eager = False
                else:
                    inbound.on_publish(event)
                    if topic[:1] == b"$":
                        # A system topic: the open runs' decisions may no longer hold.
                        seen.clear()
                        runs.clear()
                        eager = False
                    else:
                        seen.add(topic)
                        if eager and not out.idle():
                            drop_eager(runs)
                            eager = False
            if self.closing:
                break
        return bool(events)

    def _protocol_error(self, exc: MQTTProtocolError) -> None:
        if self.closing:
            return
        log.debug("protocol error from a client: %s", exc)
        self.close_reason = f"protocol error: {exc.reason} (0x{int(exc.reason_code):02x})"
        log_over_limit(self, exc)
        if exc.answer is Answer.DISCONNECT and self.version is _V5:
            props = Properties(reason_string=exc.reason) if self.problem_info else EMPTY_PROPERTIES
            self.out.out.append(encode(Disconnect(exc.reason_code, props), _V5))
        self.out.close_soon()

    def _handle(self, event: Packet | DuplicatePublish) -> None:
        inbound = self.inbound
        # Exact types (the packet classes are final), which mypy narrows without a cast().
        if type(event) is _PUBLISH_CLASS:
            inbound.on_publish(event)
        elif type(event) is _PUBACK_CLASS or type(event) is _PUBCOMP_CLASS:
            inbound.copy_acknowledged(event.packet_id)
        elif type(event) is _DISCONNECT_CLASS:
            inbound.on_disconnect(event)
        elif type(event) is _SUBSCRIBE_CLASS:
            inbound.on_subscribe(event)
        elif type(event) is _PUBREC_CLASS:
            inbound.on_pubrec(event)
        elif type(event) is _PUBREL_CLASS:
            inbound.on_pubrel(event)
        elif type(event) is _DUPLICATE_CLASS:
            inbound.duplicate_publish(event)
        elif type(event) is _UNSUBSCRIBE_CLASS:
            inbound.on_unsubscribe(event)
        elif type(event) is _PINGREQ_CLASS:
            self.out.send(Pingresp())  # [MQTT-3.12.4-1]
        elif isinstance(event, Auth):
            # No Authentication Method was accepted, so AUTH is a Protocol Error [MQTT-4.12.0-7].
            self.disconnect(ReasonCode.PROTOCOL_ERROR, "AUTH without an authentication method")
