"""Publish runs: the plain PUBLISHes to one topic in one chunk, forwarded with the
decisions made once.

A device streaming readings sends many PUBLISHes to one topic (or to a few, taking
turns: the axes of a sensor), and one read of its socket holds dozens to hundreds of
them. Each goes through ``Inbound.on_publish`` on its own: the checks, the route, the
store plan, a message object, an encoding per protocol version, the copy per recipient
and, at QoS 1, the PUBACK. For a *plain* PUBLISH (QoS 0 or 1, no retain, no properties,
a topic not under ``$``) the decisions are the same for the next PUBLISH to the same
topic in the same chunk, because nothing else runs in between (handling a chunk never
suspends) and such a PUBLISH, when it stores nothing, changes no state but the
recipients' queues and output and its own acknowledgement. So the connection's ``_feed``
hands the first one to a topic to ``on_publish`` as always, and at the second one to
that topic in a stretch of plain PUBLISHes it opens the topic's run: ``open_run`` makes
the decisions ``on_publish`` would make, and when they hold for every message of the
topic it gives a ``Run``. Its ``forward`` is then all a message of the run costs:

* QoS 0: the counters, one encoding per protocol family (``plain_qos0``: 5.0, or 3.1 and
  3.1.1, whose PUBLISH bytes are the same) and ``Output.send_plain_qos0`` per recipient,
  which applies the per-copy rules of ``send_qos0`` (closing, the QoS 0 queue limit, the
  client's Maximum Packet Size);
* QoS 1, when no recipient of QoS 1 or 2 keeps a persistent session (that copy would be
  stored first) and someone receives it (else PUBACK says No matching subscribers): the
  counters, the message, a queued copy per recipient of QoS 1 or 2 (``Hub.queue_copy``,
  its queue limits), the plain QoS 0 bytes for the others, and the PUBACK.

A PUBLISH the run cannot take (a QoS 1 one that would be stored) goes to ``on_publish``.
Any other packet ends the stretch and its runs; so does a PUBLISH that ``on_publish``
handled leaving an acknowledgement step waiting (one being stored or captured: later
messages wait behind it) or to a ``$`` topic.

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

from broker.core.message import AppMessage, Outgoing
from broker.mqtt.encoder import plain_qos0, plain_qos0_prefix
from broker.mqtt.packet_types import ProtocolVersion
from broker.net.output import Output

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.sessions import Session
    from broker.core.stats import Stats
    from broker.mqtt.packets import Publish
    from broker.net.link import Link

_V5 = ProtocolVersion.MQTT_5
Groups = list[tuple[bytes, list[Output]]]  # (plain_qos0_prefix, the outputs taking those bytes)


class Run:
    """The recipients of a run's topic: grouped by the bytes their QoS 0 copies share,
    and (for QoS 1 messages) those whose subscription asks for QoS 1 or 2."""

    __slots__ = ("hub", "origin", "out", "plain", "plain_qos1", "qos1", "stats")

    def __init__(
        self,
        hub: Hub,
        origin: int,
        out: Output,
        plain: Groups,
        plain_qos1: Groups,
        qos1: list[Session] | None,
    ) -> None:
        self.hub = hub
        self.stats: Stats = hub.stats
        self.origin = origin  # the publisher's client number
        self.out = out  # the publisher's
        self.plain = plain  # every recipient, for a QoS 0 message
        self.plain_qos1 = plain_qos1  # those subscribed at QoS 0, for a QoS 1 message
        self.qos1 = qos1  # the sessions subscribed above QoS 0; None: QoS 1 not taken

    def forward(self, p: Publish) -> bool:
        """What ``on_publish`` does with ``p``, a plain PUBLISH to the run's topic; False
        (nothing done) for a QoS 1 one the run does not take."""
        qos1 = self.qos1
        if p.qos and qos1 is None:
            return False
        payload = p.payload
        stats = self.stats
        stats.publish_received += 1
        stats.publish_bytes_received += len(payload)
        if qos1 is not None and p.qos:
            msg = AppMessage(p, None, self.origin)
            queue_copy = self.hub.queue_copy
            for session in qos1:  # (a QoS 1 copy: the message's QoS, below theirs)
                queue_copy(session, Outgoing(msg, 1, False, ()))
            groups = self.plain_qos1
        else:
            groups = self.plain
        for prefix, outs in groups:
            data = plain_qos0(prefix, payload)
            for out in outs:
                out.send_plain_qos0(data)
        if p.qos:
            assert p.packet_id is not None
            stats.publish_ack.observe_zero()
            self.out.send_puback(p.packet_id)
        return True


def open_run(conn: Link, out: Output, p: Publish) -> Run | None:
    """The run for ``p`` and the plain PUBLISHes to its topic after it in the stretch
    (``p`` is plain, and one to its topic before it was handled by ``on_publish``), or
    None when they need ``on_publish`` (see the module docstring). ``out`` is
    ``conn``'s."""
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
    v5_qos0: list[Output] = []
    v3_qos0: list[Output] = []
    qos1: list[Session] = []
    stored = False  # a persistent session's copy of a QoS 1 message is stored first
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
        if not d.qos:
            (v5_qos0 if version is _V5 else v3_qos0).append(peer)
        elif recipient.persistent:
            stored = True
        else:
            qos1.append(recipient)
    plain = _groups(topic, v5, v3)
    plain_qos1 = _groups(topic, v5_qos0, v3_qos0)
    taken = None if stored or not deliveries else qos1
    return Run(hub, session.num, out, plain, plain_qos1, taken)


def _groups(topic: bytes, v5: list[Output], v3: list[Output]) -> Groups:
    groups: Groups = []
    if v5:
        groups.append((plain_qos0_prefix(topic, _V5), v5))
    if v3:
        groups.append((plain_qos0_prefix(topic, ProtocolVersion.MQTT_3_1_1), v3))
    return groups
