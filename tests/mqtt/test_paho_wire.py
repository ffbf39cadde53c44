"""The codec against a real client: paho-mqtt over a localhost socket (port 0), with our
server Connection on the other end. Checks that what paho sends decodes to the packets
we expect and that what we encode is what paho understands (3.1.1 and 5.0).

Rules: localhost, port 0, a socket timeout on every read, paho's own network thread
stopped and joined at the end of each test.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from broker.mqtt.codec import EncodedPublish
from broker.mqtt.connection import Connection, Event
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
)
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode

TIMEOUT = 10.0


class Peer:
    """Our server side of one accepted socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.conn = Connection()
        self.pending: list[Event] = []

    def next_event(self) -> Event:
        while not self.pending:
            data = self.sock.recv(65536)
            assert data, "paho closed the connection"
            self.pending.extend(self.conn.receive_data(data))
        return self.pending.pop(0)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


@contextmanager
def paho_client(
    protocol: MQTTProtocolVersion,
) -> Iterator[tuple[paho.Client, Peer, list[paho.MQTTMessage], threading.Event]]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT)
    port = listener.getsockname()[1]
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="paho-1", protocol=protocol)
    received: list[paho.MQTTMessage] = []
    arrived = threading.Event()

    def on_message(_c: paho.Client, _u: object, message: paho.MQTTMessage) -> None:
        received.append(message)
        arrived.set()

    client.on_message = on_message
    client.connect_async("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        sock, _ = listener.accept()
        sock.settimeout(TIMEOUT)
        with sock:
            yield client, Peer(sock), received, arrived
    finally:
        client.loop_stop()
        listener.close()


def _wait(predicate: threading.Event) -> None:
    assert predicate.wait(TIMEOUT)


@pytest.mark.timeout(30)
def test_paho_3_1_1_session() -> None:
    with paho_client(paho.MQTTv311) as (client, peer, received, arrived):
        connect = peer.next_event()
        assert isinstance(connect, Connect)
        assert connect.protocol_version is ProtocolVersion.MQTT_3_1_1
        assert (connect.client_id, connect.keep_alive) == ("paho-1", 30)
        peer.send(peer.conn.send(Connack()))

        client.subscribe("a/#", qos=1)
        subscribe = peer.next_event()
        assert isinstance(subscribe, Subscribe)
        assert subscribe.subscriptions[0].filter == b"a/#"
        assert subscribe.subscriptions[0].qos == 1
        peer.send(peer.conn.send(Suback(subscribe.packet_id, (ReasonCode.GRANTED_QOS_1,))))

        info = client.publish("a/b", b"hello", qos=1, retain=True)
        publish = peer.next_event()
        assert isinstance(publish, Publish)
        assert (publish.topic, publish.payload, publish.qos, publish.retain) == (
            b"a/b",
            b"hello",
            1,
            True,
        )
        assert publish.packet_id is not None
        peer.send(peer.conn.send(Puback(publish.packet_id)))
        info.wait_for_publish(TIMEOUT)
        assert info.is_published()

        pid = peer.conn.next_packet_id()
        peer.send(peer.conn.send(Publish(b"a/c", b"back", 1, packet_id=pid)))
        _wait(arrived)
        assert (received[0].topic, received[0].payload, received[0].qos) == ("a/c", b"back", 1)
        ack = peer.next_event()
        assert ack == Puback(pid)
        assert peer.conn.inflight_count == 0

        client.disconnect()
        assert peer.next_event() == Disconnect()
        assert peer.conn.closed


@pytest.mark.timeout(30)
def test_paho_5_properties_aliases_and_identifiers() -> None:
    with paho_client(paho.MQTTv5) as (client, peer, received, arrived):
        connect = peer.next_event()
        assert isinstance(connect, Connect)
        assert connect.protocol_version is ProtocolVersion.MQTT_5
        # Offer paho topic aliases; paho offers us none unless asked, so we use none.
        peer.send(peer.conn.send(Connack(properties=Properties(topic_alias_maximum=5))))

        sub_props = PahoProperties(PacketTypes.SUBSCRIBE)  # type: ignore[no-untyped-call]
        sub_props.SubscriptionIdentifier = 7
        client.subscribe("s/#", qos=0, properties=sub_props)
        subscribe = peer.next_event()
        assert isinstance(subscribe, Subscribe)
        assert subscribe.properties.subscription_identifiers == (7,)
        peer.send(peer.conn.send(Suback(subscribe.packet_id, (ReasonCode.GRANTED_QOS_0,))))

        pub_props = PahoProperties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        pub_props.UserProperty = [("k", "v1"), ("k", "v2")]
        pub_props.ContentType = "text/plain"
        pub_props.CorrelationData = b"\x00\x01"
        pub_props.ResponseTopic = "reply/here"
        client.publish("s/t", b"payload", qos=0, properties=pub_props)
        publish = peer.next_event()
        assert isinstance(publish, Publish)
        assert publish.topic == b"s/t"
        assert publish.properties.user_properties == (("k", "v1"), ("k", "v2"))
        assert publish.properties.content_type == "text/plain"
        assert publish.properties.correlation_data == b"\x00\x01"
        assert publish.properties.response_topic == "reply/here"

        # Forward it back unchanged, with the subscription identifier (fan-out path).
        message = EncodedPublish(publish, ProtocolVersion.MQTT_5)
        peer.send(
            peer.conn.send_publish(message, qos=0, retain=False, subscription_identifiers=(7,))
        )
        _wait(arrived)
        delivered = received[0]
        assert (delivered.topic, delivered.payload) == ("s/t", b"payload")
        props = delivered.properties
        assert props is not None
        # paho sets its property attributes dynamically.
        assert getattr(props, "UserProperty") == [("k", "v1"), ("k", "v2")]  # noqa: B009
        assert getattr(props, "SubscriptionIdentifier") == [7]  # noqa: B009
        assert getattr(props, "ContentType") == "text/plain"  # noqa: B009

        client.disconnect()
        assert isinstance(peer.next_event(), Disconnect)
