"""Push consumers' idle heartbeats and flow control (spec §1.9.4, ADR-9/ADR-15), which
nats-server does in its delivery layer and so do we (the store echoes the settings).

Heartbeats: a push consumer with ``idle_heartbeat`` whose deliver topic got nothing for
that long gets an empty message with user properties ``Status: 100``, ``Description:
Idle Heartbeat``, ``Nats-Last-Consumer`` / ``Nats-Last-Stream`` (its last delivery), and
``Nats-Consumer-Stalled: <fc topic>`` while a flow control request is unanswered.

Flow control (``flow_control: true``): once half the window (bytes of payload) has been
delivered since the last answer, a ``Status: 100`` ``Description: FlowControl Request``
message goes out with Response Topic ``$JS/FC/<stream>/<consumer>/<4 random chars>``;
once the whole window is delivered without an answer the consumer stalls (the store is
told it has no interest, so it stops delivering) until the client publishes to that
topic (any payload). Each answer doubles the window, from 64 KiB up to 32 MiB.

One timer task per consumer with heartbeats, in the broker's nursery; trio thread only.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import trio

from broker.core.message import AppMessage
from broker.core.sessions import Session
from broker.jetstream.interest import Interest
from broker.jetstream.outbox import Outbox
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from store import Delivery

FC_PREFIX: Final = b"$JS/FC/"
WINDOW_START: Final = 64 * 1024
WINDOW_MAX: Final = 32 * 1024 * 1024

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PushSettings:
    topic: str
    heartbeat_ns: int = 0
    flow_control: bool = False


@dataclass(slots=True)
class _State:
    settings: PushSettings
    last_cseq: int = 0
    last_sseq: int = 0
    active: bool = False  # something went out since the last heartbeat check
    window: int = WINDOW_START
    sent: int = 0  # payload bytes since the last flow control answer
    fc_topic: str = ""  # the unanswered request's topic ("" none)
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)


class PushFlow:
    """Heartbeats and flow control of the push consumers (see module docstring)."""

    def __init__(self, outbox: Outbox, interest: Interest, spawn: Callable[..., None]) -> None:
        self.outbox = outbox
        self.interest = interest
        self.spawn = spawn
        self.states: dict[Key, _State] = {}

    def set_consumers(self, consumers: dict[Key, PushSettings]) -> None:
        """The push consumers now (after an API change or at start)."""
        for key in list(self.states):
            st = self.states[key]
            if consumers.get(key) != st.settings:
                st.cancel.cancel()
                del self.states[key]
                self.interest.set_stalled(key, False)
        for key, settings in consumers.items():
            if key in self.states or not (settings.heartbeat_ns or settings.flow_control):
                continue
            st = self.states[key] = _State(settings)
            if settings.heartbeat_ns:
                self.spawn(self._beat, key, st)

    def delivered(self, d: Delivery) -> None:
        st = self.states.get((d.stream, d.consumer))
        if st is None:
            return
        st.active = True
        st.last_cseq = d.consumer_seq
        st.last_sseq = d.msg.seq
        if not st.settings.flow_control:
            return
        st.sent += len(d.msg.payload)
        if not st.fc_topic and st.sent >= st.window // 2:
            st.fc_topic = f"$JS/FC/{d.stream}/{d.consumer}/{secrets.token_hex(2)}"
            props = Properties(
                response_topic=st.fc_topic,
                user_properties=(("Status", "100"), ("Description", "FlowControl Request")),
            )
            self.outbox.send(st.settings.topic, b"", props)
        if st.fc_topic and st.sent >= st.window:
            self.interest.set_stalled((d.stream, d.consumer), True)

    def publish(self, msg: AppMessage, session: Session | None) -> ReasonCode:
        """A flow control answer (the ``$JS/FC/`` system-topic handler)."""
        topic = msg.topic.decode("utf-8", "replace")
        for key, st in self.states.items():
            if st.fc_topic and st.fc_topic == topic:
                st.fc_topic = ""
                st.sent = 0
                st.window = min(st.window * 2, WINDOW_MAX)
                self.interest.set_stalled(key, False)
                return ReasonCode.SUCCESS
        return ReasonCode.NO_MATCHING_SUBSCRIBERS  # stale or unknown: nothing to do

    async def _beat(self, key: Key, st: _State) -> None:
        period = st.settings.heartbeat_ns / 1e9
        with st.cancel:
            while True:
                await trio.sleep(period)
                if st.active:
                    st.active = False
                    continue
                extra: list[tuple[str, str]] = [
                    ("Status", "100"),
                    ("Description", "Idle Heartbeat"),
                    ("Nats-Last-Consumer", str(st.last_cseq)),
                    ("Nats-Last-Stream", str(st.last_sseq)),
                ]
                if st.fc_topic:
                    extra.append(("Nats-Consumer-Stalled", st.fc_topic))
                if self.interest.push_subscribed(key):
                    self.outbox.send(
                        st.settings.topic, b"", Properties(user_properties=tuple(extra))
                    )
