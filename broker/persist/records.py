"""The MQTT state's records in the store: streams, subjects and record formats.

Client ids, topics and filters may hold any UTF-8, so subjects carry a hash of them
(:func:`token`); the records carry the real values. Every JSON record has sorted keys
and is UTF-8.

Streams and subjects (``h(x)`` is ``token(x)``):

* ``$MQTT_sess``  ``$MQTT.sess.<h(client id)>``, one per subject
* ``$MQTT_subs``  ``$MQTT.subs.<h(client id)>.<h(filter)>``, one per subject
* ``$MQTT_rmsgs``  ``$MQTT.rmsgs.<h(topic)>``, one per subject; an empty payload purges it
* ``$MQTT_msgs``  ``$MQTT.msgs.<key>``, ``<key>`` unique per broker run
* ``$MQTT_pend``  ``$MQTT.pend.<h(client id)>``, one entry per queued or in-flight copy
* ``$MQTT_qos2in``  ``$MQTT.qos2.<h(client id)>.<packet id>``, one per subject, discard new

Records:

* session  ``{"id", "expiry", "version"}`` (records written before 2026-11-22 also hold
  ``"subs"``, the list below: read at start and moved to ``$MQTT_subs``)
* subscription  ``[filter, qos, nl, rap, rh, sub_id]``, one record per (session, filter), so
  a SUBSCRIBE writes what it adds, not every subscription the session has
* pending  ``{"m": msg key, "q": qos, "r": retain, "s": [sub ids], "p": packet id, "st": stage,
  "o": first pending sequence}`` where stage 0 = not acknowledged yet, 2 = PUBREC received
  (PUBREL sent) and "o" (send order on restore) is written once the entry is rewritten. A
  message with a single persistent recipient is not stored separately: its pending entry *is*
  the message (payload and message headers) with the record, without "m", in header
  ``Mqtt-Pend``, so storing and acknowledging it cost one write each.
* message (in ``$MQTT_msgs``, ``$MQTT_rmsgs`` and inline pending entries)  payload as is;
  header ``Mqtt-Topic`` (JSON string of the UTF-8 topic), ``Mqtt-Props`` (JSON of the
  publish properties; correlation data in base64), ``Mqtt-Qos``, ``Mqtt-Retain`` ("0"/"1").
* inbound QoS 2  empty payload, header ``Mqtt-Client`` (JSON string of the client id); the
  packet id is the subject's last token.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import store
from broker.core import handles
from broker.core.message import AppMessage
from broker.core.sessions import Session, SubscriptionRecord
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties

SESS = "$MQTT_sess"
RMSGS = "$MQTT_rmsgs"
# The broker's own $SYS figures (origin 0) are retained in memory only, never in RMSGS.
# They are published anew at every start (``broker.ops.systree``) and superseded each
# interval: storing them would only put a commit, with its fsync, into every interval of
# an idle broker.
SYS_TOPIC_PREFIX = b"$SYS/"
MSGS = "$MQTT_msgs"
PEND = "$MQTT_pend"
QOS2IN = "$MQTT_qos2in"
SUBS = "$MQTT_subs"
PEND_HEADER = "Mqtt-Pend"  # on a pending entry that holds its message inline

# The streams' configurations, created at first start (``StoreClient.open``), never deleted.
STREAMS: tuple[dict[str, Any], ...] = (
    {"name": SESS, "subjects": ["$MQTT.sess.>"], "max_msgs_per_subject": 1},
    {"name": SUBS, "subjects": ["$MQTT.subs.>"], "max_msgs_per_subject": 1},
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


def session_token(session: Session) -> str:
    """The session's client id token (computed once per session)."""
    tok = session.token
    if not tok:
        tok = session.token = token(session.client_id)
    return tok


def dump_record(record: dict[str, Any]) -> bytes:
    """A JSON record as stored: compact, keys sorted."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


# -- messages ----------------------------------------------------------------------------------


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


def props_from_json(text: str | None) -> Properties:
    """The publish properties of header ``Mqtt-Props``."""
    if not text or text == "{}":
        return EMPTY_PROPERTIES  # (the encoder writes the shared empty block at once)
    data = json.loads(text)
    kwargs: dict[str, Any] = {k: data[k] for k in _PROP_FIELDS if k in data}
    if "correlation_data" in data:
        kwargs["correlation_data"] = base64.b64decode(data["correlation_data"])
    if "user_properties" in data:
        kwargs["user_properties"] = tuple((k, v) for k, v in data["user_properties"])
    return Properties(**kwargs)


# Topics up to this length have their header lines cached, as every per-topic cache of the
# broker (a topic may be 65,535 bytes: 4,096 cached long ones would hold hundreds of MiB).
_CACHED_TOPIC = 1024


def _topic_json(topic: bytes) -> str:
    if len(topic) <= _CACHED_TOPIC:
        return _short_topic_json(topic)
    return json.dumps(topic.decode("utf-8"), ensure_ascii=True)


@functools.lru_cache(maxsize=4096)
def _short_topic_json(topic: bytes) -> str:
    return json.dumps(topic.decode("utf-8"), ensure_ascii=True)


def message_block(msg: AppMessage, pend: str | None = None) -> bytes:
    """The NATS/1.0 header block of a stored message (its payload is stored as is):
    ``Mqtt-Topic``, ``Mqtt-Qos``, ``Mqtt-Retain``, ``Mqtt-Props`` and, for a pending
    entry that holds its message, ``Mqtt-Pend``. Built here in one string, per stored
    message, and handed to the store encoded (``store.Publish`` takes the block)."""
    props = msg.publish.properties
    topic = msg.topic
    if props is not EMPTY_PROPERTIES:
        head = _head(topic, msg.qos, msg.retain, _props_to_json(props))
    elif len(topic) <= _CACHED_TOPIC:  # the common case: the first lines repeat per topic
        head = _plain_head(topic, msg.qos, msg.retain)
    else:
        head = _head(topic, msg.qos, msg.retain, "{}")
    if pend is None:
        return (head + "\r\n").encode()
    return f"{head}{PEND_HEADER}: {pend}\r\n\r\n".encode()


def _head(topic: bytes, qos: int, retain: bool, props_json: str) -> str:
    return (
        f"NATS/1.0\r\nMqtt-Topic: {_topic_json(topic)}\r\nMqtt-Qos: {qos}\r\n"
        f"Mqtt-Retain: {'1' if retain else '0'}\r\nMqtt-Props: {props_json}\r\n"
    )


@functools.lru_cache(maxsize=4096)
def _plain_head(topic: bytes, qos: int, retain: bool) -> str:
    return _head(topic, qos, retain, "{}")


def message_from_stored(
    stored: store.StoredMsg, now_wall_ns: int, now_trio: float
) -> AppMessage | None:
    """Rebuild a message with its expiry deadline moved onto the trio clock.

    The deadline may already be in the past: callers drop expired copies when
    they would send them, except a QoS 2 exchange already started [MQTT-4.3.3-7].
    """
    topic_json = stored.header("Mqtt-Topic")
    if topic_json is None:
        return None
    props = props_from_json(stored.header("Mqtt-Props"))
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


# -- pending entries ---------------------------------------------------------------------------


def pend_op(
    session: Session,
    msg: AppMessage,
    qos: int,
    retain: bool,
    sub_ids: Sequence[int],
    packet_id: int = 0,
    stage: int = 0,
    order: int = 0,
) -> store.Publish:
    """One copy's pending entry: a reference to the stored message, or (a message with
    a single persistent recipient) the message itself with the copy's fields in a header."""
    # The record's JSON is built directly, keys sorted, and the operation made with
    # positional fields (a NamedTuple's keyword call costs twice as much): per stored copy.
    ids = ",".join(map(str, sub_ids)) if sub_ids else ""
    tail = f'"p":{packet_id},"q":{qos},"r":{1 if retain else 0},"s":[{ids}],"st":{stage}}}'
    if order:
        tail = f'"o":{order},{tail}'
    subject = f"$MQTT.pend.{session.token or session_token(session)}"
    if msg.key:
        return store.Publish(subject, f'{{"m":{json.dumps(msg.key)},{tail}'.encode(), (), PEND)
    return store.Publish(subject, msg.payload, message_block(msg, "{" + tail), PEND)


# -- subscriptions -----------------------------------------------------------------------------


def subscription_op(session: Session, r: SubscriptionRecord) -> store.Publish:
    """The record of one of ``session``'s subscriptions (replaces the one it had)."""
    record = [
        r.topic_filter.decode("utf-8"),
        r.qos,
        int(r.no_local),
        int(r.retain_as_published),
        r.retain_handling,
        r.sub_id,
    ]
    return store.Publish(
        f"$MQTT.subs.{session_token(session)}.{token(r.topic_filter)}",
        json.dumps(record, separators=(",", ":")).encode(),
        stream=SUBS,
    )


def subscription_from_record(sub: list[Any]) -> SubscriptionRecord:
    """A subscription from its stored form ``[filter, qos, nl, rap, rh, sub_id]``."""
    flt, qos, nl, rap, rh, sid = sub
    handle = handles.pack(
        qos, no_local=bool(nl), retain_as_published=bool(rap), retain_handling=rh, sub_id=sid
    )
    return SubscriptionRecord(flt.encode("utf-8"), qos, bool(nl), bool(rap), int(rh), sid, handle)
