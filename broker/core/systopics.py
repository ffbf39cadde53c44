"""Topics the broker owns: the reserved ``$`` prefixes clients may not publish to, and the
handlers that claim system topics (the system-topic seam).

MQTT lets a broker give ``$`` topics a meaning of its own; filters starting with a
wildcard do not match them [MQTT-4.7.2-1], and otherwise they are ordinary topics
(``$aws/things/...`` is everyday IoT firmware, and mosquitto carries it). jetmq carries
them too, except under the prefixes it owns: ``$SYS`` (broker status), ``$JS`` (the
JetStream API and ack topics) and ``$MQTT`` (the streams that hold MQTT state). A client
can publish there neither by PUBLISH nor by will: a will could otherwise plant a retained
``$SYS/broker/version`` that no client can clear.

A handler registered for a prefix (``$JS/API/``, ``$JS/ACK/``, ...) sees every PUBLISH
and will on a topic under it instead of the router: it answers the publisher's
acknowledgement with a reason code, and the message reaches no subscriber. The reserved
prefixes are closed to clients except where a handler claims a topic. A handler whose
answer needs a commit (the JetStream API, ack topics) returns a :class:`Pending`
instead: the connection awaits its :class:`Outcome` in its ordered pipeline, and the
PUBACK/PUBREC carries the outcome's reason code, reason string and user properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.core.message import AppMessage
    from broker.core.sessions import Session
    from broker.mqtt.reason_codes import ReasonCode

RESERVED_PREFIXES = (b"$SYS", b"$JS", b"$MQTT")


def reserved_prefix(topic: bytes) -> bytes | None:
    """The reserved prefix ``topic`` falls under (a whole first level), or None."""
    if topic[:1] != b"$":
        return None
    first = topic.split(b"/", 1)[0]
    return first if first in RESERVED_PREFIXES else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the publisher's PUBACK/PUBREC says about a system-topic PUBLISH."""

    code: ReasonCode
    reason: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()


class Pending(Protocol):
    """A handler's answer that is not known yet (its work runs whether or not anybody
    awaits it)."""

    async def outcome(self) -> Outcome: ...


class SystemHandler(Protocol):
    def publish(self, msg: AppMessage, session: Session | None) -> ReasonCode | Pending:
        """Handle a PUBLISH (``session``: its publisher) or a will (None); the reason code
        (or the pending outcome) is the publisher's PUBACK/PUBREC (3.1.x: success is all
        it can be told)."""
        ...


class SystemTopics:
    """Handlers by topic prefix; the longest registered prefix wins."""

    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: list[tuple[bytes, SystemHandler]] = []

    def register(self, prefix: bytes, handler: SystemHandler) -> None:
        if not prefix.startswith(b"$"):
            raise ValueError(f"system topic prefixes start with $: {prefix!r}")
        # A prefix registered again is the new handler's (the last registration wins).
        self._handlers = [entry for entry in self._handlers if entry[0] != prefix]
        self._handlers.append((prefix, handler))
        self._handlers.sort(key=lambda entry: -len(entry[0]))

    def unregister(self, prefix: bytes) -> None:
        self._handlers = [entry for entry in self._handlers if entry[0] != prefix]

    def handler_for(self, topic: bytes) -> SystemHandler | None:
        """The handler claiming ``topic`` (a ``$`` topic), or None."""
        for prefix, handler in self._handlers:
            if topic.startswith(prefix):
                return handler
        return None
