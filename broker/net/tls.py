"""TLS for listeners: the server's ``ssl.SSLContext`` from ``tls = {...}`` and what a
TLS (or WebSocket) stream tells about its peer (address, client certificate).

A handshake runs in the connection's own task (trio's ``SSLStream`` shakes hands on the
first read, inside the CONNECT timeout): a failed or slow one costs that socket only.
ALPN: ``mqtt`` on MQTT listeners (chosen when the client offers it), ``http/1.1`` on
WebSocket ones.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Any

import trio

from broker.config import TlsConfig


class TlsSetupError(OSError):
    """A certificate, key or CA that cannot be loaded (the broker refuses to start)."""


def server_context(tls: TlsConfig, alpn: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if tls.min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    )
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
        if tls.ca:
            ctx.load_verify_locations(tls.ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"tls: cannot load certificate, key or ca: {exc}") from exc
    if tls.ca:
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    return ctx


def peer_of(stream: trio.abc.Stream | None, raw: socket.socket | None) -> tuple[str, str | None]:
    """The peer's address (``host:port``) and its certificate's common name (if any),
    walking down wrapped streams (WebSocket over TLS over TCP)."""
    cn: str | None = None
    sock: Any = raw
    current: Any = stream
    while current is not None and sock is None:
        if isinstance(current, trio.SSLStream):
            with contextlib.suppress(Exception):
                cn = _common_name(current.getpeercert())
        if isinstance(current, trio.SocketStream):
            sock = current.socket
            break
        current = getattr(current, "transport_stream", None)
    address = "-"
    if sock is not None:
        with contextlib.suppress(OSError):
            host, port = sock.getpeername()[:2]
            address = f"{host}:{port}"
    return address, cn


def _common_name(cert: Any) -> str | None:
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
