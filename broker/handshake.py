"""The CONNECT handshake of a connection: answered in the accept loop when the CONNECT is
already in the socket, otherwise by the connection's task; session lookup and takeover,
refusals, the CONNACK, and in-flight copies resent before anything new.

A mixin of :class:`broker.client.ClientConnection`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import trio

import radix
from broker.message import AppMessage
from broker.mqtt.encoder import encode
from broker.mqtt.errors import Answer, MQTTProtocolError, PacketOverLimitError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode, connack_return_code
from broker.output import FLUSH_TIMEOUT, Output
from broker.sessions import NEVER_EXPIRES, WillRecord

if TYPE_CHECKING:
    from broker.client import ClientConnection

READ_SIZE = 65536
_V5 = ProtocolVersion.MQTT_5
log = logging.getLogger("jetmq.client")


class Handshake(Output):
    """CONNECT to CONNACK."""

    problem_info: bool
    _drained: bool
    _early: Connect | MQTTProtocolError | None
    _early_error: Exception | None

    if TYPE_CHECKING:  # ClientConnection's

        async def _receive(self) -> bytes | bytearray: ...

    def _log_over_limit(self, exc: MQTTProtocolError) -> None:
        """A packet over ``mqtt.max_packet_size`` is refused with one warning naming the
        client and the size, so an operator can tell a client it is too big or raise the
        limit (the connection closes after it: one line per refusal)."""
        if not isinstance(exc, PacketOverLimitError):
            return
        session = self.session
        if session is not None:
            who = f"client {session.client_id!r}"
        else:
            who = "a client before its CONNECT"
            with contextlib.suppress(OSError):
                if self._raw is not None:
                    host, port = self._raw.getpeername()[:2]
                    who += f" (from {host} port {port})"
        log.warning(
            "%s: refused a packet of %d bytes, over mqtt.max_packet_size = %d (0x95)",
            who,
            exc.size,
            exc.limit,
        )

    def _connect_inline(self) -> bool:
        """Called (through ``connect_now``) by the accept loop before the connection's
        task starts. Under load the
        CONNECT is usually in the socket by the time it is accepted: read it, and if it
        is complete and acceptable, take the session and send the CONNACK here, sparing
        the task a wait for readability. Anything else is left to the task's handshake
        (a partial CONNECT stays in the codec's buffer; a refusal or an error is
        answered there).

        True: connected here with nothing more to read (``connect_now`` parks it).
        """
        raw = self._raw
        if raw is None:
            return False
        try:
            try:
                data = raw.recv(READ_SIZE)
            except OSError:  # nothing yet (BlockingIOError), or gone: the task finds out
                return False
            if not data:
                return False
            self._drained = len(data) < READ_SIZE
            try:
                events = self.proto.receive_data(data)
            except MQTTProtocolError as exc:
                self._early = exc
                return False
            if not events:
                return False
            connect = events[0]
            assert isinstance(connect, Connect)
            if self._refusal(connect) is not None:
                self._early = connect
                return False
            self._accept(connect)
            self._resend_inflight()  # before anything else can be sent to this session
            return not (
                self._closing
                or not self._drained
                or self.proto.buffered  # packets pipelined behind the CONNECT
                or self._writer_scope is not None
            )
        except Exception as exc:  # a bug: the task reports it (0x83) and closes
            self._early_error = exc
        return False

    async def _handshake(self) -> Connect | None:
        """Read CONNECT (the caller's scope has the connect timeout [MQTT-3.1.0-1]);
        answer errors directly."""
        early = self._early
        if early is not None:
            self._early = None
            if isinstance(early, Connect):
                return early
            self._log_over_limit(early)
            await self._refuse(early.reason_code, early.reason, early.version, early.answer)
            return None
        while True:
            try:
                data = await self._receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not data:
                return None
            try:
                events = self.proto.receive_data(bytes(data))
            except MQTTProtocolError as exc:
                self._log_over_limit(exc)
                await self._refuse(exc.reason_code, exc.reason, exc.version, exc.answer)
                return None
            if events:
                packet = events[0]
                assert isinstance(packet, Connect)
                return packet

    async def _refuse(
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
                await self._send_all(data)

    def _accept(self, connect: Connect) -> None:
        """Session lookup, takeover, CONNACK (the CONNECT passed ``_refusal``)."""
        broker = self.broker
        cfg = broker.config.mqtt
        version = connect.protocol_version
        self.version = version
        props = connect.properties
        v5 = version is _V5
        if props.request_problem_information == 0:
            self.problem_info = False
        client_id = connect.client_id
        assigned = None
        if not client_id:
            client_id = assigned = broker.sessions.assign_client_id()
        sessions = broker.sessions
        existing = sessions.get(client_id)
        if existing is not None and existing.conn is not None:
            existing.conn.taken_over()
            existing = sessions.get(client_id)
        if existing is not None and connect.clean_start:
            broker.end_session(existing)  # [MQTT-3.1.2-4]: discard the old session
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
                self._message(
                    Publish(
                        will.topic, will.payload, will.qos, will.retain, properties=will.properties
                    ),
                    session.num,
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
        self.proto.session = session.state
        connack = Connack(session_present, ReasonCode.SUCCESS, connack_properties)
        self._out.append(self.proto.send(connack))
        if "server_keep_alive" in connack_props:
            self.proto.keep_alive = keep_alive
        session.conn = cast("ClientConnection", self)  # the only subclass
        self.session = session
        if session.persistent:
            broker.persist.save_session(session)
        elif was_persistent:
            broker.persist.session_ended(session, ())

    def _refusal(self, connect: Connect) -> tuple[ReasonCode, str] | None:
        cfg = self.broker.config.mqtt
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
        return None

    def _connack_properties(
        self, client_id: str, assigned: str | None, props: Properties
    ) -> dict[str, Any]:
        cfg = self.broker.config.mqtt
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

    def _resend_inflight(self) -> None:
        """Right after the CONNACK, with nothing in between: resend in-flight copies in
        order with DUP before anything new [MQTT-4.4.0-1], and send it all."""
        for packet in self.proto.pending_retransmissions():
            self._out.append(self.proto.send(packet))
        self.flush_direct()

    def _message(self, publish: Publish, origin: int) -> AppMessage:
        """The message as it will be forwarded, properties unchanged and in order
        [MQTT-3.3.2-4, -15, -16, -17, -20]. A client's PUBLISH is forwarded as decoded:
        the machine already resolved its topic alias, and the encoder sets dup, packet
        id, QoS and retain per recipient. A will loses its Will Delay Interval."""
        props = publish.properties
        expires_at = None
        if props is not EMPTY_PROPERTIES:
            if props.message_expiry_interval is not None:
                expires_at = trio.current_time() + props.message_expiry_interval
            if props.will_delay_interval is not None:
                publish = Publish(
                    publish.topic,
                    publish.payload,
                    publish.qos,
                    publish.retain,
                    properties=replace(props, will_delay_interval=None),
                )
        return AppMessage(publish, expires_at, origin)
