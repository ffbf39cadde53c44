"""paho-mqtt clients with a blocking, test-friendly surface (every wait bounded)."""

from __future__ import annotations

import queue
from typing import Any, TypeAlias

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

TIMEOUT = 10.0
V5 = mqtt.MQTTv5
V311 = mqtt.MQTTv311
V31 = mqtt.MQTTv31
Protocol: TypeAlias = MQTTProtocolVersion


def props(packet: int, **values: Any) -> Properties:
    p = Properties(packet)  # type: ignore[no-untyped-call]  # paho leaves it unannotated
    for name, value in values.items():
        setattr(p, name, value)
    return p


class Paho:
    """One paho client; received messages land in ``messages``."""

    def __init__(
        self,
        port: int,
        client_id: str = "",
        *,
        protocol: Protocol = V5,
        clean_session: bool = True,
        transport: str = "tcp",  # "websockets": MQTT over WebSocket (path /mqtt)
        host: str = "127.0.0.1",
    ) -> None:
        self.port = port
        self.host = host
        self.protocol = protocol
        kwargs: dict[str, Any] = {} if protocol == V5 else {"clean_session": clean_session}
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            transport=transport,  # type: ignore[arg-type]  # a Literal in paho
            **kwargs,
        )
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connack: queue.Queue[tuple[Any, Any, Any]] = queue.Queue()
        self._suback: queue.Queue[list[ReasonCode]] = queue.Queue()
        self._unsuback: queue.Queue[Any] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.client.on_message = lambda _c, _u, m: self.messages.put(m)
        self.client.on_connect = lambda _c, _u, flags, rc, p: self._connack.put((flags, rc, p))
        self.client.on_subscribe = lambda _c, _u, _mid, rcs, _p: self._suback.put(list(rcs))
        self.client.on_unsubscribe = lambda _c, _u, _mid, rcs, _p: self._unsuback.put(rcs)
        self.client.on_disconnect = lambda _c, _u, _f, rc, _p: self.disconnects.put(rc)
        self._started = False

    def connect(
        self,
        *,
        clean_start: bool = True,
        keepalive: int = 60,
        properties: Properties | None = None,
        will: tuple[str, bytes, int, bool, Properties | None] | None = None,
    ) -> tuple[Any, Any, Any]:
        if will is not None:
            topic, payload, qos, retain, will_props = will
            self.client.will_set(topic, payload, qos, retain, will_props)
        kwargs: dict[str, Any] = {"keepalive": keepalive}
        if self.protocol == V5:
            kwargs["clean_start"] = clean_start
            kwargs["properties"] = properties
        self.client.connect(self.host, self.port, **kwargs)
        if not self._started:
            self.client.loop_start()
            self._started = True
        return self._connack.get(timeout=TIMEOUT)

    def subscribe(
        self, topic: str, qos: int = 0, properties: Properties | None = None, **options: Any
    ) -> list[ReasonCode]:
        if self.protocol == V5:
            self.client.subscribe(
                topic, options=SubscribeOptions(qos=qos, **options), properties=properties
            )
        else:
            self.client.subscribe(topic, qos)
        return self._suback.get(timeout=TIMEOUT)

    def unsubscribe(self, topic: str) -> Any:
        self.client.unsubscribe(topic)
        return self._unsuback.get(timeout=TIMEOUT)

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> mqtt.MQTTMessageInfo:
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(TIMEOUT)
        return info

    def get(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self.messages.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def disconnect(
        self, properties: Properties | None = None, reasoncode: int | None = None
    ) -> None:
        if reasoncode is not None:
            self.client.disconnect(
                ReasonCode(PacketTypes.DISCONNECT, identifier=reasoncode), properties
            )
        else:
            self.client.disconnect(properties=properties)
        self.stop()

    def stop(self) -> None:
        if self._started:
            self.client.loop_stop()
            self._started = False

    def kill(self) -> None:
        """Drop the TCP connection without DISCONNECT (an abnormal close)."""
        sock = self.client.socket()
        if sock is not None:
            sock.close()
        self.stop()
