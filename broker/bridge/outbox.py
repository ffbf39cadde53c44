"""Forward, ``jetstream`` mode: at least once from our own store to a NATS stream.

A message matching a ``jetstream`` forward rule is appended to the local stream
``$MQTT_bridge`` (subject ``$MQTT.bridge.out``, the NATS subject and ``Mqtt-*`` headers
in its headers) in the same commit as the rest of its PUBLISH (``Hub.capture``), so the
PUBACK means it is on our disk. The stream is a work queue: a message in it is one NATS
has not acknowledged yet, and the PubAck (new or duplicate) deletes it. That is the
durable consumer: its position survives a restart because what is left is what is due.

:class:`Outbox` reads the stream in order and keeps up to ``WINDOW`` JetStream publishes in
flight, each with ``Nats-Msg-Id = <name>:$MQTT_bridge:<seq>`` (stable across retries
and restarts, so JetStream's dedupe window keeps one copy). A publish that fails (timeout,
no stream, disconnected) leaves its message in place; the reader goes back to it after
``RETRY_S`` (doubling up to ``RETRY_MAX_S`` while failures go on).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import trio

import store
from broker.bridge.headers import MSG_ID
from broker.bridge.link import NatsLink
from broker.bridge.state import BridgeState
from broker.persist.client import StoreClient

OUTBOX = "$MQTT_bridge"
OUTBOX_SUBJECT = "$MQTT.bridge.out"
SUBJECT_HEADER = "Mqtt-Bridge-Subject"  # the NATS subject; not sent
OUTBOX_STREAM = {"name": OUTBOX, "subjects": ["$MQTT.bridge.>"]}

WINDOW = 256
BATCH = 64  # publishes handed to the NATS thread at once (their PubAcks come back together)
PUBACK_TIMEOUT_S = 5.0
RETRY_S = 0.2
RETRY_MAX_S = 5.0


def capture_op(subject: str, payload: bytes, headers: dict[str, str]) -> store.Publish:
    """The store operation that puts a message in the outbox."""
    hdrs = (*headers.items(), (SUBJECT_HEADER, subject))
    return store.Publish(OUTBOX_SUBJECT, payload, hdrs, stream=OUTBOX)


class Outbox:
    """Reads the outbox and publishes it to JetStream (see module docstring)."""

    def __init__(
        self, name: str, client: StoreClient, state: BridgeState, link: Callable[[], NatsLink]
    ) -> None:
        self.name = name
        self.client = client
        self.state = state
        self._link = link
        self.in_flight: set[int] = set()
        self._next = 0  # the next seq to read
        self._wake = trio.Event()
        self._backoff = 0.0
        self._retry_now = trio.Event()

    def wake(self) -> None:
        self._wake.set()

    def reconnected(self) -> None:
        """The link is back: what failed is tried again now, not after the back-off."""
        self._backoff = 0.0
        self._retry_now.set()
        self._wake.set()

    def pending(self) -> int:
        """Messages waiting for NATS (in flight included)."""
        return self.client.store.stream_state(OUTBOX).messages

    async def run(self) -> None:
        while True:
            if self._backoff:
                self._retry_now = trio.Event()
                with trio.move_on_after(self._backoff):
                    await self._retry_now.wait()
            room = WINDOW - len(self.in_flight)
            if room <= 0 or not self._send(room):
                self._wake = trio.Event()
                if room > 0 and self._read(1):  # appended meanwhile
                    continue
                await self._wake.wait()

    def _read(self, room: int) -> list[store.StoredMsg]:
        inflight = self.in_flight
        msgs = self.client.store.iter_msgs(OUTBOX, self._next, chunk=room + len(inflight))
        return list(itertools.islice((m for m in msgs if m.seq not in inflight), room))

    def _send(self, room: int) -> bool:
        msgs = self._read(room)
        if not msgs:
            return False
        link = self._link()
        batch: list[tuple[int, str, bytes, dict[str, str]]] = []
        for m in msgs:
            headers = dict(m.headers)
            subject = headers.pop(SUBJECT_HEADER, None)
            self._next = m.seq + 1
            if subject is None:  # not one of ours: leave it, tell
                self.state.error(f"outbox message {m.seq} has no subject; skipped")
                continue
            headers[MSG_ID] = f"{self.name}:{OUTBOX}:{m.seq}"
            self.in_flight.add(m.seq)
            batch.append((m.seq, subject, m.payload, headers))
        for i in range(0, len(batch), BATCH):
            link.submit(link.publish_js, (batch[i : i + BATCH], PUBACK_TIMEOUT_S), self._done)
        self.state.in_flight = len(self.in_flight)
        return True

    def _done(self, results: list[tuple[int, bool | BaseException]] | BaseException) -> None:
        """(trio thread) The PubAcks of a batch arrived, or its publishes failed."""
        if isinstance(results, BaseException):  # the loop itself failed: all of it again
            self.in_flight.clear()
            self._failed(0, results)
            self._wake.set()
            return
        deletes = []
        for seq, result in results:
            self.in_flight.discard(seq)
            if isinstance(result, BaseException):
                self._failed(seq, result)
            else:
                self.state.counters["js_duplicates" if result else "js_published"] += 1
                deletes.append(store.DeleteMsg(OUTBOX, seq))
        if deletes:
            if len(deletes) == len(results):
                self._backoff = 0.0
            self.client.fire_deletes(deletes)
        self.state.in_flight = len(self.in_flight)
        self._wake.set()

    def _failed(self, seq: int, exc: BaseException) -> None:
        self.state.counters["js_retries"] += 1
        self.state.error(f"jetstream publish failed: {type(exc).__name__}: {exc}")
        self._next = min(self._next, seq)
        self._backoff = min(RETRY_MAX_S, max(RETRY_S, self._backoff * 2))
