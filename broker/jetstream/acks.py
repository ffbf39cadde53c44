"""The ``$JS/ACK/`` topics: acks published by consumers (the system-topic handler).

A delivered message's Response Topic is its ack topic
``$JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>``; the client
publishes ``+ACK`` (or empty, ``+OK``), ``-NAK [delay]``, ``+WPI``, ``+TERM [reason]`` or
``+NXT [batch]`` there (``store.acks`` parses both). The ack joins the open write batch;
at QoS 0 without a Response Topic nothing waits for it (no task: the fast path of a
consumer acking a batch); otherwise the PUBACK comes after its commit, and a Response Topic gets an empty message then
(nats-server's double ack), except for ``+NXT``, whose Response Topic is the inbox of
the pull request it makes.

A topic that is not an ack topic (wrong number of levels, numbers that are not u64) or
a payload that is not an ack is refused (0x83, reason string) and touches nothing; an
ack for a consumer or stream that does not exist is refused with the JetStream error's
description; an ack for a message not pending (already acked, never delivered) is
ignored, as in nats-server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from broker.core.message import AppMessage
from broker.core.sessions import Session
from broker.core.systopics import Outcome
from broker.jetstream.api import OK, REFUSED, Job, valid_reply
from broker.jetstream.commit import commit
from broker.jetstream.interest import Interest
from broker.jetstream.outbox import Outbox
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.persist.client import StorageError, StoreClient
from store import Ack, AckKind, JetStreamError
from store.acks import ack_from_payload, parse_ack_reply

log = logging.getLogger("jetmq.jetstream")

TOPIC_PREFIX: Final = b"$JS/ACK/"
_U64: Final = (1 << 64) - 1
MAX_ACK_BYTES: Final = 4096


_PLAIN_ACKS: Final = frozenset((b"+ACK", b"", b"+OK"))
_ACK = AckKind.ACK


def _plain_ack(topic: bytes) -> Ack | None:
    """The common case, a plain ack to a v1 ack topic whose numbers are at most 19 plain
    digits (so below 2**64), read straight off the bytes; None: anything else (``parse``
    decides, with the same answer for these)."""
    t = topic.split(b"/")
    if len(t) != 9 or b"." in topic or t[0] != b"$JS" or t[1] != b"ACK":
        return None
    nums = t[4:]
    if not all(map(bytes.isdigit, nums)) or max(map(len, nums)) > 19 or not t[2] or not t[3]:
        return None
    seq = int(t[5])
    if not seq:
        return None
    try:
        return Ack(t[2].decode(), t[3].decode(), seq, _ACK, 0, "", "", 1, int(t[6]))
    except UnicodeDecodeError:
        return None


def parse(topic: bytes, payload: bytes, next_reply: str) -> Ack | str:
    """The ack operation, or why the topic or payload is not an ack."""
    if payload in _PLAIN_ACKS:
        ack = _plain_ack(topic)
        if ack is not None:
            return ack
    if len(payload) > MAX_ACK_BYTES:
        return "an ack is at most 4096 bytes"
    try:
        subject = topic.decode().replace("/", ".")
        reply = parse_ack_reply(subject)
    except (UnicodeDecodeError, ValueError) as exc:
        return f"not an ack topic: {exc}"
    nums = (reply.delivered, reply.stream_seq, reply.consumer_seq, reply.timestamp_ns)
    if any(not 0 <= n <= _U64 for n in (*nums, reply.pending)) or reply.stream_seq == 0:
        return "not an ack topic: a number out of range"
    try:
        ack = ack_from_payload(reply, payload, next_reply)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not an ack: {exc}"
    if ack.kind is AckKind.NEXT and not 0 < ack.next_batch <= _U64 >> 1:
        return "not an ack: +NXT batch out of range"
    return ack


class AckHandler:
    """The ``$JS/ACK/`` system-topic handler (see module docstring)."""

    def __init__(
        self,
        client: StoreClient,
        outbox: Outbox,
        interest: Interest,
        wake: Callable[[], None],
    ) -> None:
        self.client = client
        self.outbox = outbox
        self.interest = interest
        self.wake = wake

    def publish(self, msg: AppMessage, session: Session | None) -> ReasonCode | Job:
        p = msg.publish
        reply = p.properties.response_topic
        if reply is not None and valid_reply(reply) is not None:
            return REFUSED
        ack = parse(p.topic, p.payload, reply or "")
        if isinstance(ack, str):
            if session is not None and not p.qos:  # no PUBACK to say it: the log does
                log.warning("client %r: %s", session.client_id, ack)
            job = Job()
            job.finish(Outcome(REFUSED, ack))
            return job
        num = session.num if session is not None else 0
        if not p.qos and (reply is None or ack.kind is AckKind.NEXT):
            # Nobody to tell (QoS 0, no double ack): into the open batch, no task, no wait.
            self.client.fire([ack])
            if ack.kind is AckKind.NEXT and reply is not None and num:
                self.interest.add_pull(num, ack.stream, ack.consumer, reply)
            return ReasonCode.SUCCESS
        job = Job()
        self.client.spawn(self._run, job, ack, num, reply, p.properties)
        return job

    async def _run(
        self, job: Job, ack: Ack, num: int, reply: str | None, props: Properties
    ) -> None:
        result = OK
        try:
            (res,) = await commit(self.client, [ack])
            if isinstance(res, JetStreamError):
                result = Outcome(REFUSED, res.description)
            elif ack.kind is AckKind.NEXT:
                if reply is not None and num:
                    self.interest.add_pull(num, ack.stream, ack.consumer, reply)
            elif reply is not None:
                self.outbox.answer(reply, b"", props.correlation_data)
            self.wake()
        except StorageError as exc:
            result = Outcome(ReasonCode.UNSPECIFIED_ERROR, f"the broker could not store it: {exc}")
        except Exception:
            log.exception("JetStream ack %r failed", ack)
            result = Outcome(REFUSED, "the ack failed in the broker")
        finally:
            job.finish(result)
