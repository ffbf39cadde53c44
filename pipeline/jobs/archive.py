"""``jetmq pipeline archive``: a stream, incrementally, into Parquet partitioned by date and
topic.

The stream is read from the broker's data directory (``--path``, on its host) or through
the running broker (``--url``, from any host: a Spark cluster's executors). One run is a
streaming query with ``trigger(availableNow=True)``: it reads what was
stored since the last run (the checkpoint in ``DIR/_checkpoint`` holds the offsets),
appends it to ``DIR`` (Parquet, ``date=YYYY-MM-DD/topic=<topic>``; Spark escapes the
``/`` of topics in directory names) and stops. Run it from cron or a systemd timer; a run
that finds nothing new writes nothing. Sequences removed by retention before a run are
skipped and reported ("sequences skipped").
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from pipeline.jobs.tlsflags import add_tls_flags, tls_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", required=True, help="stream to archive")
    p.add_argument("--to", required=True, metavar="DIR", help="Parquet output directory")
    p.add_argument(
        "--path",
        default="./jetmq-data",
        metavar="DATA_DIR",
        help="the broker's data directory (default ./jetmq-data)",
    )
    p.add_argument(
        "--url",
        default=None,
        metavar="mqtt://HOST:PORT",
        help="read through a running broker instead of its data directory (any executor host)",
    )
    add_tls_flags(p)
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--max-records-per-trigger",
        type=int,
        default=None,
        metavar="N",
        help="at most N messages per micro-batch (default: all available at once)",
    )


def skipped_sequences(progress: Sequence[dict[str, Any]]) -> int:
    """Sequences a run's micro-batches spanned but did not read (retention gaps).

    The first micro-batch of a new checkpoint has no start offset in Spark's progress: it
    starts at the stream's first stored message, so nothing before it was skipped by this
    archive and it is not counted."""
    gap = 0
    for p in progress:
        for src in p.get("sources", ()):
            if src.get("startOffset") is None:
                continue
            start = _offsets(src.get("startOffset"))
            end = _offsets(src.get("endOffset"))
            span = 0
            for stream, last in end.items():
                first = start.get(stream)
                if first is not None:  # a stream new in this batch starts at its first message
                    span += last - first
                else:
                    span = -1
                    break
            if span >= 0:
                gap += max(span - int(src.get("numInputRows", 0)), 0)
    return gap


def _offsets(raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def run(spark: Any, args: argparse.Namespace) -> dict[str, int]:
    """One incremental run; returns ``{"rows": n, "skipped": m, "batches": b}``."""
    from pyspark.sql import functions as F

    out = os.path.abspath(args.to)
    reader = spark.readStream.format("jetmq").option("streams", args.stream)
    if args.url:
        reader = reader.option("url", args.url).options(**tls_options(args))
    else:
        reader = reader.option("path", os.path.abspath(args.path))
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    df = reader.load().withColumn("date", F.date_format("ts", "yyyy-MM-dd"))
    q = (
        df.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", os.path.join(out, "_checkpoint"))
        .partitionBy("date", "topic")
        .trigger(availableNow=True)
        .queryName(f"jetmq-archive-{args.stream}")
        .start()
    )
    q.awaitTermination()
    if q.exception() is not None:  # pragma: no cover - awaitTermination raised it already
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p.get("numInputRows") is not None]
    rows = sum(int(p["numInputRows"]) for p in progress)
    batches = sum(1 for p in progress if p["numInputRows"])
    return {"rows": rows, "skipped": skipped_sequences(progress), "batches": batches}
