"""Push consumers with ADR-15's automatic status management, and the ordered consumer.

The broker publishes to the consumer's deliver topic (``deliver_subject`` in MQTT form);
this client receives it on an inbox topic of its own (or on ``$share/<group>/<topic>``
for a deliver group). Statuses are handled when the application asks for the next message
(ADR-15: flow control "at the time when the message would have been normally passed to
the user"):

* ``100 FlowControl Request``: an empty PUBLISH to its Response Topic (``$JS/FC/...``).
* ``100 Idle Heartbeat``: proves the consumer alive; ``Nats-Consumer-Stalled`` is answered
  like a flow control request (once per topic); ``Nats-Last-Consumer`` reveals a gap.
* nothing for 3 heartbeat intervals: :class:`ConsumerStalledError`.
* a consumer sequence that skips: :class:`SequenceGapError` (not for deliver groups).

Errors go to ``error_cb`` when one is given (and the message is still returned), else they
are raised by ``next_msg`` (a message that revealed a gap is returned by the next call).
The ordered consumer instead re-creates itself from the last stream sequence + 1 on a gap
or on missed heartbeats (ADR-17).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Self

import anyio

from client.errors import ConsumerStalledError, JetStreamError, SequenceGapError, StatusError
from client.jsapi import Api
from client.jsmsg import JsMsg, status_of
from client.message import Message
from client.subscription import Subscription
from store.models import ConsumerConfig, ConsumerInfo
from store.topics import subject_to_topic, topic_to_subject

ErrorCallback = Callable[[Exception], Awaitable[None]]
_NS = 1_000_000_000


class PushSubscription:
    def __init__(
        self,
        api: Api,
        stream: str,
        info: ConsumerInfo,
        sub: Subscription,
        *,
        created: bool,
        ordered: bool = False,
        queue: str | None = None,
        error_cb: ErrorCallback | None = None,
    ) -> None:
        self._api = api
        self.stream = stream
        self.consumer = info.name
        self.config = info.config
        self._sub = sub
        self._created = created
        self.ordered = ordered
        self.queue = queue
        self._error_cb = error_cb
        self._limit = sub.limit
        hb = info.config.idle_heartbeat
        self._heartbeat = hb / _NS if hb else None
        self._last_activity = anyio.current_time()
        self._cseq = 0  # last consumer sequence seen
        self._sseq = 0  # last stream sequence seen
        self._last_fc = ""
        self._held: JsMsg | None = None
        self.resets = 0  # ordered consumer re-creations
        self.heartbeats = 0  # idle heartbeats seen
        self.flow_controls = 0  # flow control requests answered (stalled ones included)

    @property
    def delivered(self) -> tuple[int, int]:
        """(consumer sequence, stream sequence) of the last message returned."""
        return self._cseq, self._sseq

    async def consumer_info(self) -> ConsumerInfo:
        return await self._api.consumer_info(self.stream, self.consumer)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> JsMsg:
        return await self.next_msg(None)

    async def next_msg(self, timeout: float | None = 5.0) -> JsMsg:
        """The next stream message; TimeoutError after ``timeout`` seconds (None: wait)."""
        if self._held is not None:
            msg, self._held = self._held, None
            return msg
        deadline = anyio.current_time() + (math.inf if timeout is None else timeout)
        while True:
            now = anyio.current_time()
            wait = deadline - now
            alarm = math.inf
            if self._heartbeat:
                alarm = self._last_activity + 3 * self._heartbeat
                wait = min(wait, alarm - now)
            got = None
            with anyio.move_on_after(max(wait, 0)):
                got = await self._sub.next()
            now = anyio.current_time()
            if got is None:
                if now >= alarm:
                    self._last_activity = now
                    if self.ordered:
                        await self._reset()
                        continue
                    await self._problem(
                        ConsumerStalledError(
                            f"{self.stream}/{self.consumer}: no heartbeat for "
                            f"{3 * (self._heartbeat or 0):g} s"
                        )
                    )
                    continue
                raise TimeoutError(f"no message from {self.stream}/{self.consumer}")
            self._last_activity = now
            status = status_of(got)
            if status is not None:
                await self._status(status.code, status.description, got.response_topic, got)
                continue
            msg = JsMsg(self._api.client, got)
            md = msg.metadata
            if md is None or self.queue:
                return msg
            expected = self._cseq + 1
            if self._cseq and md.sequence.consumer != expected and md.sequence.consumer > expected:
                if self.ordered:
                    await self._reset()
                    continue
                self._cseq, self._sseq = md.sequence.consumer, md.sequence.stream
                if await self._problem(SequenceGapError(expected, md.sequence.consumer), msg):
                    return msg
                continue
            self._cseq, self._sseq = md.sequence.consumer, md.sequence.stream
            return msg

    async def _status(self, code: int, description: str, reply: str | None, got: Message) -> None:
        client = self._api.client
        if code != 100:
            if self.ordered and code == 409:
                await self._reset()
                return
            raise StatusError(code, description)
        if reply:  # a flow control request
            await client.publish(reply, b"", 0)
            self._last_fc = reply
            self.flow_controls += 1
            return
        self.heartbeats += 1
        stalled = got.header("Nats-Consumer-Stalled")
        if stalled:
            topic = subject_to_topic(stalled) if "/" not in stalled else stalled
            if topic != self._last_fc:
                await client.publish(topic, b"", 0)
                self._last_fc = topic
                self.flow_controls += 1
        last = got.header("Nats-Last-Consumer")
        if last and last.isdigit() and not self.queue and int(last) > self._cseq:
            if self.ordered:
                await self._reset()
            else:
                await self._problem(SequenceGapError(self._cseq + 1, int(last)))
                self._cseq = int(last)

    async def _problem(self, exc: Exception, msg: JsMsg | None = None) -> bool:
        """Report ``exc``; True when ``msg`` should be returned now (a callback took the
        error), False when it was raised (``msg`` is held for the next call)."""
        if self._error_cb is not None:
            await self._error_cb(exc)
            return True
        self._held = msg
        raise exc

    async def _reset(self) -> None:
        """Ordered consumer: a new consumer from the last stream sequence + 1, on a new
        inbox (what the old consumer still sends is never read)."""
        client = self._api.client
        old_sub, old_name = self._sub, self.consumer
        with contextlib.suppress(Exception):
            await old_sub.unsubscribe()
        with contextlib.suppress(JetStreamError, TimeoutError):
            await self._api.delete_consumer(self.stream, old_name)
        self._sub = await client.open_inbox(max_pending=self._limit)
        update: dict[str, object] = {
            "deliver_subject": topic_to_subject(self._sub.topic),
            "name": None,
            "durable_name": None,
        }
        if self._sseq:
            update |= {
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": self._sseq + 1,
                "opt_start_time": None,
            }
        config = ordered_config(self.config.model_copy(update=update))
        info = await self._api.create_consumer(self.stream, config)
        self.consumer, self.config = info.name, info.config
        self._cseq = 0
        self._last_activity = anyio.current_time()
        self.resets += 1

    async def unsubscribe(self) -> None:
        """End the subscription; a consumer this subscription created is deleted."""
        await self._sub.unsubscribe()
        if self._created:
            with contextlib.suppress(JetStreamError, TimeoutError):
                await self._api.delete_consumer(self.stream, self.consumer)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.unsubscribe()


def ordered_config(config: ConsumerConfig, heartbeat: float = 5.0) -> ConsumerConfig:
    """ADR-17's ordered consumer settings over ``config``."""
    return config.model_copy(
        update={
            "ack_policy": "none",
            "max_deliver": 1,
            "flow_control": True,
            "mem_storage": True,
            "num_replicas": 1,
            "idle_heartbeat": config.idle_heartbeat or int(heartbeat * _NS),
            "durable_name": None,
            "deliver_group": None,
        }
    )
