"""The per-connection protocol machine (server role, and a client role to drive it in tests).

Rules of this file
------------------
* Sans-I/O, h11-style: ``receive_data(bytes) -> list[Event]`` and ``send(packet) -> bytes``.
  No sockets, no clock (``keepalive_deadline(now)`` takes the time), no logging.
* Peer input can only raise :class:`MQTTProtocolError`; our own misuse raises
  :class:`LocalProtocolError` (and :class:`PacketTooLargeError`, which the broker catches
  to skip a message for a peer with a small Maximum Packet Size).
* Which packets may arrive and which may be sent is one table per direction,
  ``INBOUND`` and ``OUTBOUND`` in :mod:`broker.mqtt.states`, keyed by (role, state), with
  the state diagram. Call ``receive_data(b"")`` after sending CONNACK to get the packets
  the client pipelined behind its CONNECT.
* State that outlives the network connection is in :class:`SessionState` (passed in,
  persisted by the broker); everything else here dies with the connection.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Final, cast

from broker.mqtt.aliases import AliasPlan, TopicAliases, has_wildcard
from broker.mqtt.decoder import MAX_PACKET_SIZE, Decoder
from broker.mqtt.encoder import EncodedPublish, encode, strip_diagnostics
from broker.mqtt.errors import (
    Answer,
    LocalProtocolError,
    MQTTProtocolError,
    PacketTooLargeError,
    protocol_error,
)
from broker.mqtt.packet_types import PacketType, ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.session import NO_IDS, Inflight, SessionState, Stage
from broker.mqtt.states import (
    INBOUND,
    OUTBOUND,
    ConnectionState,
    DuplicatePublish,
    Event,
    Role,
)

__all__ = ["Connection", "ConnectionState", "DuplicatePublish", "Event", "Role"]

_V5: Final = ProtocolVersion.MQTT_5
_NO_ALIASES: Final = TopicAliases()  # shared until a connection uses an alias
_NO_IDS: Final = NO_IDS  # (session.NO_IDS: a C static when compiled)
_SERVER: Final = Role.SERVER
_CLIENT: Final = Role.CLIENT
_AWAIT_CONNECT: Final = ConnectionState.AWAIT_CONNECT
_CONNECTING: Final = ConnectionState.CONNECTING
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
_PUBACK: Final = PacketType.PUBACK
_PUBLISH: Final = PacketType.PUBLISH
_CONNECT: Final = PacketType.CONNECT
_SUCCESS: Final = ReasonCode.SUCCESS
# The packet classes (final: dispatch is on the exact type), as C statics when compiled.
_PUBLISH_CLASS: Final = Publish
_PUBACK_CLASS: Final = Puback
_PUBREC_CLASS: Final = Pubrec
_PUBREL_CLASS: Final = Pubrel
_PUBCOMP_CLASS: Final = Pubcomp
_CONNECT_CLASS: Final = Connect
_CONNACK_CLASS: Final = Connack
_DISCONNECT_CLASS: Final = Disconnect
_SUBSCRIBE_CLASS: Final = Subscribe
_SUBACK_CLASS: Final = Suback
_UNSUBSCRIBE_CLASS: Final = Unsubscribe
_UNSUBACK_CLASS: Final = Unsuback


class Connection:
    """One MQTT network connection seen from one side.

    ``session`` is the session state to resume (restored from storage) or a fresh one.
    ``max_packet_size`` is our limit before CONNACK/CONNECT declares one (a Maximum
    Packet Size property in the CONNACK we send, or the CONNECT we send, replaces it).
    """

    def __init__(
        self,
        role: Role = _SERVER,
        *,
        session: SessionState | None = None,
        max_packet_size: int = MAX_PACKET_SIZE,
    ) -> None:
        self.role = role
        self.state = _AWAIT_CONNECT
        self.session = session if session is not None else SessionState()
        self._decoder = Decoder(max_packet_size=max_packet_size, gate_after_connect=role is _SERVER)
        self.version: ProtocolVersion | None = None
        #: effective keep alive in seconds (CONNECT's, or the CONNACK's Server Keep Alive)
        self.keep_alive = 0
        # Limits we declared (inbound direction).
        self.receive_maximum = 0xFFFF
        self.topic_alias_maximum = 0
        self.maximum_qos = 2
        self.retain_available = True
        # Limits the peer declared (outbound direction).
        self.peer_receive_maximum = 0xFFFF
        self.peer_maximum_packet_size = MAX_PACKET_SIZE
        self.peer_topic_alias_maximum = 0
        # Per-connection state.
        self._session_expiry = 0
        self._inbound_qos1 = _NO_IDS  # made on first use (an empty set is 216 bytes)
        self._aliases = _NO_ALIASES  # made on first use: most clients use none
        # Our SUBSCRIBE/UNSUBSCRIBE ids: a server sends none (the outbound table).
        self._pending_acks = set() if role is _CLIENT else _NO_IDS
        self._next_id = 1

    # ---- limits and counters -------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.state is _CLOSED

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as events (a partial packet, or packets
        held until CONNACK is sent)."""
        return self._decoder.buffered

    @property
    def max_packet_size(self) -> int:
        """The largest packet we accept from the peer."""
        return self._decoder.max_packet_size

    @max_packet_size.setter
    def max_packet_size(self, value: int) -> None:
        self._decoder.max_packet_size = value

    @property
    def inflight_count(self) -> int:
        """Outbound QoS > 0 messages not yet completed (the peer's Receive Maximum window)."""
        return len(self.session.outbound)

    @property
    def inbound_inflight_count(self) -> int:
        """Inbound QoS > 0 messages counted against our Receive Maximum."""
        return len(self._inbound_qos1) + len(self.session.inbound_qos2)

    def can_send_qos_message(self) -> bool:
        """True if one more QoS 1/2 PUBLISH fits the peer's Receive Maximum [MQTT-3.3.4-9]."""
        return len(self.session.outbound) < self.peer_receive_maximum

    def keepalive_deadline(self, now: float) -> float | None:
        """When to give up if nothing arrives after a packet received at ``now``:
        1.5 x keep alive (MQTT 5.0 §3.1.2.10), or None when keep alive is 0."""
        if not self.keep_alive:
            return None
        return now + 1.5 * self.keep_alive

    def next_packet_id(self) -> int:
        """A packet identifier not in use by any outbound exchange; never 0."""
        in_use = self.session.outbound
        pending = self._pending_acks
        candidate = self._next_id
        for _ in range(0xFFFF):
            if candidate not in in_use and candidate not in pending:
                self._next_id = candidate % 0xFFFF + 1
                return candidate
            candidate = candidate % 0xFFFF + 1
        raise LocalProtocolError("all 65535 packet identifiers are in use")

    def outbound_alias(self, topic: bytes) -> tuple[int, bool] | None:
        """The topic alias to use for ``topic`` towards the peer and whether this is its
        first use (then the topic name must be sent too). None when the peer accepts no
        aliases. Least recently used aliases are reassigned when all are taken. The
        mapping is committed: the caller must send the PUBLISH."""
        plan = self._alias_plan(topic)
        if plan is None:
            return None
        self._aliases.commit(topic, plan)
        return plan[0], plan[1]

    # ---- inbound ---------------------------------------------------------------------
    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer; return the events they complete, in order.

        On :class:`MQTTProtocolError` the connection is CLOSED; ``exc.packets`` holds the
        events processed before the bad packet (the broker may still act on them).
        """
        if self.state is _CLOSED:
            return []
        events: list[Event] = []
        try:
            try:
                packets = self._decoder.feed(data)
            except MQTTProtocolError as exc:
                # The decoder puts only packets there (events come from this machine).
                for packet in cast("tuple[Packet, ...]", exc.packets):
                    events.append(self._receive(packet))
                    if self.closed:
                        return events  # bytes after a DISCONNECT are ignored, bad or not
                raise
            connected = self.state is _CONNECTED
            append = events.append
            for packet in packets:
                if connected and type(packet) is _PUBLISH_CLASS:
                    # Hot path: PUBLISH is allowed in CONNECTED for both roles.
                    append(self._receive_publish(packet))
                    continue
                if connected and type(packet) is _PUBACK_CLASS:  # (so is PUBACK)
                    self.session.puback(packet.packet_id)
                    append(packet)
                    continue
                append(self._receive(packet))
                if self.closed:
                    break
                connected = self.state is _CONNECTED
        except MQTTProtocolError as exc:
            self._fail(exc)
            exc.packets = tuple(events)
            raise
        return events

    def _fail(self, exc: MQTTProtocolError) -> None:
        if exc.version is None:
            exc.version = self.version
        if exc.answer is Answer.DISCONNECT:
            if self.state is _AWAIT_CONNECT:
                exc.answer = Answer.CLOSE
            elif self.state is _CONNECTING and self.role is _SERVER:
                exc.answer = Answer.CONNACK
        self.state = _CLOSED

    def _receive(self, packet: Packet) -> Event:
        ptype = packet.TYPE
        if ptype not in INBOUND[self.role, self.state]:
            if ptype is _CONNECT:
                raise protocol_error("a second CONNECT [MQTT-3.1.0-2]")
            raise protocol_error(f"{ptype.name} is not allowed from the peer in {self.state.name}")
        if type(packet) is _PUBLISH_CLASS:
            return self._receive_publish(packet)
        if type(packet) is _PUBACK_CLASS:
            self.session.puback(packet.packet_id)
        elif type(packet) is _CONNECT_CLASS:
            self._receive_connect(packet)
        elif type(packet) is _DISCONNECT_CLASS:
            self._receive_disconnect(packet)
        elif type(packet) is _PUBREC_CLASS:
            self.session.pubrec(packet.packet_id, packet.reason_code.is_error)
        elif type(packet) is _PUBCOMP_CLASS:
            self.session.pubcomp(packet.packet_id)
        elif type(packet) is _SUBSCRIBE_CLASS:
            self._receive_subscribe(packet)
        elif type(packet) is _SUBACK_CLASS or type(packet) is _UNSUBACK_CLASS:
            self._pending_acks.discard(packet.packet_id)
        elif type(packet) is _CONNACK_CLASS:
            self._receive_connack(packet)
        return packet

    def _receive_connect(self, packet: Connect) -> None:
        self.version = packet.protocol_version
        props = packet.properties
        if not packet.client_id and (
            packet.protocol_version is ProtocolVersion.MQTT_3_1
            or (packet.protocol_version is ProtocolVersion.MQTT_3_1_1 and not packet.clean_start)
        ):
            raise MQTTProtocolError(
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                "empty client identifier without clean session [MQTT-3.1.3-8]",
                answer=Answer.CONNACK,
                version=packet.protocol_version,
            )
        if packet.will is not None and has_wildcard(packet.will.properties.response_topic):
            raise MQTTProtocolError(
                ReasonCode.PROTOCOL_ERROR,
                "will Response Topic contains a wildcard [MQTT-3.3.2-14]",
                answer=Answer.CONNACK,
                version=packet.protocol_version,
            )
        self.keep_alive = packet.keep_alive
        self._session_expiry = props.session_expiry_interval or 0
        self._take_peer_limits(props)
        self.state = _CONNECTING

    def _receive_connack(self, packet: Connack) -> None:
        if packet.reason_code.is_error:
            self.state = _CLOSED
            return
        props = packet.properties
        self._take_peer_limits(props)
        if props.server_keep_alive is not None:
            self.keep_alive = props.server_keep_alive
        self.state = _CONNECTED

    def _take_peer_limits(self, props: Properties) -> None:  # (from CONNECT or CONNACK)
        if props.receive_maximum is not None:
            self.peer_receive_maximum = props.receive_maximum
        if props.maximum_packet_size is not None:
            self.peer_maximum_packet_size = props.maximum_packet_size
        self.peer_topic_alias_maximum = props.topic_alias_maximum or 0

    def _receive_disconnect(self, packet: Disconnect) -> None:
        expiry = packet.properties.session_expiry_interval
        if self.role is _SERVER and self._session_expiry == 0 and expiry:
            raise protocol_error(
                "DISCONNECT sets a Session Expiry Interval after CONNECT set 0 (§3.14.2.2.2)"
            )
        if self.role is _CLIENT and expiry is not None:
            raise protocol_error("server DISCONNECT with Session Expiry Interval [MQTT-3.14.2-2]")
        self.state = _CLOSED

    def _receive_subscribe(self, packet: Subscribe) -> None:
        for sub in packet.subscriptions:
            if sub.no_local and sub.filter.startswith(b"$share/"):
                raise protocol_error("No Local on a Shared Subscription [MQTT-3.8.3-4]")

    def _receive_publish(self, packet: Publish) -> Event:
        qos = packet.qos
        if qos > self.maximum_qos:
            raise MQTTProtocolError(
                ReasonCode.QOS_NOT_SUPPORTED,
                f"QoS {qos} above the Maximum QoS {self.maximum_qos} (§3.2.2.3.4)",
            )
        if packet.retain and not self.retain_available:
            raise MQTTProtocolError(
                ReasonCode.RETAIN_NOT_SUPPORTED, "RETAIN while Retain Available is 0"
            )
        props = packet.properties
        if props is not EMPTY_PROPERTIES:
            if has_wildcard(props.response_topic):
                raise protocol_error("Response Topic contains a wildcard [MQTT-3.3.2-14]")
            packet = self._resolve_alias(packet)
        elif not packet.topic:
            raise protocol_error("PUBLISH with an empty Topic Name and no Topic Alias")
        if qos == 1:
            packet_id: int = packet.packet_id  # type: ignore[assignment]
            if packet_id not in self._inbound_qos1:
                self._count_inbound()
                if self._inbound_qos1 is _NO_IDS:
                    self._inbound_qos1 = set()
                self._inbound_qos1.add(packet_id)
        elif qos == 2:
            packet_id = packet.packet_id  # type: ignore[assignment]
            if packet_id in self.session.inbound_qos2:
                return DuplicatePublish(packet)
            self._count_inbound()
            self.session.add_inbound_qos2(packet_id)
        return packet

    def _count_inbound(self) -> None:
        if len(self._inbound_qos1) + len(self.session.inbound_qos2) >= self.receive_maximum:
            raise MQTTProtocolError(
                ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                f"more than Receive Maximum {self.receive_maximum} unacknowledged "
                "QoS 1/2 PUBLISH packets [MQTT-3.3.4-7]",
            )

    def _resolve_alias(self, packet: Publish) -> Publish:
        if packet.properties.subscription_identifiers and self.role is _SERVER:
            raise protocol_error(
                "PUBLISH from a client with a Subscription Identifier [MQTT-3.3.4-6]"
            )
        if packet.properties.topic_alias is not None and self._aliases is _NO_ALIASES:
            self._aliases = TopicAliases()
        return self._aliases.resolve(packet, self.topic_alias_maximum)

    # ---- outbound --------------------------------------------------------------------
    def send(self, packet: Packet) -> bytes:
        """Encode ``packet`` for the peer and update the machine. Raises
        LocalProtocolError if the protocol forbids sending it now, PacketTooLargeError if
        it exceeds the peer's Maximum Packet Size (nothing changes then)."""
        self._check_outbound(packet.TYPE)
        if type(packet) is _CONNECT_CLASS:
            self.version = packet.protocol_version
            self._decoder.version = packet.protocol_version
        version = self.version  # known in every state the outbound table lets send in
        assert version is not None, "no protocol version before CONNECT"
        if type(packet) is _PUBLISH_CLASS:
            return self._send_publish(packet, version)
        data = encode(packet, version)
        props = getattr(packet, "properties", None)
        if len(data) > self.peer_maximum_packet_size and props is not None:
            # Reason String and User Properties must be dropped rather than exceed the
            # peer's Maximum Packet Size (e.g. [MQTT-3.14.2-3] for DISCONNECT).
            # (every packet with a ``properties`` field accepts it in replace())
            slim = replace(packet, properties=strip_diagnostics(props))  # type: ignore[arg-type]
            data = encode(slim, version)
        if len(data) > self.peer_maximum_packet_size:
            raise PacketTooLargeError(len(data), self.peer_maximum_packet_size)
        self._sent(packet, version)
        return data

    def send_puback(self, packet_id: int) -> bytes:
        """``send(Puback(packet_id))``: a PUBACK with Success and no properties, the
        acknowledgement of nearly every QoS 1 PUBLISH, without building the packet (the
        same 4 bytes in every protocol version)."""
        if self.state is not _CONNECTED:  # (PUBACK: sent in CONNECTED only)
            self._check_outbound(_PUBACK)
        if not 1 <= packet_id <= 0xFFFF:
            raise LocalProtocolError("PUBACK needs a packet identifier 1..65535")
        # No size check: a peer that took our CONNACK (5 bytes at least) takes these 4.
        self._inbound_qos1.discard(packet_id)
        return b"\x40\x02" + packet_id.to_bytes(2, "big")

    def takes_plain_qos0(self) -> bool:
        """``send_publish`` of a QoS 0 copy without retain or identifiers returns
        ``encoder.plain_qos0``'s bytes and changes nothing: connected, no topic alias."""
        return self.state is _CONNECTED and not self.peer_topic_alias_maximum

    def send_publish(
        self,
        message: EncodedPublish,
        *,
        qos: int,
        retain: bool,
        packet_id: int | None = None,
        dup: bool = False,
        subscription_identifiers: tuple[int, ...] = (),
        use_alias: bool = True,
        message_expiry_interval: int | None = None,
    ) -> bytes:
        """The fan-out path: bytes for ``message`` to this peer, reusing its encoding.

        QoS > 0 needs ``packet_id`` (from :meth:`next_packet_id`, or the id of an
        in-flight message being resent with ``dup=True``). A topic alias is used when the
        peer allows them and ``use_alias``. Raises PacketTooLargeError (skip the message
        for this peer; nothing changes) or LocalProtocolError (window full, id in use).
        The common copy (no alias, identifier, new expiry or DUP) is assembled in one step,
        and at QoS 0 it is the bytes every such recipient shares.
        """
        if self.state is not _CONNECTED:  # the only state that allows a PUBLISH
            self._check_outbound(_PUBLISH)
        if message.version is not self.version:
            raise LocalProtocolError("EncodedPublish built for another protocol version")
        if qos:
            self._check_window(qos, packet_id, dup)
        use_alias = use_alias and self.peer_topic_alias_maximum > 0
        plan = self._alias_plan(message.publish.topic) if use_alias else None
        if (
            plan is None
            and not (subscription_identifiers or dup)
            and message_expiry_interval is None
        ):
            if qos:
                assert packet_id is not None  # _check_window
                data = message.copy(qos, retain, packet_id)
            else:
                data = message.qos0(retain)
        else:
            alias = plan[0] if plan is not None else None
            omit = plan is not None and not plan[1]
            data = message.for_recipient(
                packet_id,
                dup,
                qos,
                retain,
                alias,
                omit,
                subscription_identifiers,
                message_expiry_interval,
            )
        if len(data) > self.peer_maximum_packet_size:
            raise PacketTooLargeError(len(data), self.peer_maximum_packet_size)
        if plan is not None:
            self._aliases.commit(message.publish.topic, plan)
        if qos:
            assert packet_id is not None  # _check_window
            self.session.outbound[packet_id] = Inflight(
                packet_id,
                None,
                qos,
                Stage.AWAIT_PUBACK if qos == 1 else Stage.AWAIT_PUBREC,
                functools.partial(
                    message.as_publish,
                    packet_id,
                    qos,
                    retain,
                    dup,
                    subscription_identifiers,
                    message_expiry_interval,
                ),
            )
        return data

    def _check_outbound(self, ptype: PacketType) -> None:
        if ptype not in OUTBOUND[self.role, self.state]:
            raise LocalProtocolError(f"cannot send {ptype.name} in {self.state.name}")

    def _check_window(self, qos: int, packet_id: int | None, dup: bool) -> None:
        if not qos:
            return
        if packet_id is None or not 1 <= packet_id <= 0xFFFF:
            raise LocalProtocolError(f"QoS {qos} needs a packet identifier 1..65535")
        entry = self.session.outbound.get(packet_id)
        if entry is not None:
            if not dup or entry.stage is Stage.AWAIT_PUBCOMP:
                raise LocalProtocolError(f"packet identifier {packet_id} is in use")
            return
        if packet_id in self._pending_acks:
            raise LocalProtocolError(f"packet identifier {packet_id} is in use")
        if not self.can_send_qos_message():
            raise LocalProtocolError(
                f"the peer's Receive Maximum {self.peer_receive_maximum} is reached"
            )

    def _send_publish(self, packet: Publish, version: ProtocolVersion) -> bytes:
        self._check_window(packet.qos, packet.packet_id, packet.dup)
        alias = packet.properties.topic_alias
        if alias is not None and not 1 <= alias <= self.peer_topic_alias_maximum:
            raise LocalProtocolError(
                f"Topic Alias {alias} outside the peer's maximum "
                f"{self.peer_topic_alias_maximum} [MQTT-3.1.2-26]"
            )
        data = encode(packet, version)
        if len(data) > self.peer_maximum_packet_size:
            raise PacketTooLargeError(len(data), self.peer_maximum_packet_size)
        if packet.qos:
            pid: int = packet.packet_id  # type: ignore[assignment]
            stage = Stage.AWAIT_PUBACK if packet.qos == 1 else Stage.AWAIT_PUBREC
            self.session.outbound[pid] = Inflight(pid, packet, packet.qos, stage)
        return data

    @property
    def _inbound_aliases(self) -> dict[int, bytes]:  # the peer's, as set (tests read it)
        return self._aliases.inbound

    def _alias_plan(self, topic: bytes) -> AliasPlan | None:
        peer_maximum = self.peer_topic_alias_maximum if self.version is _V5 else 0
        if peer_maximum and self._aliases is _NO_ALIASES:
            self._aliases = TopicAliases()
        return self._aliases.plan(topic, peer_maximum)

    def _sent(self, packet: Packet, version: ProtocolVersion) -> None:
        if type(packet) is _PUBACK_CLASS:
            self._inbound_qos1.discard(packet.packet_id)
        elif type(packet) is _CONNACK_CLASS:
            self._sent_connack(packet)
        elif type(packet) is _PUBREC_CLASS:
            if packet.reason_code.is_error:
                self.session.inbound_qos2.discard(packet.packet_id)
        elif type(packet) is _PUBCOMP_CLASS:
            self.session.inbound_qos2.discard(packet.packet_id)
        elif type(packet) is _PUBREL_CLASS:
            entry = self.session.outbound.get(packet.packet_id)
            if entry is not None and entry.stage is not Stage.AWAIT_PUBCOMP:
                raise LocalProtocolError(f"PUBREL {packet.packet_id} before its PUBREC")
        elif type(packet) is _SUBSCRIBE_CLASS or type(packet) is _UNSUBSCRIBE_CLASS:
            if packet.packet_id in self._pending_acks or packet.packet_id in self.session.outbound:
                raise LocalProtocolError(f"packet identifier {packet.packet_id} is in use")
            self._pending_acks.add(packet.packet_id)
        elif type(packet) is _CONNECT_CLASS:
            self._sent_connect(packet)
        elif type(packet) is _DISCONNECT_CLASS:
            if self.role is _SERVER and version is not _V5:
                raise LocalProtocolError("a 3.1.x server closes the connection, no DISCONNECT")
            self.state = _CLOSED

    def _sent_connect(self, packet: Connect) -> None:
        self.keep_alive = packet.keep_alive
        self._declare_limits(packet.properties)
        self.state = _CONNECTING

    def _sent_connack(self, packet: Connack) -> None:
        if packet.reason_code is not _SUCCESS and packet.reason_code.is_error:
            self.state = _CLOSED
            return
        self.state = _CONNECTED
        self._decoder.gate = None
        if self.version is not _V5:
            return  # 3.1.x CONNACK carries no properties: none of them was declared
        props = packet.properties
        self._declare_limits(props)
        if props.maximum_qos is not None:
            self.maximum_qos = props.maximum_qos
        if props.retain_available is not None:
            self.retain_available = bool(props.retain_available)
        if props.server_keep_alive is not None:
            self.keep_alive = props.server_keep_alive

    def _declare_limits(self, props: Properties) -> None:  # (in our CONNECT or CONNACK)
        self.receive_maximum = props.receive_maximum or 0xFFFF
        self.topic_alias_maximum = props.topic_alias_maximum or 0
        if props.maximum_packet_size is not None:
            self.max_packet_size = props.maximum_packet_size
