"""The operations the engine makes to go on with a job it runs in slices (store.slices):
internal, never submitted by a caller (the public vocabulary is :mod:`store.ops`). The
writer runs each in a batch of its own; ``Store.open`` submits the ones a crash or a close
cut short, from their ``meta`` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.ops import CreateConsumer, Op, PubAck
from store.purgeplan import PurgePlan

if TYPE_CHECKING:
    from store.consumers import Stream
    from store.counting import LpsScan


@dataclass(frozen=True, slots=True)
class PurgeMore:
    """Go on with a purge of stream ``sid`` (gone, or re-created under another sid: done).
    ``rid`` numbers its ``meta`` purge record (the plan as it stands, so that a restart goes
    on with it)."""

    stream: str
    sid: int
    plan: PurgePlan
    purged: int  # removed by the earlier slices
    rid: int
    reply: PubAck | None = None  # a rollup's: the result instead of the number purged


@dataclass(frozen=True, slots=True)
class EnforceLimits:
    """Go on removing what a stream update's lower limits leave in excess: walking the
    stream from seq ``start`` (0: that part is done), the oldest messages of subjects over
    ``max_msgs_per_subject``; then the oldest over ``max_msgs`` / ``max_bytes`` /
    ``max_age``. ``info``: the last slice answers with the stream's info (the update's
    reply). ``gen``: its number (``StreamRt.trim_gen``); a later one supersedes it."""

    stream: str
    sid: int
    start: int
    gen: int
    info: bool = True


@dataclass(frozen=True, slots=True)
class Reevaluate:
    """Go on checking an interest stream's messages from ``start`` after a consumer was
    deleted or its filters changed: the ones no consumer needs are removed. ``answer``:
    the consumer whose info answers the job once the check is done (an update)."""

    stream: str
    sid: int
    start: int
    answer: str = ""


@dataclass(frozen=True, slots=True)
class CreateConsumerMore:
    """Go on placing a new ``last_per_subject`` consumer (or a ``last`` one with wildcard
    filters): the walk of the subject records its filters match (``scan``,
    store.counting.LpsScan) finds each subject's last message up to ``cap`` (the stream's
    last seq when it began); the consumer is created by the last slice. ``stream_rt`` and ``removals`` are the writer's copy of the stream and its
    removal count when the walk began: another copy (the stream re-created, or reloaded
    after an aborted batch) starts the walk again; another count means messages it may
    have counted went meanwhile, so the consumer counts its num_pending afresh."""

    create: CreateConsumer  # the request, with the name the consumer gets
    stream_rt: Stream
    removals: int
    cap: int
    scan: LpsScan


@dataclass(frozen=True, slots=True)
class SweepStream:
    """Delete the data left under a deleted stream's ``sid`` (``meta`` sweep record)."""

    sid: int


Continuation = PurgeMore | CreateConsumerMore | EnforceLimits | Reevaluate | SweepStream
# What the engine applies: a caller's operation or a continuation.
AnyOp = Op | Continuation
