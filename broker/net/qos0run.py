"""QoS 0 runs: the plain QoS 0 PUBLISHes to one topic in one chunk, forwarded with the
decisions made once.

A device streaming readings sends many PUBLISHes to one topic (or to a few, taking
turns: the axes of a sensor), and one read of its socket holds dozens to hundreds of
them. Each goes through ``Inbound.on_publish`` on its own: the checks, the route, the
store plan, a message object, an encoding per protocol version, and the copy per
recipient. For a *plain* QoS 0 PUBLISH (QoS 0, no retain, no properties, a topic not
under ``$``) every one of those decisions is the same for the next PUBLISH to the same
topic in the same chunk, because nothing else runs in between (handling a chunk never
suspends) and such a PUBLISH changes no state but the recipients' output. So the
connection's ``_feed`` hands the first one to a topic to ``on_publish`` as always, and
at the second one to that topic in a stretch of plain QoS 0 PUBLISHes it opens the
topic's run: ``open_run`` makes the decisions ``on_publish`` would make, and when they
hold for every message of the topic it gives a ``Qos0Run``. Its ``forward`` is then all
a message of the run costs: the counters, one encoding per protocol family
(``plain_qos0``: 5.0, or 3.1 and 3.1.1, whose PUBLISH bytes are the same) and
``Output.send_plain_qos0`` per recipient, which applies the per-copy rules of
``send_qos0`` (closing, the QoS 0 queue limit, the client's Maximum Packet Size). Any
other packet ends the stretch and its runs; so does a PUBLISH that ``on_publish``
handled leaving an acknowledgement step waiting (a captured one) or to a ``$`` topic.

No run (None: every message of the topic goes through ``on_publish``) when a message
needs a decision of its own or state that only ``on_publish`` keeps: a publish rate limit
(tokens per message), the ACL refusing the topic, a JetStream stream or the bridge
capturing messages, an acknowledgement waiting for a commit ahead of it (the order of
its steps), a route not cached (No Local, shared groups: a pick per message), a recipient
that is offline, internal, closing, takes topic aliases, has subscription identifiers for
the topic or is being sent its retained messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.mqtt.encoder import plain_qos0, plain_qos0_prefix
from broker.mqtt.packet_types import ProtocolVersion
from broker.net.output import Output

if TYPE_CHECKING:
    from broker.core.stats import Stats
    from broker.mqtt.packets import Publish
    from broker.net.link import Link

_V5 = ProtocolVersion.MQTT_5


class Qos0Run:
    """The recipients of a run's topic, grouped by the bytes their copies share."""

    __slots__ = ("groups", "stats")

    def __init__(self, stats: Stats, groups: list[tuple[bytes, list[Output]]]) -> None:
        self.stats = stats
        self.groups = groups  # (plain_qos0_prefix, the outputs that take those bytes)

    def forward(self, p: Publish) -> None:
        """What ``on_publish`` does with ``p``, a plain QoS 0 PUBLISH to the run's topic."""
        payload = p.payload
        stats = self.stats
        stats.publish_received += 1
        stats.publish_bytes_received += len(payload)
        for prefix, outs in self.groups:
            data = plain_qos0(prefix, payload)
            for out in outs:
                out.send_plain_qos0(data)


def open_run(conn: Link, out: Output, p: Publish) -> Qos0Run | None:
    """The run for ``p`` and the plain QoS 0 PUBLISHes to its topic after it in the
    stretch (``p`` is plain, and one to its topic before it was handled by
    ``on_publish``), or None when they need ``on_publish`` (see the module docstring).
    ``out`` is ``conn``'s."""
    topic = p.topic
    session = conn.session
    if topic[:1] == b"$" or session is None:
        return None
    broker = conn.broker
    if broker.config.limits.max_publish_rate:
        return None
    access = session.access
    if access is not None and not access.may_write(topic):
        return None
    js = broker.jetstream
    if js is not None and js.capture.subjects and js.capture.op_for(p) is not None:
        return None
    if not out.idle():
        return None
    hub = broker.hub
    deliveries = hub.plain_route(topic)
    if deliveries is None:
        return None
    by_num = hub.sessions.by_num
    v5: list[Output] = []
    v3: list[Output] = []
    for d in deliveries:
        recipient = by_num.get(d.client)
        if recipient is None or d.sub_ids or recipient.retained_seen is not None:
            return None
        peer = recipient.conn
        if not isinstance(peer, Output):
            return None  # offline: queued or not by the session's rules
        version = peer.plain_qos0_version()
        if version is None:
            return None
        (v5 if version is _V5 else v3).append(peer)
    groups = []
    if v5:
        groups.append((plain_qos0_prefix(topic, _V5), v5))
    if v3:
        groups.append((plain_qos0_prefix(topic, ProtocolVersion.MQTT_3_1_1), v3))
    return Qos0Run(broker.stats, groups)
