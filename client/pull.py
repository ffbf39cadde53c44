"""Pull consumers: ``fetch(n, timeout)`` over ``$JS/API/CONSUMER/MSG/NEXT/<s>/<c>``.

One inbox topic per subscription is the Response Topic of every pull request (the broker
keeps a request while this session's inbox subscription matches it). Statuses are not
messages (ADR-15 "Pull Mode Statuses"): 404 No Messages and 408 Request Timeout end a
fetch, 100 heartbeats are skipped, 409 and 400 raise :class:`StatusError` when nothing
was received yet.
"""

from __future__ import annotations

import json

import anyio

from client.errors import JetStreamError, PublishError, StatusError
from client.jsapi import Api
from client.jsmsg import JsMsg, status_of
from client.subscription import Subscription
from store.models import ConsumerInfo

_NS = 1_000_000_000


class PullSubscription:
    def __init__(
        self, api: Api, stream: str, consumer: str, inbox: Subscription, created: bool
    ) -> None:
        self._api = api
        self.stream = stream
        self.consumer = consumer
        self._inbox = inbox
        self._created = created  # an ephemeral this subscription made: deleted with it

    async def consumer_info(self) -> ConsumerInfo:
        return await self._api.consumer_info(self.stream, self.consumer)

    async def fetch(
        self,
        batch: int = 1,
        timeout: float | None = 5.0,
        *,
        heartbeat: float | None = None,
        max_bytes: int | None = None,
    ) -> list[JsMsg]:
        """Up to ``batch`` messages, waiting at most ``timeout`` seconds for the first
        ones (nats-py's ``fetch``); TimeoutError when none came. ``timeout=None`` asks
        with ``no_wait``: only what is available now."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self._drain_stale()
        req: dict[str, int | bool] = {"batch": batch}
        if timeout is None:
            req["no_wait"] = True
            wait = self._api.timeout
        else:
            # The broker's expiry comes a little before ours, so its 408 ends the fetch.
            req["expires"] = max(int(timeout * 0.9 * _NS), 1_000_000)
            wait = timeout
        if heartbeat:
            req["idle_heartbeat"] = int(heartbeat * _NS)
        if max_bytes:
            req["max_bytes"] = max_bytes
        client = self._api.client
        topic = f"{self._api.prefix}/CONSUMER/MSG/NEXT/{self.stream}/{self.consumer}"
        try:
            await client.publish(
                topic,
                json.dumps(req, separators=(",", ":")),
                1,
                response_topic=self._inbox.topic,
            )
        except PublishError as exc:  # e.g. the consumer is gone (0x83 and a 503 status)
            raise JetStreamError(
                503, 0, f"pull from {self.stream}/{self.consumer} refused: {exc.reason or exc}"
            ) from None
        out: list[JsMsg] = []
        with anyio.move_on_after(wait):
            while len(out) < batch:
                msg = await self._inbox.next()
                status = status_of(msg)
                if status is None:
                    out.append(JsMsg(client, msg))
                    continue
                if status.code == 100:
                    continue
                if status.code in (404, 408):
                    break
                if status.code == 409 and out:
                    break
                raise StatusError(status.code, status.description)
        if not out and timeout is not None:
            raise TimeoutError(f"no messages from {self.stream}/{self.consumer} in {timeout:g} s")
        return out

    def _drain_stale(self) -> None:
        """Statuses left in the inbox by an earlier request (a 408 that came after our own
        deadline) would end the next fetch at once: drop them; messages stay."""
        kept = []
        while (msg := self._inbox.next_nowait()) is not None:
            if status_of(msg) is None:
                kept.append(msg)
        self._inbox.push_front(kept)

    async def unsubscribe(self) -> None:
        await self._inbox.unsubscribe()
        if self._created:
            await self._api.delete_consumer(self.stream, self.consumer)
