"""``--server`` / ``Client(server=...)`` addresses: ``mqtt://host:port`` (plain TCP, port
1883 by default) or ``mqtts://host:port`` (TLS, port 8883 by default)."""

from __future__ import annotations

import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

DEFAULT_SERVER = "mqtt://127.0.0.1:1883"
DEFAULT_PORT = 1883
DEFAULT_TLS_PORT = 8883
_PLAIN = ("mqtt", "tcp")
_TLS = ("mqtts", "ssl", "tls")


class Address(NamedTuple):
    host: str
    port: int
    tls: bool  # mqtts://: the connection is TLS


def parse_address(server: str) -> Address:
    """``mqtt://host:port``, ``tcp://``, ``mqtts://`` (also ``ssl://``, ``tls://``),
    ``host:port`` or ``host``. Raises ValueError naming the address when it is not one
    of those."""
    text = server.strip()
    if "://" not in text:
        text = "mqtt://" + text
    parts = urlsplit(text)
    if parts.scheme not in _PLAIN + _TLS:
        raise ValueError(f"server {server!r}: only mqtt:// and mqtts:// are supported")
    tls = parts.scheme in _TLS
    try:
        port = parts.port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT)
    except ValueError:
        raise ValueError(f"server {server!r}: the port must be an integer 1..65535") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"server {server!r}: no host")
    if parts.path not in ("", "/"):
        raise ValueError(f"server {server!r}: unexpected path {parts.path!r}")
    return Address(host, port, tls)


def parse_server(server: str) -> tuple[str, int]:
    """(host, port) of :func:`parse_address`."""
    address = parse_address(server)
    return address.host, address.port


def tls_context(
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    *,
    insecure: bool = False,
) -> ssl.SSLContext:
    """A client TLS context: the system's CAs, or ``ca_file``; a client certificate when
    ``cert_file`` is given (``key_file`` if the key is not in it); ``insecure`` checks
    neither the certificate nor the host name (tests, never production). Raises
    ValueError naming the file that cannot be read."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS CA file {ca_file!r}: {exc}") from None
    if cert_file is not None:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS certificate {cert_file!r}: {exc}") from None
    elif key_file is not None:
        raise ValueError("a TLS key file needs its certificate (cert_file)")
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["mqtt"])
    return ctx
