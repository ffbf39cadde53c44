"""What JetStream sends to MQTT clients: API answers, PubAcks, deliveries, statuses.

Every message goes through ``Hub.publish_now`` like a broker message: it reaches every
subscription matching its topic at that subscription's QoS (the message itself is QoS
1), a persistent session that is offline queues it as any other message, and a shared
subscription (``$share/<group>/<topic>``, a push consumer's ``deliver_group``) gives it
to one member. Trio thread only.

Store events (:meth:`Outbox.events`) arrive from the writer thread through
``TrioToken.run_sync_soon``:

- ``Delivery``: to the pull request's inbox topic, or the push consumer's deliver topic
  (``deliver_subject`` in MQTT form), Response Topic = the ack topic
  ``$JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>``;
- ``PullStatus``: an empty message with user properties ``Status``, ``Description`` and
  the ``Nats-*`` extras of spec §1.9.3;
- ``Advisory``: its JSON on the MQTT form of its ``$JS.EVENT.ADVISORY...`` subject.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Final

import radix
from broker.core.hub import Hub
from broker.core.message import AppMessage
from broker.jetstream.headers import delivery_properties
from broker.mqtt.packets import new_publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from store import Advisory, Delivery, Event, PullStatus

log = logging.getLogger("jetmq.jetstream")

Headers = tuple[tuple[str, str], ...]
ACK_PREFIX: Final = "$JS/ACK/"


def ack_topic(d: Delivery) -> str:
    """The v1 ack reply subject of spec §1.9.1 in MQTT form."""
    m = d.msg
    return (
        f"{ACK_PREFIX}{d.stream}/{d.consumer}/{d.delivered_count}/{m.seq}/"
        f"{d.consumer_seq}/{m.time_ns}/{d.num_pending}"
    )


def status_properties(s: PullStatus) -> Properties:
    extra: list[tuple[str, str]] = [("Status", str(s.code)), ("Description", s.description)]
    if s.code == 100:
        extra.append(("Nats-Last-Consumer", str(s.last_consumer_seq)))
        extra.append(("Nats-Last-Stream", str(s.last_stream_seq)))
    elif s.code in (408, 409) and (s.pending_msgs or s.pending_bytes):
        extra.append(("Nats-Pending-Messages", str(s.pending_msgs)))
        extra.append(("Nats-Pending-Bytes", str(s.pending_bytes)))
    return Properties(user_properties=tuple(extra))


class Outbox:
    """Sends JetStream's messages through the hub (see module docstring)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        # Push consumers: (stream, consumer) -> deliver topic (MQTT form).
        self.push_topics: dict[tuple[str, str], str] = {}
        # Told of each push delivery (heartbeats, flow control: broker.jetstream.flow).
        self.on_push: Callable[[Delivery], None] | None = None

    def send(
        self,
        topic: str,
        payload: bytes,
        properties: Properties = EMPTY_PROPERTIES,
        qos: int = 1,
    ) -> bool:
        """Publish to ``topic``; False (logged) when it is not a valid topic name."""
        msg = AppMessage(new_publish(topic.encode(), payload, qos, False, properties), None, 0)
        try:
            self.hub.publish_now(msg)
        except radix.TopicError as exc:
            log.warning("JetStream message to invalid topic %r dropped: %s", topic[:128], exc)
            return False
        return True

    def answer(self, topic: str, payload: bytes, correlation: bytes | None) -> bool:
        """A reply on a requester's Response Topic, its Correlation Data echoed."""
        props = (
            EMPTY_PROPERTIES if correlation is None else Properties(correlation_data=correlation)
        )
        return self.send(topic, payload, props)

    def events(self, events: Sequence[Event]) -> None:
        """Store events (trio thread, in commit order)."""
        for ev in events:
            if type(ev) is Delivery:
                self._deliver(ev)
            elif type(ev) is PullStatus:
                self._status(ev)
            elif type(ev) is Advisory:
                self._advisory(ev)

    def _deliver(self, d: Delivery) -> None:
        topic = self.push_topics.get((d.stream, d.consumer))
        if topic is None:
            topic = d.reply
        elif self.on_push is not None:
            self.on_push(d)
        m = d.msg
        self.send(topic, m.payload, delivery_properties(m.subject, m.headers, ack_topic(d)))

    def _status(self, s: PullStatus) -> None:
        self.send(s.reply, b"", status_properties(s))

    def _advisory(self, a: Advisory) -> None:
        subject, body = a.to_wire(secrets.token_hex(11))
        self.send(
            subject.replace(".", "/"), json.dumps(body, separators=(",", ":")).encode(), qos=0
        )
