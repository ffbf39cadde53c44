"""The ``jetmq`` PySpark data source: batch and streaming reads of stored streams.

Who calls what, where (pyspark 4.x):
- the driver pickles :class:`JetmqDataSource` (options only) to Python workers;
- a planning worker calls ``reader()``/``streamReader()``, ``pushFilters`` (batch),
  ``partitions``; the streaming reader's offset methods run in one long-lived worker
  per query;
- executor workers call ``read(partition)``: each opens the store read-only (cached per
  process, :mod:`pipeline.storeread`) and yields ``pyarrow.RecordBatch`` es of at most
  ``chunkSize`` rows, one short read transaction each.
Readers keep only options and plain values: no environment, no transaction on ``self``.

Retention gaps (sequences removed before Spark read them) are skipped, never an error;
``read`` logs how many a partition skipped (logger ``jetmq.pipeline``) and
:func:`pipeline.storeread.count_stored` counts them for a range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from pipeline import batches, plan, pushdown, storeread
from pipeline.options import SourceOptions, parse_source_options
from pipeline.subjects import SubjectFilter

_limits: Any
try:  # pyspark >= 4.2: read limits and the availableNow hook
    from pyspark.sql.streaming import datasource as _limits
except ImportError:  # pragma: no cover - pyspark 4.0/4.1 call latestOffset() bare
    _limits = None
_AvailableNow: type = _limits.SupportsTriggerAvailableNow if _limits is not None else object


log = logging.getLogger("jetmq.pipeline")


class SeqRangePartition(InputPartition):
    """One partition: sequences ``first..last`` of one stream (by its id, so a stream
    deleted and re-created meanwhile reads nothing rather than another stream's data)."""

    def __init__(self, stream: str, sid: int, first: int, last: int) -> None:
        super().__init__((stream, first, last))
        self.stream = stream
        self.sid = sid
        self.first = first
        self.last = last


def _partitions(rngs: Sequence[plan.Range]) -> list[SeqRangePartition]:
    return [SeqRangePartition(r.stream, r.sid, r.first, r.last) for r in rngs]


def list_streams(opts: SourceOptions) -> dict[str, storeread.StreamMeta]:
    """The streams to plan with: from the data directory, or through the broker."""
    if not opts.url:
        return storeread.list_streams(opts.path)
    from pipeline import netread

    return netread.stream_metas(opts.broker())


def _chunks(opts: SourceOptions, part: SeqRangePartition, keep: batches.RowFilter) -> Iterator[Any]:
    """(rows seen, RecordBatch or None) per chunk of the partition."""
    if not opts.url:
        for rows in storeread.scan(opts.path, part.sid, part.first, part.last, opts.chunk):
            batch = batches.to_batch(
                part.stream, rows, include_headers=opts.include_headers, keep=keep
            )
            yield len(rows), batch
        return
    from pipeline import netread

    link = netread.JsLink(opts.broker())
    try:
        info = link.request(f"STREAM/INFO/{part.stream}")
        if netread.stream_id(info) != part.sid:
            return  # deleted and re-created since planning: not the stream planned
        for seqs, raw in netread.scan(link, part.stream, part.first, part.last, opts.pull_batch):
            batch = batches.records_batch(
                part.stream, seqs, None, raw=raw, include_headers=opts.include_headers, keep=keep
            )
            yield len(raw), batch
    except netread.NetReadError as exc:
        if "err_code 10059" in str(exc) or "answered 503" in str(exc):  # deleted meanwhile
            return
        raise
    finally:
        link.close()


def _read(opts: SourceOptions, part: SeqRangePartition, keep: batches.RowFilter) -> Iterator[Any]:
    seen = 0
    for n, batch in _chunks(opts, part, keep):
        seen += n
        if batch is not None:
            yield batch
    gap = part.last - part.first + 1 - seen
    if gap:
        log.info(
            "stream %s seqs %d..%d: %d sequences not stored (retention gaps), skipped",
            part.stream,
            part.first,
            part.last,
            gap,
        )


def _row_filter(opts: SourceOptions, pushed: pushdown.Pushed) -> batches.RowFilter:
    base = SubjectFilter(opts.subject_filter).matches if opts.subject_filter else None
    return batches.RowFilter(pushed.subject_predicate(base), pushed.ts_min_ns, pushed.ts_max_ns)


class JetmqBatchReader(DataSourceReader):
    """Batch reads between ``startingSequence`` and ``endingSequence``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.pushed = pushdown.Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        metas = list_streams(self.opts)
        chosen = plan.select(metas, self.opts, self.pushed.streams)
        start, end = plan.batch_bounds(chosen, self.opts)
        rngs = plan.ranges(
            start,
            end,
            metas,
            self.opts.partition_records,
            self.pushed.seq_min,
            self.pushed.seq_max,
        )
        if not rngs:  # nothing to read: one empty partition keeps Spark's plan simple
            return [SeqRangePartition("", 0, 1, 0)]
        return _partitions(rngs)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRangePartition)
        return _read(self.opts, partition, _row_filter(self.opts, self.pushed))


class JetmqPushdownReader(JetmqBatchReader):
    """:class:`JetmqBatchReader` taking Spark's filters (option ``filterPushdown=true``).

    A separate class because pyspark refuses any reader that defines ``pushFilters``
    while ``spark.sql.python.filterPushdown.enabled`` is false (its default in 4.3), so
    a plain session could not read at all if the base reader defined it."""

    def pushFilters(self, filters: list[Filter]) -> Any:
        self.pushed, left = pushdown.push(self.pushed, filters)
        return iter(left)


class JetmqStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """Micro-batches over every selected stream; offsets ``{"STREAM": last seq read}``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cap: dict[str, int] | None = None  # availableNow snapshot (driver-side state)

    def _streams(self, *, strict: bool) -> tuple[dict[str, storeread.StreamMeta], list[Any]]:
        metas = list_streams(self.opts)
        return metas, plan.select(metas, self.opts, strict=strict)

    def initialOffset(self) -> dict[str, int]:
        _, chosen = self._streams(strict=True)
        return plan.initial_offsets(chosen, self.opts.starting)

    def getDefaultReadLimit(self) -> Any:
        if _limits is None:
            return None
        if self.opts.max_records_per_trigger is not None:
            return _limits.ReadMaxRows(self.opts.max_records_per_trigger)
        return _limits.ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _, chosen = self._streams(strict=True)
        self._cap = {m.name: m.last_seq for m in chosen}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        _, chosen = self._streams(strict=False)
        max_rows: int | None = None
        if _limits is not None and isinstance(limit, _limits.ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None and start is None:  # pyspark 4.0/4.1 call latestOffset()
            max_rows = self.opts.max_records_per_trigger
        return plan.latest_offsets(start or {}, chosen, max_rows, self._cap)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        if not any(end.get(s, 0) > start.get(s, -1) for s in end):
            return []
        metas = list_streams(self.opts)
        return _partitions(plan.ranges(start, end, metas, self.opts.partition_records))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SeqRangePartition)
        return _read(self.opts, partition, _row_filter(self.opts, pushdown.Pushed()))

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the broker's store is never written by Spark."""


class JetmqDataSource(DataSource):
    """``spark.dataSource.register(JetmqDataSource)``; format name ``jetmq``.

    Reads with option ``path`` (the broker's data directory); writes with option ``url``
    (``mqtt://host:port``), see :mod:`pipeline.sink`."""

    @classmethod
    def name(cls) -> str:
        return "jetmq"

    def schema(self) -> str:
        """The source schema; without ``headers`` when ``includeHeaders=false``."""
        raw = (self.options.get("includeHeaders") or "true").strip().lower()
        return batches.SCHEMA_DDL_NO_HEADERS if raw in ("false", "0", "no") else batches.SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_source_options(self.options)
        if opts.filter_pushdown:
            return JetmqPushdownReader(opts)
        return JetmqBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetmqStreamReader(parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipeline.sink import JetmqWriter, parse_sink_options

        return JetmqWriter(parse_sink_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipeline.sink import JetmqStreamWriter, parse_sink_options

        return JetmqStreamWriter(parse_sink_options(self.options), schema)
