"""A consumer's pause (nats-server 2.11+ ``pause_until``, spec §1.2 CONSUMER.PAUSE).

Writer thread only. :class:`Pause` is part of a ``ConsumerRt`` (composed): until when
it delivers nothing, read from the consumer's config ``pause_until`` (so it persists
with the consumer record and survives a restart). While paused, pull requests wait (a
``no_wait`` one is answered 404 "No Messages", as the server answers), push deliveries
stop and ack-wait redeliveries wait; at the pause's end the consumer is due (its
``next_deadline``) and delivers again. :func:`advisory` makes the ``consumer_pause``
advisory (a pause, a resume, a pause's end). The ``PauseConsumer`` operation is
``store.admin.pause_consumer``; its result, ``store.pausestate.PauseState``.
"""

from __future__ import annotations

from store.ctx import Ctx
from store.gojson import ZERO_TIME, parse_time
from store.models import ConsumerConfig, format_time
from store.ops import Advisory
from store.pausestate import PauseState


class Pause:
    """Until when (Unix ns; 0: not paused) a consumer delivers nothing."""

    __slots__ = ("text", "until")

    def __init__(self, config: ConsumerConfig, now: int = 0) -> None:
        self.text = config.pause_until or ZERO_TIME
        self.until = parse_time(config.pause_until) if config.pause_until else 0
        if self.until <= now:  # (a past time: not paused, no advisory when it "ends")
            self.until = 0

    def holds(self, ctx: Ctx, stream: str, consumer: str) -> bool:
        """Paused now; a pause that has ended is forgotten (its deadline too), with the
        resumed advisory nats-server sends then (measured)."""
        if self.until > ctx.now:
            return True
        if self.until:
            self.until = 0
            ctx.events.append(advisory(ctx, stream, consumer, False, self.text))
        return False

    def remaining(self, now: int) -> int | None:
        """nats-server's ``pause_remaining`` (ns), None when not paused."""
        return self.until - now if self.until > now else None

    def state(self, config: ConsumerConfig, now: int) -> PauseState:
        remaining = self.remaining(now)
        return PauseState(remaining is not None, config.pause_until or ZERO_TIME, remaining)


def normalized_until(text: str) -> str:
    """``pause_until`` as the server echoes it: UTC, the zero time for none (ValueError
    if it is no RFC 3339 time)."""
    ns = parse_time(text)
    return format_time(ns) if ns else ZERO_TIME


def advisory(ctx: Ctx, stream: str, consumer: str, paused: bool, until: str) -> Advisory:
    """nats-server's ``consumer_pause`` advisory (measured against 2.15.1)."""
    return Advisory("pause", stream, consumer, time_ns=ctx.now, paused=paused, pause_until=until)
