"""The bridge on the trio side: an internal recipient of the hub for the forward rules,
an internal publisher for the imports, and the owner of the NATS link and the outbox.

Resource handling
    :meth:`Bridge.open` creates the outbox stream when a ``jetstream`` forward rule needs
    it; :meth:`start` registers the recipient and its subscriptions (one per forward rule,
    the rule's number as subscription identifier) and starts the link's thread and the
    forwarding tasks in the broker's nursery; :meth:`stop` stops the tasks, then drains and
    stops the link.

Loop prevention (spec §3.6): the link connects with ``no_echo``; an imported message
carrying our own ``Mqtt-Origin`` is dropped (``import_own``); a message the bridge
published into the broker has the bridge's number as origin and is never forwarded.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import trio

from broker.bridge.headers import (
    BadSubject,
    NotOurHeaders,
    forward_headers,
    header_block,
    hpub,
    hpub_head,
    imported,
    subject_for,
)
from broker.bridge.link import Inbound, NatsLink
from broker.bridge.outbox import OUTBOX, OUTBOX_STREAM, Outbox, capture_op
from broker.bridge.state import BridgeState
from broker.bridgeconfig import BridgeConfig
from broker.core.hub import Hub
from broker.core.message import AppMessage, message_from
from broker.core.router import Delivery
from broker.mqtt.packets import Publish
from broker.mqtt.properties import EMPTY_PROPERTIES
from broker.persist.client import StoreClient

log = logging.getLogger("jetmq.bridge")

FORWARD_QUEUE = 8192  # core messages waiting for the NATS thread; more are dropped (counted)
FORWARD_IN_FLIGHT = 4  # batches of core forwards the NATS thread may hold at once
FORWARD_BATCH = 2048  # core messages handed to the NATS thread at once (at most ...
FORWARD_BATCH_BYTES = 1 << 20  # ... and about this many bytes)
HEAD_CACHE = 16_384  # encoded subject + headers of plain messages, by (topic, qos, retain)
# Longer topics and subjects are worked out every time: 16,384 cached 64 KiB keys (a topic
# may be 65,535 bytes) would hold a GiB.
CACHED_KEY_MAX = 1024
IMPORT_WINDOW = 1024  # imported messages the broker is working on at once
DRAIN_FORWARDS_S = 5.0  # a stopping bridge hands its queued core forwards over this long

CORE, JETSTREAM = 1, 2


class Bridge:
    """One bridge to one NATS cluster (see module docstring)."""

    def __init__(self, config: BridgeConfig, hub: Hub, client: StoreClient) -> None:
        self.config = config
        self.hub = hub
        self.client = client
        self.state = BridgeState(config.name)
        self.num = 0
        # Per forward rule (subscription identifier - 1): (mode bit, min_qos).
        self._rules = [
            (JETSTREAM if r.mode == "jetstream" else CORE, r.min_qos) for r in config.forward
        ]
        self._send, self._recv = trio.open_memory_channel[bytes](FORWARD_QUEUE)
        # (topic, qos, retain) -> (HPUB head, header block) of messages without properties.
        self._heads: dict[tuple[bytes, int, bool], tuple[bytes, bytes]] = {}
        # topic -> the identifiers of the forward rules it matches (() for none).
        self._matched: dict[bytes, tuple[int, ...]] = {}
        # (import rule, subject) -> (topic, qos, retain) of NATS messages without headers.
        self._plain: dict[tuple[int, str], tuple[bytes, int, bool]] = {}
        self._link: NatsLink | None = None
        self.outbox: Outbox | None = None
        if any(mode == JETSTREAM for mode, _ in self._rules):
            self.outbox = Outbox(config.name, client, self.state, self.link)
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self._forwards_done = trio.Event()  # the core forward queue is closed and handed over

    @classmethod
    async def open(cls, config: BridgeConfig, hub: Hub, client: StoreClient) -> Bridge:
        bridge = cls(config, hub, client)
        if bridge.outbox is not None and OUTBOX not in client.store.stream_names():
            await trio.to_thread.run_sync(client.store.create_stream, dict(OUTBOX_STREAM))
        return bridge

    def link(self) -> NatsLink:
        assert self._link is not None, "the bridge is not started"
        return self._link

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        """Attach to the hub (recipient, subscriptions, capture) and start the link and the
        tasks. Synchronous: a reload swaps bridges with no PUBLISH handled in between."""
        hub = self.hub
        self.num = hub.add_recipient(self)
        for index, rule in enumerate(self.config.forward):
            hub.subscribe_internal(self.num, rule.filter.encode(), 2, sub_id=index + 1)
        if self.outbox is not None:
            hub.capture = self._capture
        self._link = NatsLink(
            self.config,
            window=IMPORT_WINDOW,
            on_state=self._on_state,
            on_error=self._link_error,
            on_message=self._import,
            on_pubacks=self.outbox.pubacks if self.outbox is not None else None,
        )
        self._link.start()
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._forward_core)
                    if self.outbox is not None:
                        nursery.start_soon(self.outbox.run)
        finally:
            self._stopped.set()

    def detach(self) -> None:
        """Leave the hub: no more deliveries or captures (idempotent). What is queued for
        NATS still goes (:meth:`stop`); what the outbox holds stays in the store for the
        next bridge."""
        if self.num:
            self.hub.remove_recipient(self.num)
            self.num = 0
        if self.hub.capture == self._capture:
            self.hub.capture = None

    async def stop(self) -> None:
        """Stop forwarding (the core forwards already queued are handed to NATS first,
        for at most ``DRAIN_FORWARDS_S``), then drain and close the NATS connection."""
        if self._link is None:
            return
        self.detach()
        self._send.close()  # _forward_core ends once the queue is handed over
        with trio.move_on_after(DRAIN_FORWARDS_S):
            await self._forwards_done.wait()
        self._scope.cancel()
        await self._stopped.wait()
        link, self._link = self._link, None
        await link.stop()
        self.state.closed()

    def status(self) -> BridgeState:
        """The state, with the queue lengths brought up to date."""
        self.state.forward_queue = self._send.statistics().current_buffer_used
        if self.outbox is not None:
            self.state.pending = self.outbox.pending()
        return self.state

    # -- forward ------------------------------------------------------------------------------

    @property
    def _max_payload(self) -> int:
        link = self._link
        return link.max_payload if link is not None else 1 << 20

    def _modes(self, qos: int, sub_ids: tuple[int, ...]) -> int:
        rules = self._rules
        modes = 0
        for sid in sub_ids:
            mode, min_qos = rules[sid - 1]
            if qos >= min_qos:
                modes |= mode
        return modes

    def _capture(self, msg: AppMessage, deliveries: list[Delivery] | Any) -> list[Any]:
        """(Hub.capture) A message for a ``jetstream`` rule joins its PUBLISH's commit.
        Which rules match a topic is found in the deliveries once and then remembered (the
        bridge's subscriptions never change while it runs), so a publish to many
        subscribers is not scanned each time."""
        if msg.origin == self.num:
            return []
        topic = msg.topic
        sub_ids = self._matched.get(topic)
        if sub_ids is None:
            num = self.num
            sub_ids = next((d.sub_ids for d in deliveries if d.client == num), ())
            if len(topic) <= CACHED_KEY_MAX:
                if len(self._matched) >= HEAD_CACHE:
                    self._matched.clear()
                self._matched[topic] = sub_ids
        if not sub_ids or not self._modes(msg.qos, sub_ids) & JETSTREAM:
            return []
        out = self._convert(msg)
        if out is None:
            return []
        self.state.counters["captured"] += 1
        return [capture_op(*out)]

    def _convert(self, msg: AppMessage) -> tuple[str, bytes, dict[str, str]] | None:
        try:
            topic = msg.topic.decode()
            subject = subject_for(topic, self.config.subject_prefix)
        except (BadSubject, UnicodeDecodeError) as exc:
            self.state.bad_input("forward_bad_topic", f"not forwarded: {exc}")
            return None
        headers = forward_headers(
            self.config.name,
            topic,
            msg.qos,
            msg.retain,
            msg.publish.properties,
            msg.expires_at,
            self.hub.now(),
        )
        return subject, msg.payload, headers

    def deliver(self, msg: AppMessage, qos: int, retain: bool, sub_ids: tuple[int, ...]) -> None:
        """(Recipient, after the message's commit.)"""
        if msg.origin == self.num:
            return  # we published it (an import): never forwarded
        modes = self._modes(msg.qos, sub_ids)
        if modes & JETSTREAM:
            if self.outbox is not None:
                self.outbox.wake()  # captured in the commit
            return
        if not modes:
            return
        cmd = self._encode_core(msg)
        if cmd is None:
            return
        try:
            self._send.send_nowait(cmd)
        except trio.WouldBlock:
            self.state.bad_input("forward_dropped", "core forward queue full: message dropped")

    def _encode_core(self, msg: AppMessage) -> bytes | None:
        """The ``HPUB`` command of a core forward; a message without properties reuses the
        encoded subject and headers of its (topic, QoS, retain)."""
        publish = msg.publish
        if len(publish.payload) > self._max_payload:
            self.state.bad_input("forward_dropped", "payload over NATS max_payload: dropped")
            return None
        plain = publish.properties is EMPTY_PROPERTIES
        if plain:
            key = (publish.topic, publish.qos, publish.retain)
            cached = self._heads.get(key)
            if cached is not None:
                return hpub(cached[0], cached[1], publish.payload)
        out = self._convert(msg)
        if out is None:
            return None
        subject, payload, headers = out
        head, block = hpub_head(subject), header_block(headers)
        if plain and len(publish.topic) <= CACHED_KEY_MAX:
            if len(self._heads) >= HEAD_CACHE:
                self._heads.clear()
            self._heads[key] = (head, block)
        return hpub(head, block, payload)

    async def _forward_core(self) -> None:
        """Hand queued core forwards to the NATS thread, up to ``FORWARD_IN_FLIGHT``
        batches at once (a crossing waits for the other thread's turn on the GIL: one
        batch at a time was too few to keep up with a busy broker)."""
        recv = self._recv
        room = trio.Semaphore(FORWARD_IN_FLIGHT)
        try:
            await self._forward_batches(recv, room)
            for _ in range(FORWARD_IN_FLIGHT):  # the queue was closed: wait for the last
                await room.acquire()
        finally:
            self._forwards_done.set()

    async def _forward_batches(
        self, recv: trio.MemoryReceiveChannel[bytes], room: trio.Semaphore
    ) -> None:
        async for first in recv:
            batch = [first]
            size = len(first)
            while len(batch) < FORWARD_BATCH and size < FORWARD_BATCH_BYTES:
                try:
                    cmd = recv.receive_nowait()
                except trio.WouldBlock:
                    break
                batch.append(cmd)
                size += len(cmd)
            await room.acquire()
            link = self.link()
            link.submit(
                link.publish_raw,
                (b"".join(batch),),
                functools.partial(self._forwarded, room, len(batch)),
            )

    def _forwarded(self, room: trio.Semaphore, count: int, result: object) -> None:
        """(trio thread) A batch of core forwards is with nats-py, or was refused."""
        room.release()
        if result is True:
            self.state.counters["forwarded"] += count
            return
        self.state.counters["forward_dropped"] += count - 1
        why = result if isinstance(result, BaseException) else "NATS is not reachable"
        self.state.bad_input("forward_dropped", f"{why}: core messages dropped")

    # -- import -------------------------------------------------------------------------------

    def _on_state(self, connected: bool, server: str) -> None:
        self.state.set_connected(connected, server)
        if connected and self.outbox is not None:
            self.outbox.reconnected()

    def _link_error(self, counter: str, text: str, count: int = 1) -> None:
        """(trio thread) News from the link: a counter to bump, a new last error (logged
        when it differs from the previous one: one line per state change)."""
        if counter:
            self.state.counters[counter] += count
        if text:
            self.state.error(text)

    def _import(self, item: Inbound) -> None:
        """(trio thread) A NATS message for an import rule: publish it into the broker."""
        index, subject, headers, payload, ack = item
        if not self.num:  # detached by a reload: the next bridge imports (a nak re-sends)
            self._finished(ack, False)
            return
        state = self.state
        hub = self.hub
        if not headers:  # a plain NATS message: its topic, QoS and retain by (rule, subject)
            plain = self._plain.get((index, subject))
            if plain is not None:
                pub = Publish(plain[0], payload, plain[1], plain[2])
                self._publish(AppMessage(pub, None, self.num), ack)
                return
        rule = self.config.imports[index]
        try:
            imp = imported(
                subject,
                headers,
                origin=self.config.name,
                prefix=self.config.subject_prefix,
                rule_qos=rule.qos,
                rule_retain=rule.retain,
            )
            if imp.properties.payload_format_indicator == 1:
                payload.decode()
        except BadSubject as exc:
            state.bad_input("import_bad_subject", f"not imported: {exc}")
            self._finished(ack, True)
            return
        except (NotOurHeaders, UnicodeDecodeError) as exc:
            state.bad_input("import_bad_headers", f"not imported: subject {subject!r}: {exc}")
            self._finished(ack, True)
            return
        if imp.ours:
            state.counters["import_own"] += 1
            self._finished(ack, True)
            return
        topic = imp.topic.encode()
        if not headers and len(subject) <= CACHED_KEY_MAX:
            if len(self._plain) >= HEAD_CACHE:
                self._plain.clear()
            self._plain[(index, subject)] = (topic, imp.qos, imp.retain)
        pub = Publish(topic, payload, imp.qos, imp.retain, properties=imp.properties)
        self._publish(message_from(pub, self.num, hub.now), ack)

    def _publish(self, msg: AppMessage, ack: Any) -> None:
        """Publish an imported message into the broker; the slot (and the JetStream ack)
        goes back after its commit."""
        hub = self.hub
        state = self.state
        deliveries, plan = hub.plan_publish(msg)
        if plan.empty:
            hub.apply_publish(msg, deliveries, plan)
            state.counters["imported"] += 1
            self._finished(ack, True)
            return

        def committed(ok: bool) -> None:
            if ok:
                hub.persist.after_commit(msg, plan)
                hub.apply_publish(msg, deliveries, plan)
                state.counters["imported"] += 1
            else:
                state.counters["import_failed"] += 1
            self._finished(ack, ok)

        plan.when_committed(committed)

    def _finished(self, ack: Any, ok: bool) -> None:
        link = self._link
        if link is not None:
            link.done(ack, ok)
