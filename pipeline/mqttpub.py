"""Publishing rows to a broker from a Spark task: paho-mqtt (MQTT 5), QoS 1 by default,
and a ``flush`` that returns only when every PUBACK (PUBCOMP for QoS 2) arrived.

One :class:`Publisher` per task, driven from the task's own thread (``client.loop``):
no paho network thread, so no callback races; at most ``max_inflight`` messages wait
for their acknowledgement (backpressure). Any failure — a refused CONNECT, a PUBACK
with a failure reason code (>= 0x80), the connection lost with messages unacknowledged,
a timeout — raises :class:`PublishError`, so the Spark task fails and is retried:
at-least-once, never a silent loss.
"""

from __future__ import annotations

import os
import ssl
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

DEFAULT_PORT: Final = 1883
DEFAULT_TLS_PORT: Final = 8883
DEFAULT_INFLIGHT: Final = 256


class PublishError(RuntimeError):
    """The broker did not acknowledge what was published; the task must fail."""


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str | None = None
    password: str | None = None
    tls: bool = False  # mqtts://
    ca_file: str | None = None  # None: the system's trust store
    cert_file: str | None = None  # a client certificate (PEM) and its key
    key_file: str | None = None
    insecure: bool = False  # no certificate or host name check (tests, never production)


# Spark options of the TLS settings (source with url=, sink): option -> BrokerAddress field
TLS_OPTIONS: Final = {
    "tlsCaFile": "ca_file",
    "tlsCertFile": "cert_file",
    "tlsKeyFile": "key_file",
    "tlsInsecure": "insecure",
}


def tls_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The TLS options set in ``opts`` (a Spark options map), as picklable pairs."""
    return tuple((k, opts[k]) for k in TLS_OPTIONS if opts.get(k))


def parse_url(url: str, tls: Mapping[str, str] | None = None) -> BrokerAddress:
    """``mqtt://`` or ``mqtts://[user[:password]@]host[:port]`` (ports 1883 / 8883), with
    the TLS options of :data:`TLS_OPTIONS` (``mqtts://`` only)."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ValueError(
            f"jetmq sink: option 'url' must look like mqtt://host:port or mqtts://host:port,"
            f" got {url!r}"
        )
    secure = parts.scheme == "mqtts"
    try:
        port = parts.port or (DEFAULT_TLS_PORT if secure else DEFAULT_PORT)
    except ValueError:
        raise ValueError(f"jetmq sink: bad port in url {url!r}") from None
    user = unquote(parts.username) if parts.username else None
    pw = unquote(parts.password) if parts.password else None
    settings: dict[str, Any] = {}
    for option, value in (tls or {}).items():
        field = TLS_OPTIONS.get(option)
        if field is None or not value:
            continue
        if not secure:
            raise ValueError(f"jetmq sink: option {option!r} needs an mqtts:// url, got {url!r}")
        if field == "insecure":
            low = value.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(
                    f"jetmq sink: option {option!r} must be true or false, got {value!r}"
                )
            settings[field] = low in ("true", "1", "yes")
        else:
            if not os.path.isfile(value):
                raise ValueError(f"jetmq sink: option {option!r}: no such file {value!r}")
            settings[field] = value
    if ("cert_file" in settings) != ("key_file" in settings):
        raise ValueError("jetmq sink: options 'tlsCertFile' and 'tlsKeyFile' go together")
    return BrokerAddress(parts.hostname, port, user, pw, secure, **settings)


class _ClosingSSLSocket(ssl.SSLSocket):
    """An SSL socket that closes itself when its handshake fails: paho 2.1 drops a socket
    whose handshake raised without closing it."""

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except BaseException:
            self.close()
            raise


def new_client(address: BrokerAddress, client_id_prefix: str) -> Any:
    """A paho MQTT 5 client for ``address``: a unique client id, its credentials, TLS for
    ``mqtts://``, nothing queued while disconnected (the caller drives ``loop`` on its own
    thread)."""
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

    client = Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"{client_id_prefix}-{uuid.uuid4().hex[:12]}",
        protocol=MQTTProtocolVersion.MQTTv5,
    )
    client.max_queued_messages_set(0)
    if address.username is not None:
        client.username_pw_set(address.username, address.password)
    if address.tls:
        ctx = tls_context(address)
        ctx.sslsocket_class = _ClosingSSLSocket
        client.tls_set_context(ctx)
        client.tls_insecure_set(address.insecure)
    return client


def tls_context(address: BrokerAddress) -> ssl.SSLContext:
    """The client TLS context of an ``mqtts://`` address: its CA file (else the system's
    trust store), its client certificate, no checks at all when ``insecure``."""
    ctx = ssl.create_default_context(cafile=address.ca_file)
    if address.cert_file is not None:
        ctx.load_cert_chain(address.cert_file, address.key_file)
    if address.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Publisher:
    """A connected MQTT 5 client publishing with acknowledgements awaited in a window."""

    def __init__(
        self,
        address: BrokerAddress,
        *,
        client_id_prefix: str = "jetmq-sink",
        max_inflight: int = DEFAULT_INFLIGHT,
        timeout: float = 30.0,
    ) -> None:

        self.timeout = timeout
        self.max_inflight = max_inflight
        self.published = 0
        self._pending: set[int] = set()
        self._early: set[int] = set()  # acknowledged before publish() returned its mid
        self._failure: str | None = None
        self._connected = False
        self._closed = False
        client = new_client(address, client_id_prefix)
        client.max_inflight_messages_set(max_inflight)
        client.on_connect = self._on_connect
        client.on_publish = self._on_publish
        client.on_disconnect = self._on_disconnect
        self._client = client
        try:
            client.connect(address.host, address.port, keepalive=60)
        except OSError as exc:
            raise PublishError(
                f"jetmq sink: cannot connect to mqtt://{address.host}:{address.port}: {exc}"
            ) from exc
        self._wait(lambda: self._connected, "the CONNACK")

    # -- paho callbacks (called from client.loop, on this thread) ---------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            self._failure = f"the broker refused the connection: {rc}"
        else:
            self._connected = True

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        if rc.is_failure:
            self._failure = f"the broker refused a message (reason code {rc.value:#04x} {rc})"
        if mid in self._pending:
            self._pending.discard(mid)
        else:
            self._early.add(mid)

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self._connected = False
        if not self._closed and self._failure is None:
            self._failure = f"the connection was lost ({rc})"

    # -- publishing -------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise PublishError(
                f"jetmq sink: {self._failure}; {len(self._pending)} messages unacknowledged"
            )

    def _wait(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            self._check()
            if time.monotonic() > deadline:
                raise PublishError(f"jetmq sink: no {what} within {self.timeout:g} s")
            self._client.loop(0.05)
        self._check()

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 1,
        retain: bool = False,
        user_properties: Sequence[tuple[str, str]] = (),
    ) -> None:
        from paho.mqtt.client import MQTT_ERR_SUCCESS, error_string
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self._check()
        props = None
        if user_properties:
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            props.UserProperty = list(user_properties)
        info = self._client.publish(topic, payload, qos=qos, retain=retain, properties=props)
        if info.rc != MQTT_ERR_SUCCESS:
            raise PublishError(
                f"jetmq sink: publish to {topic!r} failed: {error_string(info.rc)}"
                f" ({len(self._pending)} messages unacknowledged)"
            )
        self.published += 1
        if qos:
            if info.mid in self._early:
                self._early.discard(info.mid)
            else:
                self._pending.add(info.mid)
        if len(self._pending) >= self.max_inflight:
            self._wait(lambda: len(self._pending) < self.max_inflight, "PUBACK")
        else:
            self._client.loop(0)  # write what is queued, take acknowledgements that came

    def flush(self) -> None:
        """Return once every QoS 1/2 message published so far is acknowledged."""
        self._wait(lambda: not self._pending, "PUBACK for every message")
        # QoS 0 messages still queued in paho go out before the DISCONNECT.
        while self._client.want_write():
            self._client.loop_write()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.disconnect()  # queues DISCONNECT; the loop sends it and closes
            self._client.loop(0.05)
        except OSError:
            pass  # the connection is gone already: nothing left to close
