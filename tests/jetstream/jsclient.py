"""A paho MQTT 5 client speaking JetStream over MQTT for tests (every wait bounded)."""

from __future__ import annotations

import itertools
import json
import queue
import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

TIMEOUT = 10.0
Json = dict[str, Any]


def props(**values: Any) -> Properties:
    p = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(p, name, value)
    return p


def user_props(msg: mqtt.MQTTMessage) -> dict[str, str]:
    p = getattr(msg, "properties", None)
    return dict(getattr(p, "UserProperty", []) or [])


class Acked:
    """A PUBACK (or PUBREC) as paho reports it."""

    def __init__(self, code: int, properties: Any) -> None:
        self.code = code
        self.properties = properties

    @property
    def user(self) -> dict[str, str]:
        return dict(getattr(self.properties, "UserProperty", []) or [])

    @property
    def reason(self) -> str | None:
        return getattr(self.properties, "ReasonString", None)


class JsClient:
    """One MQTT 5 connection: requests with Response Topic + Correlation Data, inboxes."""

    def __init__(self, port: int, client_id: str = "", *, clean_start: bool = True) -> None:
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        self.port = port
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[bytes, queue.Queue[mqtt.MQTTMessage]] = {}
        self.inbox: dict[str, queue.Queue[mqtt.MQTTMessage]] = {}
        self.acks: dict[int, queue.Queue[Acked]] = {}
        self._suback: queue.Queue[Any] = queue.Queue()
        self.client.on_message = self._on_message
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = lambda _c, _u, _m, rcs, _p: self._suback.put(rcs)
        self.client.on_unsubscribe = lambda _c, _u, _m, rcs, _p: self._suback.put(rcs)
        connected: queue.Queue[Any] = queue.Queue()
        self.client.on_connect = lambda _c, _u, _f, rc, _p: connected.put(rc)
        self.client.connect("127.0.0.1", port, clean_start=clean_start)
        self.client.loop_start()
        rc = connected.get(timeout=TIMEOUT)
        assert not rc.is_failure, rc
        self.reply_topic = f"_INBOX/{id(self)}"
        self.subscribe(self.reply_topic, 1)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _on_message(self, _c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        cd = getattr(msg.properties, "CorrelationData", None)
        with self._lock:
            if cd is not None and cd in self._waiting:
                self._waiting[cd].put(msg)
                return
            self.inbox.setdefault(msg.topic, queue.Queue()).put(msg)

    def _on_publish(self, _c: Any, _u: Any, mid: int, rc: Any, properties: Any) -> None:
        with self._lock:
            self.acks.setdefault(mid, queue.Queue()).put(Acked(rc.value, properties))

    def subscribe(self, topic: str, qos: int = 1) -> Any:
        self.client.subscribe(topic, qos)
        return self._suback.get(timeout=TIMEOUT)

    def unsubscribe(self, topic: str) -> Any:
        self.client.unsubscribe(topic)
        return self._suback.get(timeout=TIMEOUT)

    def publish(
        self, topic: str, payload: bytes | str = b"", qos: int = 1, **properties: Any
    ) -> Acked | None:
        """Publish and (QoS > 0) wait for its PUBACK / PUBREC outcome."""
        p = props(**properties) if properties else None
        with self._lock:
            info = self.client.publish(topic, payload, qos, properties=p)
            q = self.acks.setdefault(info.mid, queue.Queue())
        if not qos:
            return None
        return q.get(timeout=TIMEOUT)

    def request_raw(
        self, topic: str, body: bytes | str = b"", qos: int = 1, timeout: float = TIMEOUT
    ) -> tuple[mqtt.MQTTMessage, Acked | None]:
        cd = f"c{next(self._ids)}".encode()
        q: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        with self._lock:
            self._waiting[cd] = q
        try:
            acked = self.publish(
                topic, body, qos, ResponseTopic=self.reply_topic, CorrelationData=cd
            )
            return q.get(timeout=timeout), acked
        finally:
            with self._lock:
                self._waiting.pop(cd, None)

    def request_with(
        self,
        topic: str,
        body: bytes,
        cd: bytes,
        timeout: float = TIMEOUT,
        qos: int = 1,
        **properties: Any,
    ) -> mqtt.MQTTMessage:
        """Publish ``body`` to ``topic`` with our Response Topic, Correlation Data ``cd``
        and ``properties``; the answer."""
        q: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        with self._lock:
            self._waiting[cd] = q
        try:
            self.publish(
                topic, body, qos, ResponseTopic=self.reply_topic, CorrelationData=cd, **properties
            )
            return q.get(timeout=timeout)
        finally:
            with self._lock:
                self._waiting.pop(cd, None)

    def request(self, subject: str, body: Json | bytes | str = b"") -> Json:
        """``$JS.API.<x>`` as ``$JS/API/<x>``: the JSON answer."""
        data = json.dumps(body) if isinstance(body, dict) else body
        topic = subject.replace(".", "/")
        msg, _ = self.request_raw(topic, data)
        out: Json = json.loads(msg.payload)
        return out

    def next_msg(self, topic: str, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        with self._lock:
            q = self.inbox.setdefault(topic, queue.Queue())
        return q.get(timeout=timeout)

    def nothing_on(self, topic: str, seconds: float) -> bool:
        with self._lock:
            q = self.inbox.setdefault(topic, queue.Queue())
        try:
            q.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


def ok(acked: Acked | None) -> Acked:
    """The PUBACK of a QoS 1 PUBLISH, which must be a success."""
    assert acked is not None
    assert acked.code == 0, (hex(acked.code), acked.reason)
    return acked
