"""The ``jetmq`` source's options, parsed once into a frozen, picklable value.

Spark hands a data source its options as a case-insensitive dict of strings. Every
option is checked here, so a typo or a bad value is one clear ``ValueError`` naming the
option when the query is planned, never a crash in a worker. Table: docs/pipeline.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pipeline.mqttpub import BrokerAddress

DEFAULT_PARTITION_RECORDS: Final = 100_000
DEFAULT_CHUNK: Final = 10_000  # records per read transaction and per RecordBatch
MAX_SEQ: Final = (1 << 63) - 1  # Spark's long: larger seqs cannot be a ``seq`` value


class OptionError(ValueError):
    """An option of the jetmq source or sink is missing or has a bad value."""


@dataclass(frozen=True)
class SeqBound:
    """``earliest`` / ``latest`` or a per-stream map of sequences (``{"ORDERS": 10}``)."""

    kind: str  # "earliest" | "latest" | "map"
    seqs: tuple[tuple[str, int], ...] = ()

    def for_stream(self, name: str) -> int | None:
        for s, seq in self.seqs:
            if s == name:
                return seq
        return None


@dataclass(frozen=True)
class SourceOptions:
    path: str  # "" when reading through the broker (url)
    url: str | None  # mqtt://[user[:password]@]host[:port]: through the JetStream API
    streams: tuple[str, ...] | None  # None: every user stream, including later ones
    starting: SeqBound
    ending: SeqBound
    subject_filter: str | None
    partition_records: int
    max_records_per_trigger: int | None
    include_headers: bool
    chunk: int
    filter_pushdown: bool
    pull_batch: int = 10_000  # url=: records per packed DIRECT.GET request
    tls: tuple[tuple[str, str], ...] = ()  # url=: the TLS options (mqttpub.TLS_OPTIONS)

    def broker(self) -> BrokerAddress:
        """The ``BrokerAddress`` of ``url`` with the TLS options."""
        from pipeline.mqttpub import parse_url

        return parse_url(self.url or "", dict(self.tls))


def _int_option(opts: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(
            f"jetmq source: option {name!r} must be an integer, got {raw!r}"
        ) from None
    if value < 1:
        raise OptionError(f"jetmq source: option {name!r} must be at least 1, got {value}")
    return value


def _bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None or raw == "":
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(f"jetmq source: option {name!r} must be true or false, got {raw!r}")


def _seq_bound(opts: Mapping[str, str], name: str, default: str) -> SeqBound:
    raw = (opts.get(name) or default).strip()
    if raw.lower() in ("earliest", "latest"):
        return SeqBound(raw.lower())
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and type(v) is int and 0 <= v <= MAX_SEQ for k, v in data.items()
    ):
        raise OptionError(
            f"jetmq source: option {name!r} must be 'earliest', 'latest' or a JSON object"
            f' of stream name to sequence such as {{"ORDERS": 10}}, got {raw!r}'
        )
    return SeqBound("map", tuple(sorted(data.items())))


def parse_source_options(opts: Mapping[str, str]) -> SourceOptions:
    url = opts.get("url") or None
    path = opts.get("path") or ""
    tls: tuple[tuple[str, str], ...] = ()
    if url and path:
        raise OptionError(
            "jetmq source: give either option 'path' (the broker's data directory, on its"
            " host) or option 'url' (through the broker), not both"
        )
    if url:
        from pipeline.mqttpub import parse_url, tls_options

        tls = tls_options(opts)
        try:
            parse_url(url, dict(tls))
        except ValueError as exc:
            raise OptionError(str(exc).replace("jetmq sink", "jetmq source")) from None
    elif not path:
        raise OptionError(
            "jetmq source: option 'path' (the broker's data directory) or 'url' (the broker,"
            ' mqtt://host:port) is required, e.g. .option("path", "./jetmq-data")'
        )
    streams: tuple[str, ...] | None = None
    raw_streams = opts.get("streams")
    if raw_streams:
        streams = tuple(s.strip() for s in raw_streams.split(",") if s.strip())
        if not streams:
            raise OptionError("jetmq source: option 'streams' names no stream")
    starting = _seq_bound(opts, "startingSequence", "earliest")
    ending = _seq_bound(opts, "endingSequence", "latest")
    if ending.kind == "earliest":
        raise OptionError("jetmq source: option 'endingSequence' cannot be 'earliest'")
    subject_filter = opts.get("subjectFilter") or None
    if subject_filter is not None:
        from pipeline.subjects import SubjectFilter

        try:
            SubjectFilter(subject_filter)
        except ValueError as exc:
            raise OptionError(f"jetmq source: {exc}") from None
    partition_records = _int_option(opts, "maxRecordsPerPartition", DEFAULT_PARTITION_RECORDS)
    assert partition_records is not None
    chunk = _int_option(opts, "chunkSize", DEFAULT_CHUNK)
    assert chunk is not None
    return SourceOptions(
        path=path,
        url=url,
        streams=streams,
        starting=starting,
        ending=ending,
        subject_filter=subject_filter,
        partition_records=partition_records,
        max_records_per_trigger=_int_option(opts, "maxRecordsPerTrigger", None),
        include_headers=_bool_option(opts, "includeHeaders", True),
        chunk=chunk,
        filter_pushdown=_bool_option(opts, "filterPushdown", False),
        pull_batch=_int_option(opts, "pullBatch", 10_000) or 10_000,
        tls=tls,
    )
