"""A message delivered by a JetStream consumer, and its acks (spec §1.9.1-1.9.2).

Its Response Topic is the ack topic
``$JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>`` (v1; the v2 form
with domain and account hash after ``$JS/ACK`` is accepted too). Acks are PUBLISHes of
``+ACK``, ``-NAK [delay]``, ``+WPI``, ``+TERM [reason]`` to it; ``ack_sync`` adds a
Response Topic and waits for the broker's confirmation (nats-server's double ack).
After a terminal ack (ACK, NAK, TERM) further acks are ignored (ADR-15 "Ack Handling").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from client.message import Message, first
from client.protocol import MQTTClient
from store.topics import SubjectConversionError, subject_to_topic, topic_to_subject

ACK_PREFIX = "$JS/ACK/"


@dataclass(frozen=True, slots=True)
class SequencePair:
    consumer: int
    stream: int


@dataclass(frozen=True, slots=True)
class MsgMetadata:
    """What the ack topic says about a delivery (nats-py's ``Msg.Metadata``)."""

    stream: str
    consumer: str
    num_delivered: int
    sequence: SequencePair
    timestamp_ns: int
    num_pending: int
    domain: str = ""


def parse_ack_topic(topic: str) -> MsgMetadata:
    """The metadata in an ack topic; ValueError if it is not one (9 or >= 11 tokens in
    NATS terms: 7 or >= 9 after the ``$JS/ACK/`` prefix)."""
    if topic.startswith("$JS.ACK."):
        topic = subject_to_topic(topic)
    if not topic.startswith(ACK_PREFIX):
        raise ValueError(f"not an ack topic: {topic!r}")
    tokens = topic[len(ACK_PREFIX) :].split("/")
    domain = ""
    if len(tokens) >= 9:
        domain = "" if tokens[0] == "_" else tokens[0]
        tokens = tokens[2:]
    elif len(tokens) != 7:
        raise ValueError(f"not an ack topic: {topic!r}")
    try:
        delivered, sseq, cseq, ts, pending = (int(t) for t in tokens[2:7])
    except ValueError:
        raise ValueError(f"not an ack topic: {topic!r}") from None
    return MsgMetadata(
        tokens[0], tokens[1], delivered, SequencePair(cseq, sseq), ts, pending, domain
    )


def nats_subject(topic: str) -> str:
    """The NATS subject of a ``Nats-Subject`` property, which carries the stream subject
    in MQTT topic form (issue 21: ``orders.eu.1`` is sent as ``orders/eu/1``)."""
    try:
        return topic_to_subject(topic)
    except SubjectConversionError:
        return topic


@dataclass(frozen=True, slots=True)
class Status:
    """A status message (empty PUBLISH with user properties ``Status``/``Description``)."""

    code: int
    description: str
    message: Message


def status_of(msg: Message) -> Status | None:
    text = first(msg.user_properties, "Status")
    if text is None or msg.payload:
        return None
    try:
        code = int(text.split()[0])
    except (ValueError, IndexError):
        code = 0
    return Status(code, first(msg.user_properties, "Description") or "", msg)


class JsMsg:
    """One delivered stream message: ``data``, ``subject`` (NATS), ``topic`` (MQTT),
    ``headers`` (the user properties), ``metadata``; and its acks."""

    __slots__ = ("_acked", "_client", "headers", "message", "metadata", "reply", "subject", "topic")

    def __init__(self, client: MQTTClient, message: Message) -> None:
        self._client = client
        self.message = message
        self.reply = message.response_topic or ""
        self.headers = message.user_properties
        self.topic = first(self.headers, "Nats-Subject") or message.topic
        self.subject = nats_subject(self.topic)
        self.metadata = parse_ack_topic(self.reply) if self.reply else None
        self._acked = False

    @property
    def data(self) -> bytes:
        return self.message.payload

    def header(self, name: str) -> str | None:
        return first(self.headers, name)

    def __repr__(self) -> str:
        seq = self.metadata.sequence.stream if self.metadata else "?"
        return f"<JsMsg subject={self.subject!r} seq={seq} data={self.data[:40]!r}>"

    @property
    def is_acked(self) -> bool:
        return self._acked

    async def _send(self, payload: bytes, terminal: bool) -> None:
        if self._acked or not self.reply:
            return
        await self._client.publish(self.reply, payload, 0)
        if terminal:
            self._acked = True

    async def ack(self) -> None:
        await self._send(b"+ACK", True)

    async def ack_sync(self, timeout: float = 5.0) -> None:
        """Ack and wait until the broker has processed it (the double ack)."""
        if self._acked or not self.reply:
            return
        await self._client.request(self.reply, b"+ACK", timeout, no_responders=False)
        self._acked = True

    async def nak(self, delay: float | None = None) -> None:
        """Redeliver now, or after ``delay`` seconds."""
        if delay is None:
            await self._send(b"-NAK", True)
        else:
            body = json.dumps({"delay": int(delay * 1_000_000_000)})
            await self._send(b"-NAK " + body.encode(), True)

    async def in_progress(self) -> None:
        await self._send(b"+WPI", False)

    async def term(self, reason: str | None = None) -> None:
        await self._send(b"+TERM" + (b" " + reason.encode() if reason else b""), True)
