"""The ``$JS/API/`` topics: requests from MQTT 5 clients (the system-topic handler).

A PUBLISH to ``$JS/API/<rest>`` is the request ``$JS.API.<rest>`` (each ``/`` a ``.``).
Its Response Topic gets the answer, Correlation Data echoed; without one (or from a
will) the request is refused, 0x83 and a log line. Each request is a task in the
broker's nursery, after the previous request of the same client (a client's requests
are carried out in order); the JSON requests run in a worker thread
(``broker.jetstream.requests``), never on the trio thread. The publisher's PUBACK comes
once the request is done and its answer sent.

``CONSUMER.MSG.NEXT.<stream>.<consumer>`` is a pull request: the Response Topic is the
inbox, which a subscription of the requester must match (the request lives while one
does: ``broker.jetstream.interest``); messages and statuses come later as store events
(``broker.jetstream.outbox``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import trio

import radix
from broker.core.message import AppMessage
from broker.core.sessions import Session
from broker.core.systopics import Outcome, reserved_prefix
from broker.jetstream import direct, packed
from broker.jetstream.commit import commit
from broker.jetstream.interest import Interest
from broker.jetstream.outbox import Outbox
from broker.jetstream.requests import API_PREFIX, MAX_REQUEST_BYTES, Requests
from broker.mqtt.properties import Properties
from broker.mqtt.reason_codes import ReasonCode
from broker.persist.client import StorageError, StoreClient
from store import JetStreamError, Pull

log = logging.getLogger("jetmq.jetstream")

TOPIC_PREFIX: Final = b"$JS/API/"
NEXT_PREFIX: Final = "$JS.API.CONSUMER.MSG.NEXT."
REFUSED: Final = ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR
OK: Final = Outcome(ReasonCode.SUCCESS)
_I64: Final = (1 << 63) - 1


class Job:
    """One request in progress: the publisher's pending outcome (``systopics.Pending``)."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result = OK

    def finish(self, result: Outcome) -> None:
        self.result = result
        self.done.set()

    async def outcome(self) -> Outcome:
        await self.done.wait()
        return self.result


def valid_reply(topic: str) -> str | None:
    """Why ``topic`` cannot be a Response Topic we publish to, or None."""
    raw = topic.encode()
    if reserved_prefix(raw) is not None:
        return "the Response Topic is under a topic prefix reserved to the broker"
    try:
        radix.validate_topic(raw)
    except radix.TopicError as exc:
        return f"the Response Topic is not a valid topic name: {exc}"
    return None


def parse_pull(body: bytes) -> tuple[int, int, bool, int, int] | str:
    """A MSG.NEXT body as (batch, expires, no_wait, max_bytes, idle_heartbeat), or the
    reason it is a bad request. Empty: batch 1; a bare number: that batch; unparseable
    text that is not JSON: batch 1 (as nats-server)."""
    text = body.strip()
    if not text:
        return 1, 0, False, 0, 0
    if text.isdigit():
        n = int(text)
        return (n, 0, False, 0, 0) if n <= _I64 else "batch out of range"
    try:
        req = json.loads(text)
    except ValueError:
        return 1, 0, False, 0, 0
    if not isinstance(req, dict):
        return 1, 0, False, 0, 0
    nums: list[int] = []
    for key in ("batch", "expires", "max_bytes", "idle_heartbeat"):
        value = req.get(key, 0)
        if value is None:
            value = 0
        if type(value) is not int or not -_I64 - 1 <= value <= _I64:
            return f"{key} is not an int64"
        nums.append(value)
    no_wait = req.get("no_wait", False)
    if not isinstance(no_wait, bool):
        return "no_wait is not a bool"
    batch, expires, max_bytes, heartbeat = nums
    return batch, expires, no_wait, max_bytes, heartbeat


class ApiHandler:
    """The ``$JS/API/`` system-topic handler (see module docstring)."""

    def __init__(
        self,
        client: StoreClient,
        requests: Requests,
        outbox: Outbox,
        interest: Interest,
        changed: Callable[[], Awaitable[None]],
        wake: Callable[[], None],
    ) -> None:
        self.client = client
        self.requests = requests
        self.outbox = outbox
        self.interest = interest
        self.changed = changed  # streams or consumers changed: learn them before answering
        self.wake = wake  # the store may have a new deadline (a pull's expiry)
        self._last: dict[int, Job] = {}  # each client's latest request

    def publish(self, msg: AppMessage, session: Session | None) -> ReasonCode | Job:
        p = msg.publish
        topic = p.topic.decode("utf-8", "replace")
        reply = p.properties.response_topic
        who = session.client_id if session is not None else "(a will)"
        if session is None or reply is None:
            log.warning(
                "JetStream request %r from %r without a Response Topic: refused", topic, who
            )
            return REFUSED
        why = valid_reply(reply)
        if why is not None:
            log.warning("JetStream request %r from %r: %s: refused", topic, who, why)
            return REFUSED
        subject = API_PREFIX + topic[len(TOPIC_PREFIX) :].replace("/", ".")
        job = Job()
        prev = self._last.get(session.num)
        self._last[session.num] = job
        self.client.spawn(
            self._run, job, prev, session.num, subject, p.payload, reply, p.properties
        )
        return job

    async def _run(
        self,
        job: Job,
        prev: Job | None,
        num: int,
        subject: str,
        body: bytes,
        reply: str,
        props: Properties,
    ) -> None:
        result = OK
        try:
            if prev is not None:
                await prev.done.wait()
            if subject.startswith(NEXT_PREFIX):
                result = await self._pull(num, subject, body, reply)
            elif subject.startswith(direct.PREFIX):
                self.client.submit_open()
                pack = packed.wants_pack(props.user_properties)
                answers = await trio.to_thread.run_sync(
                    direct.direct_get, self.client.store, subject, body, pack
                )
                for payload, headers in answers:
                    out = Properties(
                        correlation_data=props.correlation_data, user_properties=headers
                    )
                    self.outbox.send(reply, payload, out)
            else:
                self.client.submit_open()  # what this client wrote before goes first
                answer, changed = await trio.to_thread.run_sync(self.requests.handle, subject, body)
                if changed:
                    await self.changed()
                self.wake()  # (a stream's max_age, a consumer's inactivity)
                self.outbox.answer(reply, answer, props.correlation_data)
        except StorageError as exc:
            result = Outcome(ReasonCode.UNSPECIFIED_ERROR, f"the broker could not store it: {exc}")
        except Exception:
            log.exception("JetStream request %r failed", subject)
            result = Outcome(REFUSED, "the request failed in the broker")
        finally:
            job.finish(result)
            if self._last.get(num) is job:
                del self._last[num]

    async def _pull(self, num: int, subject: str, body: bytes, inbox: str) -> Outcome:
        names = subject[len(NEXT_PREFIX) :].split(".")
        if len(names) != 2 or not names[0] or not names[1]:
            self._bad_pull(inbox, "Bad Request - wrong subject")
            return Outcome(REFUSED, "expected $JS/API/CONSUMER/MSG/NEXT/<stream>/<consumer>")
        stream, consumer = names
        if len(body) > MAX_REQUEST_BYTES:
            self._bad_pull(inbox, "Bad Request - request too large")
            return Outcome(REFUSED, "request too large")
        parsed = parse_pull(body)
        if isinstance(parsed, str):
            self._bad_pull(inbox, f"Bad Request - {parsed}")
            return Outcome(REFUSED, parsed)
        if not self.interest.client_has(num, inbox):
            return Outcome(REFUSED, "no subscription of this client matches the inbox")
        batch, expires, no_wait, max_bytes, heartbeat = parsed
        op = Pull(stream, consumer, inbox, batch, expires, no_wait, max_bytes, heartbeat)
        (res,) = await commit(self.client, [op])
        if isinstance(res, JetStreamError):
            props = Properties(
                user_properties=(("Status", "503"), ("Description", "No Responders"))
            )
            self.outbox.send(inbox, b"", props)
            return Outcome(REFUSED, res.description)
        self.interest.add_pull(num, stream, consumer, inbox)
        self.wake()
        return OK

    def _bad_pull(self, inbox: str, description: str) -> None:
        props = Properties(user_properties=(("Status", "400"), ("Description", description)))
        self.outbox.send(inbox, b"", props)
