"""What the client hands to applications: received messages and publish results."""

from __future__ import annotations

from dataclasses import dataclass

from broker.mqtt.properties import EMPTY_PROPERTIES, Properties
from broker.mqtt.reason_codes import ReasonCode


def first(pairs: tuple[tuple[str, str], ...], name: str) -> str | None:
    """The first value of ``name`` among user properties (NATS header names are matched
    case-sensitively, as nats-server does)."""
    for key, value in pairs:
        if key == name:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Message:
    """One PUBLISH received on a subscription."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY_PROPERTIES

    @property
    def user_properties(self) -> tuple[tuple[str, str], ...]:
        return self.properties.user_properties

    def header(self, name: str) -> str | None:
        return first(self.properties.user_properties, name)

    @property
    def response_topic(self) -> str | None:
        return self.properties.response_topic

    @property
    def correlation_data(self) -> bytes | None:
        return self.properties.correlation_data


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The broker's answer to a PUBLISH: for QoS 1 the PUBACK, for QoS 2 the PUBREC (which
    carries the reason code and properties of the capture); QoS 0 has none (code Success,
    no properties)."""

    reason_code: ReasonCode = ReasonCode.SUCCESS
    properties: Properties = EMPTY_PROPERTIES

    @property
    def user_properties(self) -> tuple[tuple[str, str], ...]:
        return self.properties.user_properties

    def header(self, name: str) -> str | None:
        return first(self.properties.user_properties, name)
