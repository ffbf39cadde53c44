"""Reading streams through a running broker (option ``url``): the JetStream API over MQTT 5.

Executors anywhere reach the data this way, not only on the broker's host. One
:class:`JsLink` per task: an MQTT 5 connection (:class:`pipeline.mqttwire.Wire`, blocking,
driven by the task's own thread; not paho, which copies a large PUBLISH several times
while decoding it), with one inbox subscription (``_INBOX/jetmq-spark/<id>/#``, QoS 1)
for API answers and packed reads.

- Planning: ``$JS/API/STREAM/NAMES`` (paged) and ``$JS/API/STREAM/INFO/<s>`` give each
  stream's range; the stream's ``created`` time stands for its id (a stream deleted and
  re-created meanwhile has another).
- A partition ``first..last`` of a stream is read with jetmq's packed DIRECT.GET
  (request user property ``Jetmq-Pack: 1``; docs/jetstream.md): one request per range of
  ``pullBatch`` sequences, answered by ONE PUBLISH holding the stored records (the store's
  record layout, decoded by :mod:`pipeline.batches` exactly as ``path=`` decodes them),
  then a ``204 EOB`` status. Two requests are in flight per partition; an answer cut by
  its byte bound is followed by a request for the rest of its range. Nothing is left
  behind on the broker (no consumer), and the stream needs no ``allow_direct``.

Decision (measured, docs/benchmarks.md): the ephemeral pull consumer used before sent one
MQTT PUBLISH per message (7.8k rows/s); packed answers carry thousands of records each.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any, Final

from pipeline.mqttpub import BrokerAddress
from pipeline.mqttwire import (
    CONNACK,
    DISCONNECT,
    PUBACK,
    PUBLISH,
    SUBACK,
    Message,
    Wire,
    WireError,
    parse_props,
    parse_publish,
)
from pipeline.storeread import StreamMeta

API: Final = "$JS/API/"
PULL_BATCH: Final = 10_000  # records asked for per packed request
PACK_BYTES: Final = 16 << 20  # the broker's largest packed answer
PREFETCH: Final = 2  # packed requests in flight per partition


class NetReadError(RuntimeError):
    """The broker could not be reached or answered with a JetStream error."""


class JsLink:
    """A connected MQTT 5 client for JetStream requests and packed reads on one inbox."""

    def __init__(self, address: BrokerAddress, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.address = address
        self.inbox = f"_INBOX/jetmq-spark/{uuid.uuid4().hex}"
        self._answers: dict[bytes, memoryview] = {}
        self._packs: dict[bytes, list[Message]] = {}
        self._connected = False
        self._subscribed = 0  # the SUBSCRIBE's packet id until its SUBACK
        self._n = 0
        scheme = "mqtts" if address.tls else "mqtt"
        try:
            self._wire = Wire(address, "jetmq-spark", timeout)
        except (OSError, WireError) as exc:
            raise NetReadError(
                f"jetmq source: cannot connect to {scheme}://{address.host}:{address.port}: {exc}"
            ) from exc
        try:
            self._wait(lambda: self._connected, "CONNACK")
            self._subscribed = self._wire.subscribe(self.inbox + "/#", 1)
            self._wait(lambda: not self._subscribed, "SUBACK")
        except BaseException:
            self._wire.close()
            raise

    # -- packets in ---------------------------------------------------------------------------

    def _handle(self, kind: int, flags: int, body: bytearray) -> None:
        if kind == PUBLISH:
            msg, pid = parse_publish(flags, body)
            if pid:
                self._wire.puback(pid)
            corr = msg.props.correlation
            if corr is not None and msg.topic.endswith("/r"):
                self._answers[corr] = msg.payload
            elif corr is not None and msg.topic.endswith("/p"):
                self._packs.setdefault(corr, []).append(msg)
            # (anything else on the inbox is not ours to read: dropped)
        elif kind == PUBACK:
            if len(body) < 2:
                raise NetReadError("jetmq source: a PUBACK is cut short")
            code = body[2] if len(body) > 2 else 0
            if code >= 0x80:  # a refused request: say why, do not wait
                why = parse_props(body, 3)[0].reason if len(body) > 3 else None
                raise NetReadError(
                    f"jetmq source: the broker refused a request: reason code 0x{code:02x}"
                    f" ({why or 'no reason given'})"
                )
        elif kind == CONNACK:
            code = body[1] if len(body) > 1 else 0
            if code >= 0x80:
                why = parse_props(body, 2)[0].reason if len(body) > 2 else None
                raise NetReadError(
                    f"jetmq source: the broker refused the connection: reason code"
                    f" 0x{code:02x} ({why or 'no reason given'})"
                )
            self._connected = True
        elif kind == SUBACK:
            _props, pos = parse_props(body, 2)
            if any(rc >= 0x80 for rc in body[pos:]):
                raise NetReadError(
                    f"jetmq source: the broker refused the inbox subscription"
                    f" (reason code 0x{body[pos]:02x})"
                )
            self._subscribed = 0
        elif kind == DISCONNECT:
            code = body[0] if body else 0
            why = parse_props(body, 1)[0].reason if len(body) > 1 else None
            raise NetReadError(
                f"jetmq source: the broker closed the connection: reason code 0x{code:02x}"
                f" ({why or 'no reason given'})"
            )

    def _wait(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise NetReadError(
                    f"jetmq source: no {what} from the broker within {self.timeout:g} s"
                )
            self._wire.settimeout(left)
            try:
                self._handle(*self._wire.read())
            except TimeoutError:
                continue
            except WireError as exc:
                raise NetReadError(f"jetmq source: {exc}") from exc

    # -- requests -------------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        body: bytes,
        reply: str,
        corr: bytes | None = None,
        user: tuple[tuple[str, str], ...] = (),
    ) -> None:
        try:
            self._wire.publish(topic, body, reply, corr, user)
        except WireError as exc:
            raise NetReadError(f"jetmq source: {exc}") from exc

    def request(self, rest: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON answer to ``$JS/API/<rest>``; a JetStream error raises NetReadError."""
        self._n += 1
        corr = b"%d" % self._n
        payload = b"" if body is None else json.dumps(body).encode()  # DELETE wants none
        self.publish(API + rest, payload, self.inbox + "/r", corr)
        self._wait(lambda: corr in self._answers, f"answer to {API}{rest}")
        raw = bytes(self._answers.pop(corr))
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

    def ask_packed(self, stream: str, body: dict[str, Any]) -> bytes:
        """Send a packed DIRECT.GET (``Jetmq-Pack: 1``); its correlation id."""
        self._n += 1
        corr = b"p%d" % self._n
        self.publish(
            f"{API}DIRECT/GET/{stream}",
            json.dumps(body).encode(),
            self.inbox + "/p",
            corr,
            (("Jetmq-Pack", "1"),),
        )
        return corr

    def packed_answer(self, corr: bytes) -> tuple[memoryview, int]:
        """The records and last seq of packed request ``corr`` (after its 204 EOB); a
        refusal raises NetReadError (``503``: the stream does not exist)."""

        def done() -> bool:
            got = self._packs.get(corr) or []
            return len(got) >= 2 or (len(got) == 1 and _status(got[0]) is not None)

        self._wait(done, f"packed answer from {API}DIRECT/GET")
        got = self._packs.pop(corr)
        status = _status(got[0])
        if status is not None:
            code, why = status
            raise NetReadError(f"jetmq source: DIRECT.GET answered {code} {why}")
        up = dict(got[1].props.user)
        return got[0].payload, int(up.get("Nats-Last-Sequence", "0"))

    def close(self) -> None:
        self._wire.disconnect()


def _status(msg: Message) -> tuple[str, str] | None:
    """``(Status, Description)`` of a status message other than ``204``, else None."""
    up = dict(msg.props.user)
    code = up.get("Status")
    if code is None or code == "204":
        return None
    return code, up.get("Description", "")


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


def stream_metas(url: str | BrokerAddress) -> dict[str, StreamMeta]:
    """Every stream through the broker at ``url``, as the planner sees them."""
    from pipeline.mqttpub import parse_url

    link = JsLink(parse_url(url) if isinstance(url, str) else url)
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


def unpack(payload: bytes | memoryview) -> tuple[Any, Any]:
    """The seqs (numpy int64) and the stored records (one Arrow binary array over the
    payload, nothing copied) of a packed answer (docs/jetstream.md)."""
    import numpy as np
    import pyarrow as pa

    if len(payload) < 4:
        raise NetReadError("jetmq source: a packed answer is cut short")
    n = int.from_bytes(payload[:4], "big")
    head = 4 + 12 * n
    if len(payload) < head:
        raise NetReadError("jetmq source: a packed answer is cut short")
    seqs = np.frombuffer(payload, dtype=">u8", count=n, offset=4).astype(np.int64)
    lens = np.frombuffer(payload, dtype=">u4", count=n, offset=4 + 8 * n).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    total = int(lens.sum())
    if head + total != len(payload) or total >= 1 << 31:
        raise NetReadError("jetmq source: a packed answer's lengths do not add up")
    np.cumsum(lens, out=offsets[1:])
    buf = pa.py_buffer(payload)
    raw = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), buf.slice(head)])
    return seqs, raw


def scan(
    link: JsLink, stream: str, first: int, last: int, per_request: int = PULL_BATCH
) -> Iterator[tuple[Any, Any]]:
    """``(seqs, records)`` (:func:`unpack`) of ``stream`` stored in ``first..last``, one answer at a time.

    Packed DIRECT.GETs over seq ranges of ``per_request``, the next range asked for before
    the current one is read (the broker answers a client's requests in order); an answer
    cut by its byte bound is followed by a request for the rest of its range."""
    ranges = deque(
        (lo, min(lo + per_request - 1, last)) for lo in range(first, last + 1, per_request)
    )
    asked: deque[tuple[bytes, int, int]] = deque()

    def ask(lo: int, hi: int) -> tuple[bytes, int, int]:
        body = {"seq": lo, "batch": hi - lo + 1, "up_to_seq": hi, "max_bytes": PACK_BYTES}
        return link.ask_packed(stream, body), lo, hi

    while ranges or asked:
        while ranges and len(asked) < PREFETCH:
            asked.append(ask(*ranges.popleft()))
        corr, _, hi = asked.popleft()
        while True:
            payload, lseq = link.packed_answer(corr)
            if len(payload) > 4:
                yield unpack(payload)
            if len(payload) <= 4 or lseq >= hi:
                break
            corr, _, hi = ask(lseq + 1, hi)  # cut by max_bytes (or a gap at the end)
