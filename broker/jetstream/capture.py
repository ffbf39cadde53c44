"""Stream capture: which PUBLISH a user stream stores, and what its publisher is told.

:class:`Capture` lives on the trio thread. It knows the subjects of every user stream
(replaced whole after each API change, before the change is answered) and caches, per
topic, the NATS subject a stream captures or None: an ordinary PUBLISH costs one
attribute test when there are no streams and one dict lookup otherwise (no allocation
once its topic is cached). A captured PUBLISH adds one ``store.Publish`` to the write
batch its own acknowledgement waits for, so the PUBACK/PUBREC comes after the commit.

The answer (:meth:`Capture.outcome`): success is reason code 0 with user properties
``Nats-Stream``, ``Nats-Sequence`` (and ``Nats-Duplicate: true``); a refusal is 0x97
(a limit: discard-new, message size), 0x99 (headers that are not valid), 0x83
otherwise, with the JetStream error's description as Reason String. Ordinary
subscribers receive the message either way, as NATS core subscribers do.
"""

from __future__ import annotations

import json
from typing import Final

from broker.core.systopics import Outcome
from broker.jetstream.headers import HeaderError, capture_headers, round_trips
from broker.mqtt.packets import Publish
from broker.mqtt.reason_codes import ReasonCode
from store import JetStreamError, PubAck
from store import Publish as StorePublish
from store.ops import OpResult
from store.subjects import subject_matches
from store.topics import SubjectConversionError, topic_to_subject

CACHE_MAX: Final = 65_536  # topics remembered; the cache starts afresh when full
CACHED_TOPIC_MAX: Final = 1024  # longer topics are looked up every time (memory: router's)
_QUOTA: Final = frozenset((10077, 10054))  # store failed (discard new), message too large
_FORMAT: Final = frozenset((10003,))  # bad request: a header the store refuses
_NOT_CAPTURED: Final = (None, False)


class Capture:
    """The user streams' subjects and the per-topic answer (trio thread)."""

    __slots__ = ("_cache", "_streams", "subjects")

    def __init__(self) -> None:
        self.subjects: tuple[str, ...] = ()  # every subject (pattern) of every user stream
        self._streams: tuple[str, ...] = ()  # the stream of each pattern
        self._cache: dict[bytes, tuple[str | None, bool]] = {}

    def set_subjects(self, subjects: tuple[tuple[str, str], ...]) -> None:
        """The user streams' subjects now: (pattern, stream name) pairs."""
        self.subjects = tuple(pattern for pattern, _ in subjects)
        self._streams = tuple(stream for _, stream in subjects)
        self._cache = {}

    def stream_for(self, topic: bytes) -> str:
        """The name of the stream capturing ``topic`` ("" if none)."""
        subject = self._find(topic)[0]
        if subject is not None:
            for pattern, stream in zip(self.subjects, self._streams, strict=True):
                if subject_matches(pattern, subject):
                    return stream
        return ""

    def _find(self, topic: bytes) -> tuple[str | None, bool]:
        try:
            subject = topic_to_subject(topic.decode())
        except (UnicodeDecodeError, SubjectConversionError):
            return _NOT_CAPTURED
        for pattern in self.subjects:
            if subject_matches(pattern, subject):
                return subject, round_trips(subject, topic)
        return _NOT_CAPTURED

    def op_for(self, p: Publish) -> StorePublish | HeaderError | None:
        """The store operation capturing ``p``, a HeaderError if its user properties
        cannot be NATS headers, or None when no stream captures its topic."""
        topic = p.topic
        found = self._cache.get(topic)
        if found is None:
            found = self._find(topic)
            if len(topic) <= CACHED_TOPIC_MAX:
                if len(self._cache) >= CACHE_MAX:
                    self._cache = {}
                self._cache[topic] = found
        subject, exact = found
        if subject is None:
            return None
        try:
            return StorePublish(subject, p.payload, capture_headers(p, exact))
        except HeaderError as exc:
            return exc


def outcome(result: OpResult | HeaderError) -> Outcome:
    """The PUBACK/PUBREC of a captured PUBLISH, from its store result."""
    if isinstance(result, PubAck):
        props: tuple[tuple[str, str], ...] = (
            ("Nats-Stream", result.stream),
            ("Nats-Sequence", str(result.seq)),
        )
        if result.duplicate:
            props += (("Nats-Duplicate", "true"),)
        return Outcome(ReasonCode.SUCCESS, None, props)
    if isinstance(result, HeaderError):
        return Outcome(ReasonCode.PAYLOAD_FORMAT_INVALID, str(result))
    if isinstance(result, JetStreamError):
        if result.err_code in _QUOTA:
            code = ReasonCode.QUOTA_EXCEEDED
        elif result.err_code in _FORMAT:
            code = ReasonCode.PAYLOAD_FORMAT_INVALID
        else:
            code = ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
        return Outcome(code, result.description)
    return Outcome(ReasonCode.SUCCESS)  # no stream took it after all (deleted meanwhile)


def pub_ack_json(result: OpResult | HeaderError, stream: str) -> bytes | None:
    """The JSON PubAck for a Response Topic (nats-server's), None when nothing was stored;
    ``stream``: the capturing stream's name (an error names it)."""
    if isinstance(result, PubAck):
        doc: dict[str, object] = result.to_wire()
    elif isinstance(result, JetStreamError):
        doc = {"error": result.to_wire(), "stream": stream, "seq": 0}
    elif isinstance(result, HeaderError):
        doc = {"error": {"code": 400, "err_code": 10003, "description": f"bad request: {result}"}}
    else:
        return None
    return json.dumps(doc, separators=(",", ":")).encode()
