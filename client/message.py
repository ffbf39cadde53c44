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


def publish_properties(
    user_properties: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
    content_type: str | None = None,
    message_expiry_interval: int | None = None,
    payload_format_indicator: int | None = None,
) -> Properties:
    """A PUBLISH's properties (the shared empty object when there are none)."""
    if not user_properties and (
        response_topic,
        correlation_data,
        content_type,
        message_expiry_interval,
        payload_format_indicator,
    ) == (None, None, None, None, None):
        return EMPTY_PROPERTIES
    return Properties(
        user_properties=tuple(user_properties),
        response_topic=response_topic,
        correlation_data=correlation_data,
        content_type=content_type,
        message_expiry_interval=message_expiry_interval,
        payload_format_indicator=payload_format_indicator,
    )
