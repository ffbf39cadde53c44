"""A blocking MQTT test client over a real socket, built on our codec's client role.

Protocol-exact checks (reason codes, topic aliases, windows, DUP flags) need a
client that shows every packet the broker sends; paho hides them. ``send_raw``
bypasses the codec for malformed input.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import Any, TypeVar

from broker.mqtt.connection import Connection, Role
from broker.mqtt.decoder import Decoder
from broker.mqtt.encoder import encode
from broker.mqtt.errors import MQTTProtocolError
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Publish,
    Subscribe,
    Subscription,
)
from broker.mqtt.properties import EMPTY_PROPERTIES, Properties

TIMEOUT = 10.0
P = TypeVar("P")


class Closed(Exception):
    """The broker closed the connection."""


class RawClient:
    def __init__(self, port: int, *, version: ProtocolVersion = ProtocolVersion.MQTT_5) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.version = version
        self.proto = Connection(Role.CLIENT)
        self.inbox: deque[Packet] = deque()
        self.closed = False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending -----------------------------------------------------------------------------

    def send(self, packet: Packet) -> None:
        self.sock.sendall(self.proto.send(packet))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def encode(self, packet: Packet) -> bytes:
        return encode(packet, self.version)

    def connect(
        self,
        client_id: str = "raw",
        *,
        clean_start: bool = True,
        keep_alive: int = 0,
        properties: Properties = EMPTY_PROPERTIES,
        **kwargs: Any,
    ) -> Connack:
        self.send(
            Connect(
                self.version,
                client_id,
                clean_start=clean_start,
                keep_alive=keep_alive,
                properties=properties,
                **kwargs,
            )
        )
        return self.expect(Connack)

    def subscribe(self, *filters: tuple[bytes, int], packet_id: int = 1, **props: Any) -> Packet:
        subs = tuple(Subscription(f, q) for f, q in filters)
        self.send(Subscribe(packet_id, subs, Properties(**props)))
        return self.next()

    def publish(
        self,
        topic: bytes,
        payload: bytes,
        qos: int = 0,
        packet_id: int | None = None,
        retain: bool = False,
        **props: Any,
    ) -> None:
        self.send(Publish(topic, payload, qos, retain, False, packet_id, Properties(**props)))

    # -- receiving ---------------------------------------------------------------------------

    def _read(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            raise Closed
        try:
            self.inbox.extend(self.proto.receive_data(data))  # type: ignore[arg-type]
        except MQTTProtocolError as exc:
            self.inbox.extend(exc.packets)
            raise

    def next(self, timeout: float = TIMEOUT) -> Packet:
        deadline = time.monotonic() + timeout
        while not self.inbox:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no packet from the broker")
            self._read(remaining)
        return self.inbox.popleft()

    def expect(self, kind: type[P], timeout: float = TIMEOUT) -> P:
        packet = self.next(timeout)
        assert isinstance(packet, kind), f"expected {kind.__name__}, got {packet!r}"
        return packet

    def expect_publish(self, timeout: float = TIMEOUT, ack: bool = True) -> Publish:
        packet = self.expect(Publish, timeout)
        if ack and packet.qos == 1 and packet.packet_id is not None:
            self.send(Puback(packet.packet_id))
        return packet

    def expect_disconnect(self, timeout: float = TIMEOUT) -> Disconnect | None:
        """The DISCONNECT the broker sends before closing (None in 3.1.x: just a close)."""
        try:
            packet = self.next(timeout)
        except Closed:
            return None
        assert isinstance(packet, Disconnect), f"expected DISCONNECT, got {packet!r}"
        self.wait_closed(timeout)
        return packet

    def wait_closed(self, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the broker did not close the connection")
            try:
                self.sock.settimeout(remaining)
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.closed = True
                return

    def raw_answer(self, version: ProtocolVersion, timeout: float = TIMEOUT) -> Packet:
        """Decode the broker's next packet without the client machine (after ``send_raw``)."""
        decoder = Decoder(version)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer from the broker")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise Closed
            packets = decoder.feed(data)
            if packets:
                return packets[0]

    def nothing_within(self, seconds: float) -> bool:
        """True if no packet arrives within ``seconds`` (used sparingly, for absence)."""
        try:
            self.next(seconds)
        except TimeoutError:
            return True
        return False
