"""Operations submitted to the writer, their results, and the events the engine emits.

The hot ones (``Publish``, ``Ack``, ``Pull``, ``PubAck``, ``Delivery``, ``StoredMsg``) are
``NamedTuple`` classes: immutable and about five times cheaper to build than frozen
dataclasses, which matters at tens of thousands per second.

One group-commit batch may mix any of these. Each operation gets its own result, and a
failing operation (a :class:`~store.errors.JetStreamError` as its result) does not fail
the others. (The operations the engine makes to go on with a long one are internal:
:mod:`store.continuations`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from store.errors import JetStreamError
from store.models import ConsumerConfig, ConsumerInfo, StreamConfig, StreamInfo, format_time
from store.pausestate import PauseState

Headers = tuple[tuple[str, str], ...]


class StoredMsg(NamedTuple):
    seq: int
    time_ns: int
    subject: str
    headers: Headers
    payload: bytes

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (case-sensitive, as NATS), or None."""
        for k, v in reversed(self.headers):
            if k == name:
                return v
        return None


class MsgHead(NamedTuple):
    """A stored message without its payload (:meth:`store.Store.iter_heads`): its size,
    and the payload itself only when it is small."""

    seq: int
    time_ns: int
    subject: str
    headers: Headers
    size: int  # payload length
    payload: bytes  # the payload if at most the reader's ``payload_upto``, else b""

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (case-sensitive, as NATS), or None."""
        for k, v in reversed(self.headers):
            if k == name:
                return v
        return None


# -- operations ------------------------------------------------------------------------------


class Publish(NamedTuple):
    """Store a message in the stream whose subjects match ``subject`` (or exactly ``stream``).

    Result: :class:`PubAck`, :class:`JetStreamError`, or ``None`` when no stream captures
    the subject (and ``stream`` was not given).
    """

    subject: str
    payload: bytes = b""
    # Name/value pairs, or (the broker's own records) the NATS/1.0 header block already
    # encoded, ASCII only: stored as given (its framing is checked, its lines are the
    # writer's responsibility); decoded and checked only if it names a ``Nats-`` header.
    headers: Headers | bytes = ()
    stream: str | None = None


@dataclass(frozen=True, slots=True)
class CreateStream:
    config: StreamConfig
    update: bool = False  # True: STREAM.UPDATE (stream must exist)


@dataclass(frozen=True, slots=True)
class DeleteStream:
    stream: str


@dataclass(frozen=True, slots=True)
class PurgeStream:
    stream: str
    filter: str | None = None
    seq: int | None = None  # purge strictly below seq
    keep: int | None = None  # keep the newest n
    # ``(sid, seq)``: where the kept messages begin, found from a snapshot by the caller
    # (store.keepbound); without it (or for another sid) the writer finds it.
    keep_from: tuple[int, int] | None = None


class DeleteMsg(NamedTuple):
    """Delete message ``seq`` of ``stream`` (a tuple, as :class:`Publish`: one is made per
    acknowledged copy)."""

    stream: str
    seq: int


class AckKind(Enum):
    ACK = "+ACK"
    NAK = "-NAK"
    WPI = "+WPI"
    TERM = "+TERM"
    NEXT = "+NXT"


class Ack(NamedTuple):
    """An ack for ``seq`` (stream sequence) on a consumer. Result: ``None``.

    ``delay_ns`` is the ``-NAK`` delay; ``reason`` the ``+TERM`` reason. For ``+NXT``,
    ``next_reply`` and ``next_batch`` register a pull request after the ack. ``cseq`` is
    the consumer seq of the delivery whose reply subject the ack came to (0: not known);
    with ``ack_policy: all`` it becomes the ack floor's, as in nats-server.
    """

    stream: str
    consumer: str
    seq: int
    kind: AckKind = AckKind.ACK
    delay_ns: int = 0
    reason: str = ""
    next_reply: str = ""
    next_batch: int = 1
    cseq: int = 0


@dataclass(frozen=True, slots=True)
class CreateConsumer:
    stream: str
    config: ConsumerConfig
    action: str = ""  # "" | "create" | "update"


@dataclass(frozen=True, slots=True)
class DeleteConsumer:
    stream: str
    consumer: str


class Pull(NamedTuple):
    """A pull request (MSG.NEXT); messages and statuses arrive as events with ``reply``."""

    stream: str
    consumer: str
    reply: str
    batch: int = 1
    expires_ns: int = 0
    no_wait: bool = False
    max_bytes: int = 0
    # While it waits, a "100 Idle Heartbeat" status this often when nothing came (0: none).
    idle_heartbeat_ns: int = 0


@dataclass(frozen=True, slots=True)
class WithdrawPulls:
    """The inbox ``reply`` lost its interest (its client went away): the consumer's pull
    requests waiting for it leave without a status, as nats-server drops a request whose
    reply subject has no subscriber. The result is how many left."""

    stream: str
    consumer: str
    reply: str


@dataclass(frozen=True, slots=True)
class SetPushInterest:
    """The broker reports whether a push consumer's deliver subject has a subscriber."""

    stream: str
    consumer: str
    bound: bool


@dataclass(frozen=True, slots=True)
class Tick:
    """Run timers due at ``now`` (ack-wait redelivery, max_age, inactivity, pull expiry)."""

    now: int | None = None


@dataclass(frozen=True, slots=True)
class GetStreamInfo:
    """The stream's config and state (the subject counts and deleted seqs of a detailed
    request are read apart, off the writer: store.details)."""

    stream: str


@dataclass(frozen=True, slots=True)
class GetConsumerInfo:
    stream: str
    consumer: str


@dataclass(frozen=True, slots=True)
class PauseConsumer:
    """CONSUMER.PAUSE: pause until ``until`` (RFC 3339; the zero time or a past one
    resumes). The result is a ``store.pausestate.PauseState``."""

    stream: str
    consumer: str
    until: str


Op = (
    Publish
    | CreateStream
    | DeleteStream
    | PurgeStream
    | DeleteMsg
    | Ack
    | CreateConsumer
    | DeleteConsumer
    | Pull
    | WithdrawPulls
    | SetPushInterest
    | Tick
    | GetStreamInfo
    | GetConsumerInfo
    | PauseConsumer
)


# -- results ---------------------------------------------------------------------------------


class PubAck(NamedTuple):
    stream: str
    seq: int
    duplicate: bool = False

    def to_wire(self) -> dict[str, object]:
        out: dict[str, object] = {"stream": self.stream, "seq": self.seq}
        if self.duplicate:
            out["duplicate"] = True
        return out


@dataclass(frozen=True, slots=True)
class PurgeResult:
    purged: int


OpResult = (
    PubAck
    | PurgeResult
    | JetStreamError
    | None
    | bool
    | StreamInfo
    | ConsumerInfo
    | int
    | PauseState
)


# -- events (emitted on the writer thread after the commit that produced them) --------------


class Delivery(NamedTuple):
    """A message for a consumer: to its push ``deliver_subject`` or a pull request's inbox."""

    stream: str
    consumer: str
    reply: str
    msg: StoredMsg
    delivered_count: int
    consumer_seq: int
    num_pending: int

    @property
    def ack_subject(self) -> str:
        """The v1 ack reply subject of spec §1.9.1."""
        return ack_subject(
            self.stream,
            self.consumer,
            self.delivered_count,
            self.msg.seq,
            self.consumer_seq,
            self.msg.time_ns,
            self.num_pending,
        )


def ack_subject(
    stream: str, consumer: str, count: int, seq: int, cseq: int, time_ns: int, pending: int
) -> str:
    """``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (v1)."""
    return f"$JS.ACK.{stream}.{consumer}.{count}.{seq}.{cseq}.{time_ns}.{pending}"


@dataclass(frozen=True, slots=True)
class PullStatus:
    """A status message for a pull request (100 / 400 / 404 / 408 / 409), spec §1.9.3."""

    stream: str
    consumer: str
    reply: str
    code: int
    description: str
    pending_msgs: int = 0
    pending_bytes: int = 0
    # 100 Idle Heartbeat: the consumer's last delivery (Nats-Last-Consumer / -Stream).
    last_consumer_seq: int = 0
    last_stream_seq: int = 0


@dataclass(frozen=True, slots=True)
class Advisory:
    """``max_deliver`` reached, message terminated, consumer deleted by inactivity, a
    consumer paused or resumed."""

    kind: str  # "max_deliver" | "terminated" | "consumer_deleted" | "pause"
    stream: str
    consumer: str
    stream_seq: int = 0
    deliveries: int = 0
    reason: str = ""
    time_ns: int = 0
    paused: bool = False  # "pause": paused (True) or resumed, and the pause_until
    pause_until: str = ""

    def to_wire(self, advisory_id: str) -> tuple[str, dict[str, object]]:
        """``(subject, body)`` of the nats-server advisory (spec §1.9.5)."""
        base: dict[str, object] = {
            "id": advisory_id,
            "timestamp": format_time(self.time_ns),
            "stream": self.stream,
            "consumer": self.consumer,
        }
        if self.kind == "max_deliver":
            subject = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self.stream}.{self.consumer}"
            body = {"type": "io.nats.jetstream.advisory.v1.max_deliver", **base}
            body |= {"stream_seq": self.stream_seq, "deliveries": self.deliveries}
        elif self.kind == "terminated":
            subject = f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{self.stream}.{self.consumer}"
            body = {"type": "io.nats.jetstream.advisory.v1.terminated", **base}
            body |= {
                "consumer_seq": 0,
                "stream_seq": self.stream_seq,
                "deliveries": self.deliveries,
                "reason": self.reason,
            }
        elif self.kind == "pause":
            subject = f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{self.stream}.{self.consumer}"
            body = {"type": "io.nats.jetstream.advisory.v1.consumer_pause", **base}
            body |= {"paused": self.paused, "pause_until": self.pause_until}
        else:
            subject = f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{self.stream}.{self.consumer}"
            body = {"type": "io.nats.jetstream.advisory.v1.consumer_action", **base}
            body |= {"action": "delete"}
        return subject, body


Event = Delivery | PullStatus | Advisory
