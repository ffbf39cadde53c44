"""``--server`` / ``Client(server=...)`` addresses: ``mqtt://host:port``."""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_SERVER = "mqtt://127.0.0.1:1883"
DEFAULT_PORT = 1883


def parse_server(server: str) -> tuple[str, int]:
    """``mqtt://host:port``, ``tcp://host:port``, ``host:port`` or ``host`` -> (host, port).
    Raises ValueError naming the address when it is not one of those."""
    text = server.strip()
    if "://" not in text:
        text = "mqtt://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("mqtt", "tcp"):
        raise ValueError(f"server {server!r}: only mqtt:// is supported")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"server {server!r}: the port must be an integer 1..65535") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"server {server!r}: no host")
    if parts.path not in ("", "/"):
        raise ValueError(f"server {server!r}: unexpected path {parts.path!r}")
    return host, port
