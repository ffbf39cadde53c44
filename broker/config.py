"""Broker configuration: one TOML file validated by pydantic.

Every setting has an embedded default, so ``jetmq serve`` runs with no file at
all. Unknown keys are errors (a typo must not be silently ignored), and every
error names where the value came from (the command-line flag, or the file, the
dotted key and its line when it can be found), the value, and what is wrong with
it: ``jetmq.toml: storage.sync (line 2): 'never': Input should be ...``,
``--listen: 'nohost': expected HOST:PORT``. What only the machine can tell (a
host that resolves, a data directory that can be created) is checked by
``broker.preflight`` with the same naming (``KeyNames``).
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
)

from broker.bridgeconfig import BridgeConfig

DEFAULT_PORT = 1883
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_DATA_DIR = "./jetmq-data"

U16 = Annotated[int, Field(ge=0, le=65_535)]
U32 = Annotated[int, Field(ge=0, le=0xFFFF_FFFF)]


class ConfigError(Exception):
    """A configuration problem, phrased for the operator (key, line, what is wrong)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6); raise ValueError with the reason
    (the caller names the value)."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT ([ADDRESS]:PORT for IPv6)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ValueError("the host is empty")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65_535:
        raise ValueError(f"the port must be an integer 0..65535, not {port_text!r}")
    return host, int(port_text)


def _valid_listen(value: str) -> str:
    parse_listen(value)
    return value


class ListenerConfig(_Section):
    listen: list[Annotated[str, AfterValidator(_valid_listen)]] = Field(
        default_factory=lambda: [DEFAULT_LISTEN]
    )

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one HOST:PORT is required")
        return value

    def addresses(self) -> list[tuple[str, int]]:
        return [parse_listen(item) for item in self.listen]


class StorageConfig(_Section):
    data_dir: str = DEFAULT_DATA_DIR
    # "always": fsync every group commit (a PUBACK means the message is on disk).
    # "batch": no fsync per commit; a crash of the machine (not of the process) may lose
    # the commits since the last OS flush. See docs.
    sync: Literal["always", "batch"] = "always"


class MqttConfig(_Section):
    """What the broker announces in CONNACK and enforces on every connection."""

    # 16 MiB: mosquitto takes up to MQTT's 268,435,455 and 1 MiB refused ordinary payloads
    # (images, firmware); a packet is buffered whole, ≈3x its size at peak (a 50 MB
    # PUBLISH to one subscriber: +150 MB RSS), so not the protocol's maximum. Every
    # refusal is logged with the client id and the size (broker.net.handshake).
    max_packet_size: Annotated[int, Field(ge=32, le=268_435_455)] = 16_777_216
    receive_maximum: Annotated[int, Field(ge=1, le=65_535)] = 1024
    topic_alias_maximum: U16 = 64
    maximum_qos: Literal[0, 1, 2] = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifiers_available: bool = True
    shared_subscriptions_available: bool = True
    # 0 = accept the client's keep alive; otherwise the Server Keep Alive ceiling we impose.
    max_keepalive: U16 = 0
    connect_timeout: Annotated[float, Field(gt=0, le=3600)] = 10.0
    max_client_id_length: Annotated[int, Field(ge=23, le=65_535)] = 256
    # Cap on the Session Expiry Interval a client may ask for (0xFFFFFFFF = never expires).
    max_session_expiry_interval: U32 = 0xFFFF_FFFF
    # Payload Format Indicator 1 with a payload that is not UTF-8: reject with 0x99.
    validate_utf8_payload: bool = True


class SessionConfig(_Section):
    """Per-session limits for messages queued while a client is offline or slow.

    Queued QoS 1/2 copies of a persistent session wait on disk, not in RAM (broker/queues.py):
    these limits bound what one session may keep in the store. 1,000 messages is
    mosquitto's ``max_queued_messages``; mosquitto leaves bytes unlimited, which with
    our 1 MiB packets allows 1 GB per session: 100 MiB holds 1,000 messages of 100 KB,
    so a mosquitto user's typical queue is never cut by it. 0 = unlimited."""

    max_queued_messages: Annotated[int, Field(ge=0)] = 1_000
    max_queued_bytes: Annotated[int, Field(ge=0)] = 100 * 1024 * 1024
    overflow: Literal["drop_oldest", "drop_newest"] = "drop_oldest"
    queue_qos0: bool = False
    max_outbound_queue: Annotated[int, Field(ge=16)] = 4096


class JetStreamConfig(_Section):
    """The JetStream API over MQTT 5 (broker/jetstream). ``enabled = false`` closes the
    ``$JS`` topics as any reserved prefix. Limits for the one account (-1 = unlimited):
    user streams, consumers over all of them, and bytes reserved by the streams'
    ``max_bytes`` (with a limit every stream must set ``max_bytes``)."""

    enabled: bool = True
    max_streams: Annotated[int, Field(ge=-1)] = -1
    max_consumers: Annotated[int, Field(ge=-1)] = -1
    max_bytes: Annotated[int, Field(ge=-1)] = -1


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    # "text": one line per record (time, level, logger, message); "json": one JSON object
    # per line (ts, level, logger, msg, and the fields of connect/disconnect lines).
    format: Literal["text", "json"] = "text"
    # One line per client connect and disconnect at "info" (client id, address, protocol,
    # reason); false drops them (a reconnect storm runs about twice as fast without them).
    connections: StrictBool = True


class SysConfig(_Section):
    """``$SYS/broker/...`` topics (broker.ops.systree)."""

    # Seconds between publications of the $SYS topics (retained; only changed values are
    # published, as mosquitto does); 0 turns $SYS off.
    interval: Annotated[int, Field(ge=0, le=86_400)] = 10


def _valid_bind(value: str | None) -> str | None:
    if value is not None:
        parse_listen(value)
    return value


class HttpConfig(_Section):
    """The operations HTTP server (broker.ops.http): /metrics, /healthz, /readyz, the status
    page. Off unless ``bind`` is set: a new listening port is the operator's choice."""

    bind: Annotated[str | None, AfterValidator(_valid_bind)] = None


class TlsConfig(_Section):
    """TLS on a listener (``tls = { cert = ..., key = ... }``): the server's certificate
    chain and key (PEM), the CA that signs client certificates, whether one is required."""

    cert: str
    key: str
    ca: str | None = None
    require_client_cert: bool = False
    min_version: Literal["1.2", "1.3"] = "1.2"

    @field_validator("require_client_cert")
    @classmethod
    def _ca_for_clients(cls, value: bool, info: Any) -> bool:
        if value and not info.data.get("ca"):
            raise ValueError("require_client_cert needs tls.ca (the CA that signs client certs)")
        return value


class ListenerSpec(_Section):
    """One ``[[listeners]]`` entry: where, over what, with which limits."""

    bind: Annotated[str, AfterValidator(_valid_listen)] = DEFAULT_LISTEN
    transport: Literal["tcp", "ws"] = "tcp"  # "ws": MQTT over WebSocket, path /mqtt
    tls: TlsConfig | None = None
    # The client certificate's CN becomes the username (mosquitto's option); needs tls.ca.
    use_identity_as_username: bool = False
    max_connections: Annotated[int, Field(ge=0)] = 0  # 0: only the broker-wide limit

    @field_validator("use_identity_as_username")
    @classmethod
    def _identity_needs_tls(cls, value: bool, info: Any) -> bool:
        tls = info.data.get("tls")
        if value and (tls is None or not tls.ca):
            raise ValueError("use_identity_as_username needs tls with a ca (client certificates)")
        return value

    def address(self) -> tuple[str, int]:
        return parse_listen(self.bind)


class AuthConfig(_Section):
    """Who may connect and what they may do (``broker.security``)."""

    # None (unset): true only when every listener is on a loopback address.
    allow_anonymous: bool | None = None
    password_file: str | None = None  # mosquitto's format ($7$ / $6$); ``jetmq passwd``
    acl_file: str | None = None  # mosquitto's ACL syntax
    # true: ACL refusals of SUBSCRIBE and PUBLISH are answered 0x80 Unspecified error, not
    # 0x87 Not authorized (MQTT 5 §3.9.3 / §3.4.2.1: a server that does not wish to reveal
    # the reason). Paho's interoperability suite expects 0x80 (docs/security.md).
    hide_denials: bool = False


class LimitsConfig(_Section):
    """0 = unlimited."""

    max_connections: Annotated[int, Field(ge=0)] = 0
    max_publish_rate: Annotated[float, Field(ge=0)] = 0  # messages/s per client
    max_subscriptions_per_client: Annotated[int, Field(ge=0)] = 0


class BrokerConfig(_Section):
    listener: ListenerConfig = Field(default_factory=ListenerConfig)  # deprecated: [[listeners]]
    # The default equals etc/jetmq.toml's one table; the deprecated [listener] is used
    # instead when it is given and [[listeners]] is not.
    listeners: list[ListenerSpec] = Field(default_factory=lambda: [ListenerSpec()])
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    sessions: SessionConfig = Field(default_factory=SessionConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    jetstream: JetStreamConfig = Field(default_factory=JetStreamConfig)
    bridge: BridgeConfig | None = None  # the NATS bridge (broker/bridge), off by default

    @field_validator("listeners")
    @classmethod
    def _some_listener(cls, value: list[ListenerSpec]) -> list[ListenerSpec]:
        if not value:
            raise ValueError("at least one [[listeners]] table is required")
        return value

    def listener_specs(self) -> list[ListenerSpec]:
        """The listeners to open: ``[[listeners]]``, else the deprecated
        ``[listener] listen`` addresses as plain TCP listeners."""
        if "listeners" in self.model_fields_set or "listener" not in self.model_fields_set:
            return list(self.listeners)
        return [ListenerSpec(bind=text) for text in self.listener.listen]

    sys: SysConfig = Field(default_factory=SysConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)


def _find_line(text: str, loc: Sequence[str | int]) -> int | None:
    """Best-effort line of a dotted key in TOML text (tables, arrays of tables such as
    ``[[bridge.forward]]``, whose n-th occurrence is item n, and ``key =`` lines)."""
    loc = _table_path(loc)
    want = [str(k) for k in loc]
    if not loc:
        return None
    table: list[str] = []
    seen: dict[tuple[str, ...], int] = {}
    header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\- ]+?)\s*\]\]?\s*(#.*)?$")
    for number, line in enumerate(text.splitlines(), start=1):
        m = header.match(line)
        if m:
            table = [part.strip() for part in m.group(2).split(".")]
            if m.group(1) == "[[":
                index = seen[tuple(table)] = seen.get(tuple(table), -1) + 1
                table = [*table, str(index)]
            if table == want:
                return number
            continue
        m = re.match(r"^\s*([A-Za-z0-9_\-]+)\s*=", line)
        if m and [*table, m.group(1)] == want:
            return number
    return None


def _table_path(loc: Sequence[str | int]) -> Sequence[str | int]:
    """The key path without a trailing item number (an item of a value such as
    ``listen[0]`` is named by its key); numbers inside are arrays of tables."""
    end = len(loc)
    while end and not isinstance(loc[end - 1], str):
        end -= 1
    return loc[:end]


@dataclass(frozen=True)
class KeyNames:
    """Says where a setting came from, for error messages: the flag that set it
    (``flags`` maps ``(section, key)`` to e.g. ``"--listen"``), else the file, the dotted
    key and its line, else (no file) the dotted key alone."""

    path: str | None = None
    text: str | None = None
    flags: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def __call__(self, loc: Sequence[str | int]) -> str:
        keys = tuple(str(k) for k in loc if isinstance(k, str))
        flag = self.flags.get((keys[0], keys[1])) if len(keys) >= 2 else None
        if flag is not None:
            return flag
        key = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in _table_path(loc))[1:]
        key = key or "(top level)"
        if self.path is None:
            return key
        line = _find_line(self.text, loc) if self.text is not None else None
        return f"{self.path}: {key}" + (f" (line {line})" if line is not None else "")


def show_value(value: object, limit: int = 80) -> str:
    """A value as an error message quotes it (its repr, cut short when long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _format_errors(err: ValidationError, names: KeyNames) -> str:
    lines = []
    for item in err.errors():
        name = names(item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"{name}: unknown key")
            continue
        cause = item.get("ctx", {}).get("error")
        message = str(cause) if isinstance(cause, ValueError) else item["msg"]
        lines.append(f"{name}: {show_value(item['input'])}: {message}")
    return "\n".join(lines)


def load_config(
    path: str | pathlib.Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    flags: Mapping[tuple[str, str], str] | None = None,
) -> BrokerConfig:
    """Read and validate a config file (or the embedded defaults when ``path`` is None).

    ``overrides`` (e.g. from ``--listen``) are applied per section on top of the file;
    ``flags`` names the flag each override came from. Raises ConfigError naming the key
    (and its line) or the flag, the value and the problem.
    """
    return load_config_named(path, overrides, flags)[0]


def load_config_named(
    path: str | pathlib.Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    flags: Mapping[tuple[str, str], str] | None = None,
) -> tuple[BrokerConfig, KeyNames]:
    """``load_config``, also returning how to name each setting in later errors."""
    data: dict[str, Any] = {}
    text: str | None = None
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            text = pathlib.Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read config file: {exc.strerror}") from exc
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    if "listener" in data and "listeners" in data:
        raise ConfigError(
            f"{source}: [listener] (deprecated) and [[listeners]] both given: keep only"
            ' [[listeners]] (one table per address: bind = "HOST:PORT")'
        )
    for section, values in (overrides or {}).items():
        if section == "listener" and "listeners" in data:
            # --listen replaces the file's [[listeners]] with plain TCP ones.
            data["listeners"] = [{"bind": text} for text in values.get("listen", [])]
            continue
        merged = dict(data.get(section, {}))
        merged.update(values)
        data[section] = merged
    names = KeyNames(None if path is None else source, text, dict(flags or {}))
    try:
        return BrokerConfig.model_validate(data), names
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, names)) from exc
