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

Such a run acknowledges at once, so it opens only while no acknowledgement step waits,
and ``_feed`` drops it once one does (its next message would overtake the step).

A QoS 1 message whose route holds exactly one persistent session above QoS 0 is stored in
that session's pending entry before its PUBACK, and nothing else is stored for it: its
topic opens a ``StoredRun`` (steps waiting or not). The entry's subject and header block
are made once for the run, so a message costs its message object and its entry in the
open batch; consecutive messages share one step (``StoredGroup``) while nothing was
queued behind it, which after the commit does for each, in order, what ``on_publish``'s
step does: ``Hub.apply_publish`` (with the deliveries routed once), the acknowledgement
latency and the PUBACK, or ``Inbound.not_stored`` if the commit failed.

A PUBLISH a run cannot take (a QoS 1 one stored some other way, a QoS 0 one to a stored
run's topic) goes to ``on_publish``. Any other packet ends the stretch and its runs; so
does a PUBLISH to a ``$`` topic.

No run (None: every message of the topic goes through ``on_publish``) when a message
needs a decision of its own or state that only ``on_publish`` keeps: a publish rate limit
(tokens per message), the ACL refusing the topic, a JetStream stream or the bridge
capturing messages, an acknowledgement waiting for a commit ahead of it (the order of
its steps), a route not cached (No Local, shared groups: a pick per message), a recipient
that is offline, internal, closing, takes topic aliases, has subscription identifiers for
the topic or is being sent its retained messages.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Final

from broker.core.message import AppMessage, Outgoing
from broker.mqtt.encoder import plain_qos0, plain_qos0_prefix
from broker.mqtt.packet_types import ProtocolVersion
from broker.net.output import Output

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.router import Delivery
    from broker.core.sessions import Session
    from broker.core.stats import Stats
    from broker.mqtt.packets import Publish
    from broker.net.inbound import Inbound
    from broker.persist.client import Batch, PublishPlan
    from broker.persist.state import Persistence

_V5: Final = ProtocolVersion.MQTT_5
Groups = list[tuple[bytes, list[Output]]]  # (plain_qos0_prefix, the outputs taking those bytes)


class Run:
    """The recipients of a run's topic: grouped by the bytes their QoS 0 copies share,
    and (for QoS 1 messages) those whose subscription asks for QoS 1 or 2."""

    __slots__ = ("hub", "origin", "out", "plain", "plain_qos1", "qos1", "stats")

    stored = False  # its messages are acknowledged at once (no step: the output must be idle)

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


class StoredRun:
    """The QoS 1 messages of a run stored for the one persistent session subscribed to
    its topic above QoS 0: each is its pending entry in the open batch, and the messages
    of a stretch share one acknowledgement step (``StoredGroup``) as long as nothing was
    queued behind it. A QoS 0 message goes to ``on_publish``."""

    __slots__ = (
        "block",
        "deliveries",
        "group",
        "hub",
        "inbound",
        "origin",
        "out",
        "pend_index",
        "persist",
        "stats",
        "subject",
    )

    stored = True  # its messages wait for a commit in a step

    def __init__(
        self,
        inbound: Inbound,
        deliveries: list[Delivery],
        pend_index: dict[int, int],
        subject: str,
        block: bytes,
    ) -> None:
        self.inbound = inbound
        self.out: Output = inbound.out
        conn = inbound.conn
        assert conn.session is not None
        self.origin = conn.session.num  # the publisher's client number
        broker = conn.broker
        self.hub: Hub = broker.hub
        self.persist: Persistence = broker.persist
        self.stats: Stats = broker.stats
        self.deliveries = deliveries
        self.pend_index = pend_index  # the persistent session's delivery -> its entry
        self.subject = subject
        self.block = block
        self.group: StoredGroup | None = None

    def forward(self, p: Publish) -> bool:
        """``on_publish`` for ``p``, stored for the session; False (nothing done) for a
        QoS 0 one."""
        if not p.qos:
            return False
        payload = p.payload
        stats = self.stats
        stats.publish_received += 1
        stats.publish_bytes_received += len(payload)
        msg = AppMessage(p, None, self.origin)
        plan = self.persist.plan_entry(self.subject, self.block, payload, self.pend_index)
        group = self.group
        out = self.out
        if group is None or group.batch is not plan.batch or out.last_step() is not group:
            group = self.group = StoredGroup(self, plan.batch)
            out.step(plan, group, group.failed)
        group.items.append((p, msg, plan, perf_counter()))
        return True


class StoredGroup:
    """The step of consecutive messages of a stored run in one batch: once it commits,
    what ``on_publish``'s step does for each of them, in order (delivery, then PUBACK)."""

    __slots__ = ("batch", "items", "run")

    def __init__(self, run: StoredRun, batch: Batch | None) -> None:
        self.run = run
        self.batch = batch
        self.items: list[tuple[Publish, AppMessage, PublishPlan, float]] = []

    def __call__(self) -> None:
        run = self.run
        hub = run.hub
        deliveries = run.deliveries
        out = run.out
        observe = run.stats.publish_ack.observe
        now = perf_counter()
        for p, msg, plan, started in self.items:
            plan.settled()  # (its results in place: the batch is done)
            hub.apply_publish(msg, deliveries, plan)
            observe(now - started)
            assert p.packet_id is not None
            out.send_puback(p.packet_id)

    def failed(self) -> None:
        not_stored = self.run.inbound.not_stored
        for item in self.items:
            not_stored(item[0])


def open_run(inbound: Inbound, p: Publish) -> Run | StoredRun | None:
    """The run for ``p`` and the plain PUBLISHes to its topic after it in the stretch
    (``p`` is plain, and one to its topic before it was handled by ``on_publish``), or
    None when they need ``on_publish`` (see the module docstring). ``inbound`` is the
    publisher's."""
    conn = inbound.conn
    out = inbound.out
    topic = p.topic
    session = conn.session
    if topic[:1] == b"$" or session is None:
        return None
    broker = conn.broker
    if broker.settings.max_publish_rate:
        return None
    access = session.access
    if access is not None and not access.may_write(topic):
        return None
    js = broker.jetstream
    if js is not None and js.capture.subjects and js.capture.op_for(p) is not None:
        return None
    hub = broker.hub
    deliveries = hub.plain_route(topic)
    if deliveries is None:
        return None
    by_num = hub.sessions.by_num
    if p.qos:
        stored_run = _stored_run(inbound, p, deliveries)
        if stored_run is not None:
            return stored_run
    if not out.idle():
        return None
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


def _stored_run(inbound: Inbound, p: Publish, deliveries: list[Delivery]) -> StoredRun | None:
    """A stored run for ``p``'s topic: exactly one recipient of its QoS 1 messages keeps
    a persistent session (``Persistence.plan`` stores each message in that session's
    pending entry, nothing else); None otherwise."""
    conn = inbound.conn
    by_num = conn.broker.hub.sessions.by_num
    target = -1
    for index, d in enumerate(deliveries):
        if d.qos:
            recipient = by_num.get(d.client)
            if recipient is not None and recipient.persistent:
                if target >= 0:
                    return None  # the message is stored once for several: refs
                target = index
    if target < 0:
        return None
    d = deliveries[target]
    recipient = by_num[d.client]
    assert conn.session is not None
    msg = AppMessage(p, None, conn.session.num)
    subject, block = conn.broker.persist.entry_record(recipient, msg, 1, d.sub_ids)
    return StoredRun(inbound, deliveries, {target: 0}, subject, block)


def _groups(topic: bytes, v5: list[Output], v3: list[Output]) -> Groups:
    groups: Groups = []
    if v5:
        groups.append((plain_qos0_prefix(topic, _V5), v5))
    if v3:
        groups.append((plain_qos0_prefix(topic, ProtocolVersion.MQTT_3_1_1), v3))
    return groups


def drop_eager(runs: dict[bytes, Run | StoredRun | None]) -> None:
    """A step now waits: forget the runs that acknowledge at once (their topics may open a
    stored run)."""
    for topic in [t for t, r in runs.items() if r is not None and not r.stored]:
        del runs[topic]
