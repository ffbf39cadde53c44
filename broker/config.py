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
    ValidationError,
    field_validator,
)

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


class BrokerConfig(_Section):
    listener: ListenerConfig = Field(default_factory=ListenerConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    sessions: SessionConfig = Field(default_factory=SessionConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    jetstream: JetStreamConfig = Field(default_factory=JetStreamConfig)


def _find_line(text: str, loc: Sequence[str | int]) -> int | None:
    """Best-effort line of a dotted key in TOML text (tables and ``key =`` lines)."""
    keys = [str(k) for k in loc if isinstance(k, str)]
    if not keys:
        return None
    table: list[str] = []
    header = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\- ]+?)\s*\]\s*(#.*)?$")
    for number, line in enumerate(text.splitlines(), start=1):
        m = header.match(line)
        if m:
            table = [part.strip() for part in m.group(1).split(".")]
            if table == keys:
                return number
            continue
        m = re.match(r"^\s*([A-Za-z0-9_\-]+)\s*=", line)
        if m and [*table, m.group(1)] == keys:
            return number
    return None


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
        key = ".".join(keys) or "(top level)"
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
    for section, values in (overrides or {}).items():
        merged = dict(data.get(section, {}))
        merged.update(values)
        data[section] = merged
    names = KeyNames(None if path is None else source, text, dict(flags or {}))
    try:
        return BrokerConfig.model_validate(data), names
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, names)) from exc
