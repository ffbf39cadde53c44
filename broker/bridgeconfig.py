"""The ``[bridge]`` section of the configuration (issue 22; ``broker/bridge`` runs it).

```toml
[bridge]
servers = ["nats://127.0.0.1:4222"]   # nats-py connect options; user/password/token/creds/tls_ca too
name = "edge-1"                        # node id: Mqtt-Origin header, Nats-Msg-Id prefix, durable names
subject_prefix = ""                    # "" = nats-server's own MQTT subject space

[[bridge.forward]]                     # MQTT -> NATS
filter = "sensors/#"
mode = "jetstream"                     # "core": at most once after our commit; "jetstream": at least once
min_qos = 0

[[bridge.import]]                      # NATS -> MQTT
subject = "cmd.>"
qos = 1
retain = false
stream = "CMD"                         # optional: a durable pull consumer on this NATS stream
durable = "edge-1-cmd"
```

Loops: a forward rule whose NATS subjects intersect an import subject sends our own
messages back to us. The bridge drops them by their ``Mqtt-Origin`` header (and core
imports never see them: ``no_echo``), and never forwards what it imported. That origin
check only works for messages that still carry our header when they come back: with a
``subject_prefix`` every message on the forwarded subjects is one a jetmq bridge
published (with its origin); with ``subject_prefix = ""`` they are nats-server's own
MQTT subject space, where its MQTT clients and any other MQTT bridge republish without
our header, and a loop through them cannot be seen. So an overlap is refused when the
prefix is empty, naming both rules and why (``overlaps``).

This module imports pydantic and ``store.subjects`` / ``store.topics`` only (never
nats-py: a broker without ``[bridge]`` starts without it).
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from store.subjects import is_valid_name, is_valid_subject, subjects_overlap
from store.topics import SubjectConversionError, filter_to_subject


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _valid_name(value: str) -> str:
    if not is_valid_name(value):
        raise ValueError("must be a NATS name: not empty, no spaces, no '.', '*', '>', '/', '\\\\'")
    return value


class ForwardRule(_Section):
    """MQTT -> NATS: messages on topics matching ``filter`` published at >= ``min_qos``."""

    filter: str
    mode: Literal["core", "jetstream"] = "core"
    min_qos: Literal[0, 1, 2] = 0

    @field_validator("filter")
    @classmethod
    def _check_filter(cls, value: str) -> str:
        if not value:
            raise ValueError("the filter is empty")
        if value.startswith("$share/"):
            raise ValueError("a shared subscription cannot be forwarded")
        try:
            filter_to_subject(value)
        except SubjectConversionError as exc:
            raise ValueError(f"cannot become a NATS subject: {exc}") from None
        levels = value.split("/")
        for i, level in enumerate(levels):
            if ("#" in level and (level != "#" or i != len(levels) - 1)) or (
                "+" in level and level != "+"
            ):
                raise ValueError("not a valid MQTT filter ('+' a whole level, '#' last)")
        return value

    def subjects(self, prefix: str) -> list[str]:
        """The NATS subjects this rule publishes on (``a/#`` also ``a``)."""
        out = [with_prefix(prefix, filter_to_subject(self.filter))]
        if self.filter.endswith("/#"):
            out.append(with_prefix(prefix, filter_to_subject(self.filter[:-2])))
        return out


class ImportRule(_Section):
    """NATS -> MQTT: messages on ``subject`` (core), or from the durable pull consumer
    ``durable`` on the NATS stream ``stream``, published into the broker at ``qos``."""

    subject: str
    qos: Literal[0, 1, 2] = 0
    retain: bool = False
    stream: Annotated[str, Field(min_length=1)] | None = None
    durable: str | None = None

    @field_validator("subject")
    @classmethod
    def _check_subject(cls, value: str) -> str:
        if not is_valid_subject(value):
            raise ValueError("not a valid NATS subject")
        return value

    @field_validator("stream", "durable")
    @classmethod
    def _check_names(cls, value: str | None) -> str | None:
        return None if value is None else _valid_name(value)

    @model_validator(mode="after")
    def _durable_needs_stream(self) -> ImportRule:
        if self.durable is not None and self.stream is None:
            raise ValueError("durable is the consumer on a NATS stream: set stream too")
        return self


class BridgeConfig(_Section):
    servers: list[str] = Field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    name: str
    subject_prefix: str = ""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None  # a NATS credentials file (JWT + nkey seed)
    tls_ca: str | None = None  # a CA file: connect with TLS, verifying the server against it
    forward: list[ForwardRule] = Field(default_factory=list)
    imports: list[ImportRule] = Field(default_factory=list, alias="import")

    @field_validator("servers")
    @classmethod
    def _check_servers(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one NATS URL is required")
        for url in value:
            if "://" not in url:
                raise ValueError(f"{url!r} is not a URL (nats://HOST:PORT)")
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return _valid_name(value)

    @field_validator("creds", "tls_ca")
    @classmethod
    def _check_file(cls, value: str | None) -> str | None:
        if value is not None and not pathlib.Path(value).is_file():
            raise ValueError("no such file")
        return value

    @field_validator("subject_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if value and not is_valid_subject(value, wildcards=False):
            raise ValueError("must be empty or a NATS subject without wildcards")
        return value

    @model_validator(mode="after")
    def _check_whole(self) -> BridgeConfig:
        if importlib.util.find_spec("nats") is None:
            raise ValueError(
                "the NATS bridge needs nats-py, which is not installed:"
                " pip install 'jetmq[bridge]' (or remove [bridge])"
            )
        if self.user is not None and self.password is None:
            raise ValueError("user is set without password")
        problems = self.overlaps()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def durable_of(self, index: int) -> str:
        rule = self.imports[index]
        return rule.durable if rule.durable is not None else f"{self.name}-import-{index}"

    def overlaps(self) -> list[str]:
        """Forward/import pairs the origin check cannot protect (see module docstring)."""
        if self.subject_prefix:
            return []
        out = []
        for f, fwd in enumerate(self.forward):
            for i, imp in enumerate(self.imports):
                hit = next((s for s in fwd.subjects("") if subjects_overlap(s, imp.subject)), None)
                if hit is None:
                    continue
                out.append(
                    f"bridge.forward[{f}] (filter {fwd.filter!r} -> NATS {hit!r}) intersects"
                    f" bridge.import[{i}] (subject {imp.subject!r}): could loop. With"
                    ' subject_prefix = "" these subjects are nats-server\'s own MQTT space,'
                    " where messages republished by its MQTT clients or other bridges lose our"
                    " Mqtt-Origin header, so the origin check cannot stop the loop; set"
                    " subject_prefix or make the subjects disjoint"
                )
        return out


def with_prefix(prefix: str, subject: str) -> str:
    return f"{prefix}.{subject}" if prefix else subject
