"""Start-up: the MQTT state read back from the store into a new hub.

:func:`load_into` runs once, before the broker listens, on the trio thread; the reads
run in worker threads a chunk at a time (``_scan``), heads only where the payload is
not needed. What it finds inconsistent (records of sessions that are gone, messages
nobody references any more) is deleted, without waiting.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

import store
from broker.core.sessions import OnDisk, Session
from broker.mqtt.encoder import EncodedPublish
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.session import Stage
from broker.persist.records import (
    MSGS,
    PEND,
    PEND_HEADER,
    QOS2IN,
    RMSGS,
    SESS,
    SUBS,
    SYS_TOPIC_PREFIX,
    dump_record,
    props_from_json,
    session_token,
    subscription_from_record,
    subscription_op,
)

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.persist.state import Persistence

# At start, a pending entry's payload is read with its head only when it is this small
# (the record of a copy that references a message stored once for several sessions).
SMALL_RECORD = 4096
SCAN_CHUNK = 1024  # heads read per worker-thread call at start


async def load_into(persist: Persistence, broker: Hub) -> None:
    """Rebuild retained messages, sessions, subscriptions and the index of queued
    copies: a queued copy stays on disk (its seq, size and message key in its
    session's backlog); only QoS 2 copies in flight are read whole (their PUBLISH
    or PUBREL is resent at once on reconnection)."""
    st = persist.store
    client = persist.client

    def read() -> tuple[list[store.StoredMsg], ...]:
        return list(st.iter_msgs(SESS)), list(st.iter_msgs(SUBS)), list(st.iter_msgs(QOS2IN))

    sess_msgs, subs, qos2 = await trio.to_thread.run_sync(read)
    now_wall = time.time_ns()
    now = trio.current_time()
    index = broker.retained

    stale_sys: list[store.DeleteMsg] = []

    def retained(head: store.MsgHead) -> None:  # the index only: SUBSCRIBEs read them
        topic_json = head.header("Mqtt-Topic")
        if topic_json is None or not head.size:
            return
        topic = json.loads(topic_json).encode("utf-8")
        if topic.startswith(SYS_TOPIC_PREFIX):
            # Stored by an earlier version: $SYS is in memory only now, published anew.
            stale_sys.append(store.DeleteMsg(RMSGS, head.seq))
            return
        props = head.header("Mqtt-Props")
        expires_at = None
        if props and "message_expiry_interval" in props:
            interval = props_from_json(props).message_expiry_interval or 0
            age = max(0.0, (now_wall - head.time_ns) / 1e9)
            if age >= interval:
                return
            expires_at = now + interval - age
        index.load(topic, head.seq, expires_at)

    await _scan(st, RMSGS, retained)
    client.fire_deletes(stale_sys)
    by_token: dict[str, Session] = {}
    moved: list[store.Op] = []  # records of the older layout, rewritten
    for stored in sess_msgs:
        rec = json.loads(stored.payload)
        session = broker.sessions.create(rec["id"])
        session.stored = True
        session.expiry_interval = int(rec["expiry"])
        session.protocol_version = int(rec.get("version", 5))
        by_token[session_token(session)] = session
        if "subs" in rec:  # written before subscriptions had records of their own
            for sub in rec["subs"]:
                broker.subscribe(session, subscription_from_record(sub))
            del rec["subs"]
            moved.append(store.Publish(stored.subject, dump_record(rec), stream=SESS))
            moved.extend(subscription_op(session, r) for r in session.subscriptions.values())
    orphan_subs: list[store.DeleteMsg] = []
    for stored in subs:
        owner = by_token.get(stored.subject.split(".")[2])
        if owner is None:
            orphan_subs.append(store.DeleteMsg(SUBS, stored.seq))
            continue
        broker.subscribe(owner, subscription_from_record(json.loads(stored.payload)))
    # One job: a session record is rewritten without its list only together with the
    # records that replace it.
    client.fire(moved)
    client.fire_deletes(orphan_subs)
    refs = persist.refs
    sizes: dict[str, int] = {}

    def stored_once(head: store.MsgHead) -> None:
        key = head.subject.removeprefix("$MQTT.msgs.")
        refs[key] = [head.seq, 0]
        sizes[key] = head.size

    await _scan(st, MSGS, stored_once)
    orphans: list[store.DeleteMsg] = []
    # QoS 2 copies with a packet id: (send order, session, copy, packet id, stage)
    inflight: list[tuple[int, Session, OnDisk, int, Stage]] = []

    def pending(head: store.MsgHead) -> None:
        owner = by_token.get(head.subject.removeprefix("$MQTT.pend."))
        inline = head.header(PEND_HEADER)
        key = ""
        if inline is not None:
            rec = json.loads(inline)
            size = head.size
        else:
            rec = json.loads(head.payload) if head.payload else {}
            key = rec.get("m", "")
            size = sizes.get(key, -1)
        if owner is None or size < 0:
            orphans.append(store.DeleteMsg(PEND, head.seq))
            return
        if key:
            refs[key][1] += 1
        item = OnDisk(head.seq, size, key, False)
        pid = int(rec["p"])
        if pid and int(rec["q"]) == 2:
            stage = Stage.AWAIT_PUBCOMP if rec["st"] == 2 else Stage.AWAIT_PUBREC
            inflight.append((int(rec.get("o", 0)) or head.seq, owner, item, pid, stage))
            return
        backlog = owner.backlog
        if backlog is None:
            backlog = owner.backlog = deque()
        backlog.append(item)
        owner.queued_bytes += size
        owner.backlog_bytes += size

    await _scan(st, PEND, pending, SMALL_RECORD)
    for key, ref in list(refs.items()):
        if ref[1] == 0:
            orphans.append(store.DeleteMsg(MSGS, ref[0]))
            del refs[key]
    if inflight:
        items = [r[2] for r in inflight]
        found = persist.copies(items, await trio.to_thread.run_sync(persist.read_copies, items))
        # In-flight QoS 2 copies go back in their original send order [MQTT-4.6.0-1].
        for _order, owner, item, pid, stage in sorted(inflight, key=lambda r: r[0]):
            og = found.get(item.seq)
            if og is None:
                continue
            enc = EncodedPublish(og.message.publish, ProtocolVersion(owner.protocol_version))
            owner.state.restore_outbound(
                pid, enc.as_publish(pid, 2, og.retain, True, og.sub_ids), 2, stage
            )
            owner.outgoing[pid] = og
    for stored in qos2:
        client_json = stored.header("Mqtt-Client")
        target = broker.sessions.get(json.loads(client_json)) if client_json else None
        if target is None:
            orphans.append(store.DeleteMsg(QOS2IN, stored.seq))
            continue
        target.state.add_inbound_qos2(int(stored.subject.rsplit(".", 1)[1]))
    client.fire_deletes(orphans)


async def _scan(
    st: store.Store, stream: str, each: Callable[[store.MsgHead], None], payload_upto: int = 0
) -> None:
    """``each`` head of ``stream`` in order, read in a worker thread a chunk at a time
    (what a chunk leaves behind is reused by the next: a list of every head of 100,000
    retained messages left 94 MB of the process's heap in use)."""

    def chunk(start: int) -> list[store.MsgHead]:
        heads = st.iter_heads(stream, start, chunk=SCAN_CHUNK, payload_upto=payload_upto)
        out = list(itertools.islice(heads, SCAN_CHUNK))
        # The read mapped the records and the pages around them: not ours to keep.
        st.release_pages()
        return out

    start = 0
    while True:
        heads = await trio.to_thread.run_sync(chunk, start)
        for head in heads:
            each(head)
        if len(heads) < SCAN_CHUNK:
            return
        start = heads[-1].seq + 1
