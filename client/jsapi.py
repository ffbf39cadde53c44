"""One JetStream API call over MQTT (issue 21's wire contract) and the consumer calls that
the pull and push subscriptions need as well as the context.

``$JS.API.<rest>`` is the topic ``$JS/API/<rest>`` (each ``.`` a ``/``); the request is a
QoS 1 PUBLISH with a Response Topic in this client's inbox; the answer is nats-server's
JSON. A refused request (PUBACK >= 0x80, e.g. 0x83 when the API is off) and an ``error``
object both raise; nothing is answered with a silent timeout if the broker can say why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from client.errors import JetStreamError, PublishError, api_error
from client.protocol import MQTTClient
from store.models import ConsumerConfig, ConsumerInfo

API_PREFIX = "$JS/API"


@dataclass(frozen=True, slots=True)
class Api:
    """Where and how API requests go: the connection, the prefix, the timeout (s)."""

    client: MQTTClient
    prefix: str = API_PREFIX
    timeout: float = 5.0

    async def call(
        self, tail: str, body: dict[str, Any] | bytes | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Request ``<prefix>/<tail>``; the decoded answer, or the typed error it carries."""
        if body is None:
            payload = b""
        elif isinstance(body, bytes):
            payload = body
        else:
            payload = json.dumps(body, separators=(",", ":")).encode()
        topic = f"{self.prefix}/{tail}"
        try:
            answer = await self.client.request(
                topic, payload, self.timeout if timeout is None else timeout, no_responders=False
            )
        except PublishError as exc:
            raise JetStreamError(503, 0, f"{topic}: {exc.reason or 'request refused'}") from None
        except TimeoutError:
            raise TimeoutError(
                f"no JetStream answer on {topic} (is JetStream enabled on the broker?)"
            ) from None
        try:
            data = json.loads(answer.payload) if answer.payload else {}
        except ValueError:
            raise JetStreamError(500, 0, f"{topic}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise JetStreamError(500, 0, f"{topic}: the answer is not a JSON object")
        if "error" in data:
            raise api_error(data["error"])
        return data

    async def create_consumer(
        self, stream: str, config: ConsumerConfig, action: str = ""
    ) -> ConsumerInfo:
        """CONSUMER.CREATE.<stream>.<name> (or the ephemeral form without a name)."""
        name = config.name or config.durable_name
        tail = f"CONSUMER/CREATE/{stream}/{name}" if name else f"CONSUMER/CREATE/{stream}"
        body: dict[str, Any] = {"stream_name": stream, "config": config.to_wire()}
        if action:
            body["action"] = action
        return ConsumerInfo.model_validate(await self.call(tail, body))

    async def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return ConsumerInfo.model_validate(await self.call(f"CONSUMER/INFO/{stream}/{consumer}"))

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        data = await self.call(f"CONSUMER/DELETE/{stream}/{consumer}")
        return bool(data.get("success"))

    async def find_stream(self, subject: str) -> str:
        """The one stream whose subjects match ``subject`` (STREAM.NAMES with a filter)."""
        data = await self.call("STREAM/NAMES", {"subject": subject})
        names = data.get("streams") or []
        if len(names) != 1:
            raise JetStreamError(404, 10059, f"no stream matches subject {subject!r}")
        return str(names[0])
