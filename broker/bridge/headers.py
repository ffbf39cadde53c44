"""The ``Mqtt-*`` headers of spec/jetstream.md §3.4, both ways, and the subject of a topic.

Forward (:func:`forward_headers`): what an MQTT message becomes on NATS. Import
(:func:`imported`): what a NATS message becomes in the broker. Pure functions (no
nats-py, no trio): the bridge's threads call them, the tests feed them vectors.

| header | value |
|---|---|
| ``Mqtt-Origin`` | the bridge's ``name`` (loop prevention) |
| ``Mqtt-Topic`` | the topic, percent-encoded (UTF-8; ``%`` and anything outside printable ASCII) |
| ``Mqtt-Qos`` | ``0`` / ``1`` / ``2`` |
| ``Mqtt-Retain`` | ``1`` when the retain flag was set |
| ``Mqtt-Content-Type``, ``Mqtt-Response-Topic`` | percent-encoded like the topic |
| ``Mqtt-Payload-Format`` | ``0`` / ``1`` |
| ``Mqtt-Message-Expiry`` | remaining seconds |
| ``Mqtt-Correlation-Data`` | base64 |
| ``Mqtt-User-Properties`` | JSON array of ``[key, value]`` pairs (ASCII-escaped): repeated keys survive, which a nats-py header dict cannot carry |

Header values stay ASCII (ADR-4). ``Nmqtt-*`` is never sent: nats-server's QoS >= 1 MQTT
subscribers drop messages carrying ``Nmqtt-Pub`` (spec §2.4, §5.1).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from urllib.parse import quote, unquote

from broker.core.systopics import reserved_prefix
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.subjects import SubjectConversionError, subject_to_topic, topic_to_subject

ORIGIN = "Mqtt-Origin"
TOPIC = "Mqtt-Topic"
QOS = "Mqtt-Qos"
RETAIN = "Mqtt-Retain"
CONTENT_TYPE = "Mqtt-Content-Type"
RESPONSE_TOPIC = "Mqtt-Response-Topic"
PAYLOAD_FORMAT = "Mqtt-Payload-Format"
MESSAGE_EXPIRY = "Mqtt-Message-Expiry"
CORRELATION_DATA = "Mqtt-Correlation-Data"
USER_PROPERTIES = "Mqtt-User-Properties"
MSG_ID = "Nats-Msg-Id"

# Printable ASCII but '%' stays as is; everything else is %XX of its UTF-8 bytes.
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


class BadSubject(ValueError):
    """A NATS subject that cannot become an MQTT topic (or a topic no subject)."""


class NotOurHeaders(ValueError):
    """``Mqtt-*`` headers that do not parse or contradict the subject."""


def _enc(text: str) -> str:
    return quote(text, safe=_SAFE)


def _dec(text: str) -> str:
    return unquote(text, errors="strict")


def with_prefix(prefix: str, subject: str) -> str:
    return f"{prefix}.{subject}" if prefix else subject


def subject_for(topic: str, prefix: str) -> str:
    """The NATS subject a topic is forwarded on (§2.2 conversion, prefix in front).
    Raises :class:`BadSubject` for topics the conversion refuses (whitespace, ``*``, ``>``)."""
    try:
        return with_prefix(prefix, topic_to_subject(topic))
    except SubjectConversionError as exc:
        raise BadSubject(f"topic {topic!r}: {exc}") from None


def topic_for(subject: str, prefix: str) -> str:
    """The MQTT topic of a NATS subject (prefix removed, reverse conversion), checked:
    no wildcard, not under a prefix the broker owns (``$SYS``, ``$JS``, ``$MQTT``)."""
    if prefix and subject.startswith(prefix + "."):
        subject = subject[len(prefix) + 1 :]
    topic = subject_to_topic(subject)
    check_topic(topic, subject)
    return topic


def check_topic(topic: str, subject: str) -> None:
    if not topic:
        raise BadSubject(f"subject {subject!r} gives an empty topic")
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise BadSubject(f"subject {subject!r} gives topic {topic!r}, not a topic name")
    if reserved_prefix(topic.encode()) is not None:
        raise BadSubject(f"subject {subject!r} gives topic {topic!r}, reserved by the broker")
    if len(topic.encode()) > 65_535:
        raise BadSubject(f"subject {subject!r} gives a topic over 65,535 bytes")


def forward_headers(
    origin: str,
    topic: str,
    qos: int,
    retain: bool,
    props: Properties,
    expires_at: float | None,
    now: float,
) -> dict[str, str]:
    """The NATS headers of a forwarded message (``expires_at`` on the broker's clock)."""
    h = {ORIGIN: origin, TOPIC: _enc(topic), QOS: "012"[qos]}
    if retain:
        h[RETAIN] = "1"
    if props is EMPTY_PROPERTIES:
        return h
    if props.content_type is not None:
        h[CONTENT_TYPE] = _enc(props.content_type)
    if props.response_topic is not None:
        h[RESPONSE_TOPIC] = _enc(props.response_topic)
    if props.payload_format_indicator is not None:
        h[PAYLOAD_FORMAT] = str(props.payload_format_indicator)
    if expires_at is not None:
        h[MESSAGE_EXPIRY] = str(max(1, math.ceil(expires_at - now)))
    if props.correlation_data is not None:
        h[CORRELATION_DATA] = base64.b64encode(props.correlation_data).decode()
    if props.user_properties:
        h[USER_PROPERTIES] = json.dumps([list(kv) for kv in props.user_properties])
    return h


@dataclass(frozen=True, slots=True)
class Imported:
    """What a NATS message becomes in the broker."""

    topic: str
    qos: int
    retain: bool
    properties: Properties
    ours: bool  # it carries our own Mqtt-Origin: a message we forwarded came back


def imported(
    subject: str,
    headers: dict[str, str] | None,
    *,
    origin: str,
    prefix: str,
    rule_qos: int,
    rule_retain: bool,
) -> Imported:
    """A NATS message as the broker publishes it. Without ``Mqtt-*`` headers: the topic is
    the reverse conversion of the subject, the rule's QoS and retain flag. With them (from
    another jetmq): the original topic (it must convert to the end of the subject), QoS
    the lower of the message's and the rule's, retained only if both say so, properties
    restored. Raises :class:`BadSubject` or :class:`NotOurHeaders`."""
    if not headers or (TOPIC not in headers and ORIGIN not in headers):
        return Imported(topic_for(subject, prefix), rule_qos, rule_retain, EMPTY_PROPERTIES, False)
    ours = headers.get(ORIGIN) == origin
    try:
        raw_topic = headers.get(TOPIC)
        if raw_topic is None:
            topic = topic_for(subject, prefix)
        else:
            topic = _dec(raw_topic)
            converted = topic_to_subject(topic)
            if subject != converted and not subject.endswith("." + converted):
                raise NotOurHeaders(f"Mqtt-Topic {topic!r} does not match subject {subject!r}")
            check_topic(topic, subject)
        qos = rule_qos
        if QOS in headers:
            q = headers[QOS]
            if q not in ("0", "1", "2"):
                raise NotOurHeaders(f"Mqtt-Qos {q!r}")
            qos = min(qos, int(q))
        retain = rule_retain and headers.get(RETAIN, "1" if raw_topic is None else "0") == "1"
        props = _properties(headers)
    except (UnicodeDecodeError, SubjectConversionError, ValueError) as exc:
        if isinstance(exc, (NotOurHeaders, BadSubject)):
            raise
        raise NotOurHeaders(f"{type(exc).__name__}: {exc}") from None
    return Imported(topic, qos, retain, props, ours)


def _properties(h: dict[str, str]) -> Properties:
    fields: dict[str, object] = {}
    if CONTENT_TYPE in h:
        fields["content_type"] = _dec(h[CONTENT_TYPE])
    if RESPONSE_TOPIC in h:
        fields["response_topic"] = _dec(h[RESPONSE_TOPIC])
    if PAYLOAD_FORMAT in h:
        pf = h[PAYLOAD_FORMAT]
        if pf not in ("0", "1"):
            raise NotOurHeaders(f"Mqtt-Payload-Format {pf!r}")
        fields["payload_format_indicator"] = int(pf)
    if MESSAGE_EXPIRY in h:
        exp = h[MESSAGE_EXPIRY]
        if not exp.isdigit() or int(exp) > 0xFFFF_FFFF:
            raise NotOurHeaders(f"Mqtt-Message-Expiry {exp!r}")
        fields["message_expiry_interval"] = int(exp)
    if CORRELATION_DATA in h:
        try:
            fields["correlation_data"] = base64.b64decode(h[CORRELATION_DATA], validate=True)
        except binascii.Error as exc:
            raise NotOurHeaders(f"Mqtt-Correlation-Data: {exc}") from None
    if USER_PROPERTIES in h:
        try:
            pairs = json.loads(h[USER_PROPERTIES])
        except json.JSONDecodeError as exc:
            raise NotOurHeaders(f"Mqtt-User-Properties: {exc}") from None
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in pairs
        ):
            raise NotOurHeaders("Mqtt-User-Properties: not a JSON array of [key, value] pairs")
        fields["user_properties"] = tuple((k, v) for k, v in pairs)
    if not fields:
        return EMPTY_PROPERTIES
    return Properties(**fields)  # type: ignore[arg-type]


def header_block(headers: dict[str, str]) -> bytes:
    """The NATS header block (``NATS/1.0`` and ``Key: Value`` lines; values are ASCII)."""
    return ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()


def hpub_head(subject: str) -> bytes:
    return b"HPUB " + subject.encode() + b" "


def hpub(head: bytes, header: bytes, payload: bytes) -> bytes:
    """One ``HPUB`` command: ``head`` from :func:`hpub_head`, ``header`` from
    :func:`header_block`."""
    n = len(header)
    return b"%s%d %d\r\n%s%s\r\n" % (head, n, n + len(payload), header, payload)
