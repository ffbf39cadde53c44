"""MQTT state expressed as streams in the store (see broker/DESIGN.md, "Persistence").

Everything here runs on the trio thread except the store's own writer thread
and the startup load (``trio.to_thread``). A store future completes a trio
event through ``TrioToken.run_sync_soon``; nothing blocks the event loop.

Records (all JSON with sorted keys, UTF-8):

* session  ``{"id", "expiry", "version", "subs": [[filter, qos, nl, rap, rh, sub_id]]}``
* pending  ``{"m": msg key, "q": qos, "r": retain, "s": [sub ids], "p": packet id, "st": stage}``
  where stage 0 = not acknowledged yet, 2 = PUBREC received (PUBREL sent)
* message  payload as is; header ``Mqtt-Topic`` (UTF-8 topic), ``Mqtt-Props`` (JSON of the
  publish properties), ``Mqtt-Qos``, ``Mqtt-Retain``.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import os
import pathlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

import store
from broker import handles
from broker.config import StorageConfig
from broker.message import AppMessage, Outgoing
from broker.mqtt.encoder import EncodedPublish
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.session import Stage
from broker.router import Delivery
from broker.sessions import Session, SubscriptionRecord

if TYPE_CHECKING:
    from broker.core import Broker

SESS = "$MQTT_sess"
RMSGS = "$MQTT_rmsgs"
MSGS = "$MQTT_msgs"
PEND = "$MQTT_pend"
QOS2IN = "$MQTT_qos2in"

_STREAMS: tuple[dict[str, Any], ...] = (
    {"name": SESS, "subjects": ["$MQTT.sess.>"], "max_msgs_per_subject": 1},
    {"name": RMSGS, "subjects": ["$MQTT.rmsgs.>"], "max_msgs_per_subject": 1},
    {"name": MSGS, "subjects": ["$MQTT.msgs.>"]},
    {"name": PEND, "subjects": ["$MQTT.pend.>"]},
    {
        "name": QOS2IN,
        "subjects": ["$MQTT.qos2.>"],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "discard_new_per_subject": True,
    },
)

_PROP_FIELDS = (
    "payload_format_indicator",
    "message_expiry_interval",
    "content_type",
    "response_topic",
)


def token(text: bytes | str) -> str:
    """A subject token for a client id or topic (they may contain any UTF-8)."""
    raw = text.encode() if isinstance(text, str) else text
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def _props_to_json(props: Properties) -> str:
    out: dict[str, Any] = {}
    for name in _PROP_FIELDS:
        value = getattr(props, name)
        if value is not None:
            out[name] = value
    if props.correlation_data is not None:
        out["correlation_data"] = base64.b64encode(props.correlation_data).decode()
    if props.user_properties:
        out["user_properties"] = [list(kv) for kv in props.user_properties]
    return json.dumps(out, separators=(",", ":"), ensure_ascii=True)


def _props_from_json(text: str | None) -> Properties:
    if not text:
        return EMPTY_PROPERTIES
    data = json.loads(text)
    kwargs: dict[str, Any] = {k: data[k] for k in _PROP_FIELDS if k in data}
    if "correlation_data" in data:
        kwargs["correlation_data"] = base64.b64decode(data["correlation_data"])
    if "user_properties" in data:
        kwargs["user_properties"] = tuple((k, v) for k, v in data["user_properties"])
    return Properties(**kwargs)


def _message_headers(msg: AppMessage) -> tuple[tuple[str, str], ...]:
    topic = msg.topic.decode("utf-8")
    return (
        ("Mqtt-Topic", json.dumps(topic, ensure_ascii=True)),
        ("Mqtt-Qos", str(msg.qos)),
        ("Mqtt-Retain", "1" if msg.retain else "0"),
        ("Mqtt-Props", _props_to_json(msg.publish.properties)),
    )


def _message_from_stored(
    stored: store.StoredMsg, now_wall_ns: int, now_trio: float
) -> AppMessage | None:
    """Rebuild a message with its expiry deadline moved onto the trio clock.

    The deadline may already be in the past: callers drop expired copies when
    they would send them, except a QoS 2 exchange already started [MQTT-4.3.3-7].
    """
    topic_json = stored.header("Mqtt-Topic")
    if topic_json is None:
        return None
    props = _props_from_json(stored.header("Mqtt-Props"))
    expires_at: float | None = None
    if props.message_expiry_interval is not None:
        age = max(0.0, (now_wall_ns - stored.time_ns) / 1e9)
        expires_at = now_trio + props.message_expiry_interval - age
    publish = Publish(
        json.loads(topic_json).encode("utf-8"),
        stored.payload,
        int(stored.header("Mqtt-Qos") or 0),
        stored.header("Mqtt-Retain") == "1",
        properties=props,
    )
    return AppMessage(publish, expires_at, 0)


async def wait_future(fut: concurrent.futures.Future[list[store.OpResult]]) -> list[store.OpResult]:
    """Await a store future from trio without blocking the loop."""
    if not fut.done():
        tok = trio.lowlevel.current_trio_token()
        event = trio.Event()

        def done(_: object) -> None:
            # The loop may already be gone at shutdown; nobody is waiting then.
            with contextlib.suppress(trio.RunFinishedError):
                tok.run_sync_soon(event.set)

        fut.add_done_callback(done)
        await event.wait()
    return fut.result()


@dataclass(slots=True)
class PublishPlan:
    """What one PUBLISH must store before it is acknowledged, and the results."""

    ops: list[store.Op] = field(default_factory=list)
    pend_index: dict[int, int] = field(default_factory=dict)  # delivery index -> op index
    msg_op: int = -1
    future: concurrent.futures.Future[list[store.OpResult]] | None = None
    results: list[store.OpResult] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.ops

    async def wait(self) -> None:
        if self.future is not None and not self.results:
            self.results = await wait_future(self.future)

    def seq_of(self, op_index: int) -> int:
        res = self.results[op_index] if 0 <= op_index < len(self.results) else None
        return res.seq if isinstance(res, store.PubAck) else 0

    def pend_seq(self, delivery_index: int) -> int:
        op = self.pend_index.get(delivery_index)
        return 0 if op is None else self.seq_of(op)


EMPTY_PLAN = PublishPlan()


class Persistence:
    """The broker's use of the store (one instance per broker)."""

    def __init__(self, st: store.Store) -> None:
        self.store = st
        self._keys = itertools.count(1)
        self._boot = f"{os.getpid():x}{time.time_ns() & 0xFFFFFFFF:08x}"
        self._last: concurrent.futures.Future[list[store.OpResult]] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, config: StorageConfig) -> Persistence:
        path = pathlib.Path(config.data_dir)

        def _open() -> store.Store:
            path.mkdir(parents=True, exist_ok=True)
            st = store.Store.open(path, sync=config.sync)
            try:
                existing = set(st.stream_names())
                for spec in _STREAMS:
                    if spec["name"] not in existing:
                        st.create_stream(spec)
            except BaseException:
                st.close()
                raise
            return st

        return cls(await trio.to_thread.run_sync(_open))

    async def flush(self) -> None:
        """Wait until everything submitted so far is committed."""
        if self._last is not None:
            await wait_future(self._last)

    async def close(self) -> None:
        await trio.to_thread.run_sync(self.store.close)

    def _submit(self, ops: Sequence[store.Op]) -> concurrent.futures.Future[list[store.OpResult]]:
        fut = self.store.submit(ops)
        self._last = fut
        return fut

    def _fire(self, ops: Sequence[store.Op]) -> None:
        """Submit without waiting (the caller's correctness does not depend on the commit)."""
        if ops:
            self._submit(ops)

    # -- publish -----------------------------------------------------------------------------

    def plan(
        self,
        broker: Broker,
        msg: AppMessage,
        deliveries: Sequence[Delivery],
        extra: Sequence[store.Op] = (),
    ) -> PublishPlan:
        """The store operations a PUBLISH needs: retained update, stored copy, pending entries.

        ``extra`` (inbound QoS 2 state) commits in the same batch.
        """
        ops: list[store.Op] = list(extra)
        plan = PublishPlan(ops) if ops else EMPTY_PLAN
        if msg.retain and broker.config.mqtt.retain_available:
            if plan is EMPTY_PLAN:
                plan = PublishPlan(ops)
            subject = f"$MQTT.rmsgs.{token(msg.topic)}"
            if msg.payload:
                ops.append(store.Publish(subject, msg.payload, _message_headers(msg), stream=RMSGS))
            else:
                ops.append(store.PurgeStream(RMSGS, filter=subject))
        if msg.qos:
            by_num = broker.sessions.by_num
            for index, d in enumerate(deliveries):
                if d.qos == 0:
                    continue
                session = by_num.get(d.client)
                if session is None or not session.persistent:
                    continue
                if plan is EMPTY_PLAN:
                    plan = PublishPlan(ops)
                session.stored = True
                if plan.msg_op < 0:
                    msg.key = f"{self._boot}-{next(self._keys)}"
                    plan.msg_op = len(ops)
                    ops.append(
                        store.Publish(
                            f"$MQTT.msgs.{msg.key}", msg.payload, _message_headers(msg), stream=MSGS
                        )
                    )
                qos = min(msg.qos, d.qos)
                record = {
                    "m": msg.key,
                    "q": qos,
                    "r": int(msg.retain and d.retain_as_published),
                    "s": list(d.sub_ids),
                    "p": 0,
                    "st": 0,
                }
                plan.pend_index[index] = len(ops)
                msg.refs += 1
                ops.append(
                    store.Publish(
                        f"$MQTT.pend.{token(session.client_id)}", _dump(record), stream=PEND
                    )
                )
        if plan is not EMPTY_PLAN:
            plan.future = self._submit(ops)
        return plan

    def after_commit(self, msg: AppMessage, plan: PublishPlan) -> None:
        if plan.msg_op >= 0:
            msg.stored_seq = plan.seq_of(plan.msg_op)

    # -- acknowledgements of outbound copies -------------------------------------------------------

    def _release_copy(self, og: Outgoing, ops: list[store.Op]) -> None:
        if og.pend_seq:
            ops.append(store.DeleteMsg(PEND, og.pend_seq))
            og.pend_seq = 0
            msg = og.message
            msg.refs -= 1
            if msg.refs <= 0 and msg.stored_seq:
                ops.append(store.DeleteMsg(MSGS, msg.stored_seq))
                msg.stored_seq = 0

    def copy_done(self, session: Session, og: Outgoing) -> None:
        """PUBACK / PUBCOMP (or a copy skipped or expired): forget its pending entry."""
        ops: list[store.Op] = []
        self._release_copy(og, ops)
        self._fire(ops)

    def stage_copies(
        self, session: Session, entries: Sequence[tuple[Outgoing, int, int]]
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        """Record QoS 2 copies' packet ids (stage 0) or PUBRECs (stage 2) in one commit.

        A restart must resend a QoS 2 PUBLISH with its original packet id, and must send
        PUBREL rather than the PUBLISH once PUBREC was received [MQTT-4.3.3-6]. Each
        entry's pending record is rewritten (new record, old one deleted); the caller
        awaits the future and then calls :meth:`stages_committed`.
        """
        ops: list[store.Op] = []
        subject = f"$MQTT.pend.{token(session.client_id)}"
        for og, packet_id, stage in entries:
            og.order = og.order or og.pend_seq
            record = {
                "m": og.message.key,
                "q": og.qos,
                "r": int(og.retain),
                "s": list(og.sub_ids),
                "p": packet_id,
                "st": stage,
                "o": og.order,
            }
            ops.append(store.Publish(subject, _dump(record), stream=PEND))
            ops.append(store.DeleteMsg(PEND, og.pend_seq))
        return self._submit(ops) if ops else None

    @staticmethod
    def stages_committed(
        entries: Sequence[tuple[Outgoing, int, int]], results: Sequence[store.OpResult]
    ) -> None:
        for i, (og, _pid, _stage) in enumerate(entries):
            res = results[2 * i]
            og.pend_seq = res.seq if isinstance(res, store.PubAck) else 0

    # -- sessions ----------------------------------------------------------------------------

    def save_session(self, session: Session) -> concurrent.futures.Future[list[store.OpResult]]:
        session.stored = True
        record = {
            "id": session.client_id,
            "expiry": session.expiry_interval,
            "version": session.protocol_version,
            "subs": [
                [
                    r.topic_filter.decode("utf-8"),
                    r.qos,
                    int(r.no_local),
                    int(r.retain_as_published),
                    r.retain_handling,
                    r.sub_id,
                ]
                for r in session.subscriptions.values()
            ],
        }
        return self._submit(
            [store.Publish(f"$MQTT.sess.{token(session.client_id)}", _dump(record), stream=SESS)]
        )

    def session_ended(self, session: Session, dropped: Sequence[Outgoing]) -> None:
        """The session is over (or was cleaned): remove its stored state, if it has any."""
        if not session.stored:
            return
        session.stored = False
        ops: list[store.Op] = []
        for og in dropped:
            self._release_copy(og, ops)
        tok = token(session.client_id)
        ops.append(store.PurgeStream(SESS, filter=f"$MQTT.sess.{tok}"))
        ops.append(store.PurgeStream(PEND, filter=f"$MQTT.pend.{tok}"))
        ops.append(store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{tok}.*"))
        self._fire(ops)

    def qos2_received(self, session: Session, packet_id: int) -> list[store.Op]:
        """Ops recording an inbound QoS 2 packet id (exactly once across restarts)."""
        if not session.persistent:
            return []
        session.stored = True
        return [
            store.Publish(
                f"$MQTT.qos2.{token(session.client_id)}.{packet_id}",
                b"",
                (("Mqtt-Client", json.dumps(session.client_id, ensure_ascii=True)),),
                stream=QOS2IN,
            )
        ]

    def qos2_released(
        self, session: Session, packet_id: int
    ) -> concurrent.futures.Future[list[store.OpResult]] | None:
        if not session.persistent:
            return None
        return self._submit(
            [store.PurgeStream(QOS2IN, filter=f"$MQTT.qos2.{token(session.client_id)}.{packet_id}")]
        )

    # -- startup -------------------------------------------------------------------------------

    async def load_into(self, broker: Broker) -> None:
        """Rebuild retained messages, sessions, subscriptions and queued copies."""
        st = self.store

        def read() -> tuple[list[store.StoredMsg], ...]:
            return (
                list(st.iter_msgs(SESS)),
                list(st.iter_msgs(RMSGS)),
                list(st.iter_msgs(MSGS)),
                list(st.iter_msgs(PEND)),
                list(st.iter_msgs(QOS2IN)),
            )

        sess_msgs, retained, msgs, pend, qos2 = await trio.to_thread.run_sync(read)
        now_wall = time.time_ns()
        now = trio.current_time()
        for stored in retained:
            msg = _message_from_stored(stored, now_wall, now)
            if msg is not None and msg.payload and not msg.expired(now):
                broker.load_retained(msg)
        by_token: dict[str, Session] = {}
        for stored in sess_msgs:
            rec = json.loads(stored.payload)
            session = broker.sessions.create(rec["id"])
            session.stored = True
            session.expiry_interval = int(rec["expiry"])
            session.protocol_version = int(rec.get("version", 5))
            for flt, qos, nl, rap, rh, sid in rec["subs"]:
                handle = handles.pack(
                    qos,
                    no_local=bool(nl),
                    retain_as_published=bool(rap),
                    retain_handling=rh,
                    sub_id=sid,
                )
                record = SubscriptionRecord(
                    flt.encode("utf-8"), qos, bool(nl), bool(rap), int(rh), sid, handle
                )
                broker.subscribe(session, record)
            by_token[token(session.client_id)] = session
        stored_by_key: dict[str, AppMessage | None] = {}
        seq_by_key: dict[str, int] = {}
        for stored in msgs:
            key = stored.subject.removeprefix("$MQTT.msgs.")
            msg = _message_from_stored(stored, now_wall, now)
            if msg is not None:
                msg.key = key
                msg.stored_seq = stored.seq
            stored_by_key[key] = msg
            seq_by_key[key] = stored.seq
        orphans: list[store.Op] = []
        restored: list[tuple[int, Session, int, Outgoing, Stage]] = []
        for stored in pend:
            owner = by_token.get(stored.subject.removeprefix("$MQTT.pend."))
            rec = json.loads(stored.payload)
            msg = stored_by_key.get(rec["m"])
            if owner is None or msg is None:
                orphans.append(store.DeleteMsg(PEND, stored.seq))
                continue
            msg.refs += 1
            og = Outgoing(msg, int(rec["q"]), bool(rec["r"]), tuple(rec["s"]), stored.seq)
            og.order = int(rec.get("o", 0)) or stored.seq
            pid = int(rec["p"])
            if pid and og.qos == 2:
                stage = Stage.AWAIT_PUBCOMP if rec["st"] == 2 else Stage.AWAIT_PUBREC
                restored.append((og.order, owner, pid, og, stage))
            else:
                owner.queue.append(og)
                owner.queued_bytes += len(msg.payload)
        # In-flight QoS 2 copies go back in their original send order [MQTT-4.6.0-1].
        for _order, owner, pid, og, stage in sorted(restored, key=lambda r: r[0]):
            enc = EncodedPublish(og.message.publish, ProtocolVersion(owner.protocol_version))
            owner.state.restore_outbound(
                pid, enc.as_publish(pid, 2, og.retain, True, og.sub_ids), 2, stage
            )
            owner.outgoing[pid] = og
        for key, maybe in stored_by_key.items():
            if maybe is None or maybe.refs == 0:
                orphans.append(store.DeleteMsg(MSGS, seq_by_key[key]))
        for stored in qos2:
            client_json = stored.header("Mqtt-Client")
            target = broker.sessions.get(json.loads(client_json)) if client_json else None
            if target is None:
                orphans.append(store.DeleteMsg(QOS2IN, stored.seq))
                continue
            target.state.inbound_qos2.add(int(stored.subject.rsplit(".", 1)[1]))
        if orphans:
            self._fire(orphans)


def _dump(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
