"""Opening one MQTT connection: TCP, CONNECT, CONNACK (or the ConnectError saying why not)."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

import anyio
from anyio.abc import ByteStream

from broker.mqtt.connection import Connection, DuplicatePublish, Role
from broker.mqtt.errors import MQTTProtocolError
from broker.mqtt.packets import Connack, Connect, Packet
from client.errors import ConnectError

READ_SIZE = 65536


@dataclass
class Opened:
    stream: ByteStream  # a TCP stream, or TLS over one
    conn: Connection
    connack: Connack
    #: packets that came in the same reads as the CONNACK (a resumed session's queue)
    leftover: list[Packet | DuplicatePublish]


async def open_connection(
    host: str, port: int, connect: Connect, timeout: float, tls: ssl.SSLContext | None = None
) -> Opened:
    """TCP (and TLS with ``tls``: the server's certificate checked against ``host``),
    CONNECT, CONNACK."""
    where = f"mqtt{'s' if tls is not None else ''}://{host}:{port}"
    stream: ByteStream
    try:
        with anyio.fail_after(timeout):
            if tls is None:
                stream = await anyio.connect_tcp(host, port)
            else:
                stream = await anyio.connect_tcp(
                    host, port, ssl_context=tls, tls_hostname=host, tls_standard_compatible=False
                )
    except TimeoutError:
        raise ConnectError(f"cannot connect to {where}: timed out") from None
    except ssl.SSLError as exc:
        reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
        raise ConnectError(f"cannot connect to {where}: TLS: {reason}") from None
    except OSError as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        reason = os.strerror(cause.errno) if cause.errno else str(cause)
        raise ConnectError(f"cannot connect to {where}: {reason}") from None
    conn = Connection(Role.CLIENT)
    connack: Connack | None = None
    leftover: list[Packet | DuplicatePublish] = []
    try:
        with anyio.fail_after(timeout):
            await stream.send(conn.send(connect))
            while connack is None:
                try:
                    data = await stream.receive(READ_SIZE)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    raise ConnectError(
                        f"cannot connect to {where}: closed before CONNACK"
                    ) from None
                for event in conn.receive_data(data):
                    if connack is None and isinstance(event, Connack):
                        connack = event
                    else:
                        leftover.append(event)
    except TimeoutError:
        await stream.aclose()
        raise ConnectError(f"cannot connect to {where}: no CONNACK in time") from None
    except MQTTProtocolError as exc:
        await stream.aclose()
        raise ConnectError(f"cannot connect to {where}: {exc}") from None
    except BaseException:
        await stream.aclose()
        raise
    code = connack.reason_code
    if code.is_error:
        await stream.aclose()
        text = connack.properties.reason_string or code.name.replace("_", " ").lower()
        raise ConnectError(f"connection refused by {where}: 0x{int(code):02X} {text}", code)
    return Opened(stream, conn, connack, leftover)
