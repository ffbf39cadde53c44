"""Forward, ``jetstream`` mode: at least once from our own store to a NATS stream.

A message matching a ``jetstream`` forward rule is appended to the local stream
``$MQTT_bridge`` (subject ``$MQTT.bridge.out``, the NATS subject and ``Mqtt-*`` headers
in its headers) in the same commit as the rest of its PUBLISH (``Hub.capture``), so the
PUBACK means it is on our disk. The stream is a work queue: a message in it is one NATS
has not acknowledged yet, and the PubAck (new or duplicate) deletes it. That is the
durable consumer: its position survives a restart because what is left is what is due.

:class:`Outbox` reads the stream in order and keeps up to ``WINDOW`` JetStream publishes in
flight, each with ``Nats-Msg-Id = <name>:$MQTT_bridge:<seq>`` (stable across retries
and restarts, so JetStream's dedupe window keeps one copy). They are encoded here as
``HPUB`` commands whose reply subject is the link's PubAck inbox plus the seq (one
subscription for all; nats-py's per-request futures cost more than the rest of the path),
written to nats-py in one chunk per read. A publish that fails (an error PubAck, no
stream: 503, no PubAck within ``PUBACK_TIMEOUT_S``, not connected) leaves its message in
place; the reader goes back to it after ``RETRY_S`` (doubling up to ``RETRY_MAX_S`` while
failures go on, at once after a reconnect).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import trio

import store
from broker.bridge.headers import MSG_ID, header_block, hpub
from broker.bridge.link import NatsLink
from broker.bridge.state import BridgeState
from broker.persist.client import StoreClient

OUTBOX = "$MQTT_bridge"
OUTBOX_SUBJECT = "$MQTT.bridge.out"
SUBJECT_HEADER = "Mqtt-Bridge-Subject"  # the NATS subject; not sent
OUTBOX_STREAM = {"name": OUTBOX, "subjects": ["$MQTT.bridge.>"]}

WINDOW = 256
REFILL = 64  # publish more once this many of the window are free
PUBACK_TIMEOUT_S = 5.0
RETRY_S = 0.2
RETRY_MAX_S = 5.0


def capture_op(subject: str, payload: bytes, headers: dict[str, str]) -> store.Publish:
    """The store operation that puts a message in the outbox."""
    hdrs = (*headers.items(), (SUBJECT_HEADER, subject))
    return store.Publish(OUTBOX_SUBJECT, payload, hdrs, OUTBOX)


class Outbox:
    """Reads the outbox and publishes it to JetStream (see module docstring)."""

    def __init__(
        self, name: str, client: StoreClient, state: BridgeState, link: Callable[[], NatsLink]
    ) -> None:
        self.name = name
        self.client = client
        self.state = state
        self._link = link
        self.in_flight: dict[int, float] = {}  # seq -> when it was sent (trio clock)
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
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire)
            while True:
                if self._backoff:
                    self._retry_now = trio.Event()
                    with trio.move_on_after(self._backoff):
                        await self._retry_now.wait()
                room = WINDOW - len(self.in_flight)
                # Refill in chunks: PubAcks come back a few at a time, and a read per few
                # would cost more than the publishes.
                if room < REFILL and self.in_flight:
                    room = 0
                if room <= 0 or not self._send(room):
                    self._wake = trio.Event()
                    if room > 0 and self._read(1):  # appended meanwhile
                        continue
                    await self._wake.wait()

    async def _expire(self) -> None:
        """Publishes without a PubAck after ``PUBACK_TIMEOUT_S`` are failures (retried)."""
        while True:
            await trio.sleep(PUBACK_TIMEOUT_S / 4)
            old = trio.current_time() - PUBACK_TIMEOUT_S
            late = [seq for seq, sent in self.in_flight.items() if sent < old]
            if late:
                self._settle([(seq, "no PubAck in time") for seq in late])

    def _read(self, room: int) -> list[store.StoredMsg]:
        """Up to ``room`` messages from ``_next`` on that are not in flight (after a
        failure ``_next`` goes back, and later ones may still be in flight: skipped)."""
        inflight = self.in_flight
        out: list[store.StoredMsg] = []
        for m in self.client.store.iter_msgs(OUTBOX, self._next, chunk=room):
            if m.seq in inflight:
                self._next = m.seq + 1
                continue
            out.append(m)
            if len(out) >= room:
                break
        return out

    def _send(self, room: int) -> bool:
        link = self._link()
        prefix = link.ack_prefix
        if not prefix:  # not connected yet
            return False
        msgs = self._read(room)
        if not msgs:
            return False
        now = trio.current_time()
        cmds: list[bytes] = []
        seqs: list[int] = []
        for m in msgs:
            headers = dict(m.headers)
            subject = headers.pop(SUBJECT_HEADER, None)
            self._next = m.seq + 1
            if subject is None:  # not one of ours: leave it, tell
                self.state.error(f"outbox message {m.seq} has no subject; skipped")
                continue
            headers[MSG_ID] = f"{self.name}:{OUTBOX}:{m.seq}"
            head = b"HPUB %s %s%d " % (subject.encode(), prefix, m.seq)
            cmds.append(hpub(head, header_block(headers), m.payload))
            self.in_flight[m.seq] = now
            seqs.append(m.seq)
        if cmds:
            link.submit(link.publish_raw, (b"".join(cmds),), functools.partial(self._written, seqs))
        self.state.in_flight = len(self.in_flight)
        return True

    def _written(self, seqs: list[int], result: object) -> None:
        """(trio thread) nats-py took the publishes (their PubAcks will come), or not."""
        if result is not True:
            why = result if isinstance(result, BaseException) else "not connected to NATS"
            self._settle([(seq, str(why)) for seq in seqs])

    def pubacks(self, acks: list[tuple[int, bool | str]]) -> None:
        """(trio thread, from the link) PubAcks: (seq, duplicate) or (seq, error text)."""
        self._settle(acks)

    def _settle(self, results: list[tuple[int, bool | str]]) -> None:
        deletes = []
        failed = 0
        counters = self.state.counters
        inflight = self.in_flight
        for seq, result in results:
            if isinstance(result, str):
                if inflight.pop(seq, None) is not None:  # (a late failure of a resent one: no)
                    failed += 1
                    counters["js_retries"] += 1
                    self.state.error(f"jetstream publish failed: {result}")
                    self._next = min(self._next, seq)
                continue
            inflight.pop(seq, None)
            counters["js_duplicates" if result else "js_published"] += 1
            deletes.append(store.DeleteMsg(OUTBOX, seq))
        if failed:
            self._backoff = min(RETRY_MAX_S, max(RETRY_S, self._backoff * 2))
        elif deletes:
            self._backoff = 0.0
        if deletes:
            self.client.fire_deletes(deletes)
        self.state.in_flight = len(inflight)
        self._wake.set()
