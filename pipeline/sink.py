"""The ``jetmq`` sink: DataFrame rows published to a broker (batch and streaming).

``df.write.format("jetmq").mode("append").option("url", "mqtt://host:port").save()``
(pyspark refuses the default save mode ``errorifexists`` for Python sources; ``append``
is the only one meaning anything here). Columns: ``topic`` (string, required),
``payload`` (binary or string, required), optional ``qos`` (int 0-2, default option
``qos``, 1), ``retain`` (boolean), ``headers`` (map<string,string> -> MQTT 5 user
properties). Other columns are ignored.

Each task publishes its rows over its own connection and returns its
:class:`SinkCommit` only after every acknowledgement (never ``None``: pyspark 4.3 then
retries the task and publishes twice). A failed task raised before its commit message
existed; Spark retries it: at-least-once delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipeline.mqttpub import DEFAULT_INFLIGHT, BrokerAddress, Publisher, parse_url
from pipeline.options import OptionError

log = logging.getLogger("jetmq.pipeline")


@dataclass(frozen=True)
class SinkOptions:
    address: BrokerAddress
    qos: int
    max_inflight: int
    timeout: float
    client_id_prefix: str


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task published, all of it acknowledged."""

    partition_id: int
    messages: int


def parse_sink_options(opts: Mapping[str, str]) -> SinkOptions:
    url = opts.get("url")
    if not url:
        raise OptionError(
            'jetmq sink: option \'url\' is required, e.g. .option("url", "mqtt://127.0.0.1:1883")'
        )
    try:
        address = parse_url(url, opts)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if opts.get("username"):
        address = replace(address, username=opts["username"], password=opts.get("password"))

    def num(name: str, default: str, lo: float, hi: float) -> float:
        raw = opts.get(name) or default
        try:
            value = float(raw)
        except ValueError:
            raise OptionError(
                f"jetmq sink: option {name!r} must be a number, got {raw!r}"
            ) from None
        if not lo <= value <= hi:
            raise OptionError(f"jetmq sink: option {name!r} must be in {lo:g}..{hi:g}, got {raw}")
        return value

    return SinkOptions(
        address=address,
        qos=int(num("qos", "1", 0, 2)),
        max_inflight=int(num("maxInflight", str(DEFAULT_INFLIGHT), 1, 65535)),
        timeout=num("timeout", "30", 0.1, 3600),
        client_id_prefix=opts.get("clientIdPrefix") or "jetmq-sink",
    )


def _check_schema(schema: StructType) -> None:
    names = set(schema.fieldNames())
    missing = [c for c in ("topic", "payload") if c not in names]
    if missing:
        raise OptionError(
            f"jetmq sink: the DataFrame needs columns topic and payload; missing {missing}"
            f" (has {sorted(names)})"
        )


def _payload(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"jetmq sink: payload must be binary or string, not {type(value).__name__}")


def publish_rows(opts: SinkOptions, rows: Iterator[Any], partition_id: int) -> SinkCommit:
    """Publish every row, wait for every acknowledgement, then return the commit message."""
    pub = Publisher(
        opts.address,
        client_id_prefix=opts.client_id_prefix,
        max_inflight=opts.max_inflight,
        timeout=opts.timeout,
    )
    try:
        for row in rows:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = d.get("topic")
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"jetmq sink: a row has no topic: {d!r:.200}")
            qos = d.get("qos")
            qos = opts.qos if qos is None else int(qos)
            if qos not in (0, 1, 2):
                raise ValueError(f"jetmq sink: qos must be 0, 1 or 2, got {qos}")
            headers = d.get("headers") or {}
            pub.publish(
                topic,
                _payload(d.get("payload")),
                qos,
                bool(d.get("retain") or False),
                [(str(k), str(v)) for k, v in headers.items()],
            )
        pub.flush()
        return SinkCommit(partition_id, pub.published)
    finally:
        pub.close()


def _partition_id() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return int(ctx.partitionId()) if ctx is not None else 0
    except ImportError:  # pragma: no cover
        return 0


class JetmqWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("jetmq sink: use mode('append'); a broker cannot be overwritten")
        _check_schema(schema)
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return publish_rows(self.opts, iterator, _partition_id())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(m.messages for m in messages if isinstance(m, SinkCommit))
        log.info("jetmq sink: %d messages published and acknowledged", n)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        n = sum(m.messages for m in messages if isinstance(m, SinkCommit))
        log.warning("jetmq sink: job aborted; %d messages were already published", n)


class JetmqStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        _check_schema(schema)
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return publish_rows(self.opts, iterator, _partition_id())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(m.messages for m in messages if isinstance(m, SinkCommit))
        log.info("jetmq sink: batch %d: %d messages published and acknowledged", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("jetmq sink: batch %d aborted; its rows are published again on retry", batchId)
