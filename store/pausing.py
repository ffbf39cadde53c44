"""A consumer's pause (nats-server 2.11+ ``pause_until``, spec §1.2 CONSUMER.PAUSE).

Writer thread only. :class:`Pause` is part of a ``ConsumerRt`` (composed): until when
it delivers nothing, read from the consumer's config ``pause_until`` (so it persists
with the consumer record and survives a restart). While paused, pull requests wait (a
``no_wait`` one is answered 404 "No Messages", as the server answers), push deliveries
stop and ack-wait redeliveries wait; at the pause's end the consumer is due (its
``next_deadline``) and delivers again. :class:`PauseState` is the answer of a
``PauseConsumer`` operation: nats-server's ``consumer_pause_response`` fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.gojson import ZERO_TIME, parse_time
from store.models import ConsumerConfig, format_time


class Pause:
    """Until when (Unix ns; 0: not paused) a consumer delivers nothing."""

    __slots__ = ("until",)

    def __init__(self, config: ConsumerConfig) -> None:
        self.until = parse_time(config.pause_until) if config.pause_until else 0

    def holds(self, now: int) -> bool:
        """Paused at ``now``; a pause that has ended is forgotten (its deadline too)."""
        if self.until > now:
            return True
        self.until = 0
        return False

    def remaining(self, now: int) -> int | None:
        """nats-server's ``pause_remaining`` (ns), None when not paused."""
        return self.until - now if self.until > now else None

    def state(self, config: ConsumerConfig, now: int) -> PauseState:
        remaining = self.remaining(now)
        return PauseState(remaining is not None, config.pause_until or ZERO_TIME, remaining)


@dataclass(frozen=True, slots=True)
class PauseState:
    paused: bool
    pause_until: str
    pause_remaining: int | None

    def to_wire(self) -> dict[str, object]:
        out: dict[str, object] = {"paused": self.paused, "pause_until": self.pause_until}
        if self.pause_remaining is not None:
            out["pause_remaining"] = self.pause_remaining
        return out


def normalized_until(text: str) -> str:
    """``pause_until`` as the server echoes it: UTC, the zero time for none (ValueError
    if it is no RFC 3339 time)."""
    ns = parse_time(text)
    return format_time(ns) if ns else ZERO_TIME
