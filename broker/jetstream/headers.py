"""MQTT 5 PUBLISH properties <-> NATS headers of a stored message.

Capture (MQTT -> stream): the user properties are the NATS headers, in order
(``Nats-Msg-Id``, ``Nats-Expected-*``, ``Nats-Rollup`` act as in nats-server); then what
MQTT carries besides, in the ``Mqtt-*`` namespace of spec §3.4:

| header | when | value |
|---|---|---|
| ``Mqtt-Qos`` | QoS 1 or 2 | ``1`` / ``2`` |
| ``Mqtt-Retain`` | retain flag set | ``1`` |
| ``Mqtt-Topic`` | the subject does not convert back to the topic | the topic |
| ``Mqtt-Content-Type`` | property present | as is |
| ``Mqtt-Payload-Format`` | property present | ``0`` / ``1`` |
| ``Mqtt-Message-Expiry`` | property present | seconds |

A Response Topic and its Correlation Data are not stored: they are where the JSON
PubAck goes, as a NATS publish's reply subject is (nats-server does not store it either).

Delivery (stream -> MQTT, pull or push): the headers become user properties again,
except ``Mqtt-Content-Type`` and ``Mqtt-Payload-Format``, which restore their property;
then ``Nats-Subject``: the stored subject in MQTT topic form (``orders.eu.1`` ->
``orders/eu/1``). The Response Topic is the ack topic.
"""

from __future__ import annotations

from typing import Final

from broker.mqtt.packets import Publish
from broker.mqtt.properties import Properties, publish_properties
from store.ops import Headers
from store.topics import SubjectConversionError, subject_to_topic

QOS_HEADERS: Final = ((), (("Mqtt-Qos", "1"),), (("Mqtt-Qos", "2"),))
_BAD_NAME: Final = frozenset(": \t\r\n\x7f")
_RESTORED: Final = frozenset(("Mqtt-Content-Type", "Mqtt-Payload-Format"))


class HeaderError(ValueError):
    """A user property that cannot be a NATS header (the reason)."""


def _check(name: str, value: str) -> None:
    if not name or any(ch in _BAD_NAME or ch < " " for ch in name):
        raise HeaderError(f"user property name {name[:64]!r} cannot be a NATS header")
    if "\r" in value or "\n" in value:
        raise HeaderError(f"user property {name[:64]!r} has a line break in its value")


def capture_headers(p: Publish, exact: bool) -> Headers:
    """The NATS headers a captured PUBLISH is stored with (HeaderError if a user property
    cannot be one); ``exact``: its subject converts back to its topic."""
    props = p.properties
    head: Headers = QOS_HEADERS[p.qos]
    if (
        exact
        and not p.retain
        and not props.user_properties
        and props.content_type is None
        and props.payload_format_indicator is None
        and props.message_expiry_interval is None
    ):
        return head  # the common case: nothing to build
    out: list[tuple[str, str]] = []
    for name, value in props.user_properties:
        _check(name, value)
        out.append((name, value))
    out.extend(head)
    if p.retain:
        out.append(("Mqtt-Retain", "1"))
    if not exact:
        out.append(("Mqtt-Topic", p.topic.decode()))
    if props.content_type is not None:
        _check("Mqtt-Content-Type", props.content_type)
        out.append(("Mqtt-Content-Type", props.content_type))
    if props.payload_format_indicator is not None:
        out.append(("Mqtt-Payload-Format", str(props.payload_format_indicator)))
    if props.message_expiry_interval is not None:
        out.append(("Mqtt-Message-Expiry", str(props.message_expiry_interval)))
    return tuple(out)


def round_trips(subject: str, topic: bytes) -> bool:
    """Whether ``subject`` converts back to ``topic`` exactly."""
    try:
        return subject_to_topic(subject).encode() == topic
    except SubjectConversionError:
        return False


_TOPICS: dict[str, str] = {}  # subject -> topic form, for deliveries (bounded)
_TOPICS_MAX: Final = 65_536


def topic_of(subject: str) -> str:
    """A stored subject in MQTT topic form (remembered: a stream's subjects repeat)."""
    topic = _TOPICS.get(subject)
    if topic is None:
        topic = subject_to_topic(subject)
        if len(_TOPICS) >= _TOPICS_MAX:
            _TOPICS.clear()
        _TOPICS[subject] = topic
    return topic


Shape = tuple[int | None, str | None, Headers]
# (subject, headers) -> what a delivery of them carries (bounded): the messages of a
# stream mostly share a subject and headers, and one shared user-properties tuple is
# encoded once (broker.mqtt.encoder remembers the last one).
_SHAPES: dict[tuple[str, Headers], Shape] = {}
_SHAPES_MAX: Final = 4096


def _shape(subject: str, headers: Headers) -> Shape:
    """(payload format, content type, user properties) of a delivery."""
    key = (subject, headers)
    shape = _SHAPES.get(key)
    if shape is not None:
        return shape
    content_type: str | None = None
    payload_format: int | None = None
    user: list[tuple[str, str]] = []
    for name, value in headers:
        if name in _RESTORED:
            if name == "Mqtt-Content-Type":
                content_type = value
            elif value in ("0", "1"):
                payload_format = int(value)
            continue
        user.append((name, value))
    user.append(("Nats-Subject", topic_of(subject)))
    shape = (payload_format, content_type, tuple(user))
    if len(_SHAPES) >= _SHAPES_MAX:
        _SHAPES.clear()
    _SHAPES[key] = shape
    return shape


def delivery_properties(
    subject: str, headers: Headers, ack_topic: str | None, extra: Headers = ()
) -> Properties:
    """The properties of a delivered message: headers as user properties (two restored as
    their property), ``Nats-Subject``, ``extra``, the ack topic as Response Topic."""
    payload_format, content_type, user = _shape(subject, headers)
    if extra:
        user += extra
    return publish_properties(
        payload_format_indicator=payload_format,
        content_type=content_type,
        response_topic=ack_topic,
        user_properties=user,
    )
