"""The broker's view of an application message and of one copy queued for a session."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from broker.mqtt.encoder import EncodedPublish
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES

RETAIN_PENDING: Final = 1
RETAIN_SETTLED: Final = 2


class AppMessage:
    """A message accepted from a publisher (or a will), shared by every recipient copy.

    ``publish`` is the packet as it will be forwarded: topic resolved, no topic
    alias, no subscription identifiers, properties otherwise unchanged (user
    properties in order). ``expires_at`` is a trio clock deadline derived from
    the Message Expiry Interval. ``encoded`` caches the encoding for the first
    protocol version asked (nearly always the only one), ``encoded_others`` for the others,
    so identical bytes are built once for every recipient. ``topic``,
    ``payload``, ``qos`` and ``retain`` are the packet's, copied into slots: they are
    read per recipient, and a property costs several times a slot.
    """

    __slots__ = (
        "encoded",
        "encoded_others",
        "expires_at",
        "key",
        "origin",
        "payload",
        "publish",
        "qos",
        "retain",
        "retain_state",
        "retained_seq",
        "topic",
    )

    def __init__(self, publish: Publish, expires_at: float | None, origin: int) -> None:
        self.publish = publish
        self.topic = publish.topic
        self.payload = publish.payload
        self.qos = publish.qos
        self.retain = publish.retain
        self.expires_at = expires_at
        self.origin = origin  # client number of the publisher; 0 for the broker's own
        self.key = ""  # unique id in $MQTT_msgs once stored for a persistent session
        self.retained_seq = 0  # its seq in $MQTT_rmsgs once committed (a retained message)
        self.encoded: EncodedPublish | None = None  # for the first version asked
        self.encoded_others: dict[ProtocolVersion, EncodedPublish] | None = None
        # A retained update whose record is being committed: RETAIN_PENDING until it
        # becomes (or, its commit failed, does not become) the topic's retained value:
        # RETAIN_SETTLED.
        self.retain_state = 0

    def __repr__(self) -> str:
        return f"AppMessage({self.publish!r}, expires_at={self.expires_at}, origin={self.origin})"

    def encoded_for(self, version: ProtocolVersion, now: float) -> EncodedPublish | None:
        """The encoding to send at ``now``, or None once the message has expired.

        A message with an expiry interval is re-encoded with the remaining lifetime
        [MQTT-3.3.2-6]; the others are encoded once per protocol version.
        """
        if self.expires_at is None:
            enc = self.encoded
            if enc is None:
                enc = self.encoded = EncodedPublish(self.publish, version)
                return enc
            if enc.version is version:
                return enc
            others = self.encoded_others
            if others is None:
                others = self.encoded_others = {}
            enc = others.get(version)
            if enc is None:
                enc = others[version] = EncodedPublish(self.publish, version)
            return enc
        remaining = self.expires_at - now
        if remaining <= 0:
            return None
        props = replace(self.publish.properties, message_expiry_interval=math.ceil(remaining))
        return EncodedPublish(replace(self.publish, properties=props), version)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(slots=True)
class Outgoing:
    """One copy of a message for one session, with the options of its subscription(s).

    ``pend_seq`` is the sequence of this copy's entry in $MQTT_pend when the
    session is persistent (0 otherwise); acknowledging the copy deletes it.
    """

    message: AppMessage
    qos: int
    retain: bool
    sub_ids: tuple[int, ...]
    pend_seq: int = 0
    shared: bool = False  # delivered as the chosen member of a shared group
    order: int = 0  # first $MQTT_pend sequence of this copy: its place in send order on restore

    # Written out (the dataclass keeps it): compiled (hotpath), a native constructor;
    # the generated one is interpreted (one per copy queued).
    def __init__(
        self,
        message: AppMessage,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        pend_seq: int = 0,
        shared: bool = False,
        order: int = 0,
    ) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.pend_seq = pend_seq
        self.shared = shared
        self.order = order


def message_from(publish: Publish, origin: int, clock: Callable[[], float]) -> AppMessage:
    """The message as it will be forwarded, properties unchanged and in order
    [MQTT-3.3.2-4, -15, -16, -17, -20]. A client's PUBLISH is forwarded as decoded: the
    machine already resolved its topic alias, and the encoder sets dup, packet id, QoS and
    retain per recipient. A will loses its Will Delay Interval. ``clock`` is the broker's
    (Message Expiry counts from it; read only for a message that has one)."""
    props = publish.properties
    expires_at = None
    if props is not EMPTY_PROPERTIES:
        if props.message_expiry_interval is not None:
            expires_at = clock() + props.message_expiry_interval
        if props.will_delay_interval is not None:
            publish = Publish(
                publish.topic,
                publish.payload,
                publish.qos,
                publish.retain,
                properties=replace(props, will_delay_interval=None),
            )
    return AppMessage(publish, expires_at, origin)
