"""Reading streams through a running broker (option ``url``): the JetStream API over MQTT 5.

Executors anywhere reach the data this way, not only on the broker's host. One
:class:`JsLink` per task: a paho-mqtt MQTT 5 client driven from the task's own thread
(``client.loop``, no paho network thread), with one inbox subscription
(``_INBOX/jetmq-spark/<id>/#``, QoS 1) for API answers and deliveries.

- Planning: ``$JS/API/STREAM/NAMES`` (paged) and ``$JS/API/STREAM/INFO/<s>`` give each
  stream's range; the stream's ``created`` time stands for its id (a stream deleted and
  re-created meanwhile has another).
- A partition ``first..last`` of a stream is read by an ephemeral pull consumer made for it
  (``deliver_policy by_start_sequence``, ``opt_start_seq first``, ``ack_policy none``,
  an inactive threshold so a killed task leaves nothing behind) and pull requests
  (``$JS/API/CONSUMER/MSG/NEXT``, ``no_wait``) until a delivery passes ``last`` or nothing
  is pending; then the consumer is deleted. Each delivery's ack topic
  (``$JS/ACK/<stream>/<consumer>/<delivered>/<sseq>/<cseq>/<ts>/<pending>``) gives its
  sequence, time and what is still pending; user property ``Nats-Subject`` its subject
  (MQTT form); the other user properties are its headers.

Decision: a consumer per partition rather than message gets in batches: one request
brings up to ``batch`` messages, and the broker walks the stream once.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any, Final

from pipeline.mqttpub import BrokerAddress, new_client
from pipeline.storeread import StreamMeta
from store.topics import topic_to_subject

API: Final = "$JS/API/"
PULL_BATCH: Final = 1000
INACTIVE_NS: Final = 120 * 10**9


class NetReadError(RuntimeError):
    """The broker could not be reached or answered with a JetStream error."""


class Message(tuple[int, int, str, tuple[tuple[str, str], ...], bytes]):
    """(seq, time ns, subject, headers, payload): what ``batches.from_messages`` takes."""

    __slots__ = ()


class JsLink:
    """A connected MQTT 5 client for JetStream requests and deliveries on one inbox."""

    def __init__(self, address: BrokerAddress, *, timeout: float = 30.0) -> None:

        self.timeout = timeout
        self.address = address
        self.inbox = f"_INBOX/jetmq-spark/{uuid.uuid4().hex}"
        self._answers: dict[bytes, Any] = {}
        self.deliveries: deque[Any] = deque()
        self._failure: str | None = None
        self._connected = False
        self._subscribed = False
        self._closed = False
        self._n = 0
        client = new_client(address, "jetmq-spark")
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_publish = self._on_publish
        self._client = client
        try:
            client.connect(address.host, address.port, keepalive=60)
        except OSError as exc:
            raise NetReadError(
                f"jetmq source: cannot connect to mqtt://{address.host}:{address.port}: {exc}"
            ) from exc
        self._wait(lambda: self._connected, "CONNACK")
        client.subscribe(self.inbox + "/#", qos=1)
        self._wait(lambda: self._subscribed, "SUBACK")

    # -- paho callbacks (from client.loop, on this thread) ------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            self._failure = f"the broker refused the connection: {rc}"
        else:
            self._connected = True

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self._connected = False
        if not self._closed and self._failure is None:
            self._failure = f"the connection was lost ({rc})"

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        if any(rc.is_failure for rc in rcs):
            self._failure = f"the broker refused the inbox subscription ({rcs[0]})"
        else:
            self._subscribed = True

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        if rc.is_failure:  # a refused request (PUBACK >= 0x80): say why, do not wait
            why = getattr(props, "ReasonString", None) if props is not None else None
            self._failure = f"the broker refused a request: {rc} ({why or 'no reason given'})"

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        props = msg.properties
        corr = getattr(props, "CorrelationData", None) if props is not None else None
        if corr is not None and msg.topic.endswith("/r"):
            self._answers[bytes(corr)] = msg.payload
        else:
            self.deliveries.append(msg)

    # -- requests -------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise NetReadError(f"jetmq source: {self._failure}")

    def _wait(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            self._check()
            if time.monotonic() > deadline:
                raise NetReadError(
                    f"jetmq source: no {what} from the broker within {self.timeout:g} s"
                )
            self._client.loop(0.05)
        self._check()

    def publish(self, topic: str, body: bytes, reply: str, corr: bytes | None = None) -> None:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = reply
        if corr is not None:
            props.CorrelationData = corr
        self._client.publish(topic, body, qos=1, properties=props)

    def request(self, rest: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON answer to ``$JS/API/<rest>``; a JetStream error raises NetReadError."""
        self._n += 1
        corr = b"%d" % self._n
        payload = b"" if body is None else json.dumps(body).encode()  # DELETE wants none
        self.publish(API + rest, payload, self.inbox + "/r", corr)
        self._wait(lambda: corr in self._answers, f"answer to {API}{rest}")
        raw = self._answers.pop(corr)
        try:
            answer = json.loads(raw)
        except ValueError:
            raise NetReadError(f"jetmq source: {API}{rest} answered {raw[:200]!r}") from None
        err = answer.get("error") if isinstance(answer, dict) else None
        if err:
            raise NetReadError(
                f"jetmq source: {API}{rest}: {err.get('description')} (err_code {err.get('err_code')})"
            )
        return answer  # type: ignore[no-any-return]

    def wait_delivery(self) -> None:
        """Until a delivery (or status) arrives on the inbox; NetReadError after ``timeout``."""
        self._wait(lambda: bool(self.deliveries), "message or status for a pull request")

    def close(self) -> None:
        self._closed = True
        try:
            self._client.disconnect()
            self._client.loop(0.05)
        except Exception:  # closing a broken connection: nothing to report
            pass


def stream_id(info: dict[str, Any]) -> int:
    """A stream's identity over the network: its creation time (a re-created stream differs)."""
    return zlib.crc32(str(info.get("created", "")).encode()) or 1


def list_streams(link: JsLink) -> list[dict[str, Any]]:
    """Every stream's info (``$JS/API/STREAM/NAMES`` paged, then ``STREAM/INFO``)."""
    names: list[str] = []
    while True:
        page = link.request("STREAM/NAMES", {"offset": len(names)})
        got = page.get("streams") or []
        names += got
        if not got or len(names) >= int(page.get("total", 0)):
            break
    return [link.request(f"STREAM/INFO/{name}") for name in names]


def stream_metas(url: str) -> dict[str, StreamMeta]:
    """Every stream through the broker at ``url``, as the planner sees them."""
    from pipeline.mqttpub import parse_url

    link = JsLink(parse_url(url))
    try:
        infos = list_streams(link)
    finally:
        link.close()
    out: dict[str, StreamMeta] = {}
    for info in infos:
        cfg, state = info["config"], info["state"]
        out[cfg["name"]] = StreamMeta(
            cfg["name"],
            stream_id(info),
            int(state["first_seq"]),
            int(state["last_seq"]),
            int(state["messages"]),
            tuple(cfg.get("subjects") or ()),
        )
    return out


def _ack_meta(reply: str) -> tuple[int, int, int] | None:
    """(stream seq, time ns, pending) from an ack topic, None if it is not one."""
    parts = reply.split("/")
    if len(parts) != 9 or parts[0] != "$JS" or parts[1] != "ACK":
        return None
    try:
        return int(parts[5]), int(parts[7]), int(parts[8])
    except ValueError:
        return None


def scan(
    link: JsLink,
    stream: str,
    first: int,
    last: int,
    chunk: int,
    subject_filter: str | None,
    pull_batch: int = PULL_BATCH,
) -> Iterator[list[Message]]:
    """The messages of ``stream`` stored in ``first..last``, in chunks of at most ``chunk``."""
    config: dict[str, Any] = {
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": first,
        "ack_policy": "none",
        "inactive_threshold": INACTIVE_NS,
        "mem_storage": True,
    }
    if subject_filter:
        config["filter_subject"] = subject_filter
    made = link.request(f"CONSUMER/CREATE/{stream}", {"stream_name": stream, "config": config})
    consumer = made["name"]
    out: list[Message] = []
    try:
        done = False
        while not done:
            want = {"batch": min(pull_batch, last - first + 1), "no_wait": True}
            link.publish(
                f"{API}CONSUMER/MSG/NEXT/{stream}/{consumer}",
                json.dumps(want).encode(),
                link.inbox + "/d",
            )
            got = 0
            ended = False
            while not ended and not done:
                if not link.deliveries:
                    link.wait_delivery()
                msg = link.deliveries.popleft()
                props = msg.properties
                user = list(getattr(props, "UserProperty", None) or ())
                reply = getattr(props, "ResponseTopic", None)
                meta = _ack_meta(reply) if reply else None
                if meta is None:  # a status (404 no messages, 408, 409): the request ended
                    ended = True
                    continue
                seq, ts, pending = meta
                got += 1
                if seq > last:
                    done = True
                    break
                subject = ""
                headers: list[tuple[str, str]] = []
                for k, v in user:
                    if k == "Nats-Subject":
                        subject = topic_to_subject(v)
                    else:
                        headers.append((k, v))
                out.append(Message((seq, ts, subject, tuple(headers), bytes(msg.payload))))
                if len(out) >= chunk:
                    yield out
                    out = []
                if seq >= last or pending == 0:
                    done = True
                elif got == want["batch"]:
                    ended = True  # a request whose batch is complete gets no status
            if ended and got == 0:
                done = True  # nothing more is stored in the range
    finally:
        with contextlib.suppress(NetReadError):  # else the inactive threshold removes it
            link.request(f"CONSUMER/DELETE/{stream}/{consumer}")
    if out:
        yield out
