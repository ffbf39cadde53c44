"""The CONNECT handshake of a connection: answered in the accept loop when the CONNECT is
already in the socket, otherwise by the connection's task; session lookup and takeover,
refusals, the CONNACK, and in-flight copies resent before anything new.

Composed into :class:`broker.net.connection.ClientConnection`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import trio

import radix
from broker.core.message import message_from
from broker.core.sessions import NEVER_EXPIRES, WillRecord
from broker.core.systopics import reserved_prefix
from broker.mqtt.connection import Event
from broker.mqtt.encoder import encode
from broker.mqtt.errors import Answer, MQTTProtocolError, PacketOverLimitError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode, connack_return_code
from broker.net.output import FLUSH_TIMEOUT
from broker.net.tls import peer_of
from broker.security.auth import PeerInfo

if TYPE_CHECKING:
    from broker.net.link import Link
    from broker.net.output import Output

_V5: Final = ProtocolVersion.MQTT_5
log = logging.getLogger("jetmq.client")


def log_over_limit(conn: Link, exc: MQTTProtocolError) -> None:
    """One warning per packet refused for ``mqtt.max_packet_size``, naming the client (or,
    before its CONNECT, its address) and the size; other errors log nothing here."""
    if not isinstance(exc, PacketOverLimitError):
        return
    session = conn.session
    if session is not None:
        who = f"client {session.client_id!r}"
    else:
        who = "a client before its CONNECT"
        raw = conn.transport.raw
        with contextlib.suppress(OSError):
            if raw is not None:
                host, port = raw.getpeername()[:2]
                who += f" (from {host} port {port})"
    log.warning(
        "%s: refused a packet of %d bytes, over mqtt.max_packet_size = %d (0x95)",
        who,
        exc.size,
        exc.limit,
    )


_VERSIONS: Final = {3: "3.1", 4: "3.1.1", 5: "5.0"}
# The CONNACK most MQTT 5 clients get (no session present, the broker's common properties:
# ``Broker.connack_properties``), made again when those are.
_COMMON_CONNACK: Final = [Connack()]


def log_connect(conn: Link, client_id: str, clean_start: bool, keep_alive: int) -> None:
    """One line per accepted CONNECT: client id, address, protocol (never a password);
    none with ``[log] connections = false``."""
    if not conn.broker.settings.log_connections or not log.isEnabledFor(logging.INFO):
        return
    raw = conn.transport.raw
    if raw is not None:
        with contextlib.suppress(OSError):
            host, port = raw.getpeername()[:2]
            conn.peer = f"{host}:{port}"
    protocol = _VERSIONS.get(int(conn.version), "?")
    log.info(
        "client %r connected from %s (MQTT %s, clean start %s, keep alive %d)",
        client_id,
        conn.peer,
        protocol,
        "yes" if clean_start else "no",
        keep_alive,
        extra={"client_id": client_id, "address": conn.peer, "protocol": protocol},
    )


def log_disconnect(conn: Link, client_id: str) -> None:
    """One line when a connected client's connection ends, with why (not with
    ``[log] connections = false``)."""
    if not conn.broker.settings.log_connections or not log.isEnabledFor(logging.INFO):
        return
    reason = conn.close_reason or ("DISCONNECT (0x00)" if conn.peer_gone else "closed")
    protocol = _VERSIONS.get(int(conn.version), "?")
    log.info(
        "client %r disconnected from %s (MQTT %s): %s",
        client_id,
        conn.peer,
        protocol,
        reason,
        extra={
            "client_id": client_id,
            "address": conn.peer,
            "protocol": protocol,
            "reason": reason,
        },
    )


class Handshake:
    """CONNECT to CONNACK, for one connection (see module docstring)."""

    __slots__ = ("behind_connect", "conn", "early", "early_error", "out", "pending")

    def __init__(self, conn: Link, out: Output) -> None:
        self.conn = conn
        self.out = out
        # What connect_inline read but left to the task; a bug it ran into.
        self.early: Connect | MQTTProtocolError | None = None
        self.early_error: Exception | None = None
        # connect_inline found no CONNECT yet, or part of one, and nothing wrong: the
        # connection may wait parked for the rest.
        self.pending = False
        # Packets decoded with the CONNECT (a server in CONNECTING decodes AUTH only):
        # handled once the CONNACK is out, like anything else the client pipelined.
        self.behind_connect: Sequence[Event] = ()

    def log_over_limit(self, exc: MQTTProtocolError) -> None:
        """A packet over ``mqtt.max_packet_size`` is refused with one warning naming the
        client and the size, so an operator can tell a client it is too big or raise the
        limit (the connection closes after it: one line per refusal)."""
        log_over_limit(self.conn, exc)

    def connect_inline(self) -> bool:
        """Called (through ``connect_now``) by the accept loop before the connection's
        task starts. Under load the
        CONNECT is usually in the socket by the time it is accepted: read it, and if it
        is complete and acceptable, take the session and send the CONNACK here, sparing
        the task a wait for readability. Anything else is left to the task's handshake
        (a partial CONNECT stays in the codec's buffer; a refusal or an error is
        answered there).

        True: connected here with nothing more to read (``connect_now`` parks it).
        """
        self.pending = False
        try:
            data = self.conn.transport.recv_now()
            if not data:  # nothing yet (None), or gone: the task finds out
                self.pending = data is None
                return False
            self.conn.broker.stats.bytes_received += len(data)
            try:
                events = self.conn.proto.receive_data(data)
            except MQTTProtocolError as exc:
                self.early = exc
                return False
            if not events:
                self.pending = True  # part of the CONNECT: the codec keeps it
                return False
            connect = events[0]
            assert isinstance(connect, Connect)
            if (
                self.refusal(connect) is not None
                or len(events) > 1
                or self.conn.broker.authenticator is not None  # may take time: the task's
            ):
                self.early = connect
                self.behind_connect = events[1:]  # AUTH: the task answers it after CONNACK
                return False
            self.accept(connect)
            self.resend_inflight()  # before anything else can be sent to this session
            return not (
                self.conn.closing
                or not self.conn.transport.drained
                or self.conn.proto.buffered  # packets pipelined behind the CONNECT
                or self.out.writer_scope is not None
            )
        except Exception as exc:  # a bug: the task reports it (0x83) and closes
            self.early_error = exc
        return False

    async def read_connect(self) -> Connect | None:
        """Read CONNECT (the caller's scope has the connect timeout [MQTT-3.1.0-1]);
        answer errors directly."""
        early = self.early
        if early is not None:
            self.early = None
            if isinstance(early, Connect):
                return early
            self.log_over_limit(early)
            await self.refuse(early.reason_code, early.reason, early.version, early.answer)
            return None
        while True:
            try:
                data = await self.conn.transport.receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not data:
                return None
            self.conn.broker.stats.bytes_received += len(data)
            try:
                events = self.conn.proto.receive_data(bytes(data))
            except MQTTProtocolError as exc:
                self.log_over_limit(exc)
                await self.refuse(exc.reason_code, exc.reason, exc.version, exc.answer)
                return None
            if events:
                packet = events[0]
                assert isinstance(packet, Connect)
                self.behind_connect = events[1:]  # AUTH pipelined behind the CONNECT
                return packet

    async def authenticate(self, connect: Connect) -> tuple[ReasonCode, str] | None:
        """The broker's authenticator on ``connect`` (None: accepted, or nobody asks),
        then the ACL on the will's topic (a will the client may not publish is refused
        0x87 / return code 5, as mosquitto does)."""
        authenticator = self.conn.broker.authenticator
        if authenticator is None:
            return None
        conn = self.conn
        address, cn = peer_of(conn.transport.stream, conn.transport.raw)
        listener = conn.listener
        peer = PeerInfo(address, cn, listener is not None and listener.use_identity_as_username)
        refusal = await authenticator.authenticate(connect, peer)
        if refusal is not None:
            return refusal
        conn.username = peer.username
        will = connect.will
        if will is not None:
            access = authenticator.access_for(connect.client_id or "", peer.username)
            if access is not None and not access.may_write(will.topic):
                log.warning(
                    "refused CONNECT from %s client %r: the ACL denies its will topic %r",
                    address,
                    connect.client_id,
                    will.topic.decode("utf-8", "replace"),
                )
                return ReasonCode.NOT_AUTHORIZED, "the will topic is not authorised"
        return None

    async def refuse(
        self,
        code: ReasonCode,
        reason: str,
        version: ProtocolVersion | None,
        answer: Answer = Answer.CONNACK,
    ) -> None:
        """CONNACK with a failure code (v5), or the 3.1.1 return code, then close."""
        if answer is not Answer.CONNACK:
            return
        if version is _V5 or version is None:
            props = Properties(reason_string=reason)
            data = encode(Connack(False, code, props), _V5)
        else:
            if connack_return_code(code) is None:
                return
            data = encode(Connack(False, code), version)
        with trio.move_on_after(FLUSH_TIMEOUT):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.conn.transport.send_all(data)

    def accept(self, connect: Connect) -> None:
        """Session lookup, takeover, CONNACK (the CONNECT passed ``_refusal``)."""
        broker = self.conn.broker
        cfg = broker.settings
        version = connect.protocol_version
        self.conn.version = version
        props = connect.properties
        v5 = version is _V5
        if props.request_problem_information == 0:
            self.conn.problem_info = False
        client_id = connect.client_id
        assigned = None
        if not client_id:
            client_id = assigned = broker.hub.sessions.assign_client_id()
        sessions = broker.hub.sessions
        existing = sessions.get(client_id)
        if existing is not None and existing.conn is not None:
            existing.conn.taken_over()
            existing = sessions.get(client_id)
        if existing is not None and connect.clean_start:
            broker.hub.end_session(existing)  # [MQTT-3.1.2-4]: discard the old session
            existing = None
        session_present = existing is not None
        if existing is None:
            session = sessions.create(client_id)
        else:
            session = existing
            sessions.cancel_timers(session)
            session.will = None  # reconnected within the will delay [MQTT-3.1.3-9]
        was_persistent = session.persistent
        connack_props: dict[str, Any] = {}
        if v5:
            expiry = props.session_expiry_interval or 0
            if expiry > cfg.max_session_expiry_interval:
                expiry = cfg.max_session_expiry_interval
                connack_props["session_expiry_interval"] = expiry
        else:
            expiry = 0 if connect.clean_start else NEVER_EXPIRES
        session.expiry_interval = expiry
        session.protocol_version = int(version)
        keep_alive = connect.keep_alive
        if v5 and cfg.max_keepalive and (keep_alive == 0 or keep_alive > cfg.max_keepalive):
            keep_alive = cfg.max_keepalive
            connack_props["server_keep_alive"] = keep_alive
        if connect.will is not None:
            will = connect.will
            delay = will.properties.will_delay_interval or 0 if v5 else 0
            session.will = WillRecord(
                message_from(
                    Publish(
                        will.topic, will.payload, will.qos, will.retain, properties=will.properties
                    ),
                    session.num,
                    trio.current_time,
                ),
                delay,
            )
        if not v5:
            connack_properties = EMPTY_PROPERTIES
        elif connack_props or assigned is not None or props.request_response_information:
            connack_props.update(self._connack_properties(client_id, assigned, props))
            connack_properties = Properties(**connack_props)
        else:  # what most clients get: built once (the encoder caches its bytes)
            base = broker.connack_properties
            if base is None:
                base = Properties(**self._connack_properties(client_id, None, props))
                broker.connack_properties = base
            connack_properties = base
        authenticator = broker.authenticator
        if authenticator is not None:
            session.access = authenticator.access_for(client_id, self.conn.username)
        self.conn.proto.session = session.state
        connack = _COMMON_CONNACK[0]  # most clients: made once, as its properties were
        if connack.properties is not connack_properties or session_present:
            connack = Connack(session_present, ReasonCode.SUCCESS, connack_properties)
            if connack_properties is broker.connack_properties and not session_present:
                _COMMON_CONNACK[0] = connack
        self.out.out.append(self.conn.proto.send(connack))
        if "server_keep_alive" in connack_props:
            self.conn.proto.keep_alive = keep_alive
        session.conn = self.out  # the core's Peer: what sends to this client
        broker.stats.connected()
        log_connect(self.conn, client_id, connect.clean_start, keep_alive)
        broker.stats.packets_received += 1  # the CONNECT
        broker.stats.control_sent += 1  # the CONNACK
        self.conn.session = session
        if session.persistent:
            broker.persist.save_session(session)
        elif was_persistent:
            broker.persist.session_ended(session, ())

    def too_many(self, connect: Connect) -> tuple[ReasonCode, str]:
        """A CONNECT accepted past ``max_connections``: Quota exceeded (0x97; 3.1.1:
        return code 3, server unavailable), logged."""
        log.warning(
            "refused CONNECT from client %r: max_connections reached (0x97)", connect.client_id
        )
        return ReasonCode.QUOTA_EXCEEDED, "too many connections (max_connections)"

    def refusal(self, connect: Connect) -> tuple[ReasonCode, str] | None:
        cfg = self.conn.broker.settings
        props = connect.properties
        if props.authentication_method is not None:
            return ReasonCode.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported"
        if len(connect.client_id.encode("utf-8")) > cfg.max_client_id_length:
            return ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client identifier too long"
        will = connect.will
        if will is not None:
            if will.qos > cfg.maximum_qos:
                return (
                    ReasonCode.QOS_NOT_SUPPORTED,
                    "will QoS above the Maximum QoS [MQTT-3.2.2-12]",
                )
            if will.retain and not cfg.retain_available:
                return ReasonCode.RETAIN_NOT_SUPPORTED, "retained wills are not available"
            try:
                radix.validate_topic(will.topic)
            except radix.TopicError as exc:
                return ReasonCode.TOPIC_NAME_INVALID, f"will topic invalid: {exc}"
            prefix = reserved_prefix(will.topic)
            if (
                prefix is not None
                and self.conn.broker.hub.systopics.handler_for(will.topic) is None
            ):
                # As mosquitto answers a will its ACL denies (3.1.1: return code 5).
                return (
                    ReasonCode.NOT_AUTHORIZED,
                    f"will topic: {prefix.decode()} topics are reserved to the broker",
                )
        return None

    def _connack_properties(
        self, client_id: str, assigned: str | None, props: Properties
    ) -> dict[str, Any]:
        cfg = self.conn.broker.config.mqtt
        out: dict[str, Any] = {
            "receive_maximum": cfg.receive_maximum,
            "maximum_packet_size": cfg.max_packet_size,
            "topic_alias_maximum": cfg.topic_alias_maximum,
            "retain_available": int(cfg.retain_available),
            "wildcard_subscription_available": int(cfg.wildcard_subscription_available),
            "subscription_identifier_available": int(cfg.subscription_identifiers_available),
            "shared_subscription_available": int(cfg.shared_subscriptions_available),
        }
        if cfg.maximum_qos < 2:
            out["maximum_qos"] = cfg.maximum_qos  # only 0 or 1 may be sent [MQTT-3.2.2-9]
        if assigned is not None:
            out["assigned_client_identifier"] = assigned
        if props.request_response_information:
            out["response_information"] = f"$response/{client_id}"
        return out

    def resend_inflight(self) -> None:
        """Right after the CONNACK, with nothing in between: resend in-flight copies in
        order with DUP before anything new [MQTT-4.4.0-1], and send it all."""
        proto = self.conn.proto
        if proto.session.outbound:
            for packet in proto.session.pending_retransmissions():
                self.out.out.append(proto.send(packet))
        self.out.flush_direct()
