"""Session state that outlives a network connection (MQTT 5.0 §4.1).

:class:`SessionState` is what the broker persists and restores into a fresh
:class:`~broker.mqtt.connection.Connection` after a reconnect or a restart:

* outbound in-flight messages: packet id -> :class:`Inflight` (the message, its QoS and
  the stage it waits in), in send order (a dict keeps insertion order);
* inbound QoS 2 packet ids whose PUBREC was (or will be) sent and whose PUBCOMP was not
  sent yet; a PUBLISH repeating one of them is a duplicate, not a new message.

Everything else a connection tracks (topic aliases, inbound QoS 1 ids, counters, limits)
lives and dies with the connection [MQTT-3.3.2-7] and is not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Final

from broker.mqtt.errors import LocalProtocolError
from broker.mqtt.packets import Pubcomp, Publish, Pubrel
from broker.mqtt.reason_codes import ReasonCode

__all__ = ["Inflight", "SessionState", "Stage", "pubcomp_for"]


class Stage(Enum):
    """What an outbound QoS > 0 message waits for."""

    AWAIT_PUBACK = "await_puback"  # QoS 1 PUBLISH sent
    AWAIT_PUBREC = "await_pubrec"  # QoS 2 PUBLISH sent
    AWAIT_PUBCOMP = "await_pubcomp"  # QoS 2 PUBREC received, PUBREL sent


class Inflight:
    """One outbound QoS > 0 message awaiting acknowledgement.

    ``message`` is the PUBLISH as the peer received it, needed only for a resend. The
    fan-out path records how to build it (``build``) instead of building it per copy:
    most copies are acknowledged without ever being resent.
    """

    __slots__ = ("_build", "_message", "packet_id", "qos", "stage")

    def __init__(
        self,
        packet_id: int,
        message: Publish | None,
        qos: int,
        stage: Stage,
        build: Callable[[], Publish] | None = None,
    ) -> None:
        if message is None and build is None:
            raise ValueError("an in-flight message needs the message or how to build it")
        self.packet_id = packet_id
        self.qos = qos
        self.stage = stage
        self._message = message
        self._build = build

    @property
    def message(self) -> Publish:
        message = self._message
        if message is None:
            assert self._build is not None
            message = self._message = self._build()
            self._build = None
        return message

    def at_stage(self, stage: Stage) -> Inflight:
        """The same message waiting in ``stage``."""
        return Inflight(self.packet_id, self._message, self.qos, stage, self._build)

    def __repr__(self) -> str:
        return f"Inflight({self.packet_id}, qos={self.qos}, {self.stage.name})"


# (Final: C statics when compiled)
_AWAIT_PUBACK: Final = Stage.AWAIT_PUBACK
_AWAIT_PUBREC: Final = Stage.AWAIT_PUBREC
_AWAIT_PUBCOMP: Final = Stage.AWAIT_PUBCOMP
# The empty set of packet ids that sessions and connections share until they need one of
# their own (an empty set is 216 bytes; most clients never publish at QoS 2): never added
# to, only read and discarded from. Here: a session's inbound QoS 2 ids until its first.
NO_IDS: Final[set[int]] = set()


@dataclass(slots=True)
class SessionState:
    outbound: dict[int, Inflight] = field(default_factory=dict)
    inbound_qos2: set[int] = field(default_factory=set)

    # Written out (the dataclass keeps it): compiled (hotpath), a native constructor.
    def __init__(
        self, outbound: dict[int, Inflight] | None = None, inbound_qos2: set[int] | None = None
    ) -> None:
        self.outbound = {} if outbound is None else outbound
        self.inbound_qos2 = NO_IDS if inbound_qos2 is None else inbound_qos2

    def add_inbound_qos2(self, packet_id: int) -> None:
        """An inbound QoS 2 PUBLISH now awaits its PUBREL (the set made on first use)."""
        ids = self.inbound_qos2
        if ids is NO_IDS:
            ids = self.inbound_qos2 = set()
        ids.add(packet_id)

    def restore_outbound(self, packet_id: int, message: Publish, qos: int, stage: Stage) -> None:
        """Put back one outbound in-flight message (restored from storage), in send order."""
        if not 1 <= packet_id <= 0xFFFF:
            raise LocalProtocolError(f"packet identifier {packet_id} out of range")
        if qos not in (1, 2) or (qos == 1) != (stage is Stage.AWAIT_PUBACK):
            raise LocalProtocolError(f"stage {stage.name} does not fit QoS {qos}")
        self.outbound[packet_id] = Inflight(packet_id, message, qos, stage)

    def puback(self, packet_id: int) -> None:
        """A PUBACK arrived: the QoS 1 exchange ``packet_id`` is complete, if it waited for it."""
        entry = self.outbound.get(packet_id)
        if entry is not None and entry.stage is _AWAIT_PUBACK:
            del self.outbound[packet_id]

    def pubrec(self, packet_id: int, refused: bool) -> None:
        """A PUBREC arrived: the QoS 2 exchange ``packet_id`` waits for PUBCOMP now, or ends
        when the receiver ``refused`` the message (an error reason code)."""
        entry = self.outbound.get(packet_id)
        if entry is not None and entry.stage is _AWAIT_PUBREC:
            if refused:
                del self.outbound[packet_id]
            else:
                self.outbound[packet_id] = entry.at_stage(_AWAIT_PUBCOMP)

    def pubcomp(self, packet_id: int) -> None:
        """A PUBCOMP arrived: the QoS 2 exchange ``packet_id`` is complete, if it waited."""
        entry = self.outbound.get(packet_id)
        if entry is not None and entry.stage is _AWAIT_PUBCOMP:
            del self.outbound[packet_id]

    def restore_inbound_qos2(self, packet_id: int) -> None:
        """Put back one inbound QoS 2 packet id awaiting PUBREL."""
        if not 1 <= packet_id <= 0xFFFF:
            raise LocalProtocolError(f"packet identifier {packet_id} out of range")
        self.add_inbound_qos2(packet_id)

    def pending_retransmissions(self) -> list[Publish | Pubrel]:
        """What to resend, in order, on a resumed session: unacknowledged PUBLISH packets
        with DUP set, and PUBREL for messages that got their PUBREC (MQTT 5.0 §4.4).

        The peer's Receive Maximum starts afresh on the new connection: send at most
        ``peer_receive_maximum`` PUBLISH packets of this list now and the rest as
        acknowledgements arrive (the connection's ``send`` accepts a DUP resend of an
        in-flight id at any time; it is the caller who paces them)."""
        out: list[Publish | Pubrel] = []
        for entry in self.outbound.values():
            if entry.stage is Stage.AWAIT_PUBCOMP:
                out.append(Pubrel(entry.packet_id))
            else:
                out.append(
                    replace(entry.message, dup=True, packet_id=entry.packet_id, qos=entry.qos)
                )
        return out


def pubcomp_for(pubrel: Pubrel, known: bool) -> Pubcomp:
    """PUBCOMP answering ``pubrel``; ``known`` = its id was awaiting PUBREL (it is in
    ``SessionState.inbound_qos2``)."""
    if known:
        return Pubcomp(pubrel.packet_id)
    return Pubcomp(pubrel.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
