"""MQTT clients for tests that run a real ``Broker`` in their own ``trio.run`` (MockClock,
or reaching into the hub): on an in-memory trio stream, or on one end of a TCP pair whose
other end is handed to the broker the way the accept loop does it."""

from __future__ import annotations

import socket

import trio
import trio.testing

from broker.mqtt.connection import Connection, Role
from broker.mqtt.packet_types import ProtocolVersion
from broker.mqtt.packets import Connack, Connect, Packet, Suback, Subscribe, Subscription
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.net.runtime import Broker
from broker.net.transport import prepare_socket

V5 = ProtocolVersion.MQTT_5


class MemClient:
    """An MQTT client on an in-memory stream, driven by our codec's client role."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.proto = Connection(Role.CLIENT)
        self.inbox: list[Packet] = []
        self.connack_properties = Properties()

    @classmethod
    async def connect(cls, broker: Broker, client_id: str, **kwargs: object) -> MemClient:
        client_side, server_side = trio.testing.memory_stream_pair()
        broker.spawn_connection(server_side)
        client = cls(client_side)
        properties = kwargs.pop("properties", Properties())
        await client.send(Connect(V5, client_id, properties=properties, **kwargs))  # type: ignore[arg-type]
        connack = await client.next()
        assert isinstance(connack, Connack)
        assert connack.reason_code is ReasonCode.SUCCESS
        client.connack_properties = connack.properties
        return client

    async def send(self, packet: Packet) -> None:
        await self.stream.send_all(self.proto.send(packet))

    async def next(self) -> Packet:
        while not self.inbox:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the broker closed the connection")
            self.inbox.extend(self.proto.receive_data(bytes(data)))  # type: ignore[arg-type]
        return self.inbox.pop(0)

    async def subscribe(self, topic_filter: bytes) -> None:
        await self.send(Subscribe(1, (Subscription(topic_filter, 0),)))
        assert isinstance(await self.next(), Suback)

    async def abort(self) -> None:
        """Close the socket without DISCONNECT."""
        await self.stream.aclose()


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on 127.0.0.1 (client end, accepted end)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _addr = listener.accept()
    return client, accepted


class SockClient:
    """The client end of a socket pair, through our codec's client role."""

    def __init__(
        self,
        broker: Broker,
        client_id: str,
        keep_alive: int = 0,
        *,
        after: bytes = b"",
        written: int | None = None,
        connect: Connect | None = None,
    ) -> None:
        """Connect, with ``after`` pipelined behind the CONNECT; only the first ``written``
        bytes of it all are in the socket when the broker accepts (``rest`` is the rest)."""
        ours, theirs = tcp_pair()
        self.proto = Connection(Role.CLIENT)
        hello = connect or Connect(V5, client_id, True, keep_alive)
        wire = self.proto.send(hello) + after
        cut = len(wire) if written is None else written
        ours.sendall(wire[:cut])
        self.rest = wire[cut:]
        self.raw = ours  # for writes that must not yield to the broker's tasks
        self.sock = trio.socket.from_stdlib_socket(ours)
        self.inbox: list[Packet] = []
        broker.spawn_connection(prepare_socket(theirs))

    async def next(self) -> Packet | None:
        """The next packet from the broker, None once it closed the connection."""
        while not self.inbox:
            data = await self.sock.recv(65536)
            if not data:
                return None
            self.inbox.extend(p for p in self.proto.receive_data(data) if isinstance(p, Packet))
        return self.inbox.pop(0)

    async def send(self, packet: Packet) -> None:
        await self.sock.send(self.proto.send(packet))

    def close(self) -> None:
        self.sock.close()
