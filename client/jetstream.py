"""The JetStream context, shaped like nats-py's (``js = client.jetstream()``).

Names and subjects: stream and consumer configs use NATS subjects (``orders.>``), as the
API does; ``publish`` takes the MQTT topic a PUBLISH goes to (``orders/eu/1``, captured by
a stream with subject ``orders.eu.1`` - spec §2.2); ``pull_subscribe``/``subscribe`` take
a NATS subject filter (the consumer's ``filter_subject``). Durations in configs are
nanoseconds (the wire form, ``store.models``); timeouts are seconds.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import anyio

from broker.mqtt.reason_codes import ReasonCode
from client.errors import (
    ConsumerNotFoundError,
    JetStreamError,
    NoMessageFoundError,
    NoStreamResponseError,
    PublishError,
    api_error,
    publish_refusal,
)
from client.jsapi import API_PREFIX, Api
from client.message import first
from client.protocol import MQTTClient
from client.pull import PullSubscription
from client.push import ErrorCallback, PushSubscription, ordered_config
from store.headerblock import decode_headers
from store.models import ConsumerConfig, ConsumerInfo, StreamConfig, StreamInfo
from store.pausestate import PauseState
from store.topics import subject_to_topic, topic_to_subject


@dataclass(frozen=True, slots=True)
class PubAck:
    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class RawStreamMsg:
    """A stored message as STREAM.MSG.GET returns it."""

    subject: str
    seq: int
    data: bytes
    headers: tuple[tuple[str, str], ...]
    time: str

    def header(self, name: str) -> str | None:
        return first(self.headers, name)


def _headers(
    headers: dict[str, str] | list[tuple[str, str]] | tuple[tuple[str, str], ...] | None,
) -> list[tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, dict):
        return list(headers.items())
    return list(headers)


class JetStreamContext:
    def __init__(self, client: MQTTClient, *, prefix: str = API_PREFIX, timeout: float = 5.0):
        self.client = client
        self.api = Api(client, prefix, timeout)

    # ---- account and streams ----------------------------------------------------------
    async def account_info(self) -> dict[str, Any]:
        return await self.api.call("INFO")

    async def add_stream(self, config: StreamConfig | None = None, **params: Any) -> StreamInfo:
        """STREAM.CREATE; ``config`` or its fields as keyword arguments."""
        cfg = config if config is not None else StreamConfig(**params)
        data = await self.api.call(f"STREAM/CREATE/{cfg.name}", cfg.to_wire())
        return StreamInfo.model_validate(data)

    async def update_stream(self, config: StreamConfig | None = None, **params: Any) -> StreamInfo:
        cfg = config if config is not None else StreamConfig(**params)
        data = await self.api.call(f"STREAM/UPDATE/{cfg.name}", cfg.to_wire())
        return StreamInfo.model_validate(data)

    async def delete_stream(self, name: str) -> bool:
        data = await self.api.call(f"STREAM/DELETE/{name}")
        return bool(data.get("success"))

    async def stream_info(
        self, name: str, subjects_filter: str | None = None, deleted_details: bool = False
    ) -> StreamInfo:
        body: dict[str, Any] = {}
        if subjects_filter:
            body["subjects_filter"] = subjects_filter
        if deleted_details:
            body["deleted_details"] = True
        data = await self.api.call(f"STREAM/INFO/{name}", body or None)
        return StreamInfo.model_validate(data)

    async def _paged(self, tail: str, key: str, body: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        while True:
            data = await self.api.call(tail, {**body, "offset": len(out)} if out else body or None)
            page = data.get(key) or []
            out.extend(page)
            total = int(data.get("total", 0))
            if not page or len(out) >= total:
                return out

    async def stream_names(self, subject: str | None = None) -> list[str]:
        body = {"subject": subject} if subject else {}
        return [str(n) for n in await self._paged("STREAM/NAMES", "streams", body)]

    async def streams_info(self, subject: str | None = None) -> list[StreamInfo]:
        body = {"subject": subject} if subject else {}
        page = await self._paged("STREAM/LIST", "streams", body)
        return [StreamInfo.model_validate(s) for s in page]

    async def purge_stream(
        self,
        name: str,
        subject: str | None = None,
        seq: int | None = None,
        keep: int | None = None,
    ) -> int:
        """Purge (all, or ``subject`` only, below ``seq``, or all but the newest ``keep``);
        the number of messages purged."""
        body: dict[str, Any] = {}
        if subject:
            body["filter"] = subject
        if seq is not None:
            body["seq"] = seq
        if keep is not None:
            body["keep"] = keep
        data = await self.api.call(f"STREAM/PURGE/{name}", body or None)
        return int(data.get("purged", 0))

    async def get_msg(
        self,
        name: str,
        seq: int | None = None,
        subject: str | None = None,
        next: bool = False,
        direct: bool = False,
    ) -> RawStreamMsg:
        """By sequence; the last message of ``subject``; or with ``next`` the first message
        at or after ``seq`` matching ``subject``. ``direct`` uses DIRECT.GET (streams with
        ``allow_direct``): the message itself comes back, not JSON."""
        body: dict[str, Any]
        if next and subject:
            body = {"next_by_subj": subject, **({"seq": seq} if seq else {})}
        elif subject:
            body = {"last_by_subj": subject}
        elif seq is not None:
            body = {"seq": seq}
        else:
            raise ValueError("get_msg needs seq or subject")
        if direct:
            return await self._direct_get(name, body)
        data = await self.api.call(f"STREAM/MSG/GET/{name}", body)
        msg = data.get("message") or {}
        hdrs = base64.b64decode(msg["hdrs"]) if msg.get("hdrs") else b""
        return RawStreamMsg(
            subject=str(msg.get("subject", "")),
            seq=int(msg.get("seq", 0)),
            data=base64.b64decode(msg.get("data") or ""),
            headers=decode_headers(hdrs) if hdrs else (),
            time=str(msg.get("time", "")),
        )

    async def _direct_get(self, name: str, body: dict[str, Any]) -> RawStreamMsg:
        topic = f"{self.api.prefix}/DIRECT/GET/{name}"
        payload = json.dumps(body, separators=(",", ":"))
        try:
            answer = await self.client.request(
                topic, payload, self.api.timeout, no_responders=False
            )
        except PublishError as exc:
            raise JetStreamError(503, 0, f"{topic}: {exc.reason or 'refused'}") from None
        status = first(answer.user_properties, "Status")
        if status is not None:
            text = first(answer.user_properties, "Description") or ""
            if status == "404":
                raise NoMessageFoundError(404, 10037, text.lower() or "no message found")
            if status == "503":
                why = "no such stream, or allow_direct is off"
                raise JetStreamError(503, 0, f"direct get from {name}: no responders ({why})")
            raise JetStreamError(int(status) if status.isdigit() else 500, 0, text or status)
        own = {"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"}
        props = answer.user_properties
        return RawStreamMsg(
            subject=first(props, "Nats-Subject") or "",
            seq=int(first(props, "Nats-Sequence") or 0),
            data=answer.payload,
            headers=tuple(h for h in props if h[0] not in own),
            time=first(props, "Nats-Time-Stamp") or "",
        )

    async def get_last_msg(self, name: str, subject: str) -> RawStreamMsg:
        return await self.get_msg(name, subject=subject)

    async def delete_msg(self, name: str, seq: int, erase: bool = False) -> bool:
        body = {"seq": seq, "no_erase": not erase}
        data = await self.api.call(f"STREAM/MSG/DELETE/{name}", body)
        return bool(data.get("success"))

    # ---- consumers ---------------------------------------------------------------------
    async def add_consumer(
        self, stream: str, config: ConsumerConfig | None = None, **params: Any
    ) -> ConsumerInfo:
        cfg = config if config is not None else ConsumerConfig(**params)
        return await self.api.create_consumer(stream, cfg)

    async def update_consumer(
        self, stream: str, config: ConsumerConfig | None = None, **params: Any
    ) -> ConsumerInfo:
        cfg = config if config is not None else ConsumerConfig(**params)
        return await self.api.create_consumer(stream, cfg, action="update")

    async def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return await self.api.consumer_info(stream, consumer)

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        return await self.api.delete_consumer(stream, consumer)

    async def pause_consumer(self, stream: str, consumer: str, until: str) -> PauseState:
        """CONSUMER.PAUSE until ``until`` (RFC 3339): nothing is delivered until then."""
        data = await self.api.call(f"CONSUMER/PAUSE/{stream}/{consumer}", {"pause_until": until})
        return _pause_state(data)

    async def resume_consumer(self, stream: str, consumer: str) -> PauseState:
        """CONSUMER.PAUSE with an empty body: the consumer delivers again."""
        return _pause_state(await self.api.call(f"CONSUMER/PAUSE/{stream}/{consumer}"))

    async def consumer_names(self, stream: str) -> list[str]:
        return [str(n) for n in await self._paged(f"CONSUMER/NAMES/{stream}", "consumers", {})]

    async def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        page = await self._paged(f"CONSUMER/LIST/{stream}", "consumers", {})
        return [ConsumerInfo.model_validate(c) for c in page]

    # ---- publish -----------------------------------------------------------------------
    async def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        *,
        timeout: float | None = None,
        stream: str | None = None,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        msg_id: str | None = None,
        qos: int = 1,
        json_ack: bool = False,
    ) -> PubAck:
        """Publish into a stream and return its PubAck. By default the PubAck is read
        from the PUBACK/PUBREC user properties (``Nats-Stream``, ``Nats-Sequence``,
        ``Nats-Duplicate``); ``json_ack`` asks for the JSON PubAck on a Response Topic
        (and gets the full ``err_code`` of a refusal). A refusal raises the JetStream
        error; a topic no stream captures raises :class:`NoStreamResponseError`."""
        props = _headers(headers)
        if msg_id is not None:
            props.append(("Nats-Msg-Id", msg_id))
        if stream is not None:
            props.append(("Nats-Expected-Stream", stream))
        if qos not in (1, 2):
            raise ValueError("a JetStream publish needs QoS 1 or 2")
        wait = self.api.timeout if timeout is None else timeout
        if json_ack:
            return await self._publish_json(topic, payload, props, qos, wait)
        try:
            with anyio.fail_after(wait):
                result = await self.client.publish(topic, payload, qos, user_properties=props)
        except PublishError as exc:
            raise publish_refusal(exc.reason_code, exc.reason) from None
        name = result.header("Nats-Stream")
        seq = result.header("Nats-Sequence")
        if name is None or seq is None:
            raise NoStreamResponseError(f"no stream captured {topic!r}")
        return PubAck(name, int(seq), result.header("Nats-Duplicate") == "true")

    async def _publish_json(
        self, topic: str, payload: bytes | str, props: list[tuple[str, str]], qos: int, wait: float
    ) -> PubAck:
        inbox = await self.client.open_inbox(max_pending=4)
        try:
            with anyio.fail_after(wait):
                try:
                    result = await self.client.publish(
                        topic, payload, qos, user_properties=props, response_topic=inbox.topic
                    )
                except PublishError:
                    result = None  # the JSON on the Response Topic has the whole error
                if (
                    result is not None
                    and result.header("Nats-Stream") is None
                    and result.reason_code is ReasonCode.NO_MATCHING_SUBSCRIBERS
                ):
                    raise NoStreamResponseError(f"no stream captured {topic!r}")
                answer = await inbox.next()
        except TimeoutError:
            raise NoStreamResponseError(f"no PubAck for {topic!r} within {wait:g} s") from None
        finally:
            await inbox.unsubscribe()
        try:
            data = json.loads(answer.payload)
        except ValueError:
            raise JetStreamError(500, 0, "the PubAck is not JSON") from None
        if "error" in data:
            raise api_error(data["error"])
        return PubAck(
            str(data["stream"]), int(data["seq"]), bool(data.get("duplicate")), data.get("domain")
        )

    # ---- consuming ---------------------------------------------------------------------
    async def pull_subscribe(
        self,
        subject: str | None = None,
        durable: str | None = None,
        stream: str | None = None,
        config: ConsumerConfig | None = None,
    ) -> PullSubscription:
        """A pull subscription on ``durable`` (created when missing, kept afterwards) or
        on a new ephemeral consumer (deleted by ``unsubscribe``)."""
        if stream is None:
            if not subject:
                raise ValueError("pull_subscribe needs a subject or a stream")
            stream = await self.api.find_stream(subject)
        created = False
        name = durable or (config.durable_name or config.name if config else None)
        info = None
        if name:
            try:
                info = await self.api.consumer_info(stream, name)
            except ConsumerNotFoundError:
                info = None
            if info is not None and info.config.deliver_subject:
                raise JetStreamError(400, 0, f"consumer {name!r} is push based")
        if info is None:
            cfg = config or ConsumerConfig(ack_policy="explicit")
            update: dict[str, Any] = {}
            if subject and not cfg.filter_subject and not cfg.filter_subjects:
                update["filter_subject"] = subject
            if durable:
                update |= {"durable_name": durable, "name": durable}
            info = await self.api.create_consumer(stream, cfg.model_copy(update=update))
            created = not (durable or cfg.durable_name)
        inbox = await self.client.open_inbox()
        return PullSubscription(self.api, stream, info.name, inbox, created)

    async def subscribe(
        self,
        subject: str | None = None,
        queue: str | None = None,
        *,
        durable: str | None = None,
        stream: str | None = None,
        config: ConsumerConfig | None = None,
        ordered_consumer: bool = False,
        idle_heartbeat: float | None = None,
        flow_control: bool = False,
        deliver_policy: str | None = None,
        error_cb: ErrorCallback | None = None,
        pending_msgs_limit: int | None = None,
    ) -> PushSubscription:
        """A push subscription (ADR-15): binds to ``durable`` when it exists (checking it
        is push based and its deliver group), else creates the consumer after subscribing
        to its deliver topic. ``queue`` = a deliver group (an MQTT shared subscription);
        it is also the durable name when none is given. ``pending_msgs_limit``: messages
        buffered before the client drops (and the gap detection notices)."""
        if queue and (ordered_consumer or idle_heartbeat or flow_control):
            raise ValueError("heartbeats, flow control and ordered consumers need no queue")
        if queue and durable is None:
            durable = queue
        if stream is None:
            if not subject:
                raise ValueError("subscribe needs a subject or a stream")
            stream = await self.api.find_stream(subject)
        if durable:
            try:
                info = await self.api.consumer_info(stream, durable)
            except ConsumerNotFoundError:
                pass
            else:
                return await self._bind(stream, info, queue, error_cb)
        cfg = config or ConsumerConfig(ack_policy="none" if ordered_consumer else "explicit")
        update: dict[str, Any] = {}
        if subject and not cfg.filter_subject and not cfg.filter_subjects:
            update["filter_subject"] = subject
        if durable:
            update |= {"durable_name": durable, "name": durable}
        if queue:
            update["deliver_group"] = queue
        if idle_heartbeat:
            update["idle_heartbeat"] = int(idle_heartbeat * 1_000_000_000)
        if flow_control:
            update["flow_control"] = True
        if deliver_policy:
            update["deliver_policy"] = deliver_policy
        cfg = cfg.model_copy(update=update)
        if ordered_consumer:
            cfg = ordered_config(cfg, idle_heartbeat or 5.0)
        if queue:
            topic = cfg.deliver_subject and _topic(cfg.deliver_subject)
            topic = topic or f"_DELIVER/{self.client.new_inbox().rsplit('/', 2)[1]}/{queue}"
            sub = await self.client.subscribe(f"$share/{queue}/{topic}", qos=1)
        else:
            sub = await self.client.open_inbox(max_pending=pending_msgs_limit)
            topic = sub.topic
        cfg = cfg.model_copy(update={"deliver_subject": topic_to_subject(topic)})
        try:
            info = await self.api.create_consumer(stream, cfg)
        except BaseException:
            await sub.unsubscribe()
            raise
        return PushSubscription(
            self.api,
            stream,
            info,
            sub,
            created=not durable,
            ordered=ordered_consumer,
            queue=queue,
            error_cb=error_cb,
        )

    async def _bind(
        self, stream: str, info: ConsumerInfo, queue: str | None, error_cb: ErrorCallback | None
    ) -> PushSubscription:
        """ADR-15 "Push Consumer active information and queue group binding"."""
        cfg = info.config
        if not cfg.deliver_subject:
            raise JetStreamError(
                400, 0, f"consumer {info.name!r} is pull based: use pull_subscribe"
            )
        group = cfg.deliver_group
        if queue is None and group:
            raise JetStreamError(
                400, 0, "cannot create a non-queue subscription for a consumer of a deliver group"
            )
        if queue is not None and group != queue:
            raise JetStreamError(
                400, 0, f"consumer {info.name!r} has deliver group {group!r}, not {queue!r}"
            )
        if queue is None and info.push_bound:
            raise JetStreamError(400, 0, f"consumer {info.name!r} is already bound (duplicate)")
        topic = _topic(cfg.deliver_subject)
        if queue:
            sub = await self.client.subscribe(f"$share/{queue}/{topic}", qos=1)
        else:
            sub = await self.client.subscribe(topic, qos=1)
        return PushSubscription(
            self.api, stream, info, sub, created=False, queue=queue, error_cb=error_cb
        )


def _topic(subject: str) -> str:
    return subject_to_topic(subject)


def _pause_state(data: dict[str, Any]) -> PauseState:
    rem = data.get("pause_remaining")
    return PauseState(
        bool(data.get("paused")),
        str(data.get("pause_until") or "0001-01-01T00:00:00Z"),
        int(rem) if rem is not None else None,
    )
