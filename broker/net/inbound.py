"""What a connection does with the packets a client sends once connected: PUBLISH (with
its acknowledgement after the commit), the acknowledgements of outbound copies, SUBSCRIBE
(with the retained messages it brings), UNSUBSCRIBE and DISCONNECT.

One ``Inbound`` per connection, composed into :class:`broker.net.connection.ClientConnection`;
what it sends goes through the connection's :class:`broker.net.output.Output`, in the
order of the ordered pipeline.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Final

import trio

import radix
import store
from broker.core.hub import RETAINED_AT_ONCE, make_handle
from broker.core.message import AppMessage, Outgoing, message_from
from broker.core.sessions import Session, SubscriptionRecord
from broker.core.systopics import Outcome, Pending, reserved_prefix
from broker.mqtt.connection import DuplicatePublish
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Disconnect,
    Puback,
    Publish,
    Pubrec,
    Pubrel,
    RetainHandling,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.mqtt.session import pubcomp_for
from broker.net.output import NOT_STORED
from broker.persist.client import StorageError, wait_future

if TYPE_CHECKING:
    from broker.core.hub import Hub
    from broker.core.ports import Plan
    from broker.core.router import Delivery
    from broker.core.stats import Stats
    from broker.jetstream.headers import HeaderError
    from broker.net.link import Link
    from broker.net.output import Output
    from broker.persist.state import Persistence

log = logging.getLogger("jetmq.client")

_V5: Final = ProtocolVersion.MQTT_5
_WILDCARDS: Final = (b"+", b"#")
# SUBACK codes by granted QoS (an Enum call per subscription is measurable in a storm).
# Read per PUBLISH: Final, so that compiled (hotpath) each is a C static.
_EMPTY: Final = EMPTY_PROPERTIES
_SUCCESS: Final = ReasonCode.SUCCESS
_NO_MATCHING: Final = ReasonCode.NO_MATCHING_SUBSCRIBERS
_GRANTED: Final = (ReasonCode.GRANTED_QOS_0, ReasonCode.GRANTED_QOS_1, ReasonCode.GRANTED_QOS_2)
_NORMAL: Final = ReasonCode.NORMAL_DISCONNECTION
_WITH_WILL: Final = ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
_NORMAL_GOODBYE: Final = "DISCONNECT from the client (0x00)"  # (made once: most are 0x00)


class Inbound:
    """Packet handling of one connected client (see module docstring)."""

    __slots__ = ("conn", "hub", "out", "persist", "stats", "tokens", "tokens_at", "told_reserved")

    def __init__(self, conn: Link, out: Output) -> None:
        self.conn = conn
        self.out = out
        # The broker's parts that never change, typed (native reads when compiled; the
        # Host protocol's are generic attribute lookups): see Output.
        self.hub: Hub = out.hub
        self.persist: Persistence = out.persist
        self.stats: Stats = out.stats
        self.told_reserved = False  # a 3.1.x publish to a reserved topic was logged
        # [limits] max_publish_rate: a token bucket holding one second's worth.
        self.tokens = -1.0  # not started
        self.tokens_at = 0.0

    def _over_rate(self, rate: float) -> bool:
        """Take a token; True when the client publishes faster than ``rate`` per second
        (bursts up to one second's worth pass)."""
        now = trio.current_time()
        tokens = self.tokens
        if tokens < 0:
            tokens = rate
        else:
            tokens = min(rate, tokens + (now - self.tokens_at) * rate)
        self.tokens_at = now
        if tokens < 1:
            self.tokens = tokens
            return True
        self.tokens = tokens - 1
        return False

    # == PUBLISH ==========================================================================

    def _publish_refusal(self, p: Publish) -> tuple[ReasonCode, str] | None:
        """Checks beyond topic syntax (which the radix match validates [MQTT-3.3.2-2])."""
        if p.topic.startswith(b"$"):
            prefix = reserved_prefix(p.topic)
            if prefix is not None:
                return (
                    ReasonCode.TOPIC_NAME_INVALID,
                    f"{prefix.decode()} topics are reserved to the broker",
                )
        if (
            p.properties.payload_format_indicator == 1
            and self.conn.broker.config.mqtt.validate_utf8_payload
        ):
            try:
                p.payload.decode("utf-8")
            except UnicodeDecodeError:
                return ReasonCode.PAYLOAD_FORMAT_INVALID, "payload is not UTF-8 as its format says"
        return None

    def on_publish(self, p: Publish) -> None:
        conn = self.conn
        session = conn.session
        assert session is not None
        broker = conn.broker
        stats = self.stats
        stats.publish_received += 1
        stats.publish_bytes_received += len(p.payload)
        topic = p.topic
        qos = p.qos
        access = session.access
        if access is not None and not access.may_write(topic):
            self._not_authorised(p)
            return
        rate = broker.settings.max_publish_rate
        if rate and self._over_rate(rate):
            self._over_publish_rate(p)
            return
        hub = self.hub
        dollar = topic.startswith(b"$")
        if dollar:
            handler = hub.systopics.handler_for(topic)
            if handler is not None:  # a system topic: its handler, not the router
                code = handler.publish(message_from(p, session.num, trio.current_time), session)
                if isinstance(code, ReasonCode):
                    rc = code
                    if qos:
                        self.out.step(None, lambda: self.out.send(self._ack(p, rc)))
                    return
                self._answer_later(p, code)
                return
        # (_publish_refusal checks a "$" topic and properties: the common case has neither)
        plain = p.properties is _EMPTY
        if dollar or not plain:
            refusal = self._publish_refusal(p)
            if refusal is not None:
                self._refuse_publish(p, *refusal)
                return
        # (message_from's answer for a PUBLISH without properties, made here directly)
        msg = (
            AppMessage(p, None, session.num)
            if plain
            else message_from(p, session.num, trio.current_time)
        )
        pid = p.packet_id
        extra: Sequence[store.Op] = (
            self.persist.qos2_received(session, pid) if qos == 2 and pid else ()
        )
        js = broker.jetstream
        captured = None  # the stream capture's operation (broker.jetstream.capture)
        if js is not None and js.capture.subjects:
            captured = js.capture.op_for(p)
            if isinstance(captured, store.Publish):
                extra = [*extra, captured]
        try:
            deliveries, plan = hub.plan_publish(msg, extra)
        except radix.TopicError as exc:
            self._refuse_publish(p, ReasonCode.TOPIC_NAME_INVALID, f"invalid topic: {exc}")
            return
        code = _SUCCESS if deliveries else _NO_MATCHING
        if plan.empty and captured is None and self.out.idle():
            # Nothing to store and no earlier step waiting: deliver and acknowledge now,
            # without the two closures below (the common QoS 0/1 case without sessions).
            hub.apply_publish(msg, deliveries, plan)
            if qos:
                stats.publish_ack.observe_zero()
                self._acknowledge(p, code)
            return
        self._after_plan(p, msg, deliveries, plan, code, captured, len(extra))

    def _after_plan(
        self,
        p: Publish,
        msg: AppMessage,
        deliveries: list[Delivery],
        plan: Plan,
        code: ReasonCode,
        captured: store.Publish | HeaderError | None,
        n_extra: int,
    ) -> None:
        """The PUBLISH's step: deliver and acknowledge once its plan is committed. (Its
        own method: the closures' cells would otherwise slow every ``on_publish``.)"""
        broker = self.conn.broker
        stats = self.stats
        js = broker.jetstream
        session = self.conn.session
        assert session is not None
        pid = p.packet_id
        # PUBLISH -> acknowledgement latency: a clock read only when a commit is waited for
        # (an acknowledgement with nothing to store counts as zero).
        started = perf_counter() if p.qos and not plan.empty else 0.0

        def then() -> None:
            self.persist.after_commit(msg, plan)
            self.hub.apply_publish(msg, deliveries, plan)
            if started:
                stats.publish_ack.observe(perf_counter() - started)
            elif p.qos:
                stats.publish_ack.observe_zero()
            if captured is not None and js is not None:
                # Its result is the last of the extra operations, which the plan's begin.
                res = plan.result(n_extra - 1) if isinstance(captured, store.Publish) else captured
                o = js.captured(p, res)
                if p.qos == 2 and pid and o.code.is_error:  # the exchange ends here
                    self.persist.qos2_released(session, pid)
                if p.qos:
                    self.out.send(self._ack(p, o.code, o.reason, o.user_properties))
            elif p.qos:
                self._acknowledge(p, code)

        def not_stored() -> None:
            self.not_stored(p)

        self.out.step(None if plan.empty else plan, then, not_stored)

    def not_stored(self, p: Publish) -> None:
        """``p``'s commit failed: not stored, so not delivered. MQTT 5 is told (0x80, the
        exchange ends); a 3.1.x client gets no acknowledgement and is disconnected, so it
        sends it again."""
        if p.qos and self.conn.version is _V5:
            self.out.send(self._ack(p, ReasonCode.UNSPECIFIED_ERROR, NOT_STORED))
        elif p.qos:
            self.out.storage_failed()

    def _acknowledge(self, p: Publish, code: ReasonCode) -> None:
        """PUBACK/PUBREC of a routed QoS 1/2 PUBLISH (a plain success PUBACK from the
        codec's shortcut)."""
        packet_id = p.packet_id
        if p.qos == 1 and code is _SUCCESS:
            assert packet_id is not None
            self.out.send_puback(packet_id)
        else:
            self.out.send(self._ack(p, code))

    def _answer_later(self, p: Publish, pending: Pending) -> None:
        """A system topic's answer that waits for its work (a commit): the PUBACK/PUBREC,
        in pipeline order, carries its outcome."""
        got: list[Outcome] = []

        async def wait() -> None:
            got.append(await pending.outcome())

        def then() -> None:
            if p.qos and got:
                o = got[0]
                self.out.send(self._ack(p, o.code, o.reason, o.user_properties))

        def failed() -> None:
            if p.qos:
                self.out.send(self._ack(p, ReasonCode.UNSPECIFIED_ERROR, NOT_STORED))

        self.out.step(wait, then, failed)

    def _over_publish_rate(self, p: Publish) -> None:
        """Past ``max_publish_rate``: PUBACK/PUBREC 0x97 Quota exceeded for QoS 1/2 (v5);
        QoS 0 (which has no acknowledgement) and 3.1.x: DISCONNECT 0x96 Message rate too
        high (3.1.x: a close)."""
        if p.qos and self.conn.version is _V5:
            reason = "max_publish_rate exceeded"
            ack = self._ack(p, ReasonCode.QUOTA_EXCEEDED, reason)
            self.out.step(None, lambda: self.out.send(ack))
            return
        session = self.conn.session
        log.warning(
            "client %r published faster than max_publish_rate: disconnected (0x96)",
            session.client_id if session is not None else "-",
        )
        self.conn.disconnect(ReasonCode.MESSAGE_RATE_TOO_HIGH, "max_publish_rate exceeded")

    def _not_authorised(self, p: Publish) -> None:
        """A PUBLISH the ACL denies: PUBACK/PUBREC 0x87 (v5); 3.1.x cannot be told, so it
        is acknowledged and dropped, as mosquitto does. Logged once per connection."""
        if not self.told_reserved:
            self.told_reserved = True
            session = self.conn.session
            log.warning(
                "client %r may not publish to %r (ACL): dropped",
                session.client_id if session is not None else "-",
                p.topic.decode("utf-8", "replace"),
            )
        if not p.qos:
            return
        if self.conn.version is not _V5:
            code = ReasonCode.SUCCESS
        elif self.conn.broker.config.auth.hide_denials:
            code = ReasonCode.UNSPECIFIED_ERROR
        else:
            code = ReasonCode.NOT_AUTHORIZED
        reason = None if code is ReasonCode.UNSPECIFIED_ERROR else "not authorised (ACL)"
        self.out.step(None, lambda: self.out.send(self._ack(p, code, reason)))

    def duplicate_publish(self, event: DuplicatePublish) -> None:
        pid = event.publish.packet_id
        assert pid is not None
        # Still awaiting PUBREL: answer again, deliver nothing [MQTT-4.3.3-10].
        self.out.step(None, lambda: self.out.send(Pubrec(pid)))

    def _refuse_publish(self, p: Publish, code: ReasonCode, reason: str) -> None:
        """Not delivered: PUBACK/PUBREC with the reason (v5, QoS > 0), else DISCONNECT
        with it; a 3.1.x client cannot be told why, so it is acknowledged (for a reserved
        ``$`` topic) or disconnected (for anything malformed)."""
        if p.qos and self.conn.version is _V5:
            self.out.step(None, lambda: self.out.send(self._ack(p, code, reason)))
            return
        if code is ReasonCode.TOPIC_NAME_INVALID and reserved_prefix(p.topic) is not None:
            # 3.1.x has no way to refuse a PUBLISH but a close; mosquitto acknowledges a
            # denied one and drops it. The operator hears of it, once per connection.
            if not self.told_reserved:
                self.told_reserved = True
                session = self.conn.session
                log.warning(
                    "client %r published to reserved topic %r: dropped (%s)",
                    session.client_id if session is not None else "-",
                    p.topic.decode("utf-8", "replace"),
                    reason,
                )
            if p.qos:
                self.out.step(None, lambda: self.out.send(self._ack(p, ReasonCode.SUCCESS)))
            return
        self.conn.disconnect(code, reason)

    def _ack(
        self,
        p: Publish,
        code: ReasonCode,
        reason: str | None = None,
        user_properties: tuple[tuple[str, str], ...] = (),
    ) -> Puback | Pubrec:
        pid = p.packet_id
        assert pid is not None
        if self.conn.version is not _V5:
            code = ReasonCode.SUCCESS
            reason, user_properties = None, ()
        if not self.conn.problem_info:  # [MQTT-3.1.2-29]: neither on a PUBACK/PUBREC
            reason, user_properties = None, ()
        props = (
            Properties(reason_string=reason, user_properties=user_properties)
            if reason or user_properties
            else EMPTY_PROPERTIES
        )
        return Puback(pid, code, props) if p.qos == 1 else Pubrec(pid, code, props)

    def on_pubrel(self, p: Pubrel) -> None:
        session = self.conn.session
        assert session is not None
        known = p.packet_id in session.state.inbound_qos2
        fut = self.persist.qos2_released(session, p.packet_id) if known else None
        wait = None if fut is None else (lambda: wait_future(fut))
        self.out.step(wait, lambda: self.out.send(pubcomp_for(p, known)))

    # == outbound acknowledgements ================================================================

    def copy_acknowledged(self, packet_id: int) -> None:
        """PUBACK / PUBCOMP (or a PUBREC with an error): the copy is done [MQTT-4.4.0-2]."""
        session = self.conn.session
        assert session is not None
        og = session.outgoing.pop(packet_id, None)
        if og is not None:
            self.persist.copy_done(session, og)
            if session.queue:
                self.out.wake()  # the window has room for a queued copy

    def on_pubrec(self, p: Pubrec) -> None:
        session = self.conn.session
        assert session is not None
        pid = p.packet_id
        if p.reason_code.is_error:
            self.copy_acknowledged(pid)
            return
        og = session.outgoing.get(pid)
        if og is None:
            self.out.send(Pubrel(pid, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            return
        persist = self.persist
        entries = [(og, pid, 2)]
        fut = persist.stage_copies(session, entries) if og.pend_seq else None

        async def recorded() -> None:
            assert fut is not None
            persist.stages_committed(entries, await wait_future(fut))

        self.out.step(None if fut is None else recorded, lambda: self.out.send(Pubrel(pid)))

    # == subscriptions ============================================================================

    def on_subscribe(self, p: Subscribe) -> None:
        broker = self.conn.broker
        cfg = broker.config.mqtt
        session = self.conn.session
        assert session is not None
        sub_ids = p.properties.subscription_identifiers
        sub_id = sub_ids[0] if sub_ids else 0
        if sub_id and not cfg.subscription_identifiers_available:
            self.conn.disconnect(
                ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
                "subscription identifiers are not available",
            )
            return
        v5 = self.conn.version is _V5
        codes: list[ReasonCode] = []
        granted: list[tuple[SubscriptionRecord, bytes, bool]] = []
        added: list[SubscriptionRecord] = []
        for sub in p.subscriptions:
            try:
                share, flt = radix.validate_filter(sub.filter)
            except radix.TopicError:
                codes.append(
                    ReasonCode.TOPIC_FILTER_INVALID if v5 else ReasonCode.UNSPECIFIED_ERROR
                )
                continue
            access = session.access
            if access is not None and not access.may_subscribe(flt):
                codes.append(
                    ReasonCode.NOT_AUTHORIZED
                    if v5 and not broker.config.auth.hide_denials
                    else ReasonCode.UNSPECIFIED_ERROR
                )
                continue
            most = broker.config.limits.max_subscriptions_per_client
            if (
                most
                and len(session.subscriptions) >= most
                and sub.filter not in session.subscriptions
            ):
                codes.append(ReasonCode.QUOTA_EXCEEDED if v5 else ReasonCode.UNSPECIFIED_ERROR)
                continue
            if share is not None and not cfg.shared_subscriptions_available:
                codes.append(ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            if not cfg.wildcard_subscription_available and any(
                level in _WILDCARDS for level in flt.split(b"/")
            ):
                codes.append(ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            qos = min(sub.qos, cfg.maximum_qos)
            record = SubscriptionRecord(
                sub.filter,
                qos,
                sub.no_local,
                sub.retain_as_published,
                int(sub.retain_handling),
                sub_id,
                make_handle(sub, qos, sub_id),
            )
            is_new = self.hub.subscribe(session, record)
            codes.append(_GRANTED[qos])
            added.append(record)
            if share is None:
                granted.append((record, flt, is_new))
        fut = self.persist.save_subscriptions(session, added) if session.stored else None
        wait: Callable[[], Awaitable[object]] | None = None
        retained = self.hub.last_retained_plan() if granted else None
        if retained is not None:

            async def wait() -> None:
                if fut is not None:
                    await wait_future(fut)
                # Read-after-write: a retained update read before this SUBSCRIBE is
                # committed (or failed) before the retained set is read (Hub.retained_for).
                with contextlib.suppress(StorageError):
                    await retained.wait()

        elif fut is not None:
            wait = lambda: wait_future(fut)  # noqa: E731
        pid = p.packet_id

        def then() -> None:
            self.out.send(Suback(pid, tuple(codes)))
            self._send_retained(session, granted)

        self.out.step(wait, then)

    def _send_retained(
        self, session: Session, granted: list[tuple[SubscriptionRecord, bytes, bool]]
    ) -> None:
        """Retained messages for new subscriptions per Retain Handling [MQTT-3.3.1-9..11]."""
        now = trio.current_time()
        for record, flt, is_new in granted:
            rh = record.retain_handling
            if rh == RetainHandling.DO_NOT_SEND or (
                rh == RetainHandling.SEND_IF_NEW_SUBSCRIPTION and not is_new
            ):
                continue
            sub_ids = (record.sub_id,) if record.sub_id else ()
            messages = self.hub.retained_for(flt)
            if session.retained_backlog is not None or not self._retained_fit(messages):
                self.hub.pace_retained(session, messages, record.qos, sub_ids)
                self.out.wake()
                continue
            access = session.access
            for msg in messages:
                if access is not None and not access.may_read(msg.topic):
                    continue
                qos = min(msg.qos, record.qos)
                if qos == 0:
                    self.out.send_qos0(msg, True, sub_ids, now)
                else:
                    self.hub.queue_copy(session, Outgoing(msg, qos, True, sub_ids))

    def _retained_fit(self, messages: Sequence[AppMessage]) -> bool:
        """Whether ``messages`` can go out at once without a copy limit cutting them short
        (else they are paced): at most ``RETAINED_AT_ONCE``, within what is left of
        ``max_outbound_queue`` for QoS 0 copies and of ``max_queued_messages`` /
        ``max_queued_bytes`` for QoS 1/2 ones."""
        n = len(messages)
        if n > RETAINED_AT_ONCE:
            return False
        broker = self.conn.broker
        queues = self.hub.queues
        session = self.conn.session
        assert session is not None
        if self.out.qos0_pending + n > broker.settings.max_outbound_queue:
            return False
        if queues.max_messages and session.queued + n > queues.max_messages:
            return False
        return (
            not queues.max_bytes
            or session.queued_bytes + sum(len(m.payload) for m in messages) <= queues.max_bytes
        )

    def on_unsubscribe(self, p: Unsubscribe) -> None:
        session = self.conn.session
        assert session is not None
        codes: list[ReasonCode] = []
        removed: list[bytes] = []
        for flt in p.filters:
            try:
                radix.validate_filter(flt)
            except radix.TopicError:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            found = self.hub.unsubscribe(session, flt)
            codes.append(ReasonCode.SUCCESS if found else ReasonCode.NO_SUBSCRIPTION_EXISTED)
            if found:
                removed.append(flt)
        fut = self.persist.remove_subscriptions(session, removed) if session.stored else None
        wait = None if fut is None else (lambda: wait_future(fut))
        pid = p.packet_id
        self.out.step(wait, lambda: self.out.send(Unsuback(pid, tuple(codes))))

    def on_disconnect(self, p: Disconnect) -> None:
        conn = self.conn
        session = conn.session
        assert session is not None
        conn.peer_gone = True  # it said goodbye: nothing more comes, no need to linger
        code = p.reason_code
        if code is _NORMAL:
            conn.close_reason = _NORMAL_GOODBYE
        else:
            conn.close_reason = f"DISCONNECT from the client (0x{int(code):02x})"
        # 0x04: the client asks for its will [MQTT-3.14.4-3 otherwise discards it].
        conn.send_will = code == _WITH_WILL
        expiry = p.properties.session_expiry_interval
        if expiry is not None:
            cap = conn.broker.config.mqtt.max_session_expiry_interval
            was_persistent = session.persistent
            session.expiry_interval = min(expiry, cap)
            if session.persistent:
                self.persist.save_session(session)
            elif was_persistent:
                self.persist.session_ended(session, ())
        self.out.close_soon()
