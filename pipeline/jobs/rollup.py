"""``jetmq pipeline rollup``: per topic and time window, count/min/max/avg of the numeric
fields of JSON payloads.

Each run reads everything the stream holds (a batch read) and rewrites ``DIR`` (Parquet:
``topic, window_start, window_end, messages, corrupt`` and ``<field>_min/_max/_avg`` per
numeric field of ``--schema``), so every window is emitted and windows new data touched
are updated; windows whose messages retention removed keep only what is still stored.
Payloads that do not parse under the schema are counted per window (``corrupt``) and
kept, as Spark's JSON reader does, in a ``_corrupt`` column: ``DIR/_corrupt`` holds
``stream, seq, topic, ts, _corrupt`` of each. ``--publish TOPIC`` also publishes every
window as JSON to ``TOPIC`` through the broker at ``--url`` (the ``jetmq`` sink).
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Final

NUMERIC: Final = ("byte", "short", "integer", "long", "float", "double", "decimal")
_WINDOW = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_UNITS: Final = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", required=True, help="stream to roll up")
    p.add_argument(
        "--schema",
        required=True,
        metavar="DDL",
        help='DDL of the JSON payload, e.g. "temp double, hum int, unit string"',
    )
    p.add_argument("--window", default="1m", help="window length: 30s, 1m, 5m, 1h (default 1m)")
    p.add_argument("--to", required=True, metavar="DIR", help="Parquet output directory")
    p.add_argument("--path", default="./jetmq-data", metavar="DATA_DIR")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--publish", default=None, metavar="TOPIC", help="also publish each window")
    p.add_argument(
        "--url", default="mqtt://127.0.0.1:1883", help="broker for --publish (mqtt://host:port)"
    )


def window_duration(text: str) -> str:
    """``"1m"`` -> ``"1 minutes"`` (Spark's interval words); ValueError for anything else."""
    m = _WINDOW.match(text)
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"--window {text!r}: use a number and a unit, e.g. 30s, 1m, 5m, 1h")
    return f"{int(m.group(1))} {_UNITS[m.group(2)]}"


def parse_schema(ddl: str) -> Any:
    """The payload StructType (with ``_corrupt string`` added) and its numeric fields."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    try:
        st = _parse_datatype_string(ddl)
    except Exception as exc:
        raise ValueError(f"--schema {ddl!r} is not a Spark DDL schema: {exc}") from None
    if not isinstance(st, StructType) or not st.fields:
        raise ValueError(f"--schema {ddl!r}: give fields, e.g. 'temp double, hum int'")
    from pyspark.sql.types import StringType

    numeric = [f.name for f in st.fields if f.dataType.typeName() in NUMERIC]
    if not numeric:
        raise ValueError(f"--schema {ddl!r} has no numeric field to roll up")
    full = StructType([*st.fields, StructField("_corrupt", StringType())])
    return full, numeric


def run(spark: Any, args: argparse.Namespace) -> dict[str, int]:
    """One run; returns ``{"windows": n, "messages": m, "corrupt": c}``."""
    from pyspark.sql import functions as F

    duration = window_duration(args.window)
    schema, numeric = parse_schema(args.schema)
    out = os.path.abspath(args.to)
    raw = (
        spark.read.format("jetmq")
        .option("path", os.path.abspath(args.path))
        .option("streams", args.stream)
        .option("includeHeaders", "false")
        .load()
    )
    parsed = raw.select(
        "stream",
        "seq",
        "topic",
        "ts",
        F.from_json(
            F.col("payload").cast("string"),
            schema,
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"},
        ).alias("j"),
    ).select("stream", "seq", "topic", "ts", "j.*")
    parsed = parsed.cache()
    bad = F.col("_corrupt").isNotNull()
    aggs = [
        F.sum(F.when(bad, 0).otherwise(1)).alias("messages"),
        F.sum(F.when(bad, 1).otherwise(0)).alias("corrupt"),
    ]
    for name in numeric:
        good = F.when(~bad, F.col(name))
        aggs += [
            F.min(good).alias(f"{name}_min"),
            F.max(good).alias(f"{name}_max"),
            F.avg(good).alias(f"{name}_avg"),
        ]
    windows = (
        parsed.groupBy("topic", F.window("ts", duration).alias("w"))
        .agg(*aggs)
        .select(
            "topic",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "messages",
            "corrupt",
            *[f"{n}_{s}" for n in numeric for s in ("min", "max", "avg")],
        )
        .orderBy("topic", "window_start")
    )
    windows.write.mode("overwrite").parquet(out)
    corrupt = parsed.filter(bad).select("stream", "seq", "topic", "ts", "_corrupt")
    corrupt.write.mode("overwrite").parquet(os.path.join(out, "_corrupt"))
    written = spark.read.parquet(out)
    totals = written.agg(
        F.count(F.lit(1)).alias("w"), F.sum("messages").alias("m"), F.sum("corrupt").alias("c")
    ).first()
    if args.publish:
        (
            written.select(
                F.lit(args.publish).alias("topic"),
                F.to_json(F.struct(*written.columns)).alias("payload"),
            )
            .write.format("jetmq")
            .mode("append")
            .option("url", args.url)
            .save()
        )
    parsed.unpersist()
    return {
        "windows": int(totals.w or 0),
        "messages": int(totals.m or 0),
        "corrupt": int(totals.c or 0),
    }
