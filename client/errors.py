"""The client's exceptions: each carries what came on the wire.

MQTT refusals carry the reason code and the Reason String the broker sent; JetStream API
errors carry nats-server's ``code`` / ``err_code`` / ``description`` (spec §1.3), with a
subclass for the errors applications switch on.
"""

from __future__ import annotations

import re
from typing import Any, Final

from broker.mqtt.reason_codes import ReasonCode
from store.errors import ERRORS


class ClientError(Exception):
    """Base of every error this package raises (besides ``TimeoutError``)."""


class ConnectError(ClientError):
    """The broker could not be reached or refused the CONNECT."""

    def __init__(self, message: str, reason_code: ReasonCode | None = None) -> None:
        super().__init__(message)
        self.reason_code = reason_code


class ConnectionClosedError(ClientError):
    """The connection is closed (by us, by the broker or by the network)."""


class MQTTReasonError(ClientError):
    """A PUBACK/PUBREC/SUBACK/UNSUBACK with an error reason code (0x80 and above)."""

    def __init__(
        self,
        what: str,
        reason_code: ReasonCode,
        reason: str | None = None,
        user_properties: tuple[tuple[str, str], ...] = (),
    ) -> None:
        text = reason or reason_code.name.replace("_", " ").lower()
        super().__init__(f"{what} refused: 0x{int(reason_code):02X} {text}")
        self.reason_code = reason_code
        self.reason = reason
        self.user_properties = user_properties


class PublishError(MQTTReasonError):
    """The broker refused a QoS 1/2 PUBLISH (PUBACK/PUBREC reason code >= 0x80)."""


class SubscribeError(MQTTReasonError):
    """The broker refused a subscription (SUBACK reason code >= 0x80)."""


class NoRespondersError(ClientError):
    """A request was published where nobody listens (PUBACK 0x10, no matching subscribers)."""


class JetStreamError(ClientError):
    """A JetStream error answer: ``{"code", "err_code", "description"}``."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} ({code}/{err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


class BadRequestError(JetStreamError):
    """err_code 10003 (also the answer to an unknown API subject)."""


class NotFoundError(JetStreamError):
    """A 404: stream, consumer or message not found."""


class StreamNotFoundError(NotFoundError):
    """err_code 10059."""


class ConsumerNotFoundError(NotFoundError):
    """err_code 10014."""


class NoMessageFoundError(NotFoundError):
    """err_code 10037 (MSG.GET) - and a 404 status on a pull."""


class StreamNameAlreadyInUseError(JetStreamError):
    """err_code 10058."""


class ServiceUnavailableError(JetStreamError):
    """A 503 (JetStream disabled, storage failed, discard-new limit hit)."""


class NoStreamResponseError(JetStreamError):
    """A JetStream publish that no stream captured (and nobody else received)."""

    def __init__(self, description: str = "no stream matched the publish") -> None:
        super().__init__(503, 0, description)


class StatusError(ClientError):
    """A pull or push status message the client does not pass on (409, 400, unknown)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"{status} {description}")
        self.status = status
        self.description = description


class ConsumerStalledError(ClientError):
    """A push subscription missed its heartbeats (no message or status for 3 intervals)."""


class SequenceGapError(ClientError):
    """A push subscription saw a gap in the consumer sequence."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"consumer sequence gap: expected {expected}, got {got}")
        self.expected = expected
        self.got = got


_BY_ERR_CODE: Final[dict[int, type[JetStreamError]]] = {
    10003: BadRequestError,
    10059: StreamNotFoundError,
    10014: ConsumerNotFoundError,
    10037: NoMessageFoundError,
    10058: StreamNameAlreadyInUseError,
}


def api_error(error: Any) -> JetStreamError:
    """The typed exception for an ``error`` object of a JetStream answer."""
    if not isinstance(error, dict):
        return JetStreamError(500, 0, f"malformed error object: {error!r}")
    code = error.get("code")
    err_code = error.get("err_code")
    description = error.get("description")
    code = code if isinstance(code, int) else 500
    err_code = err_code if isinstance(err_code, int) else 0
    description = description if isinstance(description, str) else ""
    cls = _BY_ERR_CODE.get(err_code)
    if cls is None:
        if code == 404:
            cls = NotFoundError
        elif code == 503:
            cls = ServiceUnavailableError
        else:
            cls = JetStreamError
    return cls(code, err_code, description)


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{\w+\}", template)
    return re.compile("^" + ".*".join(re.escape(p) for p in parts) + "$", re.DOTALL)


# The error table's specific descriptions ("{err}" alone says nothing), most specific first.
_DESCRIPTIONS: Final = sorted(
    (
        (_pattern(s.description), s.code, s.err_code)
        for s in ERRORS.values()
        if s.description != "{err}"
    ),
    key=lambda row: -len(row[0].pattern),
)


def publish_refusal(
    reason_code: ReasonCode, reason: str | None, stream: str | None = None
) -> JetStreamError:
    """A refused capture (PUBACK/PUBREC with an error code, issue 21) as the JetStream error
    its Reason String describes. The PUBACK carries no ``err_code``: it is recovered from the
    error table by the description (0 where the description is not in the table)."""
    text = reason or reason_code.name.replace("_", " ").lower()
    for pattern, code, err_code in _DESCRIPTIONS:
        if pattern.match(text):
            return api_error({"code": code, "err_code": err_code, "description": text})
    if reason_code is ReasonCode.QUOTA_EXCEEDED:  # discard-new limits: JSStreamStoreFailedF
        return ServiceUnavailableError(503, 10077, text)
    if "rollup" in text:
        return JetStreamError(500, 10111, text)
    return JetStreamError(400 if reason_code is ReasonCode.PAYLOAD_FORMAT_INVALID else 500, 0, text)
